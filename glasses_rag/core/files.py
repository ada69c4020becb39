"""Files written atomically (temp file + fsync + rename): a crash never leaves half a file, and a failed write
(disk full) leaves the old file as it was. `sync=False` skips the fsync: a reader still never sees part of the
file while the machine runs, but after a machine crash it may be empty or missing (for content-addressed files
that are checked against their hash when read: traces/requests.py). A new file gets the mode `open()` would give
it (0666 less the umask: with umask 077 nobody else reads a trace); a replaced file keeps its mode."""

from __future__ import annotations

import json
import os
import tempfile
import threading
from pathlib import Path
from typing import Any

TMP_SUFFIX = ".tmp"
_UMASK: list[int] = []
_UMASK_LOCK = threading.Lock()


def process_umask() -> int:
    """The process umask: read from /proc where the kernel says it (Linux: nothing changed), else read once by
    setting and restoring it (under a lock, the first time only)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    with _UMASK_LOCK:
        if not _UMASK:
            mask = os.umask(0o022)
            os.umask(mask)
            _UMASK.append(mask)
    return _UMASK[0]


def write_atomic(path: str | Path, data: str | bytes, sync: bool = True) -> Path:
    """Write `data` to `path` atomically: a temp file in the same folder, fsync (unless `sync` is False),
    `os.replace`. A reader sees the old file or the new one, never a part; a failed write (disk full) leaves the
    old file as it was and no temp file behind."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    try:
        mode = path.stat().st_mode & 0o777  # keep the permissions of the file it replaces
    except FileNotFoundError:
        mode = 0o666 & ~process_umask()  # as open() would make it (mkstemp makes 0600)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TMP_SUFFIX)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            if sync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_json_atomic(path: str | Path, data: Any) -> Path:
    return write_atomic(path, data if isinstance(data, str) else json.dumps(data, indent=2, ensure_ascii=False))


def remove_stale_tmp(folder: str | Path) -> int:
    """Delete temp files a killed writer left in `folder` (call it while holding the folder's lock)."""
    n = 0
    for p in Path(folder).glob(f".*{TMP_SUFFIX}"):
        p.unlink(missing_ok=True)
        n += 1
    return n
