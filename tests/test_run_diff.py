"""glasses_rag.frontends.diff: runs side by side on the same questions, from the scoring they stored; filters; the
presets folder; SuperGlasses runs; the page in headless Chromium; glasses_rag.superglasses.compare without
annotations."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from glasses_rag.crag_mm.evaluate import evaluate, records_from_traces, write_report
from glasses_rag.frontends.diff import main as diff_main
from glasses_rag.frontends.run_diff import RowFilter, RunDiff, diff_runs, find_runs
from glasses_rag.frontends.viewer import main as viewer_main
from glasses_rag.superglasses import compare as cmp
from traces.schema import FinalEvent, TokenTotals, ToolCallEvent, TurnTrace
from traces.store import TraceStore

ROOT = Path(__file__).resolve().parents[1]
EVIL = "<script>document.body.setAttribute('data-pwned','1')</script><img src=x onerror=alert(1)>"
CHROMIUM = Path("/usr/bin/chromium")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def trace(
    run: str,
    session: str,
    turn: int,
    answer: str,
    truth: str,
    tools: list[str],
    calls: int = 0,
    latency: float = 100.0,
    question: str | None = None,
) -> TurnTrace:
    """A finished turn as the runner writes it, scored by exact match (the rule judge's first rule)."""
    score = "missing" if answer == "I don't know" else "correct" if answer == truth else "incorrect"
    steps = [ToolCallEvent(index=i, tool=t, latency_ms=5.0) for i, t in enumerate(tools)]
    steps.append(FinalEvent(index=len(tools), decision="answer", answer=answer))
    return TurnTrace(
        run_id=run,
        task=3 if turn else 2,
        session_id=session,
        interaction_id=f"{session}-t{turn}",
        turn_index=turn,
        question=question or f"question {session}/{turn}?",
        policy="fabricated",
        search_backend="none",
        budget_s=10,
        max_steps=8,
        steps=steps,
        answer=answer,
        abstained=score == "missing",
        ended_by="answer",
        latency_ms=latency,
        tokens=TokenTotals(calls=calls, sequential_calls=calls),
        ground_truth=truth,
        score=score,
        judge="exact-match",
    )


def write_run(root: Path, name: str, turns: list[TurnTrace], report: bool = True, **run_json) -> Path:
    store = TraceStore(root, name)
    for t in turns:
        store.write(t)
    (store.dir / "run.json").write_text(
        json.dumps({"run_id": name, "benchmark": "crag-mm", "task": 2, "data": "demo", "policy": name, **run_json})
    )
    if report:
        write_report(evaluate(records_from_traces(turns)), store.dir, plot=False)
    return store.dir


@pytest.fixture()
def two_runs(tmp_path) -> tuple[Path, Path]:
    """A answers q1..q3 right, B gets q1 right, q2 wrong, abstains on q3; q4 only in A, q5 only in B."""
    a = write_run(
        tmp_path,
        "alpha",
        [
            trace("alpha", "q1", 0, "Falcon 9", "Falcon 9", ["image_search"]),
            trace("alpha", "q2", 0, "SpaceX", "SpaceX", ["image_search", "web_search"], 2),
            trace("alpha", "q3", 0, "1889", "1889", ["web_search"], 1, 300.0),
            trace("alpha", "q4", 0, "blue", "blue", [], question=EVIL),
        ],
    )
    b = write_run(
        tmp_path,
        "beta",
        [
            trace("beta", "q1", 0, "Falcon 9", "Falcon 9", ["ocr"], 3, 900.0),
            trace("beta", "q2", 0, "Boeing", "SpaceX", ["web_search"], 3),
            trace("beta", "q3", 0, "I don't know", "1889", [], 1),
            trace("beta", "q5", 0, "red", "red", []),
        ],
    )
    return a, b


def test_two_runs_side_by_side_outcomes_tools_calls_and_unmatched(two_runs):
    d = diff_runs(list(two_runs))
    assert [(r.letter, r.name) for r in d.runs] == [("A", "alpha"), ("B", "beta")]
    rows = {r.key: r for r in d.rows}
    assert {k: (r.outcome("A"), r.outcome("B")) for k, r in rows.items()} == {
        "q1#0": ("right", "right"),
        "q2#0": ("right", "wrong"),
        "q3#0": ("right", "abstained"),
        "q4#0": ("right", "absent"),
        "q5#0": ("absent", "right"),
    }
    q2 = rows["q2#0"]
    assert q2.sides["A"].tools == ["image_search", "web_search"] and q2.sides["B"].tools == ["web_search"]
    assert q2.sides["A"].model_calls == 2 and q2.sides["B"].answer == "Boeing" and q2.ground_truth == "SpaceX"
    assert d.common == 3 and d.only_in == {"A": 1, "B": 1}
    a, b = d.runs
    assert (a.common.n, a.common.right, b.common.right, b.common.wrong, b.common.abstained) == (3, 3, 1, 1, 1)
    assert b.common.model_calls_per_turn == pytest.approx(7 / 3, abs=1e-3) and b.common.latency_p50_ms == 100.0
    assert "report.json (kddcup2025" in a.scoring
    (pair,) = d.pairs
    assert (pair.both, pair.same, pair.a_right_b_not, pair.b_right_a_not) == (3, 1, 2, 0)
    assert pair.table["right"]["wrong"] == 1 and pair.table["right"]["abstained"] == 1
    RunDiff.model_validate_json(d.model_dump_json())  # the JSON reads back as the model


def test_filters(two_runs):
    def keys(*only):
        return [r.key for r in diff_runs(list(two_runs), list(only)).rows]

    assert keys("a-right-b-wrong") == ["q2#0"]
    assert keys("b-right-a-wrong") == []
    assert keys("differ") == ["q2#0", "q3#0"]  # q4/q5: only one run present, nothing to disagree with
    assert keys("same") == ["q1#0"]
    assert keys("unmatched") == ["q4#0", "q5#0"] and keys("b-absent") == ["q4#0"]
    assert keys("a-right-b-wrong", "a-right-b-abstained") == ["q2#0", "q3#0"]  # repeated: or
    assert keys("A_right-differ") == ["q2#0", "q3#0"]
    for bad in ("c-right", "a-good", "a", "right-b", ""):
        with pytest.raises(ValueError, match="--only"):
            RowFilter.parse(bad, ["A", "B"])


def test_outcomes_are_the_stored_scoring_not_a_new_one(tmp_path):
    """Multi-turn: the report's early stop makes B's right third turn a miss; without report.json the trace's
    score counts, and the run says so."""
    idk = trace("a", "u", 0, "I don't know", "I don't know", [])  # the trace says missing; the report counts
    a = write_run(tmp_path, "a", [*(trace("a", "c", i, "x", "x", []) for i in range(3)), idk])  # it correct too
    b_turns = [trace("b", "c", 0, "no", "x", []), trace("b", "c", 1, "no", "x", []), trace("b", "c", 2, "x", "x", [])]
    b = write_run(tmp_path, "b", b_turns)
    rep = json.loads((b / "report.json").read_text())
    assert rep["turns"][2]["early_stopped"] and rep["turns"][2]["result"] == "missing"  # what the mode counted
    row = {r.key: r for r in diff_runs([a, b]).rows}["c#2"]
    assert row.outcome("B") == "abstained" and row.sides["B"].early_stopped and row.sides["B"].score == "missing"
    u = {r.key: r for r in diff_runs([a, b]).rows}["u#0"].sides["A"]
    assert (idk.score, u.outcome, u.also_missing) == ("missing", "right", True)
    assert any("A: 1 question(s) right here are also counted missing" in n for n in diff_runs([a, b]).notes)
    (b / "report.json").unlink()
    d = diff_runs([a, b])
    assert {r.key: r for r in d.rows}["c#2"].outcome("B") == "right"
    assert "no report.json" in d.runs[1].scoring and any("differ in scoring" in n for n in d.notes)


def test_cli_text_json_and_errors(two_runs, tmp_path, capsys):
    a, b = two_runs
    assert diff_main([str(a), str(b), "--only", "a-right-b-wrong"]) == 0
    out = capsys.readouterr().out
    assert "A alpha" in out and "B beta" in out and "only in A: 1 question(s)" in out
    assert "1 question(s) matching a-right-b-wrong" in out and "q2#0" in out and "q3#0" not in out.split("matching")[1]
    assert "'Boeing'" in out and "tools: image_search, web_search" in out
    assert diff_main([str(a), str(b), "--json"]) == 0
    d = RunDiff.model_validate_json(capsys.readouterr().out)
    assert d.shown == 5 and d.runs[1].common.wrong == 1
    assert diff_main([str(a)]) == 2 and "two runs or more" in capsys.readouterr().err
    assert diff_main([str(a), str(tmp_path / "nope")]) == 2 and "no such folder" in capsys.readouterr().err
    assert diff_main([str(a), str(b), "--only", "a-great"]) == 2 and "cannot read 'great'" in capsys.readouterr().err
    res = subprocess.run(
        [sys.executable, "-m", "glasses_rag.frontends.diff", str(a), str(b), "--only", "differ"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0 and "2 question(s) matching differ" in res.stdout, res.stderr


def test_compare_without_annotations_says_so_and_points_to_the_diff(two_runs, capsys):
    assert cmp.main(["--run", str(two_runs[0]), "--no-embed"]) == 2
    err = capsys.readouterr()
    assert (
        "no annotated trajectory" in err.err
        and "python -m glasses_rag.frontends.diff" in err.err
        and "n/a" not in err.out
    )
    assert cmp.main(["--run", str(two_runs[0].parent), "--no-embed"]) == 2  # a folder of runs
    assert "holds no turn trace (a folder of runs?)" in capsys.readouterr().err


# ---- a presets folder, made by benchmarks.presets on the demo -------------------------------------------------


@pytest.fixture(scope="module")
def presets_folder(tmp_path_factory) -> Path:
    from benchmarks.presets import main

    out = tmp_path_factory.mktemp("presets")
    argv = [
        "--task",
        "2",
        "--limit",
        "3",
        "--presets",
        "rule,no-retrieval",
        "--out",
        str(out),
        "--run-id",
        "bench",
        "--no-progress",
        "--no-chart",
        "--same-process",
    ]
    assert main(argv) == 0
    return out / "bench"


def test_a_presets_folder_is_its_runs_in_presets_order(presets_folder, capsys):
    (presets_folder / "zz-not-a-run").mkdir(exist_ok=True)
    assert [p.name for p in find_runs(presets_folder)] == ["rule", "no-retrieval"]  # presets.json's order
    d = diff_runs([presets_folder])
    assert [r.name for r in d.runs] == ["rule", "no-retrieval"] and d.common == 3 and not d.only_in
    assert all(r.policy.startswith(f"preset:{r.name}") and r.benchmark == "crag-mm" for r in d.runs)
    for row in d.rows:  # each run's outcome is what its report.json counted
        for r in d.runs:
            rep = json.loads((Path(r.path) / "report.json").read_text())
            counted = {(t["session_id"], t["turn_index"]): t["result"] for t in rep["turns"]}
            want = {"correct": "right", "incorrect": "wrong", "missing": "abstained"}[
                counted[(row.session_id, row.turn_index)]
            ]
            assert row.outcome(r.letter) == want
    assert all(not s.tools for r in d.rows for s in [r.sides["B"]])  # no-retrieval calls no tool
    assert diff_main([str(presets_folder)]) == 0
    assert "A rule" in capsys.readouterr().out


def test_viewer_on_a_presets_folder_writes_the_diff_and_each_runs_page(presets_folder, capsys):
    assert viewer_main([str(presets_folder), "--no-images"]) == 0
    assert "the diff of the 2 runs" in capsys.readouterr().out
    html = (presets_folder / "index.html").read_text()
    assert html.count('<tr class="qrow"') == 3 and "Run diff: A rule · B no-retrieval" in html
    for name in ("rule", "no-retrieval"):
        assert (presets_folder / name / "index.html").is_file() and f'href="{name}/index.html#turn-' in html


@pytest.mark.skipif(not CHROMIUM.exists(), reason="/usr/bin/chromium is absent (apt-get install -y chromium)")
def test_headless_chromium_filters_the_diff_page(two_runs, tmp_path):
    a, b = two_runs
    page = tmp_path / "diff.html"
    assert diff_main([str(a), str(b), "--html", str(page), "--only", "a-right-b-wrong"]) == 0
    base = [str(CHROMIUM), *FLAGS, f"--user-data-dir={tmp_path / 'profile'}"]
    r = subprocess.run([*base, "--dump-dom", page.resolve().as_uri()], capture_output=True, text=True, timeout=90)
    body = re.search(r"<body[^>]*>", r.stdout)
    assert body is not None, r.stderr[-2000:]
    # the page holds every question; its controls start at the CLI's filter and its script applied it
    assert r.stdout.count('<tr class="qrow') == 5 and 'data-ready="1"' in body.group(0)
    assert 'data-shown="1"' in body.group(0) and "1 of 5 question(s) shown" in r.stdout
    shown = [
        m for m in re.findall(r'<tr class="qrow( hidden)?"[^>]*data-a="(\w+)" data-b="(\w+)"', r.stdout) if not m[0]
    ]
    assert shown == [("", "right", "wrong")]
    assert 'data-pwned="' not in r.stdout and "<script>document" not in page.read_text()  # question text escaped
    shot = tmp_path / "shot.png"
    subprocess.run(
        [*base, f"--screenshot={shot}", "--window-size=1200,900", page.resolve().as_uri()],
        capture_output=True,
        text=True,
        timeout=90,
    )
    with Image.open(shot) as im:
        px = np.asarray(im.convert("RGB"), dtype=np.float32)
    assert px.std() > 20 and px[:40].mean() < 100  # not blank; the dark header on top


# ---- SuperGlasses runs -----------------------------------------------------------------------------------------


def test_superglasses_runs_use_the_superglasses_judges_score(tmp_path, monkeypatch, capsys):
    from sg_support import FixtureWeb, article, small_dataset, use_fixture_web

    from glasses_rag.frontends import run as cli

    data = small_dataset(tmp_path / "sg")
    with FixtureWeb(image_dir=tmp_path / "img") as web:
        web.pages["f9"] = ("text/html", article("Falcon 9", ["Falcon 9 is a rocket made by SpaceX."]))
        web.lens = {"knowledge_graph": [{"title": "Falcon 9", "subtitle": "Rocket", "link": web.page_url("f9")}]}
        use_fixture_web(monkeypatch, web, tmp_path / "cache", tmp_path / "img")
        for run_id, extra in (("sg-rule", []), ("sg-none", ["--preset", "no-retrieval"])):
            assert (
                cli.main(
                    [
                        "--benchmark",
                        "superglasses",
                        "--data",
                        str(data),
                        "--out",
                        str(tmp_path / "runs"),
                        "--run-id",
                        run_id,
                        "--no-progress",
                        "--no-plot",
                        "--tokenizer",
                        "approx",
                        *extra,
                    ]
                )
                == 0
            )
    capsys.readouterr()
    runs = [tmp_path / "runs" / "sg-rule", tmp_path / "runs" / "sg-none"]
    d = diff_runs(runs)
    assert d.common == 4 and all(r.benchmark == "superglasses" and "SuperGlasses judge" in r.scoring for r in d.runs)
    for r in d.runs:
        scores = {
            (t.session_id, t.turn_index): t.score
            for t in (TurnTrace.model_validate_json(p.read_text()) for p in Path(r.path).glob("*__*.json"))
        }
        for row in d.rows:
            assert row.sides[r.letter].score == scores[(row.session_id, row.turn_index)]
    assert {row.outcome("B") for row in d.rows} == {"abstained"}  # no retrieval offline: "I don't know"
    assert any(row.sides["A"].tools for row in d.rows) and not any(row.sides["B"].tools for row in d.rows)
    assert diff_main([*map(str, runs), "--only", "b-abstained"]) == 0
    assert "4 question(s) matching b-abstained" in capsys.readouterr().out
