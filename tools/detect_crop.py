from glasses_rag.text import nlp
from tools.base import ToolContext, ToolOutput
from tools.registry import tool


@tool(tags={"locates_object"}, writes={"crop"})
def detect_crop(ctx: ToolContext, target: str = "the main object") -> ToolOutput:
    """Find the object the question is about and crop to it, so later searches look at that object only.

    With a local GroundingDINO/OWLv2 folder configured this is zero-shot detection of `target`;
    otherwise a named heuristic: the OCR text region for text-like targets, else the most salient region.

    Args:
        target: a short noun phrase naming the object, e.g. "the bottle" or "the street sign"
    """
    from glasses_rag.models.detector import make_detector, ocr_box_crop, saliency_crop
    from glasses_rag.models.ocr import OcrEngine

    if ctx.image is None:
        raise ValueError("this turn has no usable image to crop")
    r = ctx.resources
    detector = r.get("detector", lambda: make_detector(r.paths.detector))
    box = None
    if detector is not None:
        boxes = detector.detect(ctx.image, [target])
        box = boxes[0] if boxes else None
    if box is None and (nlp.asks_about_text(target) or nlp.asks_about_text(ctx.question)):
        lines = r.get("ocr", OcrEngine).read(ctx.image)
        if lines:
            box = ocr_box_crop(ctx.image, [l.box for l in lines])
    if box is None:
        box = saliency_crop(ctx.image)
    w, h = ctx.image.size
    box.label = box.label or target
    summary = f"{box.label} at ({box.x0},{box.y0})-({box.x1},{box.y1}) of {w}x{h}, score {box.score:.2f}"
    return ToolOutput(summary=summary, update={"crop": box}, method=box.method)
