"""Pieces of the trace viewer's page that other pages can reuse: what each model call was sent (traces/requests.py),
the labels, where a turn's image came from, matched KG images, the reasons behind numbers outside [0, 1]. Each
function returns data for a template (templates/viewer_macros.html.j2 renders it, escaped by the engine); none
raises on a damaged or missing stored request (the page says what is missing instead).

What a page embeds of the stored requests is bounded (`RequestBudget`): at most REQUEST_MESSAGES new messages per
request, each at most MESSAGE_CHARS characters, a message that repeats one already shown in the request shown as
that repetition, and REQUEST_PAGE_CHARS characters for the whole page; what is left out is said where it is.
"""

from __future__ import annotations

import base64
import io
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from traces.requests import FOLDER, LOG, RequestNotStored, read_piece
from traces.schema import TurnTrace

MESSAGE_CHARS = 20_000  # characters of one message shown on the page (read_request gives all of it)
REQUEST_MESSAGES = 40  # new messages of one request shown at most
REQUEST_PAGE_CHARS = 8_000_000  # characters of stored requests one page embeds at most
MAX_PIECES_BYTES = 256 << 20  # a requests/pieces.jsonl larger than this is not read by the viewer (a real run: ~10 MB)
READ_REQUEST = "traces.requests.read_request"


@dataclass
class RequestBudget:
    """Characters of stored requests the page may still embed, and the pieces file's state (checked once)."""

    chars: int = REQUEST_PAGE_CHARS
    spent_note: str = ""
    pieces_checked: set[Path] = field(default_factory=set)
    refused: dict[Path, str] = field(default_factory=dict)

    def take(self, text: str) -> bool:
        """Spend the room for `text`; False (nothing spent) when the page has no room left for it."""
        if len(text) > self.chars:
            self.chars = 0
            return False
        self.chars -= len(text)
        return True

    def pieces_problem(self, run_dir: Path) -> str | None:
        """Why the run's pieces file is not read (too large, not a regular file), or None."""
        if run_dir not in self.pieces_checked:
            self.pieces_checked.add(run_dir)
            path = run_dir / FOLDER / LOG
            try:
                st = os.stat(path)
            except OSError:
                return None
            if not os.path.isfile(path) or st.st_size > MAX_PIECES_BYTES:
                self.refused[run_dir] = (
                    f"{path} is {st.st_size / (1 << 20):,.0f} MB (the viewer reads at most "
                    f"{MAX_PIECES_BYTES >> 20} MB of stored requests, or it is not a regular file): use {READ_REQUEST}"
                )
        return self.refused.get(run_dir)


def _part_text(part: Any) -> str:
    if not isinstance(part, dict):
        return str(part)
    if part.get("type") == "text":
        return str(part.get("text", ""))
    if part.get("type") == "image_url":
        image: dict[str, Any] = part["image_url"] if isinstance(part.get("image_url"), dict) else {}
        url = str(image.get("url", ""))
        size = f", a data URL of {image['data_url_chars']:,} characters" if image.get("data_url_chars") else ""
        return f"[image {url[:23]}…{size}]" if len(url) > 23 else f"[image {url}{size}]"
    return json.dumps(part, ensure_ascii=False)


def stored_message_text(message: dict[str, Any]) -> str:
    """A stored message as readable text: its text parts, images as their hash, tool calls as JSON."""
    content = message.get("content")
    text = "".join(_part_text(p) for p in content) if isinstance(content, list) else str(content or "")
    if message.get("tool_calls"):
        text += ("\n" if text else "") + json.dumps(message["tool_calls"], ensure_ascii=False)
    return _cut(text)


def _cut(text: str) -> str:
    if len(text) <= MESSAGE_CHARS:
        return text
    return text[:MESSAGE_CHARS] + f"\n… ({len(text) - MESSAGE_CHARS:,} more characters: {READ_REQUEST})"


