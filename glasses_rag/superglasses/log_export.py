"""Turn traces as SuperGlasses logs: `to_superglasses(trace)` (the hops a turn worked on, its tool decision, its
labels and verdict), a run folder's traces read bounded (`read_run`) and written as logs (`export_run`)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from glasses_rag.superglasses.log_model import (
    NONE,
    NOT_DISPATCHED,
    SEARCH_TOOLS,
    TEXT,
    SGHop,
    SGLog,
    SGObject,
    hop_tool,
    note_problem,
)
from traces.schema import ToolCallEvent, TurnTrace
from traces.store import read_trace_file, write_json_atomic


def _dispatched(step: ToolCallEvent) -> bool:
    return bool(step.tool) and not (step.error and step.error.kind in NOT_DISPATCHED)


def _norm_q(q: str) -> str:
    return " ".join(re.findall(r"[a-z0-9]+", (q or "").lower()))


def trace_hops(trace: TurnTrace) -> list[SGHop]:
    """The sub-questions a turn worked on, each with its one search tool (see the module docstring)."""
    hops: list[dict[str, Any]] = []  # SGHop fields, plus `steps`: the trace events behind the hop

    def find(q: str, tool: str | None) -> dict[str, Any] | None:
        return next(
            (h for h in hops if _norm_q(h["sub_question"]) == _norm_q(q) and (tool is None or h["tool_used"] == tool)),
            None,
        )

    for s in trace.tool_calls():
        if not _dispatched(s):
            continue
        name = hop_tool(s)
        if name not in SEARCH_TOOLS:
            for q in s.sub_questions:  # a decoupler's sub-questions: hops without a tool until one is searched
                if q.strip() and find(q, None) is None:
                    hops.append({"sub_question": q.strip(), "tool_used": NONE, "steps": [s.index]})
            continue
        q = (s.sub_question or "").strip() or trace.question
        same = find(q, name)
        if same is not None:  # the same sub-question searched again with the same tool: still one hop
            same["steps"].append(s.index)
            continue
        hop = find(q, NONE)
        if hop is None:
            hop = {"sub_question": q, "steps": []}
            hops.append(hop)
        first = s.results[0] if s.results else None
        hop.update(
            tool_used=name,
            search_keywords=s.search_keywords if name == TEXT or s.search_keywords else None,
            search_url=first.url if first else None,
            search_result_snippet=(first.snippet or first.title or first.entity_name or "") if first else None,
        )
        hop["steps"].append(s.index)
        if s.error is not None:
            hop["error"] = s.error.kind
    return [SGHop(**h) for h in hops] or [SGHop(sub_question=trace.question, steps=[])]


# Trace labels that are not the question's SuperGlasses labels: the annotation (the reference, not ours) and the id.
_OUR_LABELS = ("sub_questions", "sg_id")


def to_superglasses(trace: TurnTrace) -> SGLog:
    """One turn trace as an SGLog.

    - id: the SuperGlasses id (`labels.sg_id`, set by the SuperGlasses loader), else the interaction id;
      labels: the dataset's labels (the annotated `sub_questions` are the reference, not ours: left out);
      ground_truth, answer, accuracy (the judged score; null when the turn was not scored).
    - hops: see `trace_hops`; need_retrieval: a search tool was called (run or refused);
      tool_decision: the search tools used, in order; detected_object: the last detect_crop box.
    - extra: run_id, session_id, turn_index, policy, score, judge, abstained, other_tools (the non-search tools
      used, SuperGlasses names, in order) and tool_errors.
    """
    calls = [s for s in trace.tool_calls() if s.tool]
    used = [s for s in calls if _dispatched(s)]
    hops = trace_hops(trace)
    decision: list[str] = []
    for s in used:
        name = hop_tool(s)
        if name in SEARCH_TOOLS and name not in decision:
            decision.append(name)
    obj = None
    for s in used:
        if s.detected_box is not None and hop_tool(s) == "Object Detection":
            b = s.detected_box
            obj = SGObject(label=b.label, box=[b.x0, b.y0, b.x1, b.y1], score=b.score, method=b.method)
    # the runner also sets the CRAG-MM label names; for a SuperGlasses row `query_category` only repeats `category`
    labels = {
        k: v
        for k, v in trace.labels.items()
        if k not in _OUR_LABELS
        and not (k in ("domain", "query_category", "dynamism", "image_quality") and v is None)
        and not (k == "query_category" and "category" in trace.labels)
    }
    return SGLog(
        id=str(trace.labels.get("sg_id") or trace.interaction_id),
        question=trace.question,
        ground_truth=trace.ground_truth,
        answer=trace.answer,
        accuracy=None if trace.score is None else trace.score == "correct",
        labels=labels,
        need_retrieval=any(hop_tool(s) in SEARCH_TOOLS for s in calls),
        tool_decision=decision,
        detected_object=obj,
        hops=hops,
        source="export",
        extra={
            "run_id": trace.run_id,
            "session_id": trace.session_id,
            "interaction_id": trace.interaction_id,
            "turn_index": trace.turn_index,
            "task": trace.task,
            "policy": trace.policy,
            "score": trace.score,
            "judge": trace.judge,
            "abstained": trace.abstained,
            "other_tools": [hop_tool(s) for s in used if hop_tool(s) not in SEARCH_TOOLS],
            "tool_errors": [{"step_index": s.index, "tool": s.tool, "kind": s.error.kind} for s in calls if s.error],
        },
    )


def read_run(run_dir: str | Path, problems: list[str] | None = None) -> list[TurnTrace]:
    """Every `<session>__<turn>.json` trace of a run folder; unreadable files (damaged, not a trace, over
    traces.store.MAX_TRACE_BYTES, not a regular file: looked at before they are read) are reported and skipped."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"no run folder at {run_dir}")
    out = []
    for p in sorted(run_dir.glob("*__*.json")):
        try:
            out.append(read_trace_file(p))
        except (ValueError, OSError, RecursionError) as e:
            why = f": {e}" if isinstance(e, OSError) and str(e) else ""
            note_problem(problems, f"{p.name}: not a turn trace ({type(e).__name__}{why})")
    return out


def write_logs(logs: list[SGLog], out_path: str | Path) -> Path:
    """A JSON list, or JSON lines when `out_path` ends in .jsonl."""
    out_path = Path(out_path)
    rows = [lg.dump() for lg in logs]
    if out_path.suffix.lower() == ".jsonl":
        text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    else:
        text = json.dumps(rows, indent=2, ensure_ascii=False) + "\n"
    write_json_atomic(out_path, text)
    return out_path


def export_run(run_dir: str | Path, out_path: str | Path, problems: list[str] | None = None) -> list[SGLog]:
    """Write a run's traces as SuperGlasses logs."""
    logs = [to_superglasses(t) for t in read_run(run_dir, problems)]
    write_logs(logs, out_path)
    return logs
