"""Compare our SuperGlasses-style logs with annotated reference logs, turn by turn (matched by interaction_id).

Metrics, over the matched turns:
- tool choice: exact sequence match rate, mean set Jaccard, first-tool match rate. Both sides are first cut to
  the *tool vocabulary*: by default the tools that appear anywhere in the reference (its tool_decision lists and
  hop tool_used), so tools the annotators never record (e.g. our Rerank) do not count against us.
  A reference turn with an empty tool_decision uses its hops' tools. Two empty sequences agree (Jaccard 1).
- retrieval decision: accuracy of need_retrieval (and the confusion counts, reference = truth).
- hop count: mean absolute difference and signed bias (ours - reference).
- sub-questions: hops aligned in order (i-th with i-th, over min(#ours, #ref) pairs); per turn the mean MiniLM
  cosine and the mean token F1 of the pairs; turns where either side has no hop are left out.

Error types, after the SuperGlasses error analysis (a turn can have several; `primary` is the first in
pipeline order object detection -> retrieval demand -> tool invocation -> query decoupling):
- retrieval_demand: need_retrieval differs.
- tool_invocation: both sides retrieve, and the sets of (vocabulary) tools differ.
- query_decoupling: both sides retrieve, and the hop counts differ, or the turn's mean sub-question similarity
  is below `sim_threshold` (MiniLM cosine when an embedder is available, else token F1).
- object_detection: the reference names an object and ours is missing; or both have boxes in the same units
  and IoU < `iou_threshold`; or both labels are specific (not generic like "salient region"/"object") and differ
  (neither normalised label contains the other). A reference without an object never counts.
Answer generation errors need a judge and are not classified here.

    python -m traces.compare --run traces/runs/<run_id> --reference refs.json [--json out.json] [--no-embed]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, Field

from traces.superglasses import SGLog, SGObject, import_logs, read_run, sg_tool_name, to_superglasses
from traces.store import write_json_atomic

ERROR_TYPES = ("object_detection", "retrieval_demand", "tool_invocation", "query_decoupling")
GENERIC_LABELS = frozenset({"", "object", "main object", "the main object", "salient region", "region", "thing",
                            "item", "unknown", "none"})
RULES: dict[str, str] = {
    "retrieval_demand": "need_retrieval differs from the reference",
    "tool_invocation": "both retrieve and the tool sets (cut to the tool vocabulary) differ",
    "query_decoupling": "both retrieve and the hop counts differ, or mean in-order sub-question similarity < sim_threshold",
    "object_detection": ("reference has an object and ours is missing, or both boxes (same units) have IoU < iou_threshold, "
                         "or both labels are specific and differ"),
}
_TOKEN = re.compile(r"[a-z0-9]+")


class TurnComparison(BaseModel):
    interaction_id: str
    tools_pred: list[str]
    tools_ref: list[str]
    tool_exact: bool
    tool_jaccard: float
    first_tool_match: bool
    need_pred: bool
    need_ref: bool
    hops_pred: int
    hops_ref: int
    subq_cosine: float | None = None
    subq_token_f1: float | None = None
    object_iou: float | None = None
    object_labels: tuple[str, str] | None = None
    errors: list[str] = Field(default_factory=list)
    primary_error: str | None = None


class CompareReport(BaseModel):
    n_predicted: int
    n_reference: int
    n_matched: int
    unmatched_predicted: list[str] = Field(default_factory=list)
    unmatched_reference: list[str] = Field(default_factory=list)
    duplicates: list[str] = Field(default_factory=list, description="ids seen twice on one side; the first was kept")
    tool_vocabulary: list[str]
    tool_exact_match: float | None = None
    tool_jaccard: float | None = None
    first_tool_match: float | None = None
    retrieval_accuracy: float | None = None
    retrieval_confusion: dict[str, int] = Field(default_factory=dict, description="tp/fp/fn/tn, reference = truth")
    hop_mae: float | None = None
    hop_bias: float | None = None
    subq_cosine: float | None = None
    subq_token_f1: float | None = None
    subq_turns: int = 0
    similarity_method: Literal["minilm", "token_f1"]
    error_counts: dict[str, int]
    error_rates: dict[str, float]
    primary_error_counts: dict[str, int]
    turns_with_error: int = 0
    thresholds: dict[str, float]
    rules: dict[str, str] = Field(default_factory=lambda: dict(RULES))
    turns: list[TurnComparison] = Field(default_factory=list)


# ---------------------------------------------------------------------------------------------------------------


def tokens(text: str) -> list[str]:
    return _TOKEN.findall((text or "").lower())


def token_f1(a: str, b: str) -> float:
    ta, tb = tokens(a), tokens(b)
    if not ta and not tb:
        return 1.0
    common = sum((Counter(ta) & Counter(tb)).values())
    if common == 0:
        return 0.0
    p, r = common / len(ta), common / len(tb)
    return 2 * p * r / (p + r)


def iou(a: list[float], b: list[float]) -> float:
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    union = max(0.0, a[2] - a[0]) * max(0.0, a[3] - a[1]) + max(0.0, b[2] - b[0]) * max(0.0, b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def _normalised(box: list[float]) -> bool:
    return all(0.0 <= v <= 1.0 for v in box)


def _label(s: str) -> str:
    return " ".join(tokens(s))


def tool_sequence(lg: SGLog) -> list[str]:
    """The turn's tool decisions; when none were recorded, the hops' tools."""
    return list(lg.tool_decision) or [h.tool_used for h in lg.hops if h.tool_used]


def object_error(pred: SGObject | None, ref: SGObject | None, iou_threshold: float) -> tuple[bool, float | None]:
    if ref is None or (not _label(ref.label) and ref.box is None):
        return False, None
    if pred is None or (not _label(pred.label) and pred.box is None):
        return True, None
    overlap = None
    if pred.box is not None and ref.box is not None and _normalised(pred.box) == _normalised(ref.box):
        overlap = iou(pred.box, ref.box)
        if overlap < iou_threshold:
            return True, overlap
    lp, lr = _label(pred.label), _label(ref.label)
    if lp not in GENERIC_LABELS and lr not in GENERIC_LABELS and lp not in lr and lr not in lp:
        return True, overlap
    return False, overlap


def _load_embedder(embedder: Any):
    if embedder != "auto":
        return embedder
    try:
        from models.text_embedder import get_text_embedder

        return get_text_embedder()
    except Exception:  # noqa: BLE001 - no weights or no torch: fall back to token F1
        return None


def _index(logs: list[SGLog], dups: list[str]) -> dict[str, SGLog]:
    out: dict[str, SGLog] = {}
    for lg in logs:
        if lg.interaction_id in out:
            dups.append(lg.interaction_id)
        else:
            out[lg.interaction_id] = lg
    return out


def _mean(xs: list[float]) -> float | None:
    return float(np.mean(xs)) if xs else None


def compare(predicted: list[SGLog], reference: list[SGLog], *, embedder: Any = "auto", sim_threshold: float = 0.5,
            iou_threshold: float = 0.5, tool_vocabulary: set[str] | None = None) -> CompareReport:
    """Compare our logs with reference logs. `embedder`: "auto" (MiniLM, token F1 if it cannot load), None
    (token F1 only), or any object with `embed(list[str]) -> (n, d)` L2-normalised rows."""
    dups: list[str] = []
    pred, ref = _index(predicted, dups), _index(reference, dups)
    ids = [i for i in ref if i in pred]
    vocab = set(tool_vocabulary) if tool_vocabulary is not None else {
        t for lg in reference for t in [*lg.tool_decision, *(h.tool_used for h in lg.hops)] if t}
    emb = _load_embedder(embedder)

    pairs: dict[str, list[tuple[str, str]]] = {
        i: list(zip([h.sub_question for h in pred[i].hops], [h.sub_question for h in ref[i].hops])) for i in ids}
    cos_by_id: dict[str, float] = {}
    if emb is not None:
        texts = sorted({t for ps in pairs.values() for p in ps for t in p})
        try:
            vecs = np.asarray(emb.embed(texts), dtype=np.float64) if texts else np.zeros((0, 1))
        except Exception:  # noqa: BLE001 - an embedder that fails at run time: token F1 instead
            emb = None
        else:
            at = {t: vecs[k] for k, t in enumerate(texts)}
            for i, ps in pairs.items():
                if ps:
                    cos_by_id[i] = float(np.mean([float(at[a] @ at[b]) for a, b in ps]))

    turns: list[TurnComparison] = []
    for i in ids:
        p, r = pred[i], ref[i]
        tp = [t for t in tool_sequence(p) if t in vocab]
        tr = [t for t in tool_sequence(r) if t in vocab]
        sp, sr = set(tp), set(tr)
        jac = len(sp & sr) / len(sp | sr) if sp | sr else 1.0
        ps = pairs[i]
        f1 = float(np.mean([token_f1(a, b) for a, b in ps])) if ps else None
        cos = cos_by_id.get(i)
        sim = cos if emb is not None else f1
        obj_err, overlap = object_error(p.detected_object, r.detected_object, iou_threshold)
        both = p.need_retrieval and r.need_retrieval
        errs = []
        if obj_err:
            errs.append("object_detection")
        if p.need_retrieval != r.need_retrieval:
            errs.append("retrieval_demand")
        if both and sp != sr:
            errs.append("tool_invocation")
        if both and (len(p.hops) != len(r.hops) or (sim is not None and sim < sim_threshold)):
            errs.append("query_decoupling")
        labels = None
        if p.detected_object is not None or r.detected_object is not None:
            labels = (p.detected_object.label if p.detected_object else "", r.detected_object.label if r.detected_object else "")
        turns.append(TurnComparison(
            interaction_id=i, tools_pred=tp, tools_ref=tr, tool_exact=tp == tr, tool_jaccard=round(jac, 6),
            first_tool_match=(tp[:1] == tr[:1]), need_pred=p.need_retrieval, need_ref=r.need_retrieval,
            hops_pred=len(p.hops), hops_ref=len(r.hops), subq_cosine=cos, subq_token_f1=f1, object_iou=overlap,
            object_labels=labels, errors=errs, primary_error=errs[0] if errs else None))

    n = len(turns)
    counts = {e: sum(e in t.errors for t in turns) for e in ERROR_TYPES}
    conf = {
        "tp": sum(t.need_pred and t.need_ref for t in turns), "fp": sum(t.need_pred and not t.need_ref for t in turns),
        "fn": sum(not t.need_pred and t.need_ref for t in turns), "tn": sum(not t.need_pred and not t.need_ref for t in turns),
    }
    diffs = [t.hops_pred - t.hops_ref for t in turns]
    return CompareReport(
        n_predicted=len(pred), n_reference=len(ref), n_matched=n,
        unmatched_predicted=[i for i in pred if i not in ref], unmatched_reference=[i for i in ref if i not in pred],
        duplicates=dups, tool_vocabulary=sorted(vocab),
        tool_exact_match=_mean([float(t.tool_exact) for t in turns]), tool_jaccard=_mean([t.tool_jaccard for t in turns]),
        first_tool_match=_mean([float(t.first_tool_match) for t in turns]),
        retrieval_accuracy=_mean([float(t.need_pred == t.need_ref) for t in turns]), retrieval_confusion=conf,
        hop_mae=_mean([float(abs(d)) for d in diffs]), hop_bias=_mean([float(d) for d in diffs]),
        subq_cosine=_mean([t.subq_cosine for t in turns if t.subq_cosine is not None]),
        subq_token_f1=_mean([t.subq_token_f1 for t in turns if t.subq_token_f1 is not None]),
        subq_turns=sum(t.subq_token_f1 is not None for t in turns),
        similarity_method="minilm" if emb is not None else "token_f1",
        error_counts=counts, error_rates={e: (c / n if n else 0.0) for e, c in counts.items()},
        primary_error_counts={e: sum(t.primary_error == e for t in turns) for e in ERROR_TYPES},
        turns_with_error=sum(bool(t.errors) for t in turns),
        thresholds={"sim_threshold": sim_threshold, "iou_threshold": iou_threshold}, turns=turns)


# ---------------------------------------------------------------------------------------------------------------


def _f(x: float | None, pct: bool = False) -> str:
    if x is None:
        return "-"
    return f"{100 * x:.1f}%" if pct else f"{x:.3f}"


def _short(tools: list[str]) -> str:
    abbrev = {"Image Search": "IMG", "Text Search": "TXT", "Object Detection": "DET", "OCR": "OCR",
              "Query Decoupling": "QD", "Rerank": "RR", "Self Check": "SC"}
    return ">".join(abbrev.get(t, t) for t in tools) or "-"


def format_report(rep: CompareReport, max_turns: int = 50) -> str:
    L = [f"matched {rep.n_matched} turns (ours {rep.n_predicted}, reference {rep.n_reference}); "
         f"unmatched: ours {len(rep.unmatched_predicted)}, reference {len(rep.unmatched_reference)}"
         + (f"; duplicates {len(rep.duplicates)}" if rep.duplicates else ""),
         f"tool vocabulary: {', '.join(rep.tool_vocabulary) or '(none)'}", "",
         f"{'metric':<34}{'value':>10}", "-" * 44]
    rows = [("tool sequence exact match", _f(rep.tool_exact_match, True)),
            ("tool set Jaccard (mean)", _f(rep.tool_jaccard)),
            ("first tool match", _f(rep.first_tool_match, True)),
            ("need_retrieval accuracy", _f(rep.retrieval_accuracy, True)),
            ("hop count MAE", _f(rep.hop_mae)),
            ("hop count bias (ours - ref)", "-" if rep.hop_bias is None else f"{rep.hop_bias:+.3f}"),
            (f"sub-question cosine (MiniLM, n={rep.subq_turns})", _f(rep.subq_cosine)),
            (f"sub-question token F1 (n={rep.subq_turns})", _f(rep.subq_token_f1))]
    L += [f"{k:<34}{v:>10}" for k, v in rows]
    c = rep.retrieval_confusion
    if c:
        L.append(f"  need_retrieval confusion: tp={c['tp']} fp={c['fp']} fn={c['fn']} tn={c['tn']}")
    L += ["", f"{'error type':<22}{'turns':>7}{'rate':>9}{'primary':>9}", "-" * 47]
    for e in ERROR_TYPES:
        L.append(f"{e:<22}{rep.error_counts[e]:>7}{100 * rep.error_rates[e]:>8.1f}%{rep.primary_error_counts[e]:>9}")
    L.append(f"{'any':<22}{rep.turns_with_error:>7}"
             f"{(100 * rep.turns_with_error / rep.n_matched if rep.n_matched else 0):>8.1f}%")
    L.append(f"(decoupling similarity: {rep.similarity_method} < {rep.thresholds['sim_threshold']}; "
             f"object IoU < {rep.thresholds['iou_threshold']})")
    if rep.turns:
        L += ["", f"{'interaction_id':<24}{'tools ours':<16}{'tools ref':<16}{'need':>6}{'hops':>6}{'sim':>7}  errors",
              "-" * 90]
        for t in rep.turns[:max_turns]:
            sim = t.subq_cosine if t.subq_cosine is not None else t.subq_token_f1
            L.append(f"{t.interaction_id[:23]:<24}{_short(t.tools_pred)[:15]:<16}{_short(t.tools_ref)[:15]:<16}"
                     f"{'YN'[not t.need_pred] + '/' + 'YN'[not t.need_ref]:>6}{f'{t.hops_pred}/{t.hops_ref}':>6}"
                     f"{_f(sim):>7}  {', '.join(t.errors) or 'ok'}")
        if len(rep.turns) > max_turns:
            L.append(f"... {len(rep.turns) - max_turns} more turns (see --json)")
    for name, ids in (("unmatched ours", rep.unmatched_predicted), ("unmatched reference", rep.unmatched_reference)):
        if ids:
            L.append(f"{name}: {', '.join(ids[:10])}" + (f" ... (+{len(ids) - 10})" if len(ids) > 10 else ""))
    return "\n".join(L)


def _load_predicted(args, problems: list[str]) -> list[SGLog]:
    if args.run:
        return [to_superglasses(t) for t in read_run(args.run, problems)]
    return import_logs(args.predicted, problems)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m traces.compare", description="Compare a run with SuperGlasses-style reference logs.")
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--run", help="run folder of turn traces, e.g. traces/runs/<run_id>")
    src.add_argument("--predicted", help="our logs already exported by `python -m traces.superglasses export`")
    ap.add_argument("--reference", required=True, help="annotated logs: JSON list or JSON lines")
    ap.add_argument("--json", help="also write the full report (with per-turn rows) here")
    ap.add_argument("--no-embed", action="store_true", help="skip MiniLM; sub-questions compared by token F1")
    ap.add_argument("--sim-threshold", type=float, default=0.5)
    ap.add_argument("--iou-threshold", type=float, default=0.5)
    ap.add_argument("--tools", help="comma-separated tool vocabulary (default: tools seen in the reference)")
    ap.add_argument("--max-turns", type=int, default=50, help="per-turn rows to print")
    args = ap.parse_args(argv)
    problems: list[str] = []
    try:
        pred = _load_predicted(args, problems)
        ref = import_logs(args.reference, problems)
    except FileNotFoundError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    vocab = {sg_tool_name(t) for t in args.tools.split(",") if t.strip()} if args.tools else None
    rep = compare(pred, ref, embedder=None if args.no_embed else "auto", sim_threshold=args.sim_threshold,
                  iou_threshold=args.iou_threshold, tool_vocabulary=vocab)
    print(format_report(rep, args.max_turns))
    for p in problems:
        print(f"skipped: {p}", file=sys.stderr)
    if args.json:
        data = rep.model_dump(mode="json")
        data["problems"] = problems
        write_json_atomic(Path(args.json), json.dumps(data, indent=2, ensure_ascii=False) + "\n")
        print(f"report: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
