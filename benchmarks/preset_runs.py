"""What benchmarks.presets and benchmarks.ablate share: graph.run's options (data, search, model, budget, scoring),
one resumable run per agent configuration, and the per-turn figures of a run.

Every run is an ordinary run folder (traces, run.json, report.json) under `<--out>/<bench id>/<row>`, made and
resumed by graph.run's own helpers: the same command again reuses the finished turns, a larger --limit adds turns.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, Field


class Row(BaseModel):
    """One configuration's figures over the questions it ran."""

    label: str
    preset: str | None = None
    policy: str = ""
    run_dir: str = ""
    n: int = 0
    truthfulness: float = 0.0
    accuracy: float = 0.0
    hallucination: float = 0.0
    missing: float = 0.0
    latency_p50_ms: float = 0.0
    latency_p95_ms: float = 0.0
    tool_calls_per_turn: float = 0.0
    model_calls_per_turn: float = 0.0
    tokens_per_turn: float = 0.0
    wrong: float = 0.0
    ended_by: dict[str, int] = Field(
        default_factory=dict,
        description="Turns per way of ending (answer, time budget, step limit, ...), from the traces.",
    )
    errors: dict[str, int] = Field(default_factory=dict, description="Failed steps per error kind, from the traces.")
    seconds: float = 0.0
    error: str | None = None
    correct_and_missing: int = Field(
        0,
        description="Questions counted as both correct and missing: why accuracy + "
        "missing and truthfulness can pass 1 (glasses_rag.crag_mm.evaluate.BOTH_NOTE).",
    )
    # per question ("session#turn"): (correct, missing) as the report counted them
    flags: dict[str, tuple[bool, bool]] = Field(default_factory=dict, exclude=True)


def parse(argv: list[str] | None, own: argparse.ArgumentParser) -> tuple[argparse.Namespace, argparse.Namespace]:
    """This script's options, and every other option parsed by graph.run's own parser (so --data, --index-dir,
    --search, --model, --budget, --judge ... mean exactly what they mean there)."""
    from glasses_rag.frontends import run

    argv = list(sys.argv[1:] if argv is None else argv)
    if "-h" in argv or "--help" in argv:
        own.print_help()
        print("\nand every option of python -m graph.run (data, search, model, budget, scoring):\n")
        run.build_parser().print_help()
        raise SystemExit(0)
    mine, rest = own.parse_known_args(argv)
    p = run.build_parser()
    p.set_defaults(concurrency=None)  # to tell "not given" from 1
    args = run.resolve_benchmark(p, p.parse_args(rest))
    args.concurrency_given = args.concurrency is not None
    args.concurrency = args.concurrency or 1
    return mine, args


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", Path(str(text)).name or str(text)).strip("-")[:40] or "data"


def bench_id(kind: str, args: argparse.Namespace, base: Any) -> str:
    """A stable folder name: the same data, task, model and scoring give the same folder (so a rerun resumes)."""
    if args.run_id:
        return args.run_id
    parts = [
        base.model_copy(update={"preset": None}).fingerprint(),
        args.benchmark,
        args.task,
        args.data,
        args.split,
        args.judge,
        args.scoring_mode,
        args.image_prep,
        args.tokenizer,
    ]
    digest = hashlib.sha256("\0".join(map(str, parts)).encode()).hexdigest()[:8]
    return f"{kind}-task{args.task}-{slug(args.data)}-{digest}"


def turn_figures(store: Any, keys: set[tuple[str, int]]) -> list[dict[str, Any]]:
    """Latency, tool calls, model calls and tokens of the given turns, read from their traces."""
    out = []
    for t in store:
        if (t.session_id, t.turn_index) in keys:
            out.append(
                {
                    "latency_ms": t.latency_ms,
                    "tool_calls": len(t.tool_calls()),
                    "model_calls": t.tokens.calls,
                    "tokens": t.tokens.prompt_tokens + t.tokens.completion_tokens,
                    "ended_by": str(t.ended_by),
                    "errors": t.error_kinds(),
                }
            )
    return out


def question_flags(report: Any) -> dict[str, tuple[bool, bool]]:
    """(correct, missing) per question as the report's mode counts them (before or after the multi-turn stop)."""
    from glasses_rag.crag_mm.scoring import get_mode

    after = get_mode(report.mode).counts_after_early_stop
    out = {}
    for t in report.turns:
        correct, miss, _ = t.flags(after)
        out[f"{t.session_id}#{t.turn_index}"] = (correct, miss)
    return out


