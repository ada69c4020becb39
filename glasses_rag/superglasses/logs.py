"""Turn traces as SuperGlasses search logs, and a tolerant reader of SuperGlasses annotations and logs.

SuperGlasses (Jiang et al., 2026, arXiv:2602.22683) annotates each question with its search trajectory: the
question is split into sub-questions ("hops"), each answered with zero or one tool ("Image Search" or "Text
Search"). The paper prints a hop as "Sub-question", "Tool used", "Search keywords" (text search only),
"Search URL" and "Search result (snippet)". An `SGLog` is one question in that shape, plus the SuperGlasses id,
the dataset labels, the ground truth, the model's answer and its judged accuracy.

- `to_superglasses(trace)`: one of our turn traces as an SGLog. A hop is one sub-question the policy worked on:
  each sub-question a decoupler wrote, and each retrieval call's `sub_question` (a call without one belongs to
  the question itself); a sub-question searched with two different tools is two hops (SuperGlasses allows one
  tool per hop). A turn with no sub-question and no search is one hop with tool "None".
- `parse_log(entry)` / `import_logs(path)`: read the Hugging Face rows (`sub_questions` with `retrieval-tools`),
  the paper's layout, "Hop 1"/"Hop 2" keys, SuperLens-style decisions ("Decision: Need RAG", "Tool Decision:
  Need Image Search, No need Text Search", "Object Detection: Car") and our own export. Keys are matched
  ignoring case, spaces and punctuation. A key that cannot be mapped is kept (under `extra`) and reported.

    python -m glasses_rag.superglasses.logs export --run traces/runs/<run_id> --out run.sg.jsonl
    python -m glasses_rag.superglasses.logs check annotations.jsonl      # what could not be mapped, entry by entry
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from traces.schema import ToolCallEvent, TurnTrace
from traces.store import write_json_atomic

log = logging.getLogger(__name__)

FORMAT = "superglasses-log/1"
IMAGE, TEXT, NONE = "Image Search", "Text Search", "None"
SEARCH_TOOLS = (IMAGE, TEXT)  # the SuperGlasses tool vocabulary

# Our tool names -> SuperGlasses names, for traces written before calls recorded their hop kind (`search`, from the
# tool's capabilities): a call's `search` decides first (see `hop_tool`). The two searches are SuperGlasses' tools;
# the others are recorded as `other_tools` (SuperGlasses does not annotate them).
TOOL_NAMES: dict[str, str] = {
    "image_search": IMAGE,
    "google_lens": IMAGE,
    "web_search": TEXT,
    "google_search": TEXT,
    "detect_crop": "Object Detection",
    "ocr": "OCR",
    "query_decoupler": "Query Decoupling",
    "reranker": "Rerank",
    "read_webpage": "Web Page Reader",
}
# A call with one of these errors never reached the tool (see tools.registry.ToolCallError).
NOT_DISPATCHED = frozenset({"unknown_tool", "not_allowed", "bad_arguments"})
Layout = Literal["export", "hf", "paper", "hop-n", "superlens", "other"]


def squash(s: Any) -> str:
    """A key or name without case, spaces or punctuation: "Search result (snippet)" -> "searchresultsnippet"."""
    return re.sub(r"[^a-z0-9]+", "", str(s).lower())


_TOOL_ALIASES: dict[str, str] = {
    **{squash(k): v for k, v in TOOL_NAMES.items()},
    **{squash(v): v for v in TOOL_NAMES.values()},
    **{
        k: IMAGE
        for k in (
            "imagesearch",
            "imageretrieval",
            "reverseimagesearch",
            "googlelens",
            "lens",
            "visualsearch",
            "image",
            "imagesearchtool",
            "imagetool",
        )
    },
    **{
        k: TEXT
        for k in (
            "textsearch",
            "websearch",
            "textretrieval",
            "googlesearch",
            "search",
            "websearchtool",
            "text",
            "textsearchtool",
            "webtool",
            "textquery",
        )
    },
    "objectdetection": "Object Detection",
    "detection": "Object Detection",
    "detectcrop": "Object Detection",
    "textrecognition": "OCR",
    "querydecoupling": "Query Decoupling",
    "querydecomposition": "Query Decoupling",
    "reranking": "Rerank",
    "webpagereader": "Web Page Reader",
    "pagereader": "Web Page Reader",
}
_NO_TOOL = frozenset(
    {"", "none", "null", "nil", "no", "n/a", "na", "notool", "noretrieval", "noneed", "false", "0", "{}", "[]", "nan"}
)


def sg_tool_name(tool: str) -> str:
    """Our tool name or any common spelling of a SuperGlasses tool -> its SuperGlasses name; "None"-like -> "None"."""
    t = (tool or "").strip()
    if squash(t) in {squash(x) for x in _NO_TOOL}:
        return NONE
    return _TOOL_ALIASES.get(squash(t), t)


def hop_tool(step: ToolCallEvent) -> str:
    """The SuperGlasses name of a call's tool: "Image Search" / "Text Search" from the hop kind its capabilities give
    (`step.search`), so that a search tool added in one file is exported as one; else by name (older traces)."""
    if step.search == "image":
        return IMAGE
    if step.search == "text":
        return TEXT
    return sg_tool_name(step.tool)


class SGObject(BaseModel):
    """The object of interest. `box` is [x0, y0, x1, y1] in pixels of the image, or null."""

    model_config = ConfigDict(extra="allow")

    label: str = ""
    box: list[float] | None = None


class SGHop(BaseModel):
    """One hop: a sub-question and the one tool (or "None") used for it, with the paper's field names."""

    model_config = ConfigDict(populate_by_name=True, extra="allow")

    sub_question: str = Field("", alias="Sub-question")
    tool_used: str = Field(NONE, alias="Tool used")
    search_keywords: str | None = Field(None, alias="Search keywords")
    search_url: str | None = Field(None, alias="Search URL")
    search_result_snippet: str | None = Field(None, alias="Search result (snippet)")

    @property
    def uses_tool(self) -> bool:
        return self.tool_used != NONE


