"""A researcher's first hour, round 2 (issue 41): each mistake met on the command line is one line on stderr and a
non-zero exit, never a run that "succeeds" without what was asked for. Each test runs the command the user ran."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ENV = {
    **os.environ,
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "GLASSES_DEMO_DIR": str(ROOT / "data" / "demo"),
}


def _run(module: str, *argv: str, timeout: float = 180, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = {**ENV, "PYTHONPATH": os.pathsep.join([str(ROOT), ENV.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, "-m", module, *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def _one_error_line(out: subprocess.CompletedProcess, *says: str) -> str:
    """The command failed with one line on stderr (no traceback) that says each of `says`."""
    lines = out.stderr.strip().splitlines()
    assert out.returncode != 0, out.stdout[-2000:]
    assert len(lines) == 1 and all(s in lines[0] for s in says), lines[-20:]
    return lines[0]


# ---- item 1: a tool name that is not one, or one the task does not allow ------------------------------------------


@pytest.mark.parametrize(
    "tools,says",
    [
        ("image_serch", ["unknown tool 'image_serch'", "did you mean 'image_search'"]),
        ("web_search", ["'web_search' is not allowed in task 1", "image_search"]),
        ("image_search,ocrr", ["unknown tool 'ocrr'", "did you mean 'ocr'"]),
    ],
)
def test_a_tool_name_the_task_does_not_offer_is_one_line_and_no_run(tmp_path, tools, says):
    """Before: an empty `tools:` line, every question run with 0 tool calls, exit 0 (an ablation silently ruined)."""
    out = _run("graph.run", "--task", "1", "--tools", tools, "--limit", "1", "--no-progress", "--out", str(tmp_path))
    _one_error_line(out, *says)
    assert not out.stdout and not list(tmp_path.glob("*/*__*.json"))


def test_a_preset_narrowed_to_tools_it_does_not_use_is_an_error(tmp_path):
    out = _run(
        "graph.run", "--task", "2", "--preset", "superlens", "--tools", "ocr", "--limit", "1", "--out", str(tmp_path)
    )
    _one_error_line(out, "--tools ocr", "superlens")


# ---- item 3: the resume hint resumes; Ctrl-C is one line with it ---------------------------------------------------

IDK_REPLY = {"action": "answer", "answer": "I don't know", "confidence": 0.1, "entity": None, "rationale": "r"}


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _resume_argv(err: str) -> list[str]:
    """The command the run printed to resume it, as graph.run's argv (it starts with `python -m graph.run`)."""
    import shlex

    cmd = shlex.split(err.split("with: ", 1)[1].splitlines()[0])
    assert cmd[:3] == ["python", "-m", "graph.run"] and "--run-id" in cmd, cmd
    return cmd[3:]


def test_the_resume_hint_after_a_server_outage_is_the_command_that_resumes(tmp_path, capsys, monkeypatch):
    """The server answers 2 turns, then fails: the run stops after 3 unreachable turns in a row and prints the
    command with --run-id (before: "rerun the same command", which made a new folder, "0 resumed"). That command,
    the server back, keeps the 2 answered turns and runs the 3 unreachable ones again with the rest."""
    import json

    from glasses_rag.frontends.run import main
    from glasses_rag.testing.fake_model_server import FakeOpenAIServer
    from traces.schema import TurnTrace

    monkeypatch.setenv("GLASSES_DEMO_DIR", ENV["GLASSES_DEMO_DIR"])
    port, cfg, served = _free_port(), tmp_path / "model.json", []
    cfg.write_text(
        json.dumps(
            {"backend": "openai", "base_url": f"http://127.0.0.1:{port}/v1", "model": "fake-vlm", "max_retries": 0}
        )
    )

    def twice_then_down(body: dict):
        served.append(1)
        return FakeOpenAIServer.text_reply(json.dumps(IDK_REPLY)) if len(served) <= 2 else ("status", 503, "down")

    argv = ["--task", "1", "--limit", "8", "--model-config", str(cfg), "--self-check", "off"]
    argv += ["--out", str(tmp_path / "runs"), "--no-progress", "--no-plot"]
    with FakeOpenAIServer(responder=twice_then_down, port=port):
        assert main(argv) == 1
    err = capsys.readouterr().err
    resume = _resume_argv(err)
    with FakeOpenAIServer(responder=lambda body: FakeOpenAIServer.text_reply(json.dumps(IDK_REPLY)), port=port):
        assert main(resume) == 0
    out = capsys.readouterr().out
    assert "turns:   8 (2 resumed)" in out, out
    (run,) = (tmp_path / "runs").iterdir()
    traces = [TurnTrace.model_validate_json(p.read_text()) for p in run.glob("*__*.json")]
    assert len(traces) == 8 and not any(c.unreachable for t in traces for c in t.model_calls())


