"""Calls under a deadline, cancelled together: how every turn bounds its policy, tool and model calls.

- `WORKERS` is one pool of reusable daemon threads. A call that outlives its deadline is abandoned, never
  awaited, so a hung tool cannot hang a turn or the process; threads are reused, so a 16-step turn does not
  start 34 of them.
- A `CancelScope` groups what is in flight for one turn (and, nested, for one call). Cancelling it runs the
  hooks that in-flight work registered: a model request closes its connection (the server then stops
  generating), a local generation stops at its next token. A turn's scope is cancelled when the turn ends,
  and an abandoned call's scope as soon as it is abandoned.
- `collect_model_calls()` gathers the `ModelCall` records that backends report while a graph node runs.
- `with affinity(key):` names what the calls inside belong to (a conversation): a client with several replicas
  of one model keeps them on one replica, whose prefix cache then already holds the photo and the system prompt.
  Like the scope, it reaches the worker threads of `run_many` / `run_with_deadline` (each call runs in a copy
  of the submitting thread's context).
- At exit, `exit_process(rc)` (front ends) and the atexit guard installed with the pool's first thread cancel
  what is still open and wait for running calls, so no abandoned call is inside native code (torch, llama.cpp,
  onnxruntime) while the interpreter tears down: that race aborts the process ("terminate called without an
  active exception") after the results were written.

The graph opens scopes and collectors; backends only read them (`current_scope()`, `report_model_call`).
"""

from __future__ import annotations

import atexit
import contextvars
import logging
import os
import queue
import sys
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import CancelledError, Future, wait
from typing import Any, NoReturn

from glasses_rag.core.types import ModelCall

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
        if parent is None:
            _ROOTS.add(self)

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    @property
    def has_hooks(self) -> bool:
        """Some in-flight work registered a way to cancel it (a model request, a local generation)."""
        return bool(self._hooks)

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


_ROOTS: weakref.WeakSet[CancelScope] = weakref.WeakSet()  # open turn scopes, cancelled at exit


def cancel_all() -> None:
    """Cancel every scope still open (at exit: whatever a turn left in flight)."""
    for s in list(_ROOTS):
        s.cancel()


def _run_hook(hook: Callable[[], Any]) -> None:
    try:
        hook()
    except Exception as e:  # noqa: BLE001 - one failing hook must not stop the others
        log.debug("cancel hook failed: %s", e)


_SCOPE: contextvars.ContextVar[CancelScope | None] = contextvars.ContextVar("glasses_cancel_scope", default=None)
_CALLS: contextvars.ContextVar[list[ModelCall] | None] = contextvars.ContextVar("glasses_model_calls", default=None)
_AFFINITY: contextvars.ContextVar[str | None] = contextvars.ContextVar("glasses_affinity", default=None)


def current_scope() -> CancelScope | None:
    return _SCOPE.get()


class scope:  # noqa: N801 - used as a function: `with scope(s):`
    """Make `s` the current cancel scope inside the block (a class, not @contextmanager: it runs at every step)."""

    __slots__ = ("_scope", "_token")

    def __init__(self, s: CancelScope):
        self._scope = s

    def __enter__(self) -> CancelScope:
        self._token = _SCOPE.set(self._scope)
        return self._scope

    def __exit__(self, *exc: Any) -> None:
        _SCOPE.reset(self._token)


class affinity:  # noqa: N801 - used as a function: `with affinity(session_id):`
    """Calls made inside belong together (one conversation): replicas of a model serve them on one replica
    while it is up and not saturated (glasses_rag/models/openai_client.py). None: no affinity (least outstanding)."""

    __slots__ = ("_key", "_token")

    def __init__(self, key: str | None):
        self._key = key

    def __enter__(self) -> str | None:
        self._token = _AFFINITY.set(self._key)
        return self._key

    def __exit__(self, *exc: Any) -> None:
        _AFFINITY.reset(self._token)


def current_affinity() -> str | None:
    return _AFFINITY.get()


class collect_model_calls:  # noqa: N801 - used as a function: `with collect_model_calls() as calls:`
    """Gather the ModelCall records that backends report inside the block."""

    __slots__ = ("_calls", "_token")

    def __enter__(self) -> list[ModelCall]:
        self._calls: list[ModelCall] = []
        self._token = _CALLS.set(self._calls)
        return self._calls

    def __exit__(self, *exc: Any) -> None:
        _CALLS.reset(self._token)


def report_model_call(call: ModelCall) -> None:
    calls = _CALLS.get()
    if calls is not None:
        calls.append(call)


class DaemonThreadPool:
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
        _install_exit_guard()
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


WORKERS = DaemonThreadPool()


def _in_scope(s: CancelScope, fn: Callable[[], Any]) -> Any:
    if _SCOPE.get() is s:  # already current (a call run inline in its turn's own thread): nothing to set
        return fn()
    with scope(s):
        return fn()


def _run_inline(s: CancelScope, fn: Callable[[], Any]) -> tuple[bool, Any]:
    """(ok, result or exception) of a call run in the caller's thread."""
    try:
        return True, _in_scope(s, fn)
    except Exception as e:  # noqa: BLE001 - handed to the caller like a worker's exception
        return False, e
    except BaseException as e:  # noqa: BLE001 - sys.exit() inside a call must not end the run
        return False, RuntimeError(f"{type(e).__name__} raised inside the call: {e}")


