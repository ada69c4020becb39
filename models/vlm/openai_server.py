"""A ChatBackend over any OpenAI-compatible /chat/completions server (vLLM, llama.cpp server, SGLang, ...)."""

from __future__ import annotations

import logging
import os
import time
from typing import Any

import httpx
from tenacity import RetryError, Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from models.vlm.base import BackendError, ChatReply, ChatToolCall, Usage, parse_arguments

log = logging.getLogger(__name__)


class _Retryable(Exception):
    """A failure worth another try: connection error, timeout, 5xx or 429."""


def _is_retryable(e: BaseException) -> bool:
    return isinstance(e, _Retryable)


class OpenAICompatibleBackend:
    """POST {base_url}/chat/completions with native `tools` (tool_choice="auto").

    Retries (tenacity, exponential backoff) on connection errors, timeouts, 5xx and 429; a
    4xx is an error at once. When the server rejects native tools (vLLM started without
    `--enable-auto-tool-choice --tool-call-parser ...`), the request is resent once without
    them and `supports_native_tools` turns False: the policy's text JSON protocol still works.
    `model=None` asks the server's /models for the first model it serves.
    """

    supports_images = True

    def __init__(self, base_url: str, model: str | None = None, api_key: str | None = None, timeout_s: float = 120.0,
                 max_retries: int = 3, retry_wait_s: float = 0.5, native_tools: bool = True,
                 extra_body: dict[str, Any] | None = None, client: httpx.Client | None = None):
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key if api_key is not None else (os.environ.get("OPENAI_API_KEY") or os.environ.get("VLLM_API_KEY"))
        self.timeout_s = timeout_s
        self.max_retries = max(0, int(max_retries))
        self.retry_wait_s = retry_wait_s
        self.supports_native_tools = native_tools
        self.extra_body = extra_body or {}
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        self._client = client or httpx.Client(timeout=httpx.Timeout(timeout_s, connect=min(10.0, timeout_s)), headers=headers)
        self.model = model or self._first_model()
        self.name = f"openai:{self.model}"

    def close(self) -> None:
        self._client.close()

    # ---- HTTP ---------------------------------------------------------------------------------

    def _send(self, method: str, path: str, payload: dict | None = None) -> dict:
        url = f"{self.base_url}{path}"
        try:
            r = self._client.request(method, url, json=payload)
        except httpx.TimeoutException as e:
            raise _Retryable(f"timed out after {self.timeout_s:g}s waiting for {url} ({type(e).__name__})") from e
        except httpx.TransportError as e:
            raise _Retryable(f"cannot reach {url}: {type(e).__name__}: {e} (is the server running? e.g. "
                             f"`vllm serve <model> --enable-auto-tool-choice --tool-call-parser hermes`)") from e
        if r.status_code >= 500 or r.status_code == 429:
            raise _Retryable(f"server error {r.status_code} from {url}: {r.text[:500]}")
        if r.status_code >= 400:
            raise BackendError(f"request rejected by {url} with {r.status_code}: {r.text[:1000]}")
        try:
            return r.json()
        except ValueError as e:
            raise BackendError(f"{url} answered {r.status_code} with non-JSON: {r.text[:300]!r}") from e

    def _request(self, method: str, path: str, payload: dict | None = None) -> dict:
        retrying = Retrying(stop=stop_after_attempt(self.max_retries + 1),
                            wait=wait_exponential(multiplier=self.retry_wait_s, max=30),
                            retry=retry_if_exception(_is_retryable), reraise=False)
        try:
            for attempt in retrying:
                with attempt:
                    return self._send(method, path, payload)
        except RetryError as e:
            last = e.last_attempt.exception()
            raise BackendError(f"{last} (gave up after {self.max_retries + 1} attempts)") from last
        raise BackendError("unreachable")  # pragma: no cover

    def _first_model(self) -> str:
        data = self._request("GET", "/models")
        ids = [m.get("id") for m in data.get("data", []) if isinstance(m, dict) and m.get("id")]
        if not ids:
            raise BackendError(f"{self.base_url}/models lists no model; give one as openai:<base_url>#<model>")
        return ids[0]

    # ---- ChatBackend ------------------------------------------------------------------------

    def complete(self, messages: list[dict], tools: list[dict] | None = None, max_tokens: int = 512,
                 temperature: float = 0.0) -> ChatReply:
        payload: dict[str, Any] = {"model": self.model, "messages": messages, "max_tokens": max_tokens,
                                   "temperature": temperature, **self.extra_body}
        if tools and self.supports_native_tools:
            payload["tools"] = tools
            payload["tool_choice"] = "auto"
        t0 = time.perf_counter()
        try:
            data = self._request("POST", "/chat/completions", payload)
        except BackendError as e:
            msg = str(e).lower()
            if "tools" in payload and " 400" in msg and "tool" in msg:
                log.warning("server rejected native tools; falling back to the text JSON protocol: %s", e)
                self.supports_native_tools = False
                payload.pop("tools"), payload.pop("tool_choice")
                data = self._request("POST", "/chat/completions", payload)
            else:
                raise
        latency = (time.perf_counter() - t0) * 1000.0
        return self.parse_response(data, latency)

    @staticmethod
    def parse_response(data: dict, latency_ms: float = 0.0) -> ChatReply:
        choices = data.get("choices") or []
        if not choices or not isinstance(choices[0], dict):
            raise BackendError(f"reply has no choices: {str(data)[:300]}")
        msg = choices[0].get("message") or {}
        content = msg.get("content")
        if isinstance(content, list):  # some servers return content parts
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        text = content or ""
        calls = []
        for tc in msg.get("tool_calls") or []:
            fn = (tc or {}).get("function") or {}
            if fn.get("name"):
                calls.append(ChatToolCall(name=fn["name"], arguments=parse_arguments(fn.get("arguments")), id=tc.get("id")))
        u = data.get("usage") or {}
        return ChatReply(text=text or "", tool_calls=calls,
                         usage=Usage(input_tokens=int(u.get("prompt_tokens") or 0), output_tokens=int(u.get("completion_tokens") or 0)),
                         latency_ms=latency_ms, finish_reason=choices[0].get("finish_reason"), model=data.get("model"))
