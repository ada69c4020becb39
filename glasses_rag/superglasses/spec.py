"""SuperGlasses as an evaluated benchmark: its `Benchmark` (glasses_rag.evaluation), read by the harness, the command
line and the viewer (`python -m graph.run --benchmark superglasses --data sample`).

One task (single-turn questions with web search allowed, run as task 2) over a local copy of `xandery/SuperGlasses`
or the offline sample; the open-web tools and no local index; photos at their own size; each answer judged whole by
the paper's judge (Fig. 16) or its offline stand-in, and accuracy reported by the paper's slices
(glasses_rag.superglasses.evaluate), with the run's traces as SuperGlasses search logs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from glasses_rag.crag_mm.spec import CragMMScorer, eval_report
from glasses_rag.evaluation import Benchmark, DataRequest, PreparedData, ReportView, RunReport, ScoringOptions
from tools.registry import OPEN_WEB, ToolProfile
from traces.schema import TurnTrace

NEEDS_DATA = (
    "--benchmark superglasses needs --data: 'sample' (the offline sample, built on first use), a local copy of "
    "xandery/SuperGlasses (folder of its parquet files) or the dataset id when it is in the Hugging Face cache"
)


def prepare(req: DataRequest) -> PreparedData:
    """`--data sample`: the offline sample, written on first use beside the demo (data/superglasses-sample); any
    other `--data` is a copy of the dataset, read as it is."""
    from glasses_rag.superglasses.sample import SAMPLE_NAMES, ensure_sample

    if req.data in SAMPLE_NAMES:
        from glasses_rag.crag_mm.demo import demo_paths

        return PreparedData(source=str(ensure_sample(demo_paths(req.demo_dir).root.parent / "superglasses-sample")))
    return PreparedData(source=req.data)


def load(source: str, req: DataRequest) -> Any:
    """SuperGlasses rows as one-turn conversations (glasses_rag.superglasses.loader)."""
    from glasses_rag.superglasses.loader import load_superglasses

    return load_superglasses(source, limit=req.limit, image_root=req.image_root)


def recognizes(data: str) -> bool:
    from glasses_rag.superglasses.loader import looks_like_superglasses

    return looks_like_superglasses(data)


class SuperGlassesScorer(CragMMScorer):
    """The SuperGlasses judge on the whole answer (no 75-token cut); later turns see answers as CRAG-MM's do."""

    def make_judge(self, opts: ScoringOptions, api_key: str | None) -> Any:
        from glasses_rag.superglasses.evaluate import make_superglasses_judge

        return make_superglasses_judge(opts.judge, api_key=api_key)

    def describe(self) -> str:
        return f"{self.judge_name}; scoring: SuperGlasses accuracy (whole answer judged)"

    def __call__(self, trace: TurnTrace) -> TurnTrace:
        from glasses_rag.superglasses.evaluate import score_superglasses

        s = score_superglasses(trace.question, trace.answer, trace.ground_truth or "", self.judge)  # scored with one
        trace.score, trace.judge = s.result, s.judge
        return trace


def report(records: list[Any], scorer: Any, run_dir: Path) -> RunReport:
    """Its own sliced report and the search logs only (the CRAG-MM table would name metrics it is not scored by);
    the CRAG-MM report is still returned, for callers that tabulate any run alike (benchmarks.presets)."""
    from glasses_rag.superglasses import evaluate as sge
    from glasses_rag.superglasses.logs import read_run

    sg_report, sg_logs = sge.evaluate_superglasses(read_run(run_dir), scorer.judge_name)
    files = sge.write_superglasses_report(sg_report, sg_logs, run_dir)
    return RunReport(data=eval_report(records, scorer), files=files, text=sge.format_superglasses(sg_report))


def plot(rep: RunReport, run_dir: Path) -> Path:
    """superglasses_accuracy.png, from the report written."""
    from glasses_rag.superglasses import evaluate as sge

    sg_report = sge.SuperGlassesReport.model_validate_json((run_dir / "superglasses_report.json").read_text("utf-8"))
    return sge.plot_superglasses(sg_report, run_dir / "superglasses_accuracy.png")


def header() -> list[str]:
    from glasses_rag.superglasses.evaluate import open_web_line

    return [f"web:    {open_web_line()}"]


def run_figures() -> dict[str, Any]:
    from glasses_rag.superglasses.evaluate import open_web_stats

    return {"web_cache": open_web_stats()}


BENCHMARK = Benchmark(
    name="superglasses",
    title="SuperGlasses",
    tasks={2: "single-turn, image + open web"},
    default_task=2,
    heading="{title} ({what})",
    run_name="superglasses",
    tools=ToolProfile(name="superglasses", allows=frozenset({OPEN_WEB})),
    search="none",
    search_note="no local index: the open-web tools search the web",
    image_prep="native",
    data_help=NEEDS_DATA,
    prepare=prepare,
    load=load,
    recognizes=recognizes,
    scorer=SuperGlassesScorer,
    report=report,
    plot=plot,
    header=header,
    run_figures=run_figures,
    viewer=ReportView(file="superglasses_report.json", layout="sliced", title="SuperGlasses accuracy"),
)
