"""The typed LangGraph state of one turn, and the per-turn context that is not state (image, models, clock).

`AgentState` extends the tools' `ToolState` (evidence, crop, OCR text, sub-questions, facts: what tools
write) with what the graph itself keeps. Every field that several steps add to has its reducer in its
`Annotated[...]`, and LangGraph applies it to what nodes return: nothing here folds updates by hand.
`TurnContext` travels as LangGraph's run context (`context_schema`): nodes read it from `runtime.context`.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from functools import cache
from typing import Annotated, Any

from langgraph.managed import RemainingSteps
from pydantic import Field, SkipValidation

from glasses_rag.core.calls import CancelScope
from glasses_rag.policies.protocol import AnswerDraft, Policy, PolicyView, StepSummary, ToolSpec
from glasses_rag.policies.self_check import Verifier
from graph.budget import TurnBudget
from tools.base import HistoryTurn, ToolContext, ToolOutput, ToolState, Verdict, state_fields
from tools.registry import Tool, ToolCall, ToolProfile, ToolRegistry
from traces.schema import EndReason, ModelCall, StepError, TraceEvent


@dataclass
class PendingCall:
    """A call `plan` hands to `act` (graph-internal: built from already validated values, never serialised)."""

    call: ToolCall
    parallel: list[PendingCall] = field(default_factory=list)
    sub_question: str | None = None
    needs_retrieval: bool | None = None
    rationale: str = ""
    policy_ms: float | None = None
    parallel_with: str | None = None
    model_calls: list[ModelCall] = field(default_factory=list)


@dataclass
class ActResult:
    """One call's output or error, with timing (inside the `tools` node)."""

    pending: PendingCall
    output: ToolOutput | None = None
    error: StepError | None = None
    latency_ms: float = 0.0
    model_calls: list[ModelCall] = field(default_factory=list)


class AgentState(ToolState):
    # Graph-built values (already typed when a node returns them): LangGraph rebuilds the state model for every
    # node, and revalidating these growing lists each time would cost O(steps) per step.
    steps: Annotated[SkipValidation[list[TraceEvent]], operator.add] = Field(default_factory=list)
    done: Annotated[SkipValidation[list[StepSummary]], operator.add] = Field(default_factory=list)
    pending: SkipValidation[PendingCall | None] = None
    draft: AnswerDraft | None = None
    verdict: Verdict | None = None
    final_answer: str | None = None
    ended_by: EndReason | None = None
    remaining_steps: RemainingSteps = 0  # LangGraph fills it: graph steps left before the recursion limit


@cache
def tool_spec(t: Tool) -> ToolSpec:
    """A tool as policies see it (built once per tool)."""
    return ToolSpec(
        name=t.name,
        description=t.description,
        signature=t.signature_text(),
        json_schema=t.json_schema(),
        tags=sorted(t.tags),
        capabilities=t.capabilities,
        inputs=t.inputs,
    )


def policy_view(
    task: int,
    question: str,
    history: list[HistoryTurn],
    has_image: bool,
    tools: list[ToolSpec],
    state: ToolState,
    done: list[StepSummary],
    remaining_steps: int,
    remaining_s: float,
) -> PolicyView:
    """The policy's view of a turn: what it was given and the tools offered, the steps done, every state field as
    `state` holds it (`tools.base.state_fields`) and the budget left. The graph builds it from its state before each
    decision; the training export from the state it folds back from a trace (the same record, the same view)."""
    return PolicyView(
        task=task,
        question=question,
        history=history,
        has_image=has_image,
        tools=tools,
        done=done,
        remaining_steps=remaining_steps,
        remaining_s=remaining_s,
        **state_fields(state),
    )


@dataclass
class TurnContext:
    """Per-turn objects that are not serialisable state: image, policy, verifier, resources, clock, cancel scope."""

    task: int
    question: str
    image: Any
    history: list[HistoryTurn]
    policy: Policy
    verifier: Verifier | None  # None: self-check off
    registry: ToolRegistry
    resources: Any
    allowed: list[str] | None
    budget: TurnBudget  # its time and tool calls (graph/budget.py: all the arithmetic)
    abstain_below: float
    max_answer_chars: int = 600
    llm: Any = None
    profile: ToolProfile | None = None  # the benchmark's tool profile (None: every tool of the task)
    scope: CancelScope = field(default_factory=CancelScope)
    _specs: list[ToolSpec] | None = field(default=None, init=False, repr=False)  # the turn's tool specs, built once

    def tools(self) -> list[Tool]:
        return self.registry.for_task(self.task, self.allowed, self.profile)

    def tool_specs(self) -> list[ToolSpec]:
        if self._specs is None:
            self._specs = [tool_spec(t) for t in self.tools()]
        return self._specs

    def tool_context(self, state: AgentState) -> ToolContext:
        """What a tool reads: the turn and every state field (`tools.base.state_fields`)."""
        return ToolContext(
            task=self.task,
            question=self.question,
            image=self.image,
            history=self.history,
            resources=self.resources,
            llm=self.llm,
            **state_fields(state),
        )

    def view(self, state: AgentState) -> PolicyView:
        """What the policy sees before its next decision (`policy_view`)."""
        return policy_view(
            self.task,
            self.question,
            self.history,
            self.image is not None,
            self.tool_specs(),
            state,
            state.done,
            self.budget.steps_left(len(state.done)),
            max(0.0, self.budget.remaining_s()),
        )
