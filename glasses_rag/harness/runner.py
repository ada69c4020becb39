"""Runs a CRAG-MM task over a dataset: conversations concurrently, turns in order, traces written as they finish.

Resumable: a turn whose trace already exists in the run folder (same run id) is not redone (unless its model server
could not be reached: it runs again); its answer feeds
the conversation history exactly as if it had just been produced. Finished traces are handed to `on_turn`
and dropped: a long run keeps only what its caller keeps (compact scoring records), never whole traces.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from pydantic import BaseModel, Field

from glasses_rag.core.images import ImagePrep
from glasses_rag.retrieval.schema import Conversation
from graph.agent import Agent, TurnInput
from tools.base import HistoryTurn
from traces.model_loop import LoopStats
from traces.schema import TurnTrace
from traces.store import TraceStore

log = logging.getLogger(__name__)


class RunStats(BaseModel):
    """What a run did, for the summary and run.json."""

    conversations: int = 0
    turns: int = 0
    resumed_turns: int = 0
    failed_conversations: int = 0
    ended_by: dict[str, int] = Field(default_factory=dict)
    errors: dict[str, int] = Field(default_factory=dict, description="Error events per kind, over all turns.")
    turns_with_errors: int = 0
    turns_unreachable: int = Field(0, description="Turns with a model call that could not reach its server.")
    stopped_unreachable: bool = Field(
        False,
        description="The run stopped starting turns: the model server could "
        "not be reached in UNREACHABLE_STOP turns in a row.",
    )
    tool_calls: int = 0
    model_calls: int = 0
    sequential_calls: int = Field(0, description="Model calls on the turns' critical paths (concurrent ones once).")
    prompt_tokens: int = 0
    completion_tokens: int = 0
    calls_without_usage: int = 0
    replicas: dict[str, int] = Field(default_factory=dict, description="Model requests per server replica.")
    loop: LoopStats = Field(default_factory=LoopStats, description="A model policy's decisions and tool calls.")

    @classmethod
    def of_turn(cls, trace: TurnTrace, resumed: bool) -> RunStats:
        """One finished turn's share of the statistics (what a worker process sends back with each turn)."""
        stats = cls()
        stats.add(trace)
        stats.resumed_turns = int(resumed)
        return stats

    def merge(self, other: RunStats) -> None:
        """Adds another part of the run (a turn, a worker's share) to this one."""
        add_counts(self, other)

    def add(self, trace: TurnTrace) -> None:
        self.turns += 1
        self.loop.add(trace)
        self.ended_by[trace.ended_by] = self.ended_by.get(trace.ended_by, 0) + 1
        kinds = Counter(trace.error_kinds())
        for k, n in kinds.items():
            self.errors[k] = self.errors.get(k, 0) + n
        self.turns_with_errors += bool(kinds)
        self.turns_unreachable += any(c.unreachable for c in trace.model_calls())
        self.tool_calls += len(trace.tool_calls())
        self.model_calls += trace.tokens.calls
        self.sequential_calls += trace.tokens.sequential_calls
        self.prompt_tokens += trace.tokens.prompt_tokens
        self.completion_tokens += trace.tokens.completion_tokens
        self.calls_without_usage += trace.tokens.calls_without_usage
        self._add_replicas(trace)

    def _add_replicas(self, trace: TurnTrace) -> None:
        for step in trace.steps:
            for c in step.model_calls:
                replica = getattr(c, "replica", None)
                if replica:
                    self.replicas[replica] = self.replicas.get(replica, 0) + 1


def add_counts(target: BaseModel, other: BaseModel) -> None:
    """Adds every count of `other` into `target`: numbers, per-key dicts of numbers, nested count models."""
    for name, value in other:
        mine = getattr(target, name)
        if isinstance(value, BaseModel):
            add_counts(mine, value)
        elif isinstance(value, dict):
            for k, n in value.items():
                mine[k] = mine.get(k, 0) + n
        elif isinstance(value, bool):  # a flag of any part holds for the whole
            setattr(target, name, mine or value)
        else:
            setattr(target, name, mine + value)


