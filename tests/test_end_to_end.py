"""`python -m graph.run --task N --limit K` end to end on the embedded demo, offline."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from traces.schema import TurnTrace

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("task,limit,process", [(1, 4, False), (2, 4, False), (3, 2, True)])
def test_cli_runs_each_task_offline_and_writes_traces_and_report(tmp_path, task, limit, process, capsys, monkeypatch):
    argv = [
        "--task",
        str(task),
        "--limit",
        str(limit),
        "--out",
        str(tmp_path),
        "--run-id",
        f"e2e{task}",
        "--no-progress",
    ]
    if process:  # `python -m graph.run` itself, as a user starts it (once: a cold start costs seconds)
        env = {
            **os.environ,
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "GLASSES_DEMO_DIR": str(ROOT / "data" / "demo"),
        }
        out = subprocess.run(
            [sys.executable, "-m", "graph.run", *argv], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
        )
        assert out.returncode == 0, out.stderr[-3000:]
        stdout = out.stdout
    else:  # the same entry point in this process
        from glasses_rag.frontends.run import main

        monkeypatch.setenv("GLASSES_DEMO_DIR", str(ROOT / "data" / "demo"))
        assert main(argv) == 0
        stdout = capsys.readouterr().out
    # the heuristics in use are named in the output
    assert "rule-based-planner (heuristic)" in stdout
    assert "rule-judge (approximate)" in stdout
    assert "heuristic:color-texture" in stdout
    run = tmp_path / f"e2e{task}"
    traces = [TurnTrace.model_validate_json(p.read_text()) for p in sorted(run.glob("*__*.json"))]
    manifest = json.loads((run / "run.json").read_text())
    assert len(traces) == manifest["turns"] >= limit
    tools_used = {s.tool for t in traces for s in t.tool_calls()}
    assert "image_search" in tools_used
    if task == 1:
        assert "web_search" not in tools_used
    for t in traces:
        assert t.task == task and t.answer and t.score in ("correct", "missing", "incorrect")
        assert t.steps[-1].node == "final" and t.steps[-1].answer == t.answer
    if task == 3:
        assert max(t.turn_index for t in traces) >= 1
        assert "turn_index" in json.loads((run / "report.json").read_text())["slices"]
    report = json.loads((run / "report.json").read_text())
    assert report["overall"]["total"] == len(traces)
    assert (run / "truthfulness_by_slice.png").stat().st_size > 1000
    assert "truth" in stdout
    # how the turns ended is printed before the long report, not after it (a newcomer must not miss it)
    lines = stdout.splitlines()
    first_report_line = next(i for i, line in enumerate(lines) if line.startswith("CRAG-MM evaluation"))
    assert next(i for i, line in enumerate(lines) if line.startswith("turns:")) < first_report_line
    assert next(i for i, line in enumerate(lines) if line.startswith("errors:")) < first_report_line


def test_help_documents_every_option(capsys):
    from glasses_rag.frontends.run import main

    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for opt in (
        "--task",
        "--data",
        "--limit",
        "--out",
        "--model",
        "--search",
        "--budget",
        "--run-id",
        "--judge",
        "--concurrency",
    ):
        assert opt in out


def test_a_tool_added_as_one_module_is_registered_and_offered(tmp_path, monkeypatch, capsys):
    """The README's 'adding a tool' recipe: one decorated function in one file, no edit elsewhere."""
    (tmp_path / "my_weather_tool.py").write_text(
        "from tools.base import ToolContext, ToolOutput\n"
        "from tools.registry import tool\n\n\n"
        "@tool(tasks={2, 3})\n"
        "def weather(ctx: ToolContext, city: str, days: int = 1) -> ToolOutput:\n"
        "    '''Look up the weather forecast for a city.\n\n    Args:\n        city: the city name\n    '''\n"
        "    return ToolOutput(summary=f'{city}: sunny', method='test')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    from glasses_rag.frontends.run import main
    from tools import default_registry

    try:
        rc = main(
            [
                "--task",
                "2",
                "--limit",
                "1",
                "--tools-module",
                "my_weather_tool",
                "--out",
                str(tmp_path / "runs"),
                "--run-id",
                "plugin",
                "--no-progress",
            ]
        )
        registry = default_registry(["my_weather_tool"])
        spec = registry.get("weather").json_schema()["function"]
        task1 = {t.name for t in registry.for_task(1)}
    finally:  # leave no plugin module behind for other tests
        sys.modules.pop("my_weather_tool", None)
    assert rc == 0
    header = capsys.readouterr().out
    assert "weather" in next(line for line in header.splitlines() if line.startswith("tools:"))
    assert (
        spec["parameters"]["required"] == ["city"]
        and spec["parameters"]["properties"]["city"]["description"] == "the city name"
    )
    assert "weather" not in task1


def test_bad_paths_and_specs_give_a_clear_error_not_a_traceback(tmp_path, capsys):
    from glasses_rag.frontends.run import main

    assert main(["--task", "1", "--data", str(tmp_path / "nowhere"), "--no-progress", "--out", str(tmp_path)]) == 2
    assert "error: FileNotFoundError" in capsys.readouterr().err
    assert main(["--task", "2", "--model", "bogus:thing", "--limit", "1", "--no-progress", "--out", str(tmp_path)]) == 2
    assert "bad model spec" in capsys.readouterr().err


def test_data_naming_a_benchmark_content_folder_builds_it_and_searches_its_own_index(tmp_path):
    from glasses_rag.frontends.run import build_parser
    from glasses_rag.harness.run_data import prepare_data

    args = build_parser().parse_args(["--task", "1", "--data", "demo-paraphrase", "--demo-dir", str(tmp_path / "demo")])
    built = prepare_data(args)
    assert built.index_dir == tmp_path / "demo-paraphrase" and (Path(built.source) / "validation.parquet").exists()
    assert args.index_dir == built.index_dir  # not the demo's index: named in the configuration
    # the built set's dataset folder comes with the set's own index (issue 41); an explicit --index-dir is kept
    other = build_parser().parse_args(["--task", "1", "--data", built.source, "--index-dir", str(tmp_path)])
    assert prepare_data(other).index_dir == built.index_dir and other.index_dir == tmp_path
    # the demo's index is the benchmark's default one, handed to build_agent: the configuration names none, as before
    demo = build_parser().parse_args(["--task", "1", "--data", "demo", "--demo-dir", str(tmp_path / "demo")])
    assert prepare_data(demo).index_dir is None and demo.default_index == tmp_path / "demo" and demo.index_dir is None