def _tool_names(tools: Any) -> list[str]:
    names = []
    for t in tools if isinstance(tools, list) else []:
        fn = t.get("function") if isinstance(t, dict) else None
        names.append(str((fn or t).get("name", "?")) if isinstance(fn or t, dict) else "?")
    return names


def _record(run_dir: Path, request_id: str) -> dict[str, Any]:
    record = read_piece(run_dir, request_id)
    if not isinstance(record, dict) or record.get("kind") != "request":
        raise RequestNotStored(f"{request_id} is not a request record")
    ids = record.get("messages") or []
    if not isinstance(ids, list):
        raise RequestNotStored(f"{request_id} is not a request record")
    return record


def _messages(run_dir: Path, ids: list[Any], kept: int, budget: RequestBudget) -> tuple[list[dict[str, Any]], str]:
    """The new messages shown (role and text, or the number of the earlier one they repeat), and what was left out."""
    shown: list[dict[str, Any]] = []
    first: dict[Any, int] = {}
    for n, key in enumerate(ids[kept : kept + REQUEST_MESSAGES], kept + 1):
        if isinstance(key, str) and key in first:
            shown.append({"n": n, "same_as": first[key]})
            continue
        first[key] = n
        message = read_piece(run_dir, key)
        message = message if isinstance(message, dict) else {"content": message}
        text = stored_message_text(message)
        if not budget.take(text):
            return shown, f"messages {n}–{len(ids)} not shown: the page's room for stored requests is spent"
        shown.append({"n": n, "role": message.get("role"), "text": text})
    more = len(ids) - kept - REQUEST_MESSAGES
    return shown, (f"{more:,} more message(s) not shown (at most {REQUEST_MESSAGES} per request)" if more > 0 else "")


def _specs(run_dir: Path, record: dict[str, Any], before: dict[str, Any] | None, budget: RequestBudget) -> dict:
    out: dict[str, Any] = {"offered": "none", "tools": None, "n_tools": 0, "schema": None}
    if record.get("tools"):
        tools = read_piece(run_dir, record["tools"])
        out["offered"] = ", ".join(_tool_names(tools)) or "none"
        if before is None or before.get("tools") != record["tools"]:
            text = _cut(json.dumps(tools, indent=1, ensure_ascii=False))
            out["tools"], out["n_tools"] = (text if budget.take(text) else None), len(tools or [])
    if record.get("response_schema"):
        text = _cut(json.dumps(read_piece(run_dir, record["response_schema"]), indent=1, ensure_ascii=False))
        out["schema"] = text if budget.take(text) else None
    return out


def _one_request(run_dir: Path, request_id: str, before: dict | None, budget: RequestBudget) -> tuple[dict, dict]:
    record = _record(run_dir, request_id)
    ids = record["messages"] or []
    prev = (before or {}).get("messages") or []
    kept = 0
    while kept < min(len(ids), len(prev)) and ids[kept] == prev[kept]:
        kept += 1
    messages, left_out = _messages(run_dir, ids, kept, budget)
    view = {"status": "sent", "total": len(ids), "kept": kept, "messages": messages, "left_out": left_out}
    return {**view, **_specs(run_dir, record, before, budget)}, record


def sent_requests(run_dir: Path, trace: TurnTrace, budget: RequestBudget) -> list[dict[str, Any]]:
    """Every model request of the turn as it was sent (stored under the run folder's requests/), in order: each new
    message since the turn's previous request, the tool specs where they changed, the response schema."""
    out: list[dict[str, Any]] = []
    before: dict[str, Any] | None = None
    for n, call in enumerate(trace.model_calls(), 1):
        row: dict[str, Any] = {"n": n, "purpose": call.purpose}
        if call.request_id is None:
            out.append({**row, "status": "old", "why": "not stored (a trace from before requests were kept)"})
            continue
        refused = budget.pieces_problem(run_dir)
        if refused or budget.chars <= 0:
            why = refused or f"not shown: the page's room for stored requests is spent (use {READ_REQUEST})"
            out.append({**row, "status": "cut", "why": why})
            continue
        try:
            view, before = _one_request(run_dir, call.request_id, before, budget)
        except (RequestNotStored, OSError, ValueError, RecursionError) as e:
            out.append({**row, "status": "missing", "why": str(e)[:500]})
            continue
        out.append({**row, **view})
    return out


