"""`--workers N`: conversations run in N worker processes give the same traces and report as one process; a
worker killed mid-run fails only its own conversations (exit status 1) and a rerun resumes to the same result;
Ctrl-C stops every process cleanly."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from glasses_rag.frontends.run import main

ROOT = Path(__file__).resolve().parents[1]
# multi-turn (answers feed later turns' history); a budget no busy machine runs out of, so answers do not depend
# on timing; 6 conversations, 19 turns
BASE = ["--task", "3", "--limit", "6", "--no-progress", "--no-plot", "--budget", "60"]
TIMING = {"timestamp", "latency_ms", "policy_ms", "run_id", "started_at"}


def content(value):
    """A trace without what differs between runs of the same data (timings, timestamps, run id); floats
    rounded (the embedder's per-text cache batches texts differently, so scores differ in the 8th digit)."""
    if isinstance(value, dict):
        return {k: content(v) for k, v in value.items() if k not in TIMING}
    if isinstance(value, list):
        return [content(v) for v in value]
    return round(value, 5) if isinstance(value, float) else value


def traces(run_dir: Path) -> dict[str, dict]:
    return {p.name: content(json.loads(p.read_text())) for p in sorted(run_dir.glob("*__*.json"))}


def report(run_dir: Path):
    return json.loads((run_dir / "report.json").read_text()), (run_dir / "report.txt").read_text()


def run_json(run_dir: Path) -> dict:
    return json.loads((run_dir / "run.json").read_text())


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    out = tmp_path_factory.mktemp("one")
    assert main([*BASE, "--run-id", "one", "--out", str(out)]) == 0
    d = out / "one"
    assert len(traces(d)) == run_json(d)["turns"] == 19 and run_json(d)["workers"] == 1
    return d


def test_two_workers_give_the_traces_and_report_of_one_process(reference, tmp_path):
    assert main([*BASE, "--workers", "2", "--run-id", "two", "--out", str(tmp_path)]) == 0
    d = tmp_path / "two"
    assert run_json(d)["workers"] == 2
    one, two = traces(reference), traces(d)
    assert one.keys() == two.keys()
    for name in one:
        assert two[name] == one[name], name  # answer, steps, tools, arguments, evidence, score ...
    assert report(d) == report(reference)
    assert run_json(d)["stats"] == run_json(reference)["stats"]


def _workers_of(proc: subprocess.Popen) -> list[psutil.Process]:
    kids = psutil.Process(proc.pid).children()
    return [k for k in kids if "spawn_main" in " ".join(k.cmdline())]


def _start(run_id: str, out: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "graph.run", *BASE, "--workers", "2", "--run-id", run_id, "--out", str(out)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        # as from a terminal: Ctrl-C's default disposition, whatever this test process inherited (an ignored
        # SIGINT stays ignored across exec, and the run would then never see the signal)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def _wait_for_first_trace(proc: subprocess.Popen, d: Path) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not list(d.glob("*__*.json")) and proc.poll() is None:
        time.sleep(0.02)


def test_a_killed_worker_fails_its_conversations_and_the_rerun_resumes(reference, tmp_path):
    d = tmp_path / "killed"
    proc = _start("killed", tmp_path)
    try:
        _wait_for_first_trace(proc, d)
        workers = _workers_of(proc)
        if proc.poll() is not None:
            pytest.skip("the run finished before a worker could be killed")
        assert len(workers) == 2, [w.cmdline() for w in workers]
        workers[0].send_signal(signal.SIGKILL)
        output, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    assert proc.returncode == 1, output  # failed conversations are reported, the others were kept
    assert "failed:" in output and "worker process" in output, output
    written = sorted(d.glob("*__*.json"))
    for p in written:
        json.loads(p.read_text())  # atomic writes: no half file
    stats = run_json(d)["stats"]
    assert 1 <= stats["failed_conversations"] < 6 and stats["conversations"] == 6
    assert (d / "report.json").exists()
    kept = {p.name: p.stat().st_mtime_ns for p in written}

    assert main([*BASE, "--workers", "2", "--run-id", "killed", "--out", str(tmp_path)]) == 0
    assert run_json(d)["resumed_turns"] == len(written)
    assert {p.name: p.stat().st_mtime_ns for p in written} == kept, "a finished trace was redone"
    assert traces(d) == traces(reference)
    assert report(d) == report(reference)


def test_ctrl_c_stops_every_process_and_the_run_resumes(reference, tmp_path):
    """SIGINT to the whole process group, as a terminal's Ctrl-C: workers finish their current turn, nothing
    else starts, no process is left behind, no report is written."""
    d = tmp_path / "int"
    proc = _start("int", tmp_path)
    try:
        _wait_for_first_trace(proc, d)
        workers = _workers_of(proc)
        # the run may end while the workers are listed (a loaded machine can hold this process for seconds): an
        # exited process not yet reaped is a zombie, and a signal to it would be no test of Ctrl-C
        if proc.poll() is not None or psutil.Process(proc.pid).status() == psutil.STATUS_ZOMBIE:
            pytest.skip("the run finished before it could be interrupted")
        os.killpg(proc.pid, signal.SIGINT)
        t0 = time.monotonic()
        output, _ = proc.communicate(timeout=60)
        stopped_after = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    assert proc.returncode != 0 and not (d / "report.json").exists(), output
    assert stopped_after < 15, f"stopped {stopped_after:.1f} s after the signal"
    assert not [w for w in workers if w.is_running() and w.status() != psutil.STATUS_ZOMBIE], (
        "a worker outlived the run"
    )
    written = sorted(d.glob("*__*.json"))
    assert len(written) < 19, "Ctrl-C did not stop the run"
    kept = {p.name: p.stat().st_mtime_ns for p in written}

    assert main([*BASE, "--run-id", "int", "--out", str(tmp_path)]) == 0  # one process resumes what two wrote
    assert run_json(d)["resumed_turns"] == len(written)
    assert {p.name: p.stat().st_mtime_ns for p in written} == kept
    assert traces(d) == traces(reference)
    assert report(d) == report(reference)
