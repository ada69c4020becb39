"""A newcomer's first mistakes get one clear line, not a traceback, a page of usage or a "successful" run: a model
server that is not there, a server that fails every request, a bad or missing --task, a --data path that does
not exist (no Hub download hint for a local path)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from glasses_rag.frontends.run import main
from glasses_rag.testing.fake_model_server import FakeOpenAIServer
from traces.schema import TurnTrace

ROOT = Path(__file__).resolve().parents[1]
ENV = {
    **os.environ,
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "GLASSES_DEMO_DIR": str(ROOT / "data" / "demo"),
}


def _cli(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "graph.run", *argv], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=timeout
    )


def test_a_dead_model_server_is_one_line_at_warm_up_and_a_non_zero_exit(tmp_path):
    """The issue's command: 18 s, exit 0 and a full report before; now it stops at warm-up."""
    t0 = time.time()
    out = _cli(
        "--task",
        "1",
        "--limit",
        "2",
        "--model",
        "openai:http://127.0.0.1:9/v1#x",
        "--out",
        str(tmp_path),
        "--no-progress",
    )
    assert out.returncode != 0
    lines = (out.stdout + out.stderr).strip().splitlines()
    assert len(lines) == 1 and "cannot reach the model server http://127.0.0.1:9/v1" in lines[0], lines
    assert time.time() - t0 < 60  # no retries: one TCP connection attempt (the rest is Python starting up)
    assert not list(tmp_path.glob("*/*__*.json"))  # no turn ran


def test_a_run_whose_turns_cannot_reach_the_server_says_so_and_exits_non_zero(tmp_path, capsys, monkeypatch):
    """The server takes connections (warm-up passes) but answers 503 to every request: each turn's `error` says
    the server was unreachable, the console says so, and the exit status is not 0."""
    monkeypatch.setenv("GLASSES_DEMO_DIR", str(ROOT / "data" / "demo"))
    cfg = tmp_path / "model.json"
    with FakeOpenAIServer(responder=lambda body: ("status", 503, "overloaded")) as srv:
        cfg.write_text(
            json.dumps({"backend": "openai", "base_url": srv.base_url, "model": "fake-vlm", "max_retries": 0})
        )
        rc = main(
            [
                "--task",
                "1",
                "--limit",
                "2",
                "--model-config",
                str(cfg),
                "--out",
                str(tmp_path),
                "--run-id",
                "r",
                "--no-progress",
                "--no-plot",
            ]
        )
    err = capsys.readouterr().err
    assert rc == 1 and "2 of 2 turn(s) could not reach the model server" in err
    traces = [TurnTrace.model_validate_json(p.read_text()) for p in (tmp_path / "r").glob("*__*.json")]
    assert len(traces) == 2
    assert all(t.error and t.error.startswith("model server unreachable") and "503" in t.error for t in traces)
    assert json.loads((tmp_path / "r" / "run.json").read_text())["stats"]["turns_unreachable"] == 2


def test_a_server_gone_for_three_turns_in_a_row_stops_the_run(tmp_path, capsys, monkeypatch):
    """The server goes away after warm-up: three turns in a row cannot reach it, and no further turn is started
    (each would spend its retries for nothing); the finished turns are kept for the resume."""
    monkeypatch.setenv("GLASSES_DEMO_DIR", str(ROOT / "data" / "demo"))
    cfg = tmp_path / "model.json"
    with FakeOpenAIServer(responder=lambda body: ("status", 503, "overloaded")) as srv:
        cfg.write_text(
            json.dumps({"backend": "openai", "base_url": srv.base_url, "model": "fake-vlm", "max_retries": 0})
        )
        rc = main(
            [
                "--task",
                "1",
                "--limit",
                "8",
                "--model-config",
                str(cfg),
                "--out",
                str(tmp_path),
                "--run-id",
                "r",
                "--no-progress",
                "--no-plot",
            ]
        )
    err = capsys.readouterr().err
    assert rc == 1 and "stopped starting turns" in err and "3 of 3 turn(s)" in err
    assert len(list((tmp_path / "r").glob("*__*.json"))) == 3
    assert json.loads((tmp_path / "r" / "run.json").read_text())["stats"]["stopped_unreachable"] is True


@pytest.mark.parametrize("argv,says", [(["--task", "4"], "invalid choice: 4"), ([], "--task is required")])
def test_a_bad_or_missing_task_is_one_line_not_the_usage(argv, says):
    out = _cli(*argv, timeout=60)
    assert out.returncode == 2 and not out.stdout
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0] and "--help" in lines[0], lines


def test_a_missing_local_data_folder_gets_no_hub_download_hint(tmp_path, capsys):
    missing = tmp_path / "the" / "local" / "path"
    assert main(["--task", "1", "--data", str(missing), "--no-progress", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "not found" in err and "huggingface-cli" not in err
    # a Hub-like id (not in the local caches) still gets the download command
    assert main(["--task", "1", "--data", "someone/some-dataset", "--no-progress", "--out", str(tmp_path)]) == 2
    assert "huggingface-cli download --repo-type dataset someone/some-dataset" in capsys.readouterr().err


def test_an_invalid_model_config_file_is_one_line(tmp_path, capsys):
    cfg = tmp_path / "model.json"
    cfg.write_text(json.dumps({"max_retries": 0}))  # no backend
    assert main(["--task", "1", "--model-config", str(cfg), "--no-progress", "--out", str(tmp_path)]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and "ModelConfig" in lines[0] and "backend: Field required" in lines[0]


def test_the_unreachable_server_line_shows_no_user_or_password(tmp_path, capsys):
    assert (
        main(
            [
                "--task",
                "1",
                "--model",
                "openai:http://alice:pw-SECRET@127.0.0.1:9/v1#x",
                "--no-progress",
                "--out",
                str(tmp_path),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "cannot reach the model server http://127.0.0.1:9/v1" in err and "SECRET" not in err and "alice" not in err
