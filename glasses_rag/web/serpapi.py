"""A client for SerpApi-compatible search APIs (Google web search, Google Lens), and readers of their JSON.

SuperLens searches the open web with SerpApi's Google search and Google Lens engines. Requests are
`GET {base_url}/search.json?engine=google&q=...&api_key=...` and `...engine=google_lens&url=<public image url>`.
The key is read from the environment (SERPAPI_API_KEY by default) at call time, so a missing key is a clear
`SerpApiError` inside the tool call (a tool error in the trace), never a crash at start-up. SerpApi takes the key
only as a URL parameter, so it stays there, and every logger that prints URLs redacts it (glasses_rag.web.redact). The
base URL is configured by the operator (SERPAPI_BASE_URL), not taken from search results: it is not subject to the
fetch policy, but its replies have the same total deadline, cancellation and byte bound as pages
(glasses_rag.web.guarded_http): a reply over `max_bytes` is an error, and at most `max_items` items of a list are read.

Retries follow the project's HTTP policy (glasses_rag.models.openai_client): tenacity, exponential back-off, on
connection errors, timeouts, 429 and 5xx; any other 4xx and an `error` in the JSON fail at once with the server's
message. The back-off sleeps stop when the turn ends.

Readers (`web_results`, `lens_results`) validate each item with a pydantic model, cut its text fields, and skip a
malformed item with a note that names it (`organic_results[3] skipped: position: ...`), keeping the rest.
"""

from __future__ import annotations

import json
import os
import time
from typing import Annotated, Any

import httpx
from pydantic import BaseModel, BeforeValidator, Field, ValidationError
from tenacity import RetryError, Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from glasses_rag.core.calls import current_scope
from glasses_rag.web.config import DEFAULT_BASE_URL, KEY_ENV, MB
from glasses_rag.web.guarded_http import deadline, guarded_client, read_body
from glasses_rag.web.redact import install_log_redaction, redact

BASE_URL_ENV = "SERPAPI_BASE_URL"
# SerpApi answers a search with no results with an `error` and status Success: that is an empty list, not a failure.
NO_RESULTS = ("hasn't returned any results", "has not returned any results", "no results")
TITLE_CHARS, SNIPPET_CHARS, URL_CHARS = 300, 2000, 2048


class SerpApiError(RuntimeError):
    """The search API could not produce results (no key, unreachable, rejected, or an error reply)."""


class _RetryableSearchError(Exception):
    pass


def _cancellable_sleep(seconds: float) -> None:
    end = time.monotonic() + seconds
    scope = current_scope()
    while (left := end - time.monotonic()) > 0:
        if scope is not None:
            scope.raise_if_cancelled()
        time.sleep(min(left, 0.05))


