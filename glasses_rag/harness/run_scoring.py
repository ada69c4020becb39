"""How a run's turns are scored and reported: its benchmark's scorer, report and chart (`Benchmark.scorer`,
`.report`, `.plot`)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from glasses_rag.evaluation import RunReport, RunScorer, ScoringOptions
from glasses_rag.harness.benchmarks import benchmark_of

# the options a worker process builds the same scorer from (picklable)
SCORING_OPTIONS = ("benchmark", "benchmark_module", "scoring_mode", "judge", "judge_api_key_env", "tokenizer")


def make_scoring(args: argparse.Namespace) -> RunScorer:
    """The run's scorer: its benchmark's, from the scoring options (judge, mode, tokenizer)."""
    opts = ScoringOptions(
        judge=args.judge,
        judge_api_key_env=args.judge_api_key_env,
        scoring_mode=args.scoring_mode,
        tokenizer=args.tokenizer,
    )
    return benchmark_of(args).scorer(opts)


def worker_scoring(options: dict[str, Any]) -> tuple[RunScorer, Any]:
    """Scoring as each worker process builds it (glasses_rag.harness.workers.WorkerSpec.scoring): the scorer, and
    what later turns see of an answer."""
    scoring = make_scoring(argparse.Namespace(**options))
    return scoring, scoring.history_answer


def write_reports(args: argparse.Namespace, scoring: RunScorer, records: list[Any], store: Any) -> RunReport:
    """The benchmark's report, written into the run folder: the report, its files and what to print."""
    return benchmark_of(args).report(records, scoring, store.dir)


def plot_run(args: argparse.Namespace, report: RunReport, run_dir: Path) -> Path | None:
    """The run's chart (CRAG-MM: truthfulness by slice; SuperGlasses: accuracy by slice), when its benchmark draws
    one."""
    spec = benchmark_of(args)
    return spec.plot(report, run_dir) if spec.plot is not None else None
