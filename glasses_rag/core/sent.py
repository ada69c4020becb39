"""What a model request sent, in a stored form that can be read back exactly: `stored_request` splits a request into
content-addressed pieces (the request record, each message, the tool specs, the response schema), so a run folder
keeps each distinct piece once however many requests repeat it (a turn's transcript only grows; the system text and
the tool specs are the same all run long).

The stored messages are the messages exactly as the policy handed them to the backend, with one change: an image's
data URL (`data:image/jpeg;base64,...`, hundreds of KB) is replaced by `sha256:<hex>`, the SHA-256 of that exact
data URL string, and its length in `data_url_chars` (the turn's image itself is named by the trace's
`image.source` and `image.sha256`). A backend's own adaptations on the wire (the system text folded into the first
user message with `--no-system-role`, images dropped with `--text-only`, sampling fields a server refused) are not
applied to the stored form.
"""

from __future__ import annotations

import functools
import hashlib
import json
import threading
from collections import OrderedDict
from typing import Any

STORED_IMAGE_PREFIX = "sha256:"


def piece_hash(value: Any) -> str:
    """The content address of a JSON value: SHA-256 (first 32 hex digits) of its canonical JSON."""
    try:
        key = _frozen(value)
    except _NotFrozen:
        return _piece_hash(value)
    with _HASHES_LOCK:
        hit = _HASHES.get(key)
        if hit is not None:
            _HASHES.move_to_end(key)
            return hit
    h = _piece_hash(value)
    with _HASHES_LOCK:
        _HASHES[key] = h
        while len(_HASHES) > _HASHES_MAX:
            _HASHES.popitem(last=False)
    return h


def _piece_hash(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:32]


# Every request of a turn repeats the system message, the tool specs and the transcript so far: their hashes are
# kept by content (`_frozen`: equal keys are equal canonical JSON), bounded.
_HASHES: OrderedDict[Any, str] = OrderedDict()
_HASHES_LOCK = threading.Lock()
_HASHES_MAX = 1024


class _NotFrozen(Exception):
    pass


def _frozen(value: Any) -> Any:
    """A hashable key of a JSON-like value such that equal keys mean equal canonical JSON (types kept: True, 1
    and 1.0 differ; a float by its exact bits, so -0.0 is not 0.0). _NotFrozen for anything else."""
    t = type(value)
    if t is str:
        return value
    if t is dict:
        items = []
        for k, v in value.items():
            if type(k) is not str:
                raise _NotFrozen
            items.append((k, _frozen(v)))
        items.sort(key=_first)
        return ("d", tuple(items))
    if t is list or t is tuple:
        return ("l", tuple(_frozen(v) for v in value))
    if value is None or t is bool or t is int:
        return (t, value)
    if t is float:
        return (t, value.hex())
    raise _NotFrozen


def _first(item: tuple[str, Any]) -> str:
    return item[0]


def _stored_part(part: Any) -> Any:
    if not isinstance(part, dict) or part.get("type") != "image_url":
        return part
    image = part.get("image_url")
    url = image.get("url") if isinstance(image, dict) else image
    if not isinstance(url, str) or not url.startswith("data:"):
        return part  # an http(s) URL is kept as sent
    ref = dict(image) if isinstance(image, dict) else {}
    ref.update(url=_stored_url(url), data_url_chars=len(url))
    return {**part, "image_url": ref}


@functools.lru_cache(maxsize=64)
def _stored_url(url: str) -> str:
    """Every request of a conversation carries the same data URL string (Python caches its hash, so the lookup is
    cheap); hashing its ~250 KB again per request is not."""
    return STORED_IMAGE_PREFIX + hashlib.sha256(url.encode("ascii", "replace")).hexdigest()


def stored_message(message: dict[str, Any]) -> dict[str, Any]:
    """A chat message as stored: image data URLs replaced by their hash (see the module docstring)."""
    content = message.get("content")
    if not isinstance(content, list):
        return dict(message)
    return {**message, "content": [_stored_part(p) for p in content]}


def stored_request(
    messages: list[dict[str, Any]],
    tools: list[dict] | None = None,
    response_schema: dict | None = None,
    max_tokens: int | None = None,
    temperature: float | None = None,
) -> tuple[str, dict[str, Any]]:
    """(request id, {piece hash: piece}) for one request; the id is the hash of the request record, which lists its
    messages', tools' and schema's hashes in order.

    Example: `rid, pieces = stored_request([{"role": "user", "content": "hi"}])`; `pieces[rid]["messages"]` is
    `[<hash of the message>]`."""
    pieces: dict[str, Any] = {}

    def put(value: Any) -> str | None:
        if value is None:
            return None
        key = piece_hash(value)
        pieces[key] = value
        return key

    record = {
        "kind": "request",
        "messages": [put(stored_message(m)) for m in messages],
        "tools": put(tools),
        "response_schema": put(response_schema),
        "max_tokens": max_tokens,
        "temperature": temperature,
    }
    request_id = put(record)
    assert request_id is not None
    return request_id, pieces
