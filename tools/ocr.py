from typing import Literal

from tools.base import ToolContext, ToolOutput
from tools.registry import tool


@tool(tags={"reads_text"}, writes={"ocr_text"})
def ocr(ctx: ToolContext, region: Literal["image", "crop"] = "image") -> ToolOutput:
    """Read the text visible in the photo (signs, labels, covers, screens) with rapidocr.

    Args:
        region: "image" for the whole photo, "crop" for the detected object only
    """
    from glasses_rag.models.ocr import OcrEngine

    if ctx.image is None:
        raise ValueError("this turn has no usable image to read")
    engine: OcrEngine = ctx.resources.get("ocr", OcrEngine)
    img = ctx.focus_image() if region == "crop" else ctx.image
    lines = engine.read(img)
    text = "\n".join(l.text for l in lines)
    summary = (
        f"read {len(lines)} text line(s): " + " | ".join(l.text for l in lines[:12])
        if lines
        else "no legible text found"
    )
    return ToolOutput(summary=summary, method=engine.name, update={"ocr_text": text})
