"""Our turn traces as SuperGlasses-style search logs, and a tolerant reader for annotated SuperGlasses logs.

SuperGlasses (Jiang et al., 2026, arXiv:2602.22683) annotates each egocentric question with its full search
trajectory: per hop a sub-question, the tool used ("Image Search", "Text Search", ...), the search keywords,
the URL and the snippet of the result, plus the object of interest and whether retrieval was needed at all.
`to_superglasses` writes one of our `TurnTrace`s in that shape, so a run can be compared hop by hop with
annotated logs (`traces.compare`).

    python -m traces.superglasses export --run traces/runs/<run_id> --out run.sg.json   # .jsonl for JSON lines
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
from pathlib import Path
from typing import Any, Iterable

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from traces.schema import PlanEvent, ToolCallEvent, TurnTrace
from traces.store import write_json_atomic

log = logging.getLogger(__name__)

# Our tool name -> the SuperGlasses tool name. Unknown tools keep their own name.
TOOL_NAMES: dict[str, str] = {
    "image_search": "Image Search",
    "web_search": "Text Search",
    "detect_crop": "Object Detection",
    "ocr": "OCR",
    "query_decoupler": "Query Decoupling",
    "reranker": "Rerank",
    "self_check": "Self Check",
}
RETRIEVAL_TOOLS = frozenset({"image_search", "web_search"})
# A call with one of these errors never reached the tool (see tools.registry.ToolCallError): it is not "used".
NOT_DISPATCHED = frozenset({"unknown_tool", "not_allowed", "bad_arguments"})


def _squash(s: str) -> str:
    return re.sub(r"[^a-z0-9]+", "", s.lower())


# Spellings met in hand-written or foreign logs -> canonical SuperGlasses tool names.
_TOOL_ALIASES: dict[str, str] = {
    **{_squash(k): v for k, v in TOOL_NAMES.items()},
    **{_squash(v): v for v in TOOL_NAMES.values()},
    "imagesearch": "Image Search", "imageretrieval": "Image Search", "reverseimagesearch": "Image Search",
    "googlelens": "Image Search", "lens": "Image Search", "visualsearch": "Image Search",
    "textsearch": "Text Search", "websearch": "Text Search", "textretrieval": "Text Search",
    "googlesearch": "Text Search", "search": "Text Search", "websearchtool": "Text Search",
    "objectdetection": "Object Detection", "detection": "Object Detection", "detect": "Object Detection",
    "detectcrop": "Object Detection", "crop": "Object Detection",
    "ocr": "OCR", "textrecognition": "OCR",
    "querydecoupling": "Query Decoupling", "querydecoupler": "Query Decoupling", "querydecomposition": "Query Decoupling",
    "rerank": "Rerank", "reranker": "Rerank", "reranking": "Rerank",
    "selfcheck": "Self Check", "verification": "Self Check",
}


def sg_tool_name(tool: str) -> str:
    """Our tool name (or any common spelling of a SuperGlasses tool) -> the canonical SuperGlasses name."""
    t = (tool or "").strip()
    return _TOOL_ALIASES.get(_squash(t), t)


class SGObject(BaseModel):
    """The object of interest. `box` is [x0, y0, x1, y1] in pixels of the original image, or null."""

    model_config = ConfigDict(extra="allow")

    label: str = ""
    box: list[float] | None = None


class SGHop(BaseModel):
    """One search hop, with the field names of the SuperGlasses search logs."""

    model_config = ConfigDict(extra="allow")

    sub_question: str = ""
    tool_used: str = ""
    search_keywords: str | None = None
    search_url: str | None = None
    search_result_snippet: str = ""


class SGLog(BaseModel):
    """One turn as a SuperGlasses-style log: the decisions (need retrieval? which tools?) and the hops."""

    model_config = ConfigDict(extra="allow")

    interaction_id: str
    session_id: str = ""
    question: str = ""
    detected_object: SGObject | None = None
    need_retrieval: bool = False
    tool_decision: list[str] = Field(default_factory=list, description="SuperGlasses tool names, in the order used.")
    hops: list[SGHop] = Field(default_factory=list)
    answer: str = ""


# ---------------------------------------------------------------------------------------------------------------
# TurnTrace -> SGLog


def _dispatched(step: ToolCallEvent) -> bool:
    return bool(step.tool) and not (step.error and step.error.kind in NOT_DISPATCHED)


def _hop(step: ToolCallEvent, question: str) -> SGHop:
    first = step.results[0] if step.results else None
    snippet = ""
    if first is not None:
        snippet = first.snippet or first.title or first.entity_name or ""
    extra: dict[str, Any] = {"step_index": step.index}
    if first is not None and first.entity_name:
        extra["entity_name"] = first.entity_name
    if step.error is not None:
        extra["error"] = step.error.kind
    return SGHop(sub_question=(step.sub_question or "").strip() or question, tool_used=sg_tool_name(step.tool or ""),
                 search_keywords=step.search_keywords, search_url=first.url if first else None,
                 search_result_snippet=snippet, **extra)


def to_superglasses(trace: TurnTrace) -> SGLog:
    """Write one turn trace as a SuperGlasses log.

    - tool_decision: the tools of the `act` steps that were dispatched (calls refused before running, i.e.
      unknown_tool / not_allowed / bad_arguments, are left out and listed under `tool_errors`), in order, by
      SuperGlasses name. The graph's mandatory self-check node is not a decision and is not listed.
    - hops: one per dispatched image_search / web_search step: sub_question = the step's sub-question or the
      question, search_keywords = the step's keywords, search_url / search_result_snippet = the first result's.
    - detected_object: the last detect_crop step's box (label + [x0, y0, x1, y1]), or null.
    - need_retrieval: a retrieval tool was called (dispatched or not), or the policy said needs_retrieval=True.
    """
    acts = [s for s in trace.tool_calls() if s.tool]
    used = [s for s in acts if _dispatched(s)]
    hops = [_hop(s, trace.question) for s in used if s.tool in RETRIEVAL_TOOLS]
    obj = None
    for s in used:
        if s.tool == "detect_crop" and s.detected_box is not None:
            b = s.detected_box
            obj = SGObject(label=b.label, box=[b.x0, b.y0, b.x1, b.y1], score=b.score, method=b.method)
    need = any(s.tool in RETRIEVAL_TOOLS for s in acts) or any(
        isinstance(s, (ToolCallEvent, PlanEvent)) and s.needs_retrieval is True for s in trace.steps)
    return SGLog(
        interaction_id=trace.interaction_id, session_id=trace.session_id, question=trace.question,
        detected_object=obj, need_retrieval=need, tool_decision=[sg_tool_name(s.tool or "") for s in used],
        hops=hops, answer=trace.answer,
        run_id=trace.run_id, task=trace.task, turn_index=trace.turn_index, policy=trace.policy,
        abstained=trace.abstained, score=trace.score,
        tool_errors=[{"step_index": s.index, "tool": s.tool, "kind": s.error.kind} for s in acts if s.error],
    )


def read_run(run_dir: str | Path, problems: list[str] | None = None) -> list[TurnTrace]:
    """Every `<session>__<turn>.json` trace of a run folder; unreadable files are reported and skipped."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"no run folder at {run_dir}")
    out = []
    for p in sorted(run_dir.glob("*__*.json")):
        try:
            out.append(TurnTrace.model_validate_json(p.read_text(encoding="utf-8")))
        except (ValueError, OSError) as e:
            _problem(problems, f"{p.name}: not a turn trace ({type(e).__name__})")
    return out


