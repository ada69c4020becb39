"""Open-web search for SuperGlasses runs, as SuperLens does it: SerpApi Google + Google Lens, a page reader, and the
two-level disk cache in front of all of them.

Configured by `WebConfig` (glasses_rag.web.config), from the environment by default (read when first used;
`reset_open_web()` re-reads it); docs/open-web.md lists every variable. Two HTTP clients: one for the
operator-configured SerpApi server, one for URLs taken from search results, whose every connection the fetch policy vets
(glasses_rag.web.fetch_policy). Both have a total deadline per request and stop when the turn ends
(glasses_rag.web.guarded_http); text extraction runs
in worker processes killed at their deadline (glasses_rag.web.extraction).
"""

from __future__ import annotations

import threading
from typing import Any

from glasses_rag.core.hashing import image_key
from glasses_rag.web.config import WebConfig
from glasses_rag.web.extraction import Extractor
from glasses_rag.web.fetch_policy import FetchPolicy, Resolver, system_resolver
from glasses_rag.web.guarded_http import Connector, guarded_client, tcp_connect
from glasses_rag.web.lens_images import publish_image
from glasses_rag.web.serpapi import SearchResults, SerpApiClient, SerpApiError, lens_results, web_results
from glasses_rag.web.web_cache import WebCache
from glasses_rag.web.webpage import USER_AGENT, Page, page_from_cache, read_page

OpenWebConfig = WebConfig  # the name earlier versions used


class OpenWeb:
    """What the open-web tools call; every request goes through the disk cache first."""

    def __init__(
        self,
        config: WebConfig | None = None,
        *,
        resolver: Resolver = system_resolver,
        connector: Connector = tcp_connect,
    ):
        self.config = c = config or WebConfig.from_env()
        self.policy = FetchPolicy.from_allow(c.allow)
        self.pages_http = guarded_client(
            self.policy,
            timeout_s=c.timeout_s,
            resolver=resolver,
            connector=connector,
            headers={"User-Agent": USER_AGENT},
        )
        self.serp = SerpApiClient(
            c.serpapi_base_url,
            key_env=c.key_env,
            timeout_s=c.timeout_s,
            max_retries=c.max_retries,
            max_bytes=c.serp_max_bytes,
        )
        self.extractor = Extractor(c.extract_workers, c.extract_memory_bytes)
        self.cache = WebCache(c.cache_dir, c.cache_max_bytes, c.cache_max_entry_bytes)

    @property
    def name(self) -> str:
        return f"serpapi({self.serp.base_url})"

    def web_search(self, query: str, k: int = 5) -> tuple[SearchResults, bool]:
        """(results and notes, from cache) for a Google web search."""
        c = self.config
        params = {"q": query, "num": k, "hl": c.hl, "gl": c.gl}
        value, cached = self.cache.search(
            "google",
            params,
            lambda: web_results(self.serp.google(query, num=k, hl=c.hl, gl=c.gl), k, c.serp_max_items).model_dump(),
        )
        return SearchResults.model_validate(value), cached

    def lens_search(self, image: Any, k: int = 5, refine: str = "") -> tuple[SearchResults, bool]:
        """(results and notes, from cache) for a Google Lens search of a PIL image; cached by the image's pixels."""
        key = image_key(image)
        if key is None:
            raise SerpApiError("the image cannot be hashed for the search cache")
        c = self.config
        params = {"image": key, "k": k, "q": refine, "hl": c.hl, "country": c.gl}
        value, cached = self.cache.search(
            "google_lens",
            params,
            lambda: lens_results(
                self.serp.google_lens(self.publish_image(image), q=refine or None, hl=c.hl, country=c.gl),
                k,
                c.serp_max_items,
            ).model_dump(),
        )
        return SearchResults.model_validate(value), cached

    def publish_image(self, image: Any) -> str:
        """A public URL for the image: written as JPEG to GLASSES_IMAGE_DIR, served at GLASSES_IMAGE_BASE_URL."""
        c = self.config
        if c.image_dir is None or not c.image_base_url:
            raise SerpApiError(
                "Google Lens searches a public image URL: set GLASSES_IMAGE_DIR to a folder served "
                "at GLASSES_IMAGE_BASE_URL"
            )
        return publish_image(image, c.image_dir, c.image_base_url, c.image_max_age_s, c.image_dir_max_bytes)

    def read(self, url: str) -> tuple[Page, bool]:
        """(parsed page, from cache); a page that failed comes back with `error` and is not cached."""
        value, cached = self.cache.page(
            url, lambda: read_page(url, self.pages_http, self.extractor, self.config).model_dump()
        )
        return page_from_cache(value), cached

    def stats(self) -> dict[str, Any]:
        return self.cache.stats()

    def close(self) -> None:
        self.cache.close()
        self.extractor.close()
        self.pages_http.close()
        self.serp.close()


_LOCK = threading.Lock()
_CURRENT: tuple[WebConfig, OpenWeb] | None = None


def get_open_web() -> OpenWeb:
    """The process-wide OpenWeb for the current environment (rebuilt when the environment's settings change)."""
    global _CURRENT
    config = WebConfig.from_env()
    with _LOCK:
        if _CURRENT is None or _CURRENT[0] != config:
            if _CURRENT is not None:
                _CURRENT[1].close()
            _CURRENT = (config, OpenWeb(config))
        return _CURRENT[1]


def current_stats() -> dict[str, Any] | None:
    """The cache statistics of the OpenWeb in use, or None when none was built in this process."""
    with _LOCK:
        return None if _CURRENT is None else _CURRENT[1].stats()


def reset_open_web() -> None:
    global _CURRENT
    with _LOCK:
        if _CURRENT is not None:
            _CURRENT[1].close()
        _CURRENT = None