def image_source(trace: TurnTrace) -> str | None:
    """Where the turn's image came from (path or URL in the dataset row) and its bytes' hash."""
    info = trace.image
    if not info.source and not info.sha256:
        return None
    src = f"{info.source}" if info.source else "embedded in the dataset row"
    if is_offline_demo_url(info.source):
        src += " (made-up address of the offline demo: the photo is embedded in the dataset row)"
    return src + (f" · sha256 {info.sha256[:12]}…" if info.sha256 else "")


def _label_text(value: Any) -> str:
    if isinstance(value, dict):
        return "; ".join(f"{k}: {_label_text(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return ", ".join(_label_text(v) for v in value)
    return str(value)


def label_chips(labels: dict[str, Any]) -> list[tuple[str, str, str]]:
    """The dataset labels as chips (key, name, text): a scalar as `key: value`; a list as one chip per item
    (SuperGlasses' `category`, `sub_questions`), never the Python text of the list."""
    chips = []
    for key, val in labels.items():
        if val is None:
            continue
        items = val if isinstance(val, (list, tuple)) else [val]
        for i, item in enumerate(items):
            chips.append((key, f"{key} {i + 1}" if len(items) > 1 else key, _label_text(item)))
    return chips


def is_offline_demo_url(url: str | None) -> bool:
    """A URL of the bundled benchmarks' made-up sites (`https://demo.local/...`, `images.demo.local`): a `.local`
    host is never a public page, so it is shown as text marked offline, not as a link."""
    try:
        host = (urlsplit(url or "").hostname or "").lower()
    except ValueError:
        return False
    return host == "local" or host.endswith(".local")


def safe_href(url: str | None) -> str | None:
    """`url` when a page may link to it (http or https), else None."""
    if url and re.match(r"^https?://", url.strip(), re.I):
        return url.strip()
    return None


KG_THUMB_SIDE = 96  # pixels: a matched KG image is shown small next to its result
KG_MAX_IMAGES = 200  # distinct KG images embedded in one page at most
KG_MAX_FILE_BYTES = 8 * 1024 * 1024
_SAFE_FILE = re.compile(r"^kg_images/[A-Za-z0-9][A-Za-z0-9._-]{0,120}$")


class KgImages:
    """The local image KG a run searched (a folder with kg.json and kg_images/: the bundled demo and benchmarks),
    so a matched KG entry can be shown with its reference image. Only files named in kg.json, inside kg_images/,
    under 8 MB are read; each is embedded once as a small JPEG data URL; at most KG_MAX_IMAGES per page."""

    def __init__(self, roots: list[Path]):
        self.root: Path | None = None
        self.files: dict[str, str] = {}
        self._urls: dict[str, str | None] = {}
        self._index: dict[str, int] = {}
        for root in roots:
            if (root / "kg.json").is_file():
                self.root = root
                self.files = _kg_files(root / "kg.json")
                break

    @classmethod
    def for_run(cls, run: dict[str, Any]) -> KgImages:
        """From run.json: its search index folder (config.search.index_dir), else the folder above its data."""
        roots = []
        index = ((run.get("config") or {}).get("search") or {}).get("index_dir") if isinstance(run, dict) else None
        if isinstance(index, str):
            roots.append(Path(index))
        if isinstance(run.get("data"), str):
            roots += [Path(run["data"]).parent, Path(run["data"])]
        return cls(roots)

    def thumb(self, url: str | None) -> str | None:
        """The data URL of the KG image behind `url`, or None (not in the KG, unreadable, or the page is full)."""
        if self.root is None or not url or url not in self.files:
            return None
        if url not in self._urls:
            full = len(self._index) >= KG_MAX_IMAGES
            self._urls[url] = None if full else _thumb(self.root, self.files[url])
            if self._urls[url] is not None:
                self._index[url] = len(self._index)
        return self._urls[url]

    def mark(self, url: str | None) -> tuple[int, str] | None:
        """(n, file) for the element whose picture is the CSS rule `.kg-n` of `css()` (each image is in the page
        once, however many results show it); None when there is none."""
        if url is None or self.thumb(url) is None:
            return None
        return self._index[url], self.files[url]

    def css(self) -> str:
        return "".join(f".kg-{self._index[u]}{{background-image:url({d})}}" for u, d in self._urls.items() if d)


def _kg_files(path: Path) -> dict[str, str]:
    from glasses_rag.frontends.reading import MAX_JSON_BYTES, read_json

    kg, _ = read_json(path, MAX_JSON_BYTES)
    out = {}
    for e in kg.get("images") or [] if isinstance(kg, dict) else []:
        if isinstance(e, dict) and isinstance(e.get("url"), str) and _SAFE_FILE.match(str(e.get("image_file"))):
            out[e["url"]] = e["image_file"]
    return out


def _thumb(root: Path, rel: str) -> str | None:
    from PIL import Image

    folder = (root / "kg_images").resolve()
    path = (root / rel).resolve()
    try:
        if path.parent != folder or not path.is_file() or path.stat().st_size > KG_MAX_FILE_BYTES:
            return None
        with Image.open(path) as im:
            if im.width * im.height > 50_000_000:
                return None
            small = im.convert("RGB")
            small.thumbnail((KG_THUMB_SIDE, KG_THUMB_SIDE))
        buf = io.BytesIO()
        small.save(buf, format="JPEG", quality=80)
    except (OSError, ValueError, Image.DecompressionBombError):
        return None
    return "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def both(m: Any) -> int:
    """Turns a metrics dict counts as both correct and missing (older reports: read off a negative `incorrect`)."""
    if not isinstance(m, dict):
        return 0
    both = m.get("correct_and_missing")
    if isinstance(both, int) and not isinstance(both, bool):
        return both
    incorrect = m.get("incorrect")
    return -incorrect if isinstance(incorrect, int) and incorrect < 0 else 0


def metrics_explanation(report: dict[str, Any]) -> str | None:
    """Under a metrics table: why a number left [0, 1] (a negative `incorrect`, truthfulness above 1), in words,
    where the number is shown. None when every number is in range. Reusable by any page showing report.json."""
    from glasses_rag.crag_mm.evaluate import BOTH_NOTE

    rows = [report.get("overall"), report.get("egocentric")]
    slices = report.get("slices")
    for vals in slices.values() if isinstance(slices, dict) else []:
        rows += list(vals.values()) if isinstance(vals, dict) else []
    if not any(both(m) for m in rows):
        return None
    return BOTH_NOTE.format(n=both(report.get("overall")))


def chips_explanation(report: dict[str, Any] | None, counts: dict[str, int]) -> str | None:
    """Next to the score chips (each turn's own judge score): why the metrics table counts otherwise (the multi-turn
    early stop makes later turns missing; an exact-match "I don't know" is correct and missing at once)."""
    if not isinstance(report, dict) or not isinstance(report.get("overall"), dict):
        return None
    o = report["overall"]
    if all(o.get(k) == counts.get(k, 0) for k in ("correct", "missing", "incorrect")):
        return None
    turns = [t for t in report.get("turns") or [] if isinstance(t, dict)]
    stopped = sum(bool(t.get("early_stopped")) for t in turns)
    why = [f"{stopped} turn(s) counted as missing by the multi-turn early stop"] if stopped else []
    why += [f"{both(o)} counted as both correct and missing"] if both(o) else []
    return (
        "chips: each turn's own score; the table above counts as the official evaluation "
        f"({'; '.join(why) or 'see its notes'})"
    )
