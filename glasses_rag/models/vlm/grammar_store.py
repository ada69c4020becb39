"""Compiled grammars kept on disk between runs.

xgrammar compiles a reply schema against the whole vocabulary: about 15 s per schema for Gemma's 262k tokens on
one core here, paid again by every process. A compiled
grammar serializes (`CompiledGrammar.serialize_json`, 62 MB of JSON for the answer schema, 17 MB compressed) and
loads back in under a second, with the same token masks. Files are keyed by a hash of the xgrammar version, the
tokenizer (its full xgrammar view), the compile options and the schema's JSON text, so a changed tokenizer or
schema never reads another's grammar. The key is also written at the head of the file and checked when it is read:
a file copied or renamed under another key (a shared folder) is not trusted for its name.

A damaged file (torn, edited, from an incompatible build) is removed and the schema compiled again. A file larger
than `MAX_BYTES` is not read, and one that inflates past it is refused at that point (`MAX_BYTES` is 256 MiB;
a real one is ~62 MB). The folder (`default_folder()`: `$GLASSES_GRAMMAR_CACHE`, else `grammars/` under
`$GLASSES_CACHE_DIR` or ~/.cache/glasses-rag) keeps the `max_files` most recently used files.

Example (SchemaGrammars does this for every schema it compiles):
    >>> store = GrammarStore(default_folder())                             # doctest: +SKIP
    >>> key = store.key(tokenizer_info, schema_json, "json_schema")        # doctest: +SKIP
    >>> grammar = store.load(key, tokenizer_info)  # None: not stored yet  # doctest: +SKIP
    >>> store.save(key, compiler.compile_json_schema(schema_json))         # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import logging
import os
import zlib
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from glasses_rag.core.files import write_atomic

log = logging.getLogger(__name__)

MAX_BYTES = 256 << 20  # a compiled grammar of a 262k vocabulary is ~60 MB of JSON; more is not one of ours
SUFFIX = ".xgrammar.json.z"
HEADER = b"glasses-rag grammar "  # + the key + a line break, then the compressed grammar


def _xgrammar_version() -> str:
    try:
        return version("xgrammar")
    except PackageNotFoundError:
        return "unknown"


def default_folder() -> Path:
    """$GLASSES_GRAMMAR_CACHE, else `grammars` under the folder of derived files (glasses_rag.models.threads)."""
    from glasses_rag.models.threads import cache_dir

    return Path(os.environ.get("GLASSES_GRAMMAR_CACHE") or cache_dir("grammars")).expanduser()


def _remove(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError:
        pass  # not ours to remove (a read-only folder): it is only not used


class GrammarStore:
    """A folder of compiled grammars, one compressed file per (tokenizer, schema, options) key."""

    def __init__(self, folder: str | Path, max_files: int = 16):
        self.folder = Path(folder)
        self.max_files = max_files
        self._tokenizer_digest: dict[int, tuple[Any, str]] = {}

    def key(self, tokenizer_info: Any, schema_text: str, options: str) -> str:
        """The file name's hash for this schema compiled with `options` against this tokenizer."""
        h = hashlib.blake2b(digest_size=20)
        for part in (_xgrammar_version(), self._tokenizer(tokenizer_info), options, schema_text):
            h.update(part.encode("utf-8"))
            h.update(b"\0")
        return h.hexdigest()

    def _tokenizer(self, tokenizer_info: Any) -> str:
        known = self._tokenizer_digest.get(id(tokenizer_info))
        if known is not None and known[0] is tokenizer_info:
            return known[1]
        # the whole vocabulary as xgrammar sees it (~0.3 s for 262k tokens, once per tokenizer)
        text = tokenizer_info.serialize_json()
        digest = hashlib.blake2b(text.encode("utf-8"), digest_size=20).hexdigest()
        self._tokenizer_digest[id(tokenizer_info)] = (tokenizer_info, digest)  # held: its id is not reused
        return digest

    def _path(self, key: str) -> Path:
        return self.folder / f"{key}{SUFFIX}"

    def load(self, key: str, tokenizer_info: Any) -> Any | None:
        """The compiled grammar stored under `key`, or None (not stored, or unreadable: then removed)."""
        import xgrammar as xgr

        path = self._path(key)
        try:
            size = path.stat().st_size
            if size > MAX_BYTES:  # not read into memory at all
                log.warning("compiled grammar %s is larger than %d bytes: removed, compiling again", path, MAX_BYTES)
                _remove(path)
                return None
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as e:  # a passing error (no file handles, I/O): the file may be good, so it stays
            log.warning("compiled grammar %s not readable (%s): compiling again", path, e)
            return None
        try:
            head = HEADER + key.encode("ascii") + b"\n"
            if not raw.startswith(head):
                raise ValueError("not stored under this key (a file copied or renamed from another key)")
            inflate = zlib.decompressobj()
            text = inflate.decompress(memoryview(raw)[len(head) :], MAX_BYTES)
            if inflate.unconsumed_tail or not inflate.eof:
                raise ValueError(f"not one complete compressed grammar of at most {MAX_BYTES} bytes")
            grammar = xgr.CompiledGrammar.deserialize_json(text.decode("utf-8"), tokenizer_info)
        except Exception as e:  # noqa: BLE001 - any damage means the same thing: compile again
            log.warning("compiled grammar %s is damaged (%s): removed, compiling again", path, e)
            _remove(path)
            return None
        try:
            os.utime(path)  # most recently used: kept when the folder is pruned
        except OSError:
            pass  # a read-only folder still serves its grammars
        return grammar

    def save(self, key: str, grammar: Any) -> None:
        """Store a compiled grammar (a failure to write is logged, never raised: the grammar is in memory)."""
        try:
            data = HEADER + key.encode("ascii") + b"\n" + zlib.compress(grammar.serialize_json().encode("utf-8"), 1)
            write_atomic(self._path(key), data, sync=False)  # a torn file fails to inflate and is compiled again
            self._prune()
        except Exception as e:  # noqa: BLE001 - a cache that cannot be written only costs the next compile
            log.warning("compiled grammar not stored in %s: %s", self.folder, e)

    def _prune(self) -> None:
        files = []
        for p in self.folder.glob(f"*{SUFFIX}"):
            try:
                files.append((p.stat().st_mtime, p))
            except FileNotFoundError:
                continue
        files.sort(reverse=True)
        for _, p in files[self.max_files :]:
            _remove(p)


__all__ = ["GrammarStore", "MAX_BYTES", "default_folder"]
