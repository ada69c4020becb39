"""The trace of one turn: typed events, one model per graph node kind, comparable hop by hop to SuperGlasses logs.

`TurnTrace.steps` is a list of events discriminated by `node`:

- `plan`: the policy decided to answer, or the turn was stopped (step limit, time budget, policy failure);
- `tool_call`: one tool call (a SuperGlasses hop for search tools): arguments, sub-question, keywords, its state
  update as `{field: value}` (the fields of tools.base.ToolState: evidence, crop, OCR text, sub-questions,
  facts, and any field added there later), timings, error;
- `answer`: the draft answer; `verdict`: the self-check's verdict and keep/abstain; `final`: what was returned.

Every event carries a UTC timestamp and the model calls made while it ran (tokens, latency, finish reason, raw
reply). Traces written by schema 1.0 (a flat `Step` for every node) load through `upgrade_v1`; schema 2.0 tool
events (one column per state field) load through `ToolCallEvent`'s own upgrade.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from glasses_rag.core.types import (  # noqa: F401 - ModelCall, ImageInfo, HistoryTurn and DecisionMode are part of the trace schema
    RAW_REPLY_LIMIT,
    Box,
    DecisionMode,
    Fact,
    HistoryTurn,
    ImageInfo,
    ModelCall,
    Verdict,
)

SCHEMA_VERSION = "3.0"
TRACE_TEXT_LIMIT = 600  # characters of any one text kept in a trace update (page text, KG attribute)
TRACE_LIST_LIMIT = 100  # items of any one list kept in a trace update
# Characters of any one input a trace keeps (the question, the ground truth, a label, a tool argument, a reason, an
# error): a longer one is cut to this and its original size noted in it. Enforced here, by the validators of the
# trace's models (so in every trace, and in report.json, which is made from traces), whoever built the trace.
TRACE_INPUT_LIMIT = 65_536
SCHEMA_FILE = Path(__file__).with_name("turn_trace.schema.json")

ErrorKind = Literal[
    "unknown_tool",  # the policy named a tool the registry does not have
    "not_allowed",  # a tool outside the task's allow-list
    "bad_arguments",  # arguments that fail the tool's schema
    "bad_update",  # a tool wrote a state field it did not declare, or a value of the wrong type
    "tool_exception",  # the tool raised
    "timeout",  # the call ran past the turn's budget and was abandoned (and cancelled)
    "policy_error",  # the policy raised, or its reply could not be parsed into a decision / answer
    "verifier_error",  # the self-check raised or timed out
    "graph_error",  # anything else inside the graph
    "bad_input",  # the turn's input was unusable (e.g. an empty question)
]
EndReason = Literal["answer", "step_limit", "time_budget", "error"]


def bounded_text(value: Any, limit: int = TRACE_INPUT_LIMIT) -> Any:
    """A string longer than `limit` as its first `limit` characters and its original size; anything else as is."""
    if not isinstance(value, str) or len(value) <= limit:
        return value
    return f"{value[:limit]} [... cut: {len(value)} characters in all]"


def bounded_json(value: Any, limit: int = TRACE_INPUT_LIMIT) -> Any:
    """A JSON value whose text is longer than `limit` (a 7 MB tool argument) as the start of that text and its
    original size; strings as `bounded_text`; anything else as is."""
    if isinstance(value, str):
        return bounded_text(value, limit)
    if isinstance(value, (dict, list, tuple)):
        try:
            text = json.dumps(value, default=str, ensure_ascii=False)
        except (ValueError, RecursionError):  # circular or too deep: its repr, bounded
            return bounded_text(repr(value)[: limit + 1], limit)
        return value if len(text) <= limit else bounded_text(text, limit)
    return value


def _bounded_values(value: Any) -> Any:
    return {k: bounded_json(v) for k, v in value.items()} if isinstance(value, dict) else value


class StepError(BaseModel):
    kind: ErrorKind
    message: str

    _bounded = field_validator("message", mode="before")(bounded_text)


class TraceHit(BaseModel):
    source: Literal["image_kg", "web"]
    score: float
    url: str | None = None
    title: str | None = None
    entity_name: str | None = None
    snippet: str = Field("", description="First 300 characters of the result text.")
    rerank_score: float | None = None


def trace_form(value: Any) -> Any:
    """A JSON value as a trace keeps it: long texts clipped, long lists cut (the state itself is not changed)."""
    if isinstance(value, str):
        return value if len(value) <= TRACE_TEXT_LIMIT else value[:TRACE_TEXT_LIMIT] + "..."
    if isinstance(value, dict):
        return {k: trace_form(v) for k, v in value.items()}
    if isinstance(value, list):
        return [trace_form(v) for v in value[:TRACE_LIST_LIMIT]]
    return value


def _plain(value: Any) -> Any:
    """Models inside a value as their JSON dicts (an update given with typed values)."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _now() -> datetime:
    return datetime.now(UTC)


