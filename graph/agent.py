"""`Agent.run_turn`: one turn through the graph, always ending in an answer or "I don't know" and a trace.

Build an Agent with `graph.build.build_agent(AgentConfig)`; this module only runs turns.
"""

from __future__ import annotations

import time
import uuid
from collections import deque
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from glasses_rag.core.calls import CancelScope, affinity, scope
from glasses_rag.policies.protocol import IDK, Policy, is_abstention
from glasses_rag.policies.self_check import Verifier
from graph.budget import TurnBudget
from graph.config import DEFAULT_TOOL_PROFILE, AgentConfig
from graph.flow import build_graph
from graph.state import AgentState, TurnContext
from tools.base import HistoryTurn
from tools.registry import ToolProfile, ToolRegistry
from traces.schema import ErrorKind, FinalEvent, ImageInfo, StepError, TokenTotals, TurnTrace, sequential_rounds

# The state fields the trace is built from. A turn streams only these, and only as values (graph.invoke streams each
# step's updates as well, to look for interrupts, which this graph never raises; its version="v2" rebuilds the state
# model from the values after every step).
TURN_OUTCOME = ["steps", "draft", "verdict", "final_answer", "ended_by"]


class TurnInput(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    task: int = Field(ge=1, description="The benchmark's task (CRAG-MM: 1, 2, 3): which tools the turn offers.")
    session_id: str
    interaction_id: str
    turn_index: int = 0
    question: str
    image: Any = None
    image_info: ImageInfo = Field(default_factory=ImageInfo)
    history: list[HistoryTurn] = Field(default_factory=list)
    labels: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def of_turn(cls, conv: Any, i: int, task: int, photo: tuple[Any, Any], history: list[HistoryTurn]) -> TurnInput:
        """Turn `i` of the conversation `conv` (glasses_rag.retrieval.schema.Conversation) as the agent takes it:
        the question, the photo and its ImageInfo (`Conversation.photo`), the turns before it, the labels."""
        turn = conv.turns[i]
        return cls(
            task=task,
            session_id=conv.session_id,
            interaction_id=turn.interaction_id,
            turn_index=i,
            question=turn.query or "",
            image=photo[0],
            image_info=photo[1],
            history=list(history),
            labels={
                "domain": turn.domain,
                "query_category": turn.query_category,
                "dynamism": turn.dynamism,
                "image_quality": turn.image_quality,
                **turn.labels,
            },
        )


class Agent:
    """A policy, a verifier, tools and shared resources, run turn by turn through the LangGraph graph.

    Built by `graph.build.build_agent` (the one way); `run_turn` answers one turn and returns its `TurnTrace`.

    Example:
        >>> from glasses_rag.retrieval.search import NullSearch
        >>> from glasses_rag.policies.protocol import ScriptedPolicy
        >>> from graph.agent import TurnInput
        >>> from graph.build import build_agent
        >>> from graph.config import DEFAULT_TOOL_PROFILE, AgentConfig
        >>> from tools import ToolRegistry
        >>> policy = ScriptedPolicy([], answer={"answer": "Paris", "confidence": 0.8})
        >>> agent = build_agent(AgentConfig(warm_up=False), search=NullSearch(), registry=ToolRegistry([]),
        ...                     policy=policy)
        >>> inp = TurnInput(task=1, session_id="s1", interaction_id="s1-0", question="what is the capital of France?")
        >>> trace = agent.run_turn(inp)  # nothing was looked up: the self-check finds no support and abstains
        >>> trace.answer, trace.abstained, trace.ended_by
        ("I don't know", True, 'answer')
        >>> unchecked = build_agent(AgentConfig(warm_up=False, self_check="off"), search=NullSearch(),
        ...                         registry=ToolRegistry([]), policy=policy)
        >>> unchecked.run_turn(inp).answer
        'Paris'
        >>> agent.run_turn(TurnInput(task=1, session_id="s1", interaction_id="s1-1", question=" ")).error
        'empty question'
    """

    def __init__(
        self,
        policy: Policy,
        resources: Any,
        config: AgentConfig,
        registry: ToolRegistry,
        verifier: Verifier | None,
        llm: Any = None,
        run_id: str | None = None,
        tool_profile: ToolProfile = DEFAULT_TOOL_PROFILE,
    ):
        self.policy = policy
        self.resources = resources
        self.config = config
        self.registry = registry
        self.verifier = verifier
        self.llm = llm
        self.run_id = run_id or uuid.uuid4().hex[:12]
        self.tool_profile = tool_profile  # the benchmark's: which tools a turn offers
        self.search_name = getattr(getattr(resources, "search", None), "name", "none")
        self.fingerprint = config.fingerprint()
        self.graph = build_graph()

    @property
    def policy_name(self) -> str:
        return getattr(self.policy, "name", type(self.policy).__name__)

    def run_turn(self, inp: TurnInput) -> TurnTrace:
        """Answer one turn within the configured budget and return its trace; a turn never raises.

        Args:
            inp: the turn: task, ids, question, image (a PIL image or None) and the conversation's earlier turns.

        Returns:
            The `TurnTrace`: every step, the answer ("I don't know" when the agent abstains) and why the turn ended
            (`answer`, `step_limit`, `time_budget` or `error`, with the error in the trace, never raised). Example:
            the class docstring.
        """
        b = self.config.budget
        question = (inp.question or "").strip()
        notes: list[str] = []
        if len(question) > b.max_question_chars:
            notes.append(f"question cut from {len(question)} to {b.max_question_chars} characters")
            question = question[: b.max_question_chars]
        base = self._trace_fields(inp, notes)
        if not question:
            return error_trace(base, "bad_input", "empty question", 0.0)
        ctx = self._context(inp, question)
        t0 = time.perf_counter()
        try:
            final = self._run_graph(ctx, inp.session_id)
        except (Exception, SystemExit) as e:  # noqa: BLE001 - a turn never crashes the run (sys.exit in a tool included)
            msg = f"{type(e).__name__}: {e}"[:2000]
            return error_trace(base, "graph_error", msg, round((time.perf_counter() - t0) * 1000, 3))
        finally:
            ctx.scope.cancel()  # whatever is still in flight for this turn (abandoned calls) is cancelled now
        return finished_trace(base, final, round((time.perf_counter() - t0) * 1000, 3))

    def _trace_fields(self, inp: TurnInput, notes: list[str]) -> dict[str, Any]:
        """What every trace of this turn says whatever happens: the turn, the agent, its budget."""
        b = self.config.budget
        return dict(
            run_id=self.run_id,
            task=inp.task,
            session_id=inp.session_id,
            interaction_id=inp.interaction_id,
            turn_index=inp.turn_index,
            question=inp.question,
            image=inp.image_info,
            labels=inp.labels,
            policy=self.policy_name,
            search_backend=self.search_name,
            budget_s=b.budget_s,
            max_steps=b.max_steps,
            config_fingerprint=self.fingerprint,
            notes=notes,
            history=inp.history,
        )

    def _context(self, inp: TurnInput, question: str) -> TurnContext:
        """The turn's runtime (LangGraph's `context`): what is not state."""
        b = self.config.budget
        return TurnContext(
            task=inp.task,
            question=question,
            image=inp.image,
            history=inp.history,
            policy=self.policy,
            verifier=self.verifier,
            registry=self.registry,
            resources=self.resources,
            allowed=self.config.tools.allowed,
            budget=TurnBudget(b.budget_s, b.max_steps, b.answer_reserve_s),
            abstain_below=self.config.abstain_below,
            max_answer_chars=b.max_answer_chars,
            llm=self.llm,
            scope=CancelScope(),
            profile=self.tool_profile,
        )

    def _run_graph(self, ctx: TurnContext, session_id: str) -> AgentState:
        """The graph run to its end under the turn's cancel scope; the final state."""
        with scope(ctx.scope), affinity(session_id):  # one conversation stays on one model replica
            values = deque(
                self.graph.stream(
                    AgentState(),
                    context=ctx,
                    output_keys=TURN_OUTCOME,
                    stream_mode="values",
                    config={"recursion_limit": self.config.budget.graph_recursion_limit},
                ),
                maxlen=1,
            )
        return AgentState.model_validate(values[-1])  # the last values streamed are the final state


def error_trace(base: dict[str, Any], kind: ErrorKind, message: str, latency_ms: float) -> TurnTrace:
    """The trace of a turn that could not run (empty question, the graph failed): "I don't know" and the error."""
    event = FinalEvent(answer=IDK, decision="abstain", error=StepError(kind=kind, message=message))
    return TurnTrace(
        **base, steps=[event], answer=IDK, abstained=True, ended_by="error", latency_ms=latency_ms, error=message
    )


def finished_trace(base: dict[str, Any], final: AgentState, latency_ms: float) -> TurnTrace:
    """The trace of a turn the graph ran to its end: its steps (indexed in order), answer, confidence, tokens."""
    answer = final.final_answer or IDK
    conf = final.verdict.confidence if final.verdict else (final.draft.confidence if final.draft else None)
    steps = [s if s.index == i else s.model_copy(update={"index": i}) for i, s in enumerate(final.steps)]
    calls = [c for s in steps for c in s.model_calls]
    tokens = TokenTotals(
        calls=len(calls),
        sequential_calls=sequential_rounds(calls),
        prompt_tokens=sum(c.prompt_tokens or 0 for c in calls),
        completion_tokens=sum(c.completion_tokens or 0 for c in calls),
        calls_without_usage=sum(c.prompt_tokens is None and c.completion_tokens is None for c in calls),
    )
    abstained = is_abstention(answer)
    return TurnTrace(
        **base,
        steps=steps,
        answer=answer,
        abstained=abstained,
        confidence=None if conf is None else round(float(conf), 4),
        ended_by=final.ended_by or "answer",
        latency_ms=latency_ms,
        tokens=tokens,
        entity=final.draft.entity if final.draft and not abstained else None,
        error=unreachable_error(calls),
    )


def unreachable_error(calls: list[Any]) -> str | None:
    """The turn's error when a model server could not be reached (its answer is then not the model's), else None."""
    failed = [c for c in calls if c.unreachable]
    if not failed:
        return None
    return f"model server unreachable in {len(failed)} of {len(calls)} model call(s): {failed[0].error}"[:2000]
