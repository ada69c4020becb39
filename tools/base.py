"""Typed values that cross the tool boundary.

A tool reads a `ToolContext` and returns a `ToolOutput` whose `update` names the `ToolState` fields it
adds to, the way LangGraph's `Command(update=...)` does: keys are state fields, values are checked
against the field's type, and fields with a reducer (evidence, facts) are merged by it. Wrap a value
in `Replace(...)` to overwrite a reduced field instead (a reranker replaces the evidence).
"""

from __future__ import annotations

import math
from functools import cache
from typing import Annotated, Any, Literal, get_args, get_origin, get_type_hints

from langgraph.types import Overwrite
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator

Replace = Overwrite  # LangGraph's own marker: bypass the field's reducer and write the value as is


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


def merge_hits(old: list[Hit], new: list[Hit]) -> list[Hit]:
    """Reducer of `evidence`: new hits are appended unless the same item is already there."""
    if not new:
        return old
    seen = {h.key() for h in old}
    out = list(old)
    for h in new:
        if h.key() not in seen:
            seen.add(h.key())
            out.append(h)
    return out


def append(old: list, new: list) -> list:
    """Reducer of `facts`: plain append."""
    return [*old, *new] if new else old


class ToolState(BaseModel):
    """The part of the agent state that tools read and write. A tool declares which of these fields it
    writes (`@tool(writes={...})`); anything else it returns is refused as a `bad_update` error."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    evidence: Annotated[list[Hit], merge_hits] = Field(default_factory=list, description="Search hits, merged by item.")
    crop: Box | None = Field(None, description="The region of interest; later searches and OCR may use it.")
    ocr_text: str | None = Field(None, description="Text read in the image.")
    sub_questions: list[str] = Field(default_factory=list, description="Stand-alone sub-questions of the question.")
    facts: Annotated[list[Fact], append] = Field(default_factory=list, description="Other results, appended.")


def _field_annotation(name: str) -> Any:
    return get_type_hints(ToolState, include_extras=True)[name]


@cache
def field_reducer(name: str):
    """The reducer of a ToolState field (the callable in its `Annotated[...]`), or None for last-value fields."""
    ann = _field_annotation(name)
    if get_origin(ann) is Annotated:
        for meta in reversed(get_args(ann)[1:]):
            if callable(meta):
                return meta
    return None


@cache
def field_adapter(name: str) -> TypeAdapter:
    ann = _field_annotation(name)
    return TypeAdapter(get_args(ann)[0] if get_origin(ann) is Annotated else ann)


WRITABLE_FIELDS = frozenset(ToolState.model_fields)


def check_update(update: dict[str, Any], allowed: frozenset[str] | set[str]) -> dict[str, Any]:
    """A tool's update with each value checked against its state field's type.

    Raises ValueError naming the field for an undeclared or unknown field or a value of the wrong type."""
    out: dict[str, Any] = {}
    for name, value in update.items():
        if name not in WRITABLE_FIELDS:
            raise ValueError(f"{name!r} is not a tool-writable state field ({', '.join(sorted(WRITABLE_FIELDS))})")
        if name not in allowed:
            raise ValueError(f"wrote {name!r}, which the tool does not declare in writes={sorted(allowed)}")
        replace = isinstance(value, Overwrite)
        raw = value.value if replace else value
        try:
            checked = field_adapter(name).validate_python(raw)
        except ValueError as e:
            raise ValueError(f"value for {name!r} does not fit the state field: {e}") from None
        out[name] = Overwrite(checked) if replace else checked
    return out


def fold_update(values: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """Apply a checked update to `values` (field -> current value) with each field's reducer; returns `values`."""
    for name, value in update.items():
        reducer = field_reducer(name)
        if isinstance(value, Overwrite) or reducer is None:
            values[name] = value.value if isinstance(value, Overwrite) else value
        else:
            values[name] = reducer(values.get(name) or [], value)
    return values


class ToolOutput(BaseModel):
    """What a tool returns. `summary` is what a policy reads; `update` is what the tool adds to the state."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    summary: str
    method: str = Field("", description="Which implementation ran, e.g. 'rapidocr' or 'heuristic:saliency-crop'.")
    keywords: str | None = Field(None, description="The search keywords used, for the trace (SuperGlasses hop).")
    update: dict[str, Any] = Field(default_factory=dict, description="ToolState field -> value (or Replace(value)).")


class ToolContext(ToolState):
    """Everything a tool may read about the current turn: the question, the image, the history, the
    state so far and the shared resources. Tools never mutate it; they return ToolOutput."""

    task: int
    question: str
    image: Any = None  # PIL.Image.Image or None (later turns may have no usable image)
    history: list[HistoryTurn] = Field(default_factory=list)
    resources: Any = None  # models.resources.Resources: lazily loaded models and the search backend
    llm: Any = Field(None, description="The policy's language model (a models.vlm ChatBackend) when one is "
                                       "configured, for tools that can use one (e.g. the query decoupler).")

    def focus_image(self):
        """The crop when one was detected, else the whole image."""
        if self.image is None:
            return None
        if self.crop is None:
            return self.image
        c = self.crop
        return self.image.crop((c.x0, c.y0, c.x1, c.y1))


def search_query(query: str) -> str:
    """A search tool's query on one line, at most 512 characters; an empty one is an error (the step records it)."""
    query = " ".join(query.split())[:512]
    if not query:
        raise ValueError("empty search query")
    return query