def export_run(run_dir: str | Path, out_path: str | Path, problems: list[str] | None = None) -> list[SGLog]:
    """Write a run's traces as SuperGlasses logs: a JSON list, or JSON lines when `out_path` ends in .jsonl."""
    logs = [to_superglasses(t) for t in read_run(run_dir, problems)]
    out_path = Path(out_path)
    rows = [lg.model_dump(mode="json") for lg in logs]
    if out_path.suffix.lower() == ".jsonl":
        text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    else:
        text = json.dumps(rows, indent=2, ensure_ascii=False) + "\n"
    write_json_atomic(out_path, text)
    return logs


# ---------------------------------------------------------------------------------------------------------------
# Annotated logs -> SGLog, tolerant of key variants

_LOG_KEYS: dict[str, tuple[str, ...]] = {
    "interaction_id": ("interaction_id", "interactionid", "id", "qid", "question_id", "query_id", "sample_id", "uid"),
    "session_id": ("session_id", "session", "conversation_id"),
    "question": ("question", "query", "user_question", "prompt"),
    "detected_object": ("detected_object", "object", "target_object", "object_of_interest", "detection", "entity_object"),
    "need_retrieval": ("need_retrieval", "needs_retrieval", "need_search", "needs_search", "retrieval_needed",
                       "requires_retrieval", "need_retrieve", "retrieval"),
    "tool_decision": ("tool_decision", "tool_decisions", "tools", "tools_used", "tool_sequence", "tool_calls", "tool_chain"),
    "hops": ("hops", "search_log", "search_logs", "search_trajectory", "search_trajectories", "trajectory",
             "search_steps", "steps", "search_history"),
    "answer": ("answer", "final_answer", "response", "prediction", "model_answer"),
}
_HOP_KEYS: dict[str, tuple[str, ...]] = {
    "sub_question": ("sub_question", "subquestion", "sub_query", "subquery", "question", "query_text"),
    "tool_used": ("tool_used", "tool", "tool_name", "search_tool", "tool_type", "search_type"),
    "search_keywords": ("search_keywords", "keywords", "keyword", "search_query", "query", "search_terms"),
    "search_url": ("search_url", "url", "link", "source_url", "result_url"),
    "search_result_snippet": ("search_result_snippet", "snippet", "result_snippet", "search_result", "result",
                              "search_snippet", "content"),
}
_TRUE = {"true", "yes", "y", "1", "t", "need", "needed", "required", "retrieval"}
_FALSE = {"false", "no", "n", "0", "f", "none", "not needed", "no retrieval", ""}


