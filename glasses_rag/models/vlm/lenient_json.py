"""Tolerant JSON extraction: the JSON object a model's reply holds (in a code fence, after prose, with single quotes
or a trailing comma), and a tool call's arguments, bounded in the work a hostile reply can cause."""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterable
from typing import Any

_FENCE = re.compile(r"```(?:json|JSON|javascript|python)?\s*(.*?)```", re.S)
_TRAILING_COMMA = re.compile(r",\s*([}\]])")


def balanced_objects(text: str) -> Iterable[str]:
    yield from _balanced_scan(text, quotes=True)
    yield from _balanced_scan(text, quotes=False)


# Bounds on the brace scan, so a hostile reply ("{" * 30000) costs milliseconds, not minutes: at most this many
# opening braces are tried per pass, and an object is looked for within this many characters of its brace.
MAX_OBJECT_STARTS = 64
MAX_OBJECT_CHARS = 16_384


def _balanced_scan(text: str, quotes: bool) -> Iterable[str]:
    """Every balanced {...} substring, in order of its opening brace (strings in ' or " respected).
    An object left open at the end of the text is yielded closed (a truncated reply)."""
    start = text.find("{")
    for _ in range(MAX_OBJECT_STARTS):
        if start == -1:
            return
        n = min(len(text), start + MAX_OBJECT_CHARS)
        depth, quote, esc, i = 0, None, False, start
        stack: list[str] = []
        end = -1
        while i < n:
            c = text[i]
            if quote:
                if esc:
                    esc = False
                elif c == "\\":
                    esc = True
                elif c == quote and not (c == "'" and _mid_word(text, i)):
                    quote = None
            elif quotes and c in "\"'":
                # an apostrophe inside a word (don't) is not a quote
                if c == "'" and _mid_word(text, i):
                    pass
                else:
                    quote = c
            elif c in "{[":
                stack.append("}" if c == "{" else "]")
                depth += 1
            elif c in "}]":
                if stack and stack[-1] == c:
                    stack.pop()
                depth -= 1
                if not stack:
                    end = i
                    break
            i += 1
        if end != -1:
            yield text[start : end + 1]
        elif stack and quote is None and n == len(text):
            yield text[start:] + "".join(reversed(stack))
        start = text.find("{", start + 1)


def _mid_word(text: str, i: int) -> bool:
    """An apostrophe inside a word (don't, O'Brien), not a quote."""
    return 0 < i < len(text) - 1 and text[i - 1].isalnum() and text[i + 1].isalnum()


def _single_to_double(s: str) -> str:
    """Rewrite '...' strings as JSON "..." strings (apostrophes inside words kept)."""
    out, quote, esc = [], None, False
    for i, c in enumerate(s):
        if quote is None:
            if c in "\"'":
                quote = c
                out.append('"')
            else:
                out.append(c)
        elif esc:
            esc = False
            out.append("'" if c == "'" else "\\" + c)
        elif c == "\\":
            esc = True
        elif c == quote and not (c == "'" and _mid_word(s, i)):
            quote = None
            out.append('"')
        elif c == '"':
            out.append('\\"')
        else:
            out.append(c)
    return "".join(out)


# Longest text the lenient repairs below are tried on: `ast.literal_eval` builds a syntax tree of ~100 bytes per
# element first (6 MB of "(1,1,...)" took 3 GB), and the regex rewrites copy the text each time. Longer text
# must be strict JSON, which json.loads reads in linear time and memory.
LENIENT_MAX_CHARS = 64 * 1024


# Not json-repair (PyPI `json-repair` 0.64, tried on tests/test_vlm_parse.py): it ends a single-quoted string at an
# apostrophe inside a word ('O'Brien\'s pub' -> 'O'), makes a dict of what is no object ({'a' 'b'} -> {'a': "b'"},
# where a decision that cannot be read must fail, not get made-up arguments), returns a list for two objects, and
# costs 0.5 s of CPU for 75 KB of sloppy text and 1.8 s for 20k nested braces (the scan above is bounded).
def loads_lenient(s: str) -> Any:
    """JSON, or the sloppy JSON models write (trailing commas, single quotes, Python literals, unquoted keys);
    None when nothing parses (deep nesting included, and sloppy text over LENIENT_MAX_CHARS)."""
    try:
        return json.loads(s)
    except (ValueError, RecursionError):
        pass
    if len(s) > LENIENT_MAX_CHARS:
        return None
    fixed = _TRAILING_COMMA.sub(r"\1", s)
    try:
        return json.loads(fixed)
    except (ValueError, RecursionError):
        pass
    # Python-literal style: single quotes, True/False/None (json's true/false/null mapped first)
    py = re.sub(r"\btrue\b", "True", fixed)
    py = re.sub(r"\bfalse\b", "False", py)
    py = re.sub(r"\bnull\b", "None", py)
    try:
        return ast.literal_eval(py)
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        pass
    try:
        return json.loads(_TRAILING_COMMA.sub(r"\1", _single_to_double(s)))
    except (ValueError, RecursionError):
        pass
    # unquoted keys: {action: "answer"}
    quoted = re.sub(r"([{,]\s*)([A-Za-z_][A-Za-z0-9_]*)\s*:", r'\1"\2":', fixed)
    try:
        return json.loads(quoted)
    except (ValueError, RecursionError):
        return None


def extract_json(text: str | None) -> dict[str, Any] | None:
    """The first non-empty JSON object in a model reply, tolerant of junk.

    Handles code fences, leading/trailing prose, single quotes, Python literals, trailing
    commas, unquoted keys and a truncated final object. Returns None when nothing parses.
    """
    if not text:
        return None
    candidates: list[str] = [m.group(1) for m in _FENCE.finditer(text)] + [text]
    for chunk in candidates:
        for obj in balanced_objects(chunk):
            val = loads_lenient(obj)
            if isinstance(val, dict) and val:
                return val
    return None


def parse_arguments(raw: Any) -> dict[str, Any]:
    """Tool-call arguments given as a dict or a (possibly sloppy) JSON string."""
    if raw is None or raw == "":
        return {}
    if isinstance(raw, dict):
        return raw
    if isinstance(raw, str):
        val = loads_lenient(raw.strip())
        if isinstance(val, dict):
            return val
        return extract_json(raw) or {}
    return {}
