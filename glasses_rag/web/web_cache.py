"""`WebCache`: the two-level open-web cache, persisted on disk, so a rerun of the same questions costs nothing.

SuperLens keeps a two-layer cache in front of its web search: search requests -> result urls, and
url -> parsed page content. This is that cache, one SQLite file (`web-cache.sqlite`, WAL mode: shared safely by
threads and processes) under the cache folder:

- level "searches": (engine, normalised request parameters) -> the parsed results;
- level "pages": url (fragment dropped) -> the parsed page (clean text and chunks, see glasses_rag.web.webpage).

It stores data, never code: a value is JSON text, next to a header (`EntryHeader`, validated with pydantic on every
read) that records the format, the entry's full key, its size and the SHA-256 of the value. Reading is
`json.loads` only (nothing is ever unpickled). An entry whose header names another key is a miss. A damaged entry
(bad header, checksum or JSON) is written to `damaged/` and deleted; a damaged database file (truncated, not
SQLite) is renamed `web-cache.sqlite.damaged-<time>`; both are logged with their path, and the cache goes on with
a fresh entry or file. Failures are never cached; a value larger than `max_entry_bytes` is not stored; each level
keeps at most `max_bytes`, least recently used entries going first. (The diskcache folders `searches/` and
`pages/` of earlier versions held pickles: they are never opened and may be deleted.)

    cache = WebCache("~/.cache/glasses-rag/web")
    hits, cached = cache.search("google", {"q": "falcon 9 maker", "num": 5}, lambda: client.google(...))
    cache.stats()  # {"searches": {"hits": .., "misses": ..}, "pages": {...}}
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urldefrag

from filelock import FileLock
from pydantic import BaseModel, ValidationError

from glasses_rag.core.files import write_atomic

log = logging.getLogger(__name__)

FORMAT = "glasses-web-cache/1"
DB_NAME = "web-cache.sqlite"
LEVELS = ("searches", "pages")
DEFAULT_MAX_BYTES = 2**30
DEFAULT_MAX_ENTRY_BYTES = 4 * 2**20
OPEN_LOCK_TIMEOUT_S = 30.0
CORRUPT_CODES = (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)
SCHEMA = """CREATE TABLE IF NOT EXISTS entries (level TEXT NOT NULL, id TEXT NOT NULL, header TEXT NOT NULL,
value BLOB NOT NULL, size INTEGER NOT NULL, used REAL NOT NULL, PRIMARY KEY (level, id));
CREATE INDEX IF NOT EXISTS entries_used ON entries (level, used);"""
_MISSING = object()


class EntryHeader(BaseModel):
    format: Literal["glasses-web-cache/1"]
    level: Literal["searches", "pages"]
    key: str
    stored_at: float
    size: int
    sha256: str


class DamagedEntry(ValueError):
    pass


def search_key(engine: str, params: dict[str, Any]) -> str:
    """A stable key for one search request: the engine plus its parameters, whitespace-collapsed, sorted."""
    norm = {str(k): " ".join(str(v).split()) for k, v in params.items() if v is not None and v != ""}
    return json.dumps({"engine": engine, **norm}, sort_keys=True, ensure_ascii=False)


def page_key(url: str) -> str:
    return urldefrag(url.strip())[0]


def _id(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def _is_corrupt(e: sqlite3.DatabaseError) -> bool:
    code = getattr(e, "sqlite_errorcode", None)
    if code is not None:
        return (code & 0xFF) in CORRUPT_CODES
    return any(s in str(e) for s in ("not a database", "malformed"))


def decode_entry(level: str, key: str, header_text: str, value: bytes) -> Any:
    """The stored value, or _MISSING when the entry belongs to another key; DamagedEntry when it is damaged."""
    try:
        header = EntryHeader.model_validate_json(header_text)
    except ValidationError as e:
        raise DamagedEntry(f"invalid header: {e.errors()[0]['msg']}") from None
    if header.level != level or header.key != key:
        return _MISSING
    if header.size != len(value) or hashlib.sha256(value).hexdigest() != header.sha256:
        raise DamagedEntry("value does not match the checksum in its header")
    try:
        return json.loads(value)
    except (ValueError, UnicodeDecodeError) as e:
        raise DamagedEntry(f"value is not JSON: {e}") from None


class _Stats:
    def __init__(self) -> None:
        self.hits = 0
        self.misses = 0
        self.oversize = 0


class WebCache:
    """Level "searches" (search request -> results) and level "pages" (url -> parsed page) in one SQLite file."""

    def __init__(
        self, directory: str | Path, max_bytes: int = DEFAULT_MAX_BYTES, max_entry_bytes: int = DEFAULT_MAX_ENTRY_BYTES
    ):
        self.directory = Path(directory).expanduser()
        self.directory.mkdir(parents=True, exist_ok=True)
        self.path = self.directory / DB_NAME
        self.max_bytes = max_bytes
        self.max_entry_bytes = max_entry_bytes
        self._lock = threading.RLock()
        self._stats = {level: _Stats() for level in LEVELS}
        self._db: sqlite3.Connection | None = None
        self._inode: int | None = None
        self._open()

    # -- the database file ------------------------------------------------------------------------------------

    def _open(self) -> None:
        try:
            self._connect()
        except sqlite3.DatabaseError as e:
            if not _is_corrupt(e):
                raise
            self._quarantine(e)
            self._connect()

    def _connect(self) -> None:
        # Switching to WAL takes an exclusive lock that SQLite does not wait for (no busy handler): two processes
        # opening one new file at once would see "database is locked", so openings take turns.
        with FileLock(f"{self.path}.open.lock", timeout=OPEN_LOCK_TIMEOUT_S):
            db = sqlite3.connect(self.path, timeout=2.0, check_same_thread=False, isolation_level=None)
            try:
                db.execute("PRAGMA journal_mode=WAL")
                db.executescript(SCHEMA)
            except BaseException:
                db.close()
                raise
            self._db, self._inode = db, os.stat(self.path).st_ino

    def _quarantine(self, error: Exception) -> None:
        """Move a damaged database file aside (unless another process already did) and start a fresh one."""
        if self._db is not None:
            self._db.close()
            self._db = None
        try:
            same = self._inode is None or os.stat(self.path).st_ino == self._inode
        except FileNotFoundError:
            same = False
        if same:
            aside = self.path.with_name(f"{DB_NAME}.damaged-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}")
            for suffix in ("", "-wal", "-shm"):
                src = Path(f"{self.path}{suffix}")
                if src.exists():
                    src.replace(Path(f"{aside}{suffix}"))
            log.warning(
                "web cache database %s is damaged (%s): moved to %s, starting a fresh one", self.path, error, aside
            )
        self._inode = None

    def _run(self, fn: Callable[[sqlite3.Connection], Any]) -> Any:
        """fn(connection) under the lock; a damaged file is moved aside and fn retried once on a fresh one."""
        with self._lock:
            for attempt in (0, 1):
                if self._db is None:
                    self._open()
                assert self._db is not None
                try:
                    return fn(self._db)
                except sqlite3.DatabaseError as e:
                    if attempt or not _is_corrupt(e):
                        raise
                    self._quarantine(e)
        raise AssertionError("unreachable")  # pragma: no cover

    # -- entries ----------------------------------------------------------------------------------------------

    def _get(self, level: str, key: str) -> Any:
        row = self._run(
            lambda db: db.execute(
                "SELECT header, value FROM entries WHERE level=? AND id=?", (level, _id(key))
            ).fetchone()
        )
        if row is None:
            return _MISSING
        try:
            value = decode_entry(level, key, row[0], bytes(row[1]))
        except DamagedEntry as e:
            self._set_aside(level, key, row, e)
            return _MISSING
        if value is not _MISSING:
            self._run(
                lambda db: db.execute(
                    "UPDATE entries SET used=? WHERE level=? AND id=?", (time.time(), level, _id(key))
                )
            )
        return value

    def _set_aside(self, level: str, key: str, row: tuple[Any, Any], error: Exception) -> None:
        folder = self.directory / "damaged"
        folder.mkdir(exist_ok=True)
        path = folder / f"{level}-{_id(key)[:16]}-{time.strftime('%Y%m%d-%H%M%S')}.entry"
        write_atomic(path, str(row[0]).encode(errors="replace") + b"\n" + bytes(row[1]))
        self._run(lambda db: db.execute("DELETE FROM entries WHERE level=? AND id=?", (level, _id(key))))
        log.warning("web cache entry for %r is damaged (%s): moved to %s", key[:200], error, path)

    def _put(self, level: str, key: str, value: Any) -> bool:
        data = json.dumps(value, ensure_ascii=False).encode()
        if len(data) > self.max_entry_bytes:
            self._stats[level].oversize += 1
            log.info(
                "web cache: %s value for %r not stored (%d bytes > %d)",
                level,
                key[:200],
                len(data),
                self.max_entry_bytes,
            )
            return False
        now = time.time()
        header = EntryHeader(
            format=FORMAT,
            level=level,
            key=key,
            stored_at=now,
            size=len(data),  # type: ignore[arg-type]
            sha256=hashlib.sha256(data).hexdigest(),
        )

        def store(db: sqlite3.Connection) -> None:
            db.execute(
                "INSERT OR REPLACE INTO entries VALUES (?, ?, ?, ?, ?, ?)",
                (level, _id(key), header.model_dump_json(), data, len(data), now),
            )
            self._evict(db, level)

        self._run(store)
        return True

    def _evict(self, db: sqlite3.Connection, level: str) -> None:
        total = db.execute("SELECT COALESCE(SUM(size), 0) FROM entries WHERE level=?", (level,)).fetchone()[0]
        if total <= self.max_bytes:
            return
        freed = 0
        for ident, size in db.execute("SELECT id, size FROM entries WHERE level=? ORDER BY used", (level,)).fetchall():
            if total - freed <= self.max_bytes:
                break
            db.execute("DELETE FROM entries WHERE level=? AND id=?", (level, ident))
            freed += size

    def get_or_compute(
        self, level: str, key: str, compute: Callable[[], Any], keep: Callable[[Any], bool]
    ) -> tuple[Any, bool]:
        value = self._get(level, key)
        stats = self._stats[level]
        with self._lock:
            if value is _MISSING:
                stats.misses += 1
            else:
                stats.hits += 1
        if value is not _MISSING:
            return value, True
        value = compute()  # exceptions propagate: nothing is stored
        if keep(value):
            self._put(level, key, value)
        return value, False

    def search(self, engine: str, params: dict[str, Any], compute: Callable[[], Any]) -> tuple[Any, bool]:
        """(results, came from the cache). Only list/dict results are stored."""
        return self.get_or_compute(
            "searches", search_key(engine, params), compute, lambda v: isinstance(v, (list, dict))
        )

    def page(self, url: str, compute: Callable[[], Any]) -> tuple[Any, bool]:
        """(parsed page, came from the cache). A page whose `error` is set is not stored (retried next time)."""
        return self.get_or_compute(
            "pages", page_key(url), compute, lambda v: isinstance(v, dict) and not v.get("error")
        )

    def stats(self) -> dict[str, Any]:
        counts = dict(self._run(lambda db: db.execute("SELECT level, COUNT(*) FROM entries GROUP BY level").fetchall()))
        out: dict[str, Any] = {"directory": str(self.directory)}
        for level, s in self._stats.items():
            n = s.hits + s.misses
            out[level] = {
                "hits": s.hits,
                "misses": s.misses,
                "hit_rate": round(s.hits / n, 4) if n else 0.0,
                "entries": counts.get(level, 0),
                "not_stored_oversize": s.oversize,
            }
        return out

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None
