"""Two or more runs side by side on the same questions: what each got right, wrong or abstained on.

A question is one turn, matched across runs by (conversation id, turn index); a question only some runs have is
kept and shown as `absent` in the others. The outcome of a turn is the one the run already stored, never a new
scoring: on a CRAG-MM run the label `report.json` counted (its `turns[].result`, under the report's scoring mode,
after the multi-turn early stop when the mode counts it), on a SuperGlasses run the SuperGlasses judge's score in
the trace; without a readable report.json the trace's own score (said in the run's `scoring` line).
right = correct, wrong = incorrect (a hallucination), abstained = missing ("I don't know", or an early stop).

A folder of runs (`python -m benchmarks.presets` writes one, with presets.json) stands for the runs in it, in the
order presets.json lists them, as `inspect log list` lists the logs in a log folder.

Filters (`RowFilter.parse`): `a-right-b-wrong` (run A right and run B wrong; letters follow the runs' order),
any run letter with right | wrong | abstained | unscored | absent, and the words `differ` (the runs present do not
agree), `same` (every run present and all agree) and `unmatched` (absent from some run), joined by '-'.
"""

from __future__ import annotations

import string
from collections import Counter
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, ValidationError

from glasses_rag.frontends.reading import MAX_JSON_BYTES, read_json, read_text_bounded, read_traces
from traces.schema import TurnTrace

TEXT_CHARS = 1_000  # characters of a question, ground truth or answer a row keeps (100k rows stay small)
MAX_LISTED = 64  # tool calls and error kinds a row lists per turn
Outcome = Literal["right", "wrong", "abstained", "unscored"]
OUTCOMES: tuple[str, ...] = ("right", "wrong", "abstained", "unscored")
FILTER_OUTCOMES: tuple[str, ...] = (*OUTCOMES, "absent")
FILTER_WORDS = ("differ", "same", "unmatched")
_FROM_SCORE: dict[str | None, Outcome] = {"correct": "right", "incorrect": "wrong", "missing": "abstained"}
LETTERS = string.ascii_uppercase


class TurnSide(BaseModel):
    """One run's turn: its outcome and what it cost."""

    outcome: Outcome
    score: str | None = Field(None, description="The stored label the outcome comes from (correct/incorrect/missing).")
    early_stopped: bool = Field(False, description="The multi-turn early stop turned this turn into a miss.")
    also_missing: bool = Field(
        False,
        description="Right, and the official scoring also counts it missing: an 'I "
        "don't know' ground truth answered so (accuracy + missing rate can then exceed 1).",
    )
    answer: str
    tools: list[str] = Field(default_factory=list, description="Tool calls in order (a tool twice is listed twice).")
    model_calls: int = 0
    sequential_calls: int = Field(0, description="Model calls on the turn's critical path.")
    tokens: int = Field(0, description="Prompt + completion tokens the backends reported.")
    latency_ms: float = 0.0
    ended_by: str = ""
    errors: list[str] = Field(default_factory=list, description="Error kinds of the turn's events.")


class DiffRow(BaseModel):
    """One question across the runs; `sides[letter]` is None where that run does not have it."""

    key: str = Field(description="'<conversation id>#<turn index>': what the runs are matched on.")
    session_id: str
    turn_index: int
    interaction_id: str
    question: str
    ground_truth: str | None = None
    sides: dict[str, TurnSide | None]

    def outcome(self, letter: str) -> str:
        side = self.sides.get(letter)
        return "absent" if side is None else side.outcome

    @property
    def differ(self) -> bool:
        return len({s.outcome for s in self.sides.values() if s is not None}) > 1


class RunSummary(BaseModel):
    """A run's outcomes and costs over the questions every run has (so the runs are compared on the same set)."""

    n: int = 0
    right: int = 0
    wrong: int = 0
    abstained: int = 0
    unscored: int = 0
    tool_calls_per_turn: float | None = None
    model_calls_per_turn: float | None = None
    tokens_per_turn: float | None = None
    latency_p50_ms: float | None = None
    latency_p95_ms: float | None = None


