"""benchmarks.presets and benchmarks.ablate: the paired bootstrap on hand-computed examples, and both commands end
to end on the bundled demo data (a few questions), resuming on a second run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from benchmarks.ablate import change, interval, paired_bootstrap, per_question
from benchmarks.preset_runs import Row
from traces.schema import TurnTrace

ROOT = Path(__file__).resolve().parents[1]


# ---- the ablation arithmetic --------------------------------------------------------------------------------


def test_per_question_scores_average_to_the_official_figures():
    flags = {"a#0": (True, False), "b#0": (False, True), "c#0": (False, False), "d#0": (True, True)}
    assert per_question(flags, "accuracy") == {"a#0": 1.0, "b#0": 0.0, "c#0": 0.0, "d#0": 1.0}
    # truthfulness = (2 * correct + missing) / n - 1 = (2*2 + 2)/4 - 1 = 0.5, the mean of 1, 0, -1, 2
    assert per_question(flags, "truthfulness") == {"a#0": 1.0, "b#0": 0.0, "c#0": -1.0, "d#0": 2.0}


def test_change_pairs_questions_and_ignores_those_only_one_side_ran():
    full = Row(label="full", flags={"a#0": (True, False), "b#0": (False, True), "c#0": (False, False)})
    row = Row(
        label="row", flags={"a#0": (True, False), "b#0": (True, False), "c#0": (False, True), "z#0": (True, False)}
    )
    acc, tru = change(full, row, "accuracy"), change(full, row, "truthfulness")
    assert acc.n == tru.n == 3  # z#0 has no partner
    assert acc.delta == pytest.approx(1 / 3)  # differences 0, +1, 0
    assert tru.delta == pytest.approx(2 / 3)  # differences 0, +1 (missing -> correct), +1 (wrong -> missing)


def test_interval_on_given_resamples_by_hand():
    diffs = np.array([0.0, 1.0, 0.0])
    resamples = np.array([[0, 0, 0], [1, 1, 1], [0, 1, 2], [1, 1, 0]])
    # resample means 0, 1, 1/3, 2/3 -> sorted 0, 1/3, 2/3, 1; numpy's linear percentile:
    # 2.5th at position 0.075 -> 0.075 * 1/3 = 0.025; 97.5th at 2.925 -> 2/3 + 0.925 * 1/3 = 0.975
    low, high = interval(diffs, resamples)
    assert low == pytest.approx(0.025) and high == pytest.approx(0.975)


def test_paired_bootstrap_by_hand_and_reproducible():
    same = paired_bootstrap(np.full(5, 0.5))
    assert (same.n, same.delta, same.low, same.high) == (5, 0.5, 0.5, 0.5)  # no spread, no interval
    # two questions, differences 0 and 1: a resample's mean is 0 (p 1/4), 0.5 (1/2) or 1 (1/4), so the 2.5th and
    # 97.5th percentiles of 2,000 resample means are 0 and 1
    two = paired_bootstrap(np.array([0.0, 1.0]))
    assert (two.delta, two.low, two.high) == (0.5, 0.0, 1.0)
    assert paired_bootstrap(np.array([1.0, 0.0, -1.0, 1.0, 1.0])) == paired_bootstrap(
        np.array([1.0, 0.0, -1.0, 1.0, 1.0])
    )  # seed fixed
    assert paired_bootstrap(np.array([])).n == 0


# ---- both commands on the bundled demo ----------------------------------------------------------------------


@pytest.fixture()
def demo_env(monkeypatch):
    monkeypatch.setenv("GLASSES_DEMO_DIR", str(ROOT / "data" / "demo"))


def _traces(folder: Path) -> list[TurnTrace]:
    return [TurnTrace.model_validate_json(p.read_text()) for p in sorted(folder.glob("*__*.json"))]


def test_presets_command_runs_side_by_side_and_resumes(tmp_path, demo_env, capsys):
    from benchmarks.presets import main
    from glasses_rag.frontends.viewer import render_run

    argv = [
        "--task",
        "2",
        "--limit",
        "2",
        "--presets",
        "superlens,no-retrieval",
        "--out",
        str(tmp_path),
        "--run-id",
        "bench",
        "--no-progress",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    for name in ("superlens", "no-retrieval"):
        assert f"\n{name} " in out  # a table row
        traces = _traces(tmp_path / "bench" / name)
        assert len(traces) == 2 and all(t.policy.startswith(f"preset:{name}") and t.score for t in traces)
    assert "offline stand-ins" in out and "p50 ms" in out and "tokens/t" in out and " errors" in out
    assert "superlens: ended by answer 2; errors: none" in out
    assert "each preset in its own process" in out
    assert "time per stage" in out and "  superlens: " in out and "reranker (model)" not in out
    assert "    reranker: heuristic:minilm-embedding" in out  # which reranker ran, and where
    figures = json.loads((tmp_path / "bench" / "presets.json").read_text())
    rows = {r["label"]: r for r in figures["presets"]}
    assert rows["no-retrieval"]["accuracy"] == 0.0 and rows["no-retrieval"]["tool_calls_per_turn"] == 0.0
    assert rows["superlens"]["n"] == 2 and rows["superlens"]["tool_calls_per_turn"] > 0
    assert rows["superlens"]["ended_by"] == {"answer": 2} and rows["superlens"]["errors"] == {}
    report = json.loads((tmp_path / "bench" / "superlens" / "report.json").read_text())
    assert rows["superlens"]["hallucination"] == pytest.approx(report["overall"]["hallucination_rate"])  # graph.run's
    assert rows["superlens"]["latency_p95_ms"] >= rows["superlens"]["latency_p50_ms"] > 0
    assert (tmp_path / "bench" / "presets.png").stat().st_size > 1000
    assert render_run(tmp_path / "bench" / "superlens", images={}).stat().st_size > 1000  # the viewer reads it
    # again, in one process this time: every turn is read back, none redone
    assert main([*argv, "--same-process"]) == 0
    run = json.loads((tmp_path / "bench" / "superlens" / "run.json").read_text())
    assert run["turns"] == run["resumed_turns"] == 2


def test_presets_command_refuses_an_unknown_preset(tmp_path, demo_env, capsys):
    from benchmarks.presets import main

    assert main(["--task", "2", "--presets", "rule,nope", "--out", str(tmp_path)]) == 2
    assert "unknown preset 'nope'" in capsys.readouterr().err


def test_ablate_command_prints_a_table_4_style_table(tmp_path, demo_env, capsys):
    from benchmarks.ablate import main

    argv = ["--preset", "superlens", "--task", "2", "--limit", "2", "--out", str(tmp_path), "--run-id", "abl"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    for line in (
        "superlens (full)",
        "A. No Retrieval",
        "w/o Search",
        "B. Mandatory Retrieval",
        "C. Demand-Adaptive Retrieval",
        "w/o Demand-Adaptive Answerer",
        "paired bootstrap",
        "Extra (not in the paper's table): each module off",
        "w/o Multimodal Reranker (reranker)",
    ):
        assert line in out
    from glasses_rag.policies.presets import load_preset

    table_4 = load_preset("superlens").ablation.rows  # every Table 4 row, under the paper's group letter
    assert len(table_4) == 10
    for row in table_4:
        assert f"{row.group}\n" in out and f"  {row.title} " in out and f"paper {row.reported:.2f}" in out
    table = json.loads((tmp_path / "abl" / "ablation.json").read_text())
    rows = table["rows"]
    assert rows[0]["setting"] == "superlens (full)" and rows[0]["accuracy_change"]["delta"] == 0.0
    assert all(r["run"]["n"] == 2 and r["accuracy_change"]["n"] == 2 for r in rows)
    assert {r["group"] for r in rows} == {
        "",
        "A. No Retrieval",
        "B. Mandatory Retrieval",
        "C. Demand-Adaptive Retrieval",
        "Extra (not in the paper's table): each module off",
        "Extra (not in the paper's table): each tool removed",
    }
    no_search = next(r for r in rows if r["group"] == "A. No Retrieval")
    assert not any(
        t.tool_calls() and {"image_search", "web_search"} & {s.tool for s in t.tool_calls()}
        for t in _traces(Path(no_search["run"]["run_dir"]))
    )
    assert main(argv) == 0  # resumed: the rows' turns are read back
    run = json.loads((tmp_path / "abl" / "full" / "run.json").read_text())
    assert run["turns"] == run["resumed_turns"] == 2


def test_presets_command_counts_model_calls_and_tokens_with_a_model(tmp_path, demo_env, capsys):
    from test_presets import Model

    from benchmarks.presets import main
    from glasses_rag.testing.fake_model_server import FakeOpenAIServer

    with FakeOpenAIServer(responder=Model()) as srv:  # every reply: 10 prompt + 5 completion tokens
        assert (
            main(
                [
                    "--task",
                    "2",
                    "--limit",
                    "1",
                    "--presets",
                    "superlens,unsw-verify",
                    "--out",
                    str(tmp_path),
                    "--run-id",
                    "m",
                    "--no-progress",
                    "--model",
                    f"openai:{srv.base_url}#fake-vlm",
                    "--budget",
                    "30",
                    "--no-chart",
                    "--same-process",
                ]
            )
            == 0
        )
    rows = {r["label"]: r for r in json.loads((tmp_path / "m" / "presets.json").read_text())["presets"]}
    # superlens: domain router, direct answer, search router, decoupler, answer; unsw: router, summary, answer + 3
    assert rows["superlens"]["model_calls_per_turn"] == 5 and rows["superlens"]["tokens_per_turn"] == 75
    assert rows["unsw-verify"]["model_calls_per_turn"] == 6 and rows["unsw-verify"]["tokens_per_turn"] == 90
    assert "offline stand-ins" not in capsys.readouterr().out