def _norm_key(k: Any) -> str:
    return re.sub(r"[\s\-]+", "_", str(k).strip().lower())


def _pick(d: dict[str, Any], names: tuple[str, ...]) -> tuple[bool, Any]:
    for n in names:
        if n in d:
            return True, d[n]
    return False, None


def _text(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, (list, tuple)):
        return " ".join(_text(x) for x in v if x is not None).strip()
    if isinstance(v, dict):
        return json.dumps(v, ensure_ascii=False)
    return str(v).strip()


def _bool(v: Any) -> bool | None:
    if isinstance(v, bool):
        return v
    if isinstance(v, (int, float)):
        return bool(v)
    if isinstance(v, str):
        s = v.strip().lower()
        if s in _TRUE:
            return True
        if s in _FALSE:
            return False
    return None


def _box(v: Any) -> list[float] | None:
    """[x0, y0, x1, y1] from a list (xyxy; read as x, y, w, h when the second corner lies before the first) or
    a dict with x0/y0/x1/y1, x1/y1/x2/y2, xmin/ymin/xmax/ymax or x/y/w(idth)/h(eight)."""
    try:
        if isinstance(v, (list, tuple)) and len(v) == 4:
            x0, y0, a, b = (float(x) for x in v)
            return [x0, y0, a, b] if a >= x0 and b >= y0 else [x0, y0, x0 + a, y0 + b]
        if isinstance(v, dict):
            d = {_norm_key(k): x for k, x in v.items()}
            for keys in (("x0", "y0", "x1", "y1"), ("x1", "y1", "x2", "y2"), ("xmin", "ymin", "xmax", "ymax"),
                         ("left", "top", "right", "bottom")):
                if all(k in d for k in keys):
                    return [float(d[k]) for k in keys]
            for keys in (("x", "y", "w", "h"), ("x", "y", "width", "height")):
                if all(k in d for k in keys):
                    x, y, w, h = (float(d[k]) for k in keys)
                    return [x, y, x + w, y + h]
    except (TypeError, ValueError):
        return None
    return None


