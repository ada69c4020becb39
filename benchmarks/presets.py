"""The presets side by side on the same questions: one table, a JSON file and a PNG chart.

    python -m benchmarks.presets --task 2                                   # every preset, the bundled demo
    python -m benchmarks.presets --task 2 --data heldout --presets rule,superlens,no-retrieval
    python -m benchmarks.presets --task 2 --data <folder> --index-dir <folder> --model openai:<url>#<model>

Every other option is graph.run's (data, search, model, budget, judge, --limit, --concurrency, --out, --run-id).
Each preset runs as an ordinary run folder under `<--out>/<bench id>/<preset>` (traces, run.json, report.json:
the viewer, glasses_rag.superglasses.compare and the SuperGlasses export read them as any run); the same command again
resumes. Presets run one after the other, each in a fresh process at the run's concurrency, so their latencies are
comparable (--same-process is faster, but later presets then find caches filled). Per preset:
truthfulness, accuracy, hallucination and missing rate as the scoring mode counts them officially (hallucination
as graph.run prints it: (total - correct - missing) / total), "wrong" as the share of turns judged wrong, latency
per turn (p50, p95), tool calls, model calls and tokens per turn, the failed steps ("errors"), and below the table
how the turns ended (answer, time budget, step limit) and the failed steps per kind, then the time each stage took
(each tool, each kind of model request: mean ms over the turns it ran in) and where the reranker ran (its method
and device, from the traces).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

for _k, _v in {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "ANONYMIZED_TELEMETRY": "False",
}.items():
    os.environ.setdefault(_k, _v)

from benchmarks.preset_runs import Row, base_config, bench_id, concurrency_for, fmt, parse, run_row  # noqa: E402

COLUMNS = [
    ("truth", "truthfulness", 3),
    ("acc", "accuracy", 3),
    ("halluc", "hallucination", 3),
    ("wrong", "wrong", 3),
    ("miss", "missing", 3),
    ("p50 ms", "latency_p50_ms", 0),
    ("p95 ms", "latency_p95_ms", 0),
    ("tools/t", "tool_calls_per_turn", 2),
    ("model/t", "model_calls_per_turn", 2),
    ("tokens/t", "tokens_per_turn", 0),
]


def own_parser() -> argparse.ArgumentParser:
    from glasses_rag.policies.presets import preset_names

    p = argparse.ArgumentParser(
        prog="python -m benchmarks.presets",
        add_help=False,
        description="Run presets on the same questions and compare them.",
    )
    p.add_argument("-h", "--help", action="store_true", help="this help, then graph.run's options")
    p.add_argument(
        "--presets",
        default=",".join(preset_names()),
        help="comma-separated preset names or preset YAML files (default: every bundled preset)",
    )
    p.add_argument(
        "--json", type=Path, default=None, help="where the figures go (default: <bench folder>/presets.json)"
    )
    p.add_argument("--png", type=Path, default=None, help="the chart (default: <bench folder>/presets.png)")
    p.add_argument("--no-chart", action="store_true", help="no PNG chart")
    p.add_argument(
        "--same-process",
        action="store_true",
        help="run every preset in this process (faster; but a preset then finds the models and per-text "
        "caches the ones before it filled, so latencies are not comparable)",
    )
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)  # one preset, for the parent process
    return p


def table(rows: list[Row]) -> str:
    width = max([len(r.label) for r in rows] + [6])
    head = f"{'preset':{width}} {'n':>4} " + " ".join(f"{c:>8}" for c, _, _ in COLUMNS) + f" {'errors':>6}"
    lines = [head, "-" * len(head)]
    for r in rows:
        if r.error:
            lines.append(f"{r.label:{width}} failed: {r.error}")
            continue
        cells = " ".join(fmt(getattr(r, key), 8, d) for _, key, d in COLUMNS)
        lines.append(
            f"{r.label:{width}} {r.n:>4} {cells} {sum(r.errors.values()):>6}" + (" *" if r.correct_and_missing else "")
        )
    note = both_note(rows)
    lines += [f"* {note}"] if note else []
    lines.append("")
    lines += [
        f"{r.label}: ended by {_counts(r.ended_by)}; errors: {_counts(r.errors) or 'none'}" for r in rows if not r.error
    ]
    lines.append("")
    lines += [f"{r.label}: {r.policy}" for r in rows if r.policy]
    stages = [line for r in rows if not r.error and r.run_dir for line in stage_lines(r)]
    if stages:
        lines += ["", "time per stage (mean ms over the turns it ran in, and how many; model requests by purpose):"]
        lines += stages
    return "\n".join(lines)


def stage_times(run_dir: Path) -> tuple[dict[str, tuple[float, int]], str]:
    """{stage: (mean ms per turn that ran it, turns)} over a run folder's traces, in the order stages first ran;
    and the reranker's method (which model, on which device) as its first call recorded it."""
    from traces.store import TraceStore

    totals: dict[str, list[float]] = {}
    reranker = ""
    for t in TraceStore(run_dir.parent, run_dir.name):
        turn: dict[str, float] = {}
        calls = {id(c) for c in t.tool_calls()}
        for s in t.steps:
            if id(s) in calls:
                turn[s.tool] = turn.get(s.tool, 0.0) + (s.latency_ms or 0.0)
                if s.tool == "reranker" and not reranker:
                    reranker = (s.method or "").split(" + ")[0].split("; ")[0]  # the model (and its device)
            for c in getattr(s, "model_calls", None) or []:
                key = f"{c.purpose} (model)"
                turn[key] = turn.get(key, 0.0) + c.latency_ms
        for k, v in turn.items():
            totals.setdefault(k, []).append(v)
    return {k: (sum(v) / len(v), len(v)) for k, v in totals.items()}, reranker


