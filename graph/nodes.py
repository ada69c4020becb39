"""Graph nodes: plan -> tools -> plan -> ... -> answer -> self_check -> final.

Every node reads the per-turn `TurnContext` from LangGraph's run context and returns a partial state
update with one typed trace event. Nothing here raises on bad model output or a failing tool: errors
become events. Policy, tool and verifier calls run under the timeouts the turn's budget gives (graph/budget.py),
enforced by glasses_rag.core.calls.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import cache, partial
from typing import Any

from langgraph.runtime import Runtime
from langgraph.types import Command, Overwrite
from pydantic import BaseModel

from glasses_rag.core.calls import CallTimeout, collect_model_calls, run_many, run_with_deadline
from glasses_rag.policies.protocol import IDK, AnswerDraft, Decision, StepSummary, is_abstention
from graph.state import ActResult, AgentState, PendingCall, TurnContext
from tools.base import ToolContext, ToolOutput, field_adapter
from tools.registry import Tool, ToolCall, ToolCallError, ToolUpdateError
from traces.schema import (
    AnswerEvent,
    FinalEvent,
    ModelCall,
    PlanEvent,
    StepError,
    ToolCallEvent,
    VerdictEvent,
    trace_form,
)


def _ms(t0: float) -> float:
    return round((time.perf_counter() - t0) * 1000, 3)


def _error(kind: Any, e: BaseException | str) -> StepError:
    msg = e if isinstance(e, str) else f"{type(e).__name__}: {e}"
    return StepError(kind=kind, message=msg[:2000])


def _index(state: AgentState) -> int:
    return len(state.steps)


def _stop(state: AgentState, reason: str, text: str, **event: Any) -> Command:
    return Command(
        goto="answer",
        update={
            "steps": [PlanEvent(index=_index(state), decision="stop", reason=text, **event)],
            "pending": None,
            "ended_by": reason,
        },
    )


def plan(state: AgentState, runtime: Runtime[TurnContext]) -> Command:
    """Ask the policy for the next step; route to `tools` with the call(s) it chose, or to `answer`. (The route is
    decided here, with the state update, so LangGraph need not re-read the whole state to evaluate an edge.)"""
    ctx = runtime.context
    budget = ctx.budget
    if budget.steps_left(len(state.done)) == 0:
        return _stop(state, "step_limit", f"step limit of {budget.max_steps} tool calls reached")
    if budget.graph_nearly_spent(state.remaining_steps):
        return _stop(state, "step_limit", "graph recursion limit nearly reached")
    usable = budget.tool_time_s()
    if usable <= 0:
        return _stop(state, "time_budget", f"{budget.budget_s:g}s turn budget nearly spent")
    t0 = time.perf_counter()
    with collect_model_calls() as calls:
        decided = _decide(state, ctx, usable, t0, calls)
    if isinstance(decided, Command):  # the policy failed or ran out of time: the turn goes to its answer
        return decided
    if decided.action == "answer" or not decided.tool:
        return _answer_now(state, decided, _ms(t0), calls)
    return Command(goto="tools", update={"pending": _pending(state, decided, budget, _ms(t0), calls)})


def _decide(
    state: AgentState, ctx: TurnContext, usable: float, t0: float, calls: list[ModelCall]
) -> Decision | Command:
    """The policy's decision within `usable` seconds, or the stop (a Command) when it failed or timed out."""
    try:
        decision = run_with_deadline(
            lambda: ctx.policy.decide(ctx.view(state), ctx.image), usable, ctx.scope, inline=not blocking(ctx.policy)
        )
        return decision if isinstance(decision, Decision) else Decision.model_validate(decision)
    except CallTimeout as e:
        return _stop(
            state,
            "time_budget",
            "the policy did not decide in time",
            error=_error("timeout", e),
            policy_ms=_ms(t0),
            model_calls=calls,
        )
    except Exception as e:  # noqa: BLE001 - an unparseable reply or a broken policy: the turn still answers
        return _stop(
            state,
            "error",
            "the policy failed; answering with what was gathered",
            error=_error("policy_error", e),
            policy_ms=_ms(t0),
            model_calls=calls,
        )


def _answer_now(state: AgentState, decision: Decision, policy_ms: float, calls: list[ModelCall]) -> Command:
    """The policy answers: to `answer`, with the draft a decision may carry (it saves the answer step's round trip)."""
    event = PlanEvent(
        index=_index(state),
        decision="answer",
        reason=decision.rationale,
        needs_retrieval=decision.needs_retrieval,
        policy_ms=policy_ms,
        model_calls=calls,
        answer_included=decision.answer is not None,
    )
    return Command(
        goto="answer", update={"steps": [event], "pending": None, "ended_by": "answer", "draft": decision.answer}
    )


