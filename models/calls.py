"""Calls under a deadline, cancelled together: how every turn bounds its policy, tool and model calls.

- `WORKERS` is one pool of reusable daemon threads. A call that outlives its deadline is abandoned, never
  awaited, so a hung tool cannot hang a turn or the process; threads are reused, so a 16-step turn does not
  start 34 of them.
- A `CancelScope` groups what is in flight for one turn (and, nested, for one call). Cancelling it runs the
  hooks that in-flight work registered: a model request closes its connection (the server then stops
  generating), a local generation stops at its next token. A turn's scope is cancelled when the turn ends,
  and an abandoned call's scope as soon as it is abandoned.
- `collect_model_calls()` gathers the `ModelCall` records that backends report while a graph node runs.

The graph opens scopes and collectors; backends only read them (`current_scope()`, `report_model_call`).
"""

from __future__ import annotations

import contextvars
import logging
import queue
import threading
from concurrent.futures import Future, wait
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from traces.schema import ModelCall

log = logging.getLogger(__name__)


class CallTimeout(Exception):
    """A call did not finish within its deadline and was abandoned (and cancelled)."""


class Cancelled(Exception):
    """The call's scope was cancelled (its turn ended) before the call finished."""


class CancelScope:
    """Cancellation hooks of in-flight work; a child scope is cancelled with its parent."""

    def __init__(self, parent: CancelScope | None = None):
        self._lock = threading.Lock()
        self._hooks: dict[int, Callable[[], Any]] = {}
        self._next = 0
        self._cancelled = False
        self._parent = parent
        self._parent_token = parent.on_cancel(self.cancel) if parent is not None else None

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def on_cancel(self, hook: Callable[[], Any]) -> int | None:
        """Run `hook` when the scope is cancelled (at once if it already is). Returns a token for `remove`."""
        with self._lock:
            if not self._cancelled:
                self._next += 1
                self._hooks[self._next] = hook
                return self._next
        _run_hook(hook)
        return None

    def remove(self, token: int | None) -> None:
        if token is not None:
            with self._lock:
                self._hooks.pop(token, None)

    def cancel(self) -> None:
        with self._lock:
            if self._cancelled:
                return
            self._cancelled = True
            hooks = list(self._hooks.values())
            self._hooks.clear()
        for hook in hooks:
            _run_hook(hook)

    def detach(self) -> None:
        """Stop listening to the parent (the work of this scope is over)."""
        if self._parent is not None:
            self._parent.remove(self._parent_token)
            self._parent_token = None

    def raise_if_cancelled(self) -> None:
        if self._cancelled:
            raise Cancelled("the turn ended before this call finished")


def _run_hook(hook: Callable[[], Any]) -> None:
    try:
        hook()
    except Exception as e:  # noqa: BLE001 - one failing hook must not stop the others
        log.debug("cancel hook failed: %s", e)


_SCOPE: contextvars.ContextVar[CancelScope | None] = contextvars.ContextVar("glasses_cancel_scope", default=None)
_CALLS: contextvars.ContextVar[list[ModelCall] | None] = contextvars.ContextVar("glasses_model_calls", default=None)


def current_scope() -> CancelScope | None:
    return _SCOPE.get()


@contextmanager
def scope(s: CancelScope) -> Iterator[CancelScope]:
    token = _SCOPE.set(s)
    try:
        yield s
    finally:
        _SCOPE.reset(token)


@contextmanager
def collect_model_calls() -> Iterator[list[ModelCall]]:
    calls: list[ModelCall] = []
    token = _CALLS.set(calls)
    try:
        yield calls
    finally:
        _CALLS.reset(token)


def report_model_call(call: ModelCall) -> None:
    calls = _CALLS.get()
    if calls is not None:
        calls.append(call)


