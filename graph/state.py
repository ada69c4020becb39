"""The typed LangGraph state of one turn, and the per-turn runtime that is not state (image, models, clock)."""

from __future__ import annotations

import operator
import time
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from graph.policy import AnswerDraft, Policy, PolicyView, StepSummary, ToolSpec
from tools.base import Box, HistoryTurn, Hit, ToolContext, ToolOutput, Verdict
from tools.registry import ToolCall, ToolRegistry
from traces.schema import Step, StepError

EndReason = Literal["answer", "step_limit", "time_budget", "error"]


class PendingCall(BaseModel):
    call: ToolCall
    parallel: list[PendingCall] = Field(default_factory=list)
    sub_question: str | None = None
    needs_retrieval: bool | None = None
    rationale: str = ""
    policy_ms: float | None = None


class ActResult(BaseModel):
    """What `act` hands to `observe`: the output or the error, with timing."""

    pending: PendingCall
    output: ToolOutput | None = None
    error: StepError | None = None
    latency_ms: float = 0.0


class AgentState(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    steps: Annotated[list[Step], operator.add] = Field(default_factory=list)
    done: Annotated[list[StepSummary], operator.add] = Field(default_factory=list)
    evidence: list[Hit] = Field(default_factory=list)
    crop: Box | None = None
    ocr_text: str | None = None
    sub_questions: list[str] = Field(default_factory=list)
    pending: PendingCall | None = None
    last: list[ActResult] | None = None
    route: Literal["act", "answer"] | None = None
    draft: AnswerDraft | None = None
    verdict: Verdict | None = None
    final_answer: str | None = None
    ended_by: EndReason | None = None


@dataclass
class TurnRuntime:
    """Per-turn objects that are not serialisable state: image, resources, policy, clock."""

    task: int
    question: str
    image: Any
    history: list[HistoryTurn]
    policy: Policy
    registry: ToolRegistry
    resources: Any
    allowed: list[str] | None
    budget_s: float
    max_steps: int
    abstain_below: float
    max_answer_chars: int = 600
    answer_reserve_s: float | None = None
    started: float = field(default_factory=time.monotonic)
    _specs: list[ToolSpec] | None = field(default=None, repr=False)

    @property
    def deadline(self) -> float:
        return self.started + self.budget_s

    def remaining_s(self) -> float:
        return self.deadline - time.monotonic()

    def reserve_s(self) -> float:
        """Time kept back for answer + self-check so the turn always ends inside its budget."""
        if self.answer_reserve_s is not None:
            return min(self.answer_reserve_s, 0.9 * self.budget_s)
        return min(1.5, 0.2 * self.budget_s)

    def tool_specs(self) -> list[ToolSpec]:
        if self._specs is None:
            self._specs = [
                ToolSpec(name=t.name, description=t.description, signature=t.signature_text(), json_schema=t.json_schema())
                for t in self.registry.for_task(self.task, self.allowed)
            ]
        return self._specs

    def context(self, state: AgentState) -> ToolContext:
        return ToolContext(
            task=self.task, question=self.question, image=self.image, history=self.history,
            evidence=state.evidence, crop=state.crop, ocr_text=state.ocr_text,
            sub_questions=state.sub_questions, draft_answer=state.draft.answer if state.draft else None,
            draft_confidence=state.draft.confidence if state.draft else None,
            resources=self.resources,
        )

    def view(self, state: AgentState) -> PolicyView:
        n_actions = len(state.done)
        return PolicyView(
            task=self.task, question=self.question, history=self.history, has_image=self.image is not None,
            tools=self.tool_specs(), done=state.done, evidence=state.evidence, crop=state.crop,
            ocr_text=state.ocr_text, sub_questions=state.sub_questions,
            remaining_steps=max(0, self.max_steps - n_actions), remaining_s=max(0.0, self.remaining_s()),
        )