class SGLog(BaseModel):
    """One question as a SuperGlasses log (ours, an annotation, or another system's)."""

    model_config = ConfigDict(populate_by_name=True)

    format: Literal["superglasses-log/1"] = "superglasses-log/1"
    id: str = Field(description="The SuperGlasses id (our interaction_id for rows of other datasets).")
    question: str = ""
    ground_truth: str | None = None
    answer: str | None = Field(None, description="The model's answer (ours or the logged system's).")
    accuracy: bool | None = Field(None, description="The judge's verdict on `answer`; null when not judged.")
    labels: dict[str, Any] = Field(
        default_factory=dict,
        description="category, domain, difficulty, dynamism, "
        "image_quality, glasses, location, hops (the annotated count), use_image, image_id.",
    )
    need_retrieval: bool | None = Field(None, description="Retrieval used or decided; null when the log does not say.")
    tool_decision: list[str] = Field(
        default_factory=list, description="Search tools used (SuperGlasses names), in order of first use."
    )
    detected_object: SGObject | None = None
    hops: list[SGHop] = Field(default_factory=list, description="The sub-questions, each with zero or one tool.")
    source: Layout = "other"
    extra: dict[str, Any] = Field(
        default_factory=dict,
        description="Everything else: our trace's run metadata, or keys of an imported log that could not be mapped.",
    )
    unmapped: list[str] = Field(default_factory=list, description="Keys of the imported entry kept under `extra`.")

    def search_tools(self, vocabulary: Iterable[str] = SEARCH_TOOLS) -> set[str]:
        vocab = set(vocabulary)
        return {t for t in [*self.tool_decision, *(h.tool_used for h in self.hops)] if t in vocab}

    def dump(self) -> dict[str, Any]:
        """The export form: the paper's names for hop fields."""
        return self.model_dump(mode="json", by_alias=True)


def information_seeking(tools: set[str]) -> str:
    """SuperGlasses' information-seeking type of a question: None / Image / Text / Both."""
    img, txt = IMAGE in tools, TEXT in tools
    return "Both" if img and txt else "Image" if img else "Text" if txt else "None"


# ---------------------------------------------------------------------------------------------------------------
# TurnTrace -> SGLog


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


# ---------------------------------------------------------------------------------------------------------------
# Reading annotations and logs, whatever their layout

