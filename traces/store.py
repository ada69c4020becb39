"""Writes traces atomically (temp file + rename) so a crash never leaves half a JSON file."""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any, Iterator

from traces.schema import TurnTrace


def write_json_atomic(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(data if isinstance(data, str) else json.dumps(data, indent=2, ensure_ascii=False))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)[:120] or "_"


class TraceStore:
    """One folder per run: `<root>/<run_id>/<session>__<turn>.json`, plus run-level files."""

    def __init__(self, root: Path, run_id: str):
        self.dir = Path(root) / _safe(run_id)
        self.dir.mkdir(parents=True, exist_ok=True)

    def path_for(self, session_id: str, turn_index: int) -> Path:
        return self.dir / f"{_safe(session_id)}__{turn_index:02d}.json"

    def write(self, trace: TurnTrace) -> Path:
        p = self.path_for(trace.session_id, trace.turn_index)
        write_json_atomic(p, trace.model_dump_json(indent=2))
        return p

    def read(self, session_id: str, turn_index: int) -> TurnTrace | None:
        p = self.path_for(session_id, turn_index)
        if not p.exists():
            return None
        try:
            return TurnTrace.model_validate_json(p.read_text(encoding="utf-8"))
        except ValueError:
            return None  # a foreign or damaged file is redone, never trusted

    def __iter__(self) -> Iterator[TurnTrace]:
        for p in sorted(self.dir.glob("*__*.json")):
            try:
                yield TurnTrace.model_validate_json(p.read_text(encoding="utf-8"))
            except ValueError:
                continue
