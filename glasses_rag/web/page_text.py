"""A page's text: main-content extraction (trafilatura) and sentence chunks (pysbd). Pure CPU work, run in the
extraction worker process (glasses_rag.web.extraction), never in a turn's thread.

- extraction: trafilatura (main content without navigation, footers and comments; tables kept);
- chunking: sentences from pysbd (a rule-based sentence boundary detector that knows abbreviations and
  decimals), packed into chunks of at most `chunk_words` words; a paragraph never shares a chunk with the
  next one unless both fit.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

CONTROL = dict.fromkeys(c for c in range(32) if chr(c) not in "\t\n\r")  # C0 controls (NUL, ...) are never text
MAX_TEXT_CHARS = 200_000  # text kept per page: a huge page is cut before sentence splitting
CHUNK_WORDS = 120


@lru_cache(maxsize=1)
def _segmenter():
    import pysbd

    return pysbd.Segmenter(language="en", clean=False)


def paragraph_sentences(text: str) -> list[str]:
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
        for sent in paragraph_sentences(para):
            words = sent.split()
            if len(words) > chunk_words:
                flush()
                for i in range(0, len(words), chunk_words):
                    chunks.append(" ".join(words[i : i + chunk_words]))
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


def page_text(body: str, url: str | None = None, chunk_words: int = CHUNK_WORDS) -> dict[str, Any]:
    """{title, text, chunks} of a reply body: HTML through trafilatura, anything else as plain text lines."""
    body = body.translate(CONTROL)
    if body.lstrip()[:1] == "<":
        title, text = extract(body, url)
    else:
        title, text = "", "\n".join(line.strip() for line in body.splitlines() if line.strip())[:MAX_TEXT_CHARS]
    return {"title": title, "text": text, "chunks": chunk_text(text, chunk_words) if text else []}
