"""`WebConfig`: every setting of the open-web clients, validated, built from the environment by default.

Each field has one environment variable (`ENV`); docs/open-web.md lists them all. A value that does not validate
is an error naming the variable, raised when the open-web tools are first used (a tool error, not a crash).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError, field_validator

DEFAULT_CACHE_DIR = Path("~/.cache/glasses-rag/web")
DEFAULT_BASE_URL = "https://serpapi.com"
KEY_ENV = "SERPAPI_API_KEY"
MB = 2**20  # sizes from the environment are in KiB and MiB


class WebConfig(BaseModel):
    serpapi_base_url: str = Field(
        DEFAULT_BASE_URL,
        description="A SerpApi-compatible server (operator-configured: not subject to the fetch policy).",
    )
    key_env: str = Field(KEY_ENV, description="The environment variable that holds the SerpApi key.")
    hl: str = Field("en", description="Search language (SerpApi hl).")
    gl: str = Field("us", description="Search country (SerpApi gl).")
    allow: list[str] = Field(
        default_factory=list,
        description="Hosts or networks (CIDR) the page reader may reach "
        "although they are loopback, private, link-local, ...: for tests and intranets.",
    )
    timeout_s: float = Field(
        15.0, gt=0, le=120, description="Total seconds per request: connect, every redirect hop and every read."
    )
    max_retries: int = Field(2, ge=0, le=5)
    max_redirects: int = Field(5, ge=0, le=20)
    max_page_bytes: int = Field(2 * MB, ge=1024, description="Bytes of a page downloaded; the rest is never read.")
    max_html_bytes: int = Field(512 * 1024, ge=1024, description="Bytes of HTML handed to the text extractor.")
    extract_timeout_s: float = Field(
        10.0,
        gt=0,
        le=120,
        description="Seconds the text extraction of one page may take; its worker process is killed after.",
    )
    extract_workers: int = Field(2, ge=1, le=16, description="Text-extraction worker processes at most.")
    extract_memory_bytes: int = Field(
        2048 * MB, ge=256 * MB, description="Address-space cap of each extraction worker process."
    )
    serp_max_bytes: int = Field(8 * MB, ge=1024, description="Bytes of one search reply; a larger reply is an error.")
    serp_max_items: int = Field(100, ge=1, le=1000, description="Items of a reply list that are read.")
    cache_dir: Path = Field(DEFAULT_CACHE_DIR, description="Folder of the two-level web cache (search replies, pages).")
    cache_max_bytes: int = Field(1024 * MB, ge=MB, description="Bytes per cache level; the oldest entries go first.")
    cache_max_entry_bytes: int = Field(4 * MB, ge=1024, description="A larger value is not stored.")
    image_dir: Path | None = Field(
        None,
        description="Folder where Google Lens images are published (Lens needs a "
        "public image URL; without it Lens is off).",
    )
    image_base_url: str | None = Field(None, description="The public URL at which image_dir is served.")
    image_max_age_s: float = Field(24 * 3600.0, gt=0, description="Published Lens images older than this are deleted.")
    image_dir_max_bytes: int = Field(
        200 * MB, ge=MB, description="Published Lens images beyond this total are deleted, oldest first."
    )

    @field_validator("allow", mode="before")
    @classmethod
    def _split(cls, v: Any) -> Any:
        if isinstance(v, str):
            return [x.strip() for x in v.split(",") if x.strip()]
        return v

    @field_validator("allow")
    @classmethod
    def _parse_allow(cls, v: list[str]) -> list[str]:
        from glasses_rag.web.fetch_policy import parse_allow

        parse_allow(v)  # raises ValueError naming the entry
        return v

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> WebConfig:
        env = dict(os.environ if env is None else env)
        raw: dict[str, Any] = {}
        for field, (var, scale) in ENV.items():
            value = env.get(var)
            if value:
                raw[field] = _scaled(var, value, scale)
        try:
            return cls(**raw)
        except ValidationError as e:
            first = e.errors()[0]
            field = str(first["loc"][0]) if first["loc"] else "?"
            var = ENV.get(field, (field, None))[0]
            raise ValueError(f"{var}={env.get(var, '')!r}: {first['msg']}") from None


def _scaled(var: str, value: str, scale: float | None) -> Any:
    if scale is None:
        return value
    try:
        number = float(value) * scale
    except ValueError:
        raise ValueError(f"{var}={value!r}: not a number") from None
    return round(number) if scale > 1 else number  # KB, MB and hours become whole bytes and seconds


# field -> (environment variable, unit multiplier or None for text)
ENV: dict[str, tuple[str, float | None]] = {
    "serpapi_base_url": ("SERPAPI_BASE_URL", None),
    "hl": ("GLASSES_SEARCH_HL", None),
    "gl": ("GLASSES_SEARCH_GL", None),
    "allow": ("GLASSES_WEB_ALLOW", None),
    "timeout_s": ("GLASSES_WEB_TIMEOUT", 1),
    "max_page_bytes": ("GLASSES_WEB_MAX_PAGE_KB", 1024),
    "max_html_bytes": ("GLASSES_WEB_MAX_HTML_KB", 1024),
    "extract_timeout_s": ("GLASSES_WEB_EXTRACT_TIMEOUT", 1),
    "extract_workers": ("GLASSES_WEB_EXTRACT_WORKERS", 1),
    "extract_memory_bytes": ("GLASSES_WEB_EXTRACT_MEMORY_MB", MB),
    "serp_max_bytes": ("GLASSES_SEARCH_MAX_KB", 1024),
    "cache_dir": ("GLASSES_WEB_CACHE", None),
    "cache_max_bytes": ("GLASSES_WEB_CACHE_MAX_MB", MB),
    "cache_max_entry_bytes": ("GLASSES_WEB_CACHE_MAX_ENTRY_KB", 1024),
    "image_dir": ("GLASSES_IMAGE_DIR", None),
    "image_base_url": ("GLASSES_IMAGE_BASE_URL", None),
    "image_max_age_s": ("GLASSES_IMAGE_MAX_AGE_H", 3600),
    "image_dir_max_bytes": ("GLASSES_IMAGE_DIR_MAX_MB", MB),
}


def missing_key(env: dict[str, str] | None = None) -> str | None:
    """What the SerpApi tools lack here (None when a key is set): their prerequisite (tools.registry `requires`)."""
    env = dict(os.environ if env is None else env)
    try:
        var = WebConfig.from_env(env).key_env
    except ValueError as e:
        return f"open-web settings invalid: {e}"
    return None if env.get(var) else f"{var} not set"


def missing_lens(env: dict[str, str] | None = None) -> str | None:
    """What Google Lens lacks here: a key, and a folder published at a public URL for the photo it searches with."""
    env = dict(os.environ if env is None else env)
    key = missing_key(env)
    if key:
        return key
    c = WebConfig.from_env(env)
    return (
        None
        if c.image_dir and c.image_base_url
        else "Google Lens off: GLASSES_IMAGE_DIR / GLASSES_IMAGE_BASE_URL unset"
    )
