"""The web page reader: fetch a page (bounded size and time), extract its main text, split it into chunks.

SuperLens' web page reader "extracts and cleans the raw HTML" of retrieved pages before reranking. Here:
- fetching: httpx, http(s) only, redirects followed, at most `max_bytes` read (the rest is never downloaded),
  only HTML / XHTML / plain-text replies, a timeout on every request;
- extraction: trafilatura (main content without navigation, footers and comments; tables kept);
- chunking: sentences from pysbd (a rule-based sentence boundary detector that knows abbreviations and
  decimals), packed into chunks of at most `chunk_words` words; a paragraph never shares a chunk with the
  next one unless both fit.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

import httpx
from pydantic import BaseModel, Field

MAX_PAGE_BYTES = 2_000_000
MAX_TEXT_CHARS = 200_000  # text kept per page: a huge page is cut before sentence splitting
CHUNK_WORDS = 120
USER_AGENT = "glasses-rag-reader/0.1"
TEXT_TYPES = ("text/html", "application/xhtml+xml", "text/plain")


class Page(BaseModel):
    """A parsed page; `error` is set (and text empty) when it could not be read."""

    url: str
    final_url: str | None = None
    title: str = ""
    text: str = ""
    chunks: list[str] = Field(default_factory=list)
    truncated: bool = Field(False, description="The download stopped at the size bound.")
    method: str = "trafilatura+pysbd"
    error: str | None = None


@lru_cache(maxsize=1)
def _segmenter():
    import pysbd

    return pysbd.Segmenter(language="en", clean=False)


def sentences(text: str) -> list[str]:
    """Sentences of one paragraph (pysbd)."""
    text = " ".join(text.split())
    if not text:
        return []
    return [s.strip() for s in _segmenter().segment(text) if s.strip()]


def chunk_text(text: str, chunk_words: int = CHUNK_WORDS) -> list[str]:
    """Paragraphs (lines) -> sentences -> chunks of at most `chunk_words` words (a longer sentence is a chunk
    of its own, cut at the bound)."""
    chunks: list[str] = []
    cur: list[str] = []
    n = 0

    def flush() -> None:
        nonlocal cur, n
        if cur:
            chunks.append(" ".join(cur))
        cur, n = [], 0

    for para in text.split("\n"):
        for sent in sentences(para):
            words = sent.split()
            if len(words) > chunk_words:
                flush()
                for i in range(0, len(words), chunk_words):
                    chunks.append(" ".join(words[i:i + chunk_words]))
                continue
            if n + len(words) > chunk_words:
                flush()
            cur.append(sent)
            n += len(words)
    flush()
    return chunks


def extract(html: str, url: str | None = None) -> tuple[str, str]:
    """(title, main text) of an HTML document with trafilatura; repeated lines are dropped (trafilatura can
    emit a short document twice)."""
    import trafilatura

    text = trafilatura.extract(html, url=url, include_comments=False, include_tables=True, output_format="txt") or ""
    meta = trafilatura.extract_metadata(html, default_url=url)
    title = (getattr(meta, "title", None) or "") if meta is not None else ""
    seen: set[str] = set()
    lines = []
    for line in text.splitlines():
        key = line.strip()
        if key and key not in seen:
            seen.add(key)
            lines.append(key)
    return " ".join(title.split()), "\n".join(lines)[:MAX_TEXT_CHARS]


def fetch(url: str, client: httpx.Client, max_bytes: int = MAX_PAGE_BYTES) -> tuple[str, str, bool]:
    """(text of the reply, final url, truncated). Raises ValueError for a scheme or content type it will not read
    and httpx errors for network failures."""
    if not re.match(r"^https?://", url, re.I):
        raise ValueError(f"not an http(s) url: {url[:200]}")
    with client.stream("GET", url, follow_redirects=True, headers={"User-Agent": USER_AGENT}) as r:
        r.raise_for_status()
        ctype = r.headers.get("content-type", "").split(";")[0].strip().lower()
        if ctype and ctype not in TEXT_TYPES:
            raise ValueError(f"not a web page ({ctype})")
        buf = bytearray()
        truncated = False
        for part in r.iter_bytes():
            buf += part
            if len(buf) >= max_bytes:
                truncated = True
                del buf[max_bytes:]
                break
        encoding = r.encoding or "utf-8"
        return bytes(buf).decode(encoding, errors="replace"), str(r.url), truncated


def read_page(url: str, client: httpx.Client, max_bytes: int = MAX_PAGE_BYTES, chunk_words: int = CHUNK_WORDS) -> Page:
    """Fetch, extract and chunk one page. Never raises: failures come back as a Page with `error`."""
    try:
        raw, final, truncated = fetch(url, client, max_bytes)
    except (httpx.HTTPError, ValueError, UnicodeError) as e:
        return Page(url=url, error=f"{type(e).__name__}: {e}"[:500])
    if raw.lstrip()[:1] == "<":
        title, text = extract(raw, final)
    else:  # plain text
        title, text = "", "\n".join(line.strip() for line in raw.splitlines() if line.strip())[:MAX_TEXT_CHARS]
    if not text:
        return Page(url=url, final_url=final, title=title, truncated=truncated, error="no main text found")
    return Page(url=url, final_url=final, title=title, text=text, chunks=chunk_text(text, chunk_words),
                truncated=truncated)


def page_from_cache(value: Any) -> Page:
    return value if isinstance(value, Page) else Page.model_validate(value)
