"""The one client for OpenAI-compatible HTTP servers (vLLM, llama.cpp server, SGLang, OpenAI): one retry policy.

Used by the model backend (glasses_rag/models/vlm/openai_server.py), the LLM judges (glasses_rag.crag_mm.scoring,
glasses_rag.superglasses.logs) and anything else that talks to such a server. Retries with tenacity (exponential
backoff) on connection errors, timeouts, 429 and 5xx; any other 4xx is a `BackendError` at once, with the server's
message.

Requests run on one asyncio event loop in a daemon thread (aiohttp, whose client costs a fraction of the CPU per
request that httpx's does: what limits how many conversations one process can drive), whatever thread asks. That
is what makes cancellation real: when the caller's `glasses_rag.core.calls` scope is cancelled (its turn ended), the
request's task is cancelled and the unfinished response's connection is closed, so vLLM and llama.cpp servers stop
generating (vLLM aborts on disconnect for streamed and non-streamed requests; llama-cpp-python's server only for
streamed ones, hence `chat(..., stream=True)`, which assembles the SSE chunks into an ordinary completion).

Several base URLs (replicas of one model) are used by least outstanding requests; a replica that fails to
connect or answers 5xx is taken out for a cool-down (doubling, up to a minute) and tried again after it. Requests
made under `glasses_rag.core.calls.affinity(key)` (a conversation) stay on the replica the key first went to, so its
prefix cache (vLLM's automatic prefix caching, its multimodal input cache) already holds the photo and the system
prompt; they go elsewhere (least outstanding) only while that replica is down or has `max_outstanding` requests
in flight, and a key whose replica went down is moved for good.

Optional sampling fields that a server rejects by name (`top_k`, `min_p`, `repetition_penalty` are vLLM's,
SGLang's and llama-cpp-python's, and OpenAI's API answers 400 "Unrecognized request argument supplied: top_k";
its reasoning models refuse `top_p` and the penalties) are dropped from then on, with one warning, and the
request is sent again; likewise `max_tokens` becomes `max_completion_tokens` for a server that asks for it, and
`top_k` 0 ("off" for vLLM and llama.cpp) becomes -1 for one that takes only that (SGLang), and
`repetition_penalty` is sent as `repeat_penalty` to llama.cpp's servers (they ignore the former and apply 1.1).

Every reply is read under a byte cap derived from the request's `max_tokens` (`reply_byte_cap`), streamed or
not, and checked while it arrives: a server that streams forever or sends a 200 MB body costs at most the cap
in memory, and the request fails with `ReplyTooLarge`. An error event inside a stream (vLLM sends HTTP 200, then
`data: {"error": ...}`) is a `StreamedError`. A key is sent only where it was given: the client reads no
environment variable (`api_key=None` sends no Authorization header).
"""

from __future__ import annotations

import asyncio
import atexit
import functools
import itertools
import json
import logging
import re
import socket
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from tenacity import AsyncRetrying, RetryError, retry_if_exception_type, stop_after_attempt

from glasses_rag.core.calls import Cancelled, current_affinity, current_scope
from glasses_rag.core.credentials import public_url

log = logging.getLogger(__name__)

COOLDOWN_S = (1.0, 60.0)  # first and longest time a failed replica is left out
AFFINITY_KEYS = 4096  # conversations whose replica is remembered (least recently used forgotten first)
# Sampling fields a request may go without, when a server does not take them (see the module docstring)
EXTENSION_SAMPLING = ("top_k", "min_p", "repetition_penalty")  # beyond OpenAI's API (vLLM, SGLang, llama.cpp)
# logprobs: asked for when the policy reads an answer's confidence from its tokens; a server without it loses it.
# return_token_ids (vLLM >= 0.10.2): the prompt's and the reply's token ids, for the token record of rollouts
OPTIONAL_SAMPLING = (
    *EXTENSION_SAMPLING,
    "top_p",
    "presence_penalty",
    "frequency_penalty",
    "seed",
    "logprobs",
    "return_token_ids",
)
# Bytes a reply may take: a fixed allowance (headers of the JSON, the usage chunk) plus this much per token asked
# for. A streamed token is one SSE chunk of ~200-300 bytes (ids, model name, delta); a body's token is at most a
# few dozen bytes even JSON-escaped; 1 KiB per token leaves room for long model names and tool-call deltas.
REPLY_FIXED_BYTES = 64 * 1024
REPLY_BYTES_PER_TOKEN = 1024
NO_MAX_TOKENS_BYTES = 4 * 1024 * 1024  # a request without max_tokens (GET /models, a server's own default)
LLAMACPP_OWNERS = frozenset({"llamacpp", "me"})  # `owned_by` in /models: llama-server, llama-cpp-python's server
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


