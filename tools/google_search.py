from typing import Annotated

from pydantic import Field

from glasses_rag.web.config import missing_key
from tools.base import Hit, ToolContext, ToolOutput, search_query
from tools.registry import OPEN_WEB, tool


def with_notes(notes: list[str]) -> str:
    """The skipped-item notes of a search reply, for the tool's summary (empty when there are none)."""
    return f" (reply notes: {'; '.join(notes[:5])}{'; ...' if len(notes) > 5 else ''})" if notes else ""


def rank_score(position: int) -> float:
    """SerpApi gives ranks, not similarities: the score of a result is 1 / rank (an answer box or knowledge-graph
    entry, rank 0, scores 1)."""
    return round(1.0 / max(1, position), 4)


@tool(tasks={2, 3}, reaches={OPEN_WEB}, tags={"searches_web"}, writes={"evidence"}, requires=missing_key)
def google_search(ctx: ToolContext, query: str, k: Annotated[int, Field(ge=1, le=20)] = 5) -> ToolOutput:
    """Search the open web (Google, through a SerpApi-compatible API); returns page titles, snippets and urls, best
    first.

    Args:
        query: search keywords, e.g. the entity name plus what is asked about it
        k: how many pages
    """
    from glasses_rag.web.open_web import get_open_web

    query = search_query(query)
    web = get_open_web()
    reply, cached = web.web_search(query, k=k)
    hits = [
        Hit(
            source="web",
            score=rank_score(r.get("position") or 0),
            url=r.get("url"),
            title=r.get("title"),
            snippet=r.get("snippet") or "",
            query=query,
        )
        for r in reply.results
    ]
    summary = "; ".join([f"{h.title} <{h.url}>" for h in hits[:k]] or ["no pages found"]) + with_notes(reply.notes)
    return ToolOutput(
        summary=summary,
        update={"evidence": hits},
        keywords=query,
        method="serpapi:google" + (" (cached)" if cached else ""),
    )
