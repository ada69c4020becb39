"""`WebCache`: the two-level open-web cache, persisted on disk, so a rerun of the same questions costs nothing.

SuperLens keeps a two-layer cache in front of its web search: search requests -> result urls, and
url -> parsed page content. This is that cache on disk (`diskcache`, SQLite-backed; safe across threads and
processes), under one folder:

- level 1, `searches/`: (engine, normalised request parameters) -> the parsed results (urls, titles, snippets);
- level 2, `pages/`: url (fragment dropped) -> the parsed page (clean text and chunks, see web.webpage).

Failures are never cached: a search that raised or a page that could not be fetched is tried again next time.

    cache = WebCache("~/.cache/glasses-rag/web")
    hits = cache.search("google", {"q": "falcon 9 maker", "num": 5}, lambda: client.google(...))
    cache.stats()  # {"searches": {"hits": .., "misses": ..}, "pages": {...}}
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urldefrag

import diskcache

_MISSING = object()
DEFAULT_SIZE_LIMIT = 2**30  # bytes per level; diskcache evicts least-recently-stored entries beyond it


def search_key(engine: str, params: dict[str, Any]) -> str:
    """A stable key for one search request: the engine plus its parameters, whitespace-collapsed, sorted."""
    norm = {str(k): " ".join(str(v).split()) for k, v in params.items() if v is not None and v != ""}
    text = json.dumps({"engine": engine, **norm}, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def page_key(url: str) -> str:
    return urldefrag(url.strip())[0]


class _Level:
    def __init__(self, folder: Path, size_limit: int):
        self.store = diskcache.Cache(str(folder), size_limit=size_limit)
        self.hits = 0
        self.misses = 0
        self._lock = threading.Lock()

    def get_or_compute(self, key: str, compute: Callable[[], Any], keep: Callable[[Any], bool]) -> tuple[Any, bool]:
        value = self.store.get(key, default=_MISSING)
        with self._lock:
            if value is _MISSING:
                self.misses += 1
            else:
                self.hits += 1
        if value is not _MISSING:
            return value, True
        value = compute()  # exceptions propagate: nothing is stored
        if keep(value):
            self.store.set(key, value)
        return value, False

    def stats(self) -> dict[str, Any]:
        n = self.hits + self.misses
        return {"hits": self.hits, "misses": self.misses, "hit_rate": round(self.hits / n, 4) if n else 0.0,
                "entries": len(self.store)}


class WebCache:
    """Level 1 (search request -> results) and level 2 (url -> parsed page) on disk under `directory`."""

    def __init__(self, directory: str | Path, size_limit: int = DEFAULT_SIZE_LIMIT):
        self.directory = Path(directory).expanduser()
        self.directory.mkdir(parents=True, exist_ok=True)
        self.searches = _Level(self.directory / "searches", size_limit)
        self.pages = _Level(self.directory / "pages", size_limit)

    def search(self, engine: str, params: dict[str, Any], compute: Callable[[], Any]) -> tuple[Any, bool]:
        """(results, came from the cache). Only list/dict results are stored."""
        return self.searches.get_or_compute(search_key(engine, params), compute,
                                            lambda v: isinstance(v, (list, dict)))

    def page(self, url: str, compute: Callable[[], Any]) -> tuple[Any, bool]:
        """(parsed page, came from the cache). A page whose `error` is set is not stored (retried next time)."""
        return self.pages.get_or_compute(page_key(url), compute,
                                         lambda v: isinstance(v, dict) and not v.get("error"))

    def stats(self) -> dict[str, Any]:
        return {"directory": str(self.directory), "searches": self.searches.stats(), "pages": self.pages.stats()}

    def close(self) -> None:
        self.searches.store.close()
        self.pages.store.close()