def summarize(
    label: str,
    preset: str | None,
    policy: str,
    run_dir: Path,
    report: Any,
    figures: list[dict[str, Any]],
    seconds: float,
) -> Row:
    m = report.overall
    lat = np.array([f["latency_ms"] for f in figures], dtype=float)
    flags = question_flags(report)
    # hallucination: the official share (total - correct - missing) / total, as graph.run prints it; wrong: the
    # turns judged wrong (the official one goes below zero when an exact match of an "I don't know" ground truth
    # counts as both correct and missing)
    wrong = sum(not c and not miss for c, miss in flags.values()) / max(1, len(flags))
    ended = Counter(str(f["ended_by"]) for f in figures)
    errors = Counter(k for f in figures for k in f["errors"])

    def mean(key: str) -> float:
        return float(np.mean([f[key] for f in figures])) if figures else 0.0

    return Row(
        label=label,
        preset=preset,
        policy=policy,
        run_dir=str(run_dir),
        n=m.total,
        truthfulness=m.truthfulness,
        accuracy=m.accuracy,
        hallucination=m.hallucination_rate,
        wrong=wrong,
        missing=m.missing_rate,
        ended_by=dict(ended.most_common()),
        errors=dict(errors.most_common()),
        latency_p50_ms=float(np.percentile(lat, 50)) if lat.size else 0.0,
        latency_p95_ms=float(np.percentile(lat, 95)) if lat.size else 0.0,
        tool_calls_per_turn=mean("tool_calls"),
        model_calls_per_turn=mean("model_calls"),
        tokens_per_turn=mean("tokens"),
        seconds=round(seconds, 1),
        flags=flags,
        correct_and_missing=sum(c and miss for c, miss in flags.values()),
    )


def run_row(
    args: argparse.Namespace, label: str, config: Any, root: Path, scoring: Any, concurrency: int, search: Any = None
) -> Row:
    """One configuration over the data, in the resumable run folder `root/label`."""
    from glasses_rag.harness import run_data, run_folder, run_scoring, session
    from traces.store import TraceStore, write_json_atomic

    t0 = time.time()
    source, conversations = run_data.load_data(args)
    store = TraceStore(root, label)
    lock = run_folder.claim_run_folder(store, run_folder.run_fingerprint(args, config, source), args.resume_anyway)
    try:
        agent = session.agent_for_run(args, config, f"{root.name}/{label}", search=search)
        manifest = {
            "run_id": f"{root.name}/{label}",
            "benchmark": args.benchmark,
            "task": args.task,
            "data": str(source),
            "policy": agent.policy_name,
            "preset": config.preset,
            "search": agent.search_name,
            "judge": scoring.judge_name,
            "config": config.model_dump(mode="json"),
            "config_fingerprint": agent.fingerprint,
            "run_fingerprint": run_folder.run_fingerprint(args, config, source),
            "status": "running",
        }
        write_json_atomic(store.dir / "run.json", manifest)
        stats, records = session.run_and_collect(args, agent, conversations, store, scoring, concurrency)
        report = run_scoring.write_reports(args, scoring, records, store).data
        write_json_atomic(
            store.dir / "run.json",
            {
                **manifest,
                "status": "finished",
                "stats": stats.model_dump(),
                "turns": stats.turns,
                "resumed_turns": stats.resumed_turns,
            },
        )
        figures = turn_figures(store, {(r.session_id, r.turn_index) for r in records})
        return summarize(label, config.preset, agent.policy_name, store.dir, report, figures, time.time() - t0)
    finally:
        lock.release()


def base_config(args: argparse.Namespace) -> Any:
    """The agent configuration graph.run would build from these options (the data's own index included)."""
    from glasses_rag.harness import run_data, session

    run_data.prepare_data(args)  # before the config: the data comes with its own search index
    return session.agent_config_from_args(args)


def concurrency_for(args: argparse.Namespace, config: Any, default: int = 1) -> tuple[int, str]:
    """--concurrency (`default` when not given), capped at the core count for a policy that runs on this machine's
    CPU (graph.run's rule)."""
    from glasses_rag.harness import session

    wanted = args.concurrency if getattr(args, "concurrency_given", True) else default
    return session.effective_concurrency(argparse.Namespace(**{**vars(args), "concurrency": wanted}), config)


def fmt(v: float, width: int = 7, digits: int = 3) -> str:
    return f"{v:{width}.{digits}f}"
