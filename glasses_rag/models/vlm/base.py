"""Chat backends: the protocol every model server or local model provides, its reply types, the image
encoding they share, the one way a request is reported to the trace (tolerant JSON extraction: lenient_json.py).

`ChatBackend.complete(messages, tools, max_tokens, temperature, response_schema) -> ChatReply`, with
OpenAI-format messages (images as `image_url` parts holding data URLs). The policy that drives a backend
lives in glasses_rag/policies/model/policy.py.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import logging
import re
import threading
import time
import weakref
from collections import OrderedDict
from importlib.resources import files
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from glasses_rag.core.calls import Cancelled, report_model_call
from glasses_rag.core.hashing import known_key
from glasses_rag.core.sent import stored_request
from glasses_rag.core.types import DecisionMode, ModelCall
from glasses_rag.models.openai_client import BackendError  # noqa: F401 - re-exported for the backends
from glasses_rag.models.vlm.lenient_json import (  # noqa: F401 - re-exported: replies are parsed beside the types
    balanced_objects,
    extract_json,
    loads_lenient,
    parse_arguments,
)

log = logging.getLogger(__name__)

# --------------------------------------------------------------------------------------------
# Backend protocol and reply types
# --------------------------------------------------------------------------------------------


class ChatToolCall(BaseModel):
    """A tool call as a chat model returned it (OpenAI `function.name` / parsed `arguments`)."""

    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    id: str | None = None


class TokenLogprob(BaseModel):
    """One written token and its log-probability, as OpenAI's `logprobs.content[]` gives them (the in-process
    decoder: under the grammar's mask, the distribution greedy decoding chose from)."""

    token: str
    logprob: float


class SampledTokens(BaseModel):
    """What a model produced for one request, in token ids: the currency every learner from outcomes consumes (TRL's
    GRPO `rollout_func`, verl's agent loop, Agent Lightning's traces), so nothing is re-tokenized.

    `completion_ids` are the ids the model actually produced, in order (tokens a grammar forced included), and
    `logprobs[i]` is the log-probability of `completion_ids[i]` under the distribution named by `logprob_source`:
    'raw' (the model's own softmax, as vLLM returns by default), or 'masked' (renormalized over the tokens a grammar
    allowed, what constrained decoding chose from). Filled by the backends that know them (in-process; a server that
    returns token ids); None elsewhere.
    """

    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    logprob_source: Literal["raw", "masked"]


