"""The one client for OpenAI-compatible HTTP servers (vLLM, llama.cpp server, SGLang, OpenAI): one retry policy.

Used by the model backend (models/vlm/openai_server.py), the LLM judges (crag.scoring, traces.superglasses)
and anything else that talks to such a server. Retries with tenacity (exponential backoff) on connection
errors, timeouts, 429 and 5xx; any other 4xx is a `BackendError` at once, with the server's message.

Requests run on one asyncio event loop in a daemon thread (aiohttp, whose client costs a fraction of the CPU per
request that httpx's does: what limits how many conversations one process can drive), whatever thread asks. That
is what makes cancellation real: when the caller's `core.calls` scope is cancelled (its turn ended), the
request's task is cancelled and the unfinished response's connection is closed, so vLLM and llama.cpp servers stop
generating (vLLM aborts on disconnect for streamed and non-streamed requests; llama-cpp-python's server only for
streamed ones, hence `chat(..., stream=True)`, which assembles the SSE chunks into an ordinary completion).

Several base URLs (replicas of one model) are used by least outstanding requests; a replica that fails to
connect or answers 5xx is taken out for a cool-down (doubling, up to a minute) and tried again after it.
"""

from __future__ import annotations

import asyncio
import atexit
import itertools
import json
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Coroutine, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import aiohttp
from tenacity import AsyncRetrying, RetryError, retry_if_exception_type, stop_after_attempt

from core.calls import Cancelled, current_scope

log = logging.getLogger(__name__)

COOLDOWN_S = (1.0, 60.0)  # first and longest time a failed replica is left out


