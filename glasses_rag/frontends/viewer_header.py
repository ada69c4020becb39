"""The viewer's run header: the run's fields (run.json, else its first trace) and its benchmark's metrics section,
in the layout its Benchmark's ReportView names: 'eval-report' (report.json, CRAG-MM's EvalReport) or 'sliced' (a
report of its own: metrics overall and by slice, SuperGlasses')."""

from __future__ import annotations

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


def sliced_metrics(report: dict[str, Any], view: Any) -> dict[str, Any]:
    """A report in the 'sliced' layout (glasses_rag.evaluation.ReportView; SuperGlasses' superglasses_report.json):
    its metrics overall and by slice (a column per number of `overall`), the judge, the notes."""
    overall = report.get("overall")
    columns = tuple(k for k, v in overall.items() if isinstance(v, (int, float))) if isinstance(overall, dict) else ()
    return {
        "title": view.title,
        "columns": columns,
        "overall": overall,
        "judge": report.get("judge"),
        "judge_note": report.get("judge_note"),
        "unscored": report.get("unscored"),
        "slices": _slices(report),
        "notes": _notes(report),
    }


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
    report: dict[str, Any] | None,
    own: tuple[Any, dict[str, Any] | None] | None,
    traces: list[TurnTrace],
    sessions: int,
    problems: list[str],
    skipped: list[tuple[str, str]],
) -> dict[str, Any]:
    """The header's data: the run's fields and its benchmark's metrics section — report.json's (the 'eval-report'
    layout, CRAG-MM's) unless `own` gives the benchmark's own report (its ReportView, the report read or None)."""
    fields = run_fields(run_dir, run, traces, sessions)
    if own is not None:
        view, rep = own
        metrics = sliced_metrics(rep, view) if isinstance(rep, dict) else None
        template, missing = "viewer_metrics_sliced.html.j2", view.file
    else:
        metrics = crag_mm_metrics(report) if isinstance(report, dict) else None
        template, missing = "viewer_metrics_crag_mm.html.j2", "report.json"
    return {
        "name": fields[0][1],
        "fields": [(k, v) for k, v in fields if v is not None and v != ""],
        "metrics_template": template,
        "metrics": metrics,
        "missing": missing,
        "problems": problems,
        "skipped": skipped,
    }