class RunInfo(BaseModel):
    letter: str
    name: str
    path: str
    benchmark: str | None = None
    task: int | None = None
    data: str | None = None
    policy: str | None = None
    judge: str | None = None
    scoring: str = Field(description="Where the outcomes come from (report.json and its mode, or the traces).")
    turns: int = Field(0, description="Readable turn traces in the run folder.")
    skipped: list[str] = Field(default_factory=list, description="Trace files that could not be read.")
    common: RunSummary = Field(default_factory=RunSummary)


class PairCounts(BaseModel):
    """Two runs on the questions both have: `table[outcome of a][outcome of b]` = questions."""

    a: str
    b: str
    both: int = 0
    a_right_b_not: int = Field(0, description="a right, b wrong or abstained or unscored")
    b_right_a_not: int = 0
    same: int = 0
    table: dict[str, dict[str, int]] = Field(default_factory=dict)


class RunDiff(BaseModel):
    runs: list[RunInfo]
    rows: list[DiffRow]
    common: int = Field(0, description="Questions every run has.")
    only_in: dict[str, int] = Field(
        default_factory=dict,
        description="Questions absent from at least one run, by the letters of the runs that have them ('A', 'A,C').",
    )
    pairs: list[PairCounts] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list, description="Why the runs may not be comparable.")
    filters: list[str] = Field(default_factory=list, description="The --only filters the rows were cut to.")
    shown: int = 0


class RowFilter(BaseModel):
    """One `--only` filter: every condition must hold."""

    spec: str
    outcomes: dict[str, str] = Field(default_factory=dict, description="run letter -> outcome (or 'absent')")
    words: list[str] = Field(default_factory=list)

    @classmethod
    def parse(cls, spec: str, letters: list[str]) -> RowFilter:
        """`a-right-b-wrong`, `differ`, `b-abstained-differ`, ... (see the module docstring).

        Example: RowFilter.parse("a-right-b-wrong", ["A", "B"]).outcomes == {"A": "right", "B": "wrong"}
        """
        parts, out, words = [p for p in spec.lower().replace("_", "-").split("-") if p], {}, []
        i = 0
        while i < len(parts):
            p = parts[i]
            if p in FILTER_WORDS:
                words.append(p)
                i += 1
            elif p.upper() in letters and i + 1 < len(parts) and parts[i + 1] in FILTER_OUTCOMES:
                out[p.upper()] = parts[i + 1]
                i += 2
            else:
                bad = parts[i + 1] if p.upper() in letters and i + 1 < len(parts) else p
                raise ValueError(
                    f"--only {spec!r}: cannot read {bad!r}; write run letters ({', '.join(letters)}) each followed by "
                    f"{' | '.join(FILTER_OUTCOMES)}, or the words {', '.join(FILTER_WORDS)}, joined by '-' "
                    "(e.g. a-right-b-wrong)"
                )
        if not out and not words:
            raise ValueError(f"--only {spec!r}: empty filter")
        return cls(spec=spec, outcomes=out, words=words)

    def matches(self, row: DiffRow) -> bool:
        if any(row.outcome(k) != v for k, v in self.outcomes.items()):
            return False
        present = [s.outcome for s in row.sides.values() if s is not None]
        checks = {
            "differ": row.differ,
            "unmatched": len(present) < len(row.sides),
            "same": len(present) == len(row.sides) and len(set(present)) == 1,
        }
        return all(checks[w] for w in self.words)


# ---------------------------------------------------------------------------------------------------------------
# Finding and reading runs


def is_run(folder: Path) -> bool:
    return folder.is_dir() and (any(folder.glob("*__*.json")) or (folder / "run.json").is_file())


