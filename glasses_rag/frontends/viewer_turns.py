"""What the viewer shows of each conversation, turn and step, as data for templates/viewer_macros.html.j2 (which
renders and escapes it): the photo with the boxes the agent drew, the question, labels, answer and score, each
step's details, search results and model calls, and the requests as sent."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from glasses_rag.frontends import viewer_parts as vp
from traces.schema import AnswerEvent, FinalEvent, PlanEvent, ToolCallEvent, TraceEvent, TurnTrace, VerdictEvent

SCORES = ("correct", "missing", "incorrect", "unscored")
BOX_COLOURS = ("#ff3b30", "#00c7be", "#ffcc00", "#af52de", "#34c759", "#ff9500", "#5ac8fa")


@dataclass
class Thumb:
    """A JPEG thumbnail as a data URL plus the size of the image the agent saw (the boxes' frame)."""

    data_url: str
    width: int
    height: int
    agent_w: int
    agent_h: int


def score_of(t: TurnTrace) -> str:
    return t.score if t.score in SCORES else "unscored"


def turn_tools(t: TurnTrace) -> list[str]:
    seen: list[str] = []
    for s in t.tool_calls():
        if s.tool:
            name = re.sub(r"\s+", "_", s.tool)
            if name not in seen:
                seen.append(name)
    return seen


def _title(step: TraceEvent) -> str:
    if isinstance(step, ToolCallEvent):
        return f"call {step.tool}"
    if isinstance(step, (PlanEvent, VerdictEvent, FinalEvent)):
        return step.decision
    return "draft answer"


def _kv(label: str, value: Any, cls: str = "") -> dict[str, Any] | None:
    return None if value is None or value == "" else {"kind": "kv", "label": label, "value": str(value), "cls": cls}


def _pre(label: str, text: str) -> dict[str, Any]:
    return {"kind": "pre", "label": label, "value": text}


def _tool_rows(step: ToolCallEvent) -> list[dict[str, Any] | None]:
    rows: list[dict[str, Any] | None] = []
    if step.arguments:
        try:
            args = json.dumps(step.arguments, indent=2, ensure_ascii=False, default=str)
        except (TypeError, ValueError):
            args = repr(step.arguments)
        rows.append(_pre("arguments", args))
    rows += [
        _kv("sub-question", step.sub_question),
        _kv("search keywords", step.search_keywords),
        _kv("needs retrieval", step.needs_retrieval),
        _kv("rationale", step.rationale),
        _kv("ran alongside", step.parallel_with),
        _kv("method", step.method),
        _kv("summary", step.summary),
        _kv("wrote", ", ".join(step.wrote)),
    ]
    if step.detected_box is not None:
        b = step.detected_box
        rows.append(
            _kv("detected box", f"({b.x0}, {b.y0}) – ({b.x1}, {b.y1})  {b.label}  score {b.score:.2f}  {b.method}")
        )
    if step.ocr_text:
        rows.append(_pre("OCR text", step.ocr_text))
    if step.sub_questions:
        rows.append(_kv("sub-questions", " | ".join(step.sub_questions)))
    rows += [_kv(f"fact ({f.source})", f.text) for f in step.facts]
    return rows


def _step_rows(step: TraceEvent) -> list[dict[str, Any] | None]:
    if isinstance(step, ToolCallEvent):
        return _tool_rows(step)
    if isinstance(step, PlanEvent):
        return [_kv("reason", step.reason), _kv("needs retrieval", step.needs_retrieval)]
    if isinstance(step, AnswerEvent):
        confidence = None if step.confidence is None else f"{step.confidence:.2f}"
        return [
            _kv("draft", step.answer),
            _kv("confidence", confidence),
            _kv("rationale", step.rationale),
            _kv("entity", step.entity),
        ]
    if isinstance(step, VerdictEvent):
        rows = [_kv("reason", step.reason)]
        if step.verdict is not None:
            v = step.verdict
            text = f"{'supported' if v.supported else 'NOT supported'} · confidence {v.confidence:.2f} · {v.reason}"
            rows.append(_kv("verdict", text + (f" · {v.method}" if v.method else ""), "ok" if v.supported else "bad"))
        return rows
    if isinstance(step, FinalEvent):
        return [
            _kv("answer", step.answer),
            _kv("cut from", step.cut_from_chars and f"{step.cut_from_chars} characters"),
        ]
    return []


def _results(step: TraceEvent, kg: vp.KgImages | None) -> list[dict[str, Any]]:
    """The step's search results; an image-KG match of a local KG with its reference image, an offline demo
    address as marked text (never a link)."""
    out = []
    for i, r in enumerate(getattr(step, "results", None) or []):
        out.append(
            {
                "i": i,
                "hit": r,
                "offline": vp.is_offline_demo_url(r.url),
                "href": vp.safe_href(r.url),
                "kg": kg.mark(r.url) if kg is not None and r.source == "image_kg" else None,
            }
        )
    return out


def step_view(step: TraceEvent, colour: str | None, kg: vp.KgImages | None) -> dict[str, Any]:
    calls = [
        {
            "call": c,
            "tokens": f"{c.prompt_tokens if c.prompt_tokens is not None else '?'} + "
            f"{c.completion_tokens if c.completion_tokens is not None else '?'}",
            "text": c.error or c.raw_reply,
        }
        for c in step.model_calls
    ]
    return {
        "step": step,
        "title": _title(step),
        "tool": step if isinstance(step, ToolCallEvent) else None,
        "colour": colour if isinstance(step, ToolCallEvent) and step.detected_box is not None else None,
        "rows": [r for r in _step_rows(step) if r is not None],
        "results": _results(step, kg),
        "calls": calls,
        "open": step.error is not None or isinstance(step, ToolCallEvent),
        "policy_ms": getattr(step, "policy_ms", None),
        "latency_ms": getattr(step, "latency_ms", None),
    }


def _boxes(t: TurnTrace, thumb: Thumb, colours: dict[int, str]) -> list[dict[str, str]]:
    out = []
    for s in t.tool_calls():
        b = s.detected_box
        if b is None:
            continue
        aw, ah = max(1, thumb.agent_w), max(1, thumb.agent_h)
        x0, x1 = sorted((min(max(b.x0 / aw, 0.0), 1.0), min(max(b.x1 / aw, 0.0), 1.0)))
        y0, y1 = sorted((min(max(b.y0 / ah, 0.0), 1.0), min(max(b.y1 / ah, 0.0), 1.0)))
        c = colours.get(s.index, BOX_COLOURS[0])
        style = (
            f"left:{x0 * 100:.2f}%;top:{y0 * 100:.2f}%;width:{(x1 - x0) * 100:.2f}%;"
            f"height:{(y1 - y0) * 100:.2f}%;border-color:{c}"
        )
        tag = f"{b.label or 'box'} · {b.method or '?'}" + (f" {b.score:.2f}" if b.score else "")
        out.append({"style": style, "title": f"step #{s.index}: {tag}", "colour": c, "tag": tag})
    return out


def figure_view(
    t: TurnTrace, thumb: Thumb | None, thumb_class: str, why_missing: str | None, colours: dict[int, str], first: bool
) -> dict[str, Any]:
    """The turn's photo with its boxes; a placeholder (with the boxes listed) without one; on a later turn
    without boxes of its own, a line saying it is the conversation's photo."""
    if thumb is not None and not first and not colours:
        return {"kind": "same"}
    if thumb is None:
        why = (t.image.note or "this turn had no image") if not t.has_image else why_missing
        boxes = [b for s in t.tool_calls() if (b := s.detected_box) is not None]
        return {"kind": "none", "why": why or "image not available to the viewer", "boxes": boxes}
    return {"kind": "photo", "cls": thumb_class, "thumb": thumb, "boxes": _boxes(t, thumb, colours)}


def turn_view(
    t: TurnTrace,
    figure: tuple[Thumb | None, str, str | None, bool],
    counted: dict[str, Any] | None,
    run_dir: Path | None,
    kg: vp.KgImages | None,
    budget: vp.RequestBudget,
) -> dict[str, Any]:
    """One turn: (thumb, its CSS class, why there is none, is this the conversation's first turn) for the photo."""
    colours, k = {}, 0
    for s in t.tool_calls():
        if s.detected_box is not None:
            colours[s.index] = BOX_COLOURS[k % len(BOX_COLOURS)]
            k += 1
    thumb, cls, why, first = figure
    return {
        "t": t,
        "score": score_of(t),
        "tools": turn_tools(t),
        "has_error": bool(t.error) or any(s.error is not None for s in t.steps),
        "figure": figure_view(t, thumb, cls, why, colours, first),
        "source": vp.image_source(t),
        "labels": vp.label_chips(t.labels),
        "counted": _counted(t, counted),
        "steps": [step_view(s, colours.get(s.index), kg) for s in t.steps],
        "requests": vp.sent_requests(run_dir, t, budget) if run_dir is not None else [],
    }


def _counted(t: TurnTrace, rec: dict[str, Any] | None) -> dict[str, str] | None:
    """How report.json counted the turn when that differs from the trace's own score (multi-turn early stop)."""
    if not isinstance(rec, dict) or rec.get("result") in (None, t.score):
        return None
    why = "multi-turn early stop" if rec.get("early_stopped") else (rec.get("reason") or "report")
    result = rec["result"]
    return {"result": str(result), "score": result if result in SCORES else "unscored", "why": str(why)}
