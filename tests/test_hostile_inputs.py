"""Smaller hostile inputs: a bad link in a search reply, files nested too deeply, a lone surrogate in run.json, huge
questions and tool arguments, long conversations, a million-row dataset, and a parent that dies under --workers."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from glasses_rag.frontends.run import main
from glasses_rag.frontends.viewer import render_run
from glasses_rag.policies.model.prompts import HISTORY_TURNS, history_text
from glasses_rag.policies.protocol import PolicyView
from glasses_rag.superglasses import logs as sg_logs
from glasses_rag.superglasses.loader import load_superglasses
from glasses_rag.testing.fake_model_server import FakeOpenAIServer
from glasses_rag.web.serpapi import web_results
from tools.base import HistoryTurn
from traces.schema import TRACE_INPUT_LIMIT, ToolCallEvent

ROOT = Path(__file__).resolve().parents[1]
DEEP = "[" * 100_000 + "]" * 100_000


def test_one_bad_knowledge_graph_link_keeps_the_other_results():
    data = {
        "knowledge_graph": {"title": "Falcon 9", "type": "Rocket", "source": {"link": "javascript:alert(1)"}},
        "organic_results": [{"position": 1, "title": "Good", "link": "https://example.org/good"}],
    }
    got = web_results(data, k=5)
    assert [(r["kind"], r["url"]) for r in got.results] == [
        ("knowledge_graph", None),
        ("organic", "https://example.org/good"),
    ]
    assert got.notes == ["knowledge_graph.source.link ignored: not an http(s) link of at most 2048 characters"]


@pytest.mark.parametrize("which", ["model-config", "kg.json", "web.json"])
def test_files_nested_too_deeply_are_one_line_errors(tmp_path, capsys, which):
    index = tmp_path / "index"
    index.mkdir()
    (index / "kg.json").write_text('{"images": []}' if which == "web.json" else '{"images": ' + DEEP + "}")
    (index / "web.json").write_text('{"pages": ' + DEEP + "}")
    (tmp_path / "model.json").write_text('{"backend": "openai", "base_url": ' + DEEP + "}")
    args = ["--model-config", str(tmp_path / "model.json")] if which == "model-config" else ["--index-dir", str(index)]
    rc = main(["--task", "1", "--limit", "1", "--out", str(tmp_path / "runs"), "--no-progress", *args])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "nested too deeply" in err, err
    assert (which if which != "model-config" else "model.json") in err


def test_annotation_files_nested_too_deeply_are_one_line_errors(tmp_path, capsys):
    deep = tmp_path / "annotations.json"
    deep.write_text(DEEP)
    assert sg_logs.main(["check", str(deep)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nested too deeply" in err
    lines = tmp_path / "annotations.jsonl"  # one bad line of many: that line only
    lines.write_text(json.dumps({"id": "a", "question": "q?", "answer": "x"}) + "\n" + DEEP + "\n")
    problems: list[str] = []
    assert len(sg_logs.import_logs(lines, problems)) == 1 and any("line 2: nested too deeply" in p for p in problems)


def test_a_lone_surrogate_in_run_json_does_not_crash_the_viewer(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text('{"policy": "x\\ud800y", "data": "/nowhere\\udfff", "argv": ["--split", "\\ud800"]}')
    page = render_run(run, images={}).read_text(encoding="utf-8")
    assert "x?y" in page


def test_traces_and_reports_keep_bounded_copies_of_huge_inputs(tmp_path):
    """A 3 MB question and ground truth (a 100 MB one is the same code path) and a 2 MB tool argument: each kept to
    TRACE_INPUT_LIMIT characters with its original size noted; the trace and report stay small."""
    question = "What is this? " + "x" * 3_000_000
    turns = {
        "interaction_id": ["big"],
        "domain": ["other"],
        "query_category": ["simple-recognition"],
        "dynamism": ["static"],
        "query": [question],
        "image_quality": ["normal"],
    }
    rows = [
        {
            "session_id": "big",
            "image": None,
            "image_url": None,
            "turns": turns,
            "answers": {"interaction_id": ["big"], "ans_full": ["y" * 3_000_000]},
        }
    ]
    (tmp_path / "ds").mkdir()
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "ds" / "validation.parquet")
    assert (
        main(
            [
                "--task",
                "1",
                "--data",
                str(tmp_path / "ds"),
                "--out",
                str(tmp_path / "runs"),
                "--run-id",
                "r",
                "--no-progress",
                "--no-plot",
            ]
        )
        == 0
    )
    folder = tmp_path / "runs" / "r"
    trace = json.loads((folder / "big__00.json").read_text())
    assert trace["question"].endswith(f"[... cut: {len(question)} characters in all]")
    assert len(trace["question"]) < TRACE_INPUT_LIMIT + 100 and "cut: 3000000 characters" in trace["ground_truth"]
    assert all(p.stat().st_size < 1_000_000 for p in folder.iterdir()), {
        p.name: p.stat().st_size for p in folder.iterdir()
    }
    event = ToolCallEvent(tool="ocr", arguments={"hint": list(range(300_000)), "lang": "en"})
    assert event.arguments["lang"] == "en" and len(event.arguments["hint"]) < TRACE_INPUT_LIMIT + 100
    assert event.arguments["hint"].endswith("characters in all]")


def test_a_model_prompt_shows_a_bounded_history_however_long_the_conversation():
    def view(turns: int) -> PolicyView:
        history = [HistoryTurn(question=f"question {i} " + "q" * 5000, answer=f"answer {i}") for i in range(turns)]
        return PolicyView(
            task=3, question="and now?", history=history, has_image=False, tools=[], remaining_steps=3, remaining_s=10.0
        )

    short, long, longer = history_text(view(3)), history_text(view(400)), history_text(view(4000))
    assert "question 0" in short and "not shown" not in short
    assert long.startswith(f"({400 - HISTORY_TURNS} earlier turn(s) not shown)") and "question 399" in long
    assert "question 383 " not in long and "question 384 " in long
    assert abs(len(longer) - len(long)) < 50 and len(long) < HISTORY_TURNS * 600


def test_the_superglasses_loader_streams_its_queries(tmp_path, monkeypatch):
    """The first question comes before the whole queries file is read: rows are read in batches."""
    n = 50_000
    (tmp_path / "queries").mkdir()
    pq.write_table(
        pa.table(
            {
                "id": [f"q{i}" for i in range(n)],
                "image_id": list(range(n)),
                "question": ["What is it?"] * n,
                "answer": ["x"] * n,
            }
        ),
        tmp_path / "queries" / "test-00000-of-00001.parquet",
    )
    read: list[int] = []
    real = pq.ParquetFile.iter_batches

    def counted(self, *args, **kwargs):
        for batch in real(self, *args, **kwargs):
            read.append(batch.num_rows)
            yield batch

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", counted)
    monkeypatch.setattr(pq.ParquetFile, "read_row_group", None)  # never the whole file at once (one row group here)
    it = load_superglasses(tmp_path)
    first = next(iter(it))
    assert first.session_id == "q0" and it.rows == n and 0 < sum(read) <= 5000, sum(read)
    assert sum(1 for _ in it) == n - 1


def test_workers_write_nothing_after_their_parent_dies(tmp_path):
    """SIGKILL to the parent of `--workers 2` while both workers are in a turn: the lock dies with the parent, and
    the workers' turns in hand end without writing a trace."""
    with FakeOpenAIServer(delay_s=1.5) as srv:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "graph.run",
                "--task",
                "1",
                "--limit",
                "6",
                "--workers",
                "2",
                "--budget",
                "30",
                "--model",
                f"openai:{srv.base_url}#x",
                "--no-progress",
                "--no-plot",
                "--run-id",
                "r",
                "--out",
                str(tmp_path),
            ],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        try:
            deadline = time.monotonic() + 120
            while len(srv.requests) < 2 and time.monotonic() < deadline and proc.poll() is None:
                time.sleep(0.05)  # both workers are inside a model call
            workers = [k for k in psutil.Process(proc.pid).children() if "spawn_main" in " ".join(k.cmdline())]
            assert len(workers) == 2 and proc.poll() is None
            before = sorted(p.name for p in (tmp_path / "r").glob("*__*.json"))
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
            psutil.wait_procs(workers, timeout=60)
            assert not [w for w in workers if w.is_running() and w.status() != psutil.STATUS_ZOMBIE]
        finally:
            with contextlib.suppress(ProcessLookupError):  # the workers share the parent's process group
                os.killpg(proc.pid, signal.SIGKILL)
    assert sorted(p.name for p in (tmp_path / "r").glob("*__*.json")) == before
