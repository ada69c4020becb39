"""The figures, intervals, table and JSON of `benchmarks.distill`: per model the turn counts (right, wrong, "I don't
know", the turns whose ground truth is "I don't know" apart), the official rates, and paired bootstrap 95% intervals
of each student minus the base and minus the SFT student (benchmarks/ablate.py's bootstrap, questions resampled)."""

from __future__ import annotations

from typing import Any

import numpy as np

from benchmarks.ablate import paired_bootstrap

METRICS = (
    "truthfulness",
    "hallucination_rate",
    "accuracy",
    "missing_rate",
    "decisions_parsed",
    "decisions",
    "seconds_per_decision",
)
COUNTS = ("n", "right", "wrong", "idk", "idk_ground_truth", "idk_ground_truth_abstained")


def turn_flags(report: Any, task: int) -> dict[str, tuple[bool, bool]]:
    """(is_correct, is_miss) per evaluated turn, after the multi-turn early stop where it applies (task 3)."""
    return {
        t.interaction_id or f"{t.session_id}#{t.turn_index}": t.flags(after_early_stop=task == 3)[:2]
        for t in report.turns
    }


def counts(report: Any, task: int) -> dict[str, int]:
    """n; right (judged correct, not "I don't know"); wrong; idk (every "I don't know"); the turns whose ground
    truth is "I don't know", and how many of them the model answered so (correct and missing at once)."""
    flags = turn_flags(report, task)
    idk_truth = [t for t in report.turns if t.ground_truth.strip().lower() == "i don't know"]
    return {
        "n": len(flags),
        "right": sum(c and not m for c, m in flags.values()),
        "wrong": sum(not c and not m for c, m in flags.values()),
        "idk": sum(m for _, m in flags.values()),
        "idk_ground_truth": len(idk_truth),
        "idk_ground_truth_abstained": sum(all(flags.get(t.interaction_id or "", (False, False))) for t in idk_truth),
    }


def values(flags: dict[str, tuple[bool, bool]]) -> dict[str, float]:
    """Each turn's share of truthfulness (2 correct + missing - 1: their mean is the official truthfulness)."""
    return {k: 2.0 * c + m - 1.0 for k, (c, m) in flags.items()}


def change(base: dict[str, tuple[bool, bool]], other: dict[str, tuple[bool, bool]]) -> dict[str, Any]:
    """`other` minus `base` in truthfulness, paired by turn: the mean difference and its bootstrap 95% interval."""
    a, b = values(base), values(other)
    keys = sorted(set(a) & set(b))
    c = paired_bootstrap(np.array([b[k] - a[k] for k in keys]))
    return {"n": c.n, "delta": c.delta, "truthfulness": [c.low, c.high]}


def intervals(flags: dict[str, dict[str, tuple[bool, bool]]], students: list[str]) -> dict[str, dict[str, Any]]:
    """For each student: its change against the base and against the SFT student (when both were evaluated)."""
    out: dict[str, dict[str, Any]] = {}
    for s in students:
        out[s] = {"vs_base": change(flags["base"], flags[s])}
        if s != "sft" and "sft" in flags:
            out[s]["vs_sft"] = change(flags["sft"], flags[s])
    return out


def _ci(c: dict[str, Any] | None) -> str:
    if c is None:
        return "-"
    low, high = c["truthfulness"]
    return f"{c['delta']:+.3f} [{low:+.3f}, {high:+.3f}]"


def figures(report: Any, traces: list[Any], task: int, cpu: float) -> dict[str, Any]:
    """One model's figures: the report's metrics, the turn counts, the model loop's."""
    from traces.model_loop import LoopStats

    loop = LoopStats()
    decide_ms: list[float] = []
    for t in traces:
        loop.add(t)
        decide_ms += [c.latency_ms for c in t.model_calls() if c.purpose == "decide" and not c.cancelled]
    m = report.overall
    return {
        "truthfulness": m.truthfulness,
        "hallucination_rate": m.hallucination_rate,
        "accuracy": m.accuracy,
        "missing_rate": m.missing_rate,
        "decisions_parsed": loop.decisions_parsed,
        "decisions": loop.decisions,
        "decisions_cancelled": loop.decisions_cancelled,
        "seconds_per_decision": sum(decide_ms) / 1000 / max(1, len(decide_ms)),
        "cpu_seconds_per_decision": cpu / max(1, loop.decisions),
        "tool_calls_per_turn": loop.tool_calls / max(1, loop.turns),
        **counts(report, task),
    }


