from typing import Annotated

from pydantic import Field

from tools.base import Hit, ToolContext, ToolOutput, search_query
from tools.registry import SEARCH_BACKEND, tool

NO_PAGES = "no pages found"  # the summary of a search that found nothing


@tool(tasks={2, 3}, reaches={SEARCH_BACKEND}, tags={"searches_web"}, writes={"evidence"})
def web_search(
    ctx: ToolContext, query: str, k: Annotated[int, Field(ge=1, le=200)] = 5, full_pages: bool = True
) -> ToolOutput:
    """Search the web for pages about the query; returns page titles, snippets, urls and scores.

    Args:
        query: search keywords, e.g. the entity name plus what is asked about it
        k: how many pages
        full_pages: attach each page's whole text when the search backend has it (false: the search's snippets
            only, as CRAG-MM's baseline reads them)
    """
    query = search_query(query)
    search = ctx.resources.search
    get_page = getattr(search, "get_page", None) if full_pages else None
    hits = []
    for r in search.web_search(query, k=k):
        url = r.get("page_url")
        content = get_page(url) if get_page and url else None
        hits.append(
            Hit(
                source="web",
                score=float(r.get("score", 0.0)),
                url=url,
                title=r.get("page_name"),
                snippet=r.get("page_snippet") or "",
                content=content,
                query=query,
            )
        )
    summary = "; ".join(f"{h.title} ({h.score:.2f})" for h in hits) or NO_PAGES
    method = getattr(search, "name", "search") + ("" if full_pages else "; snippets only")
    return ToolOutput(summary=summary, update={"evidence": hits}, keywords=query, method=method)
