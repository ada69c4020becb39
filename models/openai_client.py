"""The one client for OpenAI-compatible HTTP servers (vLLM, llama.cpp server, SGLang, OpenAI): one retry policy.

Used by the model backend (models/vlm/openai_server.py), the LLM judges (crag.scoring, traces.superglasses)
and anything else that talks to such a server. Retries with tenacity (exponential backoff) on connection
errors, timeouts, 429 and 5xx; any other 4xx is a `BackendError` at once, with the server's message.
"""

from __future__ import annotations

import os
from typing import Any

import httpx
from tenacity import RetryError, Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential


class BackendError(RuntimeError):
    """A server could not produce a reply (down, request rejected, bad reply)."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


class _Retryable(Exception):
    """A failure worth another try: connection error, timeout, 5xx or 429."""


def api_base(url: str) -> str:
    """`http://host:8000` or `http://host:8000/v1` -> the base that `/chat/completions` is appended to."""
    base = url.rstrip("/")
    return base if base.endswith("/v1") or "/v1/" in base + "/" else base + "/v1"


class OpenAIClient:
    def __init__(self, base_url: str, api_key: str | None = None, *, timeout_s: float = 60.0, max_retries: int = 3,
                 retry_wait_s: float = 0.5, pool_size: int = 20, client: httpx.Client | None = None):
        self.base_url = api_base(base_url)
        key = api_key if api_key is not None else (os.environ.get("OPENAI_API_KEY") or os.environ.get("VLLM_API_KEY"))
        self.timeout_s = timeout_s
        self.max_retries = max(0, int(max_retries))
        self.retry_wait_s = retry_wait_s
        headers = {"Content-Type": "application/json"}
        if key:
            headers["Authorization"] = f"Bearer {key}"
        limits = httpx.Limits(max_connections=pool_size, max_keepalive_connections=pool_size)
        self._http = client or httpx.Client(timeout=httpx.Timeout(timeout_s, connect=min(10.0, timeout_s)),
                                            headers=headers, limits=limits)

    def close(self) -> None:
        self._http.close()

    def _send(self, method: str, path: str, payload: dict | None) -> dict:
        url = f"{self.base_url}{path}"
        try:
            r = self._http.request(method, url, json=payload)
        except httpx.TimeoutException as e:
            raise _Retryable(f"timed out after {self.timeout_s:g}s waiting for {url} ({type(e).__name__})") from e
        except httpx.TransportError as e:
            raise _Retryable(f"cannot reach {url}: {type(e).__name__}: {e} (is the server running?)") from e
        if r.status_code >= 500 or r.status_code == 429:
            raise _Retryable(f"server error {r.status_code} from {url}: {r.text[:500]}")
        if r.status_code >= 400:
            raise BackendError(f"request rejected by {url} with {r.status_code}: {r.text[:1000]}", status=r.status_code)
        try:
            data = r.json()
        except ValueError as e:
            raise BackendError(f"{url} answered {r.status_code} with non-JSON: {r.text[:300]!r}") from e
        if not isinstance(data, dict):
            raise BackendError(f"{url} answered with JSON that is not an object: {str(data)[:300]}")
        return data

    def request(self, method: str, path: str, payload: dict | None = None) -> dict:
        retrying = Retrying(stop=stop_after_attempt(self.max_retries + 1),
                            wait=wait_exponential(multiplier=self.retry_wait_s, max=30),
                            retry=retry_if_exception_type(_Retryable), reraise=False)
        try:
            for attempt in retrying:
                with attempt:
                    return self._send(method, path, payload)
        except RetryError as e:
            last = e.last_attempt.exception()
            raise BackendError(f"{last} (gave up after {self.max_retries + 1} attempts)") from last
        raise BackendError("unreachable")  # pragma: no cover

    def chat(self, payload: dict[str, Any]) -> dict:
        """POST /chat/completions; the parsed JSON reply."""
        return self.request("POST", "/chat/completions", payload)

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
