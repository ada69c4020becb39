"""Pieces of the trace viewer's page that other pages reuse (the run diff among them): what each model call was sent
(traces/requests.py), the conversation history a turn was given, where its image came from. Each function returns
escaped HTML; none raises on a damaged or missing stored request (the page says what is missing instead)."""

from __future__ import annotations

import base64
import io
import json
import re
from html import escape
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from traces.requests import RequestNotStored, read_request
from traces.schema import TurnTrace

MESSAGE_CHARS = 20_000  # characters of one message shown on the page (read_request gives all of it)


def h(value: Any) -> str:
    """Escaped text for HTML content and (double- or single-quoted) attributes."""
    return "" if value is None else escape(value if isinstance(value, str) else str(value), quote=True)


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
    if len(text) > MESSAGE_CHARS:
        text = (
            text[:MESSAGE_CHARS] + f"\n… ({len(text) - MESSAGE_CHARS:,} more characters: traces.requests.read_request)"
        )
    return text


def _tool_names(tools: Any) -> list[str]:
    names = []
    for t in tools or []:
        fn = t.get("function") if isinstance(t, dict) else None
        names.append(str((fn or t).get("name", "?")) if isinstance(fn or t, dict) else "?")
    return names


def _one_request(n: int, purpose: str, sent: dict[str, Any], before: dict[str, Any] | None) -> str:
    """One request: the messages new since the turn's previous request (the earlier ones are the same), and the
    tool specs when they differ from the previous request's."""
    ids, msgs = sent["message_ids"], sent["messages"]
    kept = 0
    if before is not None:
        while kept < min(len(ids), len(before["message_ids"])) and ids[kept] == before["message_ids"][kept]:
            kept += 1
    rows = "".join(
        f'<div class="msg"><span class="k">{h(m.get("role"))}</span>'
        f'<pre class="v">{h(stored_message_text(m))}'
        f"</pre></div>"
        for m in msgs[kept:]
    )
    same = f'<div class="muted">messages 1–{kept} as in the request before</div>' if kept else ""
    tools = ""
    if sent["tools"] is not None and (before is None or before.get("tools_id") != sent["tools_id"]):
        tools = (
            f'<details class="tools-spec"><summary>tool specs offered ({len(sent["tools"])})</summary><pre>'
            f"{h(json.dumps(sent['tools'], indent=1, ensure_ascii=False))}</pre></details>"
        )
    schema = ""
    if sent["response_schema"] is not None:
        schema = (
            f'<details class="tools-spec"><summary>response schema</summary><pre>'
            f"{h(json.dumps(sent['response_schema'], indent=1, ensure_ascii=False))}</pre></details>"
        )
    offered = ", ".join(_tool_names(sent["tools"])) or "none"
    return (
        f'<details class="sent"><summary>request {n}: {h(purpose)} · {len(msgs)} message(s), {len(msgs) - kept} '
        f"new · native tool specs: {h(offered)}</summary>{same}{rows}{tools}{schema}</details>"
    )


def sent_requests_html(run_dir: Path, trace: TurnTrace) -> str:
    """Every model request of the turn as it was sent (stored under the run folder's requests/), in order."""
    calls = trace.model_calls()
    if not calls:
        return ""
    out, before = [], None
    for n, call in enumerate(calls, 1):
        if call.request_id is None:
            out.append(
                f'<div class="muted">request {n}: {h(call.purpose)} · not stored (a trace from before '
                "requests were kept)</div>"
            )
            continue
        try:
            sent = read_request(run_dir, call.request_id)
        except RequestNotStored as e:
            out.append(f'<div class="warn">request {n}: {h(call.purpose)} · {h(e)}</div>')
            continue
        out.append(_one_request(n, call.purpose, sent, before))
        before = sent
    return f'<div class="requests"><div class="steps-head">Model requests, as sent</div>{"".join(out)}</div>'


def history_html(trace: TurnTrace) -> str:
    """The earlier turns the agent was given with this question (their answers as later turns see them)."""
    if not trace.history:
        return ""
    items = "".join(
        f"<li><span class='k'>Q</span> {h(t.question)} <span class='k'>A</span> {h(t.answer)}"
        + (f" <span class='muted'>({h(t.entity)})</span>" if t.entity else "")
        + "</li>"
        for t in trace.history
    )
    return (
        f'<details class="history"><summary>history given ({len(trace.history)} turn(s))</summary>'
        f"<ol>{items}</ol></details>"
    )


