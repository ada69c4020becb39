"""Resumable runs: an interrupted `python -m graph.run` resumed with the same --run-id ends exactly like an
uninterrupted run (answers and report), and finished turns are not redone."""

from __future__ import annotations

import json
import shutil

import pytest

from glasses_rag.frontends.run import main
from graph import agent as agent_mod

BASE = ["--task", "3", "--limit", "3", "--no-progress", "--budget", "30"]


@pytest.fixture(scope="module")
def warm():
    # Model loading must not eat a timed turn's budget differently in different runs (a cold first turn
    # can run out of time and answer "I don't know" where a warm one answers): load once, up front.
    from glasses_rag.models.text_embedder import get_text_embedder

    get_text_embedder().embed(["warm up"])


def answers(run_dir):
    out = {}
    for p in sorted(run_dir.glob("*__*.json")):
        t = json.loads(p.read_text())
        out[p.name] = (t["interaction_id"], t["answer"], t["entity"], t["score"], t["abstained"])
    return out


def report(run_dir):
    return json.loads((run_dir / "report.json").read_text()), (run_dir / "report.txt").read_text()


def run_json(run_dir):
    return json.loads((run_dir / "run.json").read_text())


@pytest.fixture(scope="module")
def reference(warm, tmp_path_factory):
    out = tmp_path_factory.mktemp("runs")
    assert main([*BASE, "--run-id", "full", "--out", str(out)]) == 0
    d = out / "full"
    assert len(answers(d)) == 9 and run_json(d)["resumed_turns"] == 0
    return d


def test_interrupted_run_resumes_to_the_same_result(reference, tmp_path, monkeypatch):
    real = agent_mod.Agent.run_turn
    done = {"n": 0}

    def interrupting(self, inp):
        if done["n"] >= 4:
            raise KeyboardInterrupt  # Ctrl-C after four finished turns
        done["n"] += 1
        return real(self, inp)

    monkeypatch.setattr(agent_mod.Agent, "run_turn", interrupting)
    assert main([*BASE, "--run-id", "r", "--out", str(tmp_path)]) == 130  # one line and the resume command
    d = tmp_path / "r"
    first = sorted(d.glob("*__*.json"))
    assert len(first) == 4 and not (d / "report.json").exists()
    assert not list(d.glob(".*.tmp"))
    mtimes = {p.name: p.stat().st_mtime_ns for p in first}

    monkeypatch.setattr(agent_mod.Agent, "run_turn", real)
    calls = {"n": 0}

    def counting(self, inp):
        calls["n"] += 1
        return real(self, inp)

    monkeypatch.setattr(agent_mod.Agent, "run_turn", counting)
    assert main([*BASE, "--run-id", "r", "--out", str(tmp_path)]) == 0
    assert calls["n"] == 9 - 4, "finished turns were redone"
    assert run_json(d)["resumed_turns"] == 4
    assert {p.name: p.stat().st_mtime_ns for p in first} == mtimes, "a finished trace was rewritten"
    assert answers(d) == answers(reference)
    assert report(d) == report(reference)


def test_missing_and_damaged_traces_are_redone_the_rest_kept(reference, tmp_path):
    d = tmp_path / "copy"
    shutil.copytree(reference, d)
    for f in ("report.json", "report.txt", "run.json", "truthfulness_by_slice.png"):
        (d / f).unlink(missing_ok=True)
    files = sorted(d.glob("*__*.json"))
    removed, damaged = files[2], files[5]
    removed.unlink()
    damaged.write_text(damaged.read_text()[:200])  # half a JSON file, as a crash without atomic writes would leave
    foreign = files[7]
    t = json.loads(foreign.read_text())
    t["interaction_id"] = "some-other-turn"  # a trace that belongs to another dataset is not trusted either
    foreign.write_text(json.dumps(t))
    kept = {p.name: p.stat().st_mtime_ns for p in files if p not in (removed, damaged, foreign)}

    assert main([*BASE, "--run-id", "copy", "--out", str(tmp_path)]) == 0
    assert run_json(d)["resumed_turns"] == 6
    assert {p.name: p.stat().st_mtime_ns for p in files if p.name in kept} == kept
    assert answers(d) == answers(reference)
    assert report(d) == report(reference)


def test_killed_process_leaves_only_whole_traces_and_resumes(reference, tmp_path):
    """SIGKILL a real `python -m graph.run` after its first trace appears; resume in-process."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    d = tmp_path / "killed"
    proc = subprocess.Popen(
        [sys.executable, "-m", "graph.run", *BASE, "--run-id", "killed", "--out", str(tmp_path)],
        cwd=root,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not list(d.glob("*__*.json")) and proc.poll() is None:
            time.sleep(0.05)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
    written = sorted(d.glob("*__*.json"))
    if proc.returncode == 0:
        pytest.skip("the run finished before it could be killed")
    assert 1 <= len(written) < 9
    for p in written:
        json.loads(p.read_text())  # atomic writes: no half file
    kept = {p.name: p.stat().st_mtime_ns for p in written}
    assert main([*BASE, "--run-id", "killed", "--out", str(tmp_path)]) == 0
    assert run_json(d)["resumed_turns"] == len(written), (run_json(d)["resumed_turns"], len(written))
    assert {p.name: p.stat().st_mtime_ns for p in written} == kept
    for p in d.glob(".*.tmp"):
        pytest.fail(f"temporary file left behind: {p}")
    assert answers(d) == answers(reference)
    assert report(d) == report(reference)


def test_ctrl_c_stops_after_the_current_turn_and_resumes(reference, tmp_path):
    """SIGINT (Ctrl-C) a real run after its first trace: it must stop within about one turn, not finish the queue."""
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    d = tmp_path / "int"
    proc = subprocess.Popen(
        [sys.executable, "-m", "graph.run", *BASE, "--run-id", "int", "--out", str(tmp_path)],
        cwd=root,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        # a suite started as a background job has SIGINT ignored, and an ignored signal stays so across exec
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not list(d.glob("*__*.json")) and proc.poll() is None:
            time.sleep(0.05)
        if proc.poll() is not None:
            pytest.skip("the run finished before it could be interrupted")
        at_signal = len(list(d.glob("*__*.json")))
        proc.send_signal(signal.SIGINT)
        t0 = time.monotonic()
        proc.wait(40)
        stopped_after = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    written = sorted(d.glob("*__*.json"))
    assert proc.returncode != 0 and not (d / "report.json").exists(), (
        f"rc {proc.returncode}, {len(written)} traces (at the signal: {at_signal}), report written: "
        f"{(d / 'report.json').exists()}"
    )
    # the turn running at the signal (and, at most, one that was already finishing) is written; nothing after
    assert len(written) <= at_signal + 2, f"Ctrl-C did not stop the run: {len(written)} of 9 turns written"
    assert stopped_after < 15, f"stopped {stopped_after:.1f} s after the signal"
    kept = {p.name: p.stat().st_mtime_ns for p in written}
    assert main([*BASE, "--run-id", "int", "--out", str(tmp_path)]) == 0
    assert run_json(d)["resumed_turns"] == len(written), (run_json(d)["resumed_turns"], len(written))
    assert {p.name: p.stat().st_mtime_ns for p in written} == kept
    assert answers(d) == answers(reference)
    assert report(d) == report(reference)
