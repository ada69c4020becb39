"""Graph nodes: plan -> act -> observe -> ... -> answer -> self_check -> final.

Every node reads the per-turn `TurnRuntime` from the LangGraph config and returns a partial
state update. Nothing here raises on bad model output or a failing tool: errors become steps.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from langchain_core.runnables import RunnableConfig

from graph.policy import IDK, AnswerDraft, Decision, StepSummary
from graph.state import ActResult, AgentState, PendingCall, TurnRuntime
from tools.base import Hit, ToolOutput
from tools.registry import ToolCall, ToolCallError
from traces.schema import Step, StepError, TraceHit

SELF_CHECK_TOOL = "self_check"


class StepTimeout(Exception):
    pass


def call_with_timeout(fn: Callable[[], Any], timeout_s: float) -> Any:
    """Run `fn` in a daemon thread; give up after `timeout_s` (a hung tool is abandoned, not awaited)."""
    if timeout_s <= 0:
        raise StepTimeout("no time left in the turn budget")
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except Exception as e:  # noqa: BLE001 - reported to the caller
            box["error"] = e
        except BaseException as e:  # noqa: BLE001 - a tool calling sys.exit() must not end the run
            box["error"] = RuntimeError(f"{type(e).__name__} raised inside the call: {e}")

    t = threading.Thread(target=target, daemon=True, name="tool-call")
    t.start()
    t.join(timeout_s)
    if t.is_alive():
        raise StepTimeout(f"did not finish within {timeout_s:.2f}s")
    if "error" in box:
        raise box["error"]
    return box.get("value")


def runtime(config: RunnableConfig) -> TurnRuntime:
    return config["configurable"]["runtime"]


def _ms(t0: float) -> float:
    return round((time.perf_counter() - t0) * 1000, 3)


def _trace_hits(hits: list[Hit]) -> list[TraceHit]:
    return [
        TraceHit(source=h.source, score=round(float(h.score), 4), url=h.url, title=h.title, entity_name=h.entity_name,
                 snippet=(h.content or h.snippet or h.text())[:300],
                 rerank_score=None if h.rerank_score is None else round(float(h.rerank_score), 4))
        for h in hits
    ]


def _n(state: AgentState, extra: int = 0) -> int:
    return len(state.steps) + extra


def plan(state: AgentState, config: RunnableConfig) -> dict:
    rt = runtime(config)
    if len(state.done) >= rt.max_steps:
        return _stop(state, "step_limit", f"budget: step limit of {rt.max_steps} reached")
    usable = rt.remaining_s() - rt.reserve_s()
    if usable <= 0:
        return _stop(state, "time_budget", f"budget: {rt.budget_s:.1f}s turn budget nearly spent")
    t0 = time.perf_counter()
    try:
        decision: Decision = call_with_timeout(lambda: rt.policy.decide(rt.view(state), rt.image), usable)
        if not isinstance(decision, Decision):
            decision = Decision.model_validate(decision)
    except Exception as e:  # noqa: BLE001
        kind = "timeout" if isinstance(e, StepTimeout) else "policy_error"
        step = Step(index=_n(state), node="plan", decision="answer (policy failed)", policy_ms=_ms(t0),
                    error=StepError(kind=kind, message=f"{type(e).__name__}: {e}"[:2000]))
        return {"steps": [step], "route": "answer", "ended_by": "time_budget" if kind == "timeout" else "answer"}
    if decision.action == "answer" or not decision.tool:
        step = Step(index=_n(state), node="plan", decision="answer", rationale=decision.rationale,
                    needs_retrieval=decision.needs_retrieval, policy_ms=_ms(t0))
        return {"steps": [step], "route": "answer", "ended_by": "answer"}
    room = rt.max_steps - len(state.done) - 1  # parallel calls count against the step limit too
    extra = [PendingCall(call=ToolCall(tool=p.tool, arguments=p.arguments or {}), sub_question=p.sub_question,
                         needs_retrieval=decision.needs_retrieval, rationale=f"in parallel with {decision.tool}")
             for p in decision.parallel[: max(0, room)]]
    pending = PendingCall(call=ToolCall(tool=decision.tool, arguments=decision.arguments or {}), parallel=extra,
                          sub_question=decision.sub_question, needs_retrieval=decision.needs_retrieval,
                          rationale=decision.rationale, policy_ms=_ms(t0))
    return {"pending": pending, "route": "act", "last": None}


def _stop(state: AgentState, reason: str, text: str) -> dict:
    return {"steps": [Step(index=_n(state), node="plan", decision=text)], "route": "answer", "ended_by": reason}


def run_tool(rt: TurnRuntime, state: AgentState, pending: PendingCall, time_left: float) -> ActResult:
    """Validate and execute one call; every failure comes back as a StepError."""
    call = pending.call
    t0 = time.perf_counter()
    try:
        tool, args = rt.registry.validate(call, rt.task, rt.allowed)
    except ToolCallError as e:
        return ActResult(pending=pending, error=StepError(kind=e.kind, message=e.message), latency_ms=_ms(t0))
    ctx = rt.context(state)
    try:
        out: ToolOutput = call_with_timeout(lambda: tool.run(ctx, args), time_left)
    except StepTimeout as e:
        return ActResult(pending=pending, error=StepError(kind="timeout", message=f"{call.tool}: {e}"), latency_ms=_ms(t0))
    except Exception as e:  # noqa: BLE001
        return ActResult(pending=pending, error=StepError(kind="tool_exception", message=f"{type(e).__name__}: {e}"[:2000]),
                         latency_ms=_ms(t0))
    return ActResult(pending=pending, output=out, latency_ms=_ms(t0))


def act(state: AgentState, config: RunnableConfig) -> dict:
    """Run the chosen call, and any independent calls chosen with it, concurrently."""
    rt = runtime(config)
    assert state.pending is not None
    calls = [state.pending, *state.pending.parallel]
    left = rt.remaining_s() - rt.reserve_s()
    if len(calls) == 1:
        return {"last": [run_tool(rt, state, calls[0], left)]}
    with ThreadPoolExecutor(max_workers=len(calls), thread_name_prefix="act") as pool:
        results = list(pool.map(lambda p: run_tool(rt, state, p, left), calls))
    return {"last": results}


def _tool_step(state: AgentState, node: str, res: ActResult, extra: int = 0) -> Step:
    p, out = res.pending, res.output
    step = Step(
        index=_n(state, extra), node=node, decision=f"call {p.call.tool}", tool=p.call.tool, arguments=p.call.arguments,
        sub_question=p.sub_question, needs_retrieval=p.needs_retrieval, rationale=p.rationale or None,
        policy_ms=p.policy_ms, latency_ms=res.latency_ms, error=res.error,
    )
    if out is not None:
        step.method = out.method or None
        step.summary = out.summary[:2000]
        step.search_keywords = out.keywords
        step.results = _trace_hits(out.hits)
        step.detected_box = out.box
        step.ocr_text = out.text
        step.verdict = out.verdict
    return step


def observe(state: AgentState, config: RunnableConfig) -> dict:
    """Fold each tool output into the state, in call order, and record one step per call."""
    assert state.last is not None
    steps: list[Step] = []
    done: list[StepSummary] = []
    evidence = list(state.evidence)
    update: dict[str, Any] = {"pending": None}
    for res in state.last:
        steps.append(_tool_step(state, "act", res, extra=len(steps)))
        done.append(StepSummary(tool=res.pending.call.tool, arguments=res.pending.call.arguments,
                                summary=res.output.summary if res.output else "",
                                error=f"{res.error.kind}: {res.error.message}" if res.error else None))
        out = res.output
        if out is not None:
            if out.replace_evidence:
                evidence = list(out.hits)
            elif out.hits:
                seen = {(h.source, h.url, h.entity_name, h.snippet) for h in evidence}
                evidence += [h for h in out.hits if (h.source, h.url, h.entity_name, h.snippet) not in seen]
            if out.box is not None:
                update["crop"] = out.box
            if out.text is not None:
                update["ocr_text"] = out.text
            if out.sub_questions:
                update["sub_questions"] = list(out.sub_questions)
        if res.error and res.error.kind == "timeout":
            update["ended_by"] = "time_budget"
    update.update(steps=steps, done=done, evidence=evidence)
    return update


def route_after_plan(state: AgentState) -> str:
    return "act" if state.route == "act" else "answer"


def answer(state: AgentState, config: RunnableConfig) -> dict:
    rt = runtime(config)
    t0 = time.perf_counter()
    error = None
    try:
        draft = call_with_timeout(lambda: rt.policy.answer(rt.view(state), rt.image), max(0.05, rt.remaining_s() - 0.3 * rt.reserve_s()))
        if not isinstance(draft, AnswerDraft):
            draft = AnswerDraft.model_validate(draft)
    except Exception as e:  # noqa: BLE001
        draft = AnswerDraft(answer=IDK, confidence=0.0, rationale="answer step failed")
        error = StepError(kind="timeout" if isinstance(e, StepTimeout) else "policy_error", message=f"{type(e).__name__}: {e}"[:2000])
    step = Step(index=_n(state), node="answer", decision="answer", summary=draft.answer, rationale=draft.rationale or None,
                policy_ms=_ms(t0), error=error)
    return {"steps": [step], "draft": draft}


def is_idk(text: str) -> bool:
    t = text.strip().lower().rstrip(".!")
    return t in {"i don't know", "i do not know", "i dont know", "i don’t know"} or t == ""


def self_check(state: AgentState, config: RunnableConfig) -> dict:
    """Run the self-check tool on the draft; abstain when unsupported or below the confidence floor."""
    rt = runtime(config)
    draft = state.draft or AnswerDraft(answer=IDK, confidence=0.0)
    if is_idk(draft.answer):
        return {}
    if SELF_CHECK_TOOL not in {t.name for t in rt.tool_specs()}:  # the allow-list, computed once per turn
        if draft.confidence < rt.abstain_below:
            return {"steps": [Step(index=_n(state), node="self_check", decision="abstain",
                                   rationale=f"draft confidence {draft.confidence:.2f} < {rt.abstain_below:.2f}")],
                    "verdict": None, "final_answer": IDK}
        return {}
    pend = PendingCall(call=ToolCall(tool=SELF_CHECK_TOOL, arguments={}), rationale="verify the draft answer against the evidence")
    res = run_tool(rt, state, pend, max(0.05, rt.remaining_s() - 0.05))
    step = _tool_step(state, "self_check", res)
    verdict = res.output.verdict if res.output else None
    if verdict is None:
        # A broken self-check cannot vouch for the draft: keep it only if the policy itself was confident.
        keep = draft.confidence >= max(rt.abstain_below, 0.5)
        step.decision = "keep (self-check unavailable)" if keep else "abstain (self-check unavailable)"
        return {"steps": [step], "final_answer": None if keep else IDK}
    confident = min(verdict.confidence, 1.0) >= rt.abstain_below
    keep = verdict.supported and confident
    step.decision = "keep" if keep else "abstain"
    return {"steps": [step], "verdict": verdict, "final_answer": None if keep else IDK}


def final(state: AgentState, config: RunnableConfig) -> dict:
    rt = runtime(config)
    draft = state.draft or AnswerDraft(answer=IDK, confidence=0.0)
    text = state.final_answer if state.final_answer is not None else draft.answer
    text = (text or "").strip() or IDK
    decision = "abstain" if is_idk(text) else "answer"
    if len(text) > rt.max_answer_chars:  # CRAG-MM judges only the first 75 tokens; a runaway answer is cut
        text = text[: rt.max_answer_chars].rsplit(" ", 1)[0].rstrip(" ,;") or text[: rt.max_answer_chars]
        decision += f" (cut to {len(text)} characters)"
    step = Step(index=_n(state), node="final", decision=decision, summary=text)
    return {"steps": [step], "final_answer": text, "ended_by": state.ended_by or "answer"}
