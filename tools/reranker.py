from typing import Annotated, Any

from pydantic import Field

from tools.base import Hit, Replace, ToolContext, ToolOutput, finite_score
from tools.registry import tool

IMAGE_AS_TEXT = "image side: the image search's matched names + the photo's text (stand-in for a multimodal reranker)"


def image_as_text(ctx: ToolContext) -> str:
    """What the photo shows, as text a text reranker can compare with: the names image search matched (best first)
    and the text read in the photo. A stand-in for scoring a passage against the image itself."""
    names = [
        h.entity_name or h.title or ""
        for h in sorted(ctx.evidence, key=lambda h: h.score, reverse=True)
        if h.source == "image_kg" or h.query is None
    ]
    parts = list(dict.fromkeys(n for n in names if n))[:3] + ([ctx.ocr_text] if ctx.ocr_text else [])
    return ". ".join(parts)[:1000]


IMAGE_ITSELF = "image side: the photo itself (a multimodal reranker, SuperGlasses Appendix D eq. 4)"


def _scores(
    model: Any, q: str, texts: list[str], image_text: str, image_weight: float, image: Any = None
) -> list[float]:
    on_question = [finite_score(float(s)) for s in model.score(q, texts)]
    if image_weight <= 0 or (image is None and not image_text):
        return on_question
    raw = model.score_image(image, texts) if image is not None else model.score(image_text, texts)
    on_image = [finite_score(float(s)) for s in raw]
    return [(1 - image_weight) * a + image_weight * b for a, b in zip(on_question, on_image)]


def _keep(
    evidence: list[Hit], scores: list[float], lam: float, dynamic: bool, min_score: float | None, mad_top: int
) -> list[tuple[Hit, float]]:
    from glasses_rag.models.reranker import filter_by_threshold

    # the median - lam*MAD cut over any number of items (one or two included: CRUISE eq. 5 has no lower bound)
    ranked = (
        filter_by_threshold(evidence, scores, lam, top=mad_top or None)
        if dynamic
        else sorted(zip(evidence, scores), key=lambda x: x[1], reverse=True)
    )
    return ranked if min_score is None else [(h, s) for h, s in ranked if s >= min_score]


def load_reranker(r: Any) -> Any:
    """The run's reranker (loaded once), on the device the run names (--reranker-device or the preset's; else the
    model backend's: glasses_rag.models.reranker.reranker_device)."""
    from glasses_rag.models.reranker import make_reranker, reranker_device

    device = getattr(r.paths, "reranker_device", None) or reranker_device(None)[0]
    return r.get("reranker", lambda: make_reranker(r.paths.reranker, r.text_embedder(), device=device))


def device_of(model: Any) -> str:
    """' on <device>' for a reranker model of its own ('' for the MiniLM fallback: the text embedder's)."""
    device = getattr(model, "device", None)
    return f" on {device}" if device else ""


@tool(tags={"reranks"}, writes={"evidence"})
def reranker(
    ctx: ToolContext,
    query: str = "",
    lam: Annotated[float, Field(ge=0, le=100, allow_inf_nan=False)] = 1.0,
    top_k: Annotated[int, Field(ge=1, le=100)] = 5,
    min_score: Annotated[float | None, Field(ge=-1, le=1, allow_inf_nan=False)] = None,
    image_weight: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] = 0.0,
    dynamic: bool = True,
    mad_top: Annotated[int, Field(ge=0, le=100)] = 0,
) -> ToolOutput:
    """Rerank the evidence gathered so far against the question and drop weak items (dynamic threshold median -
    lam*MAD).

    Args:
        query: what the evidence should answer (default: the turn's question)
        lam: threshold width; larger keeps more items
        top_k: keep at most this many items
        min_score: also drop items scoring under this (a fixed floor; none by default)
        image_weight: weight of the item's relevance to the image, the rest going to the query (0: query only)
        dynamic: apply the median - lam*MAD cut (false: only min_score and top_k)
        mad_top: take the median and MAD over this many best scores (0: all of them)
    """
    if not ctx.evidence:
        return ToolOutput(summary="nothing to rerank yet", method="none")
    q = query.strip() or ctx.question
    model = load_reranker(ctx.resources)
    # a multimodal reranker compares each item with the photo itself; a text one with the photo's stand-in text
    image = ctx.image if image_weight > 0 and callable(getattr(model, "score_image", None)) else None
    image_text = image_as_text(ctx) if image_weight > 0 and image is None else ""
    scores = _scores(model, q, [h.text()[:2000] for h in ctx.evidence], image_text, image_weight, image)
    # a fixed floor is a point on a calibrated relevance scale (a cross-encoder's); cosine scores have none
    floor = min_score if getattr(model, "calibrated", False) else None
    ranked = _keep(ctx.evidence, scores, lam, dynamic, floor, mad_top)
    kept = [h.model_copy(update={"rerank_score": s}) for h, s in ranked][: max(1, top_k)]
    cut = min((s for _, s in ranked), default=floor if floor is not None else 0.0)
    summary = f"kept {len(kept)}/{len(scores)} (threshold {cut:.3f}): " + "; ".join(
        f"{h.entity_name or h.title} ({h.rerank_score:.2f})" for h in kept
    )
    side = IMAGE_ITSELF if image is not None else IMAGE_AS_TEXT if image_text else ""
    method = f"{model.name}{device_of(model)}" + (f" + {side} (weight {image_weight:g})" if side else "")
    if min_score is not None and floor is None:
        method += f"; min_score {min_score:g} not applied (its scores are not calibrated relevance)"
    return ToolOutput(summary=summary, update={"evidence": Replace(kept)}, method=method, keywords=q)
