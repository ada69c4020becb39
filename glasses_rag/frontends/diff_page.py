"""The run diff as HTML: the body, its extra CSS and its script. `glasses_rag.frontends.viewer.render_diff_page` puts
them in the viewer's page (its CSS, its Content-Security-Policy pinning this script by hash).

Like the viewer's samples list: one row per question, one column per run (outcome badge, answer, tools, model
calls, latency, a link to the turn in that run's own viewer page when it has one), and filters in the page: an
outcome per run (A right, B wrong...), agreement (outcomes differ, same, absent from some run) and free text.
"""

from __future__ import annotations

import os
from html import escape
from pathlib import Path
from urllib.parse import quote

from glasses_rag.frontends.run_diff import FILTER_OUTCOMES, DiffRow, RowFilter, RunDiff, RunInfo, TurnSide

BADGE = {
    "right": "score-correct",
    "wrong": "score-incorrect",
    "abstained": "score-missing",
    "unscored": "score-unscored",
}
AGREEMENT = (
    ("", "any agreement"),
    ("differ", "outcomes differ"),
    ("same", "all the same"),
    ("unmatched", "absent from some run"),
)


def _e(value: object) -> str:
    return "" if value is None else escape(str(value), quote=True)


def _n(v: float | None, digits: int = 2) -> str:
    return "n/a" if v is None else f"{v:.{digits}f}"


def _run_row(r: RunInfo, link: str | None) -> str:
    c = r.common
    name = f'<a href="{_e(link)}">{_e(r.name)}</a>' if link else _e(r.name)
    what = " ".join(x for x in (r.benchmark, f"task {r.task}" if r.task is not None else None) if x)
    cells = [
        r.letter,
        None,
        what,
        r.policy,
        r.scoring,
        c.n,
        c.right,
        c.wrong,
        c.abstained,
        c.unscored,
        _n(c.tool_calls_per_turn),
        _n(c.model_calls_per_turn),
        _n(c.tokens_per_turn, 0),
        _n(c.latency_p50_ms, 0),
        _n(c.latency_p95_ms, 0),
    ]
    tds = "".join(
        f"<td>{name}<div class='muted'>{_e(r.path)}</div></td>"
        if v is None and i == 1
        else f"<td class='num'>{_e(v)}</td>"
        if i >= 5
        else f"<td>{_e(v)}</td>"
        for i, v in enumerate(cells)
    )
    return f"<tr>{tds}</tr>"


RUN_HEAD = (
    "run",
    "name",
    "benchmark",
    "policy",
    "outcomes from",
    "n",
    "right",
    "wrong",
    "abstained",
    "unscored",
    "tools/turn",
    "model calls/turn",
    "tokens/turn",
    "p50 ms",
    "p95 ms",
)


def header_html(d: RunDiff, links: dict[str, str]) -> str:
    head = "".join(f"<th>{_e(x)}</th>" for x in RUN_HEAD)
    runs = "".join(_run_row(r, links.get(r.letter)) for r in d.runs)
    pairs = "".join(
        f"<tr><th>{p.a} vs {p.b}</th><td class='num'>{p.both}</td><td class='num'>{p.same}</td>"
        f"<td class='num'>{p.a_right_b_not} ({p.table['right']['wrong']} wrong)</td>"
        f"<td class='num'>{p.b_right_a_not} ({p.table['wrong']['right']} wrong)</td></tr>"
        for p in d.pairs
    )
    only = "".join(
        f"<li>only in {_e(k.replace(',', ' and '))}: {n} question(s)</li>" for k, n in sorted(d.only_in.items())
    )
    notes = "".join(f'<div class="warn">{_e(n)}</div>' for n in d.notes)
    title = " · ".join(f"{r.letter} {r.name}" for r in d.runs)
    return (
        f'<header class="run"><h1>Run diff: {_e(title)}</h1>'
        f"<div class='muted'>{d.common} question(s) every run has; right/wrong/abstained = correct/incorrect/"
        f"missing as each run's own scoring stored them; the table counts the questions every run has.</div>"
        f'<table class="metrics"><thead><tr>{head}</tr></thead><tbody>{runs}</tbody></table>'
        f'<table class="metrics"><thead><tr><th>pair</th><th>shared</th><th>same outcome</th>'
        f"<th>first right, second not</th><th>second right, first not</th></tr></thead><tbody>{pairs}</tbody>"
        f"</table>{f'<ul class=notes>{only}</ul>' if only else ''}{notes}</header>"
    )


def controls_html(d: RunDiff, start: RowFilter | None, more: int) -> str:
    """A select per run (its outcome) and one for agreement, set to the first --only filter."""
    want = start.outcomes if start else {}
    parts = []
    for r in d.runs:
        opts = "".join(
            f'<option value="{o}"{" selected" if want.get(r.letter) == o else ""}>{o or "any"}</option>'
            for o in ("", *FILTER_OUTCOMES)
        )
        parts.append(
            f'<label>{r.letter} {_e(r.name)} <select class="f-run" data-run="{r.letter}">{opts}</select></label>'
        )
    word = next((w for w in (start.words if start else []) if w in dict(AGREEMENT)), "")
    agree = "".join(f'<option value="{v}"{" selected" if v == word else ""}>{_e(t)}</option>' for v, t in AGREEMENT)
    note = f'<span class="muted">(started at the first of {more + 1} --only filters)</span>' if more else ""
    return (
        f'<nav class="controls">{"".join(parts)}<select id="f-agree">{agree}</select>{note}'
        '<input type="search" id="f-text" placeholder="search question, answers, tools" size="30">'
        '<span id="shown" class="muted"></span></nav>'
    )


