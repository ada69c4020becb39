"""`CachedSearch`: a thread-safe, bounded two-level LRU cache in front of any SearchBackend.

Level 1 caches search results:
* web search:   key = (normalised query, k); the query is whitespace-collapsed (and case-folded
  only with `casefold=True`, for backends known to be case-insensitive);
* image search: key = (hash of the image's bytes, k); a PIL image is hashed over its mode, size and
  pixel bytes, a numpy array over dtype, shape and bytes, raw bytes as they are, a path over the
  file's bytes. Equal pixels give a hit whatever object carries them. A photo loaded by
  glasses_rag.core.images (registered with glasses_rag.core.hashing.remember_key) is keyed by its source bytes and
  transforms instead: the same photo loaded again hits without its pixels being hashed.

Level 2 caches `get_page(url)` -> parsed page content, offered only when the wrapped backend has
`get_page` (so `getattr(cached, "get_page", None)` behaves exactly as it does on the backend).

Results are deep-copied into and out of the cache, so a caller mutating a result never changes what
the next caller gets; a cached backend returns the same values as the uncached one. Exceptions are
never cached (the next call retries), nor are results that are not lists (junk is passed through as
is, uncached). Every other attribute (`get_entity`, `warm_up`, ...) is forwarded to the backend.

    search = CachedSearch(LocalSearchIndex(...), max_entries=2048)
    search.web_search("falcon 9 engines", k=5)
    search.stats()  # {'web': {'hits': .., 'misses': .., 'hit_rate': ..}, 'image': {..}, 'page': {..}, ...}
"""

from __future__ import annotations

import copy
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

from glasses_rag.core.hashing import cache_key, image_key  # noqa: F401 - image_key re-exported

_MISSING = object()


def _copy(value: Any) -> Any:
    """A deep copy, fast for the JSON-like dicts/lists/scalars search backends return."""
    t = type(value)
    if t is dict:
        return {k: _copy(v) for k, v in value.items()}
    if t is list:
        return [_copy(v) for v in value]
    if value is None or t in (str, int, float, bool):
        return value
    return copy.deepcopy(value)


def normalize_query(query: Any, casefold: bool = False) -> str:
    q = " ".join(str(query).split())
    return q.casefold() if casefold else q


class LRUCache:
    """A bounded, thread-safe LRU map with hit/miss counters."""

    def __init__(self, max_entries: int):
        if max_entries < 0:
            raise ValueError("max_entries must be >= 0")
        self.max_entries = int(max_entries)
        self._data: OrderedDict[Hashable, Any] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        self.evictions = 0
        self.uncacheable = 0

    def get(self, key: Hashable) -> Any:
        with self._lock:
            value = self._data.get(key, _MISSING)
            if value is _MISSING:
                self.misses += 1
            else:
                self.hits += 1
                self._data.move_to_end(key)
            return value

    def put(self, key: Hashable, value: Any) -> None:
        if self.max_entries == 0:
            return
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.max_entries:
                self._data.popitem(last=False)
                self.evictions += 1

    def miss_uncacheable(self) -> None:
        with self._lock:
            self.misses += 1
            self.uncacheable += 1

    def clear(self) -> None:
        with self._lock:
            self._data.clear()

    def __len__(self) -> int:
        return len(self._data)

    def stats(self) -> dict[str, Any]:
        with self._lock:
            n = self.hits + self.misses
            return {
                "hits": self.hits,
                "misses": self.misses,
                "hit_rate": round(self.hits / n, 4) if n else 0.0,
                "size": len(self._data),
                "max_entries": self.max_entries,
                "evictions": self.evictions,
                "uncacheable": self.uncacheable,
            }

    def reset_stats(self) -> None:
        with self._lock:
            self.hits = self.misses = self.evictions = self.uncacheable = 0


