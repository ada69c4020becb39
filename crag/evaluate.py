"""Aggregate per-turn CRAG-MM scores the way the official `local_evaluation.py` does, plus slices.

Official aggregation (KDD Cup 2025 starter kit ``calculate_scores``), mirrored here:

* turns are ordered by (session_id, turn_index);
* multi-turn early stop: at the first turn i (i >= 1) where turns i-1 and i are both not correct
  (an "I don't know" is not correct either), every turn AFTER i counts as missing;
* counts (correct / missing / incorrect = hallucination) are taken after the early stop;
* ``truthfulness = (2*correct + missing)/total - 1`` over TURNS (micro average; = mean of +1/0/-1);
* ``multi_turn_score`` = mean over conversations of (mean(correct) - mean(hallucination)) inside each
  conversation (macro average; the official ``mean_multi_turn_conversation_score``).  For
  single-turn data both numbers coincide.
* the egocentric slice is, as officially, the turns whose conversation has no image URL (ego images).

Slices (domain, query_category, image_quality, dynamism, turn index, egocentric) are taken from the
turns AFTER the early stop of their whole conversation.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable

from pydantic import BaseModel, Field

from crag.scoring import (
    IdkRule,
    Judge,
    Truncator,
    TurnResult,
    WhitespaceApproxTruncator,
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
    raw_result: TurnResult  # before the multi-turn early stop
    result: TurnResult  # after it
    early_stopped: bool = False
    is_exact_match: bool = False
    truncated: bool = False
    judge: str | None = None
    reason: str = ""


class Metrics(BaseModel):
    total: int = 0
    correct: int = 0
    missing: int = 0
    incorrect: int = 0  # = hallucination
    exact_match: int = 0
    conversations: int = 0
    accuracy: float = 0.0
    missing_rate: float = 0.0
    hallucination_rate: float = 0.0
    truthfulness: float = 0.0  # turn-level, official truthfulness_score
    multi_turn_score: float = 0.0  # conversation-level, official mean_multi_turn_conversation_score


class EvalReport(BaseModel):
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
    egocentric = egocentric or {}
    out = []
    for t in traces:
        out.append(
            TurnRecord(
                session_id=t.session_id,
                turn_index=t.turn_index,
                answer=t.answer or "",
                ground_truth=t.ground_truth,
                query=getattr(t, "question", "") or "",
                interaction_id=getattr(t, "interaction_id", None),
                labels=dict(t.labels or {}),
                egocentric=egocentric.get(t.session_id, getattr(t, "egocentric", None)),
                result=t.score,
                judge=t.judge,
            )
        )
    return out


def apply_early_stop(results: list[TurnResult]) -> tuple[list[TurnResult], list[bool]]:
    """Official rule: after the first pair of consecutive not-correct turns (i-1, i), turns i+1.. are
    missing.  Returns the adjusted results and which turns were overridden."""
    out = list(results)
    stopped = [False] * len(out)
    for i in range(1, len(out)):
        if out[i - 1] != "correct" and out[i] != "correct":
            for j in range(i + 1, len(out)):
                out[j] = "missing"
                stopped[j] = True
            break
    return out, stopped


def score_records(
    records: Iterable[TurnRecord],
    judge: Judge | None = None,
    truncator: Truncator | None = None,
    idk_rule: IdkRule = "kddcup2025",
    rescore: bool = False,
) -> tuple[list[ScoredTurn], int]:
    """Score each record (unless it carries a result and ``rescore`` is False) and apply the
    multi-turn early stop per session.  Returns (scored turns, number skipped for lacking a GT)."""
    truncator = truncator or WhitespaceApproxTruncator()
    skipped = 0
    by_session: dict[str, list[ScoredTurn]] = defaultdict(list)
    for rec in records:
        if rec.ground_truth is None:
            skipped += 1
            continue
        if rec.result is not None and not rescore:
            st = ScoredTurn(
                session_id=rec.session_id, turn_index=rec.turn_index, interaction_id=rec.interaction_id,
                query=rec.query, answer=rec.answer, ground_truth=rec.ground_truth, labels=rec.labels,
                egocentric=rec.egocentric, raw_result=rec.result, result=rec.result, judge=rec.judge,
                is_exact_match=rec.answer.strip().lower() == rec.ground_truth.strip().lower(),
                reason="pre-scored",
            )
        else:
            s = score_turn(rec.query, rec.answer, rec.ground_truth, judge=judge, truncator=truncator, idk_rule=idk_rule)
            st = ScoredTurn(
                session_id=rec.session_id, turn_index=rec.turn_index, interaction_id=rec.interaction_id,
                query=rec.query, answer=s.response, ground_truth=rec.ground_truth, labels=rec.labels,
                egocentric=rec.egocentric, raw_result=s.result, result=s.result, judge=s.judge,
                is_exact_match=s.is_exact_match, truncated=s.truncated, reason=s.reason,
            )
        by_session[rec.session_id].append(st)
    out: list[ScoredTurn] = []
    for sid in sorted(by_session):
        turns = sorted(by_session[sid], key=lambda t: t.turn_index)
        adjusted, stopped = apply_early_stop([t.raw_result for t in turns])
        for t, r, s in zip(turns, adjusted, stopped):
            t.result = r
            t.early_stopped = s
            if s:
                t.is_exact_match = False
            out.append(t)
    return out, skipped


def compute_metrics(turns: list[ScoredTurn]) -> Metrics:
    """Metrics over already early-stopped turns (see module docstring)."""
    total = len(turns)
    if total == 0:
        return Metrics()
    correct = sum(t.result == "correct" for t in turns)
    missing = sum(t.result == "missing" for t in turns)
    incorrect = total - correct - missing
    by_session: dict[str, list[ScoredTurn]] = defaultdict(list)
    for t in turns:
        by_session[t.session_id].append(t)
    conv_scores = []
    for ts in by_session.values():
        n = len(ts)
        conv_scores.append(sum(t.result == "correct" for t in ts) / n - sum(t.result == "incorrect" for t in ts) / n)
    return Metrics(
        total=total,
        correct=correct,
        missing=missing,
        incorrect=incorrect,
        exact_match=sum(t.is_exact_match for t in turns),
        conversations=len(by_session),
        accuracy=correct / total,
        missing_rate=missing / total,
        hallucination_rate=incorrect / total,
        truthfulness=(2 * correct + missing) / total - 1,
        multi_turn_score=sum(conv_scores) / len(conv_scores),
    )


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
    idk_rule: IdkRule = "kddcup2025",
    rescore: bool = False,
    keep_turns: bool = True,
) -> EvalReport:
    truncator = truncator or WhitespaceApproxTruncator()
    turns, skipped = score_records(records, judge=judge, truncator=truncator, idk_rule=idk_rule, rescore=rescore)
    slices: dict[str, dict[str, Metrics]] = {}
    for key in SLICE_KEYS:
        groups: dict[str, list[ScoredTurn]] = defaultdict(list)
        for t in turns:
            groups[_slice_value(t, key)].append(t)
        slices[key] = {k: compute_metrics(v) for k, v in sorted(groups.items())}
    ego_turns = [t for t in turns if t.egocentric]
    judge_name = getattr(judge, "name", None) or "exact-match only (no judge)"
    notes = [
        "truthfulness = (2*correct + missing)/total - 1 over turns, after the multi-turn early stop",
        "multi_turn_score = mean over conversations of mean(correct) - mean(incorrect)",
    ]
    if "approx" in judge_name:
        notes.append("judge is the offline rule-judge (approximate): not the official LLM judge")
    if "approx" in truncator.name:
        notes.append("75-token truncation approximated without the official Llama tokenizer")
    return EvalReport(
        judge=judge_name,
        truncation=truncator.name,
        idk_rule=idk_rule,
        overall=compute_metrics(turns),
        egocentric=compute_metrics(ego_turns) if ego_turns else None,
        slices=slices,
        skipped_no_ground_truth=skipped,
        turns=turns if keep_turns else [],
        notes=notes,
    )


# --------------------------------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------------------------------

_COLS = ("n", "conv", "acc", "miss", "halluc", "truth", "mt-score")


def _row(label: str, m: Metrics, width: int) -> str:
    return (
        f"{label:<{width}} {m.total:>6d} {m.conversations:>6d} {m.accuracy:>7.3f} {m.missing_rate:>7.3f} "
        f"{m.hallucination_rate:>7.3f} {m.truthfulness:>7.3f} {m.multi_turn_score:>8.3f}"
    )


def format_table(report: EvalReport) -> str:
    labels = ["overall", "egocentric (official ego subset)"]
    for key, groups in report.slices.items():
        labels += [f"  {key}={v}" for v in groups]
    width = max(24, max(len(x) for x in labels) + 1)
    header = f"{'slice':<{width}} {'n':>6} {'conv':>6} {'acc':>7} {'miss':>7} {'halluc':>7} {'truth':>7} {'mt-score':>8}"
    lines = [
        f"CRAG-MM evaluation  judge: {report.judge}  truncation: {report.truncation}  idk: {report.idk_rule}",
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
        f"counts: correct={o.correct} missing={o.missing} incorrect={o.incorrect} exact={o.exact_match} "
        f"total={o.total} skipped(no ground truth)={report.skipped_no_ground_truth}",
    ]
    lines += [f"note: {n}" for n in report.notes]
    return "\n".join(lines) + "\n"


def plot_report(report: EvalReport, path: str | Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = [k for k in report.slices if report.slices[k]]
    n = max(1, len(keys))
    fig, axes = plt.subplots(n, 1, figsize=(8, 1.2 + sum(max(1, len(report.slices[k])) * 0.35 + 0.6 for k in keys)),
                             squeeze=False)
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
        ax.set_xlim(-1, 1)
        ax.set_title(f"truthfulness by {key}", fontsize=9)
        ax.invert_yaxis()
    fig.suptitle(f"CRAG-MM truthfulness (overall {report.overall.truthfulness:.3f}); judge: {report.judge}", fontsize=9)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def write_report(report: EvalReport, out_dir: str | Path) -> dict[str, Path]:
    """Write report.json, report.txt (fixed-width table) and truthfulness_by_slice.png."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {
        "json": out / "report.json",
        "table": out / "report.txt",
        "plot": out / "truthfulness_by_slice.png",
    }
    paths["json"].write_text(json.dumps(report.model_dump(mode="json"), indent=2) + "\n")
    paths["table"].write_text(format_table(report))
    plot_report(report, paths["plot"])
    return paths