# How long an abandoned call that registered a cancel hook gets to wind down (an HTTP request closes at once,
# a local generation stops at its next token): its ModelCall record (cancelled, partial tokens) then reaches
# the trace, and the next call does not queue behind it. Calls without a hook (a plain tool) are not waited for.
CANCEL_GRACE_S = 0.25


def run_many(
    fns: list[Callable[[], Any]], timeout_s: float, parent: CancelScope | None = None, inline: list[bool] | None = None
) -> list[tuple[bool, Any]]:
    """Run independent calls at once, each under a child of the current scope, with one shared deadline.

    Returns (ok, result or exception) per call, in order. A call still running at the deadline is abandoned:
    its scope is cancelled (its model requests are closed) and its result is a CallTimeout. Calls marked
    `inline` (declared non-blocking: local, quick, no I/O) run in the caller's thread after the others were
    started, saving a thread hand-off; they are not preempted, so they must honour their declaration."""
    if timeout_s <= 0:
        return [(False, CallTimeout("no time left in the turn budget")) for _ in fns]
    inline = inline or [False] * len(fns)
    if parent is None:
        parent = current_scope()
    if parent is not None and all(inline):  # quick local work only: no thread, no child scope, no future
        return [_run_inline(parent, fn) for fn in fns]
    # an inline call cannot be abandoned, so it needs no scope of its own: it runs under the parent's
    children = [parent if inline[i] and parent is not None else CancelScope(parent) for i in range(len(fns))]
    futs = {i: WORKERS.submit(_in_scope, children[i], fn) for i, fn in enumerate(fns) if not inline[i]}
    out: list[tuple[bool, Any]] = [(False, None)] * len(fns)
    for i, fn in enumerate(fns):
        if inline[i]:
            out[i] = _run_inline(children[i], fn)
    if futs:
        not_done = _wait_all(list(futs.values()), timeout_s)
        winding_down = []
        for i, fut in futs.items():
            if fut in not_done:
                if children[i].has_hooks:
                    winding_down.append(fut)
                children[i].cancel()
        if winding_down:
            wait(winding_down, timeout=CANCEL_GRACE_S)
        for i, fut in futs.items():
            if fut in not_done:
                out[i] = (False, CallTimeout(f"did not finish within {timeout_s:.2f}s"))
            elif fut.exception() is not None:
                out[i] = (False, fut.exception())
            else:
                out[i] = (True, fut.result())
    for child in children:
        if child is not parent:
            child.detach()
    return out


def _wait_all(futs: list[Future], timeout_s: float) -> set[Future]:
    """The futures not done by the deadline. One future (a single call: every model request of a turn) is waited
    on directly, without the waiter objects `concurrent.futures.wait` builds and installs on each future."""
    if len(futs) != 1:
        return wait(futs, timeout=timeout_s)[1]
    fut = futs[0]
    try:
        fut.exception(timeout=timeout_s)
    except (TimeoutError, CancelledError):
        pass
    return set() if fut.done() else {fut}


def run_with_deadline(
    fn: Callable[[], Any], timeout_s: float, parent: CancelScope | None = None, inline: bool = False
) -> Any:
    """`run_many` for one call: its result, or its exception raised (CallTimeout past the deadline)."""
    if inline and timeout_s > 0 and parent is not None:  # run_many's inline path without its lists (every step)
        ok, value = _run_inline(parent, fn)
    else:
        ok, value = run_many([fn], timeout_s, parent, [inline])[0]
    if not ok:
        raise value
    return value


# ---------------------------------------------------------------------------------------------------------------
# Exit: no call may still run native code while the interpreter finalises.

EXIT_WAIT_S = 5.0  # how long the atexit guard waits for running calls (cancelled model calls end far sooner)
_GUARD = {"installed": False}


def quiesce(timeout_s: float = 30.0) -> bool:
    """Cancel every open scope and wait until no call runs; False when some call is still running at the end."""
    cancel_all()
    return WORKERS.drain(timeout_s)


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed stream must not stop the exit
            pass


def exit_process(rc: int, timeout_s: float = 30.0) -> NoReturn:
    """End a front end (CLI, benchmark) with exit code `rc`, safely.

    Cancels what is in flight and waits up to `timeout_s` for running calls (cancelled model calls end within a
    token or a closed connection). If a call is still running after that (an uninterruptible tool), output is
    flushed and the process ends with `os._exit(rc)`, skipping an interpreter teardown that would race with it."""
    if quiesce(timeout_s):
        sys.exit(rc)
    log.warning("%d call(s) still running after %.0fs; exiting without interpreter teardown", WORKERS.busy, timeout_s)
    _flush()
    os._exit(rc)


def _at_exit() -> None:
    """For library users that exit on their own (the starter kit's harness, tests): cancel and wait a little.
    It never ends the process itself: it cannot know the exit code (front ends use `exit_process`)."""
    if WORKERS.busy == 0 or quiesce(EXIT_WAIT_S):
        return
    print(
        f"glasses-rag: {WORKERS.busy} abandoned call(s) still running at exit; if one is inside native code the "
        "interpreter's teardown may abort",
        file=sys.stderr,
    )
    _flush()


def _install_exit_guard() -> None:
    """Once, with the pool's first thread: at exit (atexit runs before the interpreter is torn down, while
    daemon threads still run) cancel what is open and wait for running calls."""
    if not _GUARD["installed"]:
        _GUARD["installed"] = True
        atexit.register(_at_exit)
