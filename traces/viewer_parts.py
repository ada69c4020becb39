"""Pieces of the trace viewer's page that other pages reuse (the run diff among them): what each model call was sent
(traces/requests.py), the conversation history a turn was given, where its image came from. Each function returns
escaped HTML; none raises on a damaged or missing stored request (the page says what is missing instead)."""

from __future__ import annotations

import json
from html import escape
from pathlib import Path
from typing import Any

from traces.requests import RequestNotStored, read_request
from traces.schema import TurnTrace

MESSAGE_CHARS = 20_000  # characters of one message shown on the page (read_request gives all of it)


def h(value: Any) -> str:
    return "" if value is None else escape(value if isinstance(value, str) else str(value), quote=True)


def _part_text(part: Any) -> str:
    if not isinstance(part, dict):
        return str(part)
    if part.get("type") == "text":
        return str(part.get("text", ""))
    if part.get("type") == "image_url":
        image = part.get("image_url") if isinstance(part.get("image_url"), dict) else {}
        url = str(image.get("url", ""))
        size = f", a data URL of {image['data_url_chars']:,} characters" if image.get("data_url_chars") else ""
        return f"[image {url[:23]}…{size}]" if len(url) > 23 else f"[image {url}{size}]"
    return json.dumps(part, ensure_ascii=False)


def message_text(message: dict[str, Any]) -> str:
    """A stored message as readable text: its text parts, images as their hash, tool calls as JSON."""
    content = message.get("content")
    text = "".join(_part_text(p) for p in content) if isinstance(content, list) else str(content or "")
    if message.get("tool_calls"):
        text += ("\n" if text else "") + json.dumps(message["tool_calls"], ensure_ascii=False)
    if len(text) > MESSAGE_CHARS:
        text = text[:MESSAGE_CHARS] + f"\n… ({len(text) - MESSAGE_CHARS:,} more characters: traces.requests.read_request)"
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
    rows = "".join(f'<div class="msg"><span class="k">{h(m.get("role"))}</span><pre class="v">{h(message_text(m))}'
                   f"</pre></div>" for m in msgs[kept:])
    same = f'<div class="muted">messages 1–{kept} as in the request before</div>' if kept else ""
    tools = ""
    if sent["tools"] is not None and (before is None or before.get("tools_id") != sent["tools_id"]):
        tools = (f'<details class="tools-spec"><summary>tool specs offered ({len(sent["tools"])})</summary><pre>'
                 f'{h(json.dumps(sent["tools"], indent=1, ensure_ascii=False))}</pre></details>')
    schema = ""
    if sent["response_schema"] is not None:
        schema = (f'<details class="tools-spec"><summary>response schema</summary><pre>'
                  f'{h(json.dumps(sent["response_schema"], indent=1, ensure_ascii=False))}</pre></details>')
    offered = ", ".join(_tool_names(sent["tools"])) or "none"
    return (f'<details class="sent"><summary>request {n}: {h(purpose)} · {len(msgs)} message(s), {len(msgs) - kept} '
            f'new · native tool specs: {h(offered)}</summary>{same}{rows}{tools}{schema}</details>')


def sent_requests_html(run_dir: Path, trace: TurnTrace) -> str:
    """Every model request of the turn as it was sent (stored under the run folder's requests/), in order."""
    calls = trace.model_calls()
    if not calls:
        return ""
    out, before = [], None
    for n, call in enumerate(calls, 1):
        if call.request_id is None:
            out.append(f'<div class="muted">request {n}: {h(call.purpose)} · not stored (a trace from before '
                       "requests were kept)</div>")
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
    items = "".join(f"<li><span class='k'>Q</span> {h(t.question)} <span class='k'>A</span> {h(t.answer)}"
                    + (f" <span class='muted'>({h(t.entity)})</span>" if t.entity else "") + "</li>"
                    for t in trace.history)
    return f'<details class="history"><summary>history given ({len(trace.history)} turn(s))</summary><ol>{items}</ol></details>'


def image_source_html(trace: TurnTrace) -> str:
    """Where the turn's image came from (path or URL in the dataset row) and its bytes' hash."""
    info = trace.image
    if not info.source and not info.sha256:
        return ""
    src = f"{info.source}" if info.source else "embedded in the dataset row"
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