_ID = ("id", "sgid", "interactionid", "qid", "questionid", "queryid", "sampleid", "uid")
_QUESTION = ("question", "query", "userquestion", "prompt")
_GT = ("groundtruth", "gt", "goldanswer", "referenceanswer", "groundtruthanswer", "gtanswer", "goldenanswer")
_PRED = (
    "prediction",
    "response",
    "modelanswer",
    "finalanswer",
    "agentanswer",
    "predictedanswer",
    "output",
    "superlensanswer",
)
_LABELS = {
    "category": "category",
    "categories": "category",
    "querycategory": "category",
    "domain": "domain",
    "difficulty": "difficulty",
    "dynamism": "dynamism",
    "imagequality": "image_quality",
    "glasses": "glasses",
    "device": "glasses",
    "location": "location",
    "useimage": "use_image",
    "imageid": "image_id",
    "image": "image",
    "numhops": "hops",
    "hopcount": "hops",
    "numberofhops": "hops",
}
_NEED = (
    "needretrieval",
    "needsretrieval",
    "needsearch",
    "needssearch",
    "retrievalneeded",
    "requiresretrieval",
    "needrag",
    "rag",
    "decision",
    "retrievaldecision",
    "retrievaldemand",
    "ragdecision",
)
_TOOLS = (
    "tooldecision",
    "tooldecisions",
    "tools",
    "toolsused",
    "toolsequence",
    "toolchain",
    "tooluse",
    "informationseeking",
)
_OBJECT = (
    "detectedobject",
    "object",
    "objectdetection",
    "targetobject",
    "objectofinterest",
    "detection",
    "entityobject",
)
_HOPS = (
    "hops",
    "subquestions",
    "searchlog",
    "searchlogs",
    "searchtrajectory",
    "searchtrajectories",
    "trajectory",
    "searchsteps",
    "steps",
    "searchhistory",
    "hoplist",
)
_ACCURACY = ("accuracy", "correct", "iscorrect", "judgement", "judgment", "verdict")
_IGNORED = ("format", "source", "unmapped")  # written by our export; re-derived on reading

_HOP_SUBQ = ("subquestion", "subquery", "subq", "question", "text", "querytext")
_HOP_TOOL = (
    "toolused",
    "tool",
    "toolname",
    "searchtool",
    "tooltype",
    "searchtype",
    "retrievaltools",
    "retrievaltool",
    "tools",
    "type",
    "name",
)
_HOP_KW = ("searchkeywords", "keywords", "keyword", "searchquery", "query", "searchterms", "q")
_HOP_URL = ("searchurl", "url", "link", "sourceurl", "resulturl", "urls", "links")
_HOP_SNIPPET = (
    "searchresultsnippet",
    "searchresult",
    "snippet",
    "resultsnippet",
    "result",
    "searchsnippet",
    "content",
    "searchresults",
    "results",
    "evidence",
)
_HOP_KEYS = (_HOP_SUBQ, _HOP_TOOL, _HOP_KW, _HOP_URL, _HOP_SNIPPET)
_HOP_OWN_EXTRAS = ("steps", "error", "moretools")  # written by our export: kept without a report
_HOP_N = re.compile(r"^hop(\d+)$")
_LINE = re.compile(r"^\s*([^:]{1,60}?)\s*:\s*(.*?)\s*$")

_TRUE = {
    "true",
    "yes",
    "y",
    "1",
    "t",
    "need",
    "needed",
    "required",
    "needrag",
    "rag",
    "retrieval",
    "search",
    "useretrieval",
    "needretrieval",
    "needsearch",
}
_FALSE = {
    "false",
    "no",
    "n",
    "0",
    "f",
    "none",
    "notneeded",
    "noretrieval",
    "norag",
    "noneedrag",
    "noneed",
    "directanswer",
    "direct",
    "nosearch",
    "noneedsearch",
    "noneedretrieval",
    "",
}


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
        s = squash(v)
        if s in _TRUE:
            return True
        if s in _FALSE:
            return False
    if isinstance(v, dict):
        for k in ("accuracy", "correct", "value"):
            if k in v:
                return _bool(v[k])
    return None