class Usage(BaseModel):
    """Token counts of one reply; None when the backend did not report them (e.g. a server that ignores
    stream_options.include_usage), never a made-up 0."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_tokens: int | None = Field(
        None,
        description="Prompt tokens whose KV came from a prefix cache (the "
        "in-process backend's, or a server's prompt_tokens_details.cached_tokens).",
    )


class ChatReply(BaseModel):
    text: str = ""
    reasoning: str = Field(
        "",
        description="A reasoning model's thinking, when the server returns it apart "
        "(`reasoning_content`); never taken for the reply.",
    )
    tool_calls: list[ChatToolCall] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    latency_ms: float = 0.0
    finish_reason: str | None = None
    model: str | None = None
    prompt_ids: list[int] | None = Field(
        None,
        exclude=True,
        description="The prompt's token ids, when the backend tokenized it locally (prefix measurements).",
    )
    mode: DecisionMode | None = Field(
        None,
        description="How the reply was constrained: 'structured' (JSON schema "
        "enforced by the server or a grammar), 'json_object' (some JSON object: the "
        "server ignores the schema), 'native_tools' (tools were offered), or None "
        "(plain generation; the prompt asks for JSON).",
    )
    replica: str | None = Field(None, description="The server (base URL) that answered, for HTTP backends.")
    logprobs: list[TokenLogprob] | None = Field(
        None,
        exclude=True,
        description="The reply's tokens in order with their log-probabilities, when the backend gives them; their "
        "texts joined are the reply's text before stripping.",
    )
    logprobs_from: Literal["raw", "masked"] | None = Field(
        None,
        exclude=True,
        description="Which distribution `logprobs` come from: 'masked' (in-process: renormalized over the tokens the "
        "grammar allowed, what constrained greedy decoding chose from), 'raw' (a server's: vLLM returns the model's "
        "own softmax by default, before any grammar). A threshold on one is no threshold on the other.",
    )
    sampled: SampledTokens | None = Field(
        None,
        exclude=True,
        description="The prompt's and the reply's token ids with the reply's log-probabilities, when the backend knows "
        "them (learning from rollouts).",
    )


class ReplyCancelled(Cancelled):
    """A generation stopped because its turn ended; `partial` is what had been generated."""

    def __init__(self, message: str, partial: ChatReply | None = None):
        super().__init__(message)
        self.partial = partial


@runtime_checkable
class ChatBackend(Protocol):
    """`supports_native_tools`: whether `tools=` (OpenAI function specs) is honoured natively;
    `supports_structured`: whether `response_schema` can constrain the reply (JSON schema / grammar);
    `supports_images`: whether image_url parts reach the model (text-only backends and modes drop them).

    `complete` uses the strongest constraint offered that it supports: `response_schema`
    (`{"name": ..., "schema": {...}}`) before `tools` before plain generation, and says which in
    `ChatReply.mode`. It must stop (raise `Cancelled`) soon after `glasses_rag.core.calls.current_scope()` is
    cancelled."""

    name: str
    supports_native_tools: bool
    supports_structured: bool
    supports_images: bool

    def complete(
        self,
        messages: list[dict],
        tools: list[dict] | None = None,
        max_tokens: int = 512,
        temperature: float = 0.0,
        response_schema: dict | None = None,
    ) -> ChatReply: ...


TOKEN_BLOCK = 16  # tokens per block, as vLLM's prefix cache
CHAR_BLOCK = 64  # characters per block when no tokenizer is at hand


def prompt_text(messages: list[dict]) -> str:
    """A request's messages as one string, roughly as a chat template lays them out (images as placeholders)."""
    parts = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            content = "".join(
                p.get("text", "") if p.get("type") == "text" else f"<image:{_image_digest(p)}>"
                for p in content
                if isinstance(p, dict)
            )
        calls = json.dumps(m.get("tool_calls"), sort_keys=True) if m.get("tool_calls") else ""
        parts.append(f"<{m.get('role')}>{content or ''}{calls}</{m.get('role')}>")
    return "".join(parts)


def _image_digest(part: dict) -> str:
    url = part.get("image_url")
    url = url.get("url") if isinstance(url, dict) else url
    return _url_digest(str(url))


@functools.lru_cache(maxsize=64)
def _url_digest(url: str) -> str:
    """Every request of a conversation carries the same data URL string (its hash is cached by Python, so the
    lookup is cheap); hashing its ~250 KB again per request is not."""
    return hashlib.blake2b(url.encode(), digest_size=4).hexdigest()


def prompt_blocks(units: str | list[int], size: int) -> list[str]:
    """Chained hashes of the full blocks of a prompt (text or token ids): block i's hash covers blocks 0..i, so two
    prompts share exactly the leading blocks whose hashes agree (how vLLM keys its prefix cache)."""
    if isinstance(units, str):
        return _text_blocks(units, size)
    return _chain(units, size, [])


def _chain(units: str | list[int], size: int, out: list[str]) -> list[str]:
    """`out` (the hashes of the leading blocks, already known) extended over the rest of `units`."""
    h = bytes.fromhex(out[-1]) if out else b""
    for start in range(len(out) * size, len(units) - size + 1, size):
        block = units[start : start + size]
        data = block.encode() if isinstance(block, str) else b",".join(str(x).encode() for x in block)
        h = hashlib.blake2b(h + data, digest_size=6).digest()
        out.append(h.hex())
    return out


# The last prompt text hashed, with its block hashes: the next request (of this conversation or another) repeats
# most of it (the system text, the transcript so far), and a block's hash depends only on the text up to its end.
_LAST_TEXT: list[tuple[str, int, list[str]]] = []
_LAST_TEXT_LOCK = threading.Lock()


