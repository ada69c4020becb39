"""Files written atomically (temp file + fsync + rename): a crash never leaves half a file, and a failed write
(disk full) leaves the old file as it was. `sync=False` skips the fsync: a reader still never sees part of the
file while the machine runs, but after a machine crash it may be empty or missing (for content-addressed files
that are checked against their hash when read: traces/requests.py). A new file gets the mode `open()` would give
it (0666 less the umask: with umask 077 nobody else reads a trace); a replaced file keeps its mode."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

TMP_SUFFIX = ".tmp"
_TMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)


def write_atomic(path: str | Path, data: str | bytes, sync: bool = True) -> Path:
    """Write `data` to `path` atomically: a temp file in the same folder, fsync (unless `sync` is False),
    `os.replace`. A reader sees the old file or the new one, never a part; a failed write (disk full) leaves the
    old file as it was and no temp file behind."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    try:
        mode: int | None = path.stat().st_mode & 0o777  # keep the permissions of the file it replaces
    except FileNotFoundError:
        mode = None  # a new file: as open() would make it
    fd, tmp = _temp_beside(path, mode)
    try:
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


def _temp_beside(path: Path, mode: int | None) -> tuple[int, str]:
    """A new temp file in `path`'s folder, `.<name>.<random>.tmp`. Created with mode 0666, so the kernel applies
    the umask (and a default ACL) exactly as for open(): no umask read per file (mkstemp makes 0600, which then
    needed it); `mode` (that of a replaced file) is set after."""
    for _ in range(100):
        tmp = os.path.join(path.parent, f".{path.name}.{os.urandom(6).hex()}{TMP_SUFFIX}")
        try:
            fd = os.open(tmp, _TMP_FLAGS, 0o666)
        except FileExistsError:
            continue
        if mode is not None:
            try:
                os.fchmod(fd, mode)
            except BaseException:
                os.close(fd)
                Path(tmp).unlink(missing_ok=True)
                raise
        return fd, tmp
    raise FileExistsError(f"no free temp file name beside {path}")


def write_json_atomic(path: str | Path, data: Any) -> Path:
    return write_atomic(path, data if isinstance(data, str) else json.dumps(data, indent=2, ensure_ascii=False))


def remove_stale_tmp(folder: str | Path) -> int:
    """Delete temp files a killed writer left in `folder` (call it while holding the folder's lock)."""
    n = 0
    for p in Path(folder).glob(f".*{TMP_SUFFIX}"):
        p.unlink(missing_ok=True)
        n += 1
    return n
