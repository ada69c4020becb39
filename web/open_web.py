"""Open-web search for SuperGlasses runs, as SuperLens does it: SerpApi Google + Google Lens, a page reader, and the
two-level disk cache in front of all of them.

Configured from the environment (read when first used; `reset_open_web()` re-reads it):

| variable | meaning | default |
|---|---|---|
| SERPAPI_API_KEY | the SerpApi key (a missing key is a tool error, not a crash) | - |
| SERPAPI_BASE_URL | a SerpApi-compatible server | https://serpapi.com |
| GLASSES_WEB_CACHE | the cache folder (query -> results, url -> parsed page) | ~/.cache/glasses-rag/web |
| GLASSES_IMAGE_DIR, GLASSES_IMAGE_BASE_URL | Google Lens needs a public image URL: images are written to this folder, which must be served at this URL | - |
| GLASSES_WEB_TIMEOUT | seconds per HTTP request | 15 |
| GLASSES_SEARCH_HL, GLASSES_SEARCH_GL | language and country of the searches | en, us |
"""

from __future__ import annotations

import hashlib
import io
import os
import threading
from pathlib import Path
from typing import Any

import httpx
from pydantic import BaseModel, Field

from core.hashing import image_key
from web.serpapi import BASE_URL_ENV, DEFAULT_BASE_URL, KEY_ENV, SerpApiClient, SerpApiError, lens_results, web_results
from web.web_cache import WebCache
from web.webpage import MAX_PAGE_BYTES, Page, page_from_cache, read_page

DEFAULT_CACHE_DIR = Path("~/.cache/glasses-rag/web")


class OpenWebConfig(BaseModel):
    serpapi_base_url: str = DEFAULT_BASE_URL
    key_env: str = KEY_ENV
    cache_dir: Path = DEFAULT_CACHE_DIR
    image_dir: Path | None = None
    image_base_url: str | None = None
    timeout_s: float = Field(15.0, gt=0, le=120)
    max_retries: int = Field(2, ge=0, le=5)
    max_page_bytes: int = Field(MAX_PAGE_BYTES, ge=1024)
    hl: str = "en"
    gl: str = "us"

    @classmethod
    def from_env(cls) -> OpenWebConfig:
        env = os.environ
        raw: dict[str, Any] = {
            "serpapi_base_url": env.get(BASE_URL_ENV) or DEFAULT_BASE_URL,
            "cache_dir": env.get("GLASSES_WEB_CACHE") or DEFAULT_CACHE_DIR,
            "image_dir": env.get("GLASSES_IMAGE_DIR") or None,
            "image_base_url": env.get("GLASSES_IMAGE_BASE_URL") or None,
            "hl": env.get("GLASSES_SEARCH_HL") or "en",
            "gl": env.get("GLASSES_SEARCH_GL") or "us",
        }
        if env.get("GLASSES_WEB_TIMEOUT"):
            raw["timeout_s"] = float(env["GLASSES_WEB_TIMEOUT"])
        return cls(**raw)


class OpenWeb:
    """What the open-web tools call; every request goes through the disk cache first."""

    def __init__(self, config: OpenWebConfig | None = None, http: httpx.Client | None = None):
        self.config = config or OpenWebConfig.from_env()
        c = self.config
        self.http = http or httpx.Client(timeout=httpx.Timeout(c.timeout_s, connect=min(10.0, c.timeout_s)))
        self.serp = SerpApiClient(c.serpapi_base_url, key_env=c.key_env, timeout_s=c.timeout_s,
                                  max_retries=c.max_retries, client=self.http)
        self.cache = WebCache(c.cache_dir)

    @property
    def name(self) -> str:
        return f"serpapi({self.serp.base_url})"

    def web_search(self, query: str, k: int = 5) -> tuple[list[dict[str, Any]], bool]:
        """(results, from cache) for a Google web search."""
        c = self.config
        params = {"q": query, "num": k, "hl": c.hl, "gl": c.gl}
        return self.cache.search("google", params,
                                 lambda: web_results(self.serp.google(query, num=k, hl=c.hl, gl=c.gl), k))

    def lens_search(self, image: Any, k: int = 5, refine: str = "") -> tuple[list[dict[str, Any]], bool]:
        """(results, from cache) for a Google Lens search of a PIL image; cached by the image's pixels."""
        key = image_key(image)
        if key is None:
            raise SerpApiError("the image cannot be hashed for the search cache")
        c = self.config
        params = {"image": key, "k": k, "q": refine, "hl": c.hl, "country": c.gl}
        return self.cache.search("google_lens", params, lambda: lens_results(
            self.serp.google_lens(self.publish_image(image), q=refine or None, hl=c.hl, country=c.gl), k))

    def publish_image(self, image: Any) -> str:
        """A public URL for the image: written as JPEG to GLASSES_IMAGE_DIR, served at GLASSES_IMAGE_BASE_URL."""
        c = self.config
        if c.image_dir is None or not c.image_base_url:
            raise SerpApiError("Google Lens searches a public image URL: set GLASSES_IMAGE_DIR to a folder served "
                               "at GLASSES_IMAGE_BASE_URL")
        buf = io.BytesIO()
        image.convert("RGB").save(buf, format="JPEG", quality=90)
        data = buf.getvalue()
        name = hashlib.sha256(data).hexdigest()[:32] + ".jpg"
        folder = Path(c.image_dir).expanduser()
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / name
        if not path.exists():
            tmp = path.with_suffix(".tmp")
            tmp.write_bytes(data)
            tmp.replace(path)
        return f"{c.image_base_url.rstrip('/')}/{name}"

    def read(self, url: str) -> tuple[Page, bool]:
        """(parsed page, from cache); a page that failed comes back with `error` and is not cached."""
        value, cached = self.cache.page(url, lambda: read_page(url, self.http, self.config.max_page_bytes).model_dump())
        return page_from_cache(value), cached

    def stats(self) -> dict[str, Any]:
        return self.cache.stats()

    def close(self) -> None:
        self.cache.close()
        self.http.close()


_LOCK = threading.Lock()
_CURRENT: tuple[OpenWebConfig, OpenWeb] | None = None


def get_open_web() -> OpenWeb:
    """The process-wide OpenWeb for the current environment (rebuilt when the environment's settings change)."""
    global _CURRENT
    config = OpenWebConfig.from_env()
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