class SerpApiClient:
    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        key_env: str = KEY_ENV,
        timeout_s: float = 20.0,
        max_retries: int = 2,
        retry_wait_s: float = 0.5,
        max_bytes: int = 8 * MB,
        client: httpx.Client | None = None,
    ):
        install_log_redaction()
        self.base_url = (base_url or os.environ.get(BASE_URL_ENV) or DEFAULT_BASE_URL).rstrip("/")
        self._api_key = api_key
        self.key_env = key_env
        self.timeout_s = timeout_s
        self.max_retries = max(0, int(max_retries))
        self.retry_wait_s = retry_wait_s
        self.max_bytes = max_bytes
        self._http = client or guarded_client(None, timeout_s=timeout_s)

    def close(self) -> None:
        self._http.close()

    def api_key(self) -> str:
        key = self._api_key or os.environ.get(self.key_env)
        if not key:
            raise SerpApiError(f"no SerpApi key: set the environment variable {self.key_env}")
        return key

    def _get(self, url: str, params: dict[str, Any]) -> tuple[int, bytes]:
        with deadline(self.timeout_s), self._http.stream("GET", url, params=params) as r:
            body, truncated = read_body(r, self.max_bytes)
            if truncated:
                raise SerpApiError(f"{url} answered with more than {self.max_bytes} bytes: reply refused")
            return r.status_code, body

    def _send(self, params: dict[str, Any]) -> dict:
        try:
            return self._request(params)
        except (SerpApiError, _RetryableSearchError) as e:  # a server may echo the key in its error text
            key = str(params.get("api_key") or "")
            if key and key in str(e):
                raise type(e)(str(e).replace(key, "***")) from None
            raise

    def _request(self, params: dict[str, Any]) -> dict:
        url = f"{self.base_url}/search.json"
        try:
            status, body = self._get(url, params)
        except httpx.TimeoutException as e:
            raise _RetryableSearchError(f"timed out waiting for {url}: {e}") from e
        except httpx.TransportError as e:
            raise _RetryableSearchError(f"cannot reach {url}: {type(e).__name__}: {e}") from e
        except httpx.HTTPError as e:  # e.g. a body that cannot be decoded
            raise SerpApiError(f"unusable reply from {url}: {type(e).__name__}: {e}") from e
        text = body[:300].decode("utf-8", errors="replace")
        if status >= 500 or status == 429:
            raise _RetryableSearchError(f"search API error {status} from {url}: {redact(text)}")
        try:
            data = json.loads(body)
        except ValueError:
            raise SerpApiError(f"{url} answered {status} with non-JSON: {redact(text)!r}") from None
        if not isinstance(data, dict):
            raise SerpApiError(f"{url} answered with JSON that is not an object")
        err = data.get("error")
        if err and not any(s in str(err).lower() for s in NO_RESULTS):
            raise SerpApiError(f"search API refused the request ({status}): {redact(str(err)[:500])}")
        if status >= 400:
            raise SerpApiError(f"search API rejected the request with {status}: {redact(text)}")
        return data

    def search(self, params: dict[str, Any]) -> dict:
        """One request with retries; the parsed JSON reply."""
        params = {k: v for k, v in params.items() if v is not None and v != ""}
        params["api_key"] = self.api_key()
        retrying = Retrying(
            stop=stop_after_attempt(self.max_retries + 1),
            wait=wait_exponential(multiplier=self.retry_wait_s, max=20),
            sleep=_cancellable_sleep,
            retry=retry_if_exception_type(_RetryableSearchError),
            reraise=False,
        )
        try:
            for attempt in retrying:
                with attempt:
                    return self._send(params)
        except RetryError as e:
            raise SerpApiError(
                f"{e.last_attempt.exception()} (gave up after {self.max_retries + 1} attempts)"
            ) from None
        raise SerpApiError("unreachable")  # pragma: no cover

    def google(self, q: str, num: int = 10, **extra: Any) -> dict:
        return self.search({"engine": "google", "q": q, "num": num, **extra})

    def google_lens(self, image_url: str, **extra: Any) -> dict:
        return self.search({"engine": "google_lens", "url": image_url, **extra})


# ---------------------------------------------------------------------------------------------------------------
# Reading replies (field names from serpapi.com/organic-results, /knowledge-graph, /google-lens-api)


def _text(cap: int):
    def clean(v: Any) -> str:
        if v is None:
            return ""
        if not isinstance(v, (str, int, float)):
            raise ValueError(f"expected text, got {type(v).__name__}")
        return " ".join(str(v).split())[:cap]

    return BeforeValidator(clean)


def _link(v: Any) -> str | None:
    if v is None or v == "":
        return None
    if not isinstance(v, str) or len(v) > URL_CHARS or not v.lower().startswith(("http://", "https://")):
        raise ValueError(f"not an http(s) link of at most {URL_CHARS} characters")
    return v


Title = Annotated[str, _text(TITLE_CHARS)]
Snippet = Annotated[str, _text(SNIPPET_CHARS)]
Link = Annotated[str | None, BeforeValidator(_link)]


class AnswerBox(BaseModel):
    title: Title = ""
    link: Link = None
    answer: Snippet = ""
    snippet: Snippet = ""
    result: Snippet = ""


class KnowledgeGraph(BaseModel):
    title: Title = ""
    type: Title = ""
    description: Snippet = ""
    website: Link = None
    source: dict[str, Any] = Field(default_factory=dict)


class Organic(BaseModel):
    link: Annotated[str, BeforeValidator(_link)]
    title: Title = ""
    snippet: Snippet = ""
    position: int | None = None


class LensEntity(BaseModel):
    title: Title
    link: Link = None
    subtitle: Snippet = ""
    source: Title = ""