def find_runs(path: Path) -> list[Path]:
    """`path` itself when it is a run folder, else the run folders right inside it (a presets folder: in
    presets.json's order, then by name)."""
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"no such folder: {path}")
    if is_run(path):
        return [path]
    inside = sorted(p for p in path.iterdir() if is_run(p))
    order = [r.get("label") for r in _json(path / "presets.json").get("presets", []) if isinstance(r, dict)]
    rank = {name: i for i, name in enumerate(order) if isinstance(name, str)}
    return sorted(inside, key=lambda p: (rank.get(p.name, len(rank)), p.name))


def _json(path: Path) -> dict:
    data, _ = read_json(path)
    return data if isinstance(data, dict) else {}


Counted = tuple[str, bool, bool]  # (label report.json counted, early stopped, also counted missing)


def counted_results(run_dir: Path, own_scores: str | None) -> tuple[dict[tuple[str, int], Counted], str]:
    """(session, turn) -> (label report.json counted, early stopped, also missing), and where outcomes come from. Empty
    on a run whose benchmark has a report of its own (`own_scores` says so: SuperGlasses', whose traces hold its
    judge's score) or without a readable report.json."""
    if own_scores is not None:
        return {}, own_scores
    from glasses_rag.crag_mm.evaluate import EvalReport

    path = run_dir / "report.json"
    try:
        rep = EvalReport.model_validate_json(read_text_bounded(path, MAX_JSON_BYTES))
    except (OSError, ValueError, ValidationError) as e:
        why = "no report.json" if isinstance(e, FileNotFoundError) else f"report.json unreadable ({type(e).__name__})"
        return {}, f"each trace's own score ({why})"
    got: dict[tuple[str, int], Counted] = {
        (t.session_id, t.turn_index): (t.result, t.early_stopped, t.result == "correct" and t.is_miss)
        for t in rep.turns
    }
    return got, f"report.json ({rep.mode}; judge {rep.judge})"


def _kept(text: str | None) -> str | None:
    """A question, ground truth or answer as a row keeps it: at most TEXT_CHARS characters (the trace has all)."""
    if text is None or len(text) <= TEXT_CHARS:
        return text
    return text[:TEXT_CHARS] + f"… ({len(text) - TEXT_CHARS:,} more characters in the trace)"


def turn_side(t: TurnTrace, counted: Counted | None) -> TurnSide:
    score, stopped, also_missing = counted if counted is not None else (t.score, False, False)
    return TurnSide(
        outcome=_FROM_SCORE.get(score, "unscored"),
        score=score,
        early_stopped=stopped,
        also_missing=also_missing,
        answer=_kept(t.answer) or "",
        tools=[s.tool for s in t.tool_calls()][:MAX_LISTED],
        model_calls=t.tokens.calls,
        sequential_calls=t.tokens.sequential_calls,
        tokens=t.tokens.prompt_tokens + t.tokens.completion_tokens,
        latency_ms=t.latency_ms,
        ended_by=t.ended_by,
        errors=(t.error_kinds() + (["turn_error"] if t.error else []))[:MAX_LISTED],
    )


Question = tuple[str, str, str | None]  # (interaction id, question, ground truth), as rows show them
Turns = dict[tuple[str, int], tuple[Question, TurnSide]]


def load_run(run_dir: Path, letter: str, name: str) -> tuple[RunInfo, Turns]:
    """A run's header and its turns, keyed by (conversation id, turn index): what a row shows of each, not the
    trace (one trace in memory at a time, however many the run has)."""
    run = _json(run_dir / "run.json")
    counted, scoring = counted_results(run_dir, own_scores(run, run_dir))
    turns: Turns = {}
    skipped: list[str] = []
    first: TurnTrace | None = None
    for path, t, why in read_traces(run_dir):
        if t is None:
            skipped.append(f"{path.name}: {(why or '').split(':')[0]}")
            continue
        first = first or t
        key = (t.session_id, t.turn_index)
        turns[key] = (
            (t.interaction_id, _kept(t.question) or "", _kept(t.ground_truth)),
            turn_side(t, counted.get(key)),
        )
    task = run.get("task", first.task if first else None)
    info = RunInfo(
        letter=letter,
        name=name,
        path=str(run_dir),
        benchmark=run.get("benchmark"),
        task=task if isinstance(task, int) else None,
        data=_str(run.get("data")),
        policy=_str(run.get("policy") or (first.policy if first else None)),
        judge=_str(run.get("judge")),
        scoring=scoring,
        turns=len(turns),
        skipped=skipped,
    )
    return info, turns