def _text_blocks(text: str, size: int) -> list[str]:
    with _LAST_TEXT_LOCK:
        last = _LAST_TEXT[0] if _LAST_TEXT else None
    shared: list[str] = []
    if last is not None and last[1] == size:
        shared = last[2][: _shared_blocks(last[0], text, size, len(last[2]))]
    out = _chain(text, size, shared)
    with _LAST_TEXT_LOCK:
        _LAST_TEXT[:] = [(text, size, out)]
    return list(out)


def _shared_blocks(a: str, b: str, size: int, most: int) -> int:
    """How many leading blocks of `size` characters (at most `most`) `a` and `b` have in common (binary search:
    a block matches only if all before it do)."""
    lo, hi = 0, min(most, len(b) // size)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[: mid * size] == b[: mid * size]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _blocks(backend: Any, messages: list[dict], reply: ChatReply | None) -> tuple[list[str], str]:
    ids = getattr(reply, "prompt_ids", None) if reply is not None else None
    if ids:
        return prompt_blocks(list(ids), TOKEN_BLOCK), "tokens"
    return prompt_blocks(prompt_text(messages), CHAR_BLOCK), "chars"


def complete_and_report(
    backend: ChatBackend,
    purpose: str,
    messages: list[dict],
    *,
    tools: list[dict] | None = None,
    response_schema: dict | None = None,
    max_tokens: int = 512,
    temperature: float = 0.0,
    prompt_profile: str | None = None,
) -> ChatReply:
    """One backend request, reported as a ModelCall to the graph event that made it (also when it fails or is
    cancelled): tokens, latency, finish reason, the raw reply (first 4 KB), the constraint mode used, when it was
    sent and the prompt's block hashes (how much of it repeats the previous request's)."""
    t0 = time.perf_counter()
    started = time.time()
    name = getattr(backend, "name", type(backend).__name__)
    sent = stored_request(messages, tools, response_schema, max_tokens, temperature)
    try:
        reply = backend.complete(
            messages, tools=tools, max_tokens=max_tokens, temperature=temperature, response_schema=response_schema
        )
    except Exception as e:
        report_model_call(
            _failed_call(e, backend, messages, purpose, name, t0, started, prompt_profile).with_request(*sent)
        )
        raise
    raw, n = ModelCall.clip(_raw(reply))
    blocks, unit = _blocks(backend, messages, reply)
    report_model_call(
        ModelCall(
            purpose=purpose,
            mode=reply.mode or "json_text",
            model=reply.model or name,
            prompt_tokens=reply.usage.input_tokens,
            completion_tokens=reply.usage.output_tokens,
            latency_ms=round(reply.latency_ms or (time.perf_counter() - t0) * 1000, 3),
            finish_reason=reply.finish_reason,
            raw_reply=raw,
            reply_chars=n,
            started_at=started,
            prompt_blocks=blocks,
            reasoning=ModelCall.clip(reply.reasoning)[0] or None,
            block_unit=unit,
            replica=reply.replica,
            cached_tokens=reply.usage.cached_tokens,
            prompt_profile=prompt_profile,
        ).with_request(*sent)
    )
    return reply


def _failed_call(
    e: Exception,
    backend: Any,
    messages: list[dict],
    purpose: str,
    name: str,
    t0: float,
    started: float,
    prompt_profile: str | None,
) -> ModelCall:
    """The ModelCall of a request that failed or was cancelled, with what its reply had said so far (if any)."""
    partial = getattr(e, "partial", None)
    partial = partial if isinstance(partial, ChatReply) else None
    blocks, unit = _blocks(backend, messages, partial)
    call = ModelCall(
        purpose=purpose,
        model=name,
        latency_ms=round((time.perf_counter() - t0) * 1000, 3),
        cancelled=isinstance(e, Cancelled),
        error=f"{type(e).__name__}: {e}"[:500],
        started_at=started,
        prompt_blocks=blocks,
        block_unit=unit,
        prompt_profile=prompt_profile,
    )
    if partial is None:
        return call
    raw, n = ModelCall.clip(_raw(partial))
    return call.model_copy(
        update=dict(
            mode=partial.mode or "json_text",
            raw_reply=raw,
            reply_chars=n,
            reasoning=ModelCall.clip(partial.reasoning)[0] or None,
            prompt_tokens=partial.usage.input_tokens,
            completion_tokens=partial.usage.output_tokens,
            finish_reason=partial.finish_reason or "cancelled",
            replica=partial.replica,
        )
    )


def _raw(reply: ChatReply) -> str:
    if not reply.tool_calls:
        return reply.text
    return json.dumps(
        {"content": reply.text, "tool_calls": [t.model_dump() for t in reply.tool_calls]}, ensure_ascii=False
    )


# --------------------------------------------------------------------------------------------
# Images
# --------------------------------------------------------------------------------------------


class _EncodedImages:
    """Data URLs of recently encoded images, by image object and size: a turn sends the same photo to the model
    several times (decide, answer, verification), and a 2048-px JPEG costs tens of ms to encode."""

    def __init__(self, max_images: int = 256):
        self._lock = threading.Lock()
        self._urls: OrderedDict[tuple[int, int, int], tuple[weakref.ref, str]] = OrderedDict()
        self._max = max_images

    def get(self, image: Any, max_side: int, quality: int) -> str | None:
        key = (id(image), max_side, quality)
        with self._lock:
            hit = self._urls.get(key)
            if hit is None or hit[0]() is not image:  # an id reused by a new image is a miss
                return None
            self._urls.move_to_end(key)
            return hit[1]

    def put(self, image: Any, max_side: int, quality: int, url: str) -> None:
        try:
            ref = weakref.ref(image)
        except TypeError:
            return
        with self._lock:
            self._urls[(id(image), max_side, quality)] = (ref, url)
            while len(self._urls) > self._max:
                self._urls.popitem(last=False)


class _UrlsByContent:
    """Data URLs by the photo's content key (glasses_rag.core.hashing.remember_key), bounded by their total size: the
    same photo in another conversation (a repeated row, a resumed run) is not resized and encoded again."""

    def __init__(self, max_chars: int = 32 * 1024 * 1024):
        self._lock = threading.Lock()
        self._urls: OrderedDict[tuple[str, int, int], str] = OrderedDict()
        self._chars = 0
        self._max = max_chars

    def get(self, key: tuple[str, int, int]) -> str | None:
        with self._lock:
            url = self._urls.get(key)
            if url is not None:
                self._urls.move_to_end(key)
            return url

    def put(self, key: tuple[str, int, int], url: str) -> None:
        with self._lock:
            if key in self._urls or len(url) > self._max:
                return
            self._urls[key] = url
            self._chars += len(url)
            while self._chars > self._max:
                self._chars -= len(self._urls.popitem(last=False)[1])


ENCODED_IMAGES = _EncodedImages()
URLS_BY_CONTENT = _UrlsByContent()


def image_to_data_url(image: Any, max_side: int = 1024, quality: int = 90) -> str:
    """A PIL image (or a path / raw bytes) as a `data:image/jpeg;base64,...` URL, longest side <= max_side.
    A PIL image's URL is cached per size while the image lives (the image must not be changed in place), and by
    its content key when it has one (glasses_rag.core.hashing.remember_key): every call gets the same string."""
    from PIL import Image

    if not isinstance(image, Image.Image):
        return _encode(image, max_side, quality)
    url = ENCODED_IMAGES.get(image, max_side, quality)
    if url is not None:
        return url
    content = known_key(image)
    url = URLS_BY_CONTENT.get((content, max_side, quality)) if content else None
    if url is None:
        url = _encode(image, max_side, quality)
        if content:
            URLS_BY_CONTENT.put((content, max_side, quality), url)
    ENCODED_IMAGES.put(image, max_side, quality, url)
    return url


def _encode(image: Any, max_side: int, quality: int) -> str:
    from glasses_rag.models.vlm.vision_inputs import model_photo  # the one preparation of a photo (also training's)

    return "data:image/jpeg;base64," + base64.b64encode(model_photo(image, max_side, quality)).decode("ascii")


def data_url_to_image(url: str):
    """The inverse of image_to_data_url (for local backends): the same decoding the training examples' photos get."""
    from glasses_rag.models.vlm.vision_inputs import photo_from_bytes

    payload = url.split(",", 1)[1] if url.startswith("data:") else url
    return photo_from_bytes(base64.b64decode(payload))


def message_text(content: Any) -> str:
    """The text of an OpenAI message content (a string or a list of parts); images dropped."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "\n".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")


def text_only_messages(messages: list[dict]) -> list[dict]:
    """Messages with string contents only, for text-only models and chat formats that drop list contents."""
    return [{"role": m.get("role", "user"), "content": message_text(m.get("content"))} for m in messages]


def system_into_user(messages: list[dict]) -> list[dict]:
    """The system text moved to the start of the first user message, for chat formats without a system role
    (llama-cpp-python's `gemma` drops system messages)."""
    system = "\n\n".join(message_text(m.get("content")) for m in messages if m.get("role") == "system")
    rest = [dict(m) for m in messages if m.get("role") != "system"]
    if system:
        first = next((i for i, m in enumerate(rest) if m.get("role") == "user"), None)
        if first is None:
            rest.insert(0, {"role": "user", "content": system})
        elif isinstance(rest[first].get("content"), list):
            rest[first]["content"] = [{"type": "text", "text": system}, *rest[first]["content"]]
        else:
            rest[first]["content"] = f"{system}\n\n{rest[first].get('content') or ''}"
    return rest


# package data: the bundled templates wherever the project is installed
CHAT_TEMPLATES_DIR = files("glasses_rag.models.vlm") / "chat_templates"


def bundled_chat_templates() -> list[str]:
    return sorted(p.name.removesuffix(".jinja") for p in CHAT_TEMPLATES_DIR.iterdir() if p.name.endswith(".jinja"))


TEMPLATE_SUFFIXES = (".jinja", ".jinja2", ".j2")
TEMPLATE_MAX_BYTES = 256 * 1024


def load_chat_template(value: str) -> str:
    """A chat template from a bundled name (gemma, chatml, llama3), a template file (.jinja, .jinja2, .j2) or
    the template text itself. Any other file is refused: an openai backend sends the template to its server,
    so a config naming e.g. ~/.ssh/id_rsa must not read it."""
    if "{{" in value or "{%" in value:
        return value
    bundled = CHAT_TEMPLATES_DIR / f"{value}.jinja"
    if "/" not in value and bundled.is_file():
        return bundled.read_text(encoding="utf-8")
    p = Path(value).expanduser()
    if p.suffix.lower() not in TEMPLATE_SUFFIXES:
        raise ValueError(
            f"chat template {value!r} is neither a bundled one ({', '.join(bundled_chat_templates())}) "
            f"nor a template file ({', '.join(TEMPLATE_SUFFIXES)}) nor template text"
        )
    if not p.is_file():
        raise ValueError(f"chat template file not found: {value}")
    if p.stat().st_size > TEMPLATE_MAX_BYTES:
        raise ValueError(f"chat template file {value} is over {TEMPLATE_MAX_BYTES // 1024} KiB: not a template")
    text = p.read_text(encoding="utf-8", errors="replace")
    if "{{" not in text and "{%" not in text:
        raise ValueError(f"chat template file {value} holds no Jinja tag ({{{{ or {{%): not a template")
    return text


_GENERATION_MARKERS = re.compile(r"\{%-?\s*(?:end)?generation\s*-?%\}")


def without_generation_markers(template: str) -> str:
    """A chat template less its `{% generation %}` markers (which only transformers' Jinja environment knows: they
    mark the assistant's tokens for training and render nothing), for Jinja environments without them
    (llama-cpp-python's)."""
    return _GENERATION_MARKERS.sub("", template)