class _RetryableModelError(Exception):
    """A failure worth another try: connection error, timeout, 5xx or 429."""

    def __init__(self, message: str, replica_fault: bool = True):
        super().__init__(message)
        self.replica_fault = replica_fault


def api_base(url: str) -> str:
    """`http://host:8000` or `http://host:8000/v1` -> the base that `/chat/completions` is appended to."""
    base = url.rstrip("/")
    return base if base.endswith("/v1") or "/v1/" in base + "/" else base + "/v1"


def reply_byte_cap(payload: dict | None) -> int:
    """The most bytes a reply to `payload` may take, from its max_tokens (or max_completion_tokens).

    Example: reply_byte_cap({"max_tokens": 512}) == 64 KiB + 512 KiB."""
    asked = (payload or {}).get("max_completion_tokens") or (payload or {}).get("max_tokens")
    if not isinstance(asked, int) or isinstance(asked, bool) or asked <= 0:
        return NO_MAX_TOKENS_BYTES
    return REPLY_FIXED_BYTES + asked * REPLY_BYTES_PER_TOKEN


def pool_size_for(concurrency: int) -> int:
    """HTTP connections to keep for `concurrency` conversations: a turn may have a few requests in flight at
    once (parallel self-check paths, a cancelled request still closing)."""
    return max(16, 4 * max(1, int(concurrency)))


# ---------------------------------------------------------------------------------------------------------------
# The event loop every request runs on


