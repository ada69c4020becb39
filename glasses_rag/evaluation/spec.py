"""`Benchmark`: everything the harness, the command line and the viewer need to know about one evaluated benchmark.

A benchmark is one package that exposes a `Benchmark` (as inspect_ai's `Task(dataset, solver, scorer)`): its tasks,
the tools its rules allow (a `tools.registry.ToolProfile`), how its data is prepared and read as conversations, how
each turn is scored, the report it writes and how the viewer shows that report. The harness never names a benchmark:
it looks the spec up by name (`python -m graph.run --benchmark NAME`) in `glasses_rag.harness.benchmarks`, where each
package is one line and a module of your own is added with `--benchmark-module MODULE`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, model_validator

from glasses_rag.core.images import ImagePrep
from glasses_rag.retrieval.schema import Conversation
from tools.registry import ToolProfile
from traces.schema import TurnTrace


class DataRequest(BaseModel):
    """What a run asks of a benchmark's data: the command line's data options."""

    model_config = ConfigDict(extra="forbid")

    data: str = Field(description="--data: a dataset (folder or name) or a name the benchmark knows ('demo').")
    task: int | None = Field(None, description="The run's task (None when only reading, e.g. the viewer).")
    split: str | None = None
    limit: int | None = Field(None, ge=1, description="The first N conversations only.")
    image_root: Path | None = Field(None, description="A folder image paths may also point into (--image-root).")
    demo_dir: Path | None = Field(
        None, description="Where bundled data is built (--demo-dir; default data/demo, other sets beside it)."
    )


class PreparedData(BaseModel):
    """A benchmark's data, ready to read: where its conversations are, and the local index they come with."""

    model_config = ConfigDict(extra="forbid")

    source: str = Field(description="What `Benchmark.load` reads (a dataset folder or name); run.json's 'data'.")
    index_dir: Path | None = Field(
        None,
        description="The local search index this data comes with: searched unless the run names another, and named "
        "in the run's configuration (run.json shows it).",
    )


class ScoringOptions(BaseModel):
    """The command line's scoring options, as a benchmark's scorer is built from them (also in worker processes)."""

    model_config = ConfigDict(extra="forbid")

    judge: str = "rule"
    judge_api_key_env: str = "OPENAI_API_KEY"
    scoring_mode: str = "kddcup2025"
    tokenizer: str | None = None


@runtime_checkable
class RunScorer(Protocol):
    """Scores each finished turn and says how (built once per run, and once per worker process).

    Attributes:
        judge: the judge object (an LLM judge's model server is checked before the first turn), or None.
        judge_name: the judge as the header and run.json name it.
        truncation: what later turns see of an answer, by name (run.json's 'truncation').
    """

    judge: Any
    judge_name: str
    truncation: str

    def describe(self) -> str: ...  # the header's "judge:" line

    def __call__(self, trace: TurnTrace) -> TurnTrace: ...  # the trace with its `score` (and `judge`) set

    def history_answer(self, answer: str) -> str: ...  # what later turns of the conversation see of `answer`


class RunReport(BaseModel):
    """What a benchmark's report step wrote: the report itself, its files and the text the run prints."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    data: Any = Field(description="The report (CRAG-MM's EvalReport for both built-in benchmarks: tables over runs).")
    files: dict[str, Path] = Field(default_factory=dict, description="Name -> file written into the run folder.")
    text: str = Field("", description="Printed after the run's summary.")


class ReportView(BaseModel):
    """How the viewer shows a run's report: which file, and in which layout."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    file: str = Field("report.json", description="The report file in the run folder.")
    layout: Literal["eval-report", "sliced"] = Field(
        "eval-report",
        description="'eval-report': glasses_rag.crag_mm.evaluate.EvalReport (truthfulness, its slices, each turn "
        "counted); 'sliced': {'overall': {metric: number}, 'slices': {slice: {value: {metric: number}}}, 'judge', "
        "'notes'}, each metric a column.",
    )
    title: str = Field("", description="The first row's label in a 'sliced' table ('SuperGlasses accuracy').")