def _object(v: Any) -> SGObject | None:
    if v is None or v == "" or v == {}:
        return None
    if isinstance(v, str):
        return SGObject(label=v.strip())
    if isinstance(v, dict):
        d = {_norm_key(k): x for k, x in v.items()}
        label = _text(_pick(d, ("label", "name", "object", "category", "class", "entity"))[1])
        found, raw = _pick(d, ("box", "bbox", "bounding_box", "boundingbox", "region", "coordinates"))
        box = _box(raw) if found else _box(d)
        if not label and box is None:
            return None
        extra = {k: x for k, x in d.items() if k in ("score", "method")}
        return SGObject(label=label, box=box, **extra)
    return None


def _tools(v: Any) -> list[str]:
    if v is None:
        return []
    if isinstance(v, str):
        items: Iterable[Any] = [x for x in re.split(r"\s*(?:,|;|->|→|\|)\s*", v) if x.strip()]
    elif isinstance(v, (list, tuple)):
        items = v
    else:
        return []
    out = []
    for x in items:
        if isinstance(x, dict):
            x = _pick({_norm_key(k): y for k, y in x.items()}, ("tool", "tool_used", "name", "tool_name"))[1]
        name = _text(x)
        if name and _squash(name) not in ("none", "noretrieval", "noneed"):
            out.append(sg_tool_name(name))
    return out


def _hop_from(v: Any, question: str) -> SGHop | None:
    if not isinstance(v, dict):
        return None
    d = {_norm_key(k): x for k, x in v.items()}
    vals = {f: _pick(d, names) for f, names in _HOP_KEYS.items()}
    if not any(found for found, _ in vals.values()):
        return None
    kw = vals["search_keywords"][1]
    url = vals["search_url"][1]
    if isinstance(url, (list, tuple)):
        url = url[0] if url else None
    snip = vals["search_result_snippet"][1]
    if isinstance(snip, (list, tuple)) and snip and isinstance(snip[0], dict):
        first = {_norm_key(k): x for k, x in snip[0].items()}
        url = url or _pick(first, ("url", "link"))[1]
        snip = _pick(first, ("snippet", "text", "content", "title"))[1]
    known = {n for names in _HOP_KEYS.values() for n in names}
    extra = {k: x for k, x in d.items() if k not in known and k.isidentifier()}
    return SGHop(sub_question=_text(vals["sub_question"][1]) or question,
                 tool_used=sg_tool_name(_text(vals["tool_used"][1])),
                 search_keywords=_text(kw) or None, search_url=_text(url) or None,
                 search_result_snippet=_text(snip), **extra)


def parse_log(entry: Any, where: str = "entry", problems: list[str] | None = None) -> SGLog | None:
    """One annotated log entry -> SGLog, or None (reported) when it cannot be read."""
    if not isinstance(entry, dict):
        _problem(problems, f"{where}: not a JSON object ({type(entry).__name__})")
        return None
    d = {_norm_key(k): v for k, v in entry.items()}
    got = {f: _pick(d, names) for f, names in _LOG_KEYS.items()}
    iid = _text(got["interaction_id"][1])
    if not iid:
        _problem(problems, f"{where}: no interaction_id")
        return None
    question = _text(got["question"][1])
    hops: list[SGHop] = []
    raw_hops = got["hops"][1]
    if isinstance(raw_hops, dict):
        raw_hops = [raw_hops]
    if got["hops"][0] and raw_hops is not None and not isinstance(raw_hops, list):
        _problem(problems, f"{where} ({iid}): hops is a {type(raw_hops).__name__}, not a list; ignored")
        raw_hops = []
    for i, h in enumerate(raw_hops or []):
        hop = _hop_from(h, question)
        if hop is None:
            _problem(problems, f"{where} ({iid}): hop {i} unreadable; skipped")
        else:
            hops.append(hop)
    if not hops:  # some logs keep one hop's fields flat on the entry itself
        flat = {k: v for k, v in d.items() if k in ("tool_used", "search_keywords", "search_url", "search_result_snippet")}
        if flat:
            hop = _hop_from({**flat, "sub_question": d.get("sub_question") or question}, question)
            if hop is not None:
                hops.append(hop)
    need = _bool(got["need_retrieval"][1]) if got["need_retrieval"][0] else None
    if need is None:
        if got["need_retrieval"][0] and got["need_retrieval"][1] is not None:
            _problem(problems, f"{where} ({iid}): need_retrieval {got['need_retrieval'][1]!r} unreadable; taken from hops")
        need = bool(hops)
    tools = _tools(got["tool_decision"][1])
    if not tools:
        tools = [h.tool_used for h in hops if h.tool_used]
    known = {n for names in _LOG_KEYS.values() for n in names}
    extra = {k: v for k, v in d.items() if k not in known and k not in SGLog.model_fields and k not in _HOP_KEYS
             and k.isidentifier()}
    try:
        return SGLog(interaction_id=iid, session_id=_text(got["session_id"][1]), question=question,
                     detected_object=_object(got["detected_object"][1]), need_retrieval=need, tool_decision=tools,
                     hops=hops, answer=_text(got["answer"][1]), **extra)
    except ValidationError as e:  # pragma: no cover - every field above is already coerced
        _problem(problems, f"{where} ({iid}): {e.errors()[0].get('msg', e)}")
        return None