def run_conversation(
    agent: Agent,
    conv: Conversation,
    task: int,
    store: TraceStore,
    scorer: Callable[[TurnTrace], TurnTrace] | None = None,
    stop: threading.Event | None = None,
    image_prep: ImagePrep = "harness",
    history_answer: Callable[[str], str] | None = None,
    on_turn: Callable[[TurnTrace, bool], None] | None = None,
    fingerprint: str | None = None,
) -> None:
    """All turns of one conversation, in order. A turn with a usable trace on disk is resumed, not redone; the
    image is decoded only when some turn is left to run. `history_answer` maps an answer to what later turns
    see of it (the official harness passes the 75-token-truncated answer). When `stop` is set (Ctrl-C), no
    further turn is started. With `fingerprint`, only traces made by an agent of that configuration are resumed."""
    if stop is not None and stop.is_set():
        return
    kept = [_finished(store.read(conv.session_id, i), turn, task, fingerprint) for i, turn in enumerate(conv.turns)]
    photo = conv.photo(image_prep) if any(t is None for t in kept) else (None, None)
    history: list[HistoryTurn] = []
    for i, turn in enumerate(conv.turns):
        if stop is not None and stop.is_set():
            break
        trace = kept[i]
        resumed = trace is not None
        if trace is None:
            if not (turn.query or "").strip():
                log.warning("conversation %s turn %d has no question; answered %r", conv.session_id, i, "I don't know")
            inp = TurnInput.of_turn(conv, i, task, photo, history)
            trace = agent.run_turn(inp)
            trace.ground_truth = conv.answers[i] if i < len(conv.answers) else None
            trace.egocentric = conv.egocentric
            if scorer is not None and trace.ground_truth is not None:
                trace = scorer(trace)
            store.write(trace)
        if on_turn is not None:
            on_turn(trace, resumed)
        shown = history_answer(trace.answer) if history_answer else trace.answer
        history.append(HistoryTurn(question=turn.query or "", answer=shown, entity=trace.entity))


def _finished(trace: TurnTrace | None, turn: Any, task: int, fingerprint: str | None) -> TurnTrace | None:
    """The trace on disk when it is this turn's, finished: same turn and task, made by an agent of this
    configuration (with `fingerprint`), and its model server reached (otherwise its answer is not the model's)."""
    if trace is None or trace.interaction_id != turn.interaction_id or trace.task != task:
        return None
    if fingerprint is not None and trace.config_fingerprint != fingerprint:
        return None
    return None if any(c.unreachable for c in trace.model_calls()) else trace


UNREACHABLE_STOP = 3  # turns in a row that could not reach the model server, after which a run starts no more


class ServerGone:
    """Counts finished turns in a row whose model server could not be reached; `after` is True from the
    UNREACHABLE_STOP-th one on (a resumed turn, or one that reached its server, resets the count)."""

    def __init__(self) -> None:
        self.streak = 0

    def after(self, trace: TurnTrace, resumed: bool) -> bool:
        self.streak = self.streak + 1 if not resumed and any(c.unreachable for c in trace.model_calls()) else 0
        if self.streak == UNREACHABLE_STOP:
            log.error(
                "the model server could not be reached in %d turns in a row: no further turn is started "
                "(the command that resumes the run is printed at its end)",
                self.streak,
            )
        return self.streak >= UNREACHABLE_STOP


