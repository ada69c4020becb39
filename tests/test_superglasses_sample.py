"""SuperGlasses for a newcomer: an offline sample ships (`--benchmark superglasses --data sample`), tools that lack a
key or a setting here are not offered (and the header says so), the run writes its own report and chart (no
CRAG-MM table or "CRAG-MM truthfulness" chart), and the viewer shows list labels as lists."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from traces.schema import TurnTrace

ROOT = Path(__file__).resolve().parents[1]
OPEN_WEB_ENV = ("SERPAPI_API_KEY", "GLASSES_IMAGE_DIR", "GLASSES_IMAGE_BASE_URL")


@pytest.fixture(scope="module")
def sample_run(tmp_path_factory):
    from glasses_rag.frontends.run import main

    tmp = tmp_path_factory.mktemp("sg")
    mp = pytest.MonkeyPatch()
    for var in OPEN_WEB_ENV:
        mp.delenv(var, raising=False)
    mp.setenv("GLASSES_WEB_CACHE", str(tmp / "cache"))
    try:
        import io
        from contextlib import redirect_stdout

        out = io.StringIO()
        with redirect_stdout(out):
            rc = main(
                [
                    "--benchmark",
                    "superglasses",
                    "--data",
                    "sample",
                    "--demo-dir",
                    str(tmp / "data" / "demo"),
                    "--out",
                    str(tmp / "runs"),
                    "--run-id",
                    "s",
                    "--no-progress",
                    "--tokenizer",
                    "approx",
                ]
            )
    finally:
        mp.undo()
    assert rc == 0
    return tmp, tmp / "runs" / "s", out.getvalue()


def test_the_offline_sample_runs_without_google_lens_or_a_key(sample_run):
    tmp, run, out = sample_run
    assert (tmp / "data" / "superglasses-sample" / "queries").is_dir()  # built on first use, beside the demo
    tools_line = next(line for line in out.splitlines() if line.startswith("tools:  "))
    offered, _, missing = tools_line.partition("; not offered: ")
    assert "google_lens" not in offered and "google_search" not in offered
    assert "google_lens (SERPAPI_API_KEY not set)" in missing and "google_search (SERPAPI_API_KEY not set)" in missing
    traces = [TurnTrace.model_validate_json(p.read_text()) for p in run.glob("*__*.json")]
    assert len(traces) == 4 and not any(s.tool.startswith("google_") for t in traces for s in t.tool_calls())
    assert json.loads((run / "run.json").read_text())["tools_not_offered"]["google_lens"]


def test_a_superglasses_run_writes_its_own_report_and_chart_only(sample_run):
    _, run, out = sample_run
    names = {p.name for p in run.iterdir()}
    assert {"superglasses_report.json", "superglasses_report.txt", "superglasses_accuracy.png"} <= names
    assert not names & {"report.json", "report.txt", "truthfulness_by_slice.png"}
    assert "CRAG-MM evaluation" not in out and "superglasses_accuracy.png" in out.splitlines()[-1]


def test_lens_is_not_offered_without_its_image_hosting_even_with_a_key(monkeypatch):
    from glasses_rag.web.config import missing_lens
    from graph.build import build_agent
    from graph.config import AgentConfig

    for var in OPEN_WEB_ENV:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("SERPAPI_API_KEY", "k")
    assert "GLASSES_IMAGE_DIR" in missing_lens()
    from glasses_rag.retrieval.search import NullSearch
    from glasses_rag.superglasses.spec import BENCHMARK as SUPERGLASSES

    config = AgentConfig(tools={"profile": "superglasses"}, warm_up=False)
    agent = build_agent(config, search=NullSearch(), task=2, tool_profile=SUPERGLASSES.tools)
    offered = [t.name for t in agent.registry.for_task(2, None, SUPERGLASSES.tools)]
    assert "google_search" in offered and "google_lens" not in offered
    assert set(agent.registry.unavailable) == {"google_lens"}
    crag = build_agent(AgentConfig(warm_up=False), search=NullSearch(), task=2)  # nothing of another profile named
    assert crag.registry.unavailable == {}


def test_the_viewer_shows_list_labels_as_lists(sample_run):
    from glasses_rag.frontends.viewer import build_html

    _, run, _ = sample_run
    page = build_html(run)
    assert "sub_questions 1: sub_question: What is the rocket?" in page
    assert not any(f"{{{q}" in page for q in ("&#x27;", "&#39;"))  # no Python text of a list or dict
    assert "category 2: Reasoning" in page


def test_task_superglasses_is_the_superglasses_benchmark():
    from glasses_rag.frontends.run import build_parser, resolve_benchmark

    p = build_parser()
    for argv in (["--task", "superglasses", "--data", "sample"], ["--task=superglasses", "--data", "sample"]):
        args = resolve_benchmark(p, p.parse_args(argv))
        assert args.benchmark == "superglasses" and args.task == 2 and args.data == "sample"