def _problem(problems: list[str] | None, msg: str) -> None:
    log.warning("superglasses: %s", msg)
    if problems is not None:
        problems.append(msg)


def _entries(path: Path, problems: list[str] | None) -> list[tuple[str, Any]]:
    text = path.read_text(encoding="utf-8-sig")
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        data = None
        rows = []
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                rows.append((f"line {n}", json.loads(line)))
            except json.JSONDecodeError as e:
                _problem(problems, f"line {n}: bad JSON ({e.msg})")
        return rows
    if isinstance(data, dict):
        for key in ("logs", "data", "items", "records", "samples", "results"):
            if isinstance(data.get(key), list):
                data = data[key]
                break
        else:
            if not any(_norm_key(k) in _LOG_KEYS["interaction_id"] for k in data) and all(isinstance(v, dict) for v in data.values()):
                # {interaction_id: entry, ...}
                return [(f"key {k!r}", {"interaction_id": k, **v}) for k, v in data.items()]
            data = [data]
    if not isinstance(data, list):
        _problem(problems, f"{path.name}: top level is a {type(data).__name__}, not a list of logs")
        return []
    return [(f"entry {i}", e) for i, e in enumerate(data)]


def import_logs(path: str | Path, problems: list[str] | None = None) -> list[SGLog]:
    """Read annotated SuperGlasses-style logs: a JSON list (or {"logs": [...]}, or one object) or JSON lines.

    Key spellings vary (tool/tool_used, keywords/search_keywords, url/search_url, snippet/search_result_snippet,
    subquestion/sub_question, ...; case, spaces and hyphens are ignored). Entries that cannot be read are
    reported (logged, and appended to `problems` when given) and skipped; a missing file raises FileNotFoundError.
    """
    path = Path(path)
    out = []
    for where, entry in _entries(path, problems):
        lg = parse_log(entry, where, problems)
        if lg is not None:
            out.append(lg)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m traces.superglasses", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    ex = sub.add_parser("export", help="write a run's traces as SuperGlasses logs")
    ex.add_argument("--run", required=True, help="run folder, e.g. traces/runs/<run_id>")
    ex.add_argument("--out", required=True, help="output file: .json (a list) or .jsonl")
    chk = sub.add_parser("check", help="read annotated logs and report what could not be read")
    chk.add_argument("path")
    args = ap.parse_args(argv)
    problems: list[str] = []
    try:
        if args.cmd == "export":
            logs = export_run(args.run, args.out, problems)
            print(f"wrote {len(logs)} logs to {args.out}" + (f" ({len(problems)} files skipped)" if problems else ""))
        else:
            logs = import_logs(args.path, problems)
            print(f"read {len(logs)} logs from {args.path}; {len(problems)} problems")
    except FileNotFoundError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for p in problems:
        print(f"  skipped: {p}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