def in_flight_limit(concurrency: int) -> int:
    """Conversations handed to `concurrency` threads at once: a few beyond them, so a freed thread finds the next
    one waiting, and never the whole dataset decoded in memory."""
    return max(1, concurrency) + max(1, concurrency // 8)


def distinct_session_ids(conversations: Iterable[Conversation]) -> Iterator[Conversation]:
    """The conversations, a repeated session id renamed `<id>~<n>` so both keep their own traces."""
    seen: dict[str, int] = {}
    for c in conversations:
        if c.session_id in seen:
            seen[c.session_id] += 1
            new_id = f"{c.session_id}~{seen[c.session_id]}"
            log.warning("session id %r repeats; running this conversation as %r", c.session_id, new_id)
            c = c.model_copy(update={"session_id": new_id})
        seen.setdefault(c.session_id, 1)
        yield c


def _turn_recorder(
    stats: RunStats, lock: threading.Lock, stop: threading.Event, on_turn: Callable[[TurnTrace], None] | None
) -> Callable[[TurnTrace, bool], None]:
    """What each finished turn does to the run: its statistics, the caller's `on_turn`, and `stop` set once the
    model server has been unreachable for UNREACHABLE_STOP turns in a row (further turns would only retry)."""
    gone = ServerGone()

    def turn_done(trace: TurnTrace, resumed: bool) -> None:
        with lock:
            stats.merge(RunStats.of_turn(trace, resumed))
            if on_turn is not None:
                on_turn(trace)
            if gone.after(trace, resumed) and not stop.is_set():
                stats.stopped_unreachable = True
                stop.set()

    return turn_done


def run_task(
    agent: Agent,
    conversations: Iterable[Conversation],
    task: int,
    store: TraceStore,
    scorer: Callable[[TurnTrace], TurnTrace] | None = None,
    concurrency: int = 1,
    progress: Callable[[int], None] | None = None,
    on_turn: Callable[[TurnTrace], None] | None = None,
    image_prep: ImagePrep = "harness",
    history_answer: Callable[[str], str] | None = None,
    fingerprint: str | None = None,
) -> RunStats:
    """Runs every conversation; returns the run's statistics. `on_turn` gets each finished trace (new or resumed).

    One conversation failing never loses the others' finished traces. Conversations are consumed lazily, at
    most `concurrency + max(1, concurrency // 8)` in flight, so a whole dataset never sits decoded in memory."""
    stats = RunStats()
    lock = threading.Lock()
    stop = threading.Event()
    workers = max(1, concurrency)
    turn_done = _turn_recorder(stats, lock, stop, on_turn)

    def collect(fut: Future, c: Conversation) -> None:
        try:
            fut.result()
        except Exception as e:  # noqa: BLE001
            stats.failed_conversations += 1
            log.error("conversation %s failed: %s", c.session_id, e)
        if progress:
            progress(len(c.turns))

    def submit(pool: ThreadPoolExecutor, c: Conversation) -> Future:
        stats.conversations += 1
        args = (agent, c, task, store, scorer, stop, image_prep, history_answer, turn_done, fingerprint)
        return pool.submit(run_conversation, *args)

    _run_pool(distinct_session_ids(conversations), workers, submit, collect, stop)
    return stats


def _run_pool(
    conversations: Iterable[Conversation],
    workers: int,
    submit: Callable[[ThreadPoolExecutor, Conversation], Future],
    collect: Callable[[Future, Conversation], None],
    stop: threading.Event,
) -> None:
    """Each conversation submitted to a pool of `workers` threads and collected when it finishes, a few in flight
    beyond the workers; Ctrl-C cancels those queued and stops the running ones after their current turn."""
    # finished conversations arrive on a queue (O(1) per completion, unlike wait() over every pending future);
    # a few are queued beyond the workers, so a freed worker finds the next one waiting instead of waiting for
    # this thread to submit it
    finished: queue.SimpleQueue[Future] = queue.SimpleQueue()
    in_flight = in_flight_limit(workers)
    pending: dict[Future, Conversation] = {}

    def collect_next() -> None:
        fut = finished.get()
        collect(fut, pending.pop(fut))

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="conversation") as pool:
        try:
            for c in conversations:
                fut = submit(pool, c)
                pending[fut] = c
                fut.add_done_callback(finished.put)
                if len(pending) >= in_flight:
                    collect_next()
            while pending:
                collect_next()
        except BaseException:
            # Ctrl-C: queued conversations are cancelled and running ones stop after their current turn
            # (whose trace is written whole); without this the pool would still run every queued one.
            stop.set()
            for f in pending:
                f.cancel()
            raise
