"""The web page reader: fetch a page under the fetch policy, a byte bound and a total deadline, extract its main
text in a worker process under a time limit, split it into chunks.

SuperLens' web page reader "extracts and cleans the raw HTML" of retrieved pages before reranking. Here:
- fetching (`fetch`): http(s) only, through a guarded client (glasses_rag.web.guarded_http: every connection vetted
  by the fetch policy, one total deadline for connect, every redirect hop and every read, stopped when the turn ends);
  redirects followed hop by hop (at most `max_redirects`, each hop's scheme checked and its connection vetted);
  at most `max_bytes` read (the rest is never downloaded); only HTML / XHTML / plain-text replies;
- extraction (`read_page`): at most `max_html_bytes` of the body handed to trafilatura + pysbd
  (glasses_rag.web.page_text) in a worker process that is killed at `extract_timeout_s` (glasses_rag.web.extraction).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urljoin, urlsplit

import httpx
from pydantic import BaseModel, Field

from glasses_rag.web.config import WebConfig
from glasses_rag.web.extraction import ExtractionTimeout, Extractor
from glasses_rag.web.fetch_policy import RefusedURL
from glasses_rag.web.guarded_http import deadline, read_body
from glasses_rag.web.page_text import CHUNK_WORDS

USER_AGENT = "glasses-rag-reader/0.2"
TEXT_TYPES = ("text/html", "application/xhtml+xml", "text/plain")
REDIRECTS = (301, 302, 303, 307, 308)


class Page(BaseModel):
    """A parsed page; `error` is set (and text empty) when it could not be read."""

    url: str
    final_url: str | None = None
    title: str = ""
    text: str = ""
    chunks: list[str] = Field(default_factory=list)
    truncated: bool = Field(False, description="The download or the HTML handed to the extractor was cut at its bound.")
    method: str = "trafilatura+pysbd"
    error: str | None = None


class Fetched(BaseModel):
    body: bytes
    encoding: str
    final_url: str
    truncated: bool


def check_scheme(url: str) -> None:
    if urlsplit(url).scheme.lower() not in ("http", "https"):
        raise ValueError(f"not an http(s) url: {url[:200]}")


def fetch(url: str, client: httpx.Client, max_bytes: int, timeout_s: float, max_redirects: int = 5) -> Fetched:
    """The reply body (at most `max_bytes`), following redirects hop by hop, all within `timeout_s`. Raises
    ValueError (scheme, content type, too many redirects), RefusedURL (fetch policy), httpx errors (network,
    deadline) and glasses_rag.core.calls.Cancelled (the turn ended)."""
    with deadline(timeout_s):
        for _ in range(max_redirects + 1):
            check_scheme(url)
            with client.stream("GET", url, headers={"User-Agent": USER_AGENT}) as r:
                if r.status_code in REDIRECTS and r.headers.get("location"):
                    url = urljoin(str(r.url), r.headers["location"])
                    continue
                r.raise_for_status()
                ctype = r.headers.get("content-type", "").split(";")[0].strip().lower()
                if ctype and ctype not in TEXT_TYPES:
                    raise ValueError(f"not a web page ({ctype})")
                body, truncated = read_body(r, max_bytes)
                return Fetched(body=body, encoding=r.encoding or "utf-8", final_url=str(r.url), truncated=truncated)
    raise ValueError(f"more than {max_redirects} redirects")


def read_page(
    url: str, client: httpx.Client, extractor: Extractor, config: WebConfig, chunk_words: int = CHUNK_WORDS
) -> Page:
    """Fetch, extract and chunk one page. Failures come back as a Page with `error`; only the turn's end
    (glasses_rag.core.calls.Cancelled) is raised."""
    try:
        got = fetch(url, client, config.max_page_bytes, config.timeout_s, config.max_redirects)
    except RefusedURL as e:
        return Page(url=url, error=str(e)[:500])
    except (httpx.HTTPError, httpx.InvalidURL, ValueError, UnicodeError) as e:
        return Page(url=url, error=f"{type(e).__name__}: {e}"[:500])
    body = got.body[: config.max_html_bytes]
    truncated = got.truncated or len(got.body) > len(body)
    try:
        parsed = extractor.run(
            body.decode(got.encoding, errors="replace"), got.final_url, config.extract_timeout_s, chunk_words
        )
    except (ExtractionTimeout, LookupError, RuntimeError, OSError) as e:  # LookupError: an unknown encoding
        return Page(url=url, final_url=got.final_url, truncated=truncated, error=f"{type(e).__name__}: {e}"[:500])
    if parsed.get("error"):
        return Page(
            url=url, final_url=got.final_url, truncated=truncated, error=f"extraction failed: {parsed['error']}"
        )
    if not parsed.get("text"):
        return Page(
            url=url,
            final_url=got.final_url,
            title=parsed.get("title", ""),
            truncated=truncated,
            error="no main text found",
        )
    return Page(
        url=url,
        final_url=got.final_url,
        title=parsed["title"],
        text=parsed["text"],
        chunks=parsed["chunks"],
        truncated=truncated,
    )


def page_from_cache(value: Any) -> Page:
    return value if isinstance(value, Page) else Page.model_validate(value)