def _box(v: Any) -> list[float] | None:
    """[x0, y0, x1, y1] from a list (xyxy; x, y, w, h when the second corner lies before the first) or a dict with
    x0/y0/x1/y1, x1/y1/x2/y2, xmin/ymin/xmax/ymax, left/top/right/bottom or x/y/w(idth)/h(eight)."""
    try:
        if isinstance(v, (list, tuple)) and len(v) == 4:
            x0, y0, a, b = (float(x) for x in v)
            return [x0, y0, a, b] if a >= x0 and b >= y0 else [x0, y0, x0 + a, y0 + b]
        if isinstance(v, dict):
            d = {squash(k): x for k, x in v.items()}
            for keys in (
                ("x0", "y0", "x1", "y1"),
                ("x1", "y1", "x2", "y2"),
                ("xmin", "ymin", "xmax", "ymax"),
                ("left", "top", "right", "bottom"),
            ):
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
    if v is None or v == "" or v == {} or (isinstance(v, str) and squash(v) in _NO_TOOL):
        return None
    if isinstance(v, str):
        return SGObject(label=v.strip())
    if isinstance(v, dict):
        d = {squash(k): x for k, x in v.items()}
        label = next((_text(d[k]) for k in ("label", "name", "object", "category", "class", "entity") if k in d), "")
        raw = next((d[k] for k in ("box", "bbox", "boundingbox", "region", "coordinates") if k in d), None)
        box = _box(raw) if raw is not None else _box(v)
        if not label and box is None:
            return None
        extra = {k: d[k] for k in ("score", "method") if k in d}
        return SGObject(label=label, box=box, **extra)
    return None


def _loads(v: Any) -> Any:
    """A JSON-encoded string decoded; anything else as it is."""
    if isinstance(v, str) and v.strip()[:1] in ("{", "["):
        try:
            return json.loads(v)
        except (json.JSONDecodeError, RecursionError):
            return v
    return v


def _decisions(text: str) -> tuple[list[str], list[str]]:
    """("Need Image Search, No need Text Search") -> (tools needed, tools declined)."""
    need, declined = [], []
    for part in re.split(r"\s*(?:,|;|\||->|→|\band\b|\n)\s*", text or ""):
        s = part.strip().strip(".")
        if not s:
            continue
        m = re.match(
            r"^(?:no\s+need(?:\s+(?:for|of|to use))?|not\s+needed:?|no|without|skip|don'?t\s+need)\s+(.+)$", s, re.I
        )
        if m:
            declined.append(sg_tool_name(m.group(1)))
            continue
        m = re.match(r"^(?:need(?:s)?(?:\s+(?:for|to use))?|use|uses|call|requires?)\s+(.+)$", s, re.I)
        name = sg_tool_name(m.group(1) if m else s)
        if name != NONE:
            need.append(name)
    return need, declined


def tools_named_in(
    value: Any, found: list[tuple[str, dict[str, Any]]] | None = None, notes: list[str] | None = None
) -> list[tuple[str, dict[str, Any]]]:
    """The tools named in a `retrieval-tools`-like value, with the details given for each ({keywords, url, ...}).

    None, "", "none", "null", "{}" and "[]" name no tool; a JSON string is decoded; a list names the tools of its
    items; a dict is either one tool ({"tool": "Text Search", "keywords": ...}) or tool -> details
    ({"Text Search": "falcon 9 maker"} or {"text_search": {"keywords": ...}}); a plain string is a tool name (or
    a "Need X, No need Y" decision). A dict naming no known tool is reported and counted as an unnamed tool."""
    found = [] if found is None else found
    value = _loads(value)
    if value is None or (isinstance(value, str) and squash(value) in _NO_TOOL) or value in ({}, []):
        return found
    if isinstance(value, (list, tuple)):
        for x in value:
            tools_named_in(x, found, notes)
        return found
    if isinstance(value, dict):
        d = {squash(k): (k, x) for k, x in value.items()}
        key = next(
            (k for k in ("tool", "toolused", "toolname", "name", "type", "searchtool", "tooltype") if k in d), None
        )
        if key is not None:
            names = [n for n, _ in tools_named_in(d[key][1])]
            details = {k: x for k, x in value.items() if squash(k) != key}
            for n in names or []:
                found.append((n, details))
            return found
        named = {k: x for k, x in value.items() if sg_tool_name(k) in SEARCH_TOOLS}
        if named:
            for k, x in named.items():
                if _loads(x) in (None, False) or (isinstance(x, str) and squash(x) in _NO_TOOL):
                    continue  # {"Image Search": "none"}: declined
                details = x if isinstance(x, dict) else {"keywords": x} if isinstance(x, str) else {"value": x}
                found.append((sg_tool_name(k), details))
            return found
        if notes is not None:
            notes.append(f"retrieval tool without a known name: {json.dumps(value, ensure_ascii=False)[:120]}")
        found.append(("Unnamed Tool", dict(value)))
        return found
    if isinstance(value, bool):
        if value:
            found.append(("Unnamed Tool", {}))
        return found
    need, _ = _decisions(str(value))
    found += [(n, {}) for n in need]
    return found


