"""The viewer's run header: the run's fields (run.json, else its first trace) and its benchmark's metrics section.
A benchmark's section is one entry of `METRICS_SECTIONS`: its report file, the template that shows it and the
function that gives that template its data."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from glasses_rag.frontends import viewer_parts as vp
from traces.schema import TurnTrace

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
SG_KEYS = ("n", "correct", "missing", "accuracy")


def _notes(report: dict[str, Any]) -> list[Any]:
    notes = report.get("notes")
    return notes if isinstance(notes, list) else []


def _slices(report: dict[str, Any]) -> list[tuple[Any, Any, Any]]:
    slices = report.get("slices")
    return [
        (dim, value, m)
        for dim, vals in (slices.items() if isinstance(slices, dict) else [])
        if isinstance(vals, dict)
        for value, m in vals.items()
    ]


def crag_mm_metrics(report: dict[str, Any]) -> dict[str, Any] | None:
    """report.json's metrics table: overall and egocentric (a `*` where a turn counts as correct and missing at
    once), the reason for numbers outside [0, 1], the slices and the notes."""
    found = [("overall", report.get("overall")), ("egocentric", report.get("egocentric"))]
    sections = [(n, m, bool(vp.both(m))) for n, m in found if isinstance(m, dict) and m]
    if not sections:
        return {"sections": []}  # nothing to show (no table, as before)
    return {
        "columns": METRIC_KEYS,
        "titles": METRIC_TITLES,
        "sections": sections,
        "explain": vp.metrics_explanation(report),
        "slices": [(d, v, m) for d, v, m in _slices(report) if isinstance(m, dict)],
        "notes": _notes(report),
    }


def superglasses_metrics(report: dict[str, Any]) -> dict[str, Any] | None:
    """superglasses_report.json: accuracy overall and by slice (the paper's tables), the judge, the notes."""
    return {
        "columns": SG_KEYS,
        "overall": report.get("overall"),
        "judge": report.get("judge"),
        "judge_note": report.get("judge_note"),
        "unscored": report.get("unscored"),
        "slices": _slices(report),
        "notes": _notes(report),
    }


@dataclass(frozen=True)
class MetricsSection:
    report: str  # the report file in the run folder
    template: str
    data: Callable[[dict[str, Any]], dict[str, Any] | None]


METRICS_SECTIONS = {
    "crag-mm": MetricsSection("report.json", "viewer_metrics_crag_mm.html.j2", crag_mm_metrics),
    "superglasses": MetricsSection(
        "superglasses_report.json", "viewer_metrics_superglasses.html.j2", superglasses_metrics
    ),
}


def benchmark_of(run: dict[str, Any], reports: dict[str, Any]) -> str:
    """The run's benchmark as the header shows it: SuperGlasses when run.json says so or its report is there."""
    if reports.get("superglasses_report.json") is not None or run.get("benchmark") == "superglasses":
        return "superglasses"
    return "crag-mm"


def run_fields(run_dir: Path, run: dict[str, Any], traces: list[TurnTrace], sessions: int) -> list[tuple[str, Any]]:
    """The run's name first, then what defines it (run.json's values, else its first trace's)."""
    first = traces[0] if traces else None
    budget = f"{run['budget_s']} s/turn" if "budget_s" in run else (f"{first.budget_s:g} s/turn" if first else None)
    turns = f"{len(traces)} trace(s) in {sessions} conversation(s)"
    if "turns" in run and run["turns"] != len(traces):
        turns += f"; run.json says {run['turns']}"
    return [
        ("run", run.get("run_id") or (first.run_id if first else run_dir.name)),
        ("benchmark", run.get("benchmark")),
        ("task", run.get("task", first.task if first else None)),
        ("policy", run.get("policy", first.policy if first else None)),
        ("search", run.get("search", first.search_backend if first else None)),
        ("judge", run.get("judge")),
        ("budget", budget),
        ("max steps", run.get("max_steps", first.max_steps if first else None)),
        ("tools", ", ".join(map(str, run["tools"])) if isinstance(run.get("tools"), list) else None),
        ("data", run.get("data")),
        ("turns", turns),
        ("resumed turns", run.get("resumed_turns") or None),
        ("failed conversations", run.get("failed_conversations") or None),
        ("seconds", run.get("seconds")),
    ]


def header(
    run_dir: Path,
    run: dict[str, Any],
    reports: dict[str, Any],
    traces: list[TurnTrace],
    sessions: int,
    problems: list[str],
    skipped: list[tuple[str, str]],
) -> dict[str, Any]:
    fields = run_fields(run_dir, run, traces, sessions)
    section = METRICS_SECTIONS[benchmark_of(run, reports)]
    report = reports.get(section.report)
    return {
        "name": fields[0][1],
        "fields": [(k, v) for k, v in fields if v is not None and v != ""],
        "metrics_template": section.template,
        "metrics": section.data(report) if isinstance(report, dict) else None,
        "problems": problems,
        "skipped": skipped,
    }
