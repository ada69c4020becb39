"""The policy interface: what decides the next step and writes the answer.

A policy sees a `PolicyView` (question, history, tool specs, what was observed so far, what budget is
left) and returns a `Decision` (call a tool, or answer) or an `AnswerDraft`. A reply it cannot turn into
either is a `PolicyReplyError`, recorded as a `policy_error` step. Implementations: the embedded rule-based
planner (glasses_rag/policies/rules/rule_planner.py, a heuristic that needs no weights) and the model policy
(glasses_rag/policies/model/policy.py, over any glasses_rag.models.vlm backend).
"""

from __future__ import annotations

from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from glasses_rag.text.nlp import IDK, is_abstention  # noqa: F401 - the agent's one abstention text and rule, re-exported
from tools.base import HistoryTurn, ToolState


class PolicyReplyError(Exception):
    """A policy's reply could not be turned into a decision or an answer (unparseable or invalid)."""

    def __init__(self, message: str, raw: str = ""):
        super().__init__(message)
        self.raw = raw


class ToolSpec(BaseModel):
    name: str
    description: str
    signature: str
    json_schema: dict[str, Any]
    tags: list[str] = Field(default_factory=list)
    capabilities: tuple[Any, ...] = Field(
        (), exclude=True, description="The tool's tools.capability.Capability objects (planners use their hooks)."
    )
    inputs: dict[str, str] = Field(default_factory=dict, description="Planner slot -> the tool's argument name.")


class StepSummary(BaseModel):
    """A compact record of one finished step, as a policy needs it (the trace holds the full event)."""

    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    summary: str = ""
    error: str | None = None
    update: dict[str, Any] = Field(
        default_factory=dict,
        description="What the call wrote into the state (typed "
        "values), for policies that show each result where it came.",
    )
    parallel_with: str | None = Field(None, description="The call this one was decided together with.")
    replaced: list[str] = Field(
        default_factory=list, description="State fields the call overwrote instead of merging (its `Replace`)."
    )


class PolicyView(ToolState):
    """What a policy sees of a turn: what it was given, the tools offered, the steps done, the state so far (every
    `tools.base.ToolState` field: evidence, crop, OCR text, sub-questions, facts, and any field added there) and
    the budget left. Built from the turn's state by `graph.state.policy_view`, in the graph and in the training
    export alike."""

    task: int
    question: str
    history: list[HistoryTurn] = Field(default_factory=list)
    has_image: bool
    tools: list[ToolSpec]
    done: list[StepSummary] = Field(default_factory=list)
    remaining_steps: int
    remaining_s: float

    def tool_names(self) -> set[str]:
        return {t.name for t in self.tools}

    def tools_with(self, tag: str) -> list[ToolSpec]:
        return [t for t in self.tools if tag in t.tags]

    def ran(self, tool: str) -> int:
        """How many times `tool` already ran (errors included)."""
        return sum(1 for s in self.done if s.tool == tool)

    def ran_call(self, tool: str, arguments: dict[str, Any]) -> bool:
        """Whether `tool` already ran with exactly these arguments."""
        return any(s.tool == tool and s.arguments == arguments for s in self.done)


# Where an answer's confidence came from: its tokens' probabilities, and which ones when the backend says (the
# grammar-masked distribution in-process, the raw one from a server): thresholds do not carry from one to the other.
ConfidenceFrom = Literal["tokens", "tokens-masked", "tokens-raw"]


class AnswerDraft(BaseModel):
    answer: str
    confidence: float = Field(ge=0.0, le=1.0)
    rationale: str = ""
    entity: str | None = Field(None, description="The entity the answer is about, carried to later turns.")
    confidence_from: ConfidenceFrom | None = Field(
        None,
        description="'tokens': `confidence` is the geometric mean probability of the tokens that wrote the answer "
        "(the model's own likelihood, not a number it wrote), 'tokens-masked' of the grammar-masked probabilities "
        "(in-process), 'tokens-raw' of the model's raw ones (a server's logprobs); None: as the policy gave it.",
    )


