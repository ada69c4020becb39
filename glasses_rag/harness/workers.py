"""Conversations run in worker processes (`python -m graph.run --workers N`).

Each worker process builds its own agent from the picklable `AgentConfig` with `build_agent` (an in-process
model is loaded once per worker) and runs the conversations it is handed on its own `concurrency` threads with
`glasses_rag.harness.runner.run_conversation`, writing traces into the same run folder. The parent, which holds the run
folder's lock, streams conversations out (at most `concurrency` per worker, so a dataset is
never decoded whole), gets back one compact record and one `RunStats` share per finished turn, and writes the
report exactly as a one-process run of the same data would.

Built on `multiprocessing` (spawned processes, one `Pipe` each) rather than `ProcessPoolExecutor` or
`multiprocessing.Pool`: those run one task per process at a time (a worker here runs many conversations on
threads), and a worker that dies breaks the whole pool. Here a worker killed mid-run (SIGKILL, out of memory)
takes only its own in-flight conversations with it: they are reported failed (their finished turns are on disk
for the resume) while the other workers go on, and no lock is shared with a dead process. Ctrl-C reaches only
the parent (workers ignore SIGINT), which tells every worker to stop after its current turns, as one process does.
A worker whose parent died (its pipe reads EOF, or it was handed to another parent) writes no further trace: the
run folder's lock died with the parent, so another run may hold the folder now; it starts nothing new and exits
after the turns in hand.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import multiprocessing as mp
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from glasses_rag.core.credentials import scrub_log_handlers
from glasses_rag.core.images import ImagePrep
from glasses_rag.harness.runner import RunStats, distinct_session_ids, run_conversation
from glasses_rag.retrieval.schema import Conversation
from graph.config import DEFAULT_TOOL_PROFILE, AgentConfig
from tools.registry import ToolProfile
from traces.schema import TurnTrace
from traces.store import TraceStore

log = logging.getLogger(__name__)

Scorer = Callable[[TurnTrace], TurnTrace]
HistoryAnswer = Callable[[str], str]


class WorkerSpec(BaseModel):
    """Everything a worker process needs to run conversations as the parent would (sent pickled, so callables
    must be module-level functions or partials of them)."""

    model_config = ConfigDict(arbitrary_types_allowed=True, frozen=True)

    config: AgentConfig
    index_dir: Path | None = Field(None, description="The index the run's data comes with (build_agent's default).")
    tool_profile: ToolProfile = Field(DEFAULT_TOOL_PROFILE, description="The benchmark's tools (build_agent's).")
    task: int
    out: Path = Field(description="Root of the run folders (TraceStore(out, run_id)).")
    run_id: str
    concurrency: int = Field(1, ge=1, description="Conversation threads in each worker.")
    image_prep: ImagePrep = "harness"
    fingerprint: str | None = Field(None, description="Resume only traces made by an agent of this configuration.")
    scoring: Callable[[], tuple[Scorer | None, HistoryAnswer | None]] | None = Field(
        None, description="Built once in each worker: the scorer and what later turns see of an answer."
    )
    summarize: Callable[[TurnTrace], Any] | None = Field(
        None, description="Runs in the worker on each finished trace; what it returns is sent to the parent."
    )
    log_level: int = logging.WARNING


# ---- in the worker process -------------------------------------------------------------------------------------


class _Outbox:
    """The worker's end of its pipe, shared by its conversation threads; a parent that is gone is not an error."""

    def __init__(self, conn: Connection):
        self.conn = conn
        self.lock = threading.Lock()

    def send(self, message: tuple) -> None:
        with self.lock, contextlib.suppress(OSError):
            self.conn.send(message)


class ParentGone(RuntimeError):
    """The parent holding the run folder's lock is gone: a worker must not write into that folder any more."""


