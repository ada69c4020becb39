"""Static HTML viewer for one run folder:
`python -m glasses_rag.frontends.viewer <run_dir> [--out file.html] [--data PATH]`.

Writes ONE self-contained HTML file (inline CSS and JS, images as base64 JPEG data URLs, no external
requests): the run header (run.json, report.json), then every conversation and turn with the image
and the detected boxes, the question, the labels, each step (collapsible), the answer, the ground truth
and the score. Filters (score, tool, errors, free text) run in the page.

Every piece of trace text is escaped: traces hold web text, which may contain HTML or script. As a
second line of defence the page carries a Content-Security-Policy that only lets its own script
(pinned by hash) run, so an injected inline script or event handler would be refused by the browser.

Traces hold no images: they come from `images` (session_id -> PIL image) or from the dataset named by
`data` (default: run.json's "data"). A missing image becomes a placeholder; damaged trace files are
listed as skipped; nothing here raises on bad input except a missing run folder.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import json
import math
import re
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from glasses_rag.frontends.viewer_parts import h
from traces.schema import AnswerEvent, FinalEvent, PlanEvent, ToolCallEvent, TraceEvent, TurnTrace, VerdictEvent

THUMB_SIDE = 480
SCORES = ("correct", "missing", "incorrect", "unscored")
METRIC_KEYS = (
    "total",
    "correct",
    "missing",
    "incorrect",
    "exact_match",
    "conversations",
    "accuracy",
    "missing_rate",
    "hallucination_rate",
    "truthfulness",
    "multi_turn_score",
)
METRIC_TITLES = {
    "incorrect": "the official hallucination count: total - correct - missing (below 0 when a turn is "
    "both correct and missing)",
    "truthfulness": "(2*correct + missing)/total - 1 (official; 0.0 when total <= 1)",
    "hallucination_rate": "incorrect / total",
    "exact_match": "answers equal to the ground truth",
}
BOX_COLOURS = ("#ff3b30", "#00c7be", "#ffcc00", "#af52de", "#34c759", "#ff9500", "#5ac8fa")


# ------------------------------------------------------------------------------------------
# Reading the run folder
# ------------------------------------------------------------------------------------------


def _read_json(path: Path) -> tuple[Any, str | None]:
    if not path.exists():
        return None, None
    try:
        return json.loads(path.read_text(encoding="utf-8")), None
    except (OSError, ValueError) as e:
        return None, f"{path.name}: {type(e).__name__}: {e}"[:300]


def load_traces(run_dir: Path) -> tuple[list[TurnTrace], list[tuple[str, str]]]:
    """Every readable trace (ordered by session, then turn) and (file name, reason) for each skipped one."""
    traces: list[TurnTrace] = []
    skipped: list[tuple[str, str]] = []
    for p in sorted(run_dir.glob("*__*.json")):
        try:
            traces.append(TurnTrace.model_validate_json(p.read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError, ValueError) as e:
            msg = str(e).strip().splitlines()
            skipped.append((p.name, f"{type(e).__name__}: {msg[0] if msg else ''}"[:300]))
    order: dict[str, int] = {}
    for t in traces:
        order.setdefault(t.session_id, len(order))
    traces.sort(key=lambda t: (order[t.session_id], t.turn_index))
    return traces, skipped


def _split_from_argv(argv: Any, option: str = "--split") -> str | None:
    if isinstance(argv, list):
        for i, a in enumerate(argv):
            if a == option and i + 1 < len(argv):
                return str(argv[i + 1])
            if isinstance(a, str) and a.startswith(f"{option}="):
                return a.split("=", 1)[1]
    return None


def _conversations(
    data: str, split: str | None, benchmark: str | None, image_root: str | None = None, modules: Sequence[str] = ()
) -> Iterable[Any]:
    """The run's conversations as its benchmark reads them (one named by the run, else the one whose layout the
    data is in, else CRAG-MM). Image paths are confined as in the run (its --image-root, else GLASSES_IMAGE_ROOT)."""
    from glasses_rag.evaluation import DataRequest
    from glasses_rag.harness.benchmarks import DEFAULT, benchmark_registry

    registry = benchmark_registry(modules)
    spec = registry.get(benchmark) if benchmark else None
    spec = spec or next((b for b in registry.values() if b.recognizes and b.recognizes(data)), registry[DEFAULT])
    return spec.load(data, DataRequest(data=data, split=split, image_root=image_root))


def load_images(
    data: str,
    session_ids: Iterable[str],
    split: str | None = None,
    benchmark: str | None = None,
    image_root: str | None = None,
    modules: Sequence[str] = (),
) -> tuple[dict[str, Any], str | None]:
    """session_id -> PIL image from the dataset, reading rows only until every wanted session is found."""
    want = set(session_ids)
    found: dict[str, Any] = {}
    if not want:
        return found, None
    try:
        from glasses_rag.crag_mm.dataset import decode_image

        for conv in _conversations(data, split, benchmark, image_root, modules):
            if conv.session_id in want and conv.session_id not in found:
                found[conv.session_id] = decode_image(conv.image)[0]
                if len(found) == len(want):
                    break
    except Exception as e:  # noqa: BLE001 - a missing or unreadable dataset only costs the images
        return found, f"images could not be read from {data!r}: {type(e).__name__}: {e}"[:400]
    missing = len(want) - len(found)
    return found, (f"{missing} conversation(s) not found in {data!r}" if missing else None)


# ------------------------------------------------------------------------------------------
# Images
# ------------------------------------------------------------------------------------------


class Thumb:
    """A JPEG thumbnail as a data URL plus the size of the image the agent saw (the boxes' frame)."""

    def __init__(self, data_url: str, width: int, height: int, agent_w: int, agent_h: int):
        self.data_url, self.width, self.height = data_url, width, height
        self.agent_w, self.agent_h = agent_w, agent_h


def make_thumb(img: Any, agent_size: tuple[int, int] | None = None) -> tuple[Thumb | None, str | None]:
    """A thumbnail of the conversation's image; boxes are drawn relative to `agent_size` (the trace's
    `image.size`: the frame the agent's boxes are in, which always spans the whole image)."""
    if img is None:
        return None, None
    try:
        img.load()
        w, h_ = img.size
        if w < 1 or h_ < 1:
            return None, f"image has no pixels ({w}x{h_})"
        t = img.copy()
        if t.mode != "RGB":
            t = t.convert("RGB")
        t.thumbnail((THUMB_SIDE, THUMB_SIDE))
        buf = io.BytesIO()
        t.save(buf, format="JPEG", quality=82)
        url = "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode("ascii")
        aw, ah = agent_size if agent_size and min(agent_size) > 0 else (w, h_)
        return Thumb(url, t.width, t.height, aw, ah), None
    except Exception as e:  # noqa: BLE001 - truncated bytes, odd modes, decompression bombs
        return None, f"image could not be rendered: {type(e).__name__}: {e}"[:300]


# ------------------------------------------------------------------------------------------
# HTML pieces
# ------------------------------------------------------------------------------------------


def _fmt_num(v: Any, digits: int = 3) -> str:
    if isinstance(v, bool) or v is None:
        return h(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return "nan" if math.isnan(v) else f"{v:.{digits}f}"
    return h(v)


def _ms(v: float | None) -> str:
    return "–" if v is None else f"{v:,.0f} ms" if v >= 10 else f"{v:.1f} ms"


def _kv(label: str, value: Any, cls: str = "") -> str:
    if value is None or value == "":
        return ""
    return f'<div class="kv {cls}"><span class="k">{h(label)}</span><span class="v">{h(value)}</span></div>'


def _safe_href(url: str | None) -> str | None:
    if url and re.match(r"^https?://", url.strip(), re.I):
        return url.strip()
    return None


def _results_table(step: TraceEvent, kg: Any = None) -> str:
    """The step's search results; an image-KG match of a local KG (`glasses_rag.frontends.viewer_parts.KgImages`)
    with its reference image, an offline demo address as marked text (never a link)."""
    from glasses_rag.frontends.viewer_parts import url_cell

    results = getattr(step, "results", None)
    if not results:
        return ""
    rows = []
    for i, r in enumerate(results):
        url = url_cell(r.url, _safe_href(r.url))
        thumb = kg.html(r.url) if kg is not None and r.source == "image_kg" else ""
        if thumb:
            url = f"{thumb}<br>{url}"
        rr = "" if r.rerank_score is None else f'<br><span class="muted">rerank {_fmt_num(r.rerank_score)}</span>'
        rows.append(
            f"<tr><td>{i}</td><td>{h(r.source)}</td><td class='num'>{_fmt_num(r.score)}{rr}</td>"
            f"<td class='url'>{url}</td><td>{h(r.title)}</td><td>{h(r.entity_name)}</td>"
            f"<td class='snippet'>{h(r.snippet)}</td></tr>"
        )
    return (
        '<table class="results"><thead><tr><th>#</th><th>source</th><th>score</th><th>url</th><th>title</th>'
        f"<th>entity</th><th>snippet</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def _title(step: TraceEvent) -> str:
    if isinstance(step, ToolCallEvent):
        return f"call {step.tool}"
    if isinstance(step, (PlanEvent, VerdictEvent, FinalEvent)):
        return step.decision
    return "draft answer"


def _pre(label: str, text: str) -> str:
    return f'<div class="kv"><span class="k">{h(label)}</span><pre class="v">{h(text)}</pre></div>'


def _model_calls(step: TraceEvent) -> str:
    rows = []
    for c in step.model_calls:
        prompt = c.prompt_tokens if c.prompt_tokens is not None else "?"
        completion = c.completion_tokens if c.completion_tokens is not None else "?"
        tokens = f"{prompt} + {completion}"
        flags = " · cancelled" if c.cancelled else ""
        rows.append(
            f"<tr><td>{h(c.purpose)}</td><td>{h(c.mode)}</td><td>{h(tokens)}</td><td>{_ms(c.latency_ms)}</td>"
            f"<td>{h(c.finish_reason)}{flags}</td><td class='snippet'><pre>{h(c.error or c.raw_reply)}</pre></td></tr>"
        )
    if not rows:
        return ""
    return (
        '<table class="results"><thead><tr><th>model call</th><th>mode</th><th>tokens in + out</th><th>latency</th>'
        f"<th>finish</th><th>raw reply</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def _step_html(step: TraceEvent, colour: str | None, kg: Any = None) -> str:
    err = step.error is not None
    head = [
        f'<span class="idx">#{step.index}</span>',
        f'<span class="node node-{h(step.node)}">{h(step.node)}</span>',
        f'<span class="decision">{h(_title(step))}</span>',
    ]
    body: list[str] = []
    if isinstance(step, ToolCallEvent):
        head.append(f'<span class="chip tool">{h(step.tool)}</span>')
        if step.method:
            head.append(f'<span class="muted">{h(step.method)}</span>')
        if step.detected_box is not None and colour:
            head.append(f'<span class="swatch" style="background:{colour}" title="box drawn on the image"></span>')
        if step.arguments:
            try:
                args = json.dumps(step.arguments, indent=2, ensure_ascii=False, default=str)
            except (TypeError, ValueError):
                args = repr(step.arguments)
            body.append(_pre("arguments", args))
        body += [
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
            body.append(
                _kv("detected box", f"({b.x0}, {b.y0}) – ({b.x1}, {b.y1})  {b.label}  score {b.score:.2f}  {b.method}")
            )
        if step.ocr_text:
            body.append(_pre("OCR text", step.ocr_text))
        if step.sub_questions:
            body.append(_kv("sub-questions", " | ".join(step.sub_questions)))
        for f in step.facts:
            body.append(_kv(f"fact ({f.source})", f.text))
    elif isinstance(step, PlanEvent):
        body += [_kv("reason", step.reason), _kv("needs retrieval", step.needs_retrieval)]
    elif isinstance(step, AnswerEvent):
        body += [
            _kv("draft", step.answer),
            _kv("confidence", None if step.confidence is None else f"{step.confidence:.2f}"),
            _kv("rationale", step.rationale),
            _kv("entity", step.entity),
        ]
    elif isinstance(step, VerdictEvent):
        body.append(_kv("reason", step.reason))
        if step.verdict is not None:
            v = step.verdict
            body.append(
                _kv(
                    "verdict",
                    f"{'supported' if v.supported else 'NOT supported'} · confidence "
                    f"{v.confidence:.2f} · {v.reason}" + (f" · {v.method}" if v.method else ""),
                    "ok" if v.supported else "bad",
                )
            )
    elif isinstance(step, FinalEvent):
        body += [
            _kv("answer", step.answer),
            _kv("cut from", step.cut_from_chars and f"{step.cut_from_chars} characters"),
        ]
    if step.error is not None:
        head.append(f'<span class="badge err">error: {h(step.error.kind)}</span>')
        body.append(f'<div class="error">{h(step.error.kind)}: {h(step.error.message)}</div>')
    policy_ms = getattr(step, "policy_ms", None)
    latency = getattr(step, "latency_ms", None)
    head.append(f'<span class="times">policy {_ms(policy_ms)} · tool {_ms(latency)}</span>')
    body.append(_results_table(step, kg))
    body.append(_model_calls(step))
    inner = "".join(body) or '<div class="muted">no details</div>'
    open_ = " open" if (err or isinstance(step, ToolCallEvent)) else ""
    return (
        f'<details class="step{" has-error" if err else ""}"{open_}><summary>{" ".join(head)}</summary>'
        f'<div class="step-body">{inner}</div></details>'
    )


def _figure(
    trace: TurnTrace, thumb: Thumb | None, thumb_class: str, why_missing: str | None, colours: dict[int, str]
) -> str:
    boxes = [(s, s.detected_box) for s in trace.tool_calls() if s.detected_box is not None]
    if thumb is None:
        if not trace.has_image:
            why = trace.image.note or "this turn had no image"
        else:
            why = why_missing or "image not available to the viewer"
        blist = "".join(f"<li>{h(b.label)} · {h(b.method)} ({b.x0},{b.y0})–({b.x1},{b.y1})</li>" for _, b in boxes)
        return (
            f'<div class="thumb placeholder" data-boxes="{len(boxes)}"><div>no image</div>'
            f'<div class="muted">{h(why)}</div>{f"<ul>{blist}</ul>" if blist else ""}</div>'
        )
    divs = []
    for s, b in boxes:
        aw, ah = max(1, thumb.agent_w), max(1, thumb.agent_h)
        x0, x1 = sorted((min(max(b.x0 / aw, 0.0), 1.0), min(max(b.x1 / aw, 0.0), 1.0)))
        y0, y1 = sorted((min(max(b.y0 / ah, 0.0), 1.0), min(max(b.y1 / ah, 0.0), 1.0)))
        c = colours.get(s.index, BOX_COLOURS[0])
        style = (
            f"left:{x0 * 100:.2f}%;top:{y0 * 100:.2f}%;width:{(x1 - x0) * 100:.2f}%;"
            f"height:{(y1 - y0) * 100:.2f}%;border-color:{c}"
        )
        tag = f"{b.label or 'box'} · {b.method or '?'}" + (f" {b.score:.2f}" if b.score else "")
        divs.append(
            f'<div class="box" style="{style}" title="step #{s.index}: {h(tag)}">'
            f'<span class="box-label" style="background:{c}">{h(tag)}</span></div>'
        )
    return (
        f'<div class="thumb {thumb_class}" role="img" aria-label="conversation image" '
        f'style="width:{thumb.width}px;height:{thumb.height}px" data-boxes="{len(boxes)}">{"".join(divs)}</div>'
    )


def _score_of(t: TurnTrace) -> str:
    return t.score if t.score in SCORES else "unscored"


def _turn_tools(t: TurnTrace) -> list[str]:
    seen: list[str] = []
    for s in t.tool_calls():
        if s.tool:
            name = re.sub(r"\s+", "_", s.tool)
            if name not in seen:
                seen.append(name)
    return seen


def _extras(run_dir: Path | None, t: TurnTrace) -> dict[str, str]:
    """The turn's parts from glasses_rag/frontends/viewer_parts.py: history given, image source, the model requests
    as sent."""
    from glasses_rag.frontends import viewer_parts as vp

    return {
        "history": vp.history_html(t),
        "source": vp.image_source_html(t),
        "requests": vp.sent_requests_html(run_dir, t) if run_dir is not None else "",
    }


def _turn_figure(
    t: TurnTrace,
    thumb: Thumb | None,
    thumb_class: str,
    why_missing: str | None,
    colours: dict[int, str],
    repeat_photo: bool,
) -> str:
    if repeat_photo or thumb is None or colours:
        return _figure(t, thumb, thumb_class, why_missing, colours)
    return '<div class="muted same-photo">same photo as the conversation\'s first turn (no boxes in this turn)</div>'


def _turn_html(
    t: TurnTrace,
    thumb: Thumb | None,
    thumb_class: str,
    why_missing: str | None,
    counted: dict[str, Any] | None = None,
    extras: dict[str, str] | None = None,
    repeat_photo: bool = True,
    kg: Any = None,
) -> str:
    score = _score_of(t)
    tools = _turn_tools(t)
    has_err = bool(t.error) or any(s.error is not None for s in t.steps)
    colours, k = {}, 0
    for s in t.tool_calls():
        if s.detected_box is not None:
            colours[s.index] = BOX_COLOURS[k % len(BOX_COLOURS)]
            k += 1
    from glasses_rag.frontends.viewer_parts import label_chips

    labels = label_chips(t.labels)
    meta = [
        f'<span class="badge score-{score}">{score}</span>',
        f'<span class="muted">ended by {h(t.ended_by)}</span>',
        f'<span class="muted">{_ms(t.latency_ms)} / budget {t.budget_s:g} s</span>',
        f'<span class="muted">{len(t.steps)} step(s)</span>',
    ]
    if t.confidence is not None:
        meta.append(f'<span class="muted">confidence {t.confidence:.2f}</span>')
    if t.abstained:
        meta.append('<span class="chip">abstained</span>')
    if has_err:
        meta.append('<span class="badge err">error</span>')
    x = extras or {}
    steps = "".join(_step_html(s, colours.get(s.index), kg) for s in t.steps) or '<div class="muted">no steps</div>'
    err = f'<div class="error">turn error: {h(t.error)}</div>' if t.error else ""
    note = f'<div class="note">image note: {h(t.image.note)}</div>' if t.image.note else ""
    if t.image.transforms:
        note += f'<div class="note">image: {h(", ".join(t.image.transforms))}</div>'
    heading = f'<h3>Turn {t.turn_index} <span class="muted">{h(t.interaction_id)}</span></h3>'
    figure = _turn_figure(t, thumb, thumb_class, why_missing, colours, repeat_photo)
    truth = h(t.ground_truth) if t.ground_truth is not None else '<span class="muted">none</span>'
    entity = f' <span class="muted">entity: {h(t.entity)}</span>' if t.entity else ""
    return f"""
<article class="turn score-{score}" data-score="{score}" data-tools=" {h(" ".join(tools))} " data-error="{int(has_err)}"
  id="turn-{h(t.session_id)}-{t.turn_index}">
 <header class="turn-head">{heading}{" ".join(meta)}</header>
 <div class="turn-grid">
  <div class="fig">{figure}{note}{x.get("source", "")}</div>
  <div class="qa">
   {x.get("history", "")}<div class="question"><span class="k">Q</span> {h(t.question)}</div>
   <div class="labels">{labels}</div>
   <div class="answer"><span class="k">answer</span> <span class="v">{h(t.answer)}</span></div>
   <div class="truth"><span class="k">ground truth</span> <span class="v">{truth}</span></div>
   <div class="scoreline"><span class="k">score</span> <span class="badge score-{score}">{score}</span>
     <span class="muted">{h(t.judge)}</span>{entity}{_counted(t, counted)}</div>
   {err}
   <div class="tools">{"".join(f'<span class="chip tool">{h(x)}</span>' for x in tools)}</div>
  </div>
 </div>
 <div class="steps"><div class="steps-head">Steps <button type="button" class="tog" data-open="1">expand</button>
   <button type="button" class="tog" data-open="0">collapse</button></div>{steps}</div>
 {x.get("requests", "")}
</article>"""


def _counted(t: TurnTrace, rec: dict[str, Any] | None) -> str:
    """How report.json counted the turn when that differs from the trace's own score (multi-turn early stop)."""
    if not isinstance(rec, dict) or rec.get("result") in (None, t.score):
        return ""
    why = "multi-turn early stop" if rec.get("early_stopped") else (rec.get("reason") or "report")
    res = rec["result"] if rec["result"] in SCORES else "unscored"
    return (
        f' <span class="counted">counted in report as <span class="badge score-{res}">{h(rec["result"])}</span>'
        f' <span class="muted">({h(why)})</span></span>'
    )


def _metrics_table(report: dict[str, Any]) -> str:
    found = [("overall", report.get("overall")), ("egocentric", report.get("egocentric"))]
    sections: list[tuple[str, dict[str, Any]]] = [(n, m) for n, m in found if isinstance(m, dict) and m]
    if not sections:
        return ""
    head = "".join(f'<th title="{h(METRIC_TITLES.get(k, ""))}">{h(k)}</th>' for k in METRIC_KEYS)
    from glasses_rag.frontends import viewer_parts as vp

    rows = "".join(
        f"<tr><th>{h(n)}{' *' if vp.both(m) else ''}</th>"
        + "".join(f"<td class='num'>{_fmt_num(m.get(k))}</td>" for k in METRIC_KEYS)
        + "</tr>"
        for n, m in sections
    )
    slices = ""
    if isinstance(report.get("slices"), dict):
        srows = []
        for dim, vals in report["slices"].items():
            if not isinstance(vals, dict):
                continue
            for val, m in vals.items():
                if isinstance(m, dict):
                    srows.append(
                        f"<tr><th>{h(dim)}</th><th>{h(val)}</th>"
                        + "".join(f"<td class='num'>{_fmt_num(m.get(k))}</td>" for k in METRIC_KEYS)
                        + "</tr>"
                    )
        if srows:
            slices = (
                f'<details class="slices"><summary>metrics by slice</summary><table class="metrics"><thead><tr>'
                f"<th>slice</th><th>value</th>{head}</tr></thead><tbody>{''.join(srows)}</tbody></table></details>"
            )
    return (
        f'<table class="metrics"><thead><tr><th></th>{head}</tr></thead><tbody>{rows}</tbody></table>'
        f"{vp.metrics_explanation(report)}{slices}{_notes(report)}"
    )


def _notes(report: dict[str, Any]) -> str:
    notes = report.get("notes")
    if isinstance(notes, list) and notes:
        return "<ul class='notes'>" + "".join(f"<li>{h(n)}</li>" for n in notes) + "</ul>"
    return ""


def _sliced_row(label: str, value: str, m: Any, keys: tuple[str, ...]) -> str:
    cells = "".join(f"<td class='num'>{_fmt_num(m.get(k))}</td>" for k in keys) if isinstance(m, dict) else ""
    return f"<tr><th>{h(label)}</th><th>{h(value)}</th>{cells}</tr>"


def _sliced_table(rep: dict[str, Any], title: str) -> str:
    """A report in the 'sliced' layout (glasses_rag.evaluation.ReportView; SuperGlasses' superglasses_report.json):
    its metrics overall and by slice, the judge, the notes; a column per metric of `overall`."""
    overall = rep.get("overall")
    keys = tuple(k for k, v in overall.items() if isinstance(v, (int, float))) if isinstance(overall, dict) else ()
    head = "<th></th><th></th>" + "".join(f"<th>{h(k)}</th>" for k in keys)
    rows = _sliced_row(title, "overall", overall, keys)
    srows = []
    for dim, vals in (rep.get("slices") or {}).items() if isinstance(rep.get("slices"), dict) else []:
        for val, m in vals.items() if isinstance(vals, dict) else []:
            srows.append(_sliced_row(dim, val, m, keys))
    slices = (
        (
            f'<details class="slices"><summary>accuracy by slice</summary><table class="metrics"><thead><tr>{head}'
            f"</tr></thead><tbody>{''.join(srows)}</tbody></table></details>"
        )
        if srows
        else ""
    )
    judge = f"<div class='muted'>judge: {h(rep.get('judge'))}; {h(rep.get('judge_note'))}"
    judge += f"; {h(rep['unscored'])} question(s) not scored</div>" if rep.get("unscored") else "</div>"
    return (
        f'<table class="metrics"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>{judge}{slices}'
        f"{_notes(rep)}"
    )


def _header_html(
    run_dir: Path,
    run: dict[str, Any],
    report: dict[str, Any] | None,
    traces: list[TurnTrace],
    problems: list[str],
    skipped: list[tuple[str, str]],
    own: tuple[Any, dict[str, Any] | None] | None = None,
) -> str:
    first = traces[0] if traces else None
    fields = [
        ("run", run.get("run_id") or (first.run_id if first else run_dir.name)),
        ("benchmark", run.get("benchmark")),
        ("task", run.get("task", first.task if first else None)),
        ("policy", run.get("policy", first.policy if first else None)),
        ("search", run.get("search", first.search_backend if first else None)),
        ("judge", run.get("judge")),
        (
            "budget",
            f"{run['budget_s']} s/turn" if "budget_s" in run else (f"{first.budget_s:g} s/turn" if first else None),
        ),
        ("max steps", run.get("max_steps", first.max_steps if first else None)),
        ("tools", ", ".join(map(str, run["tools"])) if isinstance(run.get("tools"), list) else None),
        ("data", run.get("data")),
        (
            "turns",
            f"{len(traces)} trace(s) in {len({t.session_id for t in traces})} conversation(s)"
            + (f"; run.json says {run['turns']}" if "turns" in run and run["turns"] != len(traces) else ""),
        ),
        ("resumed turns", run.get("resumed_turns") or None),
        ("failed conversations", run.get("failed_conversations") or None),
        ("seconds", run.get("seconds")),
    ]
    kv = "".join(_kv(k, v) for k, v in fields)
    if own is not None:  # a report of the benchmark's own layout: (its ReportView, the report read)
        view, rep = own
        metrics = _sliced_table(rep, view.title) if rep is not None else f'<div class="muted">no {h(view.file)}</div>'
    else:
        metrics = _metrics_table(report) if isinstance(report, dict) else '<div class="muted">no report.json</div>'
    probs = "".join(f'<div class="warn">{h(p)}</div>' for p in problems)
    skip = ""
    if skipped:
        items = "".join(f"<li><code>{h(n)}</code> <span class='muted'>{h(why)}</span></li>" for n, why in skipped)
        skip = (
            f'<div class="skipped"><b>{len(skipped)} trace file(s) skipped (damaged or not a turn trace):</b>'
            f"<ul>{items}</ul></div>"
        )
    return (
        f'<header class="run"><h1>Run {h(fields[0][1])}</h1><div class="runmeta">{kv}</div>'
        f"{metrics}{probs}{skip}</header>"
    )


def _controls(tools: list[str], counts: dict[str, int], explain: str = "") -> str:
    scores = "".join(
        f'<label class="badge score-{s}"><input type="checkbox" class="f-score" value="{s}" checked> {s} '
        f"({counts.get(s, 0)})</label>"
        for s in SCORES
    )
    opts = "".join(f'<option value="{h(t)}">{h(t)}</option>' for t in tools)
    return f"""<nav class="controls" id="controls">
 <span class="group">{scores}</span>
 <label>tool <select id="f-tool"><option value="">any</option>{opts}</select></label>
 <label><input type="checkbox" id="f-error"> errors only</label>
 <input type="search" id="f-text" placeholder="search text (question, answer, snippets…)" size="34">
 <button type="button" id="expand-all">expand all steps</button>\
<button type="button" id="collapse-all">collapse all</button>
 <span id="shown" class="muted"></span>{explain}
</nav>"""


CSS = """
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;background:#f4f5f7;color:#1d1d1f}
main{padding:0 18px 40px}header.run{background:#1f2933;color:#f5f7fa;padding:14px 18px}
header.run h1{margin:0 0 8px;font-size:20px}
.runmeta{display:flex;flex-wrap:wrap;gap:4px 18px;margin-bottom:10px}.kv{margin:2px 0}
.kv .k{color:#7b8794;margin-right:6px;font-size:12px;text-transform:uppercase;letter-spacing:.03em}
header.run .kv .k{color:#9aa5b1}
pre{white-space:pre-wrap;word-break:break-word;margin:2px 0;font:12px/1.4 ui-monospace,Menlo,Consolas,monospace;
background:#f0f1f3;padding:4px 6px;border-radius:4px}
table.metrics{border-collapse:collapse;font-size:12px;background:#fff;color:#1d1d1f;margin:6px 0}
table.metrics th,table.metrics td{border:1px solid #d2d6dc;padding:2px 6px}
td.num{text-align:right;font-variant-numeric:tabular-nums}.notes{font-size:12px;color:#cbd2d9;margin:4px 0}
details.slices summary{cursor:pointer;color:#9aa5b1}
.warn{background:#7a4d00;color:#fff;padding:4px 8px;border-radius:4px;margin:4px 0}
.skipped{background:#fde8e8;color:#9b1c1c;padding:6px 10px;border-radius:4px;margin-top:6px}
nav.controls{position:sticky;top:0;z-index:5;background:#fff;border-bottom:1px solid #d2d6dc;padding:8px 18px;
display:flex;flex-wrap:wrap;gap:8px 14px;align-items:center;box-shadow:0 1px 3px rgba(0,0,0,.06)}
nav.controls label{cursor:pointer}
section.conv{background:#fff;border-radius:8px;margin:16px 0;padding:10px 14px;box-shadow:0 1px 3px rgba(0,0,0,.08)}
section.conv>h2{margin:2px 0 8px;font-size:16px}
article.turn{border-top:1px solid #e4e7eb;padding:10px 0 6px;border-left:5px solid #9aa5b1;padding-left:10px;
margin:6px 0}
article.turn.score-correct{border-left-color:#2f9e44}article.turn.score-missing{border-left-color:#e8a100}article.turn.score-incorrect{border-left-color:#d64545}
.turn-head{display:flex;flex-wrap:wrap;gap:6px 10px;align-items:baseline}.turn-head h3{margin:0;font-size:15px}
.turn-grid{display:flex;flex-wrap:wrap;gap:14px;margin:8px 0}
.qa{flex:1 1 380px;min-width:300px}.question{font-size:16px;font-weight:600;margin-bottom:4px}
.answer,.truth,.scoreline{margin:4px 0}.answer .v{font-weight:600}
.qa .k{color:#7b8794;font-size:12px;text-transform:uppercase;margin-right:6px}
.thumb{position:relative;background-size:100% 100%;background-repeat:no-repeat;border-radius:4px;background-color:#222;
flex:none}
.thumb.placeholder{width:320px;height:200px;
background:repeating-linear-gradient(45deg,#e4e7eb,#e4e7eb 10px,#f5f7fa 10px,#f5f7fa 20px);display:flex;
flex-direction:column;align-items:center;justify-content:center;color:#52606d;text-align:center;padding:8px;font-size:12px}
.thumb.placeholder ul{text-align:left;margin:4px 0;padding-left:16px}
.box{position:absolute;border:2px solid #ff3b30;box-shadow:0 0 0 1px rgba(0,0,0,.5)}
.box-label{position:absolute;left:-2px;top:-18px;font-size:11px;line-height:16px;color:#000;padding:0 4px;
white-space:nowrap;max-width:460px;overflow:hidden;text-overflow:ellipsis;border-radius:2px 2px 0 0}
.note{font-size:12px;color:#7a4d00;max-width:480px}
.chip{display:inline-block;background:#e4e7eb;border-radius:10px;padding:0 8px;margin:1px 2px;font-size:12px}
.chip.tool{background:#dbeafe;color:#1e40af}.chip.label{background:#f0f1f3}.muted{color:#7b8794;font-size:12px}
.badge{display:inline-block;border-radius:4px;padding:0 7px;font-size:12px;font-weight:600;color:#fff;
background:#7b8794}
.badge.score-correct{background:#2f9e44}.badge.score-missing{background:#e8a100}.badge.score-incorrect{background:#d64545}.badge.score-unscored{background:#7b8794}.badge.err{background:#c81e1e}
.steps-head{font-weight:600;margin:4px 0}.steps-head button{font-size:11px}
details.step{border:1px solid #e4e7eb;border-radius:5px;margin:3px 0;background:#fbfbfc}
details.step>summary{cursor:pointer;padding:3px 8px;display:flex;flex-wrap:wrap;gap:4px 10px;align-items:center}
details.step.has-error{border-color:#d64545;background:#fff5f5}
.step-body{padding:4px 12px 8px}.idx{color:#7b8794;font-variant-numeric:tabular-nums}
.node{font-weight:600;font-size:12px;text-transform:uppercase}
.node-act{color:#1e40af}.node-plan{color:#6b21a8}.node-answer{color:#065f46}.node-self_check{color:#92400e}.node-final{color:#111}
.times{margin-left:auto;color:#7b8794;font-size:12px;font-variant-numeric:tabular-nums}.swatch{display:inline-block;width:12px;height:12px;border-radius:2px}
.error{color:#b91c1c;background:#fde8e8;border:1px solid #f8b4b4;border-radius:4px;padding:4px 8px;margin:4px 0;
white-space:pre-wrap;word-break:break-word}
.kv.ok .v{color:#2f9e44}.kv.bad .v{color:#b91c1c}
table.results{border-collapse:collapse;width:100%;font-size:12px;margin-top:6px}
table.results th,table.results td{border:1px solid #e4e7eb;padding:2px 5px;vertical-align:top;text-align:left}
td.url{max-width:260px;word-break:break-all}
td.snippet{max-width:520px;word-break:break-word}.explain{font-size:12px;max-width:1100px}
details.sent{border:1px solid #e4e7eb;border-radius:5px;margin:3px 0;padding:2px 8px;background:#fbfbfc}
details.sent>summary,details.history>summary,details.tools-spec>summary{cursor:pointer;font-size:12px}.msg{margin:4px 0}
.msg .k{font-size:11px}.requests{margin-top:6px}
.kg{display:inline-block;width:64px;height:64px;background-size:contain;background-repeat:no-repeat;
background-position:center;border-radius:3px}.offline{color:#52606d}header.run .explain{color:#fde68a;margin:2px 0 6px}
.hidden{display:none!important}#empty{padding:20px;color:#7b8794}
"""

JS = """
(function(){
  var turns = Array.prototype.slice.call(document.querySelectorAll('article.turn'));
  var convs = Array.prototype.slice.call(document.querySelectorAll('section.conv'));
  var texts = turns.map(function(t){ return (t.textContent || '').toLowerCase(); });
  var scoreBoxes = Array.prototype.slice.call(document.querySelectorAll('.f-score'));
  var toolSel = document.getElementById('f-tool'), errBox = document.getElementById('f-error');
  var textBox = document.getElementById('f-text'), shown = document.getElementById('shown');
  function apply(){
    var scores = {}; scoreBoxes.forEach(function(b){ scores[b.value] = b.checked; });
    var tool = toolSel ? toolSel.value : '', q = textBox ? textBox.value.trim().toLowerCase() : '';
    var errOnly = errBox && errBox.checked, n = 0;
    turns.forEach(function(t, i){
      var ok = scores[t.getAttribute('data-score')] !== false;
      if (ok && tool) ok = (t.getAttribute('data-tools') || '').indexOf(' ' + tool + ' ') >= 0;
      if (ok && errOnly) ok = t.getAttribute('data-error') === '1';
      if (ok && q) ok = texts[i].indexOf(q) >= 0;
      t.classList.toggle('hidden', !ok); if (ok) n++;
    });
    convs.forEach(function(c){ c.classList.toggle('hidden', !c.querySelector('article.turn:not(.hidden)')); });
    if (shown) shown.textContent = n + ' of ' + turns.length + ' turn(s) shown';
    document.body.setAttribute('data-shown', String(n));
  }
  function setOpen(root, open){ root.querySelectorAll('details.step').forEach(function(d){ d.open = open; }); }
  scoreBoxes.forEach(function(b){ b.addEventListener('change', apply); });
  if (toolSel) toolSel.addEventListener('change', apply);
  if (errBox) errBox.addEventListener('change', apply);
  if (textBox) textBox.addEventListener('input', apply);
  var ea = document.getElementById('expand-all'), ca = document.getElementById('collapse-all');
  if (ea) ea.addEventListener('click', function(){ setOpen(document, true); });
  if (ca) ca.addEventListener('click', function(){ setOpen(document, false); });
  document.querySelectorAll('button.tog').forEach(function(b){
    b.addEventListener('click', function(){ setOpen(b.closest('article.turn'), b.getAttribute('data-open') === '1'); });
  });
  apply();
  document.body.setAttribute('data-ready', '1');
})();
"""


def _run_images(
    run: dict[str, Any],
    traces: list[TurnTrace],
    sessions: list[str],
    images: dict[str, Any] | None,
    data: str | None,
    problems: list[str],
    modules: Sequence[str] = (),
) -> dict[str, Any]:
    """session_id -> image: those given, then the rest from `data` or run.json's "data" (read as the run's
    benchmark reads its data: CRAG-MM, SuperGlasses, or one of `modules`)."""
    imgs: dict[str, Any] = dict(images or {})
    need = [s for s in sessions if imgs.get(s) is None and any(t.has_image for t in traces if t.session_id == s)]
    # images given and no data: the caller chose the images; otherwise read `data` or run.json's "data"
    source = data if data is not None else (run.get("data") if images is None else None)
    if need and source:
        benchmark = run.get("benchmark") if isinstance(run.get("benchmark"), str) else None
        argv = run.get("argv")
        loaded, note = load_images(
            str(source), need, _split_from_argv(argv), benchmark, _split_from_argv(argv, "--image-root"), modules
        )
        imgs.update({k: v for k, v in loaded.items() if imgs.get(k) is None})
        if note:
            problems.append(note)
    elif need and images is None:
        problems.append("no dataset given (run.json has no 'data'; pass --data): images are shown as placeholders")
    return imgs


def _own_report(
    run_dir: Path, run: dict[str, Any], problems: list[str], modules: Sequence[str]
) -> tuple[Any, dict[str, Any] | None] | None:
    """(how the run's benchmark shows its report, the report read) when that report has a layout of its own
    (glasses_rag.evaluation.ReportView 'sliced': SuperGlasses'), else None (report.json, CRAG-MM's)."""
    from glasses_rag.harness.benchmarks import benchmark_for_run, benchmark_registry

    spec = benchmark_for_run(run, run_dir, benchmark_registry(modules))
    if spec is None:
        problems.append(
            f"run.json names the benchmark {run.get('benchmark')!r}, which is not known here: "
            "--benchmark-module MODULE adds it (its report is not shown)"
        )
        return None
    if spec.viewer.layout != "sliced":
        return None
    rep = _json_file(run_dir, spec.viewer.file, problems)
    return spec.viewer, rep if isinstance(rep, dict) else None


def build_html(
    run_dir: Path, images: dict[str, Any] | None = None, data: str | None = None, modules: Sequence[str] = ()
) -> str:
    """The whole page as a string (see `render_run`); `modules` add benchmarks of your own (--benchmark-module)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"run folder not found: {run_dir}")
    problems: list[str] = []
    run = _json_file(run_dir, "run.json", problems)
    run = run if isinstance(run, dict) else {}
    report = _json_file(run_dir, "report.json", problems)
    report = report if isinstance(report, dict) else None
    own = _own_report(run_dir, run, problems, modules)
    traces, skipped = load_traces(run_dir)
    sessions = list(dict.fromkeys(t.session_id for t in traces))
    imgs = _run_images(run, traces, sessions, images, data, problems, modules)
    counted = _counted_turns(report)
    from glasses_rag.frontends import viewer_parts as vp

    kg = vp.KgImages.for_run(run)
    style_imgs, conv_html = [], []
    for n, sid in enumerate(sessions):
        style, section = _conversation_html(
            n, sid, [t for t in traces if t.session_id == sid], imgs.get(sid), counted, run_dir, kg
        )
        if style is not None:
            style_imgs.append(style)
        conv_html.append(section)
    if not conv_html:
        conv_html.append('<div id="empty">no readable turn traces in this run folder</div>')
    counts = Counter(_score_of(t) for t in traces)
    tools = sorted({x for t in traces for x in _turn_tools(t)})
    style_imgs.append(kg.css())
    return _page(
        f"Run {run.get('run_id') or run_dir.name}",
        "\n".join(style_imgs),
        _header_html(run_dir, run, report, traces, problems, skipped, own)
        + "\n"
        + _controls(tools, counts, vp.chips_explanation(report if own is None else None, counts))
        + "\n"
        + f"<main>{''.join(conv_html)}</main>",
    )


def _json_file(run_dir: Path, name: str, problems: list[str]) -> Any:
    """The JSON in `run_dir/name` (None when absent); an unreadable file is noted in `problems`."""
    data, err = _read_json(run_dir / name)
    if err:
        problems.append(f"{name} unreadable: {err}")
    return data


def _counted_turns(report: dict[str, Any] | None) -> dict[tuple[str, int], dict[str, Any]]:
    """(session_id, turn_index) -> the report's record of that turn."""
    counted: dict[tuple[str, int], dict[str, Any]] = {}
    if report is not None and isinstance(report.get("turns"), list):
        for rec in report["turns"]:
            if isinstance(rec, dict) and isinstance(rec.get("turn_index"), int):
                counted[(str(rec.get("session_id")), rec["turn_index"])] = rec
    return counted


def _conversation_html(
    n: int,
    sid: str,
    turns: list[TurnTrace],
    image: Any,
    counted: dict[tuple[str, int], dict[str, Any]],
    run_dir: Path | None = None,
    kg: Any = None,
) -> tuple[str | None, str]:
    """(the CSS rule of the conversation's thumbnail, or None without one; the conversation's section). The photo
    is drawn with the first turn, and again only with a turn that has boxes of its own to draw on it."""
    thumb, why = make_thumb(image, next((t.image.size for t in turns if t.image.size), None))
    if thumb is None and why is None and any(t.has_image for t in turns):
        why = "image not found for this conversation"
    cls = f"img-{n}"
    style = f".{cls}{{background-image:url({thumb.data_url})}}" if thumb is not None else None
    body = "".join(
        _turn_html(
            t,
            thumb,
            cls,
            why,
            counted.get((t.session_id, t.turn_index)),
            _extras(run_dir, t),
            repeat_photo=i == 0,
            kg=kg,
        )
        for i, t in enumerate(turns)
    )
    return style, (
        f'<section class="conv" id="conv-{n}" data-session="{h(sid)}"><h2>Conversation '
        f'{h(sid)} <span class="muted">{len(turns)} turn(s)</span></h2>{body}</section>'
    )


def _page(title: str, style: str, body: str, script: str = JS) -> str:
    """The HTML document, with a content security policy that allows only inline data and this page's script."""
    script_hash = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")
    csp = (
        f"default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'sha256-{script_hash}'; "
        "base-uri 'none'; form-action 'none'"
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{h(csp)}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{h(title)}</title>
<style>{CSS}
{style}</style></head>
<body data-ready="0">
{body}
<script>{script}</script>
</body></html>
"""


def render_run(
    run_dir: Path,
    out: Path | None = None,
    images: dict[str, Any] | None = None,
    data: str | None = None,
    modules: Sequence[str] = (),
) -> Path:
    """Writes the run's HTML page (default `<run_dir>/index.html`) and returns its path.

    images: session_id -> PIL image (takes precedence); data: dataset path or cached name to read the
    images from (default: run.json's "data"). Conversations without an image get a placeholder. modules: modules
    defining benchmarks of your own (a run of one is read as that benchmark reads its data and shows its report).
    """
    from traces.store import write_atomic

    run_dir = Path(run_dir)
    out = Path(out) if out is not None else run_dir / "index.html"
    # a lone surrogate read from run.json or a trace ("\ud800") cannot be UTF-8: written as "?", not a crash
    page = build_html(run_dir, images=images, data=data, modules=modules).encode("utf-8", "replace")
    write_atomic(out, page)  # with the user's umask, no wider
    return out


def render_diff_page(diff: Any, out: Path, only: list[str] | None = None) -> Path:
    """The run diff (glasses_rag.frontends.run_diff.RunDiff) as one page in this viewer's style; controls start at
    `only`[0]."""
    from glasses_rag.frontends.diff_page import DIFF_CSS, DIFF_JS, diff_body
    from traces.store import write_json_atomic

    out = Path(out)
    title = "Run diff: " + ", ".join(f"{r.letter} {r.name}" for r in diff.runs)
    write_json_atomic(out, _page(title, DIFF_CSS, diff_body(diff, out, only), script=DIFF_JS))
    try:
        out.chmod(0o644)  # as render_run: the atomic write's temp file is private; a page is meant to be read
    except OSError:
        pass
    return out


def _runs_inside(folder: Path) -> Any:
    """The diff of the runs in `folder` when it holds no trace itself but two runs or more (a presets folder)."""
    from glasses_rag.frontends.run_diff import diff_runs, find_runs

    if any(folder.glob("*__*.json")) or len(find_runs(folder)) < 2:
        return None
    return diff_runs([folder])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m glasses_rag.frontends.viewer",
        description="Render a run folder of turn traces as one self-contained HTML page.",
    )
    p.add_argument("run_dir", type=Path, help="run folder (holds <session>__<turn>.json, run.json, report.json)")
    p.add_argument("--out", type=Path, default=None, help="HTML file to write (default: <run_dir>/index.html)")
    p.add_argument(
        "--data",
        default=None,
        help="dataset to read the images from (default: run.json's 'data'); a folder, file or cached name",
    )
    p.add_argument("--no-images", action="store_true", help="do not read the dataset; show placeholders")
    p.add_argument(
        "--benchmark-module",
        action="append",
        default=[],
        metavar="MODULE",
        help="a module defining a benchmark of your own (as python -m graph.run's): its runs' data and report",
    )
    args = p.parse_args(argv)
    if not args.run_dir.is_dir():
        print(f"error: run folder not found: {args.run_dir}", file=sys.stderr)
        return 2
    diff = _runs_inside(args.run_dir)
    if diff is not None:  # a folder of runs (benchmarks.presets): each run's page, and their diff linking them
        for r in diff.runs:
            render_run(
                Path(r.path), images={} if args.no_images else None, data=args.data, modules=args.benchmark_module
            )
        out = render_diff_page(diff, args.out or args.run_dir / "index.html")
        print(
            f"{out}: the diff of the {len(diff.runs)} runs in this folder (as python -m glasses_rag.frontends.diff "
            f"{args.run_dir} --html {out} writes it), linking each run's own page (<run>/index.html)"
        )
        return 0
    images: dict[str, Any] | None = {} if args.no_images else None
    out = render_run(args.run_dir, args.out, images=images, data=args.data, modules=args.benchmark_module)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
