"""Values every layer shares: what a search returns (Hit), a detected region (Box), a tool's short result (Fact),
the self-check's judgement (Verdict), an earlier turn (HistoryTurn), what the agent saw of the image (ImageInfo)
and one language-model request (ModelCall). Nothing here imports another package of the project."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from typing import Any, Literal

from pydantic import BaseModel, Field, PrivateAttr, field_validator

from glasses_rag.core.credentials import public_url

RAW_REPLY_LIMIT = 4096  # characters of a model's raw reply kept per call
TRANSPORT_ERROR = "ServerUnreachable"  # a model call's error starting with this: the server could not be reached
DecisionMode = Literal["structured", "json_object", "native_tools", "json_text", "text"]


def finite_score(v: Any) -> Any:
    """Non-finite scores (NaN, inf from a junk backend or model) become 0.0: JSON has no NaN, and a
    NaN written as null would make the trace unreadable."""
    return 0.0 if isinstance(v, float) and not math.isfinite(v) else v


class Box(BaseModel):
    """A detected region, in pixels of the image the agent saw."""

    x0: int
    y0: int
    x1: int
    y1: int
    label: str = ""
    score: float = 0.0
    method: str = ""

    _finite_score = field_validator("score")(finite_score)

    def area(self) -> int:
        return max(0, self.x1 - self.x0) * max(0, self.y1 - self.y0)


class Hit(BaseModel):
    """One retrieved item, from the image KG or the web, in a form every tool and the trace share."""

    source: Literal["image_kg", "web"]
    score: float
    snippet: str = ""
    url: str | None = None
    title: str | None = None
    entity_name: str | None = None
    attributes: dict[str, Any] | None = None
    content: str | None = Field(None, description="Full page text, when the backend can provide it.")
    query: str | None = None
    rerank_score: float | None = None

    _finite_scores = field_validator("score", "rerank_score")(finite_score)

    def key(self) -> tuple:
        return (self.source, self.url, self.entity_name, self.snippet)

    def text(self) -> str:
        """Flat text for embedding, reranking and support checks."""
        if self.source == "image_kg":
            attrs = "; ".join(f"{k}: {v}" for k, v in (self.attributes or {}).items())
            return f"{self.entity_name}. {attrs}".strip()
        return f"{self.title or ''}. {self.content or self.snippet}".strip()


class Fact(BaseModel):
    """A short result that is neither a search hit nor image text, e.g. a unit conversion.

    Facts reach the answer step: policies may answer from them."""

    text: str
    source: str = Field(description="The tool that produced it.")
    value: str | None = Field(None, description="The answer-ready part of the fact, when the tool knows it.")
    about: str | None = Field(None, description="What the fact is about (an entity or a sub-question).")
    confidence: float = Field(1.0, ge=0.0, le=1.0)


class Verdict(BaseModel):
    """The self-check's judgement of a draft answer."""

    supported: bool
    confidence: float
    reason: str
    method: str = ""

    _finite_confidence = field_validator("confidence")(finite_score)


class HistoryTurn(BaseModel):
    """An earlier turn of the same conversation, as the agent itself answered it."""

    question: str
    answer: str
    entity: str | None = None


class ImageInfo(BaseModel):
    """What the agent saw: sizes before and after preparation, and why there is no image when there is none."""

    original_size: tuple[int, int] | None = None
    size: tuple[int, int] | None = Field(None, description="Width and height the agent saw; boxes are in these pixels.")
    transforms: list[str] = Field(default_factory=list, description="e.g. 'exif-transpose', 'resized to 960x1280'.")
    note: str | None = Field(None, description="Why the image is absent or unusable, if it is.")
    source: str | None = Field(
        None,
        description="Where the image came from: its path (or URL) in the dataset row; "
        "None when the row embeds only its bytes.",
    )
    sha256: str | None = Field(None, description="SHA-256 of the image file's bytes as read from the dataset.")


class ModelCall(BaseModel):
    """One request to a language model, as the backend saw it."""

    purpose: str = Field(description="decide | answer | verify | closed_book | consistency | cove | decouple | ...")
    mode: DecisionMode | None = Field(
        None,
        description="How the reply was constrained: structured output (JSON "
        "schema), native tool calls, JSON asked for in the text, or free text.",
    )
    model: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    latency_ms: float = 0.0
    finish_reason: str | None = None
    raw_reply: str = Field(
        "", description=f"The reply as received (text or tool calls as JSON), first {RAW_REPLY_LIMIT} characters."
    )
    reply_chars: int = Field(0, description="Length of the whole raw reply.")
    reasoning: str | None = Field(
        None,
        description=f"A reasoning model's thinking as the server returned it apart "
        f"(`reasoning_content`), first {RAW_REPLY_LIMIT} characters; None when there was "
        f"none.",
    )
    cancelled: bool = Field(False, description="The request was cancelled (turn ended) before it finished.")
    error: str | None = None
    replica: str | None = Field(
        None,
        description="The server (base URL) that answered, when the model is served "
        "by several replicas or over HTTP; None for in-process models.",
    )
    started_at: float | None = Field(
        None,
        description="When the request was sent (epoch seconds): calls that overlap "
        "ran concurrently; the others are on the turn's critical path one after another.",
    )
    prompt_blocks: list[str] = Field(
        default_factory=list,
        description="Chained hashes of the prompt's blocks (as a "
        "server's prefix cache keys them): how much of a prompt repeats the previous "
        "one's.",
    )
    block_unit: Literal["tokens", "chars"] | None = Field(
        None,
        description="What a block counts: tokens of the backend's own tokenizer when it is local, else characters.",
    )
    request_id: str | None = Field(
        None,
        description="The request as sent (messages, tool specs, response schema), "
        "stored once per distinct piece under the run folder's requests/ "
        "(glasses_rag/core/sent.py; read back with traces.requests.read_request).",
    )
    cached_tokens: int | None = Field(
        None,
        description="Prompt tokens whose KV came from a prefix cache instead "
        "of being computed (in-process backends; None when not reported).",
    )
    prompt_profile: str | None = Field(
        None,
        description="The prompt profile that rendered the prompt (a model "
        "policy's 'full' or 'compact'; None for other callers).",
    )
    _pieces: dict[str, Any] | None = PrivateAttr(None)  # the request's stored pieces until the trace is written

    def with_request(self, request_id: str, pieces: dict[str, Any]) -> ModelCall:
        """This call with the request it sent attached (written next to the trace by traces.store)."""
        self.request_id = request_id
        self._pieces = pieces
        return self

    def take_pieces(self) -> dict[str, Any]:
        """The request's pieces, once (the writer takes them; the call keeps only `request_id`)."""
        pieces, self._pieces = self._pieces or {}, None
        return pieces

    @property
    def unreachable(self) -> bool:
        """The call failed in transport: the server was down or overloaded on every attempt."""
        return (self.error or "").startswith(TRANSPORT_ERROR + ":")

    @field_validator("replica")
    @classmethod
    def _no_userinfo(cls, v: str | None) -> str | None:
        return public_url(v) if v else v  # http://alice:pw@host/v1 is shown and written as http://host/v1

    @classmethod
    def clip(cls, raw: str) -> tuple[str, int]:
        return raw[:RAW_REPLY_LIMIT], len(raw)


def requests_per_replica(calls: Iterable[ModelCall]) -> dict[str, int]:
    """How many model requests each replica served (calls without a replica, in-process ones, left out), most
    first: e.g. over every `model_calls` of a run's traces, for its summary."""
    counts = Counter(c.replica for c in calls if c.replica)
    return dict(counts.most_common())
