"""The open-web disk cache stores data, not code (JSON values behind a validated header, never unpickled), checks
each entry's key, repairs a damaged entry or database file, and keeps its configurable caps; the Lens image folder
is pruned."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pickle
import sqlite3
import time
from pathlib import Path

import pytest
from PIL import Image

from glasses_rag.web.config import WebConfig
from glasses_rag.web.lens_images import prune_images, publish_image
from glasses_rag.web.web_cache import DB_NAME, FORMAT, WebCache, _id, page_key, search_key


class RunsCode:
    """Unpickling this creates `path` (a harmless stand-in for the shell command the audit ran)."""

    def __init__(self, path: Path):
        self.path = path

    def __reduce__(self):
        return (open, (str(self.path), "w"))


def _plant(db_path: Path, level: str, key: str, value: bytes, header_key: str | None = None) -> None:
    """Write a row the way an attacker with access to the cache folder could: any bytes, a consistent header."""
    header = {
        "format": FORMAT,
        "level": level,
        "key": header_key or key,
        "stored_at": time.time(),
        "size": len(value),
        "sha256": hashlib.sha256(value).hexdigest(),
    }
    with sqlite3.connect(db_path) as db:
        db.execute(
            "INSERT OR REPLACE INTO entries VALUES (?, ?, ?, ?, ?, ?)",
            (level, _id(key), json.dumps(header), value, len(value), time.time()),
        )


def test_values_are_json_behind_a_header_that_records_the_key(tmp_path):
    cache = WebCache(tmp_path)
    cache.page("https://example.org/a#frag", lambda: {"url": "https://example.org/a", "text": "hello"})
    cache.search("google", {"q": "x  y", "num": 5}, lambda: {"results": [{"url": "u"}], "notes": []})
    cache.close()
    with sqlite3.connect(tmp_path / DB_NAME) as db:
        rows = db.execute("SELECT level, header, value FROM entries ORDER BY level").fetchall()
    assert [r[0] for r in rows] == ["pages", "searches"]
    for _level, header, value in rows:
        h = json.loads(header)
        assert h["format"] == FORMAT and h["sha256"] == hashlib.sha256(value).hexdigest()
        assert isinstance(json.loads(value), dict) and value[:1] != b"\x80"  # JSON, not a pickle
    assert json.loads(rows[0][1])["key"] == page_key("https://example.org/a#frag") == "https://example.org/a"
    assert json.loads(rows[1][1])["key"] == search_key("google", {"num": 5, "q": "x y"})


def test_a_planted_pickle_never_runs(tmp_path, caplog):
    marker = tmp_path / "pwned"
    payload = pickle.dumps(RunsCode(marker))
    # the earlier diskcache layout (values were pickles): never opened any more
    import diskcache

    with diskcache.Cache(str(tmp_path / "searches")) as old:
        old.set(hashlib.sha256(search_key("google", {"q": "x"}).encode()).hexdigest(), RunsCode(marker))
    assert not marker.exists()
    cache = WebCache(tmp_path)
    key = page_key("https://example.org/p")
    _plant(cache.path, "pages", key, payload)  # a pickle as a value, with a header that matches its bytes
    computed = []
    caplog.set_level(logging.WARNING)
    value, cached = cache.page(key, lambda: computed.append(1) or {"url": key, "text": "fresh"})
    assert not marker.exists(), "reading the cache ran code"
    assert value == {"url": key, "text": "fresh"} and not cached and computed == [1]
    assert "value is not JSON" in caplog.text and "damaged" in caplog.text
    cache.search("google", {"q": "x"}, lambda: {"results": []})
    assert not marker.exists()
    assert cache.page(key, lambda: 1 / 0) == (value, True)  # rebuilt: the fresh value was stored


def test_an_entry_recorded_for_another_key_is_a_miss(tmp_path):
    cache = WebCache(tmp_path)
    key = page_key("https://example.org/wanted")
    _plant(
        cache.path,
        "pages",
        key,
        json.dumps({"url": "https://evil.example", "text": "other page"}).encode(),
        header_key="https://evil.example/",
    )
    value, cached = cache.page(key, lambda: {"url": key, "text": "the right page"})
    assert not cached and value["text"] == "the right page"
    assert cache.page(key, lambda: 1 / 0)[0]["text"] == "the right page"


def test_a_damaged_entry_is_moved_aside_logged_and_recomputed(tmp_path, caplog):
    cache = WebCache(tmp_path)
    key = "https://example.org/x"
    cache.page(key, lambda: {"url": key, "text": "v1"})
    with sqlite3.connect(cache.path) as db:
        db.execute("UPDATE entries SET value = ? WHERE level='pages'", (b'{"url": "x", "text": "v2 tampered"}',))
    caplog.set_level(logging.WARNING)
    value, cached = cache.page(key, lambda: {"url": key, "text": "v3"})
    assert not cached and value["text"] == "v3"
    aside = list((tmp_path / "damaged").iterdir())
    assert len(aside) == 1 and str(aside[0]) in caplog.text and b"v2 tampered" in aside[0].read_bytes()
    with sqlite3.connect(cache.path) as db:
        db.execute("UPDATE entries SET header = 'not json' WHERE level='pages'")
    assert cache.page(key, lambda: {"url": key, "text": "v4"}) == ({"url": key, "text": "v4"}, False)


@pytest.mark.parametrize("damage", ["not_sqlite", "truncated"])
def test_a_damaged_database_file_is_moved_aside_and_rebuilt(tmp_path, caplog, damage):
    db_path = tmp_path / DB_NAME
    if damage == "not_sqlite":
        db_path.write_bytes(b"this is not a database\n" * 100)
    else:
        cache = WebCache(tmp_path)
        for i in range(300):
            cache.page(f"https://example.org/{i}", lambda i=i: {"url": str(i), "text": "x" * 2000})
        cache.close()
        with sqlite3.connect(db_path) as db:
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        db_path.write_bytes(db_path.read_bytes()[: db_path.stat().st_size // 3])
    caplog.set_level(logging.WARNING)
    cache = WebCache(tmp_path)
    for i in range(300):  # a truncated file may only show its damage on a page that is gone
        cache.page(f"https://example.org/{i}", lambda i=i: {"url": str(i), "text": "again"})
    aside = sorted(p.name for p in tmp_path.glob(f"{DB_NAME}.damaged-*") if not p.name.endswith(("-wal", "-shm")))
    assert len(aside) == 1 and aside[0] in caplog.text and str(db_path) in caplog.text
    value, cached = cache.page("https://example.org/7", lambda: 1 / 0)
    assert cached and value["text"] == "again"  # the rebuilt file works
    assert cache.stats()["pages"]["entries"] == 300


def test_a_database_damaged_while_in_use_is_rebuilt(tmp_path, caplog):
    cache = WebCache(tmp_path)
    for i in range(50):
        cache.page(f"https://example.org/{i}", lambda i=i: {"url": str(i), "text": "x" * 2000})
    cache.close()
    cache = WebCache(tmp_path)  # open, with its connection, when the file is overwritten in place
    with open(tmp_path / DB_NAME, "r+b") as f:
        f.write(os.urandom((tmp_path / DB_NAME).stat().st_size))
    caplog.set_level(logging.WARNING)
    assert cache.page("https://example.org/3", lambda: {"url": "3", "text": "y"}) == ({"url": "3", "text": "y"}, False)
    assert "is damaged" in caplog.text and len(list(tmp_path.glob(f"{DB_NAME}.damaged-*"))) >= 1
    assert cache.page("https://example.org/3", lambda: 1 / 0)[1]


def test_caps_are_configurable_and_oversized_values_are_not_stored(tmp_path, monkeypatch):
    monkeypatch.setenv("GLASSES_WEB_CACHE_MAX_MB", "2")
    monkeypatch.setenv("GLASSES_WEB_CACHE_MAX_ENTRY_KB", "64")
    config = WebConfig.from_env()
    assert config.cache_max_bytes == 2 * 2**20 and config.cache_max_entry_bytes == 65_536
    cache = WebCache(tmp_path, config.cache_max_bytes, config.cache_max_entry_bytes)
    big = {"results": [{"snippet": "w" * 5_000_000}]}  # the audit stored a 200 MB snippet whole
    assert cache.search("google", {"q": "big"}, lambda: big) == (big, False)
    assert cache.search("google", {"q": "big"}, lambda: {"results": []}) == ({"results": []}, False)
    assert cache.stats()["searches"]["not_stored_oversize"] == 1
    for i in range(50):  # 50 x ~60 KB = 3 MB into a 2 MiB level: the least recently used go
        cache.page(f"https://example.org/{i}", lambda i=i: {"url": str(i), "text": "p" * 60_000})
        if i >= 1:
            cache.page("https://example.org/0", lambda: 1 / 0)  # kept in use
    with sqlite3.connect(cache.path) as db:
        total = db.execute("SELECT SUM(size) FROM entries WHERE level='pages'").fetchone()[0]
    assert total <= 2 * 2**20 and cache.page("https://example.org/0", lambda: 1 / 0)[1]
    assert not cache.page("https://example.org/1", lambda: {"url": "1", "text": "again"})[1]
    with pytest.raises(ValueError, match="GLASSES_WEB_CACHE_MAX_MB"):
        WebConfig.from_env({"GLASSES_WEB_CACHE_MAX_MB": "lots"})


def _publish(folder, i, size=0):
    """Publishes a distinct image (about `size` bytes of noise when given); its path."""
    im = (
        Image.frombytes("RGB", (256, 256), os.urandom(256 * 256 * 3)) if size else Image.new("RGB", (16, 16), (i, 2, 3))
    )
    return folder / publish_image(im, folder, "http://img.example", 86400, 10**9).rsplit("/", 1)[1]


def test_the_lens_image_folder_is_pruned_by_age_and_size(tmp_path):
    folder = tmp_path / "img"
    folder.mkdir()
    (folder / "notes.txt").write_text("not ours: never deleted")
    users = folder / ("a" * 32 + ".jpg")  # named like ours, two days old, but not in the manifest
    users.write_bytes(b"x" * 100)
    os.utime(users, (time.time() - 2 * 86400,) * 2)
    mine = [_publish(folder, i, size=1) for i in range(6)]
    for k, p in enumerate(mine):
        os.utime(p, (time.time() - 100 + k,) * 2)
    os.utime(mine[1], (time.time() - 3 * 86400,) * 2)
    budget = sum(p.stat().st_size for p in [mine[0], *mine[3:]])
    deleted = prune_images(folder, 86400, budget, keep=mine[0].name)
    assert mine[1] in deleted and mine[0].exists() and all(p.exists() for p in mine[3:])  # by age, then the oldest
    assert users.exists() and (folder / "notes.txt").exists()
    assert sum(p.stat().st_size for p in mine if p.exists()) <= budget
    folder.chmod(0o755)
    old = os.umask(0o077)  # a private umask for the run's own outputs ...
    try:
        assert (
            _publish(folder, 9).stat().st_mode & 0o777 == 0o644
        )  # ... but a served image is as readable as its folder
    finally:
        os.umask(old)


def test_pruning_deletes_only_what_the_manifest_lists(tmp_path):
    """A user's old `<32 hex>.jpg` files survive the first search; a tampered manifest cannot name other paths."""
    folder = tmp_path / "img"
    outside = tmp_path / ("b" * 32 + ".jpg")
    outside.write_bytes(b"keep")
    folder.mkdir()
    users = [folder / (c * 32 + ".jpg") for c in "cd"]
    for p in users:
        p.write_bytes(b"y" * 1000)
        os.utime(p, (time.time() - 2 * 86400,) * 2)
    (folder / ".glasses-published.json").write_text(json.dumps({"files": ["../" + outside.name, "notes.txt"]}))
    (folder / "notes.txt").write_text("x")
    ours = _publish(folder, 7)
    os.utime(ours, (time.time() - 3 * 86400,) * 2)
    deleted = prune_images(folder, 86400, 0)
    assert deleted == [ours] and all(p.exists() for p in users) and outside.exists() and (folder / "notes.txt").exists()
    assert json.loads((folder / ".glasses-published.json").read_text())["files"] == []
