"""What an OpenAI-compatible server's reply means: the errors a request ends in, a reply's JSON or the error its status
and text say, a body or a stream read under a byte cap, and streamed chunks assembled into one completion. Used by
the client (glasses_rag/models/openai_client.py), which re-exports the errors.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp

from glasses_rag.core.calls import Cancelled

ERROR_BODY_BYTES = 64 * 1024  # what is read of an error reply (its message is cut far shorter anyway)


class BackendError(RuntimeError):
    """A server could not produce a reply (down, request rejected, bad reply)."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


class ServerUnreachable(BackendError):
    """Every attempt failed in transport (no connection, timeouts, 5xx, 429): the server is down or overloaded, the
    request itself was not refused. Its class name is `glasses_rag.core.types.TRANSPORT_ERROR`, which marks such a call
    in a trace."""


class ReplyTooLarge(BackendError):
    """The reply passed the byte cap its request's max_tokens allows (a runaway or hostile server)."""


class StreamedError(BackendError):
    """The server answered 200 and then streamed an error event instead of the reply (vLLM does so for an
    exception raised while it streams, e.g. 0.10.2 with `tool_choice: "required"`, vLLM issue #24509)."""


class ContextTooLong(BackendError):
    """The prompt plus max_tokens do not fit the model's context (vLLM: "'max_tokens' or
    'max_completion_tokens' is too large"; llama.cpp: "exceeds the available context size")."""


class RequestCancelled(Cancelled):
    """The request was cancelled (its turn ended); `partial` is what had arrived (a completion dict) or None."""

    def __init__(self, message: str, partial: dict | None = None):
        super().__init__(message)
        self.partial = partial


class RetryableServerError(Exception):
    """A failure worth another try: connection error, timeout, 5xx or 429."""

    def __init__(self, message: str, replica_fault: bool = True):
        super().__init__(message)
        self.replica_fault = replica_fault


def checked_reply(url: str, status: int, text: str) -> dict:
    """The reply's JSON object, or the error its status and text say (retryable, too long, refused)."""
    if status == 429 or (status >= 500 and not _says_unsupported(text)):
        raise RetryableServerError(f"server error {status} from {url}: {text[:500]}", replica_fault=status != 429)
    if status >= 400 and _says_too_long(text):
        raise ContextTooLong(
            f"the prompt and max_tokens do not fit the model's context at {url} ({status}): {text[:600]}", status=status
        )
    if status >= 400:  # (a 500 that names an unsupported request feature is an answer, not a fault)
        raise BackendError(f"request rejected by {url} with {status}: {text[:1000]}", status=status)
    try:
        data = json.loads(text)
    except ValueError:
        raise BackendError(f"{url} answered {status} with non-JSON: {text[:300]!r}") from None
    if not isinstance(data, dict):
        raise BackendError(f"{url} answered with JSON that is not an object: {str(data)[:300]}")
    return data


async def read_body(resp: aiohttp.ClientResponse, url: str, cap: int) -> str:
    """The reply's body, read piece by piece and refused past `cap` bytes (an error reply is cut at
    ERROR_BODY_BYTES instead: its message is all that is wanted)."""
    limit = ERROR_BODY_BYTES if resp.status >= 400 else cap
    declared = resp.content_length
    if resp.status < 400 and declared is not None and declared > cap:
        raise ReplyTooLarge(
            f"{url} announced a reply of {declared} bytes, over the {cap}-byte cap that the request's max_tokens allows"
        )
    buf = bytearray()
    async for piece in resp.content.iter_chunked(64 * 1024):
        buf += piece
        if len(buf) > limit:
            if resp.status >= 400:
                del buf[limit:]
                break
            raise ReplyTooLarge(f"{url} sent more than {cap} bytes, the cap that the request's max_tokens allows")
    return buf.decode(resp.get_encoding() if resp.charset else "utf-8", "replace")


async def sse_lines(resp: aiohttp.ClientResponse, url: str, cap: int) -> AsyncIterator[str]:
    """The stream's non-blank lines, stripped, with at most `cap` bytes read in all (a line never completed
    included). Blank lines (the separator after every event) are not yielded: a step of the generator each."""
    buf = bytearray()
    total = 0
    async for piece in resp.content.iter_any():
        total += len(piece)
        if total > cap:
            raise ReplyTooLarge(f"{url} streamed more than {cap} bytes, the cap that the request's max_tokens allows")
        buf += piece
        start = 0
        while (end := buf.find(b"\n", start)) != -1:
            line = buf[start:end].decode("utf-8", "replace").strip()
            start = end + 1
            if line:
                yield line
        del buf[:start]
    if buf.strip():
        yield buf.decode("utf-8", "replace").strip()


# What a 5xx says when the server lacks a request feature (llama-server without --jinja: 500 "tools param requires
# --jinja flag", "Unsupported param: tool_choice", "Cannot use tools with stream"): not worth a retry
_UNSUPPORTED_WORDS = ("--jinja", "unsupported param", "not supported", "cannot use tools")
# How servers say the prompt and max_tokens exceed the context (vLLM, llama.cpp, OpenAI)
_TOO_LONG_WORDS = ("is too large", "maximum context length", "exceeds the available context", "context_length_exceeded")


