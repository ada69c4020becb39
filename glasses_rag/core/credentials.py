"""Credentials never reach an output: what a run prints or writes (the console, run.json, traces, reports) goes
through these first.

- `public_url(url)`: the URL without its userinfo (`http://alice:pw@host/v1` -> `http://host/v1`).
- `scrub_text(text)`: every URL in `text` without userinfo, and the value of every `api_key=...` / `"api_key": "..."`
  (and the other key-like names of `SECRET_NAMES`) blanked as `***`. Safe on JSON text: nothing it removes
  contains a quote or a backslash, so JSON stays JSON.
- `scrub_data(value)`: the same over JSON-like data (dicts, lists, strings): a key-like dict key's value becomes
  `***`, every string goes through `scrub_text`.

Example: `scrub_data({"api_key": "sk-1", "base_url": "http://a:b@h/v1"})` -> `{"api_key": "***", "base_url":
"http://h/v1"}`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any

SECRET_NAMES = (
    "api_key",
    "apikey",
    "api-key",
    "access_token",
    "token",
    "password",
    "passwd",
    "secret",
    "authorization",
    "client_secret",
)
HIDDEN = "***"
# scheme://userinfo@ : userinfo holds no '/', '@', whitespace, quotes or backslashes (RFC 3986 allows none unescaped)
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^/?#@\s\"'\\<>]*@")
_NAMES = "|".join(re.escape(n) for n in SECRET_NAMES)
# name=value (URL parameters, command lines) and "name": "value" / 'name': 'value' (JSON, Python reprs)
_ASSIGNED = re.compile(rf"(?i)\b({_NAMES})(=|%3D)([^&\s\"'<>#,;]+)")
_QUOTED = re.compile(rf"(?i)([\"']({_NAMES})[\"']\s*:\s*)([\"'])((?:(?!\3)[^\\\n])*)\3")


def public_url(url: str) -> str:
    """`url` without the userinfo part (user and password) of its authority."""
    if "@" not in url:  # no userinfo without an '@' (a whole trace's JSON is passed here: the scan is the cost)
        return url
    return _USERINFO.sub(r"\1", url)


def scrub_text(text: str) -> str:
    """`text` with URL userinfo removed and key-like values blanked."""
    if not text:
        return text
    text = _USERINFO.sub(r"\1", text)
    text = _ASSIGNED.sub(lambda m: f"{m.group(1)}{m.group(2)}{HIDDEN}", text)
    return _QUOTED.sub(lambda m: f"{m.group(1)}{m.group(3)}{HIDDEN}{m.group(3)}", text)


def is_secret_name(key: str) -> bool:
    k = key.lower().replace("-", "_")
    return k in SECRET_NAMES or k.endswith(("_api_key", "_token", "_secret", "_password"))


def scrub_data(value: Any) -> Any:
    """A copy of JSON-like `value` with every key-like entry's value hidden and every string scrubbed."""
    if isinstance(value, str):
        return scrub_text(value)
    if isinstance(value, dict):
        return {
            k: (HIDDEN if isinstance(k, str) and is_secret_name(k) and v not in (None, "") else scrub_data(v))
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [scrub_data(v) for v in value]
    return value


def scrub_argv(argv: list[str]) -> list[str]:
    """A command line with the value after a key-like option (`--api-key sk-1`) hidden and every word scrubbed."""
    out: list[str] = []
    for i, word in enumerate(argv):
        prev = argv[i - 1] if i else ""
        hide = prev.startswith("-") and "=" not in prev and is_secret_name(prev.lstrip("-"))
        out.append(HIDDEN if hide else scrub_text(word))
    return out


class RewriteFilter(logging.Filter):
    """Rewrites a log record's message with `rewrite` (its arguments are formatted first: httpx passes a URL as one)."""

    def __init__(self, rewrite: Callable[[str], str]):
        super().__init__()
        self.rewrite = rewrite

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a malformed record is left for logging to report
            return True
        clean = self.rewrite(message)
        if clean != message:
            record.msg, record.args = clean, ()
        return True


class ScrubFilter(RewriteFilter):
    """Rewrites a log record's message with `glasses_rag.core.credentials.scrub_text`."""

    def __init__(self) -> None:
        super().__init__(scrub_text)


def scrub_log_handlers() -> None:
    """A ScrubFilter on each handler of the root logger (idempotent): every record printed, whichever logger made
    it, goes through `scrub_text`."""
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, ScrubFilter) for f in handler.filters):
            handler.addFilter(ScrubFilter())
