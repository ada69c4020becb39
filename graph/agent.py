"""`Agent.run_turn`: one turn through the graph, always ending in an answer or "I don't know" and a trace."""

from __future__ import annotations

import time
import uuid
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from graph.build import build_graph
from graph.nodes import is_idk
from graph.policy import IDK, Policy
from graph.state import AgentState, TurnRuntime
from tools.base import HistoryTurn
from tools.registry import REGISTRY, ToolRegistry
from traces.schema import Step, StepError, TurnTrace


class TurnInput(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    task: int = Field(ge=1, le=3)
    session_id: str
    interaction_id: str
    turn_index: int = 0
    question: str
    image: Any = None
    image_note: str | None = None
    history: list[HistoryTurn] = Field(default_factory=list)
    labels: dict[str, str | None] = Field(default_factory=dict)


class AgentConfig(BaseModel):
    budget_s: float = Field(10.0, gt=0, description="Per-turn time budget in seconds (CRAG-MM allows 10 s).")
    max_steps: int = Field(8, ge=0, description="Maximum tool calls per turn.")
    abstain_below: float = Field(0.35, ge=0, le=1, description="Self-check confidence under which the agent says I don't know.")
    allowed_tools: list[str] | None = Field(None, description="Narrow the task's allow-list to these tools.")
    max_question_chars: int = Field(2000, description="Longer questions are cut, and the cut is noted in the trace.")
    max_answer_chars: int = Field(600, ge=20, description="Longer answers are cut (only the first 75 tokens are judged).")
    answer_reserve_s: float | None = Field(None, ge=0, description="Seconds kept for answer + self-check "
                                           "(default: min(1.5, 20% of the budget); raise it for slow VLMs).")


class Agent:
    def __init__(self, policy: Policy, resources: Any, config: AgentConfig | None = None,
                 registry: ToolRegistry = REGISTRY, run_id: str | None = None, search_name: str | None = None):
        self.policy = policy
        self.resources = resources
        self.config = config or AgentConfig()
        self.registry = registry
        self.run_id = run_id or uuid.uuid4().hex[:12]
        self.search_name = search_name or getattr(getattr(resources, "search", None), "name", "none")
        self.graph = build_graph()

    def run_turn(self, inp: TurnInput) -> TurnTrace:
        cfg = self.config
        question = (inp.question or "").strip()
        notes: list[Step] = []
        if len(question) > cfg.max_question_chars:
            notes.append(Step(index=0, node="plan", decision=f"question cut from {len(question)} to {cfg.max_question_chars} characters"))
            question = question[: cfg.max_question_chars]
        rt = TurnRuntime(task=inp.task, question=question, image=inp.image, history=inp.history, policy=self.policy,
                         registry=self.registry, resources=self.resources, allowed=cfg.allowed_tools,
                         budget_s=cfg.budget_s, max_steps=cfg.max_steps, abstain_below=cfg.abstain_below,
                         max_answer_chars=cfg.max_answer_chars, answer_reserve_s=cfg.answer_reserve_s)
        base = dict(run_id=self.run_id, task=inp.task, session_id=inp.session_id, interaction_id=inp.interaction_id,
                    turn_index=inp.turn_index, question=inp.question, has_image=inp.image is not None,
                    image_note=inp.image_note, labels=inp.labels, policy=getattr(self.policy, "name", type(self.policy).__name__),
                    search_backend=self.search_name, budget_s=cfg.budget_s, max_steps=cfg.max_steps)
        if not question:
            step = Step(index=0, node="final", decision="abstain", error=StepError(kind="bad_input", message="empty question"))
            return TurnTrace(**base, steps=[step], answer=IDK, abstained=True, ended_by="error",
                             latency_ms=0.0, error="empty question")
        t0 = time.perf_counter()
        state = AgentState(steps=notes)
        try:
            out = self.graph.invoke(state, config={"configurable": {"runtime": rt},
                                                   "recursion_limit": 3 * cfg.max_steps + 12})
            final = AgentState.model_validate(out) if not isinstance(out, AgentState) else out
        except (Exception, SystemExit) as e:  # noqa: BLE001 - a turn never crashes the run (sys.exit in a tool included)
            msg = f"{type(e).__name__}: {e}"[:2000]
            step = Step(index=len(state.steps), node="final", decision="abstain (graph error)",
                        error=StepError(kind="graph_error", message=msg))
            return TurnTrace(**base, steps=[*state.steps, step], answer=IDK, abstained=True, ended_by="error",
                             latency_ms=round((time.perf_counter() - t0) * 1000, 3), error=msg)
        answer = final.final_answer or IDK
        conf = final.verdict.confidence if final.verdict else (final.draft.confidence if final.draft else None)
        steps = [s.model_copy(update={"index": i}) for i, s in enumerate(final.steps)]
        return TurnTrace(**base, steps=steps, answer=answer, abstained=is_idk(answer),
                         confidence=None if conf is None else round(float(conf), 4),
                         ended_by=final.ended_by or "answer", latency_ms=round((time.perf_counter() - t0) * 1000, 3),
                         entity=final.draft.entity if final.draft and not is_idk(answer) else None)