def image_source_html(trace: TurnTrace) -> str:
    """Where the turn's image came from (path or URL in the dataset row) and its bytes' hash."""
    info = trace.image
    if not info.source and not info.sha256:
        return ""
    src = f"{info.source}" if info.source else "embedded in the dataset row"
    if is_offline_demo_url(info.source):
        src += " (made-up address of the offline demo: the photo is embedded in the dataset row)"
    digest = f" · sha256 {info.sha256[:12]}…" if info.sha256 else ""
    return f'<div class="note">image source: {h(src)}{h(digest)}</div>'


def _label_text(value: Any) -> str:
    if isinstance(value, dict):
        return "; ".join(f"{k}: {_label_text(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return ", ".join(_label_text(v) for v in value)
    return str(value)


def label_chips(labels: dict[str, Any]) -> str:
    """The dataset labels as chips: a scalar as `key: value`; a list as one chip per item (SuperGlasses'
    `category`, `sub_questions`), never the Python text of the list."""
    chips = []
    for key, val in labels.items():
        if val is None:
            continue
        items = val if isinstance(val, (list, tuple)) else [val]
        for i, item in enumerate(items):
            name = f"{key} {i + 1}" if len(items) > 1 else key
            chips.append(f'<span class="chip label" title="{h(key)}">{h(name)}: {h(_label_text(item))}</span>')
    return "".join(chips)


def is_offline_demo_url(url: str | None) -> bool:
    """A URL of the bundled benchmarks' made-up sites (`https://demo.local/...`, `images.demo.local`): a `.local`
    host is never a public page, so it is shown as text marked offline, not as a link."""
    try:
        host = (urlsplit(url or "").hostname or "").lower()
    except ValueError:
        return False
    return host == "local" or host.endswith(".local")


def url_cell(url: str | None, safe_href: str | None) -> str:
    """A result's URL: a link when it is a real http(s) page, marked text for an offline demo page."""
    if is_offline_demo_url(url):
        return (
            f'<span class="offline" title="made-up address of the offline demo benchmark: there is no such page">'
            f'{h(url)} <span class="muted">(offline demo page)</span></span>'
        )
    if safe_href:
        return f'<a href="{h(safe_href)}" rel="noopener noreferrer nofollow" target="_blank">{h(url)}</a>'
    return h(url)


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
            full = sum(v is not None for v in self._urls.values()) >= KG_MAX_IMAGES
            self._urls[url] = None if full else _thumb(self.root, self.files[url])
        return self._urls[url]

    def html(self, url: str | None) -> str:
        """The KG image behind `url` as an element whose picture is one CSS rule of `css()` (each image is in the
        page once, however many results show it); empty when there is none."""
        if url is None or self.thumb(url) is None:
            return ""
        n = list(self._urls).index(url)
        return f'<span class="kg kg-{n}" role="img" aria-label="matched KG image" title="{h(self.files[url])}"></span>'

    def css(self) -> str:
        return "".join(f".kg-{n}{{background-image:url({u})}}" for n, u in enumerate(self._urls.values()) if u)


def _kg_files(path: Path) -> dict[str, str]:
    try:
        kg = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
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


def metrics_explanation(report: dict[str, Any]) -> str:
    """Under a metrics table: why a number left [0, 1] (a negative `incorrect`, truthfulness above 1), in words,
    where the number is shown. Empty when every number is in range. Reusable by any page showing report.json."""
    from glasses_rag.crag_mm.evaluate import BOTH_NOTE

    rows = [report.get("overall"), report.get("egocentric")]
    rows += [m for vals in (report.get("slices") or {}).values() if isinstance(vals, dict) for m in vals.values()]
    if not any(both(m) for m in rows):
        return ""
    return f'<div class="explain" id="metrics-explain">{h(BOTH_NOTE.format(n=both(report.get("overall"))))}</div>'


def chips_explanation(report: dict[str, Any] | None, counts: dict[str, int]) -> str:
    """Next to the score chips (each turn's own judge score): why the metrics table counts otherwise (the multi-turn
    early stop makes later turns missing; an exact-match "I don't know" is correct and missing at once)."""
    if not isinstance(report, dict) or not isinstance(report.get("overall"), dict):
        return ""
    o = report["overall"]
    if all(o.get(k) == counts.get(k, 0) for k in ("correct", "missing", "incorrect")):
        return ""
    turns = [t for t in report.get("turns") or [] if isinstance(t, dict)]
    stopped = sum(bool(t.get("early_stopped")) for t in turns)
    why = [f"{stopped} turn(s) counted as missing by the multi-turn early stop"] if stopped else []
    why += [f"{both(o)} counted as both correct and missing"] if both(o) else []
    return (
        f'<span class="muted explain" id="chips-explain">chips: each turn\'s own score; the table above counts '
        f"as the official evaluation ({h('; '.join(why) or 'see its notes')})</span>"
    )
