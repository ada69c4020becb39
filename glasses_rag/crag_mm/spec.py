"""CRAG-MM as an evaluated benchmark: its `Benchmark` (glasses_rag.evaluation), read by the harness, the command line
and the viewer (`python -m graph.run --task {1,2,3}`).

Its data is a question set built from content (the bundled demo by default: glasses_rag.crag_mm.content, demo.py)
with the local index it comes with, or a CRAG-MM dataset; each turn is scored as the official evaluation of the
chosen mode (glasses_rag.crag_mm.scoring) and the run reports truthfulness by slice (glasses_rag.crag_mm.evaluate).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from glasses_rag.evaluation import Benchmark, DataRequest, PreparedData, ReportView, RunReport, ScoringOptions
from graph.config import DEFAULT_TOOL_PROFILE
from traces.schema import TurnTrace

# which of a question set's datasets a task reads
TASK_DATA = {1: "single_turn", 2: "single_turn", 3: "multi_turn"}


def prepare(req: DataRequest) -> PreparedData:
    """`--data` naming question-set content (bundled: demo, demo-paraphrase, heldout, ...; or a folder with a
    content.yaml): its dataset and local index built once (the demo under data/demo or --demo-dir, the others
    beside it). Any other `--data` is a CRAG-MM dataset (a folder of parquet/arrow files, or a cached name), read as
    it is. The demo's index is the benchmark's default one (`default_index`), not named in the configuration."""
    from glasses_rag.crag_mm.builds import content_build, ensure_dataset
    from glasses_rag.crag_mm.content import find_content, load_content
    from glasses_rag.crag_mm.demo import demo_paths, ensure_demo

    if req.data == "demo":
        built = ensure_demo(req.demo_dir)
        return PreparedData(source=task_data(built.root, req.task))
    folder = find_content(req.data)
    if folder is None:
        return built_question_set(req)
    built = ensure_dataset(load_content(folder), content_build(folder, demo_paths(req.demo_dir).root.parent))
    return PreparedData(source=task_data(built.root, req.task), index_dir=built.root)


def task_data(root: Path, task: int | None) -> str:
    """The dataset folder of a built question set that `task` reads; a one-line error when the set has none (a
    set without multi-turn conversations, run with task 3)."""
    folder = root / TASK_DATA[task or 1]
    if not folder.is_dir():
        kind = "multi-turn conversations" if TASK_DATA[task or 1] == "multi_turn" else "single-turn questions"
        raise ValueError(f"the question set at {root} has no {kind}: task {task} reads them ({folder} is not there)")
    return str(folder)


def built_question_set(req: DataRequest) -> PreparedData:
    """`--data` naming a question set built before, by its root or by one of its dataset folders: the task's
    folder (or the one named) with the set's own index (the demo's is the default one); anything else as it is."""
    from glasses_rag.crag_mm.builds import question_set_root
    from glasses_rag.crag_mm.demo import demo_paths

    root = question_set_root(req.data or "")
    if root is None:
        return PreparedData(source=req.data or "")
    source = task_data(root, req.task) if Path(req.data or "") == root else req.data or ""
    own = root.resolve() != demo_paths(req.demo_dir).root.resolve()
    return PreparedData(source=source, index_dir=root if own else None)


def default_index(req: DataRequest) -> Path:
    """The demo's index (built unless up to date): what a CRAG-MM run searches when it names no index."""
    from glasses_rag.crag_mm.demo import ensure_demo

    return ensure_demo(req.demo_dir).root


def load(source: str, req: DataRequest) -> Any:
    """The conversations of a CRAG-MM dataset, streamed (glasses_rag.crag_mm.dataset)."""
    from glasses_rag.crag_mm.dataset import load_conversations

    return load_conversations(source, split=req.split, limit=req.limit, image_root=req.image_root)


class CragMMScorer:
    """Each turn scored as the official evaluation of the chosen mode: the judge, the 75-token truncation (which is
    also what later turns see of an answer)."""

    def __init__(self, opts: ScoringOptions):
        from glasses_rag.crag_mm.scoring import make_truncator

        self.mode = opts.scoring_mode
        self.judge = self.make_judge(opts, os.environ.get(opts.judge_api_key_env))
        self.truncator = make_truncator(opts.tokenizer)
        self.judge_name: str = getattr(self.judge, "name", "exact-match only")
        self.truncation: str = self.truncator.name

    def make_judge(self, opts: ScoringOptions, api_key: str | None) -> Any:
        from glasses_rag.crag_mm.scoring import make_judge

        return make_judge(opts.judge, mode=opts.scoring_mode, api_key=api_key)

    def describe(self) -> str:
        return f"{self.judge_name}; scoring: {self.mode}; truncation: {self.truncator.name}"

    def __call__(self, trace: TurnTrace) -> TurnTrace:
        from glasses_rag.crag_mm.scoring import score_trace

        return score_trace(trace, judge=self.judge, truncator=self.truncator, mode=self.mode)

    def history_answer(self, answer: str) -> str:
        return self.truncator.truncate(answer)


def eval_report(records: list[Any], scorer: Any) -> Any:
    """CRAG-MM's report (EvalReport) over the turns' compact records, as the run's scorer counted them."""
    from glasses_rag.crag_mm.evaluate import evaluate

    return evaluate(records, judge=scorer.judge, truncator=scorer.truncator, mode=scorer.mode)


def report(records: list[Any], scorer: Any, run_dir: Path) -> RunReport:
    """report.json and report.txt (the chart comes after the run's summary: `plot`)."""
    from glasses_rag.crag_mm.evaluate import format_table, write_report

    rep = eval_report(records, scorer)
    return RunReport(data=rep, files=write_report(rep, run_dir, plot=False), text=format_table(rep))


def plot(rep: RunReport, run_dir: Path) -> Path:
    """truthfulness_by_slice.png."""
    from glasses_rag.crag_mm.evaluate import plot_report

    return plot_report(rep.data, run_dir / "truthfulness_by_slice.png")


BENCHMARK = Benchmark(
    name="crag-mm",
    title="CRAG-MM",
    tasks={
        1: "single-turn, image-KG search only",
        2: "single-turn, image-KG + web search",
        3: "multi-turn, image-KG + web search",
    },
    tools=DEFAULT_TOOL_PROFILE,  # its search API (the local index or the official pipeline), never the open web
    data="demo",
    prepare=prepare,
    load=load,
    default_index=default_index,
    scorer=CragMMScorer,
    report=report,
    plot=plot,
    viewer=ReportView(file="report.json", layout="eval-report"),
)