def _says_unsupported(text: str) -> bool:
    low = text.lower()
    return any(w in low for w in _UNSUPPORTED_WORDS)


def _says_too_long(text: str) -> bool:
    low = text.lower()
    return any(w in low for w in _TOO_LONG_WORDS)


# How servers say a request field is unknown: OpenAI "Unrecognized request argument supplied: top_k", pydantic
# "Extra inputs are not permitted", others "unknown field" / "unexpected keyword" / "not supported"
UNKNOWN_FIELD_WORDS = (
    "unrecogni",
    "unknown",
    "unexpected",
    "not supported",
    "unsupported",
    "extra input",
    "not permitted",
    "not allowed",
)


def reasoning_of(message: dict[str, Any]) -> str:
    """A message's (or delta's) reasoning text: vLLM's and llama.cpp's `reasoning_content`, newer vLLM's
    `reasoning`; '' when there is none."""
    for key in ("reasoning_content", "reasoning"):
        value = message.get(key)
        if isinstance(value, str) and value:
            return value
    return ""


def reply_text(data: dict[str, Any]) -> str:
    """The text of the first choice of a chat-completions reply ('' when there is none)."""
    choices = data.get("choices") or []
    if not choices or not isinstance(choices[0], dict):
        raise BackendError(f"reply has no choices: {str(data)[:300]}")
    content = (choices[0].get("message") or {}).get("content")
    if isinstance(content, list):  # some servers return content parts
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""


class StreamedCompletion:
    """Assembles chat-completion SSE chunks into one completion dict (text, tool-call deltas, usage, finish)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.finish: str | None = None
        self.usage: dict | None = None
        self.model: str | None = None
        self.role = "assistant"
        self.logprobs: list[dict] = []  # choices[0].logprobs.content, joined across chunks
        self.prompt_ids: list | None = None  # vLLM's prompt_token_ids (first chunk) with return_token_ids
        self.token_ids: list | None = None  # choices[0].token_ids, joined across chunks

    def add(self, chunk: dict) -> None:
        self.model = chunk.get("model") or self.model
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        if isinstance(chunk.get("prompt_token_ids"), list):
            self.prompt_ids = chunk["prompt_token_ids"]
        choices = chunk.get("choices")
        for choice in choices if isinstance(choices, list) else []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or choice.get("message") or {}
            if not isinstance(delta, dict):
                continue
            if isinstance(delta.get("content"), str):
                self.text.append(delta["content"])
            thought = reasoning_of(delta)
            if thought:
                self.reasoning.append(thought)
            deltas = delta.get("tool_calls")
            for tc in deltas if isinstance(deltas, list) else []:
                if isinstance(tc, dict):
                    self._add_call_delta(tc)
            if choice.get("finish_reason"):
                self.finish = choice["finish_reason"]
            lp = choice.get("logprobs")
            content = lp.get("content") if isinstance(lp, dict) else None
            self.logprobs += [c for c in content if isinstance(c, dict)] if isinstance(content, list) else []
            if isinstance(choice.get("token_ids"), list):
                self.token_ids = [*(self.token_ids or []), *choice["token_ids"]]

    def _add_call_delta(self, tc: dict) -> None:
        """One `delta.tool_calls[i]`: the first names the call (vLLM sends id, type and the whole name, pythonic
        parsers the first arguments too), later ones carry pieces of `function.arguments`."""
        fn: dict = tc["function"] if isinstance(tc.get("function"), dict) else {}
        slot = self.calls.setdefault(
            self._call_index(tc, fn), {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}
        )
        slot["id"] = tc.get("id") or slot["id"]
        name = fn.get("name")
        if isinstance(name, str) and name != slot["function"]["name"]:  # some servers repeat the whole name
            slot["function"]["name"] += name
        args = fn.get("arguments")
        slot["function"]["arguments"] += args if isinstance(args, str) else (json.dumps(args) if args else "")

    def _call_index(self, tc: dict, fn: dict) -> int:
        """The delta's `index`; a server that leaves it out continues the last call unless the delta starts a
        new one (a new id, or a name while the last call already has one)."""
        index = tc.get("index")
        if isinstance(index, int) and not isinstance(index, bool):
            return index
        if not self.calls:
            return 0
        last = max(self.calls)
        slot = self.calls[last]
        new_id = tc.get("id") and slot["id"] and tc.get("id") != slot["id"]
        new_name = fn.get("name") and slot["function"]["name"] and fn.get("name") != slot["function"]["name"]
        return last + 1 if new_id or new_name else last

    def completion(self) -> dict:
        msg: dict[str, Any] = {"role": self.role, "content": "".join(self.text)}
        if self.reasoning:
            msg["reasoning_content"] = "".join(self.reasoning)
        if self.calls:
            msg["tool_calls"] = [self.calls[i] for i in sorted(self.calls)]
        out: dict[str, Any] = {
            "object": "chat.completion",
            "model": self.model,
            "choices": [{"index": 0, "message": msg, "finish_reason": self.finish}],
        }
        if self.logprobs:
            out["choices"][0]["logprobs"] = {"content": self.logprobs}
        if self.token_ids is not None:
            out["choices"][0]["token_ids"] = self.token_ids
        if self.prompt_ids is not None:
            out["prompt_token_ids"] = self.prompt_ids
        if self.usage:
            out["usage"] = self.usage
        return out
