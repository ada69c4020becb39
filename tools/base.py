"""Typed values that cross the tool boundary.

A tool reads a `ToolContext` and returns a `ToolOutput` whose `update` names the `ToolState` fields it
adds to, the way LangGraph's `Command(update=...)` does: keys are state fields, values are checked
against the field's type, and LangGraph folds them into the state with each field's reducer (the callable
in its `Annotated[...]`: evidence merged by item, facts appended, single values replaced). Wrap a value
in `Replace(...)` (LangGraph's `Overwrite`) to overwrite a merged field instead (a reranker replaces the
evidence). A new state field is one line here: its type, its reducer and its description. The agent state, the
tool context and the policy's view all extend `ToolState`, and each is filled from the state's own fields
(`state_fields`), so a new field reaches tools and policies (and the training export) with no other edit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import cache
from typing import Annotated, Any, get_args, get_origin, get_type_hints

from langgraph.types import Overwrite
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from glasses_rag.core.types import Box, Fact, HistoryTurn, Hit, Verdict, finite_score  # noqa: F401 - the tool contract

Replace = Overwrite  # LangGraph's own marker: bypass the field's reducer and write the value as is


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


def latest(old: Any, new: Any) -> Any:
    """Reducer of single-valued fields: the later write wins (two tools writing one field in the same round are
    applied in call order, as LangGraph applies a node's writes)."""
    return new


class ToolState(BaseModel):
    """The part of the agent state that tools read and write. A tool declares which of these fields it
    writes (`@tool(writes={...})`); anything else it returns is refused as a `bad_update` error."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    evidence: Annotated[list[Hit], merge_hits] = Field(default_factory=list, description="Search hits, merged by item.")
    crop: Annotated[Box | None, latest] = Field(
        None, description="The region of interest; later searches and OCR may use it."
    )
    ocr_text: Annotated[str | None, latest] = Field(None, description="Text read in the image.")
    sub_questions: Annotated[list[str], latest] = Field(
        default_factory=list, description="Stand-alone sub-questions of the question."
    )
    facts: Annotated[list[Fact], append] = Field(default_factory=list, description="Other results, appended.")


def _field_annotation(name: str) -> Any:
    return get_type_hints(ToolState, include_extras=True)[name]


@cache
def field_adapter(name: str) -> TypeAdapter:
    ann = _field_annotation(name)
    return TypeAdapter(get_args(ann)[0] if get_origin(ann) is Annotated else ann)


def reducer(name: str) -> Callable[[Any, Any], Any]:
    """The reducer of a state field (the callable in its `Annotated[...]`; `latest` without one)."""
    ann = _field_annotation(name)
    found = [m for m in get_args(ann)[1:] if callable(m)] if get_origin(ann) is Annotated else []
    return found[0] if found else latest


WRITABLE_FIELDS = frozenset(ToolState.model_fields)


def state_fields(source: Any) -> dict[str, Any]:
    """Every `ToolState` field of `source` (the agent state, a tool context, a view), by name: how the tool context
    and the policy's view are filled from the state, so a field added to ToolState reaches them with no other edit.

    Example:
        >>> state_fields(ToolState(ocr_text="EXIT"))["ocr_text"], sorted(state_fields(ToolState()))[:2]
        ('EXIT', ['crop', 'evidence'])
    """
    return {name: getattr(source, name) for name in ToolState.model_fields}


def apply_update(state: ToolState, update: dict[str, Any], replaced: Iterable[str] = ()) -> ToolState:
    """`state` after one call's update, folded as LangGraph folds it in the graph: each field by its reducer, a field
    in `replaced` (the call's `Replace`) overwritten. For a state rebuilt outside the graph (from a trace).

    Example:
        >>> s = apply_update(ToolState(), {"facts": [Fact(text="a", source="t")]})
        >>> len(apply_update(s, {"facts": [Fact(text="b", source="t")]}).facts)
        2
    """
    keep = set(replaced)
    new = {n: v if n in keep else reducer(n)(getattr(state, n), v) for n, v in update.items() if n in WRITABLE_FIELDS}
    return state.model_copy(update=new)


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


class ToolOutput(BaseModel):
    """What a tool returns. `summary` is what a policy reads; `update` is what the tool adds to the state.

    The update is checked against the fields the tool declared (`@tool(writes={...})`) and their types before the
    graph folds it into the state with each field's reducer; wrap a value in `Replace` to overwrite a merged field.

    Args:
        summary: one or two lines on what the call found, for the policy and the trace.
        method: which implementation ran, e.g. "rapidocr" or "heuristic:saliency-crop".
        keywords: the search keywords used, for the trace (a SuperGlasses hop).
        update: `ToolState` field -> value (or `Replace(value)`).

    Example:
        >>> from tools.base import Fact, Replace, ToolOutput, check_update
        >>> out = ToolOutput(summary="1 fact", method="heuristic:example",
        ...                  update={"facts": [Fact(text="5 km = 3.1 mi", source="convert_units", value="3.1 mi")]})
        >>> check_update(out.update, {"facts"})["facts"][0].value
        '3.1 mi'
        >>> check_update({"ocr_text": "EXIT"}, {"facts"})
        Traceback (most recent call last):
        ...
        ValueError: ...ocr_text...
        >>> reranked = ToolOutput(summary="kept 1 of 3 hits", update={"evidence": Replace([])})
    """

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
    resources: Any = None  # glasses_rag.models.resources.Resources: lazily loaded models and the search backend
    llm: Any = Field(
        None,
        description="The policy's language model (a glasses_rag.models.vlm ChatBackend) when one is "
        "configured, for tools that can use one (e.g. the query decoupler).",
    )

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