class CachedSearch:
    """Wraps any SearchBackend (`image_search`, `web_search`, optional `get_page`) with a two-level LRU cache.

    max_entries: bound of each result cache (web and image); max_pages: bound of the page cache
    (default: max_entries). casefold: also fold case when normalising web queries (only for
    case-insensitive backends; off by default so results stay identical to the backend's).
    """

    def __init__(self, backend: Any, max_entries: int = 1024, max_pages: int | None = None, casefold: bool = False):
        if isinstance(backend, CachedSearch):
            backend = backend.backend
        self.backend: Any = backend
        self.casefold = casefold
        self.web_cache = LRUCache(max_entries)
        self.image_cache = LRUCache(max_entries)
        self.page_cache = LRUCache(max_entries if max_pages is None else max_pages)
        if callable(getattr(backend, "get_page", None)):
            self.get_page = self._get_page  # only offered when the backend has it

    # -- naming / forwarding --------------------------------------------------------------------

    @property
    def name(self) -> str:
        return f"cached({getattr(self.backend, 'name', type(self.backend).__name__)})"

    def __getattr__(self, item: str) -> Any:
        # only called for attributes not found on the wrapper: get_entity, warm_up, ...
        if item.startswith("__") or item in ("backend", "get_page"):
            raise AttributeError(item)
        return getattr(self.backend, item)

    def __repr__(self) -> str:
        return f"CachedSearch({self.backend!r})"

    # -- the cache ------------------------------------------------------------------------------

    @staticmethod
    def _lookup(cache: LRUCache, key: Hashable | None, compute: Callable[[], Any]) -> Any:
        if key is None:
            cache.miss_uncacheable()
            return compute()
        value = cache.get(key)
        if value is not _MISSING:
            return _copy(value)
        result = compute()  # exceptions propagate and are not cached
        if isinstance(result, tuple):
            result = list(result)
        if isinstance(result, list):
            cache.put(key, _copy(result))
        return result

    @staticmethod
    def _k(k: Any) -> Any:
        try:
            return int(k)
        except (TypeError, ValueError):
            return repr(k)

    def web_search(self, query: str, k: int = 5) -> list[dict[str, Any]]:
        key = None
        if isinstance(query, str):
            key = ("web", normalize_query(query, self.casefold), self._k(k))
        return self._lookup(self.web_cache, key, lambda: self.backend.web_search(query, k=k))

    def image_search(self, image: Any, k: int = 5) -> list[dict[str, Any]]:
        ik = cache_key(image)  # a loaded photo: its source-byte key, not a hash of its 3.7 MB of pixels
        key = None if ik is None else ("image", ik, self._k(k))
        return self._lookup(self.image_cache, key, lambda: self.backend.image_search(image, k=k))

    def _get_page(self, url: str) -> str | None:
        if not isinstance(url, str):
            self.page_cache.miss_uncacheable()
            return self.backend.get_page(url)
        value = self.page_cache.get(url)
        if value is not _MISSING:
            return _copy(value)
        page = self.backend.get_page(url)
        if page is None or isinstance(page, (str, dict)):
            self.page_cache.put(url, _copy(page))
        return page

    # -- reporting ------------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """Hit/miss counters per level (`web`, `image` = level 1, `page` = level 2) and overall."""
        web, image, page = self.web_cache.stats(), self.image_cache.stats(), self.page_cache.stats()
        l1_h, l1_m = web["hits"] + image["hits"], web["misses"] + image["misses"]
        h, m = l1_h + page["hits"], l1_m + page["misses"]
        return {
            "web": web,
            "image": image,
            "page": page,
            "results": {
                "hits": l1_h,
                "misses": l1_m,
                "hit_rate": round(l1_h / (l1_h + l1_m), 4) if l1_h + l1_m else 0.0,
            },
            "total": {"hits": h, "misses": m, "hit_rate": round(h / (h + m), 4) if h + m else 0.0},
        }

    def reset_stats(self) -> None:
        for c in (self.web_cache, self.image_cache, self.page_cache):
            c.reset_stats()

    def clear(self) -> None:
        """Drops every cached entry (the counters stay)."""
        for c in (self.web_cache, self.image_cache, self.page_cache):
            c.clear()
