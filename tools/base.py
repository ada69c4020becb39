"""Typed values that cross the tool boundary: what a tool sees (ToolContext) and returns (ToolOutput)."""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


def finite_score(v: Any) -> Any:
    """Non-finite scores (NaN, inf from a junk backend or model) become 0.0: JSON has no NaN, and a
    NaN written as null would make the trace unreadable."""
    return 0.0 if isinstance(v, float) and not math.isfinite(v) else v


class Box(BaseModel):
    """A detected region, in pixels of the original image."""

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

    def text(self) -> str:
        """Flat text for embedding, reranking and support checks."""
        if self.source == "image_kg":
            attrs = "; ".join(f"{k}: {v}" for k, v in (self.attributes or {}).items())
            return f"{self.entity_name}. {attrs}".strip()
        return f"{self.title or ''}. {self.content or self.snippet}".strip()


class Verdict(BaseModel):
    """The self-check's judgement of a draft answer."""

    supported: bool
    confidence: float
    reason: str
    method: str = ""

    _finite_confidence = field_validator("confidence")(finite_score)


class ToolOutput(BaseModel):
    """What a tool returns. `summary` is what the policy reads; typed fields feed the state and the trace."""

    summary: str
    method: str = Field("", description="Which implementation ran, e.g. 'rapidocr' or 'heuristic:saliency-crop'.")
    hits: list[Hit] = Field(default_factory=list)
    replace_evidence: bool = Field(False, description="True when hits replace the evidence (e.g. after reranking).")
    box: Box | None = None
    text: str | None = None
    sub_questions: list[str] = Field(default_factory=list)
    keywords: str | None = None
    verdict: Verdict | None = None


class HistoryTurn(BaseModel):
    """An earlier turn of the same conversation, as the agent itself answered it."""

    question: str
    answer: str
    entity: str | None = None


class ToolContext(BaseModel):
    """Everything a tool may read about the current turn. Tools never mutate it; they return ToolOutput."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    task: int
    question: str
    image: Any = None  # PIL.Image.Image or None (later turns may have no usable image)
    history: list[HistoryTurn] = Field(default_factory=list)
    evidence: list[Hit] = Field(default_factory=list)
    crop: Box | None = None
    ocr_text: str | None = None
    sub_questions: list[str] = Field(default_factory=list)
    draft_answer: str | None = None
    draft_confidence: float | None = None
    resources: Any = None  # models.Resources: shared, lazily loaded models and the search backend

    def focus_image(self):
        """The crop when one was detected, else the whole image."""
        if self.image is None:
            return None
        if self.crop is None:
            return self.image
        c = self.crop
        return self.image.crop((c.x0, c.y0, c.x1, c.y1))