def _pending(
    state: AgentState, decision: Decision, budget: Any, policy_ms: float, calls: list[ModelCall]
) -> PendingCall:
    """The call(s) the policy chose, those decided in parallel cut to the room the step limit leaves."""
    room = budget.parallel_room(len(state.done))  # parallel calls count against the step limit too
    extra = [
        PendingCall(
            call=ToolCall(tool=p.tool, arguments=p.arguments or {}),
            sub_question=p.sub_question,
            needs_retrieval=decision.needs_retrieval,
            rationale=f"in parallel with {decision.tool}",
            parallel_with=decision.tool,
        )
        for p in (decision.parallel or [])[: max(0, room)]
    ]
    return PendingCall(
        call=ToolCall(tool=decision.tool or "", arguments=decision.arguments or {}),
        parallel=extra,
        sub_question=decision.sub_question,
        needs_retrieval=decision.needs_retrieval,
        rationale=decision.rationale,
        policy_ms=policy_ms,
        model_calls=calls,
    )


def blocking(obj: Any) -> bool:
    """Policies, verifiers and tools may declare `blocking = False` (quick local work, no I/O): run them inline."""
    return getattr(obj, "blocking", True) is not False


def _execute(tool: Tool, tool_ctx: ToolContext, args: BaseModel) -> tuple[ToolOutput, float, list[ModelCall]]:
    """One validated call: its output, its latency and the model calls it made."""
    t0 = time.perf_counter()
    with collect_model_calls() as calls:
        out = tool.run(tool_ctx, args)
    return out, _ms(t0), calls


def _outcome(pending: PendingCall, ok: bool, value: Any, t0: float) -> ActResult:
    if ok:
        out, ms, model_calls = value
        return ActResult(pending=pending, output=out, latency_ms=ms, model_calls=model_calls)
    if isinstance(value, CallTimeout):
        return ActResult(pending=pending, error=_error("timeout", f"{pending.call.tool}: {value}"), latency_ms=_ms(t0))
    kind = "bad_update" if isinstance(value, ToolUpdateError) else "tool_exception"
    return ActResult(
        pending=pending, error=_error(kind, value if kind == "tool_exception" else str(value)), latency_ms=_ms(t0)
    )


def _run_calls(ctx: TurnContext, state: AgentState, calls: list[PendingCall]) -> list[ActResult]:
    """Validate the calls and run those that pass concurrently under the turn's deadline (declared non-blocking
    tools in this thread); one result per call, in call order: its output, or the refusal or error as it ended."""
    results: list[ActResult | None] = []
    runs: list[Callable[[], Any]] = []
    inline: list[bool] = []
    ran: list[int] = []
    for i, p in enumerate(calls):
        try:
            tool, args = ctx.registry.validate(p.call, ctx.task, ctx.allowed, ctx.profile)
        except ToolCallError as e:
            results.append(ActResult(pending=p, error=StepError(kind=e.kind, message=e.message)))
            continue
        results.append(None)
        runs.append(partial(_execute, tool, ctx.tool_context(state), args))
        inline.append(not tool.blocking)
        ran.append(i)
    if runs:
        t0 = time.perf_counter()
        for i, (ok, value) in zip(ran, run_many(runs, ctx.budget.tool_time_s(), ctx.scope, inline)):
            results[i] = _outcome(calls[i], ok, value, t0)
    return results  # type: ignore[return-value]  # every slot is filled by now


@cache
def _tool_labels(tool: Tool) -> tuple[tuple[str, ...], str | None]:
    """A tool's capability names and SuperGlasses hop kind, as its trace events carry them (once per tool)."""
    return tuple(c.name for c in tool.capabilities), tool.search


