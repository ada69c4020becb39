"""Run diff: two or more runs side by side on the same questions (`glasses_rag.frontends.run_diff` has the rules).

    python -m glasses_rag.frontends.diff RUN_A RUN_B [RUN_C ...]              # the summary, then what differs
    python -m glasses_rag.frontends.diff RUN_A RUN_B --all                    # ... then every question
    python -m glasses_rag.frontends.diff PRESETS_FOLDER                        # every run benchmarks.presets wrote
    python -m glasses_rag.frontends.diff RUN_A RUN_B --only a-right-b-wrong    # questions A got right and B did not
    python -m glasses_rag.frontends.diff RUN_A RUN_B --json > diff.json        # the whole diff as JSON (RunDiff)
    python -m glasses_rag.frontends.diff RUN_A RUN_B --html diff.html          # the page, with the same filters in it

Without --only (or --all) the text lists the questions whose outcomes differ between the runs (`--only differ`):
the summary counts every question, and the questions where the runs agree are the ones a reader skips. --json and
--html hold every question unless --only cuts them.
Runs are named A, B, C... in the order given (a folder of runs in its presets.json order). What a run folder holds
is printed as text, never as terminal control: escape sequences, other control characters and the bidirectional
overrides in a question, an answer or a folder name are printed as escapes, `\\x1b` (in --json, as JSON's
`\\u001b` escapes of the same characters).
Exit status: 0, or 2 when fewer than two runs are found or a filter cannot be read.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from glasses_rag.frontends.run_diff import FILTER_OUTCOMES, FILTER_WORDS, DiffRow, RunDiff, RunInfo, cut_rows, diff_runs

# C0 and C1 controls (ESC starts a terminal escape sequence; 0x9b is a one-character CSI), DEL, and the bidirectional
# marks and overrides that reorder what a terminal shows
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _escape(m: re.Match[str]) -> str:
    n = ord(m.group())
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}"


def printable(text: str) -> str:
    r"""`text` with every control character but the line break and tab written as an escape (`\x1b`, `\u202e`).

    Example: printable("a\x1b[2Jb") == r"a\x1b[2Jb"
    """
    return _CONTROL.sub(_escape, text)


def printable_json(text: str) -> str:
    """JSON text with the same characters as JSON escapes (they only occur inside strings: the value is the same)."""
    return _CONTROL.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def _num(v: float | None, digits: int = 2) -> str:
    return "n/a" if v is None else f"{v:.{digits}f}"


def runs_table(runs: list[RunInfo]) -> list[str]:
    width = max([len(r.name) for r in runs] + [4])
    head = (
        f"{'run':<4}{'name':<{width + 2}}{'n':>4}{'right':>7}{'wrong':>7}{'abst.':>7}{'unsc.':>7}"
        f"{'tools/t':>9}{'model/t':>9}{'tokens/t':>10}{'p50 ms':>9}{'p95 ms':>9}"
    )
    lines = [head, "-" * len(head)]
    for r in runs:
        c = r.common
        lines.append(
            f"{r.letter:<4}{r.name:<{width + 2}}{c.n:>4}{c.right:>7}{c.wrong:>7}{c.abstained:>7}"
            f"{c.unscored:>7}{_num(c.tool_calls_per_turn):>9}{_num(c.model_calls_per_turn):>9}"
            f"{_num(c.tokens_per_turn, 0):>10}{_num(c.latency_p50_ms, 0):>9}{_num(c.latency_p95_ms, 0):>9}"
        )
    return lines


def header(d: RunDiff) -> list[str]:
    n_some = sum(d.only_in.values())
    lines = [
        f"run diff: {len(d.runs)} runs; {d.common} question(s) every run has, {n_some} only in some runs; "
        "outcomes as each run's own scoring stored them (right = correct, wrong = incorrect, "
        "abstained = missing)"
    ]
    for r in d.runs:
        what = " ".join(x for x in (r.benchmark, f"task {r.task}" if r.task is not None else None) if x)
        lines.append(
            f"  {r.letter} {r.name}: {r.path} ({r.turns} turn(s); {what or 'benchmark unknown'}); "
            f"policy {r.policy or '?'}; outcomes from {r.scoring}"
        )
    lines += ["", f"on the {d.common} question(s) every run has:", *runs_table(d.runs), ""]
    for p in d.pairs:
        a, b = p.table["right"], {x: row["right"] for x, row in p.table.items()}
        lines.append(
            f"{p.a} vs {p.b} on {p.both} shared question(s): same outcome {p.same}; {p.a} right, {p.b} not "
            f"{p.a_right_b_not} (wrong {a['wrong']}, abstained {a['abstained']}); {p.b} right, {p.a} not "
            f"{p.b_right_a_not} (wrong {b['wrong']}, abstained {b['abstained']})"
        )
    if d.pairs:
        x, y = d.pairs[0].a.lower(), d.pairs[0].b.lower()
        lines.append(f"(the questions behind a count: --only {x}-right-{y}-wrong, --only {y}-right-{x}-abstained, ...)")
    for letters, n in sorted(d.only_in.items()):
        lines.append(f"only in {letters.replace(',', ' and ') or 'no run'}: {n} question(s)")
    lines += [f"note: {n}" for n in d.notes]
    return lines


def row_lines(row: DiffRow, names: dict[str, str]) -> list[str]:
    truth = "" if row.ground_truth is None else f"  (truth: {_cut(row.ground_truth, 60)})"
    lines = [f"{row.key}  {_cut(row.question, 90)}{truth}"]
    width = max(len(n) for n in names.values())
    for letter, side in row.sides.items():
        label = f"  {letter} {names[letter]:<{width}}"
        if side is None:
            lines.append(f"{label}  absent (not in this run)")
            continue
        stop = " (early stop)" if side.early_stopped else " (+missing)" if side.also_missing else ""
        errs = f"  errors: {', '.join(side.errors)}" if side.errors else ""
        lines.append(
            f"{label}  {side.outcome + stop:<10} {side.latency_ms:>7.0f} ms  {side.model_calls} model "
            f"call(s)  tools: {', '.join(side.tools) or '-'}  answer: {_cut(side.answer, 60)!r}{errs}"
        )
    return lines


def _cut(text: str, n: int) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= n else text[: n - 1] + "…"


def format_diff(d: RunDiff, max_rows: int = 50, default: bool = False) -> str:
    """The summary, then each question of `d.rows` (`default`: cut by the default filter, which the text says)."""
    lines = header(d)
    names = {r.letter: r.name for r in d.runs}
    cut = f" matching {' or '.join(d.filters)}" if d.filters else ""
    cut += " (the default: --all lists every question, --only another filter)" if default else ""
    lines += ["", f"{d.shown} question(s){cut}" + (f"; the first {max_rows}" if d.shown > max_rows else "") + ":"]
    for row in d.rows[:max_rows]:
        lines += ["", *row_lines(row, names)]
    if d.shown > max_rows:
        lines += ["", f"... {d.shown - max_rows} more (--max-rows, --json or --html)"]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m glasses_rag.frontends.diff",
        description="Two or more runs side by side on the same questions: right, "
        "wrong or abstained as each run's scoring stored it, tools called, model calls, latency.",
        epilog=f"--only: run letters each followed by {' | '.join(FILTER_OUTCOMES)}, or {', '.join(FILTER_WORDS)}, "
        "joined by '-': a-right-b-wrong, b-abstained, differ, a-wrong-differ. Repeat --only for 'or'.",
    )
    p.add_argument(
        "runs",
        nargs="+",
        type=Path,
        help="run folders (traces/runs/<run_id>) or folders of runs (a benchmarks.presets folder)",
    )
    p.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="FILTER",
        help="show only these questions (default in the text: differ, the questions whose outcomes differ)",
    )
    p.add_argument("--all", action="store_true", help="list every question in the text, not only those that differ")
    p.add_argument("--json", action="store_true", help="print the diff as JSON instead of the table")
    p.add_argument("--html", type=Path, default=None, metavar="FILE", help="also write the page here")
    p.add_argument("--max-rows", type=int, default=50, help="questions printed (default 50)")
    return p


def main(argv: list[str] | None = None) -> int:
    """`python -m glasses_rag.frontends.diff RUN_A RUN_B [--only a-right-b-wrong] [--json] [--html FILE]`.

    Args:
        argv: the command line without the program name (default: sys.argv[1:]).
    """
    args = build_parser().parse_args(argv)
    default = not args.only and not args.all and not args.json  # the text lists what differs unless told otherwise
    try:
        full = diff_runs(args.runs)
        d = cut_rows(full, ["differ"] if default else args.only)
    except (ValueError, FileNotFoundError) as e:
        print(printable(f"error: {e}"), file=sys.stderr)
        return 2
    text = (
        printable_json(d.model_dump_json(indent=2)) if args.json else printable(format_diff(d, args.max_rows, default))
    )
    print(text)
    if args.html is not None:  # every question on the page; its controls start at the first --only filter
        from glasses_rag.frontends.viewer import render_diff_page

        path = render_diff_page(full, args.html, args.only)
        print(printable(f"page: {path}"), file=sys.stderr if args.json else sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