class ParallelCall(BaseModel):
    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    sub_question: str | None = None


class Decision(BaseModel):
    action: Literal["call_tool", "answer"]
    tool: str | None = None
    arguments: dict[str, Any] = Field(default_factory=dict)
    parallel: list[ParallelCall] = Field(
        default_factory=list,
        description="Independent calls run at the same time as this one (e.g. image and web search).",
    )
    sub_question: str | None = None
    needs_retrieval: bool | None = None
    rationale: str = ""
    answer: AnswerDraft | None = Field(
        None,
        description="With action 'answer': the answer itself, when the reply "
        "that decided also wrote it (one round trip instead of two).",
    )


@runtime_checkable
class Policy(Protocol):
    """What decides each step of a turn (`decide`) and writes its answer (`answer`).

    `name` appears in traces and CLI output; a heuristic policy says so in its name. A policy may set
    `blocking = False` when it decides with quick local work only (no I/O, no model server): the graph then calls
    it in its own thread instead of a worker (it cannot be abandoned at the time budget, so it must be quick).
    A reply a policy cannot turn into a decision or an answer is raised as a `PolicyReplyError`.

    Args:
        view: (of `decide` and `answer`) the `PolicyView` of the turn so far: question, history, the tools
            offered, the steps done and what they found, the steps and seconds left.
        image: (of `decide` and `answer`) the turn's image (a PIL image, the crop when one was made) or None.

    Example:
        >>> from glasses_rag.policies.protocol import IDK, AnswerDraft, Decision, Policy, PolicyView
        >>> class LookOnce:
        ...     name = "look-once (heuristic)"
        ...     blocking = False
        ...     def decide(self, view, image=None):
        ...         if view.evidence or not view.tools_with("finds_entity") or view.ran("image_search"):
        ...             return Decision(action="answer", rationale="nothing more to look up")
        ...         return Decision(action="call_tool", tool="image_search", arguments={"k": 3})
        ...     def answer(self, view, image=None):
        ...         best = max(view.evidence, key=lambda h: h.score, default=None)
        ...         if best is None or best.entity_name is None:
        ...             return AnswerDraft(answer=IDK, confidence=0.0)
        ...         return AnswerDraft(answer=best.entity_name, confidence=best.score)
        >>> isinstance(LookOnce(), Policy)
        True
        >>> view = PolicyView(task=1, question="what is this?", has_image=True, tools=[], remaining_steps=4,
        ...                   remaining_s=10.0)
        >>> LookOnce().decide(view).action, LookOnce().answer(view).answer
        ('answer', "I don't know")
    """

    name: str

    def decide(self, view: PolicyView, image: Any = None) -> Decision: ...

    def answer(self, view: PolicyView, image: Any = None) -> AnswerDraft: ...


class ScriptedPolicy:
    """Replays a fixed list of decisions, then answers with a fixed draft. For tests and debugging. It keeps every
    view it was shown in `views` (tests read them) unless `keep_views=False` (a benchmark running many turns)."""

    def __init__(
        self,
        decisions: list[Decision | dict],
        answer: AnswerDraft | dict | None = None,
        name: str = "scripted",
        blocking: bool = True,
        keep_views: bool = True,
    ):
        self.decisions = [d if isinstance(d, Decision) else Decision.model_validate(d) for d in decisions]
        self.final = (
            answer
            if isinstance(answer, AnswerDraft)
            else AnswerDraft.model_validate(answer or {"answer": IDK, "confidence": 0.0})
        )
        self.name = name
        self.blocking = blocking
        self.keep_views = keep_views
        self.views: list[PolicyView] = []

    def decide(self, view: PolicyView, image: Any = None) -> Decision:
        if self.keep_views:
            self.views.append(view)
        i = len(view.done)
        return self.decisions[i] if i < len(self.decisions) else Decision(action="answer", rationale="script finished")

    def answer(self, view: PolicyView, image: Any = None) -> AnswerDraft:
        return self.final
