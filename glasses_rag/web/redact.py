"""Secrets never reach a log: `redact()` blanks the values of key-like URL parameters (api_key, key, token, ...),
and `install_log_redaction()` puts a filter doing that on the loggers that print URLs (httpx's "HTTP Request:"
line at INFO, httpcore's debug lines, this package's own), so no log level shows the SerpApi key.
"""

from __future__ import annotations

import logging
import re

from glasses_rag.core.credentials import RewriteFilter

SECRET_PARAMS = ("api_key", "apikey", "key", "token", "access_token", "auth", "password", "secret", "signature", "sig")
_PATTERN = re.compile(r"(?i)\b(" + "|".join(map(re.escape, SECRET_PARAMS)) + r")(=|%3D)([^&\s\"'<>#]+)")
LOGGERS = (
    "httpx",
    "httpcore",
    "httpcore.connection",
    "httpcore.http11",
    "httpcore.http2",
    "httpcore.proxy",
    "httpcore.socks",
    "glasses_rag.web",
    "glasses_rag.web.open_web",
    "glasses_rag.web.serpapi",
    "glasses_rag.web.webpage",
    "glasses_rag.web.web_cache",
    "glasses_rag.web.lens_images",
)


def redact(text: str) -> str:
    """`text` with the value of every secret-like `name=value` URL parameter replaced by ***."""
    return _PATTERN.sub(lambda m: f"{m.group(1)}{m.group(2)}***", text)


class RedactFilter(RewriteFilter):
    """Rewrites a record's message with `redact`."""

    def __init__(self) -> None:
        super().__init__(redact)


_FILTER = RedactFilter()


def install_log_redaction() -> None:
    """Idempotent: one RedactFilter on each logger that may print a request URL."""
    for name in LOGGERS:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
