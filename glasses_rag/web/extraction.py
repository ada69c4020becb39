"""Text extraction in worker processes that are killed at the deadline: `Extractor`.

trafilatura can spend minutes of CPU on a hostile page (2 MB of `<p>a</p>` took 86 s), and a thread cannot be
stopped. So a page's text is extracted by `python -m glasses_rag.web.extract_worker`, a child process that imports
trafilatura once and serves one job at a time over pipes. The caller waits in slices: when the job's time limit
passes or the turn's cancel scope (glasses_rag.core.calls.current_scope()) is cancelled, the worker is killed (SIGKILL)
and reaped at once, so no process keeps a core busy after its turn; the next job starts a fresh worker. Idle workers
are reused (at most `max_workers` at once) and end with the process (at exit, or at EOF on their stdin).
"""

from __future__ import annotations

import atexit
import json
import os
import select
import subprocess
import sys
import threading
import time
import weakref
from pathlib import Path
from typing import Any

from glasses_rag.core.calls import CancelScope, current_scope
from glasses_rag.web.extract_worker import HEADER, MEMORY_ENV

POLL_S = 0.1
PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])  # the worker imports `glasses_rag.web` from the same checkout


class ExtractionTimeout(TimeoutError):
    """The extraction did not finish within its time limit; its worker was killed."""


class _Limit:
    def __init__(self, timeout_s: float, scope: CancelScope | None):
        self.timeout_s = timeout_s
        self.deadline = time.monotonic() + timeout_s
        self.scope = scope

    def slice(self) -> float:
        if self.scope is not None:
            self.scope.raise_if_cancelled()
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise ExtractionTimeout(f"text extraction took longer than {self.timeout_s:g}s (worker killed)")
        return min(left, POLL_S)


class _ExtractionProcess:
    def __init__(self, memory_bytes: int) -> None:
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [PACKAGE_ROOT, os.environ.get("PYTHONPATH")])),
            MEMORY_ENV: str(memory_bytes / 2**20),
        }
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "glasses_rag.web.extract_worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            close_fds=True,
        )
        _LIVE.add(self)

    def _write(self, data: bytes, limit: _Limit) -> None:
        assert self.proc.stdin is not None
        fd = self.proc.stdin.fileno()
        os.set_blocking(fd, False)
        view = memoryview(data)
        while view:
            if select.select([], [fd], [], limit.slice())[1]:
                try:
                    view = view[os.write(fd, view) :]
                except BlockingIOError:
                    continue

    def _read(self, n: int, limit: _Limit) -> bytes:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        buf = bytearray()
        while len(buf) < n:
            if select.select([fd], [], [], limit.slice())[0]:
                part = os.read(fd, n - len(buf))
                if not part:
                    raise RuntimeError(f"the extraction worker died (exit code {self.proc.poll()})")
                buf += part
        return bytes(buf)

    def call(self, job: dict[str, Any], limit: _Limit) -> dict[str, Any]:
        data = json.dumps(job).encode()
        self._write(HEADER.pack(len(data)) + data, limit)
        (n,) = HEADER.unpack(self._read(HEADER.size, limit))
        return json.loads(self._read(n, limit))

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout):
            if f is not None:
                try:
                    f.close()
                except OSError:
                    pass
        _LIVE.discard(self)


_LIVE: weakref.WeakSet[_ExtractionProcess] = weakref.WeakSet()


@atexit.register
def _kill_all() -> None:
    for w in list(_LIVE):
        w.kill()


class Extractor:
    """At most `max_workers` extraction processes; `run` blocks in slices and honours the turn's cancel scope."""

    def __init__(self, max_workers: int = 2, memory_bytes: int = 2048 * 2**20):
        self.max_workers = max_workers
        self.memory_bytes = memory_bytes
        self._idle: list[_ExtractionProcess] = []
        self._started = 0
        self._cond = threading.Condition()

    def _acquire(self, limit: _Limit) -> _ExtractionProcess:
        with self._cond:
            while True:
                if self._idle:
                    w = self._idle.pop()
                    if w.proc.poll() is None:
                        return w
                    w.kill()
                    self._started -= 1
                    continue
                if self._started < self.max_workers:
                    self._started += 1
                    break
                self._cond.wait(limit.slice())
        try:
            return _ExtractionProcess(self.memory_bytes)
        except BaseException:
            self._release(None)
            raise

    def _release(self, worker: _ExtractionProcess | None) -> None:
        with self._cond:
            if worker is not None:
                self._idle.append(worker)
            else:
                self._started -= 1
            self._cond.notify()

    def run(self, body: str, url: str | None, timeout_s: float, chunk_words: int = 120) -> dict[str, Any]:
        """{title, text, chunks} or {error} of one page; ExtractionTimeout past `timeout_s`,
        glasses_rag.core.calls.Cancelled when the turn ends first (either way the worker is killed before this
        returns)."""
        limit = _Limit(timeout_s, current_scope())
        worker = self._acquire(limit)
        try:
            reply = worker.call({"body": body, "url": url, "chunk_words": chunk_words, "timeout_s": timeout_s}, limit)
        except BaseException:
            worker.kill()
            self._release(None)
            raise
        self._release(worker)
        return reply

    def close(self) -> None:
        with self._cond:
            idle, self._idle = self._idle, []
            self._started -= len(idle)
        for w in idle:
            w.kill()