def _pick(d: dict[str, tuple[str, Any]], names: tuple[str, ...], used: set[str]) -> tuple[bool, Any]:
    for n in names:
        if n in d and n not in used:
            used.add(n)
            return True, d[n][1]
    return False, None


def _hop_from(
    v: Any, question: str, where: str, problems: list[str] | None, unmapped: list[str], name: str = "hop"
) -> SGHop | None:
    """One hop from a dict in any layout, or from a plain string (a sub-question without a tool)."""
    v = _loads(v)
    if isinstance(v, str):
        return SGHop(sub_question=v.strip()) if v.strip() else None
    if not isinstance(v, dict):
        return None
    d = {squash(k): (k, x) for k, x in v.items()}
    used: set[str] = set()
    got = [_pick(d, names, used) for names in _HOP_KEYS]
    (has_q, q), (has_t, tool), (_, kw), (_, url), (_, snip) = got
    if not any(found for found, _ in got):
        return None
    notes: list[str] = []
    tools = tools_named_in(tool, notes=notes) if has_t else []
    for n in notes:
        _problem(problems, f"{where}: {n}")
    tool_name, details = tools[0] if tools else (NONE, {})
    dd = {squash(k): x for k, x in details.items()} if isinstance(details, dict) else {}
    kw = kw if kw is not None else next((dd[k] for k in _HOP_KW if k in dd), None)
    url = url if url is not None else next((dd[k] for k in _HOP_URL if k in dd), None)
    snip = snip if snip is not None else next((dd[k] for k in _HOP_SNIPPET if k in dd), None)
    if isinstance(snip, (list, tuple)) and snip and isinstance(snip[0], dict):
        first = {squash(k): x for k, x in snip[0].items()}
        url = url or first.get("url") or first.get("link")
        snip = next((first[k] for k in ("snippet", "text", "content", "title") if k in first), None)
    if isinstance(url, (list, tuple)):
        url = url[0] if url else None
    extra = _unmapped_keys(d, used, unmapped, f"{name}.", _HOP_OWN_EXTRAS)
    if len(tools) > 1:
        extra["more_tools"] = [n for n, _ in tools[1:]]
        _problem(
            problems,
            f"{where}: names {len(tools)} tools ({', '.join(n for n, _ in tools)}); a SuperGlasses "
            "hop has one: the first is `Tool used`, the others are kept under more_tools",
        )
    snippet = _text(snip) or None
    return SGHop(
        sub_question=_text(q) if has_q and _text(q) else question,
        tool_used=tool_name,
        search_keywords=_text(kw) or None,
        search_url=_text(url) or None,
        search_result_snippet=snippet,
        **extra,
    )


def _key_lines(text: str) -> dict[str, Any]:
    """ "Decision: Need RAG\\nObject Detection: Car" -> {"Decision": "Need RAG", "Object Detection": "Car"}."""
    out: dict[str, Any] = {}
    for line in text.splitlines():
        m = _LINE.match(line)
        if m:
            out[m.group(1)] = m.group(2)
    return out


def _layout(d: dict[str, tuple[str, Any]]) -> Layout:
    if d.get("format", (None, None))[1] == FORMAT:
        return "export"
    if "subquestions" in d or "useimage" in d or isinstance(d.get("hops", (None, None))[1], int):
        return "hf"
    if any(_HOP_N.match(k) for k in d):
        return "hop-n"
    if {"decision", "tooldecision", "objectdetection"} & set(d):
        return "superlens"
    if {"subquestion", "toolused"} & set(d) or any(
        isinstance(x, list) and x and isinstance(x[0], dict) and {"subquestion", "toolused"} & {squash(k) for k in x[0]}
        for _, x in d.values()
    ):
        return "paper"
    return "other"


@dataclass
class _Entry:
    """One log entry being read: its keys (squashed -> (original key, value)), those mapped so far, and what
    could not be mapped (hop keys as "hop N.key"; whole hops that could not be read)."""

    keys: dict[str, tuple[str, Any]]
    where: str
    problems: list[str] | None
    used: set[str] = field(default_factory=set)
    unmapped: list[str] = field(default_factory=list)
    unreadable_hops: list[Any] = field(default_factory=list)

    def pick(self, names: tuple[str, ...]) -> tuple[bool, Any]:
        return _pick(self.keys, names, self.used)

    def problem(self, msg: str) -> None:
        _problem(self.problems, f"{self.where}: {msg}")


