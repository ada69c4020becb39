from typing import Annotated

from pydantic import Field

from glasses_rag.web.config import missing_lens
from tools.base import Hit, ToolContext, ToolOutput
from tools.google_search import rank_score, with_notes
from tools.registry import OPEN_WEB, tool


@tool(reaches={OPEN_WEB}, tags={"finds_entity"}, writes={"evidence"}, requires=missing_lens)
def google_lens(
    ctx: ToolContext, use_crop: bool = True, refine: str = "", k: Annotated[int, Field(ge=1, le=20)] = 5
) -> ToolOutput:
    """Reverse image search on the open web (Google Lens, through a SerpApi-compatible API): names the pictured entity
    and finds pages showing it.

    Args:
        use_crop: search with the detected object's crop when a detector found one, else the whole photo (a
            heuristic crop, made when nothing was detected, is not searched)
        refine: optional words that narrow the image search (Google Lens `q`)
        k: how many visual matches
    """
    from glasses_rag.web.open_web import get_open_web

    if ctx.image is None:
        raise ValueError("this turn has no usable image to search with")
    # a heuristic crop (saliency, OCR box) stands in when no detector found the object: the whole photo is searched
    stand_in = use_crop and ctx.crop is not None and ctx.crop.method.startswith("heuristic:")
    image = ctx.focus_image() if use_crop and not stand_in else ctx.image
    refine = " ".join(refine.split())[:256]
    reply, cached = get_open_web().lens_search(image, k=k, refine=refine)
    hits = []
    for r in reply.results:
        if r.get("kind") == "entity":  # Google's knowledge-graph entity for the image
            hits.append(
                Hit(
                    source="image_kg",
                    score=rank_score(0),
                    url=r.get("url"),
                    entity_name=r.get("title"),
                    attributes={"description": r["snippet"]} if r.get("snippet") else None,
                    snippet=r.get("snippet") or "",
                )
            )
        else:
            hits.append(
                Hit(
                    source="web",
                    score=rank_score(r.get("position") or 0),
                    url=r.get("url"),
                    title=r.get("title"),
                    snippet=" - ".join(x for x in (r.get("title"), r.get("source")) if x),
                )
            )
    summary = ("; ".join(h.entity_name or h.title or "" for h in hits) or "no visual match") + with_notes(reply.notes)
    return ToolOutput(
        summary=summary,
        update={"evidence": hits},
        keywords=refine or None,
        method="serpapi:google_lens"
        + (" (cached)" if cached else "")
        + (
            f"; the whole photo: the crop is a stand-in ({ctx.crop.method}), not a detection"
            if stand_in and ctx.crop
            else ""
        ),
    )
