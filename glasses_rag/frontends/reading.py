"""Reading a run folder someone handed over, with bounded work (the viewer and the run diff): every file is looked at
(`stat`) before it is read, so a FIFO, a device or a 2 GB sparse file named like a trace is skipped with the reason
and never opened, and each kind of file has a size past which it is not read.

    for path, trace, why in read_traces(run_dir):   # trace None: `why` says what was wrong with the file
        ...
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from traces.schema import TurnTrace

MAX_TRACE_BYTES = 32 << 20  # a turn trace: the largest a real run writes is a few hundred KB
MAX_JSON_BYTES = 64 << 20  # run.json, report.json, superglasses_report.json


class TooLarge(OSError):
    """A file that is not read: larger than its limit, or not a regular file."""


def _mb(n: int) -> str:
    return f"{n / (1 << 20):,.1f} MB" if n >= 1 << 20 else f"{n:,} bytes"


def read_text_bounded(path: str | Path, limit: int) -> str:
    """The text of `path` when it is a regular file of at most `limit` bytes; TooLarge (an OSError) otherwise, from
    its size alone (the file is stat'ed, then opened without blocking and checked again, never read past `limit`)."""
    path = os.fspath(path)
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise TooLarge("not a regular file")
    if st.st_size > limit:
        raise TooLarge(f"{_mb(st.st_size)}, over the {_mb(limit)} read at most")
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):  # swapped for something else since the stat
            raise TooLarge("not a regular file")
        data = f.read(min(st.st_size, limit) + 1)  # its size, not the limit: a read allocates what it asks for
    if len(data) > limit:  # grew since the stat
        raise TooLarge(f"over the {_mb(limit)} read at most")
    return data.decode("utf-8")


def read_json(path: Path, limit: int = MAX_JSON_BYTES) -> tuple[Any, str | None]:
    """(the JSON in `path`, None); (None, None) when there is no such file; (None, why) when it cannot be read."""
    if not os.path.lexists(path):
        return None, None
    try:
        return json.loads(read_text_bounded(path, limit)), None
    except (OSError, ValueError, RecursionError) as e:
        return None, f"{path.name}: {type(e).__name__}: {e}"[:300]


def trace_files(run_dir: Path) -> list[Path]:
    """The files of `run_dir` named like turn traces (`<session>__<turn>.json`), by name (names are sorted as text:
    sorting 100k Path objects costs seconds)."""
    with os.scandir(run_dir) as entries:
        names = sorted(e.name for e in entries if "__" in e.name and e.name.endswith(".json"))
    return [Path(run_dir, n) for n in names]


def read_trace(path: Path) -> TurnTrace:
    """One trace file; OSError (TooLarge included), UnicodeDecodeError or ValueError when it is not one."""
    return TurnTrace.model_validate_json(read_text_bounded(path, MAX_TRACE_BYTES))


def read_traces(run_dir: Path) -> Iterator[tuple[Path, TurnTrace | None, str | None]]:
    """Each trace file with its trace, or with the reason it was skipped (damaged, not a trace, too large, not a
    regular file); one trace in memory at a time."""
    for p in trace_files(run_dir):
        try:
            yield p, read_trace(p), None
        except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:
            msg = str(e).strip().splitlines()
            yield p, None, f"{type(e).__name__}: {msg[0] if msg else ''}"[:300]