def parse_log(entry: Any, where: str = "entry", problems: list[str] | None = None) -> SGLog | None:
    """One log entry in any known layout -> SGLog, or None (reported) when it cannot be read.

    Every key is mapped or kept under `extra` and named in `unmapped` (and in `problems`). `answer` is read as the
    ground truth in annotation layouts (HF rows, the paper's, "Hop N") and as the model's answer in SuperLens
    logs, or when a ground-truth key is also present."""
    if isinstance(entry, str):
        entry = _key_lines(entry)
    if isinstance(entry, dict) and entry.get("format") == FORMAT:
        try:
            return SGLog.model_validate(entry)  # our own export: lossless
        except ValidationError as err:
            _problem(
                problems, f"{where}: marked {FORMAT} but not valid ({err.errors()[0].get('msg')}); read tolerantly"
            )
    if not isinstance(entry, dict):
        _problem(problems, f"{where}: not a JSON object ({type(entry).__name__})")
        return None
    keys = {squash(k): (k, v) for k, v in entry.items()}
    e = _Entry(keys, where, problems, used={k for k in _IGNORED if k in keys})
    iid = _text(e.pick(_ID)[1])
    if not iid:
        e.problem("no id")
        return None
    e.where = f"{where} ({iid})"
    return _read_entry(e, iid)


def _read_entry(e: _Entry, iid: str) -> SGLog:
    """The SGLog of an entry with an id; the keys are picked in this order (a key is mapped at most once)."""
    layout = _layout(e.keys)
    question = _text(e.pick(_QUESTION)[1])
    ground_truth, answer = _answers(e, layout)
    has_acc, acc = e.pick(_ACCURACY)
    labels = _entry_labels(e)
    hops, hops_given = _entry_hops(e, question, labels)
    decision, need = _entry_decision(e, hops, hops_given)
    has_obj, obj_raw = e.pick(_OBJECT)
    hop_count = labels.get("hops")
    if isinstance(hop_count, int) and hops and hop_count != len(hops):
        e.problem(f"hops = {hop_count} but {len(hops)} sub-question(s) are given")
    extra = _entry_extra(e)
    return SGLog(
        id=iid,
        question=question,
        ground_truth=ground_truth,
        answer=answer,
        accuracy=_bool(acc) if has_acc else None,
        labels=labels,
        need_retrieval=need,
        tool_decision=decision,
        detected_object=_object(obj_raw) if has_obj else None,
        hops=hops,
        source=layout,
        extra=extra,
        unmapped=e.unmapped,
    )


def _answers(e: _Entry, layout: Layout) -> tuple[str | None, str | None]:
    """(ground truth, the model's answer); a bare `answer` is the ground truth unless the layout or a ground-truth
    key says it is the model's."""
    has_gt, gt = e.pick(_GT)
    has_pred, pred = e.pick(_PRED)
    if "answer" in e.keys:
        answer = e.keys["answer"][1]
        if not has_gt and layout != "superlens":
            has_gt, gt = True, answer
            e.used.add("answer")
        elif not has_pred:
            has_pred, pred = True, answer
            e.used.add("answer")
    return (_text(gt) if has_gt and gt is not None else None, _text(pred) if has_pred and pred is not None else None)


def _entry_labels(e: _Entry) -> dict[str, Any]:
    """The dataset labels: a `labels` dict, then the label columns (category, domain, ...); `category` as a list."""
    labels: dict[str, Any] = {}
    if "labels" in e.keys and isinstance(e.keys["labels"][1], dict):
        e.used.add("labels")
        labels.update(e.keys["labels"][1])
    for k, name in _LABELS.items():
        if k in e.keys and k not in e.used:
            e.used.add(k)
            labels[name] = e.keys[k][1]
    if isinstance(labels.get("category"), str):
        labels["category"] = [labels["category"]]
    return labels


