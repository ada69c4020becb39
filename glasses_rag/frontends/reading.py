"""Reading a run folder someone handed over, with bounded work (the viewer and the run diff): every file is looked at
(`stat`) before it is read, so a FIFO, a device or a 2 GB sparse file named like a trace is skipped with the reason
and never opened, and each kind of file has a size past which it is not read.

    for path, trace, why in read_traces(run_dir):   # trace None: `why` says what was wrong with the file
        ...
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from glasses_rag.core.files import TooLarge, read_text_bounded  # noqa: F401 - TooLarge re-exported
from traces.schema import TurnTrace
from traces.store import MAX_TRACE_BYTES

MAX_JSON_BYTES = 64 << 20  # run.json, report.json, superglasses_report.json


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