class _Event(BaseModel):
    index: int = 0
    timestamp: datetime = Field(default_factory=_now, description="When the event was recorded (UTC).")
    error: StepError | None = None
    model_calls: list[ModelCall] = Field(default_factory=list)


class PlanEvent(_Event):
    """The policy chose to answer, or the turn was stopped before another tool call."""

    node: Literal["plan"] = "plan"
    decision: Literal["answer", "stop"]
    reason: str = Field("", description="The policy's rationale, or why the turn was stopped.")
    needs_retrieval: bool | None = None
    policy_ms: float | None = None

    _bounded = field_validator("reason", mode="before")(bounded_text)


_V2_COLUMNS = {
    "results": "evidence",
    "detected_box": "crop",
    "ocr_text": "ocr_text",
    "sub_questions": "sub_questions",
    "facts": "facts",
}
_V2_KEYS = frozenset((*_V2_COLUMNS, "wrote"))


class ToolCallEvent(_Event):
    """One tool call: a SuperGlasses hop when the tool searches. `update` is what the call wrote into the state,
    `{field: value}` in JSON form (texts clipped); the properties below read the usual fields out of it."""

    node: Literal["tool_call"] = "tool_call"
    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    capabilities: list[str] = Field(default_factory=list, description="The tool's capability names.")
    search: Literal["image", "text"] | None = Field(
        None,
        description="The SuperGlasses hop kind of the call, from the tool's capabilities (image search / text search).",
    )
    sub_question: str | None = Field(None, description="The part of the question this call addresses.")
    search_keywords: str | None = None
    needs_retrieval: bool | None = None
    rationale: str | None = None
    parallel_with: str | None = Field(None, description="The tool this call ran alongside, when decided together.")
    method: str | None = Field(None, description="Implementation that ran, e.g. 'rapidocr', 'heuristic:saliency-crop'.")
    summary: str | None = None
    update: dict[str, Any] = Field(default_factory=dict, description="State field -> the value the call wrote.")
    replaced: list[str] = Field(default_factory=list, description="Fields the call overwrote instead of merging.")
    policy_ms: float | None = Field(None, description="Time the policy took to decide this call.")
    latency_ms: float = Field(0.0, description="Time the tool itself took.")

    _bounded = field_validator("sub_question", "search_keywords", "rationale", "summary", mode="before")(bounded_text)
    _bounded_arguments = field_validator("arguments", mode="before")(_bounded_values)

    @model_validator(mode="before")
    @classmethod
    def _from_v2_columns(cls, data: Any) -> Any:
        """Schema 2.0 kept one column per state field (results, detected_box, ...): fold them into `update`."""
        if not isinstance(data, dict) or _V2_KEYS.isdisjoint(data):  # (runs for every new event: kept cheap)
            return data
        data = dict(data)
        update = dict(data.get("update") or {})
        for column, field in _V2_COLUMNS.items():
            value = data.pop(column, None)
            if value not in (None, [], ""):
                update.setdefault(field, value)
        data.pop("wrote", None)
        data["update"] = _plain(update)
        return data

    @property
    def wrote(self) -> list[str]:
        return sorted(self.update)

    @property
    def results(self) -> list[TraceHit]:
        out = []
        for h in self.update.get("evidence") or []:
            if isinstance(h, dict):
                text = h.get("content") or h.get("snippet") or ""
                out.append(TraceHit.model_validate({**h, "snippet": str(text)[:300]}))
        return out

    @property
    def detected_box(self) -> Box | None:
        box = self.update.get("crop")
        return Box.model_validate(box) if isinstance(box, dict) else None

    @property
    def ocr_text(self) -> str | None:
        text = self.update.get("ocr_text")
        return text if isinstance(text, str) else None

    @property
    def sub_questions(self) -> list[str]:
        return [str(s) for s in self.update.get("sub_questions") or []]

    @property
    def facts(self) -> list[Fact]:
        return [Fact.model_validate(f) for f in self.update.get("facts") or [] if isinstance(f, dict)]