def own_scores(run: dict, run_dir: Path) -> str | None:
    """Where a run's outcomes come from when its benchmark has a report of its own rather than CRAG-MM's report.json
    (glasses_rag.evaluation.ReportView): its judge's score in each trace. None for report.json."""
    from glasses_rag.harness.benchmarks import benchmark_for_run, benchmark_registry

    spec = benchmark_for_run(run, run_dir, benchmark_registry())
    if spec is None:
        return f"each trace's own score (benchmark {run.get('benchmark')!r} is not known here)"
    if spec.viewer.layout == "eval-report":
        return None
    return f"the {spec.title} judge's score in each trace (its report: {spec.viewer.file})"


def _str(v: object) -> str | None:
    return None if v is None else str(v)


def run_names(paths: list[Path]) -> list[str]:
    """Each run's folder name; where two share one, with their parent folder's name in front."""
    names = [p.name for p in paths]
    dup = {n for n, c in Counter(names).items() if c > 1}
    return [f"{p.parent.name}/{p.name}" if p.name in dup else p.name for p in paths]


# ---------------------------------------------------------------------------------------------------------------
# The diff


def diff_runs(paths: list[Path], only: list[str] | None = None) -> RunDiff:
    """The runs under `paths` (run folders or folders of runs) side by side; rows cut to the `only` filters
    (a row is kept when any filter matches it; the summaries always cover every question).

    Example: diff_runs([Path("traces/runs/a"), Path("traces/runs/b")], only=["a-right-b-wrong"])
    """
    folders = [r for p in paths for r in find_runs(Path(p))]
    if len(folders) < 2:
        raise ValueError(
            f"a diff needs two runs or more; found {len(folders)} run folder(s) in {', '.join(map(str, paths))}"
        )
    if len(folders) > len(LETTERS):
        raise ValueError(f"at most {len(LETTERS)} runs; found {len(folders)}")
    loaded = [load_run(f, LETTERS[i], n) for i, (f, n) in enumerate(zip(folders, run_names(folders)))]
    infos = [info for info, _ in loaded]
    filters = [RowFilter.parse(s, [r.letter for r in infos]) for s in only or []]  # a typo fails before any work
    rows = _rows(loaded)
    _summaries(infos, rows)
    only_in = Counter(
        ",".join(k for k, s in r.sides.items() if s is not None)
        for r in rows
        if any(s is None for s in r.sides.values())
    )
    full = RunDiff(
        runs=infos,
        rows=rows,
        common=sum(all(r.sides.values()) for r in rows),
        only_in=dict(only_in),
        pairs=_pairs(infos, rows),
        notes=comparability_notes(infos) + scoring_notes(infos, rows),
        shown=len(rows),
    )
    return cut_rows(full, [f.spec for f in filters])


def cut_rows(d: RunDiff, only: list[str]) -> RunDiff:
    """The diff with its rows cut to those any of the `only` filters matches (all rows without one)."""
    filters = [RowFilter.parse(s, [r.letter for r in d.runs]) for s in only]
    rows = [r for r in d.rows if not filters or any(f.matches(r) for f in filters)]
    return d.model_copy(update={"rows": rows, "shown": len(rows), "filters": [*d.filters, *only]})


