"""Turn traces as SuperGlasses search logs, and a tolerant reader of SuperGlasses annotations and logs.

SuperGlasses (Jiang et al., 2026, arXiv:2602.22683) annotates each question with its search trajectory: the
question is split into sub-questions ("hops"), each answered with zero or one tool ("Image Search" or "Text
Search"). The paper prints a hop as "Sub-question", "Tool used", "Search keywords" (text search only),
"Search URL" and "Search result (snippet)". An `SGLog` is one question in that shape, plus the SuperGlasses id,
the dataset labels, the ground truth, the model's answer and its judged accuracy.

- `to_superglasses(trace)`: one of our turn traces as an SGLog. A hop is one sub-question the policy worked on:
  each sub-question a decoupler wrote, and each retrieval call's `sub_question` (a call without one belongs to
  the question itself); a sub-question searched with two different tools is two hops (SuperGlasses allows one
  tool per hop). A turn with no sub-question and no search is one hop with tool "None".
- `parse_log(entry)` / `import_logs(path)`: read the Hugging Face rows (`sub_questions` with `retrieval-tools`),
  the paper's layout, "Hop 1"/"Hop 2" keys, SuperLens-style decisions ("Decision: Need RAG", "Tool Decision:
  Need Image Search, No need Text Search", "Object Detection: Car") and our own export. Keys are matched
  ignoring case, spaces and punctuation. A key that cannot be mapped is kept (under `extra`) and reported.

    python -m glasses_rag.superglasses.logs export --run traces/runs/<run_id> --out run.sg.jsonl
    python -m glasses_rag.superglasses.logs check annotations.jsonl      # what could not be mapped, entry by entry
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable

from glasses_rag.superglasses.log_export import export_run, read_run, to_superglasses, trace_hops, write_logs
from glasses_rag.superglasses.log_import import import_logs, parse_log, tools_named_in
from glasses_rag.superglasses.log_model import (
    FORMAT,
    IMAGE,
    NONE,
    NOT_DISPATCHED,
    SEARCH_TOOLS,
    TEXT,
    TOOL_NAMES,
    Layout,
    SGHop,
    SGLog,
    SGObject,
    hop_tool,
    information_seeking,
    sg_tool_name,
    squash,
)

__all__ = [
    "FORMAT",
    "IMAGE",
    "NONE",
    "NOT_DISPATCHED",
    "SEARCH_TOOLS",
    "TEXT",
    "TOOL_NAMES",
    "Layout",
    "SGHop",
    "SGLog",
    "SGObject",
    "export_run",
    "hop_tool",
    "import_logs",
    "information_seeking",
    "main",
    "parse_log",
    "read_run",
    "sg_tool_name",
    "squash",
    "to_superglasses",
    "tools_named_in",
    "trace_hops",
    "write_logs",
]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m glasses_rag.superglasses.logs", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    ex = sub.add_parser("export", help="write a run's traces as SuperGlasses logs")
    ex.add_argument("--run", required=True, help="run folder, e.g. traces/runs/<run_id>")
    ex.add_argument("--out", required=True, help="output file: .json (a list) or .jsonl")
    chk = sub.add_parser("check", help="read logs or annotations and report everything that could not be mapped")
    chk.add_argument("path")
    args = ap.parse_args(argv)
    problems: list[str] = []
    try:
        if args.cmd == "export":
            logs = export_run(args.run, args.out, problems)
            print(f"wrote {len(logs)} logs to {args.out}" + (f" ({len(problems)} files skipped)" if problems else ""))
        else:
            logs = import_logs(args.path, problems)
            layouts = ", ".join(f"{k} {v}" for k, v in sorted(_count(lg.source for lg in logs).items()))
            print(f"read {len(logs)} logs from {args.path} ({layouts or 'none'}); {len(problems)} problem(s)")
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    for p in problems:
        print(f"  {p}", file=sys.stderr)
    return 0 if args.cmd == "export" or not problems else 1


def _count(items: Iterable[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for x in items:
        out[x] = out.get(x, 0) + 1
    return out


if __name__ == "__main__":
    sys.exit(main())
