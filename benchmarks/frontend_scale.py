"""The trace viewer and the run diff on the audit's run folders (issue 40, item 6): each command runs in a process
of its own, and its CPU time, wall time and peak resident memory are printed (measured on this machine: say its
load beside the figures).

    python -m benchmarks.frontend_scale                         # every case below, in a temporary folder
    python -m benchmarks.frontend_scale --only viewer-10k --keep /tmp/scale

Cases: `viewer-10k` (10,000 one-turn traces), `viewer-repeated-pieces` (stored requests that repeat one 20 KB piece
2,000 times), `viewer-sparse` and `diff-sparse` (a 2 GB sparse trace file beside a real one), `diff-100k` (two runs
of 100,000 one-turn traces). The targets: each under 30 s and 1.5 GB.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from glasses_rag.core.sent import piece_hash
from traces.requests import write_pieces
from traces.schema import FinalEvent, ImageInfo, PlanEvent, TurnTrace
from traces.store import dump_trace

PIECE_CHARS = 20_000
REPEATS = 2_000


def one_turn(session: str, question: str = "what is this?", calls: list | None = None, **kw: Any) -> TurnTrace:
    """A one-turn trace answered right ("a rocket"), with `calls` as its model calls; `kw` overrides fields."""
    steps: list = [FinalEvent(index=1, decision="answer", answer="a rocket")]
    if calls:
        steps.insert(0, PlanEvent(index=0, decision="answer", model_calls=calls))
    fields: dict[str, Any] = dict(
        run_id="scale",
        task=1,
        session_id=session,
        interaction_id=f"{session}-0",
        turn_index=0,
        question=question,
        image=ImageInfo(),
        policy="scripted",
        search_backend="none",
        budget_s=10,
        max_steps=8,
        steps=steps,
        answer="a rocket",
        abstained=False,
        ended_by="answer",
        latency_ms=12.0,
        ground_truth="a rocket",
        score="correct",
        judge="rule",
    )
    return TurnTrace(**{**fields, **kw})


def write_one_turn_run(folder: Path, n: int, outcome: str = "correct") -> Path:
    """`n` one-turn traces, written as one template with its ids changed (fast enough for 100k files)."""
    folder.mkdir(parents=True, exist_ok=True)
    template = json.loads(dump_trace(one_turn("SESSION")))
    template["score"] = outcome
    for i in range(n):
        sid = f"s{i:06d}"
        template["session_id"], template["interaction_id"] = sid, f"{sid}-0"
        (folder / f"{sid}__00.json").write_text(json.dumps(template), encoding="utf-8")
    (folder / "run.json").write_text(json.dumps({"run_id": folder.name, "task": 1}), encoding="utf-8")
    return folder


def write_repeated_pieces_run(folder: Path, traces: int = 7, calls_per_trace: int = 3) -> Path:
    """Stored requests whose every message is the same 20 KB piece, 2,000 times (a run folder of ~260 KB)."""
    folder.mkdir(parents=True, exist_ok=True)
    piece = {"role": "user", "content": "x" * PIECE_CHARS}
    key = piece_hash(piece)
    record = {"kind": "request", "messages": [key] * REPEATS, "tools": None, "response_schema": None}
    request_id = piece_hash(record)
    write_pieces(folder, {key: piece, request_id: record})
    from glasses_rag.core.types import ModelCall

    for t in range(traces):
        calls = [ModelCall(purpose="decide", request_id=request_id) for _ in range(calls_per_trace)]
        (folder / f"r{t}__00.json").write_text(dump_trace(one_turn(f"r{t}", calls=calls)), encoding="utf-8")
    return folder


def write_sparse_run(folder: Path, size: int = 2 << 30) -> Path:
    """A real trace and a 2 GB sparse file named like one (nothing on disk, all of it on read)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "real__00.json").write_text(dump_trace(one_turn("real")), encoding="utf-8")
    with open(folder / "huge__00.json", "wb") as f:
        f.truncate(size)
    return folder


def measure(label: str, cmd: list[str]) -> dict:
    """Runs `cmd`; its CPU seconds (user + system), wall seconds, peak RSS and exit status."""
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode("utf-8", "replace") if proc.stderr else ""
    row = {
        "case": label,
        "exit": proc.returncode,
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 1),
        "wall_s": round(time.monotonic() - t0, 1),
        "peak_rss_mb": round(usage.ru_maxrss / 1024),
        "stderr": err.strip().splitlines()[-1:] if proc.returncode else [],
    }
    print(json.dumps(row), flush=True)
    return row


def cases(root: Path, diff_traces: int, traces: int) -> dict[str, Callable[[], list[str]]]:
    py = [sys.executable, "-m"]
    viewer, diff = [*py, "glasses_rag.frontends.viewer"], [*py, "glasses_rag.frontends.diff"]

    def diff_100k() -> list[str]:
        a = write_one_turn_run(root / "diff-a", diff_traces)
        b = write_one_turn_run(root / "diff-b", diff_traces, outcome="incorrect")
        return [*diff, str(a), str(b), "--max-rows", "5", "--html", str(root / "diff.html")]

    return {
        "viewer-10k": lambda: [*viewer, str(write_one_turn_run(root / "ten-k", traces)), "--no-images"],
        "viewer-repeated-pieces": lambda: [*viewer, str(write_repeated_pieces_run(root / "pieces")), "--no-images"],
        "viewer-sparse": lambda: [*viewer, str(write_sparse_run(root / "sparse")), "--no-images"],
        "diff-sparse": lambda: [*diff, str(root / "sparse"), str(write_one_turn_run(root / "small", 3))],
        "diff-100k": diff_100k,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.frontend_scale", description=__doc__.split("\n\n")[0])
    p.add_argument("--only", action="append", default=[], help="a case to run (repeatable; default: all)")
    p.add_argument("--keep", type=Path, default=None, help="build the run folders here and keep them")
    p.add_argument("--traces", type=int, default=10_000, help="one-turn traces of viewer-10k")
    p.add_argument("--diff-traces", type=int, default=100_000, help="one-turn traces per run of diff-100k")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        print(f"load average before: {Path('/proc/loadavg').read_text().strip()} (a shared machine: CPU time counts)")
        for label, make in cases(root, args.diff_traces, args.traces).items():
            if not args.only or label in args.only:
                measure(label, make())
        print(f"load average after: {Path('/proc/loadavg').read_text().strip()}")
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"this script's own peak RSS (building the folders): {peak:.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