class _ParentWatch:
    """Is the process that started this worker (and holds the run folder's lock) still there?"""

    def __init__(self) -> None:
        self.ppid = os.getppid()
        self.gone = threading.Event()  # set when the parent's pipe reads EOF

    def alive(self) -> bool:
        return not self.gone.is_set() and os.getppid() == self.ppid  # a dead parent's children are re-parented


class _WatchedStore(TraceStore):
    """The run folder's TraceStore, refusing to write once the parent is gone."""

    def __init__(self, store: TraceStore, watch: _ParentWatch):  # noqa: D107 - the folder exists already
        self.dir, self.watch = store.dir, watch

    def write(self, trace: TurnTrace) -> Path:
        if not self.watch.alive():
            raise ParentGone(
                f"the parent process {self.watch.ppid} is gone and the run folder's lock with it: "
                f"trace of {trace.session_id!r} turn {trace.turn_index} not written"
            )
        return super().write(trace)


def _worker_main(spec: WorkerSpec, conn: Connection) -> None:
    """A worker process: build the agent, say ready, run what the parent hands over until told to exit or stop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle: it tells us to stop
    logging.basicConfig(level=spec.log_level, format="%(levelname)s %(name)s [worker %(process)d]: %(message)s")
    scrub_log_handlers()  # no URL userinfo or key in a worker's log lines either
    outbox = _Outbox(conn)
    watch = _ParentWatch()
    try:
        from graph.build import build_agent

        agent = build_agent(
            spec.config, run_id=spec.run_id, task=spec.task, index_dir=spec.index_dir, tool_profile=spec.tool_profile
        )
        scorer, history_answer = spec.scoring() if spec.scoring is not None else (None, None)
        store = _WatchedStore(TraceStore(spec.out, spec.run_id), watch)
    except Exception as e:  # noqa: BLE001 - the parent reports it and ends the run
        outbox.send(("failed", f"{type(e).__name__}: {e}"))
        return
    outbox.send(("ready", os.getpid()))
    stop = threading.Event()

    def turn_done(trace: TurnTrace, resumed: bool) -> None:
        record = spec.summarize(trace) if spec.summarize is not None else None
        outbox.send(("turn", record, RunStats.of_turn(trace, resumed)))

    def conversation_done(session_id: str, fut: Future) -> None:
        if not fut.cancelled():
            error = fut.exception()
            outbox.send(("done", session_id, None if error is None else f"{type(error).__name__}: {error}"))

    run = functools.partial(
        run_conversation,
        agent,
        task=spec.task,
        store=store,
        scorer=scorer,
        stop=stop,
        image_prep=spec.image_prep,
        history_answer=history_answer,
        on_turn=turn_done,
        fingerprint=spec.fingerprint,
    )
    with ThreadPoolExecutor(max_workers=spec.concurrency, thread_name_prefix="conversation") as pool:
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                watch.gone.set()  # the parent is gone: its lock too; the turns in hand end unwritten
                message = ("stop",)
            if message[0] == "conversation":
                conv: Conversation = message[1]
                pool.submit(run, conv).add_done_callback(functools.partial(conversation_done, conv.session_id))
                continue
            if message[0] == "stop":  # running conversations end after their current turn, queued ones never start
                stop.set()
                pool.shutdown(wait=False, cancel_futures=True)
            break
    outbox.send(("bye",))


# ---- in the parent ---------------------------------------------------------------------------------------------


class WorkerStartError(RuntimeError):
    """A worker process could not build its agent."""


@dataclass
class _WorkerProcess:
    process: BaseProcess
    conn: Connection
    in_flight: dict[str, int] = field(default_factory=dict)  # session id -> its turn count (for progress)
    alive: bool = True
    ready: bool = False


@contextlib.contextmanager
def _sigint_ignored() -> Iterator[None]:
    """Processes started in here ignore Ctrl-C (an ignored signal stays ignored across exec): the terminal sends
    SIGINT to the whole process group, and only the parent must act on it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