class Benchmark(BaseModel):
    """One evaluated benchmark, as the harness, the command line and the viewer read it.

    Example (a benchmark of one task with no search, scored by exact match; tests/test_toy_benchmark.py runs a
    whole one through `python -m graph.run --benchmark-module`)::

        BENCHMARK = Benchmark(
            name="toy", title="Toy", tasks={1: "one question, no search"}, default_task=1,
            tools=ToolProfile(name="toy", allows=frozenset()), search="none", data="toy",
            prepare=lambda req: PreparedData(source=req.data), load=lambda source, req: CONVERSATIONS,
            scorer=ExactMatch, report=write_toy_report,
        )
    """

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]*$", description="--benchmark NAME; run.json's 'benchmark'.")
    title: str = Field(min_length=1, description="How messages name it ('CRAG-MM').")
    tasks: dict[int, str] = Field(min_length=1, description="Its tasks: number -> what a turn of it is.")
    default_task: int | None = Field(None, description="The task a run gets without --task (None: --task required).")
    heading: str = Field(
        "task {task} ({what})", description="The run header's first words; {task}, {what} and {title} filled in."
    )
    run_name: str = Field("task{task}", description="A run folder's name before its timestamp; {task} filled in.")
    tools: ToolProfile = Field(description="The tools its rules allow (by what they reach).")
    search: Literal["local", "cragmm", "none"] = Field("local", description="The search backend a run gets.")
    search_note: str | None = Field(
        None, description="Shown after 'none' on the header's search line when a run searches no backend."
    )
    image_prep: ImagePrep = Field("harness", description="How photos are prepared: resized as the official harness.")
    data: str | None = Field(None, description="--data's default (None: --data is required, see data_help).")
    data_help: str = Field("", description="The error when a run gives no --data and there is no default.")
    prepare: Callable[[DataRequest], PreparedData] = Field(
        description="Builds or locates the data once (never inside an agent); returns where it is."
    )
    load: Callable[[str, DataRequest], Iterable[Conversation]] = Field(
        description="The conversations of a prepared source, read lazily (also by the viewer, for the photos)."
    )
    default_index: Callable[[DataRequest], Path] | None = Field(
        None,
        description="The local index a run searches when neither its data nor its options name one (CRAG-MM: the "
        "demo's, built on first use), handed to build_agent as its default (the configuration names none).",
    )
    recognizes: Callable[[str], bool] | None = Field(
        None, description="Is this data in the benchmark's own layout? (another benchmark's run then says so)"
    )
    scorer: Callable[[ScoringOptions], RunScorer] = Field(description="Builds the run's per-turn scorer.")
    report: Callable[[list[Any], RunScorer, Path], RunReport] = Field(
        description="Writes the report into the run folder from the turns' compact records "
        "(glasses_rag.crag_mm.evaluate.TurnRecord, one per turn)."
    )
    plot: Callable[[RunReport, Path], Path] | None = Field(None, description="Draws the run's chart (no --no-plot).")
    header: Callable[[], list[str]] | None = Field(None, description="More run header lines (where the web is).")
    run_figures: Callable[[], dict[str, Any]] | None = Field(
        None, description="More figures for the finished run.json (the open-web cache's)."
    )
    viewer: ReportView = Field(default_factory=ReportView)

    @model_validator(mode="after")
    def _consistent(self) -> Benchmark:
        if any(t < 1 for t in self.tasks):
            raise ValueError(f"tasks are numbered from 1, not {sorted(self.tasks)}")
        if self.default_task is not None and self.default_task not in self.tasks:
            raise ValueError(f"default_task {self.default_task} is not one of its tasks {sorted(self.tasks)}")
        if self.data is None and not self.data_help:
            raise ValueError("a benchmark without a default data says what --data takes (data_help)")
        return self

    def task_text(self, task: int) -> str:
        """The run header's first words for `task`."""
        return self.heading.format(task=task, what=self.tasks.get(task, "?"), title=self.title)

    def task_list(self) -> str:
        """'1, 2 or 3'."""
        names = [str(t) for t in sorted(self.tasks)]
        return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
