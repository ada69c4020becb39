"""A request body as JSON, fast: `json.dumps(body)` byte for byte, with each image's base64 data URL spliced in
rather than scanned (the client's `json_serialize`, glasses_rag/models/openai_client.py)."""

from __future__ import annotations

import functools
import json
import re
from typing import Any

_PLAIN_DATA_URL = re.compile(r"data:[A-Za-z0-9/+.-]+;base64,[A-Za-z0-9+/=]*")


@functools.lru_cache(maxsize=64)
def _plain_data_url(url: str) -> bool:
    """Checked once per URL string (Python caches a string's hash, so the lookup is cheap): scanning ~250 KB costs
    as much as escaping it."""
    return _PLAIN_DATA_URL.fullmatch(url) is not None


def dumps_body(body: Any) -> str:
    """`json.dumps(body)`, byte for byte, with each image's data URL (~250 KB, the same string in every request of
    a conversation) spliced in rather than scanned for characters to escape: a base64 data URL has none."""
    messages = body.get("messages") if isinstance(body, dict) else None
    if not isinstance(messages, list):
        return json.dumps(body)
    urls: list[str] = []
    marked = [_mark_images(m, urls) for m in messages]
    if not urls:
        return json.dumps(body)
    text = json.dumps({**body, "messages": marked})
    for i, url in enumerate(urls):
        mark = f'"\\u0000image{i}\\u0000"'
        if text.count(mark) != 1:  # the same text elsewhere (a hostile question): no shortcut
            return json.dumps(body)
        text = text.replace(mark, f'"{url}"', 1)
    return text


def _mark_images(message: Any, urls: list[str]) -> Any:
    """The message with each plain data URL replaced by a placeholder no JSON text can otherwise contain."""
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, list):
        return message
    parts = []
    for part in content:
        ref = part.get("image_url") if isinstance(part, dict) else None
        url = ref.get("url") if isinstance(ref, dict) else None
        if isinstance(ref, dict) and isinstance(url, str) and len(url) > 4096 and _plain_data_url(url):
            part = {**part, "image_url": {**ref, "url": f"\0image{len(urls)}\0"}}
            urls.append(url)
        parts.append(part)
    return {**message, "content": parts}