def test_ctrl_c_is_one_line_with_the_resume_command_and_keeps_the_finished_turns(tmp_path):
    """Before: a 20-line KeyboardInterrupt traceback and no hint. Now: exit 130, one line naming the turns kept and
    the command that goes on from them."""
    import json
    import signal
    import time

    from glasses_rag.frontends.run import main
    from glasses_rag.testing.fake_model_server import FakeOpenAIServer

    reply = FakeOpenAIServer.text_reply(json.dumps(IDK_REPLY))
    out = tmp_path / "runs"
    with FakeOpenAIServer(delay_s=1.0, responder=lambda body: reply) as srv:
        argv = ["--task", "1", "--limit", "6", "--model", f"openai:{srv.base_url}#fake-vlm", "--self-check", "off"]
        argv += ["--out", str(out), "--no-progress", "--no-plot"]
        env = {**ENV, "PYTHONPATH": os.pathsep.join([str(ROOT), ENV.get("PYTHONPATH", "")])}
        p = subprocess.Popen(
            [sys.executable, "-m", "graph.run", *argv],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            # a suite started as a background job has SIGINT ignored, and an ignored signal stays so across exec
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        deadline = time.monotonic() + 120
        while not list(out.glob("*/*__*.json")) and time.monotonic() < deadline and p.poll() is None:
            time.sleep(0.05)
        p.send_signal(signal.SIGINT)
        _, err_bytes = p.communicate(timeout=120)
        err = err_bytes.decode()
        assert p.returncode == 130 and "Traceback" not in err, err
        line = _one_error_line(subprocess.CompletedProcess(p.args, 130, "", err), "interrupted:", "--run-id")
        kept = int(line.split("interrupted: ", 1)[1].split()[0])
        assert 1 <= kept < 6
        assert main(_resume_argv(err)) == 0
    (run,) = out.iterdir()
    assert len(list(run.glob("*__*.json"))) == 6


# ---- item 4: a reachable server whose replies cannot be used --------------------------------------------------------


def test_a_server_whose_replies_cannot_be_read_is_an_error_and_a_non_zero_exit(tmp_path, capsys, monkeypatch):
    """The server takes every request and answers an empty reply: "0/3 decision(s) parsed" and exit 0 before."""
    from glasses_rag.frontends.run import main
    from glasses_rag.testing.fake_model_server import FakeOpenAIServer

    monkeypatch.setenv("GLASSES_DEMO_DIR", ENV["GLASSES_DEMO_DIR"])
    with FakeOpenAIServer() as srv:  # an empty text reply to every request
        argv = ["--task", "1", "--limit", "3", "--model", f"openai:{srv.base_url}#fake-vlm"]
        rc = main([*argv, "--out", str(tmp_path), "--no-progress", "--no-plot"])
    err = capsys.readouterr().err
    assert rc == 1 and "only 0 of 3 decision(s) of the model could be used" in err, err


# ---- item 5: the judge's server is named as the judge's ------------------------------------------------------------


def test_an_unreachable_judge_names_the_judge_option(tmp_path):
    out = _run(
        "graph.run", "--task", "1", "--limit", "1", "--judge", "openai:http://127.0.0.1:9/v1#j", "--out", str(tmp_path)
    )
    line = _one_error_line(out, "cannot reach the model server http://127.0.0.1:9/v1", "see --judge")
    assert "--model" not in line


# ---- item 2: the training export agrees with itself -----------------------------------------------------------------


@pytest.fixture(scope="module")
def task2_run(tmp_path_factory):
    """A task-2 run of the rule planner (it calls detect_crop, image_search, web_search, ...)."""
    out = tmp_path_factory.mktemp("runs")
    done = _run("graph.run", "--task", "2", "--limit", "12", "--run-id", "t2", "--out", str(out), "--no-progress")
    assert done.returncode == 0, done.stderr[-2000:]
    return out / "t2"


def _offered_and_called(line: str) -> tuple[set[str], set[str]]:
    """(the tools an example's system prompt lists, the tools its prompt and completion call)."""
    import json
    import re

    ex = json.loads(line)
    system = ex["prompt"][0]["content"]
    offered = set(re.findall(r"^- (\w+)\(", system, flags=re.M))
    called = set()
    for msg in [*ex["prompt"][1:], *ex["completion"]]:
        if msg["role"] == "assistant" and msg["content"].startswith("{"):
            decision = json.loads(msg["content"])
            if decision.get("action") == "call_tool":
                called.add(decision["tool"])
    return offered, called


def test_an_export_teaches_only_the_tools_its_prompt_offers(task2_run, tmp_path):
    """Before: a prompt listing 3 tools and completions calling detect_crop and query_decoupler, no warning."""
    sft = tmp_path / "sft.jsonl"
    out = _run(
        "glasses_rag.training.export",
        "--run",
        str(task2_run),
        "--out",
        str(sft),
        "--tools",
        "image_search,ocr,web_search",
    )
    assert out.returncode == 0, out.stderr
    lines = sft.read_text().splitlines()
    assert lines
    for line in lines:
        offered, called = _offered_and_called(line)
        assert offered == {"image_search", "ocr", "web_search"} and called <= offered, (offered, called)
    warning = [w for w in out.stderr.splitlines() if "left out" in w]
    assert len(warning) == 1 and "detect_crop" in warning[0], out.stderr
    # without --tools the prompt offers the task's tools and nothing is left out
    full = _run("glasses_rag.training.export", "--run", str(task2_run), "--out", str(tmp_path / "all.jsonl"))
    assert full.returncode == 0 and "left out" not in full.stderr
    assert len((tmp_path / "all.jsonl").read_text().splitlines()) > len(lines)


def test_an_export_with_an_unknown_tool_name_is_refused(task2_run, tmp_path):
    """Before: "Tools: (no tools)" in every prompt and every completion calling image_search, exit 0."""
    sft = tmp_path / "sft.jsonl"
    out = _run("glasses_rag.training.export", "--run", str(task2_run), "--out", str(sft), "--tools", "image_serch")
    _one_error_line(out, "unknown tool 'image_serch'", "did you mean 'image_search'")
    assert not sft.exists()


# ---- item 6: one-line errors for a missing run folder and missing training data -----------------------------------


def test_an_export_of_a_run_folder_that_is_not_there_is_one_line(tmp_path):
    out = _run("glasses_rag.training.export", "--run", str(tmp_path / "nope"), "--out", str(tmp_path / "sft.jsonl"))
    _one_error_line(out, "no run folder at", "nope")


def test_finetune_on_data_that_is_not_there_is_one_line(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    out = _run(
        "glasses_rag.training.finetune",
        "--data",
        str(tmp_path / "nope.jsonl"),
        "--model",
        str(model),
        "--out",
        str(tmp_path / "a"),
    )
    _one_error_line(out, "--data", "nope.jsonl")


# ---- item 11 (adapter card): the base model is what the user passed -----------------------------------------------


def test_the_adapter_card_names_the_gguf_the_user_passed(tmp_path, monkeypatch):
    """Before: the card named the folder the GGUF was converted into (a cache path) as the base model."""
    import json

    pytest.importorskip("trl")
    import glasses_rag.models.vlm.gguf_folder as gguf_folder
    from glasses_rag.testing.tiny_models import save_tiny_gemma3
    from glasses_rag.training.finetune import main as finetune_main

    sft = tmp_path / "sft.jsonl"
    example = {
        "prompt": [{"role": "user", "content": "what is this?"}],
        "completion": [{"role": "assistant", "content": "{}"}],
    }
    sft.write_text(json.dumps(example) + "\n")
    converted = save_tiny_gemma3(tmp_path / "converted")  # stands for the conversion's cache folder
    gguf = tmp_path / "gemma-3-270m-Q4_K_M.gguf"
    gguf.write_bytes(b"GGUF")
    monkeypatch.setattr(gguf_folder, "converted_gguf", lambda path: converted)
    argv = ["--data", str(sft), "--model", str(gguf), "--out", str(tmp_path / "adapter"), "--max-steps", "1"]
    assert finetune_main(argv) == 0
    card = json.loads((tmp_path / "adapter" / "card.json").read_text())
    assert card["base_model"] == str(gguf)
    assert f"Base model: `{gguf}`" in (tmp_path / "adapter" / "README.md").read_text()


# ---- item 7: a question set's root and its dataset folder, everywhere -----------------------------------------------


@pytest.mark.parametrize("module", ["graph.run", "benchmarks.presets"])
def test_graph_run_and_presets_take_the_question_sets_root(tmp_path, module):
    """Before: the root made task 1 read the multi-turn conversations (9 turns for --limit 3)."""
    demo = ROOT / "data" / "demo"
    extra = ["--presets", "rule", "--same-process", "--no-chart"] if module == "benchmarks.presets" else []
    for data in (demo, demo / "single_turn"):
        out = _run(
            module, "--task", "1", "--data", str(data), "--limit", "3", "--out", str(tmp_path), "--no-progress", *extra
        )
        assert out.returncode == 0, out.stderr[-2000:]
        if module == "graph.run":
            assert f"on {demo / 'single_turn'}: 3 conversation(s)" in out.stdout and "turns:   3 (" in out.stdout
        else:
            assert any(line.split()[:2] == ["rule", "3"] for line in out.stdout.splitlines()), out.stdout


def test_distill_takes_the_question_sets_dataset_folder_as_graph_run_does(tmp_path, monkeypatch, capsys):
    """Before: `--eval-data data/demo/single_turn` -> ".../single_turn/single_turn not found"; it wanted the root."""
    import benchmarks.distill as distill

    class Taught(Exception):
        pass

    def teach(*args, **kwargs):
        raise Taught  # the arguments resolved and the split made: the road would start here

    monkeypatch.setenv("GLASSES_DEMO_DIR", ENV["GLASSES_DEMO_DIR"])
    monkeypatch.setattr(distill, "teach", teach)
    splits = []
    for data in (ROOT / "data" / "demo", ROOT / "data" / "demo" / "single_turn"):
        with pytest.raises(Taught):
            distill.main(["--task", "1", "--eval-data", str(data), "--work", str(tmp_path)])
        splits.append(
            [line.split("] ", 1)[-1] for line in capsys.readouterr().err.splitlines() if "] split by" in line]
        )
    assert splits[0] and splits[0] == splits[1]