class WorkerPool:
    """Reusable daemon worker threads; grows when every worker is busy (or abandoned), shrinks when idle.

    Unlike ThreadPoolExecutor, whose workers the interpreter joins at exit, a worker stuck in a hung call
    never blocks exit. Invariant: waiting workers = idle count + queued tasks."""

    def __init__(self, idle_s: float = 30.0, name: str = "glasses-call"):
        self._tasks: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Condition()
        self._idle = 0
        self._busy = 0
        self._threads = 0
        self._idle_s = idle_s
        self._name = name

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        fut: Future = Future()
        self._tasks.put((fut, contextvars.copy_context(), fn, args))
        with self._lock:
            if self._idle > 0:
                self._idle -= 1
                return fut
            self._threads += 1
            n = self._threads
        threading.Thread(target=self._work, name=f"{self._name}-{n}", daemon=True).start()
        return fut

    def _work(self) -> None:
        while True:
            try:
                fut, ctx, fn, args = self._tasks.get(timeout=self._idle_s)
            except queue.Empty:
                with self._lock:
                    if self._idle > 0:
                        self._idle -= 1
                        self._threads -= 1
                        return
                continue
            with self._lock:
                self._busy += 1
            if fut.set_running_or_notify_cancel():
                try:
                    result = ctx.run(fn, *args)
                except Exception as e:  # noqa: BLE001 - handed to the caller
                    fut.set_exception(e)
                except BaseException as e:  # noqa: BLE001 - a call doing sys.exit() must not end the run
                    fut.set_exception(RuntimeError(f"{type(e).__name__} raised inside the call: {e}"))
                else:
                    fut.set_result(result)
            with self._lock:
                self._busy -= 1
                self._idle += 1
                self._lock.notify_all()

    @property
    def busy(self) -> int:
        return self._busy

    @property
    def threads(self) -> int:
        return self._threads

    def drain(self, timeout_s: float) -> bool:
        """Wait until no call is running (cancelled ones end quickly); False when some are still running."""
        with self._lock:
            return self._lock.wait_for(lambda: self._busy == 0, timeout=timeout_s)


WORKERS = WorkerPool()


def _in_scope(s: CancelScope, fn: Callable[[], Any]) -> Any:
    with scope(s):
        return fn()


def run_many(fns: list[Callable[[], Any]], timeout_s: float, parent: CancelScope | None = None,
             inline: list[bool] | None = None) -> list[tuple[bool, Any]]:
    """Run independent calls at once, each under a child of the current scope, with one shared deadline.

    Returns (ok, result or exception) per call, in order. A call still running at the deadline is abandoned:
    its scope is cancelled (its model requests are closed) and its result is a CallTimeout. Calls marked
    `inline` (declared non-blocking: local, quick, no I/O) run in the caller's thread after the others were
    started, saving a thread hand-off; they are not preempted, so they must honour their declaration."""
    if timeout_s <= 0:
        return [(False, CallTimeout("no time left in the turn budget")) for _ in fns]
    inline = inline or [False] * len(fns)
    parent = parent or current_scope()
    # an inline call cannot be abandoned, so it needs no scope of its own: it runs under the parent's
    children = [parent if inline[i] and parent is not None else CancelScope(parent) for i in range(len(fns))]
    futs = {i: WORKERS.submit(_in_scope, children[i], fn) for i, fn in enumerate(fns) if not inline[i]}
    out: list[tuple[bool, Any]] = [(False, None)] * len(fns)
    for i, fn in enumerate(fns):
        if inline[i]:
            try:
                out[i] = (True, _in_scope(children[i], fn))
            except Exception as e:  # noqa: BLE001 - handed to the caller like a worker's exception
                out[i] = (False, e)
            except BaseException as e:  # noqa: BLE001 - sys.exit() inside a call must not end the run
                out[i] = (False, RuntimeError(f"{type(e).__name__} raised inside the call: {e}"))
    if futs:
        _, not_done = wait(futs.values(), timeout=timeout_s)
        for i, fut in futs.items():
            if fut in not_done:
                children[i].cancel()
                out[i] = (False, CallTimeout(f"did not finish within {timeout_s:.2f}s"))
            elif fut.exception() is not None:
                out[i] = (False, fut.exception())
            else:
                out[i] = (True, fut.result())
    for child in children:
        if child is not parent:
            child.detach()
    return out


def run_with_deadline(fn: Callable[[], Any], timeout_s: float, parent: CancelScope | None = None,
                      inline: bool = False) -> Any:
    """`run_many` for one call: its result, or its exception raised (CallTimeout past the deadline)."""
    ok, value = run_many([fn], timeout_s, parent, [inline])[0]
    if not ok:
        raise value
    return value