class ProcessWorkerPool:
    """`workers` processes, each running `spec.concurrency` conversations at once. Use as a context manager:
    entering starts them and waits until every agent is built; `run` may be called more than once."""

    def __init__(self, spec: WorkerSpec, workers: int):
        if workers < 1:
            raise ValueError(f"workers must be at least 1, not {workers}")
        self.spec = spec.model_copy(update={"log_level": logging.getLogger().getEffectiveLevel()})
        self.size = workers
        self.workers: list[_WorkerProcess] = []
        self._stats = RunStats()
        self._progress: Callable[[int], None] | None = None
        self._on_record: Callable[[Any], None] | None = None

    def __enter__(self) -> ProcessWorkerPool:
        ctx = mp.get_context("spawn")  # a fresh interpreter each: nothing forked from the parent's threads
        try:
            with _sigint_ignored():
                for i in range(self.size):
                    mine, theirs = ctx.Pipe()
                    process = ctx.Process(target=_worker_main, args=(self.spec, theirs), name=f"agent-worker-{i}")
                    process.start()
                    theirs.close()  # the worker's end lives in the worker only: its death reads as EOF here
                    self.workers.append(_WorkerProcess(process, mine))
            self._await_ready()
        except BaseException:
            self.close(stop=True)
            raise
        return self

    @property
    def pids(self) -> list[int]:
        return [w.process.pid for w in self.workers if w.process.pid is not None]

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.close(stop=exc_type is not None)

    def _await_ready(self) -> None:
        while not all(w.ready for w in self.workers):
            waiting = [w for w in self.workers if not w.ready]
            wait([w.conn for w in waiting] + [w.process.sentinel for w in waiting])
            for w in waiting:
                try:
                    message = w.conn.recv() if w.conn.poll() else None
                except (EOFError, OSError):  # it died before a word
                    message = None
                    w.process.join(5)
                if message is not None and message[0] == "ready":
                    w.ready = True
                elif message is not None or not w.process.is_alive():
                    why = message[1] if message is not None else f"exit code {w.process.exitcode}"
                    raise WorkerStartError(f"worker process {w.process.pid} could not start: {why}")

    def run(
        self,
        conversations: Iterable[Conversation],
        progress: Callable[[int], None] | None = None,
        on_record: Callable[[Any], None] | None = None,
    ) -> RunStats:
        """Runs every conversation on the workers; returns the run's statistics. `on_record` gets what
        `spec.summarize` made of each finished turn (new or resumed), `progress` each finished conversation's
        turn count. A worker that dies fails only the conversations it was running; the others go on."""
        self._stats, self._progress, self._on_record = RunStats(), progress, on_record
        source = distinct_session_ids(conversations)
        more = True
        try:
            while True:
                more = more and self._dispatch(source)
                live = [w for w in self.workers if w.alive]
                if not any(w.in_flight for w in live) and (not more or not live):
                    break
                self._receive(live)
            if more:
                self._fail_unrun(source)
        except BaseException:
            self.close(stop=True)  # Ctrl-C: every worker stops after its current turns
            raise
        return self._stats

    def _dispatch(self, source: Iterator[Conversation]) -> bool:
        """Hands out conversations to workers with a free thread, least busy first; False once none are left.
        A worker gets no more than it can start at once: a conversation queued in one worker behind its running
        ones could wait a whole turn while another worker has a thread free (the run's last wave)."""
        while True:
            room = [w for w in self.workers if w.alive and len(w.in_flight) < self.spec.concurrency]
            if not room:
                return True
            conv = next(source, None)
            if conv is None:
                return False
            w = min(room, key=lambda w: len(w.in_flight))
            self._stats.conversations += 1
            w.in_flight[conv.session_id] = len(conv.turns)
            try:
                w.conn.send(("conversation", conv))
            except OSError:  # it died: this conversation fails with the others it held
                self._lost(w)

    def _receive(self, live: list[_WorkerProcess]) -> None:
        ready = set(wait([w.conn for w in live] + [w.process.sentinel for w in live]))
        for w in live:
            if w.conn in ready or w.process.sentinel in ready:
                self._drain(w, self._handle)
                if w.alive and not w.process.is_alive():
                    self._lost(w)

    def _drain(self, w: _WorkerProcess, handle: Callable[[_WorkerProcess, tuple], None] | None) -> None:
        """Reads what the worker has sent so far; its end of the pipe closing means it died."""
        try:
            while w.alive and w.conn.poll():
                message = w.conn.recv()
                if handle is not None:
                    handle(w, message)
        except (EOFError, OSError):
            if w.alive:
                self._lost(w)

    def _handle(self, w: _WorkerProcess, message: tuple) -> None:
        if message[0] == "turn":
            _, record, share = message
            self._stats.merge(share)
            if record is not None and self._on_record is not None:
                self._on_record(record)
        elif message[0] == "done":
            _, session_id, error = message
            turns = w.in_flight.pop(session_id, 0)
            if error is not None:
                self._stats.failed_conversations += 1
                log.error("conversation %s failed: %s", session_id, error)
            if self._progress is not None:
                self._progress(turns)

    def _lost(self, w: _WorkerProcess) -> None:
        """A worker died: the conversations it was running fail (their finished turns stay on disk)."""
        w.alive = False
        w.process.join(5)
        log.error(
            "worker process %s ended (exit code %s) while running %d conversation(s); they are reported "
            "failed and a rerun with the same --run-id resumes them",
            w.process.pid,
            w.process.exitcode,
            len(w.in_flight),
        )
        for session_id, turns in w.in_flight.items():
            self._stats.failed_conversations += 1
            log.error("conversation %s failed: its worker process ended", session_id)
            if self._progress is not None:
                self._progress(turns)
        w.in_flight.clear()

    def _fail_unrun(self, source: Iterator[Conversation]) -> None:
        unrun = 0
        for conv in source:
            unrun += 1
            self._stats.conversations += 1
            self._stats.failed_conversations += 1
            if self._progress is not None:
                self._progress(len(conv.turns))
        log.error("%d conversation(s) not run: every worker process ended", unrun)

    def close(self, stop: bool = False) -> None:
        """Ends the workers: `exit` once their work is done, or `stop` (their current turns finish, nothing new
        starts). A worker still running after its turn budget and a minute more, or on a second Ctrl-C, is
        terminated (traces are written atomically: a killed writer leaves no half file)."""
        for w in self.workers:
            if w.alive:
                with contextlib.suppress(OSError):
                    w.conn.send(("stop",) if stop else ("exit",))
        deadline = time.monotonic() + self.spec.config.budget.budget_s + 60
        try:
            while (running := [w for w in self.workers if w.process.is_alive()]) and time.monotonic() < deadline:
                wait(
                    [w.conn for w in running if not w.conn.closed] + [w.process.sentinel for w in running],
                    timeout=max(0.0, deadline - time.monotonic()),
                )
                for w in running:
                    if not w.conn.closed:
                        self._drain_discarding(w)
        finally:
            for w in self.workers:
                if w.process.is_alive():
                    log.warning("worker process %s did not end; terminating it", w.process.pid)
                    w.process.terminate()
                w.process.join(10)
                w.alive = False
                w.conn.close()

    def _drain_discarding(self, w: _WorkerProcess) -> None:
        """While ending: read (and drop) what the worker sends, so a worker writing to a full pipe can finish."""
        try:
            while w.conn.poll():
                w.conn.recv()
        except (EOFError, OSError):
            w.conn.close()


def run_task_in_workers(
    spec: WorkerSpec,
    conversations: Iterable[Conversation],
    workers: int,
    progress: Callable[[int], None] | None = None,
    on_record: Callable[[Any], None] | None = None,
) -> RunStats:
    """`glasses_rag.harness.runner.run_task` over `workers` processes: the same traces, statistics and records."""
    with ProcessWorkerPool(spec, workers) as pool:
        return pool.run(conversations, progress=progress, on_record=on_record)
