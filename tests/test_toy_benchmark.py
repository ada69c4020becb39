"""A benchmark of one's own, in this one file, with no edit anywhere else: a handful of conversations, its own
scoring and its own report. `python -m graph.run --benchmark-module test_toy_benchmark --benchmark toy` runs it
(tools as its profile allows, scored, its report written) and `python -m glasses_rag.frontends.viewer` renders it.

This module is both the benchmark (`BENCHMARK`, imported by the subprocesses) and its tests.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from PIL import Image

from glasses_rag.evaluation import Benchmark, DataRequest, PreparedData, ReportView, RunReport, ScoringOptions
from glasses_rag.retrieval.schema import Conversation, Turn
from tools.registry import ToolProfile
from traces.schema import TurnTrace

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
IDK = "I don't know"


def _jpeg(color: tuple[int, int, int]) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (64, 48), color).save(buf, format="JPEG")
    return buf.getvalue()


# (session, question, ground truth, kind, photo colour or None)
QUESTIONS = [
    ("toy-0", "what colour is this card?", "red", "colour", (200, 30, 30)),
    ("toy-1", "what colour is this card?", "blue", "colour", (30, 30, 200)),
    ("toy-2", "who will win the next world cup?", IDK, "unknowable", None),
    ("toy-3", "how many moons does Mars have?", "two", "fact", None),
]


def conversations(req: DataRequest) -> list[Conversation]:
    rows = [
        Conversation(
            session_id=sid,
            image=_jpeg(colour) if colour else None,
            turns=[Turn(interaction_id=f"{sid}-t0", query=q, labels={"kind": kind})],
            answers=[truth],
        )
        for sid, q, truth, kind, colour in QUESTIONS
    ]
    return rows[: req.limit] if req.limit else rows


class ExactMatch:
    """Its own scoring: the answer equal to the ground truth (case and spaces aside) is correct, "I don't know"
    is missing, anything else incorrect; the whole answer is judged, and later turns see it whole."""

    judge = None
    judge_name = "toy exact match"
    truncation = "none"

    def __init__(self, opts: ScoringOptions):
        self.opts = opts

    def describe(self) -> str:
        return "toy exact match (the whole answer)"

    def __call__(self, trace: TurnTrace) -> TurnTrace:
        said, truth = " ".join(trace.answer.lower().split()), " ".join((trace.ground_truth or "").lower().split())
        trace.score = "correct" if said == truth else "missing" if trace.abstained else "incorrect"
        trace.judge = self.judge_name
        return trace

    def history_answer(self, answer: str) -> str:
        return answer


def report(records: list[Any], scorer: Any, run_dir: Path) -> RunReport:
    """toy_report.json (overall and by kind, in the viewer's 'sliced' layout) and toy_report.txt."""

    def stats(rs: list[Any]) -> dict[str, Any]:
        n, correct = len(rs), sum(r.result == "correct" for r in rs)
        missing = sum(r.result == "missing" for r in rs)
        return {"n": n, "correct": correct, "missing": missing, "accuracy": round(correct / n, 4) if n else 0.0}

    kinds = sorted({r.labels.get("kind", "?") for r in records})
    rep = {
        "overall": stats(records),
        "slices": {"kind": {k: stats([r for r in records if r.labels.get("kind") == k]) for k in kinds}},
        "judge": scorer.judge_name,
        "judge_note": "exact match of the whole answer",
        "notes": ["a toy: four questions, no search"],
    }
    text = f"toy accuracy: {rep['overall']['correct']}/{rep['overall']['n']}"
    files = {"toy_json": run_dir / "toy_report.json", "toy_txt": run_dir / "toy_report.txt"}
    files["toy_json"].write_text(json.dumps(rep, indent=2), encoding="utf-8")
    files["toy_txt"].write_text(text + "\n", encoding="utf-8")
    return RunReport(data=rep, files=files, text=text)


BENCHMARK = Benchmark(
    name="toy",
    title="Toy",
    tasks={1: "one photo or none, one question, no search"},
    default_task=1,
    heading="{title} ({what})",
    run_name="toy",
    tools=ToolProfile(name="toy", allows=frozenset()),  # the tools that work on the turn alone
    search="none",
    image_prep="native",
    data="toy",
    prepare=lambda req: PreparedData(source=req.data),
    load=lambda source, req: conversations(req),
    scorer=ExactMatch,
    report=report,
    viewer=ReportView(file="toy_report.json", layout="sliced", title="Toy accuracy"),
)


# ---- the tests ------------------------------------------------------------------------------------------------


def _python(*argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, *argv], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False
    )