class AnswerEvent(_Event):
    node: Literal["answer"] = "answer"
    answer: str
    confidence: float | None = None
    confidence_from: Literal["tokens", "tokens-masked", "tokens-raw"] | None = Field(
        None,
        description="'tokens': the confidence is the mean probability of the answer's tokens (a model policy with "
        "`answer_confidence: tokens`); 'tokens-masked': of the grammar-masked probabilities (in-process), "
        "'tokens-raw': of the raw ones (a server's logprobs); None: the policy's own figure (a model's written "
        "confidence, a rule's).",
    )
    rationale: str | None = None
    entity: str | None = None
    from_decision: bool = Field(
        False,
        description="Taken from the deciding reply (its model call is on the plan event), not asked for separately.",
    )
    policy_ms: float | None = None


class VerdictEvent(_Event):
    """The self-check of the draft: the verifier's verdict and what was done with it."""

    node: Literal["verdict"] = "verdict"
    decision: Literal["keep", "abstain"]
    verdict: Verdict | None = None
    reason: str = ""
    latency_ms: float = 0.0


class FinalEvent(_Event):
    node: Literal["final"] = "final"
    answer: str
    decision: Literal["answer", "abstain"]
    cut_from_chars: int | None = Field(None, description="The answer was cut from this many characters.")


TraceEvent = Annotated[PlanEvent | ToolCallEvent | AnswerEvent | VerdictEvent | FinalEvent, Field(discriminator="node")]


def sequential_rounds(calls: list[ModelCall]) -> int:
    """How many model calls ran one after another: calls whose times overlap ran concurrently and count once
    (the turn's critical path in round trips). Calls without a start time count one each."""
    spans = sorted((c.started_at, c.started_at + c.latency_ms / 1000) for c in calls if c.started_at is not None)
    rounds, end = 0, None
    for start, stop in spans:
        if end is None or start >= end:
            rounds, end = rounds + 1, stop
        else:
            end = max(end, stop)
    return rounds + sum(c.started_at is None for c in calls)


class TokenTotals(BaseModel):
    calls: int = 0
    sequential_calls: int = Field(0, description="Model calls on the turn's critical path: concurrent ones count once.")
    prompt_tokens: int = 0
    completion_tokens: int = 0
    calls_without_usage: int = Field(0, description="Calls whose backend reported no token counts (not in the sums).")


