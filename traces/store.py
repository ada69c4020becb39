"""Writes traces atomically (temp file + rename) so a crash never leaves half a JSON file, and reads them back
bounded: a file is looked at before it is read, and one over MAX_TRACE_BYTES (a 2 GB sparse file named like a
trace), or not a regular file, is skipped unread."""

from __future__ import annotations

import hashlib
import math
import os
import re
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from glasses_rag.core.credentials import public_url
from glasses_rag.core.files import (  # noqa: F401 - TMP_SUFFIX, remove_stale_tmp and write_atomic re-exported
    TMP_SUFFIX,
    read_text_bounded,
    remove_stale_tmp,
    write_atomic,
    write_json_atomic,
)
from traces.schema import TurnTrace

MAX_TRACE_BYTES = 32 << 20  # a turn trace: the largest a real run writes is a few hundred KB


def read_trace_file(path: str | Path) -> TurnTrace:
    """One trace file, looked at before it is read; OSError (too large, not a regular file), UnicodeDecodeError or
    ValueError when it is not one."""
    return TurnTrace.model_validate_json(read_text_bounded(path, MAX_TRACE_BYTES))


def _clean(value: Any, nonfinite: Any) -> Any:
    """JSON-safe copy: lone surrogates and bad bytes replaced, unknown objects as repr, non-finite floats as
    `nonfinite`."""
    if isinstance(value, str):
        return value.encode("utf-8", "replace").decode("utf-8")
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, bool) or value is None or isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else nonfinite
    if isinstance(value, dict):
        return {str(_clean(k, nonfinite)): _clean(v, nonfinite) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_clean(v, nonfinite) for v in value]
    if isinstance(value, datetime):  # event timestamps
        return value.isoformat()
    return _clean(repr(value)[:2000], nonfinite)


def dump_trace(trace: TurnTrace) -> str:
    """The trace as JSON that reads back with TurnTrace.model_validate_json, without URL userinfo anywhere in it
    (a model server's `http://alice:pw@host/v1` in an error message is written as `http://host/v1`).

    A hostile value (an object in a tool's arguments, a lone surrogate in a question, a NaN) must
    not cost the turn its trace: such values are written as text / null (then 0.0) instead.
    """
    return public_url(_dump(trace))


def _dump(trace: TurnTrace) -> str:
    try:
        text = trace.model_dump_json(indent=2)
        TurnTrace.model_validate_json(text)
        return text
    except ValueError:  # PydanticSerializationError and ValidationError are ValueErrors
        pass
    last: Exception | None = None
    for nonfinite in (None, 0.0):
        try:
            data = _clean(trace.model_dump(mode="python"), nonfinite)
            return TurnTrace.model_validate(data).model_dump_json(indent=2)
        except ValueError as e:
            last = e
    raise ValueError(f"trace of {trace.session_id!r} turn {trace.turn_index} cannot be written as JSON: {last}")


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)[:120] or "_"


def check_run_id(run_id: str) -> str:
    """`run_id` when it names one folder inside the output folder; ValueError (one line, saying why) otherwise.

    Example: `check_run_id("task1-demo")` -> "task1-demo"; `check_run_id("..")` raises."""
    bad = [c for c in ("/", "\\", "\0") if c in run_id]
    if run_id in ("", ".", "..") or bad or os.sep in run_id or (os.altsep and os.altsep in run_id):
        why = f" (it contains {bad[0]!r})" if bad else ""
        raise ValueError(
            f"--run-id must be a single folder name, not '.', '..', empty or with a path separator or NUL: "
            f"{run_id!r}{why}"
        )
    return run_id


class TraceStore:
    """One folder per run: `<root>/<run_id>/<session>__<turn>.json`, plus run-level files. `run_id` must be one
    folder name (`check_run_id`): '..' or 'a/b' would write outside `root`."""

    def __init__(self, root: Path, run_id: str):
        self.dir = Path(root) / _safe(check_run_id(run_id))
        self.dir.mkdir(parents=True, exist_ok=True)

    def path_for(self, session_id: str, turn_index: int) -> Path:
        name = _safe(session_id)
        if name != session_id:  # 'a/b' and 'a_b' must not share a file
            name = f"{name[:100]}-{hashlib.blake2b(session_id.encode('utf-8', 'replace'), digest_size=4).hexdigest()}"
        return self.dir / f"{name}__{turn_index:02d}.json"

    def write(self, trace: TurnTrace) -> Path:
        """The trace (fsynced), after the requests its model calls sent (appended to requests/pieces.jsonl first, so
        a trace never names a piece not yet written; not synced: traces/requests.py says why a torn one is never
        used)."""
        from traces.requests import write_pieces

        pieces: dict[str, Any] = {}
        for call in trace.model_calls():
            pieces.update(call.take_pieces())
        if pieces:
            write_pieces(self.dir, pieces)
        p = self.path_for(trace.session_id, trace.turn_index)
        write_json_atomic(p, dump_trace(trace))
        return p

    def read(self, session_id: str, turn_index: int) -> TurnTrace | None:
        p = self.path_for(session_id, turn_index)
        if not os.path.lexists(p):
            return None
        try:
            return read_trace_file(p)
        except (OSError, ValueError, RecursionError):
            return None  # a foreign, damaged or oversized file is redone, never trusted

    def __iter__(self) -> Iterator[TurnTrace]:
        for p in sorted(self.dir.glob("*__*.json")):
            try:
                yield read_trace_file(p)
            except (OSError, ValueError, RecursionError):
                continue