def _cell(side: TurnSide | None, link: str | None) -> str:
    if side is None:
        return '<td class="cell absent"><span class="muted">absent: not in this run</span></td>'
    stop = ' <span class="muted">(early stop)</span>' if side.early_stopped else ""
    if side.also_missing:
        stop = (
            ' <span class="muted" title="an \'I don\'t know\' ground truth answered so">(also counted missing)</span>'
        )

    tools = (
        "".join(f'<span class="chip tool">{_e(t)}</span>' for t in side.tools) or '<span class="muted">no tool</span>'
    )
    errs = f'<div class="error">{_e(", ".join(side.errors))}</div>' if side.errors else ""
    go = f' · <a href="{_e(link)}">turn in its run</a>' if link else ""
    return (
        f'<td class="cell"><span class="badge {BADGE[side.outcome]}">{side.outcome}</span>{stop}'
        f'<div class="answer">{_e(side.answer)}</div><div class="tools">{tools}</div>'
        f'<div class="muted">{side.model_calls} model call(s) · {side.latency_ms:,.0f} ms · ended by '
        f"{_e(side.ended_by)}{go}</div>{errs}</td>"
    )


def row_html(row: DiffRow, links: dict[str, str]) -> str:
    attrs = " ".join(f'data-{k.lower()}="{row.outcome(k)}"' for k in row.sides)
    present = [s for s in row.sides.values() if s is not None]
    unmatched = int(len(present) < len(row.sides))
    same = int(not unmatched and not row.differ)
    anchor = f"#turn-{quote(row.session_id, safe='')}-{row.turn_index}"
    cells = "".join(_cell(s, links[k] + anchor if k in links and s is not None else None) for k, s in row.sides.items())
    truth = f'<div class="truth"><span class="k">truth</span> {_e(row.ground_truth)}</div>' if row.ground_truth else ""
    return (
        f'<tr class="qrow" {attrs} data-differ="{int(row.differ)}" data-same="{same}" '
        f'data-unmatched="{unmatched}"><td class="q"><div class="muted">{_e(row.key)}</div>'
        f'<div class="question">{_e(row.question)}</div>{truth}</td>{cells}</tr>'
    )


def run_links(d: RunDiff, out: Path) -> dict[str, str]:
    """letter -> the run's viewer page relative to `out`, for runs that have one (python -m
    glasses_rag.frontends.viewer RUN)."""
    links = {}
    for r in d.runs:
        page = Path(r.path) / "index.html"
        if page.is_file():
            links[r.letter] = quote(os.path.relpath(page, Path(out).resolve().parent).replace(os.sep, "/"))
    return links


def diff_body(d: RunDiff, out: Path, only: list[str] | None = None) -> str:
    """Header, controls and the table of every row of `d` (the page filters them)."""
    filters = [RowFilter.parse(s, [r.letter for r in d.runs]) for s in only or []]
    links = run_links(d, out)
    head = "".join(f"<th>{r.letter} {_e(r.name)}</th>" for r in d.runs)
    rows = "".join(row_html(r, links) for r in d.rows) or '<tr><td id="empty">no question in these runs</td></tr>'
    return (
        header_html(d, links)
        + controls_html(d, filters[0] if filters else None, max(0, len(filters) - 1))
        + f'<main><table class="diff"><thead><tr><th>question</th>{head}</tr></thead><tbody>{rows}</tbody>'
        "</table></main>"
    )


DIFF_CSS = """
table.diff{border-collapse:collapse;width:100%;background:#fff;margin-top:12px;font-size:13px}
table.diff th,table.diff td{border:1px solid #e4e7eb;padding:4px 6px;vertical-align:top;text-align:left}
table.diff td.q{max-width:360px}table.diff .question{font-size:14px}td.cell .answer{font-weight:600;margin:2px 0}
td.cell.absent{background:#f5f7fa}header.run table.metrics a{color:#1e40af}
"""

DIFF_JS = """
(function(){
  var rows = Array.prototype.slice.call(document.querySelectorAll('tr.qrow'));
  var texts = rows.map(function(r){ return (r.textContent || '').toLowerCase(); });
  var runs = Array.prototype.slice.call(document.querySelectorAll('select.f-run'));
  var agree = document.getElementById('f-agree'), text = document.getElementById('f-text');
  var shown = document.getElementById('shown');
  function apply(){
    var q = text ? text.value.trim().toLowerCase() : '', a = agree ? agree.value : '', n = 0;
    rows.forEach(function(r, i){
      var ok = runs.every(function(s){
        return !s.value || r.getAttribute('data-' + s.getAttribute('data-run').toLowerCase()) === s.value; });
      if (ok && a) ok = r.getAttribute('data-' + a) === '1';
      if (ok && q) ok = texts[i].indexOf(q) >= 0;
      r.classList.toggle('hidden', !ok); if (ok) n++;
    });
    if (shown) shown.textContent = n + ' of ' + rows.length + ' question(s) shown';
    document.body.setAttribute('data-shown', String(n));
  }
  runs.forEach(function(s){ s.addEventListener('change', apply); });
  if (agree) agree.addEventListener('change', apply);
  if (text) text.addEventListener('input', apply);
  apply();
  document.body.setAttribute('data-ready', '1');
})();
"""