def _rows(loaded: list[tuple[RunInfo, Turns]]) -> list[DiffRow]:
    """One row per question any run has, in the order the runs first list them."""
    keys = list(dict.fromkeys(k for _, turns in loaded for k in turns))
    rows = []
    for key in keys:
        interaction_id, question, truth = next(turns[key][0] for _, turns in loaded if key in turns)
        sides = {info.letter: (turns[key][1] if key in turns else None) for info, turns in loaded}
        rows.append(
            DiffRow(
                key=f"{key[0]}#{key[1]}",
                session_id=key[0],
                turn_index=key[1],
                interaction_id=interaction_id,
                question=question,
                ground_truth=truth,
                sides=sides,
            )
        )
    return rows


def _pct(values: list[float], q: float) -> float | None:
    """numpy's (linear) percentile, as benchmarks.presets computes its p50/p95: the two tables agree."""
    import numpy as np

    return round(float(np.percentile(values, q)), 1) if values else None


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 3) if values else None


def _summaries(infos: list[RunInfo], rows: list[DiffRow]) -> None:
    common = [r for r in rows if all(r.sides.values())]
    for info in infos:
        sides = [s for r in common if (s := r.sides[info.letter]) is not None]
        c = Counter(s.outcome for s in sides)
        info.common = RunSummary(
            n=len(sides),
            right=c["right"],
            wrong=c["wrong"],
            abstained=c["abstained"],
            unscored=c["unscored"],
            tool_calls_per_turn=_mean([len(s.tools) for s in sides]),
            model_calls_per_turn=_mean([s.model_calls for s in sides]),
            tokens_per_turn=_mean([s.tokens for s in sides]),
            latency_p50_ms=_pct([s.latency_ms for s in sides], 50),
            latency_p95_ms=_pct([s.latency_ms for s in sides], 95),
        )


def _pairs(infos: list[RunInfo], rows: list[DiffRow]) -> list[PairCounts]:
    out = []
    for i, a in enumerate(infos):
        for b in infos[i + 1 :]:
            both = [
                (r.outcome(a.letter), r.outcome(b.letter))
                for r in rows
                if r.sides[a.letter] is not None and r.sides[b.letter] is not None
            ]
            table = {x: {y: sum(p == (x, y) for p in both) for y in OUTCOMES} for x in OUTCOMES}
            out.append(
                PairCounts(
                    a=a.letter,
                    b=b.letter,
                    both=len(both),
                    table=table,
                    a_right_b_not=sum(x == "right" != y for x, y in both),
                    b_right_a_not=sum(y == "right" != x for x, y in both),
                    same=sum(x == y for x, y in both),
                )
            )
    return out


def comparability_notes(infos: list[RunInfo]) -> list[str]:
    """What differs between the runs beyond the agent: benchmark, task, data, how they were scored."""
    notes = []
    for field, what in (
        ("benchmark", "benchmarks"),
        ("task", "tasks"),
        ("data", "data"),
        ("scoring", "scoring (outcomes are not comparable one to one)"),
    ):
        values = {getattr(r, field) for r in infos}
        if len(values) > 1:
            notes.append(f"the runs differ in {what}: " + "; ".join(f"{r.letter} {getattr(r, field)}" for r in infos))
    for r in infos:
        if r.skipped:
            notes.append(f"{r.letter}: {len(r.skipped)} file(s) not read as traces: {', '.join(r.skipped[:3])}")
        if r.turns == 0:
            notes.append(f"{r.letter} ({r.path}) has no readable turn trace")
    return notes


def scoring_notes(infos: list[RunInfo], rows: list[DiffRow]) -> list[str]:
    """Where the official counts read differently from one label per question."""
    notes = []
    for r in infos:
        n = sum(1 for row in rows if (s := row.sides[r.letter]) is not None and s.also_missing)
        if n:
            notes.append(
                f"{r.letter}: {n} question(s) right here are also counted missing by the official scoring "
                "(an 'I don't know' ground truth answered so), so its report's accuracy + missing rate can "
                "exceed 1"
            )
    return notes