def _entry_hops(e: _Entry, question: str, labels: dict[str, Any]) -> tuple[list[SGHop], bool]:
    """(the hops, whether the entry gives a hop list): a list (HF `sub_questions`, the paper's, ours), "Hop N"
    keys, or one hop's fields on the entry itself."""
    raw_hops = _raw_hops(e, labels)
    hops: list[SGHop] = []
    for i, h in enumerate(raw_hops or []):
        hop = _hop_from(h, question, f"{e.where} hop {i + 1}", e.problems, e.unmapped, f"hop {i + 1}")
        if hop is None:
            e.problem(f"hop {i + 1} unreadable ({type(h).__name__}); kept under extra.unreadable_hops")
            e.unreadable_hops.append(h)
        else:
            hops.append(hop)
    if not hops:
        flat = _flat_hop(e, question)
        if flat is not None:
            hops.append(flat)
    return hops, raw_hops is not None


def _raw_hops(e: _Entry, labels: dict[str, Any]) -> list[Any] | None:
    """The entry's hop list as given (None when it has none); a numeric `hops` is the annotated count (a label)."""
    for k in _HOPS:
        if k not in e.keys or k in e.used:
            continue
        val = _loads(e.keys[k][1])
        if k == "hops" and (isinstance(val, int) or (isinstance(val, str) and val.strip().isdigit())):
            e.used.add(k)
            labels["hops"] = int(val)  # the annotated hop count, not a list
        elif isinstance(val, (list, dict)) or val is None:
            e.used.add(k)
            return [val] if isinstance(val, dict) else (val or [])
        else:
            e.problem(f"{e.keys[k][0]} is a {type(val).__name__}, not a list of hops")
    numbered = sorted(((int(m.group(1)), k) for k in e.keys if (m := _HOP_N.match(k))), key=lambda x: x[0])
    if not numbered:
        return None
    e.used.update(k for _, k in numbered)
    return [e.keys[k][1] for _, k in numbered]


def _flat_hop(e: _Entry, question: str) -> SGHop | None:
    """The paper's layout with one hop's fields on the entry itself."""
    flat_keys = [k for names in _HOP_KEYS[1:] for k in names if k in e.keys and k not in e.used and k not in _TOOLS]
    if not flat_keys:
        return None
    flat = {e.keys[k][0]: e.keys[k][1] for k in flat_keys}
    for k in ("subquestion", "subquery"):
        if k in e.keys:
            flat[e.keys[k][0]] = e.keys[k][1]
            e.used.add(k)
    hop = _hop_from(flat, question, f"{e.where} hop 1", e.problems, [])
    if hop is not None:
        e.used.update(flat_keys)
    return hop


def _entry_decision(e: _Entry, hops: list[SGHop], hops_given: bool) -> tuple[list[str], bool | None]:
    """(the search tools decided, in order, less those declined; need_retrieval, from the tools when not given)."""
    has_tools, tools_raw = e.pick(_TOOLS)
    decided: list[str] = []
    declined: list[str] = []
    if has_tools:
        if isinstance(tools_raw, str):
            decided, declined = _decisions(tools_raw)
        else:
            decided = [n for n, _ in tools_named_in(tools_raw)]
    has_need, need_raw = e.pick(_NEED)
    need = _bool(need_raw) if has_need else None
    if has_need and need is None and need_raw is not None:
        e.problem(f"need_retrieval {need_raw!r} unreadable; taken from the tools")
    hop_tools = [h.tool_used for h in hops if h.uses_tool]
    decision = list(dict.fromkeys(t for t in [*decided, *hop_tools] if t != NONE and t not in declined))
    if need is None and (has_tools or hops_given or hops):
        need = bool(decision)
    return decision, need


def _entry_extra(e: _Entry) -> dict[str, Any]:
    """The entry's `extra` dict plus every key not mapped (each reported), and the hops that could not be read."""
    extra: dict[str, Any] = {}
    if "extra" in e.keys and isinstance(e.keys["extra"][1], dict) and "extra" not in e.used:
        e.used.add("extra")
        extra.update(e.keys["extra"][1])
    extra.update(_unmapped_keys(e.keys, e.used, e.unmapped))
    if e.unreadable_hops:
        extra["unreadable_hops"] = e.unreadable_hops
    for u in e.unmapped:
        hop_name, dot, key = u.partition(".")
        e.problem(
            f"{hop_name} key {key!r} not mapped; kept in the hop"
            if dot and hop_name.startswith("hop ")
            else f"key {u!r} not mapped; kept under extra"
        )
    return extra


