"""A client for SerpApi-compatible search APIs (Google web search, Google Lens), and readers of their JSON.

SuperLens searches the open web with SerpApi's Google search and Google Lens engines. Requests are
`GET {base_url}/search.json?engine=google&q=...&api_key=...` and `...engine=google_lens&url=<public image url>`.
The key is read from the environment (SERPAPI_API_KEY by default) at call time, so a missing key is a clear
`SerpApiError` inside the tool call (a tool error in the trace), never a crash at start-up. The base URL is
configurable (SERPAPI_BASE_URL), which is how tests point it at a local fixture server.

Retries follow the project's HTTP policy (models.openai_client): tenacity, exponential back-off, on connection
errors, timeouts, 429 and 5xx; any other 4xx and an `error` in the JSON fail at once with the server's message.
"""

from __future__ import annotations

import os
from typing import Any

import httpx
from tenacity import RetryError, Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

DEFAULT_BASE_URL = "https://serpapi.com"
KEY_ENV = "SERPAPI_API_KEY"
BASE_URL_ENV = "SERPAPI_BASE_URL"
# SerpApi answers a search with no results with an `error` and status Success: that is an empty list, not a failure.
NO_RESULTS = ("hasn't returned any results", "has not returned any results", "no results")


class SerpApiError(RuntimeError):
    """The search API could not produce results (no key, unreachable, rejected, or an error reply)."""


class _Retryable(Exception):
    pass


class SerpApiClient:
    def __init__(self, base_url: str | None = None, api_key: str | None = None, *, key_env: str = KEY_ENV,
                 timeout_s: float = 20.0, max_retries: int = 2, retry_wait_s: float = 0.5,
                 client: httpx.Client | None = None):
        self.base_url = (base_url or os.environ.get(BASE_URL_ENV) or DEFAULT_BASE_URL).rstrip("/")
        self._api_key = api_key
        self.key_env = key_env
        self.timeout_s = timeout_s
        self.max_retries = max(0, int(max_retries))
        self.retry_wait_s = retry_wait_s
        self._http = client or httpx.Client(timeout=httpx.Timeout(timeout_s, connect=min(10.0, timeout_s)))

    def close(self) -> None:
        self._http.close()

    def api_key(self) -> str:
        key = self._api_key or os.environ.get(self.key_env)
        if not key:
            raise SerpApiError(f"no SerpApi key: set the environment variable {self.key_env}")
        return key

    def _send(self, params: dict[str, Any]) -> dict:
        url = f"{self.base_url}/search.json"
        try:
            r = self._http.get(url, params=params)
        except httpx.TimeoutException as e:
            raise _Retryable(f"timed out after {self.timeout_s:g}s waiting for {url}") from e
        except httpx.TransportError as e:
            raise _Retryable(f"cannot reach {url}: {type(e).__name__}: {e}") from e
        if r.status_code >= 500 or r.status_code == 429:
            raise _Retryable(f"search API error {r.status_code} from {url}: {r.text[:300]}")
        try:
            data = r.json()
        except ValueError:
            raise SerpApiError(f"{url} answered {r.status_code} with non-JSON: {r.text[:300]!r}") from None
        if not isinstance(data, dict):
            raise SerpApiError(f"{url} answered with JSON that is not an object")
        err = data.get("error")
        if err and not any(s in str(err).lower() for s in NO_RESULTS):
            raise SerpApiError(f"search API refused the request ({r.status_code}): {str(err)[:500]}")
        if r.status_code >= 400:
            raise SerpApiError(f"search API rejected the request with {r.status_code}: {r.text[:500]}")
        return data

    def search(self, params: dict[str, Any]) -> dict:
        """One request with retries; the parsed JSON reply."""
        params = {k: v for k, v in params.items() if v is not None and v != ""}
        params["api_key"] = self.api_key()
        retrying = Retrying(stop=stop_after_attempt(self.max_retries + 1),
                            wait=wait_exponential(multiplier=self.retry_wait_s, max=20),
                            retry=retry_if_exception_type(_Retryable), reraise=False)
        try:
            for attempt in retrying:
                with attempt:
                    return self._send(params)
        except RetryError as e:
            raise SerpApiError(f"{e.last_attempt.exception()} (gave up after {self.max_retries + 1} attempts)") from None
        raise SerpApiError("unreachable")  # pragma: no cover

    def google(self, q: str, num: int = 10, **extra: Any) -> dict:
        return self.search({"engine": "google", "q": q, "num": num, **extra})

    def google_lens(self, image_url: str, **extra: Any) -> dict:
        return self.search({"engine": "google_lens", "url": image_url, **extra})


# ---------------------------------------------------------------------------------------------------------------
# Reading replies (field names from serpapi.com/organic-results, /knowledge-graph, /google-lens-api)


def _s(v: Any) -> str:
    return " ".join(str(v).split()) if v is not None else ""


def web_results(data: dict, k: int) -> list[dict[str, Any]]:
    """engine=google -> [{title, url, snippet, position, kind}]: the answer box and knowledge graph first (when
    present), then `organic_results` in order; at most `k` organic results."""
    out: list[dict[str, Any]] = []
    box = data.get("answer_box")
    if isinstance(box, dict):
        text = _s(box.get("answer") or box.get("snippet") or box.get("result"))
        if text:
            out.append({"title": _s(box.get("title")) or "answer box", "url": box.get("link"), "snippet": text,
                        "position": 0, "kind": "answer_box"})
    kg = data.get("knowledge_graph")
    if isinstance(kg, dict) and kg.get("title"):
        desc = _s(kg.get("description"))
        kind = _s(kg.get("type"))
        out.append({"title": _s(kg.get("title")), "url": kg.get("website") or (kg.get("source") or {}).get("link"),
                    "snippet": "; ".join(x for x in (kind, desc) if x), "position": 0, "kind": "knowledge_graph"})
    organic = [r for r in data.get("organic_results") or [] if isinstance(r, dict) and r.get("link")]
    for i, r in enumerate(organic[:k]):
        out.append({"title": _s(r.get("title")), "url": r["link"], "snippet": _s(r.get("snippet") or r.get("title")),
                    "position": int(r.get("position") or i + 1), "kind": "organic"})
    return out


def lens_results(data: dict, k: int) -> list[dict[str, Any]]:
    """engine=google_lens -> [{title, url, snippet, position, kind, source}]: `knowledge_graph` entries (a list in
    the older layout; not always present) as kind "entity", then `visual_matches` in order (at most `k`)."""
    out: list[dict[str, Any]] = []
    kg = data.get("knowledge_graph")
    for e in kg if isinstance(kg, list) else []:
        if isinstance(e, dict) and e.get("title"):
            out.append({"title": _s(e["title"]), "url": e.get("link"), "snippet": _s(e.get("subtitle")),
                        "position": 0, "kind": "entity", "source": _s(e.get("source") or "")})
    matches = [m for m in data.get("visual_matches") or [] if isinstance(m, dict) and (m.get("title") or m.get("link"))]
    for i, m in enumerate(matches[:k]):
        out.append({"title": _s(m.get("title")), "url": m.get("link"), "snippet": _s(m.get("title")),
                    "position": int(m.get("position") or i + 1), "kind": "visual_match", "source": _s(m.get("source"))})
    return out
