import re
from typing import Annotated

from pydantic import Field

from tools.base import Hit, ToolContext, ToolOutput
from tools.registry import OPEN_WEB, tool

_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset(
    "a an the of in on at to for is are was were be by and or what which who when where how this that "
    "it its does do did with from as".split()
)


def _terms(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _STOP}


def overlap(query: str, chunk: str) -> float:
    """Share of the query's content words found in the chunk (0..1)."""
    q = _terms(query)
    return len(q & _terms(chunk)) / len(q) if q else 0.0


@tool(tasks={2, 3}, reaches={OPEN_WEB}, tags={"reads_page"}, writes={"evidence"})
def read_webpage(
    ctx: ToolContext,
    query: str = "",
    max_pages: Annotated[int, Field(ge=1, le=10)] = 3,
    chunks_per_page: Annotated[int, Field(ge=1, le=10)] = 3,
) -> ToolOutput:
    """Open the best web pages found so far, extract their main text and keep the passages that best match the query.

    Args:
        query: what the passages should answer (default: the turn's question)
        max_pages: how many pages to read, best-scored first
        chunks_per_page: passages kept per page
    """
    from glasses_rag.web.open_web import get_open_web

    q = query.strip() or ctx.question
    read = {h.url for h in ctx.evidence if h.source == "web" and h.content}
    urls: list[str] = []
    for h in sorted((h for h in ctx.evidence if h.source == "web" and h.url), key=lambda h: h.score, reverse=True):
        if h.url and h.url not in read and h.url not in urls:
            urls.append(h.url)
    if not urls:
        return ToolOutput(summary="no unread web pages in the evidence", method="none")
    web = get_open_web()
    hits: list[Hit] = []
    notes: list[str] = []
    from_cache = 0
    for url in urls[:max_pages]:
        page, cached = web.read(url)
        from_cache += cached
        if page.error:
            notes.append(f"{url}: {page.error}")
            continue
        ranked = sorted(page.chunks, key=lambda c: overlap(q, c), reverse=True)[:chunks_per_page]
        hits += [
            Hit(
                source="web",
                score=round(overlap(q, c), 4),
                url=url,
                title=page.title or None,
                snippet=c[:300],
                content=c,
                query=q,
            )
            for c in ranked
        ]
        notes.append(f"{url}: {len(page.chunks)} passages")
    return ToolOutput(
        summary="; ".join(notes),
        update={"evidence": hits},
        keywords=q,
        method=f"trafilatura+pysbd, passages ranked by word overlap ({from_cache} page(s) from cache)",
    )
