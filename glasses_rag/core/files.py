"""Files written atomically (temp file + fsync + rename): a crash never leaves half a file, and a failed write
(disk full) leaves the old file as it was. `sync=False` skips the fsync: a reader still never sees part of the
file while the machine runs, but after a machine crash it may be empty or missing (for content-addressed files
that are checked against their hash when read: traces/requests.py). A new file gets the mode `open()` would give
it (0666 less the umask: with umask 077 nobody else reads a trace); a replaced file keeps its mode. A write never
follows a link: the rename replaces a link at `path` (never its target), and an append opens with O_NOFOLLOW.

Files read from a folder someone handed over are looked at (`stat`) before they are read, and not read past a
limit: `read_bounded` (a 2 GB sparse file named like a trace, a FIFO that would block, are refused from their
stat alone)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from glasses_rag.core.paths import PathRefused

TMP_SUFFIX = ".tmp"
_TMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_APPEND_FLAGS = os.O_RDWR | os.O_APPEND | os.O_CREAT | NOFOLLOW | getattr(os, "O_NONBLOCK", 0)
_APPEND_FLAGS |= getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
_READ_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)


def write_atomic(path: str | Path, data: str | bytes, sync: bool = True) -> Path:
    """Write `data` to `path` atomically: a temp file in the same folder, fsync (unless `sync` is False),
    `os.replace`. A reader sees the old file or the new one, never a part; a failed write (disk full) leaves the
    old file as it was and no temp file behind."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    try:
        st = os.lstat(path)  # a link is replaced, never followed: its target's mode is not copied either
        mode: int | None = st.st_mode & 0o777 if stat.S_ISREG(st.st_mode) else None
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


def open_append(path: str | Path) -> int:
    """A file descriptor to append to `path` (created if missing), read-write: never through a symbolic link
    (O_NOFOLLOW: a planted link raises, its target untouched), and only a regular file (a FIFO would block)."""
    try:
        fd = os.open(path, _APPEND_FLAGS, 0o666)
    except OSError as e:
        if os.path.islink(path):
            raise PathRefused(f"{path} is a symbolic link: the project does not append through links") from None
        raise e
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise PathRefused(f"{path} is not a regular file: not appended to")
    return fd


class TooLarge(OSError):
    """A file that is not read: larger than its limit, or not a regular file (the message says which, not the
    path: the caller names the file)."""


def _mb(n: int) -> str:
    return f"{n / (1 << 20):,.1f} MB" if n >= 1 << 20 else f"{n:,} bytes"


def read_bounded(path: str | Path, limit: int) -> bytes:
    """The bytes of `path` when it is a regular file of at most `limit` bytes; TooLarge (an OSError) otherwise,
    from its size alone (the file is stat'ed, then opened without blocking and checked again, never read past
    `limit`).

    Example: `read_bounded("preset.yaml", 1 << 20)` -> b"name: ..."; a 2 GB sparse file raises at once."""
    path = os.fspath(path)
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise TooLarge("not a regular file")
    if st.st_size > limit:
        raise TooLarge(f"{_mb(st.st_size)}, over the {_mb(limit)} read at most")
    with os.fdopen(os.open(path, _READ_FLAGS), "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):  # swapped for something else since the stat
            raise TooLarge("not a regular file")
        data = f.read(min(st.st_size, limit) + 1)  # its size, not the limit: a read allocates what it asks for
    if len(data) > limit:  # grew since the stat
        raise TooLarge(f"over the {_mb(limit)} read at most")
    return data


def read_text_bounded(path: str | Path, limit: int, encoding: str = "utf-8") -> str:
    """`read_bounded` decoded (UnicodeDecodeError, a ValueError, for bytes that are not text)."""
    return read_bounded(path, limit).decode(encoding)
