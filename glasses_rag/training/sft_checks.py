"""A fine-tuning export checked as it is read, before anything trains on it: each line read bounded, each row in
one of TRL's two shapes (prompt-completion or messages, the same for the whole file), its `tools` a list of tool
schemas and its `images` paths inside the export's folder (or the folder GLASSES_IMAGE_ROOT names). A row that is
not one is a `BadExample` naming the file and the line: the fine-tune stops with that one line, never a traceback
from inside TRL, and never opens a photo outside the data's folder.

An example longer than the model's `max_length` is left out (counted) without being tokenized when its text alone
cannot fit: `chars > max_length * longest token`, no tokenization putting more characters in a token than its
longest vocabulary entry holds; a line over MAX_LINE_BYTES is not even read whole.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

MAX_LINE_BYTES = 64 << 20  # a line longer than this holds more text than any model's max_length can take
SHAPES = {"prompt": ("prompt", "completion"), "messages": ("messages",)}


class BadExample(ValueError):
    """A line of a fine-tuning export that is not an example TRL can train on (one line, with where)."""


def example_lines(path: str | Path) -> Iterator[tuple[int, str | None]]:
    """(line number, text) of each non-blank line of `path`; text None for a line over MAX_LINE_BYTES (skipped in
    pieces, never held whole)."""
    with open(path, "rb") as f:
        n = 0
        while line := f.readline(MAX_LINE_BYTES + 1):
            n += 1
            if len(line) > MAX_LINE_BYTES:
                while line and not line.endswith(b"\n"):  # the rest of the line, a piece at a time
                    line = f.readline(1 << 20)
                yield n, None
                continue
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError as e:
                raise BadExample(f"{path} line {n}: not UTF-8 text ({e.reason})") from None
            if text.strip():
                yield n, text


def parse_line(path: str | Path, n: int, text: str) -> dict[str, Any]:
    """One line as a JSON object; BadExample otherwise."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise BadExample(f"{path} line {n}: not JSON ({e.msg} at column {e.colno})") from None
    except RecursionError:
        raise BadExample(f"{path} line {n}: nested too deeply to read") from None
    if not isinstance(raw, dict):
        raise BadExample(f"{path} line {n}: not a JSON object but {type(raw).__name__}")
    return raw


def check_row(raw: dict[str, Any], where: str, shape: str | None) -> str:
    """The row's shape ('prompt' or 'messages'), checked: that shape's keys, lists of messages, the same shape as
    the rows before (`shape`), `tools` a list of objects, `images` a list of paths; BadExample otherwise."""
    found = [s for s, keys in SHAPES.items() if all(k in raw for k in keys)]
    if len(found) != 1:
        raise BadExample(f"{where}: an example has either 'prompt' and 'completion', or 'messages' (TRL's formats)")
    if shape is not None and found[0] != shape:
        raise BadExample(f"{where}: a {found[0]} row in a file of {shape} rows (one format per file, as TRL reads it)")
    for key in SHAPES[found[0]]:
        _check_messages(raw[key], f"{where}: {key!r}")
    if raw.get("tools") is not None and not (
        isinstance(raw["tools"], list) and all(isinstance(t, dict) for t in raw["tools"])
    ):
        raise BadExample(f"{where}: 'tools' must be a list of tool schemas (JSON objects)")
    if raw.get("images") is not None and not (
        isinstance(raw["images"], list) and all(isinstance(i, str) for i in raw["images"])
    ):
        raise BadExample(f"{where}: 'images' must be a list of image file paths")
    return found[0]


def _check_messages(value: Any, where: str) -> None:
    if not isinstance(value, list) or not value:
        raise BadExample(f"{where} must be a non-empty list of messages ({{'role': ..., 'content': ...}})")
    for m in value:
        ok = isinstance(m, dict) and isinstance(m.get("role"), str)
        content = m.get("content") if isinstance(m, dict) else None
        if not ok or not (content is None or isinstance(content, str) or _parts(content)):
            raise BadExample(f"{where} must hold messages with a 'role' and a text or list-of-parts 'content'")


def _parts(content: Any) -> bool:
    return isinstance(content, list) and all(isinstance(p, dict) for p in content)


def confined_images(images: list[str], roots: list[Path], where: str) -> list[str]:
    """The real paths of a row's photos, each inside one of `roots` (the export's folder, GLASSES_IMAGE_ROOT);
    BadExample for one that is not (a training row naming ~/.ssh/id_rsa is never opened)."""
    from glasses_rag.core.paths import IMAGE_ROOT_ENV, PathRefused, inside

    hint = f"the data's folder {{root}} (set {IMAGE_ROOT_ENV} to a folder to allow that one too)"
    try:
        return [str(inside(i, roots, "an example's image", hint)) for i in images]
    except PathRefused as e:
        raise BadExample(f"{where}: {e}") from None


def text_chars(row: dict[str, Any]) -> int:
    """The characters of a row's message texts (a lower bound of what the chat template renders)."""
    n = 0
    for key in ("prompt", "completion", "messages"):
        for m in row.get(key) or []:
            content = m.get("content") if isinstance(m, dict) else None
            if isinstance(content, str):
                n += len(content)
            elif isinstance(content, list):
                n += sum(len(p.get("text") or "") for p in content if isinstance(p, dict))
    return n


def longest_token(processing: Any) -> int:
    """The most characters one token of the model's vocabulary holds (its longest entry)."""
    tok = getattr(processing, "tokenizer", processing)
    try:
        return max(len(t) for t in tok.get_vocab()) or 1
    except (AttributeError, TypeError, ValueError):
        return 1 << 20  # no vocabulary to read: never left out on this bound


__all__ = [
    "BadExample",
    "MAX_LINE_BYTES",
    "check_row",
    "confined_images",
    "example_lines",
    "longest_token",
    "parse_line",
    "text_chars",
]
