"""The model requests of a run, as sent: content-addressed pieces under `<run folder>/requests/`
(glasses_rag/core/sent.py says what the stored form is), written before the trace that names them, and read back whole
by `read_request`.

    from traces.requests import read_request
    call = trace.model_calls()[0]
    sent = read_request(run_dir, call.request_id)   # {"messages": [...], "tools": [...], "response_schema": ...}

Each distinct piece is stored once (a turn's transcript grows by a few messages per request; the system text and
the tool specs are shared by the whole run), so the folder grows with what is new, not with the number of requests
times the prompt length. The pieces are lines of one append-only file, `requests/pieces.jsonl`: `<hash>\t<the
piece as JSON, keys sorted>`. A turn appends its new pieces in one write: creating a file per piece cost 0.1-1 ms
of CPU each on the benchmark machine's disk, ~4 a turn (docs/performance.md). Run folders written before keep
one file per piece, `requests/<hash>.json`; they are read as before.

Durability: the pieces file is not fsynced; the trace naming its pieces is (a finished trace is never lost). After
a machine crash a piece may therefore be missing or its line torn: every line is checked against its hash when
read, and a piece with no intact line raises RequestNotStored (the viewer shows the request as not stored), never
handing back what the file holds. A resumed run appends the pieces it stores again, after a line break if the
file ended in a torn line.

Links: `requests/` and its pieces file are never written through a symbolic link (a run folder handed over with
`requests/pieces.jsonl` linked to a shell start-up file would have a question's `$(...)` appended there): a link in
either place is refused (`PathRefused`), the pieces file is opened with O_NOFOLLOW, and the harness refuses such
a run folder before the run starts (`check_run_folder`).
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

from glasses_rag.core.files import open_append
from glasses_rag.core.paths import PathRefused, is_link
from glasses_rag.core.sent import piece_hash

FOLDER = "requests"
LOG = "pieces.jsonl"
_HASH = re.compile(r"^[0-9a-f]{32}$")
# pieces this process wrote, per folder (the last few folders): a run's system text and tool specs recur in every
# request. Not looked up in the file: a piece that a resumed run stores again is appended again (read: first
# intact line wins).
_STORED: OrderedDict[Path, set[str]] = OrderedDict()
_STORED_LOCK = threading.Lock()
_STORED_FOLDERS = 16


class RequestNotStored(LookupError):
    """A request id (or one of its pieces) is not in the run folder, or a piece does not match its hash."""


def write_pieces(run_dir: Path, pieces: dict[str, Any]) -> int:
    """Appends the pieces not yet stored to the folder's pieces file, in one write; returns how many were new."""
    folder = Path(run_dir) / FOLDER
    present = folder.is_dir()  # a folder deleted since (a run redone from scratch) forgets what it held
    with _STORED_LOCK:  # held while appending: whole lines, one writer at a time
        known = _STORED.setdefault(folder, set())
        _STORED.move_to_end(folder)
        while len(_STORED) > _STORED_FOLDERS:
            _STORED.popitem(last=False)
        if not present or len(known) > 50_000:  # bounded (~5 MB): past this, a piece may be appended twice
            known.clear()
        todo = [k for k in pieces if k not in known and _HASH.match(k)]
        if not todo:
            return 0
        lines = "".join(f"{k}\t{json.dumps(pieces[k], ensure_ascii=False, sort_keys=True)}\n" for k in todo)
        check_requests_folder(run_dir)
        folder.mkdir(parents=True, exist_ok=True)
        _append(folder / LOG, lines.encode("utf-8"))
        known.update(todo)
    return len(todo)


def check_requests_folder(run_dir: Path) -> None:
    """PathRefused when the run folder's `requests/` or its pieces file is a symbolic link (the run folder itself
    may be one: a link the user made to another disk)."""
    for path in (Path(run_dir) / FOLDER, Path(run_dir) / FOLDER / LOG):
        if is_link(path):
            raise PathRefused(
                f"{path} is a symbolic link (to {os.readlink(path)}): a run folder's requests are never written "
                "through a link; remove it, or run in another folder"
            )


def _append(path: Path, data: bytes) -> None:
    """`data` at the end of `path`, after a line break when the file ends in a torn line (a crash, a full disk);
    never through a link (glasses_rag.core.files.open_append)."""
    fd = open_append(path)
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            data = b"\n" + data
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


# the pieces file's intact lines by hash, per file (the last few), while its inode, size and time are unchanged
_INDEX: OrderedDict[Path, tuple[tuple[int, int, int], dict[str, str]]] = OrderedDict()
_INDEX_LOCK = threading.Lock()


def _log_index(path: Path) -> dict[str, str]:
    """{hash: canonical JSON} of the lines of a pieces file that hold what their hash says (first one wins)."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return {}
    sig = (st.st_ino, st.st_size, st.st_mtime_ns)
    with _INDEX_LOCK:
        hit = _INDEX.get(path)
        if hit is not None and hit[0] == sig:
            return hit[1]
    index: dict[str, str] = {}
    with open(path, "rb") as f:
        for raw in f:
            key, tab, text = raw.decode("utf-8", "replace").rstrip("\n").partition("\t")
            if tab and key not in index and _HASH.match(key) and _intact(text, key):
                index[key] = text
    with _INDEX_LOCK:
        _INDEX[path] = (sig, index)
        while len(_INDEX) > 4:
            _INDEX.popitem(last=False)
    return index


def _intact(text: str, key: str) -> bool:
    try:
        return piece_hash(json.loads(text)) == key
    except ValueError:
        return False


def read_piece(run_dir: Path, key: str) -> Any:
    """One stored piece, checked against its hash (a damaged, torn or foreign line or file is refused, never
    trusted)."""
    if not isinstance(key, str) or not _HASH.match(key):
        raise RequestNotStored(f"not a request piece id: {key!r}")
    folder = Path(run_dir) / FOLDER
    text = _log_index(folder / LOG).get(key)
    if text is not None:
        return json.loads(text)
    single = folder / f"{key}.json"  # a run folder written before the pieces file
    if single.exists() or not (folder / LOG).exists():
        return _load_checked(single, key)
    raise RequestNotStored(
        f"{folder / LOG} holds no intact line for {key} (never written, damaged, or lost in a crash)"
    )


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