class TurnTrace(BaseModel):
    """The record of one answered turn: what the agent was given, every step it took, its answer and its score.

    One JSON line per turn in a run's `traces.jsonl` (`traces.store.TraceStore`); older schema versions are
    upgraded on reading. Long texts are bounded (`bounded_text`), a ground truth set after the turn included.

    Args:
        run_id, task, session_id, interaction_id, turn_index: where the turn belongs.
        question, image, labels, history: what the agent was given (the image as `ImageInfo`, not its pixels).
        policy, search_backend, budget_s, max_steps, config_fingerprint: what answered it, under which limits.
        steps: the events in order: plan, tool call, answer, verdict and final events (`TraceEvent`).
        answer, abstained, confidence, entity: the answer ("I don't know" when abstained).
        ended_by: why the turn ended: "answer", "step_limit", "time_budget" or "error" (with `error`).
        latency_ms, tokens: its wall time and model tokens.
        ground_truth, score, judge: set when the run is scored.

    Example:
        >>> from traces.schema import FinalEvent, TurnTrace
        >>> trace = TurnTrace(run_id="r1", task=1, session_id="s1", interaction_id="s1-0", turn_index=0,
        ...                   question="what is this?", policy="scripted", search_backend="none", budget_s=10.0,
        ...                   max_steps=8, steps=[FinalEvent(answer="I don't know", decision="abstain")],
        ...                   answer="I don't know", abstained=True, ended_by="answer", latency_ms=1.5)
        >>> trace.tool_calls(), trace.error_kinds()
        ([], [])
        >>> TurnTrace.model_validate_json(trace.model_dump_json()) == trace
        True
    """

    # validate_assignment: a ground truth set after the turn is bounded too; the JSON schema describes the model
    # with the docstring's first paragraph only (not its arguments and example)
    model_config = ConfigDict(
        validate_assignment=True,
        json_schema_extra=lambda schema: schema.update(
            description=" ".join((TurnTrace.__doc__ or "").split("\n\n")[0].split())
        ),
    )

    schema_version: Literal["3.0"] = "3.0"
    run_id: str
    task: int
    session_id: str
    interaction_id: str
    turn_index: int
    question: str
    image: ImageInfo = Field(default_factory=ImageInfo)
    labels: dict[str, Any] = Field(default_factory=dict, description="Dataset labels: domain, query_category, ...")
    egocentric: bool | None = Field(None, description="Egocentric (glasses) image: the row has no image_url.")
    policy: str
    search_backend: str
    budget_s: float
    max_steps: int
    config_fingerprint: str | None = Field(None, description="Hash of the agent configuration that produced it.")
    notes: list[str] = Field(default_factory=list, description="Input notes, e.g. the question was cut.")
    history: list[HistoryTurn] = Field(
        default_factory=list,
        description="The conversation's earlier turns as the "
        "agent was given them (questions, its answers as later turns see them).",
    )
    steps: list[TraceEvent] = Field(default_factory=list)
    answer: str
    abstained: bool
    confidence: float | None = None
    entity: str | None = Field(None, description="The entity the answer is about; carried into later turns' history.")
    ended_by: EndReason
    latency_ms: float
    tokens: TokenTotals = Field(default_factory=TokenTotals)
    ground_truth: str | None = None
    score: Literal["correct", "missing", "incorrect"] | None = None
    judge: str | None = None
    error: str | None = None

    _bounded = field_validator("question", "ground_truth", "answer", "error", mode="before")(bounded_text)
    _bounded_labels = field_validator("labels", mode="before")(_bounded_values)

    @field_validator("history", mode="before")
    @classmethod
    def _bounded_history(cls, value: Any) -> Any:
        """Each earlier question and answer bounded as the turn's own are (a huge question in turn 0 is not
        copied whole into every later trace)."""
        if not isinstance(value, list):
            return value
        out = []
        for t in value:
            d = t.model_dump() if isinstance(t, BaseModel) else t
            if isinstance(d, dict):
                d = {**d, **{k: bounded_text(d[k]) for k in ("question", "answer") if isinstance(d.get(k), str)}}
            out.append(d)
        return out

    @property
    def has_image(self) -> bool:
        return self.image.size is not None

    def tool_calls(self) -> list[ToolCallEvent]:
        return [s for s in self.steps if isinstance(s, ToolCallEvent)]

    def model_calls(self) -> list[ModelCall]:
        return [c for s in self.steps for c in s.model_calls]

    def error_kinds(self) -> list[str]:
        return [s.error.kind for s in self.steps if s.error is not None]

    @model_validator(mode="before")
    @classmethod
    def _upgrade(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        if str(data.get("schema_version", "")).startswith("1"):
            data = upgrade_v1(data)
        if data.get("schema_version") == "2.0":  # events upgrade themselves (ToolCallEvent._from_v2_columns)
            data = {**data, "schema_version": SCHEMA_VERSION}
        return data


# ---------------------------------------------------------------------------------------------------------------
# Schema 1.0 -> 2.0

_V1_KINDS = set(ErrorKind.__args__)  # type: ignore[attr-defined]


def _v1_error(err: Any) -> dict | None:
    if not isinstance(err, dict):
        return None
    kind = str(err.get("kind") or "graph_error")
    msg = str(err.get("message") or "")
    return {"kind": kind, "message": msg} if kind in _V1_KINDS else {"kind": "graph_error", "message": f"{kind}: {msg}"}


def _v1_tool_call(s: dict[str, Any]) -> dict[str, Any]:
    """A 1.0 'act' step's fields as a 2.0 tool call event's."""
    copied = ("sub_question", "search_keywords", "needs_retrieval", "rationale", "method", "summary")
    written = (("evidence", s.get("results")), ("crop", s.get("detected_box")), ("ocr_text", s.get("ocr_text")))
    return {
        "node": "tool_call",
        "tool": s.get("tool") or "",
        "arguments": s.get("arguments") or {},
        **{k: s.get(k) for k in copied},
        "results": s.get("results") or [],
        "detected_box": s.get("detected_box"),
        "ocr_text": s.get("ocr_text"),
        "policy_ms": s.get("policy_ms"),
        "latency_ms": s.get("latency_ms") or 0.0,
        "wrote": [k for k, v in written if v],
    }


def _v1_step(s: dict[str, Any]) -> dict[str, Any]:
    node, decision = s.get("node"), str(s.get("decision") or "")
    base = {"index": s.get("index", 0), "error": _v1_error(s.get("error"))}
    if node == "act":
        return {**base, **_v1_tool_call(s)}
    if node == "answer":
        return {
            **base,
            "node": "answer",
            "answer": s.get("summary") or "",
            "rationale": s.get("rationale"),
            "policy_ms": s.get("policy_ms"),
        }
    if node == "self_check":
        return {
            **base,
            "node": "verdict",
            "decision": "keep" if decision.startswith("keep") else "abstain",
            "verdict": s.get("verdict"),
            "reason": s.get("rationale") or decision,
            "latency_ms": s.get("latency_ms") or 0.0,
        }
    if node == "final":
        return {
            **base,
            "node": "final",
            "answer": s.get("summary") or "",
            "decision": "abstain" if decision.startswith("abstain") else "answer",
        }
    return {
        **base,
        "node": "plan",
        "decision": "answer" if decision.startswith("answer") and not s.get("error") else "stop",
        "reason": "; ".join(x for x in (decision, s.get("rationale")) if x),
        "needs_retrieval": s.get("needs_retrieval"),
        "policy_ms": s.get("policy_ms"),
    }


def upgrade_v1(data: dict[str, Any]) -> dict[str, Any]:
    """A schema-1.0 trace dict as a 2.0 one: flat steps become typed events, has_image/image_note an ImageInfo."""
    out = {k: v for k, v in data.items() if k not in ("steps", "has_image", "image_note", "schema_version")}
    out["schema_version"] = SCHEMA_VERSION
    out["image"] = {"size": None, "note": data.get("image_note")}
    if data.get("has_image"):
        out["image"]["size"] = (0, 0)  # present, size not recorded by 1.0
    steps = data.get("steps") or []
    out["notes"] = [
        s.get("decision", "")
        for s in steps
        if isinstance(s, dict) and s.get("node") == "plan" and str(s.get("decision", "")).startswith("question cut")
    ]
    out["steps"] = [
        _v1_step(s)
        for s in steps
        if isinstance(s, dict)
        and not (s.get("node") == "plan" and str(s.get("decision", "")).startswith("question cut"))
    ]
    return out


def export_json_schema(path: Path = SCHEMA_FILE) -> Path:
    path.write_text(json.dumps(TurnTrace.model_json_schema(), indent=2, sort_keys=True) + "\n")
    return path


if __name__ == "__main__":
    print(export_json_schema())