def stage_lines(row: Row) -> list[str]:
    try:
        stages, reranker = stage_times(Path(row.run_dir))
    except (OSError, ValueError):
        return [f"  {row.label}: (traces unreadable)"]
    cells = ", ".join(f"{k} {ms:.0f} ({n})" for k, (ms, n) in stages.items()) or "no stage ran"
    if reranker and " on " not in reranker:  # the embedding fallback scores with the run's text embedder
        reranker += " (the text embedder, on this machine's CPU)"
    return [f"  {row.label}: {cells}"] + ([f"    reranker: {reranker}"] if reranker else [])


def both_note(rows: list[Row]) -> str | None:
    """Why a row's truthfulness or accuracy + missing passes 1, when one does (the official counting)."""
    from glasses_rag.crag_mm.evaluate import BOTH_NOTE

    hit = [r for r in rows if not r.error and r.correct_and_missing]
    if not hit:
        return None
    where = ", ".join(f"{r.label} {r.correct_and_missing}" for r in hit)
    return BOTH_NOTE.replace("{n} turn(s)", "Turns") + f"; per preset: {where}"


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in counts.items())


def chart(rows: list[Row], path: Path, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from glasses_rag.evaluation.charts import mark_bars

    ok = [r for r in rows if not r.error]
    x = np.arange(len(ok))
    fig, (left, right) = plt.subplots(1, 2, figsize=(max(9.0, 1.6 * len(ok) + 4), 4.2))
    for i, (name, key) in enumerate(
        [
            ("truthfulness", "truthfulness"),
            ("accuracy", "accuracy"),
            ("hallucination", "hallucination"),
            ("missing", "missing"),
        ]
    ):
        values = [getattr(r, key) for r in ok]
        left.bar(x + (i - 1.5) * 0.2, values, 0.2, label=name)
        mark_bars(left, values, x + (i - 1.5) * 0.2, horizontal=False, labels=False)  # a 0 is seen, not absent
    left.axhline(0, color="black", linewidth=0.6)
    left.set_xticks(x, [r.label for r in ok], rotation=30, ha="right")
    left.set_title("answers (share of turns)")
    left.legend(fontsize=7)
    right.bar(x - 0.2, [r.latency_p50_ms / 1000 for r in ok], 0.4, label="p50")
    right.bar(x + 0.2, [r.latency_p95_ms / 1000 for r in ok], 0.4, label="p95")
    right.set_xticks(x, [r.label for r in ok], rotation=30, ha="right")
    right.set_title("latency per turn (s)")
    right.legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    note = both_note(rows)
    if note:  # bars above 1 are the official counting, said under the chart
        import textwrap

        fig.text(0.01, 0.01, textwrap.fill(note, 170), fontsize=6.5, va="bottom")
        fig.tight_layout(rect=(0, 0.1, 1, 1))
    else:
        fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    from glasses_rag.harness import run_scoring
    from glasses_rag.policies.presets import load_preset

    argv = list(sys.argv[1:] if argv is None else argv)
    mine, args = parse(argv, own_parser())
    names = [mine.worker] if mine.worker else [n.strip() for n in mine.presets.split(",") if n.strip()]
    try:
        for n in names:
            load_preset(n)  # a typo fails here, before anything runs
        base = base_config(args)
        scoring = run_scoring.make_scoring(args)
    except (ValueError, FileNotFoundError, ImportError, OSError) as e:
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    root = Path(args.out) / bench_id("presets", args, base)
    if mine.worker:  # one preset, in this (fresh) process: its row goes to stdout for the parent
        row = one_preset(args, base, mine.worker, root, scoring)
        print(ROW_MARK + row.model_dump_json())
        return 1 if row.error else 0
    print(
        f"task {args.task} on {args.data}: presets {', '.join(names)}; judge {scoring.describe()}; folder {root}"
        + ("" if mine.same_process else "; each preset in its own process"),
        flush=True,
    )
    rows = []
    for name in names:
        row = one_preset(args, base, name, root, scoring) if mine.same_process else isolated(argv, name)
        rows.append(row)
        print(
            f"  {row.label}: done ({row.seconds:.0f} s)" if not row.error else f"  {row.label}: {row.error}", flush=True
        )
    print()
    print(table(rows))
    out = mine.json or root / "presets.json"
    write_json(
        out,
        {
            "task": args.task,
            "data": str(args.data),
            "benchmark": args.benchmark,
            "judge": scoring.judge_name,
            "argv": argv,
            "presets": [r.model_dump() for r in rows],
        },
    )
    files = [str(out)]
    if not mine.no_chart and any(not r.error for r in rows):
        files.append(
            str(chart(rows, mine.png or root / "presets.png", f"task {args.task} on {args.data}; {scoring.judge_name}"))
        )
    print("\nwrote " + ", ".join(files))
    return 1 if any(r.error for r in rows) else 0


ROW_MARK = "PRESET-ROW "


def one_preset(args: argparse.Namespace, base: Any, name: str, root: Path, scoring: Any) -> Row:
    from glasses_rag.harness import run_folder

    config = base.model_copy(update={"preset": name})
    concurrency, _ = concurrency_for(args, config)
    try:
        return run_row(args, Path(name).stem, config, root, scoring, concurrency)
    except (run_folder.RunRefused, ValueError, OSError) as e:
        return Row(label=Path(name).stem, preset=name, error=f"{type(e).__name__}: {e}")


def isolated(argv: list[str], name: str) -> Row:
    """One preset in a fresh process, so that no preset finds models loaded or per-text caches (the shared text
    embedder's) filled by the one before it: every preset starts as cold as the first."""
    import subprocess

    root = Path(__file__).resolve().parents[1]
    cmd = [sys.executable, "-m", "benchmarks.presets", *strip_presets_options(argv), "--worker", name]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH")) if p)}
    done = subprocess.run(cmd, cwd=root, env=env, stdout=subprocess.PIPE, text=True)
    found = [line[len(ROW_MARK) :] for line in done.stdout.splitlines() if line.startswith(ROW_MARK)]
    if not found:
        return Row(
            label=Path(name).stem,
            preset=name,
            error=f"the preset's process ended with code {done.returncode} and no result (its error is above)",
        )
    return Row.model_validate_json(found[-1])


def strip_presets_options(argv: list[str]) -> list[str]:
    """The command line without this script's own options (the worker gets graph.run's ones)."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        name = a.split("=", 1)[0]
        if name in ("--presets", "--json", "--png"):
            skip = "=" not in a
            continue
        if name in ("--no-chart", "--same-process"):
            continue
        out.append(a)
    return out


def write_json(path: Path, data: Any) -> None:
    from glasses_rag.core.files import write_atomic

    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(data, indent=2, default=str) + "\n")


if __name__ == "__main__":
    from glasses_rag.core.calls import exit_process

    exit_process(main())
