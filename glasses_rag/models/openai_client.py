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
import json
import logging
import re
import socket
import threading
import weakref
from collections.abc import Callable, Coroutine, Sequence
from concurrent.futures import Future
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from tenacity import AsyncRetrying, RetryError, retry_if_exception_type, stop_after_attempt

from glasses_rag.core.calls import current_affinity, current_scope
from glasses_rag.core.credentials import public_url
from glasses_rag.models.openai_replies import (
    UNKNOWN_FIELD_WORDS,
    BackendError,
    ContextTooLong,
    ReplyTooLarge,
    RequestCancelled,
    RetryableServerError,
    ServerUnreachable,
    StreamedCompletion,
    StreamedError,
    checked_reply,
    read_body,
    reasoning_of,
    reply_text,
    sse_lines,
)
from glasses_rag.models.replicas import ReplicaPool
from glasses_rag.models.request_body import dumps_body

# re-exported: the client's errors and reply readers, where the backends and judges import them
__all__ = [
    "BackendError",
    "ContextTooLong",
    "OpenAIClient",
    "ReplyTooLarge",
    "RequestCancelled",
    "ServerUnreachable",
    "StreamedError",
    "api_base",
    "dumps_body",
    "pool_size_for",
    "reasoning_of",
    "reply_byte_cap",
    "reply_text",
]

log = logging.getLogger(__name__)

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
        self.pool = ReplicaPool([api_base(u) for u in urls], max_outstanding)
        self.replicas = self.pool.replicas
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

    # ---- requests ------------------------------------------------------------------------------------------

    async def _send(
        self,
        method: str,
        path: str,
        payload: dict | None,
        stream: bool,
        acc: StreamedCompletion | None,
        key: str | None,
        meta: dict[str, Any],
    ) -> dict:
        r = self.pool.pick(key)
        meta["replica"] = r.base_url
        url = f"{r.base_url}{path}"
        cap = reply_byte_cap(payload)
        failed = False
        try:
            async with asyncio.timeout(self.timeout_s):
                if stream:
                    return await self._stream(url, payload, acc, cap)
                async with self._http().request(method, url, json=payload) as resp:
                    return checked_reply(url, resp.status, await read_body(resp, url, cap))
        except TimeoutError as e:
            failed = True
            raise RetryableServerError(f"timed out after {self.timeout_s:g}s waiting for {url}") from e
        except aiohttp.ClientError as e:
            failed = True
            raise RetryableServerError(f"cannot reach {url}: {type(e).__name__}: {e} (is the server running?)") from e
        except RetryableServerError as e:
            failed = e.replica_fault
            raise
        finally:
            self.pool.release(r, failed)

    async def _stream(self, url: str, payload: dict | None, acc: StreamedCompletion | None, cap: int) -> dict:
        acc = acc if acc is not None else StreamedCompletion()
        acc.reset()  # a retried attempt starts over
        async with self._http().post(url, json=payload) as resp:
            if resp.status >= 400 or "text/event-stream" not in resp.headers.get("Content-Type", ""):
                return checked_reply(url, resp.status, await read_body(resp, url, cap))  # an error, or no stream
            async for line in sse_lines(resp, url, cap):
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
        if len(self.replicas) > 1 and self.pool.any_up():
            return 0.0
        return min(30.0, self.retry_wait_s * 2 ** (state.attempt_number - 1))

    async def _request(
        self,
        method: str,
        path: str,
        payload: dict | None,
        stream: bool,
        acc: StreamedCompletion | None,
        key: str | None = None,
        meta: dict[str, Any] | None = None,
    ) -> dict:
        attempts = self.max_retries + len(self.replicas)  # each extra replica is worth one more try
        retrying = AsyncRetrying(
            stop=stop_after_attempt(attempts),
            wait=self._wait,
            retry=retry_if_exception_type(RetryableServerError),
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
        if not any(w in msg for w in UNKNOWN_FIELD_WORDS):
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
        acc = StreamedCompletion()
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
                text = await read_body(resp, url, NO_MAX_TOKENS_BYTES)
            data = json.loads(text) if resp.status == 200 else {}
        except (TimeoutError, aiohttp.ClientError, BackendError, ValueError) as e:
            log.debug("%s did not answer: %s", url, e)
            return set()
        models = data.get("data") if isinstance(data, dict) else None
        return {str(m["owned_by"]) for m in models or [] if isinstance(m, dict) and m.get("owned_by")}
