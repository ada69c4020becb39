"""What a run prints or writes holds no credential, its files are no more readable than the user's umask allows,
and a run id cannot name a folder outside --out."""

from __future__ import annotations

import json
import logging
import os
import stat
from pathlib import Path

import pytest

from glasses_rag.core.credentials import ScrubFilter, public_url, scrub_argv, scrub_data, scrub_text
from glasses_rag.core.files import write_atomic
from glasses_rag.frontends.run import configure_logging, main
from glasses_rag.testing.fake_model_server import FakeOpenAIServer

KEY = "sk-live-SECRET-5150"
PASSWORD = "pw-SECRET-9090"


def _everything_written(folder: Path) -> str:
    return "".join(p.read_bytes().decode("utf-8", "replace") for p in folder.rglob("*") if p.is_file())


def _run(tmp_path: Path, capsys, *args: str) -> tuple[int, str, Path]:
    rc = main(
        [
            "--task",
            "1",
            "--limit",
            "2",
            "--out",
            str(tmp_path / "runs"),
            "--run-id",
            "r",
            "--no-progress",
            "--budget",
            "10",
            *args,
        ]
    )
    console = capsys.readouterr()
    return rc, console.out + console.err, tmp_path / "runs" / "r"


def test_no_password_or_api_key_in_anything_a_run_prints_or_writes(tmp_path, capsys):
    # replies the model loop can read (an empty one is a run whose decisions cannot be used: exit 1, issue 41)
    idk = {"action": "answer", "answer": "I don't know", "confidence": 0.1, "entity": None, "rationale": "r"}
    with FakeOpenAIServer(responder=lambda body: FakeOpenAIServer.text_reply(json.dumps(idk))) as srv:
        url = srv.base_url.replace("http://", f"http://alice:{PASSWORD}@")
        rc, console, folder = _run(tmp_path, capsys, "--model", f"openai:{url}#x")
        assert rc == 0 and f"replicas: {srv.base_url} " in console  # shown without its userinfo
        traces = [json.loads(p.read_text()) for p in folder.glob("*__00.json")]
        replicas = {c["replica"] for t in traces for s in t["steps"] for c in s.get("model_calls", [])}
        assert replicas == {srv.base_url}
        leaked = _everything_written(folder) + console
        assert PASSWORD not in leaked and "alice" not in leaked
        config = tmp_path / "model.json"
        config.write_text(json.dumps({"backend": "openai", "base_url": url, "model": "x", "api_key": KEY}))
        rc, console, folder = _run(tmp_path, capsys, "--model-config", str(config), "--resume-anyway")
        run = json.loads((folder / "run.json").read_text())
        assert rc == 0 and run["config"]["policy"]["api_key"] == "***"
        assert run["config"]["policy"]["base_url"] == srv.base_url
        leaked = _everything_written(folder) + console
        assert KEY not in leaked and PASSWORD not in leaked
    config.write_text(json.dumps({"base_url": url, "api_key": KEY}))  # invalid: the error quotes the file's content
    rc, console, _ = _run(tmp_path, capsys, "--model-config", str(config))
    assert rc == 2 and console.startswith("error: ") and KEY not in console and PASSWORD not in console


def test_scrubbing_removes_userinfo_and_key_values_and_keeps_json_json():
    assert public_url("http://alice:pw@host:8000/v1") == "http://host:8000/v1"
    assert public_url("see https://u@h/x and http://h/y") == "see https://h/x and http://h/y"
    text = json.dumps({"api_key": KEY, "url": f"http://a:{PASSWORD}@h/v1", "token": "t", "max_tokens": 5})
    clean = json.loads(scrub_text(text))
    assert clean == {"api_key": "***", "url": "http://h/v1", "token": "***", "max_tokens": 5}
    assert KEY not in scrub_text(f"input_value={{'api_key': '{KEY}', 'backend': 'openai'}}")
    assert scrub_text(f"GET /x?api_key={KEY}&q=1") == "GET /x?api_key=***&q=1"
    assert scrub_data({"policy": {"api_key": KEY, "judge_api_key_env": "OPENAI_API_KEY", "name": None}}) == {
        "policy": {"api_key": "***", "judge_api_key_env": "OPENAI_API_KEY", "name": None}
    }
    assert scrub_argv(["--api-key", KEY, "--model", f"openai:http://a:{PASSWORD}@h/v1#m"]) == [
        "--api-key",
        "***",
        "--model",
        "openai:http://h/v1#m",
    ]
    record = logging.LogRecord(
        "glasses_rag.models.openai_client",
        logging.WARNING,
        __file__,
        1,
        "replica %s failed",
        (f"http://a:{PASSWORD}@h/v1",),
        None,
    )
    assert ScrubFilter().filter(record) and record.getMessage() == "replica http://h/v1 failed"
    configure_logging(False)  # the CLI puts the filter on every handler of the root logger
    assert any(isinstance(f, ScrubFilter) for h in logging.getLogger().handlers for f in h.filters)


def test_outputs_are_written_with_the_users_umask(tmp_path, capsys):
    old = os.umask(0o077)
    try:
        assert stat.S_IMODE(write_atomic(tmp_path / "a.json", "{}").stat().st_mode) == 0o600
        rc, _, folder = _run(tmp_path, capsys)
        assert rc == 0
        modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in [folder, *folder.iterdir()]}
        assert all(m & 0o077 == 0 for m in modes.values()), modes
        os.umask(0o022)
        assert stat.S_IMODE(write_atomic(tmp_path / "b.json", "{}").stat().st_mode) == 0o644
    finally:
        os.umask(old)


@pytest.mark.parametrize("run_id", ["..", ".", "a/b", "../x", "/abs", "a\\b", "", "a\0b"])
def test_a_run_id_that_is_not_one_folder_name_exits_and_touches_nothing(tmp_path, capsys, run_id):
    out = tmp_path / "out" / "runs"
    out.mkdir(parents=True)
    (tmp_path / "out" / ".report.json.abc.tmp").write_text("a user's file")
    (tmp_path / "out" / "report.json").write_text("the user's report")

    def snapshot() -> dict[str, tuple[float, int]]:
        return {str(p): (p.stat().st_mtime, p.stat().st_size) for p in tmp_path.rglob("*")}

    before = snapshot()
    rc = main(["--task", "1", "--out", str(out), "--run-id", run_id, "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("error: --run-id") and err.count("\n") == 1
    assert snapshot() == before
