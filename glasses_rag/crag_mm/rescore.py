"""Rescore a finished run folder with another judge, scoring mode or truncation, without rerunning the agent:
`python -m glasses_rag.crag_mm.rescore traces/runs/<run_id> --judge openai:<url>#<model>`."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from glasses_rag.crag_mm.evaluate import EvalReport, evaluate, format_table, iter_records_from_traces, write_report
from glasses_rag.crag_mm.scoring import DEFAULT_MODE, MODES, Judge, ScoringMode, Truncator, make_judge, make_truncator
from traces.store import TraceStore


def rescore_run(
    run_dir: str | Path, judge: Judge | None, truncator: Truncator | None = None, mode: str | ScoringMode = DEFAULT_MODE
) -> EvalReport:
    """Score a finished run folder's traces again (another judge, mode or truncation) without rerunning the agent.
    Every turn goes to the judge again (the traces' own verdicts are ignored); the traces are not changed."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"run folder not found: {run_dir}")
    run_dir = run_dir.resolve()  # "." or "runs/x/.." name their folder only once resolved
    store = TraceStore(run_dir.parent, run_dir.name)
    return evaluate(iter_records_from_traces(store), judge=judge, truncator=truncator, rescore=True, mode=mode)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m glasses_rag.crag_mm.rescore",
        description="Rescore a finished run folder with another judge, scoring mode or "
        "truncation, without rerunning the agent; writes report.json/.txt.",
    )
    p.add_argument("run_dir", type=Path, help="a run folder, traces/runs/<run_id>")
    p.add_argument(
        "--judge",
        default="rule",
        help="'rule' (approximate, offline), 'none' (exact match only) or "
        "'openai:<base_url>#<model>' (the official prompt of the mode)",
    )
    p.add_argument("--judge-api-key-env", default="OPENAI_API_KEY")
    p.add_argument("--scoring-mode", choices=sorted(MODES), default=DEFAULT_MODE)
    p.add_argument("--tokenizer", default=None, help="as in graph.run (default: the official Llama 3.2 tokenizer)")
    p.add_argument(
        "--out", type=Path, default=None, help="where to write the report (default: <run_dir>/rescored-<mode>-<judge>)"
    )
    p.add_argument("--no-plot", action="store_true")
    args = p.parse_args(argv)
    try:
        judge = make_judge(args.judge, mode=args.scoring_mode, api_key=os.environ.get(args.judge_api_key_env))
        report = rescore_run(args.run_dir, judge, make_truncator(args.tokenizer), args.scoring_mode)
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    slug = "".join(c if c.isalnum() or c in "-." else "-" for c in args.judge)[:40]
    out = args.out or args.run_dir / f"rescored-{args.scoring_mode}-{slug}"
    files = write_report(report, out, plot=not args.no_plot)
    print(format_table(report))
    print("report: " + ", ".join(str(f) for f in files.values()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