ROWS = [
    ("n", "n", "{}"),
    ("right", "right", "{}"),
    ("wrong", "wrong", "{}"),
    ('"I don\'t know"', "idk", "{}"),
    ("  of which IDK truth", None, ""),
    ("truthfulness", "truthfulness", "{:+.3f}"),
    ("hallucination", "hallucination_rate", "{:.1%}"),
    ("accuracy", "accuracy", "{:.1%}"),
    ("parse (timed out)", "parse", ""),
    ("tool calls / turn", "tool_calls_per_turn", "{:.2f}"),
    ("s / decision", "seconds_per_decision", "{:.1f}"),
    ("CPU s / decision", "cpu_seconds_per_decision", "{:.1f}"),
]


def _cell(f: dict[str, Any], key: str | None, fmt: str) -> str:
    if key is None:
        return f"{f['idk_ground_truth_abstained']}/{f['idk_ground_truth']}"
    if key == "parse":
        return f"{f['decisions_parsed']}/{f['decisions']} ({f['decisions_cancelled']})"
    return fmt.format(f[key]) if key in f else "-"


def table(result: dict[str, Any], models: list[str]) -> str:
    """The printed table: one column per model (base first), the intervals under it."""
    width = max(12, *(len(m) + 2 for m in models))
    lines = [f"{'':26}" + "".join(f"{m:>{width}}" for m in models)]
    for title, key, fmt in ROWS:
        lines.append(f"{title:26}" + "".join(f"{_cell(result[m], key, fmt):>{width}}" for m in models))
    if any("calibration" in result[m] for m in models):
        cells = [
            f"{result[m]['calibration']['abstain_below']:.3f}" if "calibration" in result[m] else "-" for m in models
        ]
        lines.append(f"{'abstain below':26}" + "".join(f"{c:>{width}}" for c in cells))
    minutes = [f"{result['train'].get(m, {}).get('seconds', 0) / 60:.1f}" if m != "base" else "" for m in models]
    lines.append(f"{'training minutes':26}" + "".join(f"{c:>{width}}" for c in minutes))
    lines.append("")
    lines.append("truthfulness change, paired bootstrap 95% interval over the same turns:")
    for m in models[1:]:
        ci = result["intervals"].get(m, {})
        lines.append(f"  {m:10} minus base {_ci(ci.get('vs_base')):32} minus sft {_ci(ci.get('vs_sft'))}")
    return "\n".join(lines)


def seeds_table(per_seed: dict[str, list[float]]) -> str:
    """Truthfulness of each student over the seeds: mean and spread (sample standard deviation)."""
    lines = ["truthfulness over seeds (mean, standard deviation, values):"]
    for m, vals in per_seed.items():
        sd = float(np.std(vals, ddof=1)) if len(vals) > 1 else 0.0
        lines.append(f"  {m:10} {np.mean(vals):+.3f} ± {sd:.3f}  " + ", ".join(f"{v:+.3f}" for v in vals))
    return "\n".join(lines)


def json_result(result: dict[str, Any], models: list[str], default: str) -> dict[str, Any]:
    """The JSON: `base`, `tuned` (the default student), `train`, one entry per student, `ci` (truthfulness of the
    default student minus the base), `intervals` (every student against the base and the SFT student)."""
    keep = (*METRICS, *COUNTS, "calibration", "without_threshold", "tool_calls_per_turn")

    def entry(m: str) -> dict[str, Any]:
        return {k: result[m][k] for k in keep if k in result[m]}

    out: dict[str, Any] = {m: entry(m) for m in models}
    out["tuned"] = entry(default)
    out["train"] = result["train"]
    out["ci"] = {"truthfulness": result["intervals"][default]["vs_base"]["truthfulness"]}
    out["intervals"] = result["intervals"]
    for k in ("seeds", "load", "road_minutes", "default_student", "failed"):
        if k in result:
            out[k] = result[k]
    return out


__all__ = ["COUNTS", "METRICS", "counts", "intervals", "json_result", "seeds_table", "table", "turn_flags"]