class BackendError(RuntimeError):
    """A server could not produce a reply (down, request rejected, bad reply)."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


class RequestCancelled(Cancelled):
    """The request was cancelled (its turn ended); `partial` is what had arrived (a completion dict) or None."""

    def __init__(self, message: str, partial: dict | None = None):
        super().__init__(message)
        self.partial = partial


class _Retryable(Exception):
    """A failure worth another try: connection error, timeout, 5xx or 429."""

    def __init__(self, message: str, replica_fault: bool = True):
        super().__init__(message)
        self.replica_fault = replica_fault


def api_base(url: str) -> str:
    """`http://host:8000` or `http://host:8000/v1` -> the base that `/chat/completions` is appended to."""
    base = url.rstrip("/")
    return base if base.endswith("/v1") or "/v1/" in base + "/" else base + "/v1"


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
            task: asyncio.Task = self.loop.create_task(make())
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
        self.calls: dict[int, dict[str, Any]] = {}
        self.finish: str | None = None
        self.usage: dict | None = None
        self.model: str | None = None
        self.role = "assistant"

    def add(self, chunk: dict) -> None:
        self.model = chunk.get("model") or self.model
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or choice.get("message") or {}
            if isinstance(delta.get("content"), str):
                self.text.append(delta["content"])
            for tc in delta.get("tool_calls") or []:
                slot = self.calls.setdefault(int(tc.get("index", len(self.calls))),
                                             {"id": None, "type": "function", "function": {"name": "", "arguments": ""}})
                slot["id"] = tc.get("id") or slot["id"]
                fn = tc.get("function") or {}
                slot["function"]["name"] += fn.get("name") or ""
                args = fn.get("arguments")
                slot["function"]["arguments"] += args if isinstance(args, str) else (json.dumps(args) if args else "")
            if choice.get("finish_reason"):
                self.finish = choice["finish_reason"]

    def completion(self) -> dict:
        msg: dict[str, Any] = {"role": self.role, "content": "".join(self.text)}
        if self.calls:
            msg["tool_calls"] = [self.calls[i] for i in sorted(self.calls)]
        out: dict[str, Any] = {"object": "chat.completion", "model": self.model,
                               "choices": [{"index": 0, "message": msg, "finish_reason": self.finish}]}
        if self.usage:
            out["usage"] = self.usage
        return out


class OpenAIClient:
    def __init__(self, base_url: str | Sequence[str], api_key: str | None = None, *, timeout_s: float = 60.0,
                 max_retries: int = 3, retry_wait_s: float = 0.5, pool_size: int = 16):
        urls = [base_url] if isinstance(base_url, str) else list(base_url)
        if not urls:
            raise ValueError("no base URL given")
        self.replicas = [Replica(api_base(u)) for u in urls]
        self.base_url = self.replicas[0].base_url
        key = api_key if api_key is not None else (os.environ.get("OPENAI_API_KEY") or os.environ.get("VLLM_API_KEY"))
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
        _CLIENTS.add(self)

    def _http(self) -> aiohttp.ClientSession:
        """Built on the loop thread at first use (a session belongs to one event loop). aiohttp sets TCP_NODELAY
        on its connections: small writes are not held back by Nagle's algorithm."""
        if self._session is None:
            connector = aiohttp.TCPConnector(limit=self.pool_size, limit_per_host=self.pool_size)
            self._session = aiohttp.ClientSession(
                connector=connector, headers=self._headers,
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=min(10.0, self.timeout_s)))
        return self._session

    def __del__(self) -> None:
        session = self._session
        if session is not None and not session.closed and _LOOP is not None:  # dropped without close(): close it
            try:
                _LOOP.loop.call_soon_threadsafe(lambda: _LOOP.loop.create_task(session.close()))
            except RuntimeError:  # the loop is gone (interpreter exit)
                pass

    def close(self) -> None:
        session, self._session = self._session, None
        if session is not None and not session.closed:
            try:
                _event_loop().run(session.close)
            except Exception as e:  # noqa: BLE001 - closing is best effort
                log.debug("closing the HTTP client failed: %s", e)

    # ---- replicas ------------------------------------------------------------------------------------------

    def _pick(self) -> Replica:
        """The healthy replica with the fewest outstanding requests (ties in turn); if none is healthy, the one
        whose cool-down ends first."""
        now = time.monotonic()
        with self._lock:
            up = [r for r in self.replicas if r.up(now)]
            if up:
                least = min(r.outstanding for r in up)
                ties = [r for r in up if r.outstanding == least]
                r = ties[next(self._turn) % len(ties)]
            else:
                r = min(self.replicas, key=lambda x: x.down_until)
            r.outstanding += 1
            return r

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

    async def _send(self, method: str, path: str, payload: dict | None, stream: bool, acc: _Stream | None) -> dict:
        r = self._pick()
        url = f"{r.base_url}{path}"
        failed = False
        try:
            async with asyncio.timeout(self.timeout_s):
                if stream:
                    return await self._stream(url, payload, acc)
                async with self._http().request(method, url, json=payload) as resp:
                    return self._check(url, resp.status, await resp.text(errors="replace"))
        except TimeoutError as e:
            failed = True
            raise _Retryable(f"timed out after {self.timeout_s:g}s waiting for {url}") from e
        except aiohttp.ClientError as e:
            failed = True
            raise _Retryable(f"cannot reach {url}: {type(e).__name__}: {e} (is the server running?)") from e
        except _Retryable as e:
            failed = e.replica_fault
            raise
        finally:
            self._release(r, failed)

    async def _stream(self, url: str, payload: dict | None, acc: _Stream | None) -> dict:
        acc = acc if acc is not None else _Stream()
        acc.reset()  # a retried attempt starts over
        async with self._http().post(url, json=payload) as resp:
            if resp.status >= 400 or "text/event-stream" not in resp.headers.get("Content-Type", ""):
                return self._check(url, resp.status, await resp.text(errors="replace"))  # an error, or no stream
            async for raw in resp.content:  # one SSE line at a time
                line = raw.decode("utf-8", "replace").strip()
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                try:
                    chunk = json.loads(data)
                except ValueError:
                    raise BackendError(f"{url} streamed a chunk that is not JSON: {data[:300]!r}") from None
                if isinstance(chunk, dict) and chunk.get("error"):
                    raise BackendError(f"{url} streamed an error: {str(chunk['error'])[:500]}")
                if isinstance(chunk, dict):
                    acc.add(chunk)
        return acc.completion()

    @staticmethod
    def _check(url: str, status: int, text: str) -> dict:
        if status >= 500 or status == 429:
            raise _Retryable(f"server error {status} from {url}: {text[:500]}", replica_fault=status != 429)
        if status >= 400:
            raise BackendError(f"request rejected by {url} with {status}: {text[:1000]}", status=status)
        try:
            data = json.loads(text)
        except ValueError:
            raise BackendError(f"{url} answered {status} with non-JSON: {text[:300]!r}") from None
        if not isinstance(data, dict):
            raise BackendError(f"{url} answered with JSON that is not an object: {str(data)[:300]}")
        return data

    def _wait(self, state: Any) -> float:
        """No wait when another replica is up; exponential back-off otherwise."""
        if len(self.replicas) > 1 and self._any_up():
            return 0.0
        return min(30.0, self.retry_wait_s * 2 ** (state.attempt_number - 1))

    async def _request(self, method: str, path: str, payload: dict | None, stream: bool, acc: _Stream | None) -> dict:
        attempts = self.max_retries + len(self.replicas)  # each extra replica is worth one more try
        retrying = AsyncRetrying(stop=stop_after_attempt(attempts), wait=self._wait,
                                 retry=retry_if_exception_type(_Retryable), reraise=False)
        try:
            async for attempt in retrying:
                with attempt:
                    return await self._send(method, path, payload, stream, acc)
        except RetryError as e:
            last = e.last_attempt.exception()
            raise BackendError(f"{last} (gave up after {attempts} attempts)") from last
        raise BackendError("unreachable")  # pragma: no cover

    def request(self, method: str, path: str, payload: dict | None = None) -> dict:
        return _event_loop().run(lambda: self._request(method, path, payload, False, None))

    def chat(self, payload: dict[str, Any], stream: bool = False) -> dict:
        """POST /chat/completions; the parsed JSON reply. With `stream`, the request streams (`stream: true`,
        usage asked for in the last chunk) and the chunks are assembled into the same shape of reply."""
        if not stream:
            return self.request("POST", "/chat/completions", payload)
        body = {**payload, "stream": True, "stream_options": {"include_usage": True}}
        acc = _Stream()
        try:
            return _event_loop().run(lambda: self._request("POST", "/chat/completions", body, True, acc))
        except RequestCancelled as e:
            e.partial = acc.completion()  # what had arrived when the turn ended, for the trace
            raise

    def models(self) -> list[str]:
        data = self.request("GET", "/models")
        return [m["id"] for m in data.get("data", []) if isinstance(m, dict) and m.get("id")]


def reply_text(data: dict[str, Any]) -> str:
    """The text of the first choice of a chat-completions reply ('' when there is none)."""
    choices = data.get("choices") or []
    if not choices or not isinstance(choices[0], dict):
        raise BackendError(f"reply has no choices: {str(data)[:300]}")
    content = (choices[0].get("message") or {}).get("content")
    if isinstance(content, list):  # some servers return content parts
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""