class _Loop:
    def __init__(self) -> None:
        try:  # uvloop, where installed, halves the loop's CPU per request; asyncio's own loop otherwise
            import uvloop

            self.loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
        except ImportError:
            self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, name="glasses-http", daemon=True).start()

    def run(self, make: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
        """Run `make()` on the loop and wait for it; the caller's cancel scope cancels the task (and with it the
        connection). Returns only once the task has ended, so a cancelled request's connection is closed."""
        done: Future = Future()
        holder: dict[str, asyncio.Task] = {}

        def start() -> None:
            try:
                task: asyncio.Task = self.loop.create_task(make())
            except BaseException as e:  # noqa: BLE001 - handed to the waiting caller, never left unanswered
                done.set_exception(e)
                return
            holder["task"] = task

            def finish(t: asyncio.Task) -> None:
                if t.cancelled():
                    done.set_exception(RequestCancelled("the request was cancelled (its turn ended)"))
                elif t.exception() is not None:
                    done.set_exception(t.exception())
                else:
                    done.set_result(t.result())

            task.add_done_callback(finish)

        def cancel() -> None:
            task = holder.get("task")
            if task is not None:
                task.cancel()

        scope = current_scope()
        if scope is not None and scope.cancelled:
            raise RequestCancelled("the turn ended before the request was sent")
        token = scope.on_cancel(lambda: self.loop.call_soon_threadsafe(cancel)) if scope is not None else None
        try:
            self.loop.call_soon_threadsafe(start)
            return done.result()
        finally:
            if scope is not None:
                scope.remove(token)


_LOOP: _Loop | None = None
_LOOP_LOCK = threading.Lock()
_CLIENTS: weakref.WeakSet[OpenAIClient] = weakref.WeakSet()
# Every open aiohttp session, held here until it is closed on the loop. A session reachable only from a dropped
# client would be finalised by the garbage collector in whatever thread it runs, and aiohttp's connector then
# closes its transports there: off the loop's thread, which crashes uvloop (a segfault, seen in the tests).
_OPEN_SESSIONS: set[aiohttp.ClientSession] = set()


def _event_loop() -> _Loop:
    global _LOOP
    with _LOOP_LOCK:
        if _LOOP is None:
            _LOOP = _Loop()
            atexit.register(_close_all)
        return _LOOP


def _close_all() -> None:
    """At exit: close every client's connections (an unclosed aiohttp session complains when collected)."""
    for client in list(_CLIENTS):
        client.close()
    for session in list(_OPEN_SESSIONS):  # those of clients dropped without close()
        try:
            _event_loop().run(lambda s=session: _close_session(s))  # type: ignore[misc]
        except Exception as e:  # noqa: BLE001 - closing is best effort
            log.debug("closing an HTTP session failed: %s", e)


async def _close_session(session: aiohttp.ClientSession) -> None:
    try:
        await session.close()
    finally:
        _OPEN_SESSIONS.discard(session)


# ---------------------------------------------------------------------------------------------------------------
# Replicas


@dataclass
class Replica:
    base_url: str
    outstanding: int = 0
    failures: int = 0
    down_until: float = 0.0
    served: int = 0

    def up(self, now: float) -> bool:
        return self.down_until <= now


class _Stream:
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


class OpenAIClient:
    """`max_outstanding`: requests in flight on a replica past which a conversation's requests (see
    `glasses_rag.core.calls.affinity`) go to the least busy replica instead of staying on theirs."""

    def __init__(
        self,
        base_url: str | Sequence[str],
        api_key: str | None = None,
        *,
        timeout_s: float = 60.0,
        max_retries: int = 3,
        retry_wait_s: float = 0.5,
        pool_size: int = 16,
        max_outstanding: int = 64,
    ):
        urls = [base_url] if isinstance(base_url, str) else list(base_url)
        if not urls:
            raise ValueError("no base URL given")
        if api_key:  # a URL's user:password and a Bearer key cannot both be sent (aiohttp refuses): the key wins
            urls = [public_url(u) for u in urls]
        self.replicas = [Replica(api_base(u)) for u in urls]
        self.base_url = self.replicas[0].base_url
        key = api_key  # never read from the environment here: each caller knows which key is its server's
        self.timeout_s = timeout_s
        self.max_retries = max(0, int(max_retries))
        self.retry_wait_s = retry_wait_s
        self._headers = {"Content-Type": "application/json"}
        if key:
            self._headers["Authorization"] = f"Bearer {key}"
        self.pool_size = pool_size
        self._session: aiohttp.ClientSession | None = None
        self._lock = threading.Lock()
        self._turn = itertools.count()
        self.max_outstanding = max(1, int(max_outstanding))
        self._affinity: OrderedDict[str, Replica] = OrderedDict()
        self.dropped: set[str] = set()  # OPTIONAL_SAMPLING fields the server rejected: no longer sent
        self.max_completion_tokens = False  # the server wants max_completion_tokens, not max_tokens
        self._owned_by: set[str] | None = None  # the /models owned_by of the first replica, asked at first use
        self.top_k_off = 0  # what "no top-k" is on this server: 0 (vLLM, llama.cpp), or -1 once it asks (SGLang)
        _CLIENTS.add(self)

    def _http(self) -> aiohttp.ClientSession:
        """Built on the loop thread at first use (a session belongs to one event loop). aiohttp sets TCP_NODELAY
        on its connections: small writes are not held back by Nagle's algorithm."""
        if self._session is None:
            connector = aiohttp.TCPConnector(limit=self.pool_size, limit_per_host=self.pool_size)
            self._session = aiohttp.ClientSession(
                connector=connector,
                headers=self._headers,
                json_serialize=dumps_body,
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=min(10.0, self.timeout_s)),
            )
            _OPEN_SESSIONS.add(self._session)
        return self._session

    def __del__(self) -> None:
        session = self._session
        if session is not None and not session.closed and _LOOP is not None:  # dropped without close(): close it
            try:
                _LOOP.loop.call_soon_threadsafe(lambda: _LOOP.loop.create_task(_close_session(session)))
            except RuntimeError:  # the loop is gone (interpreter exit)
                pass

    def close(self) -> None:
        session, self._session = self._session, None
        if session is not None and not session.closed:
            try:
                _event_loop().run(lambda: _close_session(session))
            except Exception as e:  # noqa: BLE001 - closing is best effort
                log.debug("closing the HTTP client failed: %s", e)

    # ---- replicas ------------------------------------------------------------------------------------------

    def _pick(self, key: str | None = None) -> Replica:
        """The replica for one request: the one `key` (a conversation) is on while it is up and has fewer than
        `max_outstanding` requests in flight; else the healthy replica with the fewest outstanding requests
        (ties in turn), which a new or moved key then stays on; if none is healthy, the one whose cool-down
        ends first."""
        now = time.monotonic()
        with self._lock:
            home = self._affinity.get(key) if key is not None else None
            if home is not None and home.up(now) and home.outstanding < self.max_outstanding:
                r = home
            else:
                r = self._least_outstanding(now)
                if key is not None and (home is None or not home.up(now)):  # saturation is passing: key stays
                    self._affinity[key] = r
            if key is not None and key in self._affinity:
                self._affinity.move_to_end(key)
                while len(self._affinity) > AFFINITY_KEYS:
                    self._affinity.popitem(last=False)
            r.outstanding += 1
            return r

    def _least_outstanding(self, now: float) -> Replica:
        up = [r for r in self.replicas if r.up(now)]
        if not up:
            return min(self.replicas, key=lambda x: x.down_until)
        least = min(r.outstanding for r in up)
        ties = [r for r in up if r.outstanding == least]
        return ties[next(self._turn) % len(ties)]

    def _release(self, r: Replica, failed: bool) -> None:
        with self._lock:
            r.outstanding -= 1
            if failed:
                r.failures += 1
                cool = min(COOLDOWN_S[1], COOLDOWN_S[0] * 2 ** (r.failures - 1))
                r.down_until = time.monotonic() + cool
                if len(self.replicas) > 1:
                    log.warning("replica %s failed; left out for %.0fs", r.base_url, cool)
            else:
                r.failures = 0
                r.down_until = 0.0
                r.served += 1

    def _any_up(self) -> bool:
        now = time.monotonic()
        return any(r.up(now) for r in self.replicas)

    # ---- requests ------------------------------------------------------------------------------------------

    async def _send(
        self,
        method: str,
        path: str,
        payload: dict | None,
        stream: bool,
        acc: _Stream | None,
        key: str | None,
        meta: dict[str, Any],
    ) -> dict:
        r = self._pick(key)
        meta["replica"] = r.base_url
        url = f"{r.base_url}{path}"
        cap = reply_byte_cap(payload)
        failed = False
        try:
            async with asyncio.timeout(self.timeout_s):
                if stream:
                    return await self._stream(url, payload, acc, cap)
                async with self._http().request(method, url, json=payload) as resp:
                    return _checked(url, resp.status, await _read_body(resp, url, cap))
        except TimeoutError as e:
            failed = True
            raise _RetryableModelError(f"timed out after {self.timeout_s:g}s waiting for {url}") from e
        except aiohttp.ClientError as e:
            failed = True
            raise _RetryableModelError(f"cannot reach {url}: {type(e).__name__}: {e} (is the server running?)") from e
        except _RetryableModelError as e:
            failed = e.replica_fault
            raise
        finally:
            self._release(r, failed)

    async def _stream(self, url: str, payload: dict | None, acc: _Stream | None, cap: int) -> dict:
        acc = acc if acc is not None else _Stream()
        acc.reset()  # a retried attempt starts over
        async with self._http().post(url, json=payload) as resp:
            if resp.status >= 400 or "text/event-stream" not in resp.headers.get("Content-Type", ""):
                return _checked(url, resp.status, await _read_body(resp, url, cap))  # an error, or no stream
            async for line in _sse_lines(resp, url, cap):
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                try:
                    chunk = json.loads(data)
                except ValueError:
                    raise BackendError(f"{url} streamed a chunk that is not JSON: {data[:300]!r}") from None
                if isinstance(chunk, dict) and (chunk.get("error") or chunk.get("object") == "error"):
                    raise StreamedError(f"{url} streamed an error: {str(chunk.get('error') or chunk)[:500]}")
                if isinstance(chunk, dict):
                    acc.add(chunk)
        return acc.completion()

    def _wait(self, state: Any) -> float:
        """No wait when another replica is up; exponential back-off otherwise."""
        if len(self.replicas) > 1 and self._any_up():
            return 0.0
        return min(30.0, self.retry_wait_s * 2 ** (state.attempt_number - 1))

    async def _request(
        self,
        method: str,
        path: str,
        payload: dict | None,
        stream: bool,
        acc: _Stream | None,
        key: str | None = None,
        meta: dict[str, Any] | None = None,
    ) -> dict:
        attempts = self.max_retries + len(self.replicas)  # each extra replica is worth one more try
        retrying = AsyncRetrying(
            stop=stop_after_attempt(attempts),
            wait=self._wait,
            retry=retry_if_exception_type(_RetryableModelError),
            reraise=False,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    return await self._send(method, path, payload, stream, acc, key, meta if meta is not None else {})
        except RetryError as e:
            last = e.last_attempt.exception()
            raise ServerUnreachable(f"{last} (gave up after {attempts} attempts)") from last
        raise BackendError("unreachable")  # pragma: no cover

    def request(self, method: str, path: str, payload: dict | None = None) -> dict:
        return _event_loop().run(lambda: self._request(method, path, payload, False, None))

    def chat(self, payload: dict[str, Any], stream: bool = False, meta: dict[str, Any] | None = None) -> dict:
        """POST /chat/completions; the parsed JSON reply. With `stream`, the request streams (`stream: true`,
        usage asked for in the last chunk) and the chunks are assembled into the same shape of reply. The
        caller's `glasses_rag.core.calls.affinity` chooses the replica; `meta["replica"]` says which one answered."""
        meta = meta if meta is not None else {}
        key = current_affinity()  # read here: the request itself runs on the event loop's thread
        for _ in range(len(OPTIONAL_SAMPLING) + 1):  # each rejection teaches one adaptation at most
            body = self._adapted(payload)
            try:
                return self._chat(body, stream, key, meta)
            except BackendError as e:
                if not self._adapt_to(e, body):
                    raise
        return self._chat(self._adapted(payload), stream, key, meta)

    def _adapted(self, payload: dict[str, Any]) -> dict[str, Any]:
        body = {k: v for k, v in payload.items() if k not in self.dropped}
        if "repetition_penalty" in body and self.llamacpp():  # its own name; 1.1 is applied otherwise
            body["repeat_penalty"] = body.pop("repetition_penalty")
        if body.get("top_k") == 0:
            body["top_k"] = self.top_k_off
        if self.max_completion_tokens and "max_tokens" in body:
            body["max_completion_tokens"] = body.pop("max_tokens")
        return body

    def _adapt_to(self, e: BackendError, body: dict[str, Any]) -> bool:
        """Learn from a 400/422 that names a field this server does not take; False when it names none."""
        msg = str(e).lower()
        if e.status not in (400, 422) or isinstance(e, ContextTooLong):  # too long is no field's fault
            return False
        if body.get("top_k") == 0 and "top_k" in msg and "-1" in msg:  # "top_k must be -1 (disable) or at least 1"
            log.warning("%s takes -1, not 0, for no top-k; sending that from now on: %s", self.base_url, e)
            self.top_k_off = -1
            return True
        if "max_tokens" in body and "max_completion_tokens" in msg:
            log.warning(
                "%s asks for max_completion_tokens instead of max_tokens; sending that from now on: %s",
                self.base_url,
                e,
            )
            self.max_completion_tokens = True
            return True
        if not any(w in msg for w in _UNKNOWN_FIELD_WORDS):
            return False  # e.g. a value out of range is the config's error, not a field the server lacks
        named = [k for k in OPTIONAL_SAMPLING if k in body and re.search(rf"\b{k}\b", msg)]
        if not named:
            return False
        if set(named) & set(EXTENSION_SAMPLING):  # a server without one of vLLM's extensions lacks them all
            named = list(dict.fromkeys([*named, *(k for k in EXTENSION_SAMPLING if k in body)]))
        log.warning(
            "%s does not take the sampling field(s) %s; sending requests without them from now on: %s",
            self.base_url,
            ", ".join(named),
            e,
        )
        self.dropped.update(named)
        return True

    def _chat(self, payload: dict[str, Any], stream: bool, key: str | None, meta: dict[str, Any]) -> dict:
        if not stream:
            return _event_loop().run(
                lambda: self._request("POST", "/chat/completions", payload, False, None, key, meta)
            )
        body = {**payload, "stream": True, "stream_options": {"include_usage": True}}
        acc = _Stream()
        try:
            return _event_loop().run(lambda: self._request("POST", "/chat/completions", body, True, acc, key, meta))
        except RequestCancelled as e:
            e.partial = acc.completion()  # what had arrived when the turn ended, for the trace
            raise

    def unreachable(self, timeout_s: float = 3.0) -> list[str]:
        """The replicas that take no TCP connection within `timeout_s`, each with the reason: a check at warm-up,
        before a run spends minutes retrying a server that is not there (no HTTP request is sent).

        Example: `OpenAIClient("http://127.0.0.1:9/v1").unreachable()` -> `["http://127.0.0.1:9/v1: Connection
        refused"]`."""
        down = []
        for r in self.replicas:
            url = urlsplit(r.base_url)
            port = url.port or (443 if url.scheme == "https" else 80)
            try:
                socket.create_connection((url.hostname or "localhost", port), timeout=timeout_s).close()
            except OSError as e:
                down.append(f"{public_url(r.base_url)}: {e.strerror or type(e).__name__}")
        return down

    def models(self) -> list[str]:
        data = self.request("GET", "/models")
        return [m["id"] for m in data.get("data", []) if isinstance(m, dict) and m.get("id")]

    def llamacpp(self) -> bool:
        """Whether the server is one of llama.cpp's (llama-server, llama-cpp-python's server: `owned_by`
        'llamacpp' or 'me'), which read `repeat_penalty`, not `repetition_penalty`. Asked once."""
        if self._owned_by is None:
            self._owned_by = self.owners()
        return bool(self._owned_by & LLAMACPP_OWNERS)

    def owners(self) -> set[str]:
        """The `owned_by` of each model the first replica lists ('vllm', 'sglang', 'llamacpp' for llama-server,
        'me' for llama-cpp-python's server), asked once, within 5 s, outside the replicas' bookkeeping (a probe
        that fails says nothing about the replica); empty when it answers none."""
        return _event_loop().run(self._owners)

    async def _owners(self) -> set[str]:
        url = f"{self.base_url}/models"
        try:
            async with asyncio.timeout(min(5.0, self.timeout_s)), self._http().get(url) as resp:
                text = await _read_body(resp, url, NO_MAX_TOKENS_BYTES)
            data = json.loads(text) if resp.status == 200 else {}
        except (TimeoutError, aiohttp.ClientError, BackendError, ValueError) as e:
            log.debug("%s did not answer: %s", url, e)
            return set()
        models = data.get("data") if isinstance(data, dict) else None
        return {str(m["owned_by"]) for m in models or [] if isinstance(m, dict) and m.get("owned_by")}


def _checked(url: str, status: int, text: str) -> dict:
    """The reply's JSON object, or the error its status and text say (retryable, too long, refused)."""
    if status == 429 or (status >= 500 and not _says_unsupported(text)):
        raise _RetryableModelError(f"server error {status} from {url}: {text[:500]}", replica_fault=status != 429)
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


async def _read_body(resp: aiohttp.ClientResponse, url: str, cap: int) -> str:
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


async def _sse_lines(resp: aiohttp.ClientResponse, url: str, cap: int) -> AsyncIterator[str]:
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
_UNKNOWN_FIELD_WORDS = (
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