def _unmapped_keys(
    keys: dict[str, tuple[str, Any]],
    used: set[str],
    unmapped: list[str],
    prefix: str = "",
    unreported: Iterable[str] = (),
) -> dict[str, Any]:
    """The keys not used, under their original names; each named in `unmapped` (after `prefix`) unless
    `unreported`."""
    out: dict[str, Any] = {}
    for k, (orig, x) in keys.items():
        if k not in used:
            out[orig] = x
            if k not in unreported:
                unmapped.append(f"{prefix}{orig}")
    return out


def _problem(problems: list[str] | None, msg: str) -> None:
    log.info("superglasses: %s", msg)
    if problems is not None:
        problems.append(msg)


def _entries(path: Path, problems: list[str] | None) -> list[tuple[str, Any]]:
    if path.suffix.lower() == ".parquet":  # the dataset's queries file; picture bytes are not log data
        import pyarrow as pa
        import pyarrow.parquet as pq

        schema = pq.read_schema(path)
        cols = [f.name for f in schema if not (f.name == "image" and not pa.types.is_string(f.type))]
        return [(f"row {i}", r) for i, r in enumerate(pq.read_table(path, columns=cols).to_pylist())]
    text = path.read_text(encoding="utf-8-sig")
    try:
        data = json.loads(text)
    except RecursionError:
        raise ValueError(f"{path}: nested too deeply to read") from None
    except json.JSONDecodeError:
        rows, bad = [], []
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                rows.append((f"line {n}", json.loads(line)))
            except json.JSONDecodeError as e:
                bad.append(f"line {n}: bad JSON ({e.msg})")
            except RecursionError:
                bad.append(f"line {n}: nested too deeply to read")
        if not rows and text.strip():  # a plain-text SuperLens log: "Key: value" lines, blank line between entries
            return [(f"block {i}", _key_lines(b)) for i, b in enumerate(re.split(r"\n\s*\n", text)) if b.strip()]
        for msg in bad:
            _problem(problems, msg)
        return rows
    if isinstance(data, dict):
        for key in ("logs", "data", "items", "records", "samples", "results", "rows"):
            if isinstance(data.get(key), list):
                data = data[key]
                break
        else:
            if not any(squash(k) in _ID for k in data) and data and all(isinstance(v, dict) for v in data.values()):
                return [(f"key {k!r}", {"id": k, **v}) for k, v in data.items()]  # {id: entry, ...}
            data = [data]
    if not isinstance(data, list):
        _problem(problems, f"{path.name}: top level is a {type(data).__name__}, not a list of logs")
        return []
    return [(f"entry {i}", e) for i, e in enumerate(data)]


def import_logs(path: str | Path, problems: list[str] | None = None) -> list[SGLog]:
    """Read logs in any known layout from a JSON list (or {"logs": [...]}, or one object), JSON lines, a text file
    of "Key: value" blocks, or a SuperGlasses queries parquet file. Entries that cannot be read and keys that
    cannot be mapped are reported (appended to `problems`); a missing file raises FileNotFoundError."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no log file at {path}")
    out = []
    for where, entry in _entries(path, problems):
        try:
            lg = parse_log(entry, where, problems)
        except RecursionError:  # an entry nested too deeply for the mapping: that entry only
            _problem(problems, f"{where}: nested too deeply to read")
            continue
        if lg is not None:
            out.append(lg)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m glasses_rag.superglasses.logs", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    ex = sub.add_parser("export", help="write a run's traces as SuperGlasses logs")
    ex.add_argument("--run", required=True, help="run folder, e.g. traces/runs/<run_id>")
    ex.add_argument("--out", required=True, help="output file: .json (a list) or .jsonl")
    chk = sub.add_parser("check", help="read logs or annotations and report everything that could not be mapped")
    chk.add_argument("path")
    args = ap.parse_args(argv)
    problems: list[str] = []
    try:
        if args.cmd == "export":
            logs = export_run(args.run, args.out, problems)
            print(f"wrote {len(logs)} logs to {args.out}" + (f" ({len(problems)} files skipped)" if problems else ""))
        else:
            logs = import_logs(args.path, problems)
            layouts = ", ".join(f"{k} {v}" for k, v in sorted(_count(lg.source for lg in logs).items()))
            print(f"read {len(logs)} logs from {args.path} ({layouts or 'none'}); {len(problems)} problem(s)")
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    for p in problems:
        print(f"  {p}", file=sys.stderr)
    return 0 if args.cmd == "export" or not problems else 1


def _count(items: Iterable[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for x in items:
        out[x] = out.get(x, 0) + 1
    return out


if __name__ == "__main__":
    sys.exit(main())