def _update_in_trace_form(update: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """A checked tool update as the trace keeps it (JSON, texts clipped), and the fields it overwrote."""
    if not update:
        return {}, []
    form: dict[str, Any] = {}
    for name, value in update.items():
        raw = value.value if isinstance(value, Overwrite) else value
        form[name] = trace_form(field_adapter(name).dump_python(raw, mode="json"))
    return form, sorted(k for k, v in update.items() if isinstance(v, Overwrite))


def _tool_event(ctx: TurnContext, index: int, res: ActResult) -> ToolCallEvent:
    p, out = res.pending, res.output
    tool = ctx.registry.get(p.call.tool)
    capabilities, search = _tool_labels(tool) if tool is not None else ((), None)
    wrote: dict[str, Any] = {}
    if out is not None:
        update, replaced = _update_in_trace_form(out.update)
        wrote = dict(
            method=out.method or None,
            summary=out.summary[:2000],
            search_keywords=out.keywords,
            update=update,
            replaced=replaced,
        )
    return (
        ToolCallEvent(  # (validating is faster here than model_construct, which calls default factories the slow way)
            index=index,
            tool=p.call.tool,
            arguments=p.call.arguments,
            capabilities=capabilities,
            search=search,
            sub_question=p.sub_question,
            needs_retrieval=p.needs_retrieval,
            rationale=p.rationale or None,
            parallel_with=p.parallel_with,
            policy_ms=p.policy_ms,
            latency_ms=res.latency_ms,
            error=res.error,
            model_calls=[*p.model_calls, *res.model_calls],
            **wrote,
        )
    )


def _one_overwrite_per_field(results: list[ActResult]) -> None:
    """LangGraph takes one Overwrite of a field per step: a second call replacing the same field in the same round
    keeps its event but not its update (a `bad_update` error says so)."""
    seen: set[str] = set()
    for res in results:
        out = res.output
        if out is None:
            continue
        twice = [k for k, v in out.update.items() if isinstance(v, Overwrite) and k in seen]
        seen |= {k for k, v in out.update.items() if isinstance(v, Overwrite)}
        if twice:
            res.error = _error(
                "bad_update",
                f"{res.pending.call.tool} replaced {', '.join(twice)}, which another "
                "call of the same round already replaced; its update was dropped",
            )
            res.output = out.model_copy(update={"update": {}})


def _call_update(ctx: TurnContext, index: int, res: ActResult) -> Command:
    """One call's state update for LangGraph's reducers, with its trace event and its summary for the policy."""
    p, out = res.pending, res.output
    update: dict[str, Any] = dict(out.update) if out is not None else {}
    summary = StepSummary(
        tool=p.call.tool,
        arguments=p.call.arguments,
        summary=out.summary if out is not None else "",
        parallel_with=p.parallel_with,
        error=f"{res.error.kind}: {res.error.message}" if res.error else None,
        update={k: v.value if isinstance(v, Overwrite) else v for k, v in update.items()} if update else {},
        replaced=sorted(k for k, v in update.items() if isinstance(v, Overwrite)),
    )
    update["steps"] = [_tool_event(ctx, index, res)]
    update["done"] = [summary]
    return Command(update=update)


def tools(state: AgentState, runtime: Runtime[TurnContext]) -> Command | list[Command]:
    """Run the chosen call and those chosen with it, concurrently, under the turn's deadline. Each call's update
    goes back to LangGraph as its own Command, in call order, with its trace event: LangGraph's reducers fold them
    into the state."""
    ctx = runtime.context
    pending = state.pending
    assert pending is not None
    results = _run_calls(ctx, state, [pending, *pending.parallel] if pending.parallel else [pending])
    if len(results) > 1:
        _one_overwrite_per_field(results)
    index = _index(state)
    out = [_call_update(ctx, index + i, res) for i, res in enumerate(results)]
    if any(r.error is not None and r.error.kind == "timeout" for r in results):
        out.append(Command(update={"ended_by": "time_budget"}))
    return out[0] if len(out) == 1 else out  # (one Command is the same write, and LangGraph reads it sooner)


def answer(state: AgentState, runtime: Runtime[TurnContext]) -> dict:
    """The draft: the one the deciding reply carried, else a separate answer request to the policy."""
    ctx = runtime.context
    if state.draft is not None:
        d = state.draft
        return {
            "steps": [
                AnswerEvent(
                    index=_index(state),
                    answer=d.answer,
                    confidence=d.confidence,
                    confidence_from=d.confidence_from,
                    entity=d.entity,
                    rationale=d.rationale or None,
                    from_decision=True,
                )
            ]
        }
    t0 = time.perf_counter()
    error = None
    with collect_model_calls() as calls:
        try:
            draft = run_with_deadline(
                lambda: ctx.policy.answer(ctx.view(state), ctx.image),
                ctx.budget.answer_time_s(),
                ctx.scope,
                inline=not blocking(ctx.policy),
            )
            if not isinstance(draft, AnswerDraft):
                draft = AnswerDraft.model_validate(draft)
        except Exception as e:  # noqa: BLE001
            draft = AnswerDraft(answer=IDK, confidence=0.0, rationale="the answer step failed")
            error = _error("timeout" if isinstance(e, CallTimeout) else "policy_error", e)
    event = AnswerEvent(
        index=_index(state),
        answer=draft.answer,
        confidence=draft.confidence,
        confidence_from=draft.confidence_from,
        rationale=draft.rationale or None,
        entity=draft.entity,
        policy_ms=_ms(t0),
        error=error,
        model_calls=calls,
    )
    return {"steps": [event], "draft": draft}


def _evidence_texts(state: AgentState) -> list[str]:
    return (
        [h.text() for h in state.evidence]
        + ([state.ocr_text] if state.ocr_text else [])
        + [f.text for f in state.facts]
    )


def self_check(state: AgentState, runtime: Runtime[TurnContext]) -> dict:
    """Ask the verifier about the draft; abstain when it is unsupported or below the confidence floor."""
    ctx = runtime.context
    draft = state.draft or AnswerDraft(answer=IDK, confidence=0.0)
    if is_abstention(draft.answer):
        return {}
    if ctx.verifier is None:  # self-check off: only the draft's own confidence counts
        if draft.confidence >= ctx.abstain_below:
            return {}
        event = VerdictEvent(
            index=_index(state),
            decision="abstain",
            reason=f"draft confidence {draft.confidence:.2f} < {ctx.abstain_below:.2f}",
        )
        return {"steps": [event], "final_answer": IDK}
    verifier = ctx.verifier
    t0 = time.perf_counter()
    with collect_model_calls() as calls:
        try:
            verdict = run_with_deadline(
                lambda: verifier.verify(ctx.question, draft, _evidence_texts(state), ctx.image, view=ctx.view(state)),
                ctx.budget.verify_time_s(),
                ctx.scope,
                inline=not blocking(verifier),
            )
        except Exception as e:  # noqa: BLE001 - a broken self-check cannot vouch for the draft
            # a self-check that answers "I don't know" unless the draft passes it (UNSW Algorithm 1) does so
            # when it cannot run; others keep a confident draft
            strict = bool(getattr(verifier, "abstain_on_failure", False))
            keep = not strict and draft.confidence >= max(ctx.abstain_below, 0.5)
            event = VerdictEvent(
                index=_index(state),
                decision="keep" if keep else "abstain",
                latency_ms=_ms(t0),
                reason="self-check unavailable; kept only because the draft was confident"
                if keep
                else "self-check unavailable: this self-check keeps only a draft that passed it"
                if strict
                else "self-check unavailable and the draft was not confident enough",
                error=_error("timeout" if isinstance(e, CallTimeout) else "verifier_error", e),
                model_calls=calls,
            )
            return {"steps": [event], "final_answer": None if keep else IDK}
    keep = verdict.supported and min(verdict.confidence, 1.0) >= ctx.abstain_below
    reason = (
        verdict.reason
        if keep or not verdict.supported
        else (f"confidence {verdict.confidence:.2f} < {ctx.abstain_below:.2f}; {verdict.reason}")
    )
    event = VerdictEvent(
        index=_index(state),
        decision="keep" if keep else "abstain",
        verdict=verdict,
        reason=reason,
        latency_ms=_ms(t0),
        model_calls=calls,
    )
    return {"steps": [event], "verdict": verdict, "final_answer": None if keep else IDK}


def final(state: AgentState, runtime: Runtime[TurnContext]) -> dict:
    ctx = runtime.context
    draft = state.draft or AnswerDraft(answer=IDK, confidence=0.0)
    text = state.final_answer if state.final_answer is not None else draft.answer
    text = (text or "").strip() or IDK
    cut_from = None
    if len(text) > ctx.max_answer_chars:  # CRAG-MM judges only the first 75 tokens; a runaway answer is cut
        cut_from = len(text)
        text = text[: ctx.max_answer_chars].rsplit(" ", 1)[0].rstrip(" ,;") or text[: ctx.max_answer_chars]
    abstain = is_abstention(text)
    if abstain:
        text = IDK
    event = FinalEvent(
        index=_index(state), answer=text, decision="abstain" if abstain else "answer", cut_from_chars=cut_from
    )
    return {"steps": [event], "final_answer": text, "ended_by": state.ended_by or "answer"}