class VisualMatch(BaseModel):
    title: Title = ""
    link: Link = None
    source: Title = ""
    position: int | None = None


class SearchResults(BaseModel):
    results: list[dict[str, Any]] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list, description="Items of the reply that were skipped, and why.")


def _why(e: ValidationError) -> str:
    err = e.errors()[0]
    where = ".".join(str(x) for x in err["loc"])
    return f"{where}: {err['msg']}" if where else err["msg"]


def _items(data: dict, name: str, model: type[BaseModel], max_items: int, notes: list[str]) -> list[Any]:
    raw = data.get(name)
    if raw is None:
        return []
    if not isinstance(raw, list):
        notes.append(f"{name} skipped: not a list")
        return []
    out = []
    for i, item in enumerate(raw[:max_items]):
        try:
            out.append(model.model_validate(item))
        except ValidationError as e:
            notes.append(f"{name}[{i}] skipped: {_why(e)}")
    if len(raw) > max_items:
        notes.append(f"{name}: only the first {max_items} of {len(raw)} items read")
    return out


def _one(data: dict, name: str, model: type[BaseModel], notes: list[str]) -> Any:
    raw = data.get(name)
    if not isinstance(raw, dict):
        return None
    try:
        return model.model_validate(raw)
    except ValidationError as e:
        notes.append(f"{name} skipped: {_why(e)}")
        return None


def _source_link(kg: KnowledgeGraph, notes: list[str]) -> str | None:
    """The knowledge graph's `source.link`, or None with a note when it is not a usable link (the entry is kept)."""
    src = kg.source.get("link")
    try:
        return _link(src)
    except ValueError as e:
        notes.append(f"knowledge_graph.source.link ignored: {e}")
        return None


def web_results(data: dict, k: int, max_items: int = 100) -> SearchResults:
    """engine=google -> [{title, url, snippet, position, kind}]: the answer box and knowledge graph first (when
    present), then `organic_results` in order; at most `k` organic results."""
    notes: list[str] = []
    out: list[dict[str, Any]] = []
    box = _one(data, "answer_box", AnswerBox, notes)
    if box is not None and (text := box.answer or box.snippet or box.result):
        out.append(
            {"title": box.title or "answer box", "url": box.link, "snippet": text, "position": 0, "kind": "answer_box"}
        )
    kg = _one(data, "knowledge_graph", KnowledgeGraph, notes)
    if kg is not None and kg.title:
        out.append(
            {
                "title": kg.title,
                "url": kg.website or _source_link(kg, notes),
                "snippet": "; ".join(x for x in (kg.type, kg.description) if x),
                "position": 0,
                "kind": "knowledge_graph",
            }
        )
    for i, r in enumerate(_items(data, "organic_results", Organic, max_items, notes)[:k]):
        out.append(
            {
                "title": r.title,
                "url": r.link,
                "snippet": r.snippet or r.title,
                "position": r.position or i + 1,
                "kind": "organic",
            }
        )
    return SearchResults(results=out, notes=notes)


def lens_results(data: dict, k: int, max_items: int = 100) -> SearchResults:
    """engine=google_lens -> [{title, url, snippet, position, kind, source}]: `knowledge_graph` entries (a list in
    the older layout; not always present) as kind "entity", then `visual_matches` in order (at most `k`)."""
    notes: list[str] = []
    out: list[dict[str, Any]] = []
    if isinstance(data.get("knowledge_graph"), list):
        for e in _items(data, "knowledge_graph", LensEntity, max_items, notes):
            if e.title:
                out.append(
                    {
                        "title": e.title,
                        "url": e.link,
                        "snippet": e.subtitle,
                        "position": 0,
                        "kind": "entity",
                        "source": e.source,
                    }
                )
    matches = [m for m in _items(data, "visual_matches", VisualMatch, max_items, notes) if m.title or m.link]
    for i, m in enumerate(matches[:k]):
        out.append(
            {
                "title": m.title,
                "url": m.link,
                "snippet": m.title,
                "position": m.position or i + 1,
                "kind": "visual_match",
                "source": m.source,
            }
        )
    return SearchResults(results=out, notes=notes)
