"""How a run's turns are scored and reported: CRAG-MM's official scoring, or SuperGlasses' judge and report."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any


class Scoring:
    """How the run's turns are scored: the benchmark's judge, the 75-token truncation, the official mode."""

    def __init__(self, args: argparse.Namespace):
        from glasses_rag.crag_mm.scoring import make_judge, make_truncator
        from glasses_rag.superglasses import evaluate as sge

        self.superglasses = args.benchmark == "superglasses"
        self.mode = args.scoring_mode
        api_key = os.environ.get(args.judge_api_key_env)
        self.judge = (
            sge.make_superglasses_judge(args.judge, api_key=api_key)
            if self.superglasses
            else make_judge(args.judge, mode=args.scoring_mode, api_key=api_key)
        )
        self.truncator = make_truncator(args.tokenizer)
        self.judge_name = getattr(self.judge, "name", "exact-match only")

    def describe(self) -> str:
        if self.superglasses:
            return f"{self.judge_name}; scoring: SuperGlasses accuracy (whole answer judged)"
        return f"{self.judge_name}; scoring: {self.mode}; truncation: {self.truncator.name}"

    def __call__(self, trace: Any) -> Any:
        from glasses_rag.crag_mm.scoring import score_trace
        from glasses_rag.superglasses import evaluate as sge

        if not self.superglasses:
            return score_trace(trace, judge=self.judge, truncator=self.truncator, mode=self.mode)
        s = sge.score_superglasses(trace.question, trace.answer, trace.ground_truth, self.judge)
        trace.score, trace.judge = s.result, s.judge
        return trace


SCORING_OPTIONS = ("benchmark", "scoring_mode", "judge", "judge_api_key_env", "tokenizer")


def worker_scoring(options: dict[str, Any]) -> tuple[Scoring, Any]:
    """Scoring as each worker process builds it (glasses_rag.harness.workers.WorkerSpec.scoring): the scorer, and the
    truncation later turns see of an answer."""
    scoring = Scoring(argparse.Namespace(**options))
    return scoring, scoring.truncator.truncate


def write_reports(
    args: argparse.Namespace, scoring: Scoring, records: list[Any], store: Any
) -> tuple[Any, dict[str, Any], str]:
    """The CRAG-MM report (and, on SuperGlasses, its own sliced report and logs); returns what to print."""
    from glasses_rag.crag_mm.evaluate import evaluate, format_table, write_report

    report = evaluate(records, judge=scoring.judge, truncator=scoring.truncator, mode=args.scoring_mode)
    if not scoring.superglasses:
        files = write_report(report, store.dir, plot=False)  # the chart comes after the summary, not before
        return report, files, format_table(report)
    from glasses_rag.superglasses import evaluate as sge
    from glasses_rag.superglasses.logs import read_run

    # a SuperGlasses run writes its own report only (the CRAG-MM table would name metrics it is not scored by);
    # `report` is still returned for callers that tabulate any run alike (benchmarks.presets)
    sg_report, sg_logs = sge.evaluate_superglasses(read_run(store.dir), scoring.judge_name)
    files = sge.write_superglasses_report(sg_report, sg_logs, store.dir)
    return report, files, sge.format_superglasses(sg_report)


def plot_run(scoring: Scoring, report: Any, run_dir: Path) -> Path:
    """The run's chart: CRAG-MM truthfulness by slice, or SuperGlasses accuracy by slice."""
    if not scoring.superglasses:
        from glasses_rag.crag_mm.evaluate import plot_report

        return plot_report(report, run_dir / "truthfulness_by_slice.png")
    from glasses_rag.superglasses import evaluate as sge

    sg_report = sge.SuperGlassesReport.model_validate_json((run_dir / "superglasses_report.json").read_text("utf-8"))
    return sge.plot_superglasses(sg_report, run_dir / "superglasses_accuracy.png")
