"""Compare our SuperGlasses logs with annotated trajectories, question by question (matched by SuperGlasses id).

Trajectory metrics, over the matched questions:
- tool choice: the set of search tools used per question, cut to the tool vocabulary (default SuperGlasses' own:
  Image Search, Text Search), i.e. the information-seeking type None / Image / Text / Both: agreement rate and
  mean set Jaccard. With an empty vocabulary these are "n/a" (nothing to agree on), never 100%.
- retrieval decision: agreement of need_retrieval (and the confusion counts, annotation = truth); questions
  where either side does not say are left out.
- hop count, on sub-questions (a hop is a sub-question with zero or one tool, as SuperGlasses counts them):
  mean absolute error, signed bias (ours - annotation) and exact-count rate; a side without hops says nothing.
- sub-question similarity: our sub-questions and the annotated ones matched one to one by best total
  similarity (Hungarian assignment); the mean similarity of the matched pairs (MiniLM cosine when an embedder
  is available, else token F1).

Error types, as defined in this project after the paper's description (the paper's exact definitions could
not be read offline); counted over WRONG answers only (our judged accuracy false), a question may have several:
- retrieval_demand: our need-retrieval decision differs from the annotation's.
- tool_invocation: both retrieve, and the search tools chosen differ (sets, cut to the vocabulary).
- query_decoupling: only for multi-hop annotations (>= 2 sub-questions): our sub-question count differs, or
  the matched sub-questions are not similar (mean similarity < `sim_threshold`).
- object_detection: the annotation names an object (label or box) and ours is missing, or both boxes are
  given in the same units and overlap less than `iou_threshold` (IoU), or both labels are specific (not generic
  like "salient region") and neither contains the other.
Each count comes with its base: the wrong answers for which the rule can apply (e.g. multi-hop annotations).

    python -m glasses_rag.superglasses.compare --run traces/runs/<run_id> [--reference refs.jsonl] [--json out.json]
        [--no-embed]

Without annotations (a CRAG-MM run, a file with none) it says so and exits 2; two runs side by side are
`python -m glasses_rag.frontends.diff`.
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

from glasses_rag.superglasses.logs import (
    SEARCH_TOOLS,
    SGLog,
    SGObject,
    import_logs,
    information_seeking,
    parse_log,
    read_run,
    sg_tool_name,
    to_superglasses,
)
from traces.store import write_json_atomic

ERROR_TYPES = ("retrieval_demand", "tool_invocation", "query_decoupling", "object_detection")
GENERIC_LABELS = frozenset(
    {"", "object", "main object", "the main object", "salient region", "region", "thing", "item", "unknown", "none"}
)
RULES: dict[str, str] = {
    "retrieval_demand": "our need-retrieval decision differs from the annotation",
    "tool_invocation": "both retrieve and the search tools chosen differ",
    "query_decoupling": "multi-hop annotation (>= 2 sub-questions): sub-question count differs, or mean similarity "
    "of the matched sub-questions < sim_threshold",
    "object_detection": "annotated object missed, or boxes (same units) with IoU < iou_threshold, or both labels "
    "specific and different",
}
_TOKEN = re.compile(r"[a-z0-9]+")


class TurnComparison(BaseModel):
    id: str
    accuracy: bool | None = Field(None, description="Our judged accuracy; error types are counted only when false.")
    tools_pred: list[str]
    tools_ref: list[str]
    seeking_pred: str
    seeking_ref: str
    tool_agree: bool | None = None
    tool_jaccard: float | None = None
    need_pred: bool | None = None
    need_ref: bool | None = None
    hops_pred: int
    hops_ref: int
    subq_similarity: float | None = None
    subq_pairs: list[tuple[str, str, float]] = Field(default_factory=list)
    object_iou: float | None = None
    object_labels: tuple[str, str] | None = None
    errors: list[str] = Field(default_factory=list)


class CompareReport(BaseModel):
    n_predicted: int
    n_reference: int
    n_matched: int
    n_judged: int = Field(0, description="Matched questions with a judged accuracy.")
    n_wrong: int = Field(0, description="Matched questions judged wrong: the base of the error analysis.")
    unmatched_predicted: list[str] = Field(default_factory=list)
    unmatched_reference: list[str] = Field(default_factory=list)
    duplicates: list[str] = Field(default_factory=list, description="ids seen twice on one side; the first was kept")
    tool_vocabulary: list[str]
    tool_choice_agreement: float | None = Field(None, description="null (n/a) when the vocabulary is empty")
    tool_jaccard: float | None = None
    seeking_confusion: dict[str, dict[str, int]] = Field(
        default_factory=dict, description="annotation type -> our type -> questions"
    )
    retrieval_agreement: float | None = None
    retrieval_confusion: dict[str, int] = Field(default_factory=dict, description="tp/fp/fn/tn, annotation = truth")
    hop_mae: float | None = None
    hop_bias: float | None = None
    hop_exact: float | None = None
    hop_turns: int = 0
    subq_similarity: float | None = None
    subq_turns: int = 0
    similarity_method: Literal["minilm", "token_f1"]
    error_counts: dict[str, int]
    error_base: dict[str, int] = Field(description="Wrong answers for which each rule can apply.")
    error_share_of_wrong: dict[str, float | None]
    wrong_with_error: int = 0
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


def object_error(pred: SGObject | None, ref: SGObject | None, iou_threshold: float) -> tuple[bool, float | None]:
    """(error, IoU when both boxes were compared). A reference without an object never counts."""
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


def match_sub_questions(pred: list[str], ref: list[str], sim) -> list[tuple[str, str, float]]:
    """One-to-one pairs (ours, annotated, similarity) maximising the total similarity (Hungarian assignment).
    `sim(a_list, b_list)` returns the (len(a), len(b)) similarity matrix."""
    if not pred or not ref:
        return []
    from scipy.optimize import linear_sum_assignment

    m = np.asarray(sim(pred, ref), dtype=np.float64)
    rows, cols = linear_sum_assignment(-m)
    return [(pred[i], ref[j], round(float(m[i, j]), 6)) for i, j in zip(rows, cols)]


def _load_embedder(embedder: Any):
    if embedder != "auto":
        return embedder
    try:
        from glasses_rag.models.text_embedder import get_text_embedder

        return get_text_embedder()
    except Exception:  # noqa: BLE001 - no weights or no torch: fall back to token F1
        return None


def _index(logs: list[SGLog], dups: list[str]) -> dict[str, SGLog]:
    out: dict[str, SGLog] = {}
    for lg in logs:
        if lg.id in out:
            dups.append(lg.id)
        else:
            out[lg.id] = lg
    return out


def _mean(xs: list[float]) -> float | None:
    return float(np.mean(xs)) if xs else None


def _similarity(emb: Any):
    if emb is None:
        return lambda a, b: [[token_f1(x, y) for y in b] for x in a]

    def cosine(a: list[str], b: list[str]):
        va = np.asarray(emb.embed(a), dtype=np.float64)
        vb = np.asarray(emb.embed(b), dtype=np.float64)
        return va @ vb.T

    return cosine


class _SubQuestionMatcher:
    """Matches sub-questions by MiniLM cosine; when the embedder fails at run time, by token F1 from then on."""

    def __init__(self, embedder: Any):
        self.embedder = _load_embedder(embedder)
        self.sim = _similarity(self.embedder)

    @property
    def method(self) -> Literal["minilm", "token_f1"]:
        return "minilm" if self.embedder is not None else "token_f1"

    def match(self, pred: list[str], ref: list[str]) -> list[tuple[str, str, float]]:
        try:
            return match_sub_questions(pred, ref, self.sim)
        except Exception:  # noqa: BLE001 - an embedder failing at run time: token F1 from here on
            self.embedder = None
            self.sim = _similarity(None)
            return match_sub_questions(pred, ref, self.sim)


def compare(
    predicted: list[SGLog],
    reference: list[SGLog],
    *,
    embedder: Any = "auto",
    sim_threshold: float = 0.5,
    iou_threshold: float = 0.5,
    tool_vocabulary: set[str] | None = None,
) -> CompareReport:
    """Compare our logs with annotated ones. `embedder`: "auto" (MiniLM, token F1 when it cannot load), None
    (token F1), or any object with `embed(list[str]) -> (n, d)` L2-normalised rows. `tool_vocabulary`: the tools
    compared (default: SuperGlasses' Image Search and Text Search)."""
    dups: list[str] = []
    pred, ref = _index(predicted, dups), _index(reference, dups)
    vocab = set(SEARCH_TOOLS) if tool_vocabulary is None else {sg_tool_name(t) for t in tool_vocabulary}
    matcher = _SubQuestionMatcher(embedder)
    thresholds = {"sim_threshold": sim_threshold, "iou_threshold": iou_threshold}
    turns = [_compare_turn(pred[i], ref[i], vocab, matcher, thresholds) for i in ref if i in pred]
    wrong = [t for t in turns if t.accuracy is False]
    decided = [t for t in turns if t.need_pred is not None and t.need_ref is not None]
    hop_diffs = [t.hops_pred - t.hops_ref for t in turns if t.hops_pred and t.hops_ref]
    counts = {e: sum(e in t.errors for t in wrong) for e in ERROR_TYPES}
    return CompareReport(
        n_predicted=len(pred),
        n_reference=len(ref),
        n_matched=len(turns),
        n_judged=sum(t.accuracy is not None for t in turns),
        n_wrong=len(wrong),
        unmatched_predicted=[i for i in pred if i not in ref],
        unmatched_reference=[i for i in ref if i not in pred],
        duplicates=dups,
        tool_vocabulary=sorted(vocab),
        tool_choice_agreement=_mean([float(t.tool_agree) for t in turns if t.tool_agree is not None]),
        tool_jaccard=_mean([t.tool_jaccard for t in turns if t.tool_jaccard is not None]),
        seeking_confusion=_seeking_confusion(turns) if vocab else {},
        retrieval_agreement=_mean([float(t.need_pred == t.need_ref) for t in decided]),
        retrieval_confusion=_retrieval_confusion(decided),
        hop_mae=_mean([float(abs(d)) for d in hop_diffs]),
        hop_bias=_mean([float(d) for d in hop_diffs]),
        hop_exact=_mean([float(d == 0) for d in hop_diffs]),
        hop_turns=len(hop_diffs),
        subq_similarity=_mean([t.subq_similarity for t in turns if t.subq_similarity is not None]),
        subq_turns=sum(t.subq_similarity is not None for t in turns),
        similarity_method=matcher.method,
        error_counts=counts,
        error_base=_error_base(wrong, ref, vocab),
        error_share_of_wrong={e: (c / len(wrong) if wrong else None) for e, c in counts.items()},
        wrong_with_error=sum(bool(t.errors) for t in wrong),
        thresholds=thresholds,
        turns=turns,
    )


def _compare_turn(
    p: SGLog, r: SGLog, vocab: set[str], matcher: _SubQuestionMatcher, thresholds: dict[str, float]
) -> TurnComparison:
    """One question: ours (`p`) against the annotation (`r`)."""
    sp, sr = p.search_tools(vocab), r.search_tools(vocab)
    agree = jac = None
    if vocab:
        agree = sp == sr
        jac = len(sp & sr) / len(sp | sr) if sp | sr else 1.0
    pairs = matcher.match([h.sub_question for h in p.hops], [h.sub_question for h in r.hops])
    subq = _mean([s for _, _, s in pairs])
    obj_err, overlap = object_error(p.detected_object, r.detected_object, thresholds["iou_threshold"])
    errs: list[str] = []
    if p.accuracy is False:
        errs = _error_types(p, r, bool(vocab) and sp != sr, subq, obj_err, thresholds["sim_threshold"])
    labels = None
    if p.detected_object is not None or r.detected_object is not None:
        labels = (
            p.detected_object.label if p.detected_object else "",
            r.detected_object.label if r.detected_object else "",
        )
    return TurnComparison(
        id=p.id,
        accuracy=p.accuracy,
        tools_pred=sorted(sp),
        tools_ref=sorted(sr),
        seeking_pred=information_seeking(sp),
        seeking_ref=information_seeking(sr),
        tool_agree=agree,
        tool_jaccard=None if jac is None else round(jac, 6),
        need_pred=p.need_retrieval,
        need_ref=r.need_retrieval,
        hops_pred=len(p.hops),
        hops_ref=len(r.hops),
        subq_similarity=subq,
        subq_pairs=pairs,
        object_iou=overlap,
        object_labels=labels,
        errors=errs,
    )


def _error_types(
    p: SGLog, r: SGLog, tools_differ: bool, subq: float | None, obj_err: bool, sim_threshold: float
) -> list[str]:
    """The error types of a wrong answer (see the module docstring)."""
    errs: list[str] = []
    if p.need_retrieval is not None and r.need_retrieval is not None and p.need_retrieval != r.need_retrieval:
        errs.append("retrieval_demand")
    if p.need_retrieval and r.need_retrieval and tools_differ:
        errs.append("tool_invocation")
    if len(r.hops) >= 2 and (len(p.hops) != len(r.hops) or (subq is not None and subq < sim_threshold)):
        errs.append("query_decoupling")
    if obj_err:
        errs.append("object_detection")
    return errs


def _error_base(wrong: list[TurnComparison], ref: dict[str, SGLog], vocab: set[str]) -> dict[str, int]:
    """Per error type, the wrong answers for which its rule can apply."""
    return {
        "retrieval_demand": sum(t.need_pred is not None and t.need_ref is not None for t in wrong),
        "tool_invocation": sum(bool(t.need_pred and t.need_ref) for t in wrong) if vocab else 0,
        "query_decoupling": sum(t.hops_ref >= 2 for t in wrong),
        "object_detection": sum(_has_object(ref[t.id]) for t in wrong),
    }


def _retrieval_confusion(decided: list[TurnComparison]) -> dict[str, int]:
    """tp/fp/fn/tn of need_retrieval, the annotation as the truth."""
    return {
        "tp": sum(bool(t.need_pred and t.need_ref) for t in decided),
        "fp": sum(bool(t.need_pred and not t.need_ref) for t in decided),
        "fn": sum(bool(not t.need_pred and t.need_ref) for t in decided),
        "tn": sum(bool(not t.need_pred and not t.need_ref) for t in decided),
    }


def _seeking_confusion(turns: list[TurnComparison]) -> dict[str, dict[str, int]]:
    """Annotated information-seeking type -> ours -> questions."""
    seeking: dict[str, dict[str, int]] = {}
    for t in turns:
        row = seeking.setdefault(t.seeking_ref, {})
        row[t.seeking_pred] = row.get(t.seeking_pred, 0) + 1
    return seeking


def _has_object(lg: SGLog) -> bool:
    o = lg.detected_object
    return o is not None and (bool(_label(o.label)) or o.box is not None)


def references_from_traces(traces: list[Any], problems: list[str] | None = None) -> list[SGLog]:
    """The annotated trajectories a SuperGlasses run carries in its traces' labels (the dataset row's
    `sub_questions`), read as Hugging Face rows. Traces without them give none."""
    out = []
    for t in traces:
        if "sub_questions" not in t.labels:
            continue
        row = {
            "id": t.labels.get("sg_id") or t.interaction_id,
            "question": t.question,
            "answer": t.ground_truth,
            **{
                k: v
                for k, v in t.labels.items()
                if k not in ("sg_id", "query_category")
                and not (k in ("domain", "dynamism", "image_quality") and v is None)
            },
        }
        lg = parse_log(row, f"trace {t.interaction_id}", problems)
        if lg is not None:
            out.append(lg)
    return out


# ---------------------------------------------------------------------------------------------------------------


def _f(x: float | None, pct: bool = False) -> str:
    if x is None:
        return "n/a"
    return f"{100 * x:.1f}%" if pct else f"{x:.3f}"


def format_report(rep: CompareReport, max_turns: int = 50) -> str:
    """The comparison as text: agreement metrics, the error analysis, then one line per turn (the first
    `max_turns`) and the questions matched on one side only."""
    L = [
        f"matched {rep.n_matched} questions (ours {rep.n_predicted}, annotated {rep.n_reference}); "
        f"unmatched: ours {len(rep.unmatched_predicted)}, annotated {len(rep.unmatched_reference)}"
        + (f"; duplicates {len(rep.duplicates)}" if rep.duplicates else ""),
        f"tool vocabulary: {', '.join(rep.tool_vocabulary) or '(empty: tool metrics n/a)'}",
        "",
        *_metric_lines(rep),
        "",
        *_error_lines(rep),
        *_turn_lines(rep, max_turns),
    ]
    for name, ids in (("unmatched ours", rep.unmatched_predicted), ("unmatched annotated", rep.unmatched_reference)):
        if ids:
            L.append(f"{name}: {', '.join(ids[:10])}" + (f" ... (+{len(ids) - 10})" if len(ids) > 10 else ""))
    return "\n".join(L)


def _metric_lines(rep: CompareReport) -> list[str]:
    """The agreement metrics table, with the retrieval and information-seeking confusions under it."""
    L = [f"{'metric':<44}{'value':>10}", "-" * 54]
    rows = [
        ("tool choice agreement (None/Image/Text/Both)", _f(rep.tool_choice_agreement, True)),
        ("tool set Jaccard (mean)", _f(rep.tool_jaccard)),
        ("retrieval decision agreement", _f(rep.retrieval_agreement, True)),
        (f"hop count MAE, sub-questions (n={rep.hop_turns})", _f(rep.hop_mae)),
        ("hop count bias (ours - annotated)", "n/a" if rep.hop_bias is None else f"{rep.hop_bias:+.3f}"),
        ("hop count exact", _f(rep.hop_exact, True)),
        (f"sub-question similarity ({rep.similarity_method}, n={rep.subq_turns})", _f(rep.subq_similarity)),
    ]
    L += [f"{k:<44}{v:>10}" for k, v in rows]
    c = rep.retrieval_confusion
    if c:
        L.append(f"  retrieval confusion (annotation = truth): tp={c['tp']} fp={c['fp']} fn={c['fn']} tn={c['tn']}")
    if rep.seeking_confusion:
        L.append(
            "  information seeking, annotated -> ours: "
            + "; ".join(
                f"{r}: " + ", ".join(f"{p} {n}" for p, n in sorted(row.items()))
                for r, row in sorted(rep.seeking_confusion.items())
            )
        )
    return L


def _error_lines(rep: CompareReport) -> list[str]:
    """The error analysis over wrong answers: each error type's count, its base and share of the wrong ones."""
    L = [
        f"error analysis over wrong answers: {rep.n_wrong} wrong of {rep.n_judged} judged "
        f"({rep.n_matched - rep.n_judged} not judged)",
        f"{'error type':<20}{'count':>7}{'base':>7}{'share of wrong':>16}",
        "-" * 50,
    ]
    for e in ERROR_TYPES:
        share = rep.error_share_of_wrong[e]
        L.append(f"{e:<20}{rep.error_counts[e]:>7}{rep.error_base[e]:>7}{_f(share, True):>16}")
    L.append(
        f"{'any':<20}{rep.wrong_with_error:>7}{rep.n_wrong:>7}"
        f"{_f(rep.wrong_with_error / rep.n_wrong if rep.n_wrong else None, True):>16}"
    )
    L.append(
        f"(decoupling: mean similarity < {rep.thresholds['sim_threshold']}; object IoU < "
        f"{rep.thresholds['iou_threshold']}; definitions: as in this project after the paper's description)"
    )
    return L


def _turn_lines(rep: CompareReport, max_turns: int) -> list[str]:
    """One line per compared turn (the first `max_turns`), after a blank line; none when no turn was compared."""
    if not rep.turns:
        return []
    L = ["", f"{'id':<20}{'ok':>4}  {'seek ours/ann':<14}{'need':>6}{'hops':>6}{'sim':>7}  errors", "-" * 80]
    for t in rep.turns[:max_turns]:
        ok = "-" if t.accuracy is None else "YN"[not t.accuracy]
        need = "".join("?" if x is None else "YN"[not x] for x in (t.need_pred, t.need_ref))
        L.append(
            f"{t.id[:19]:<20}{ok:>4}  {t.seeking_pred + '/' + t.seeking_ref:<14}{need[0] + '/' + need[1]:>6}"
            f"{f'{t.hops_pred}/{t.hops_ref}':>6}{_f(t.subq_similarity):>7}  {', '.join(t.errors) or '-'}"
        )
    if len(rep.turns) > max_turns:
        L.append(f"... {len(rep.turns) - max_turns} more (see --json)")
    return L


def no_annotations(run: str, reference: str | None, n_predicted: int) -> str:
    """Why there is nothing to compare with, and what compares two runs instead."""
    where = (
        f"{reference} holds no annotated trajectory"
        if reference
        else f"{run} holds no turn trace (a folder of runs?)"
        if not n_predicted
        else f"{run}: its traces carry no annotated trajectory (SuperGlasses rows' sub_questions; a CRAG-MM run has "
        "none)"
    )
    return (
        f"error: glasses_rag.superglasses.compare compares a run with annotated SuperGlasses trajectories, "
        f"and {where}. "
        f"To compare two runs on the same questions: python -m glasses_rag.frontends.diff RUN_A RUN_B"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m glasses_rag.superglasses.compare",
        description="Compare a run with annotated SuperGlasses trajectories "
        "(two runs: python -m glasses_rag.frontends.diff).",
    )
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--run", help="run folder of turn traces, e.g. traces/runs/<run_id>")
    src.add_argument("--predicted", help="logs already exported by `python -m glasses_rag.superglasses.logs export`")
    ap.add_argument(
        "--reference",
        help="annotated logs (JSON, JSON lines, text, or the queries parquet); default "
        "with --run: the annotations carried in the traces' labels",
    )
    ap.add_argument("--json", help="also write the full report (with per-question rows) here")
    ap.add_argument("--no-embed", action="store_true", help="skip MiniLM; sub-questions compared by token F1")
    ap.add_argument("--sim-threshold", type=float, default=0.5)
    ap.add_argument("--iou-threshold", type=float, default=0.5)
    ap.add_argument(
        "--tools",
        default=None,
        help="comma-separated tool vocabulary (default: Image Search, Text Search; '' for none)",
    )
    ap.add_argument("--max-turns", type=int, default=50, help="per-question rows to print")
    args = ap.parse_args(argv)
    problems: list[str] = []
    try:
        if args.run:
            traces = read_run(args.run, problems)
            pred = [to_superglasses(t) for t in traces]
            ref = import_logs(args.reference, problems) if args.reference else references_from_traces(traces, problems)
        else:
            if not args.reference:
                ap.error("--predicted needs --reference")
            pred = import_logs(args.predicted, problems)
            ref = import_logs(args.reference, problems)
    except FileNotFoundError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if not ref:
        print(no_annotations(args.run or args.predicted, args.reference, len(pred)), file=sys.stderr)
        return 2
    vocab = None if args.tools is None else {t.strip() for t in args.tools.split(",") if t.strip()}
    rep = compare(
        pred,
        ref,
        embedder=None if args.no_embed else "auto",
        sim_threshold=args.sim_threshold,
        iou_threshold=args.iou_threshold,
        tool_vocabulary=vocab,
    )
    print(format_report(rep, args.max_turns))
    for p in problems:
        print(f"note: {p}", file=sys.stderr)
    if args.json:
        data = rep.model_dump(mode="json")
        data["problems"] = problems
        write_json_atomic(Path(args.json), json.dumps(data, indent=2, ensure_ascii=False) + "\n")
        print(f"report: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