def test_a_benchmark_of_ones_own_runs_is_scored_reports_and_renders(tmp_path):
    run = _python(
        "-m", "graph.run", "--benchmark-module", "test_toy_benchmark", "--benchmark", "toy",
        "--out", str(tmp_path), "--run-id", "toy", "--no-progress",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    folder = tmp_path / "toy"
    assert run.stdout.startswith("Toy (one photo or none, one question, no search) on toy: ")
    manifest = json.loads((folder / "run.json").read_text())
    assert manifest["benchmark"] == "toy" and manifest["task"] == 1 and manifest["status"] == "finished"
    assert manifest["config"]["tools"]["profile"] == "toy" and manifest["judge"] == "toy exact match"
    assert manifest["tools"] and not {"image_search", "web_search", "google_search", "google_lens"} & set(
        manifest["tools"]
    )  # only what its profile allows: tools that reach no search
    traces = {t["session_id"]: t for t in (json.loads(p.read_text()) for p in folder.glob("*__*.json"))}
    assert sorted(traces) == ["toy-0", "toy-1", "toy-2", "toy-3"]
    assert all(
        t["score"] in ("correct", "missing", "incorrect") and t["judge"] == "toy exact match" for t in traces.values()
    )
    assert traces["toy-2"]["score"] == "correct"  # "I don't know" is this question's ground truth
    rep = json.loads((folder / "toy_report.json").read_text())
    assert rep["overall"]["n"] == 4 and rep["overall"]["correct"] == sum(
        t["score"] == "correct" for t in traces.values()
    )
    assert f"toy accuracy: {rep['overall']['correct']}/4" in run.stdout
    assert not (folder / "report.json").exists()  # its own report only

    view = _python("-m", "glasses_rag.frontends.viewer", str(folder), "--benchmark-module", "test_toy_benchmark")
    assert view.returncode == 0, view.stderr[-3000:]
    page = (folder / "index.html").read_text(encoding="utf-8")
    assert "Toy accuracy" in page and "<th>unknowable</th>" in page and "no report.json" not in page
    assert page.count("background-image:url(data:image/jpeg;base64,") == 2  # its photos, read as it reads its data


def test_without_its_module_the_benchmark_is_unknown_and_the_viewer_says_so(tmp_path):
    run = _python("-m", "graph.run", "--benchmark", "toy", "--out", str(tmp_path), "--no-progress")
    assert run.returncode == 2 and "invalid choice: 'toy'" in run.stderr
    folder = tmp_path / "toy"
    folder.mkdir()
    (folder / "run.json").write_text(json.dumps({"run_id": "toy", "benchmark": "toy", "data": "toy"}))
    from glasses_rag.frontends.viewer import build_html

    page = build_html(folder, images={})
    assert "names the benchmark &#39;toy&#39;, which is not known here: --benchmark-module MODULE adds it" in page
    assert "no toy_report.json" in build_html(folder, images={}, modules=["test_toy_benchmark"])


def test_its_one_task_is_named_by_task_and_a_task_it_lacks_is_a_usage_error(capsys):
    import pytest

    from glasses_rag.frontends.run import build_parser, resolve_benchmark

    p = build_parser(["test_toy_benchmark"])
    args = resolve_benchmark(p, p.parse_args(["--benchmark-module", "test_toy_benchmark", "--task", "toy"]))
    assert (args.benchmark, args.task, args.data, args.search, args.image_prep) == ("toy", 1, "toy", "none", "native")
    with pytest.raises(SystemExit):
        resolve_benchmark(
            p, p.parse_args(["--benchmark-module", "test_toy_benchmark", "--benchmark", "toy", "--task", "3"])
        )
    assert "--task 3: Toy has task 1" in capsys.readouterr().err
