"""The run diff as HTML (templates/diff.html.j2, in the viewer's style and under its Content-Security-Policy).

Like the viewer's samples list: one row per question, one column per run (outcome badge, answer, tools, model
calls, latency, a link to the turn in that run's own viewer page when it has one), and filters in the page: an
outcome per run (A right, B wrong...), agreement (outcomes differ, same, absent from some run) and free text. A
page holds at most MAX_PAGE_ROWS questions (it says how many more there are: --only narrows, --json has them all).
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import quote

from glasses_rag.frontends.pages import render_page
from glasses_rag.frontends.run_diff import FILTER_OUTCOMES, DiffRow, RowFilter, RunDiff, RunInfo

MAX_PAGE_ROWS = 20_000
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


def _n(v: float | None, digits: int = 2) -> str:
    return "n/a" if v is None else f"{v:.{digits}f}"


def _what(r: RunInfo) -> str:
    return " ".join(x for x in (r.benchmark, f"task {r.task}" if r.task is not None else None) if x)


def _unmatched(row: DiffRow) -> bool:
    return any(s is None for s in row.sides.values())


def _same(row: DiffRow) -> bool:
    return not _unmatched(row) and not row.differ


def _anchor(row: DiffRow) -> str:
    return f"#turn-{quote(row.session_id, safe='')}-{row.turn_index}"


def run_links(d: RunDiff, out: Path) -> dict[str, str]:
    """letter -> the run's viewer page relative to `out`, for runs that have one (python -m
    glasses_rag.frontends.viewer RUN)."""
    links = {}
    for r in d.runs:
        page = Path(r.path) / "index.html"
        if page.is_file():
            links[r.letter] = quote(os.path.relpath(page, Path(out).resolve().parent).replace(os.sep, "/"))
    return links


def diff_page(d: RunDiff, out: Path, only: list[str] | None = None) -> str:
    """The page of `d`: header, controls set to the first of the `only` filters, and the table of its rows (the page
    filters them)."""
    filters = [RowFilter.parse(s, [r.letter for r in d.runs]) for s in only or []]
    start = filters[0] if filters else None
    rows = d.rows[:MAX_PAGE_ROWS]
    cut = None
    if len(d.rows) > len(rows):
        cut = (
            f"the page shows the first {len(rows):,} of {len(d.rows):,} questions (--only narrows them; --json "
            "prints them all)"
        )
    return render_page(
        "diff.html.j2",
        title="Run diff: " + ", ".join(f"{r.letter} {r.name}" for r in d.runs),
        script="diff.js",
        styles=["viewer.css", "diff.css"],
        heading=" · ".join(f"{r.letter} {r.name}" for r in d.runs),
        d=d,
        rows=rows,
        cut=cut,
        links=run_links(d, out),
        only_in=sorted(d.only_in.items()),
        run_head=RUN_HEAD,
        badge=BADGE,
        outcomes=("", *FILTER_OUTCOMES),
        agreement=AGREEMENT,
        start=start.outcomes if start else {},
        word=next((w for w in (start.words if start else []) if w in dict(AGREEMENT)), ""),
        more=max(0, len(filters) - 1),
        what=_what,
        n=_n,
        same=_same,
        unmatched=_unmatched,
        anchor=_anchor,
    )
