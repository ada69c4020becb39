from typing import Annotated

from pydantic import Field

from tools.base import Hit, ToolContext, ToolOutput
from tools.registry import SEARCH_BACKEND, tool

NO_MATCH = "no match in the image KG"  # the summary of a search that found nothing


def hits_from_image_results(results: list[dict]) -> list[Hit]:
    hits = []
    for r in results:
        for ent in r.get("entities") or []:
            attrs = ent.get("entity_attributes") or {}
            hits.append(
                Hit(
                    source="image_kg",
                    score=float(r.get("score", 0.0)),
                    url=r.get("url"),
                    entity_name=ent.get("entity_name"),
                    attributes=attrs,
                    snippet="; ".join(f"{k}: {v}" for k, v in attrs.items())[:1000],
                )
            )
    return hits


@tool(reaches={SEARCH_BACKEND}, tags={"finds_entity"}, writes={"evidence"})
def image_search(
    ctx: ToolContext, use_crop: bool = True, k: Annotated[int, Field(ge=1, le=200)] = 5, crop_only: bool = False
) -> ToolOutput:
    """Find the pictured entity in the image knowledge graph; returns entities with attributes and similarity scores.

    Args:
        use_crop: search with the detected object crop as well as the whole photo
        k: how many results per search
        crop_only: with use_crop, search with a detector's crop alone (the whole photo too when there is no crop,
            or when the crop is a heuristic stand-in rather than a detection)
    """
    if ctx.image is None:
        raise ValueError("this turn has no usable image to search with")
    search = ctx.resources.search
    crop = use_crop and ctx.crop is not None
    # a heuristic crop (saliency, OCR box) is a stand-in, not a detection of the object: the photo is searched too
    stand_in = crop and crop_only and ctx.crop is not None and ctx.crop.method.startswith("heuristic:")
    alone = crop and crop_only and not stand_in
    results = [] if alone else list(search.image_search(ctx.image, k=k))
    if crop:
        results += search.image_search(ctx.focus_image(), k=k)
    best: dict[str, Hit] = {}
    for h in hits_from_image_results(results):
        key = h.entity_name or h.url or ""
        if key not in best or h.score > best[key].score:
            best[key] = h
    hits = sorted(best.values(), key=lambda h: h.score, reverse=True)[:k]
    summary = ", ".join(f"{h.entity_name} ({h.score:.2f})" for h in hits) or NO_MATCH
    method = getattr(search, "name", "search") + (
        f"; crop_only not applied: the crop is a stand-in ({ctx.crop.method}), the whole photo searched too"
        if stand_in and ctx.crop is not None
        else "; the crop alone"
        if alone
        else ""
    )
    return ToolOutput(summary=summary, update={"evidence": hits}, method=method)
