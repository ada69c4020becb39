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
MAX_PAGES = 50  # pages one call reads, at most (the work stays bounded when a preset reads every page found)
MAX_PASSAGES = 200  # passages one page gives, at most, when every passage is kept (chunks_per_page 0)


def _terms(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _STOP}


def overlap(query: str, chunk: str) -> float:
    """Share of the query's content words found in the chunk (0..1)."""
    q = _terms(query)
    return len(q & _terms(chunk)) / len(q) if q else 0.0


def unread_urls(ctx: ToolContext) -> list[str]:
    """The web pages found so far and not read yet, best-scored first."""
    read = {h.url for h in ctx.evidence if h.source == "web" and h.content}
    urls: list[str] = []
    for h in sorted((h for h in ctx.evidence if h.source == "web" and h.url), key=lambda h: h.score, reverse=True):
        if h.url and h.url not in read and h.url not in urls:
            urls.append(h.url)
    return urls


def passages(chunks: list[str], q: str, per_page: int) -> list[str]:
    """The page's passages: the `per_page` best by word overlap with the query, or (0) every one in page order."""
    if per_page == 0:
        return chunks[:MAX_PASSAGES]
    return sorted(chunks, key=lambda c: overlap(q, c), reverse=True)[:per_page]


@tool(tasks={2, 3}, reaches={OPEN_WEB}, tags={"reads_page"}, writes={"evidence"})
def read_webpage(
    ctx: ToolContext,
    query: str = "",
    max_pages: Annotated[int, Field(ge=1, le=MAX_PAGES)] = 3,
    chunks_per_page: Annotated[int, Field(ge=0, le=MAX_PASSAGES)] = 3,
) -> ToolOutput:
    """Open the best web pages found so far, extract their main text and keep the passages that best match the query.

    Args:
        query: what the passages should answer (default: the turn's question)
        max_pages: how many pages to read, best-scored first
        chunks_per_page: passages kept per page, best word overlap with the query first; 0 keeps every passage
            (up to 200 per page) in page order, unfiltered, for a reranker or an answer step to judge
    """
    from glasses_rag.web.open_web import get_open_web

    q = query.strip() or ctx.question
    urls = unread_urls(ctx)
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
            for c in passages(page.chunks, q, chunks_per_page)
        ]
        notes.append(f"{url}: {len(page.chunks)} passages")
    kept = (
        f"every passage in page order (at most {MAX_PASSAGES} a page), unfiltered"
        if chunks_per_page == 0
        else f"{chunks_per_page} passage(s) a page ranked by word overlap"
    )
    return ToolOutput(
        summary="; ".join(notes),
        update={"evidence": hits},
        keywords=q,
        method=f"trafilatura+pysbd, {kept}; {min(len(urls), max_pages)} of {len(urls)} unread page(s) read "
        f"({from_cache} from cache)",
    )
