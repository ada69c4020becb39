"""The model requests of a run, as sent: content-addressed pieces under `<run folder>/requests/`
(glasses_rag/core/sent.py says what the stored form is), written before the trace that names them, and read back whole
by `read_request`.

    from traces.requests import read_request
    call = trace.model_calls()[0]
    sent = read_request(run_dir, call.request_id)   # {"messages": [...], "tools": [...], "response_schema": ...}

Each distinct piece is one small JSON file written once (a turn's transcript grows by a few messages per request;
the system text and the tool specs are shared by the whole run), so the folder grows with what is new, not with
the number of requests times the prompt length.

Durability: a piece is written atomically (temp file + rename) but not fsynced; the trace naming it is (a finished
trace is never lost). After a machine crash a piece may therefore be empty, torn or missing: `read_piece` checks
every piece against its hash and raises RequestNotStored for it (the viewer shows the request as not stored),
never handing back what the file holds; a resumed run writes such a piece again when it stores it. Syncing the
~4 new pieces of a turn cost more CPU than the rest of the turn's trace writing (docs/performance.md).
"""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

from glasses_rag.core.files import write_atomic
from glasses_rag.core.sent import piece_hash

FOLDER = "requests"
_HASH = re.compile(r"^[0-9a-f]{32}$")
# pieces this process wrote or found, per folder (the last few folders): a run's system text and tool specs recur
# in every request, and checking the disk for each (a stat per piece, ~20 a turn) costs more than the set
_STORED: OrderedDict[Path, set[str]] = OrderedDict()
_STORED_LOCK = threading.Lock()
_STORED_FOLDERS = 16


class RequestNotStored(LookupError):
    """A request id (or one of its pieces) is not in the run folder, or a piece does not match its hash."""


def write_pieces(run_dir: Path, pieces: dict[str, Any]) -> int:
    """Writes the pieces not yet stored; returns how many were new."""
    folder = Path(run_dir) / FOLDER
    present = folder.is_dir()  # a folder deleted since (a run redone from scratch) forgets what it held
    with _STORED_LOCK:
        known = _STORED.setdefault(folder, set())
        _STORED.move_to_end(folder)
        while len(_STORED) > _STORED_FOLDERS:
            _STORED.popitem(last=False)
        if not present or len(known) > 50_000:  # bounded (~5 MB): past this, pieces are checked on disk again
            known.clear()
        todo = [k for k in pieces if k not in known and _HASH.match(k)]
    new = 0
    for key in todo:
        path = folder / f"{key}.json"
        if not _intact(path, key):  # a resumed run's pieces are on disk already, unless a crash tore them
            folder.mkdir(parents=True, exist_ok=True)
            # not synced: see the module docstring (the trace written after it is)
            write_atomic(path, json.dumps(pieces[key], ensure_ascii=False, sort_keys=True), sync=False)
            new += 1
        with _STORED_LOCK:
            known.add(key)
    return new


def _intact(path: Path, key: str) -> bool:
    """The piece file exists and holds what its name says (looked at once per process and piece)."""
    if not path.exists():
        return False
    try:
        _load_checked(path, key)
    except RequestNotStored:
        return False
    return True


def read_piece(run_dir: Path, key: str) -> Any:
    """One stored piece, checked against its hash (a damaged, torn or foreign file is refused, never trusted)."""
    if not isinstance(key, str) or not _HASH.match(key):
        raise RequestNotStored(f"not a request piece id: {key!r}")
    return _load_checked(Path(run_dir) / FOLDER / f"{key}.json", key)


def _load_checked(path: Path, key: str) -> Any:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise RequestNotStored(f"{path}: {type(e).__name__}: {e}") from None
    if piece_hash(value) != key:
        raise RequestNotStored(f"{path} does not hold what its name says (damaged or edited)")
    return value


def read_request(run_dir: Path, request_id: str) -> dict[str, Any]:
    """The request as sent: `messages` (stored form: image data URLs as `sha256:<hex>`), `tools` (the tool specs
    offered, or None), `response_schema` (or None), `max_tokens`, `temperature`. Raises RequestNotStored."""
    record = read_piece(run_dir, request_id)
    if not isinstance(record, dict) or record.get("kind") != "request":
        raise RequestNotStored(f"{request_id} is not a request record")
    return {
        "messages": [read_piece(run_dir, k) for k in record.get("messages") or []],
        "tools": read_piece(run_dir, record["tools"]) if record.get("tools") else None,
        "response_schema": read_piece(run_dir, record["response_schema"]) if record.get("response_schema") else None,
        "max_tokens": record.get("max_tokens"),
        "temperature": record.get("temperature"),
        "message_ids": list(record.get("messages") or []),
        "tools_id": record.get("tools"),
    }
