"""Memory over a long run: RSS growth per turn over --turns turns (a script with printed figures, not a test).

    python -m benchmarks.memory [--turns 2000]

The CLI's own path: conversations streamed from a parquet file, each run through the graph (build_agent, rule
planner, no retrieval so turns are quick), traces written and dropped, one compact scoring record kept per turn,
the report computed at the end. RSS is read from /proc after a warm-up of 10% of the turns and after the last turn;
the growth per turn in between is the figure (target: under 5 KiB per turn). What the final report adds (it lists
every scored turn) is printed separately.
"""

from __future__ import annotations

import argparse
import gc
import tempfile
from functools import partial
from pathlib import Path

from benchmarks.startup import make_rows

TARGET_KIB = 5.0


def rss_kib() -> int:
    """Resident memory after a full collection and after handing freed memory back to the OS (glibc keeps freed
    blocks of every thread's arena otherwise): memory the run holds, not allocator slack."""
    gc.collect()
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def main(argv: list[str] | None = None) -> int:
    from glasses_rag.crag_mm.dataset import load_conversations
    from glasses_rag.crag_mm.evaluate import TurnRecord, evaluate, record_from_trace
    from glasses_rag.crag_mm.scoring import RuleJudge, make_truncator, score_trace
    from glasses_rag.harness.runner import run_task
    from glasses_rag.retrieval.search import SearchConfig
    from graph.build import build_agent
    from graph.config import AgentConfig
    from traces.store import TraceStore

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--turns", type=int, default=2000)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        data = make_rows(args.turns, Path(tmp) / "data")
        agent = build_agent(AgentConfig(search=SearchConfig(backend="none")), task=2)
        judge, truncator = RuleJudge(), make_truncator(None)
        store = TraceStore(Path(tmp) / "runs", "memory")
        records: list[TurnRecord] = []
        marks: dict[str, int] = {}
        warm = max(1, args.turns // 4)  # bounded caches (embeddings, search, OCR) fill up first

        def keep(trace) -> None:
            records.append(record_from_trace(trace))
            if len(records) in (warm, args.turns):
                marks["warm" if len(records) == warm else "last"] = rss_kib()

        run_task(
            agent,
            load_conversations(data),
            2,
            store,
            scorer=partial(score_trace, judge=judge, truncator=truncator),
            on_turn=keep,
            history_answer=truncator.truncate,
        )
        report = evaluate(records, judge=judge, truncator=truncator)
        end = rss_kib()
    per_turn = (marks["last"] - marks["warm"]) / max(1, len(records) - warm)
    print(
        f"{len(records)} turns ({report.overall.total} scored); RSS {marks['warm'] / 1024:.1f} MiB after {warm} "
        f"turns, {marks['last'] / 1024:.1f} MiB after the last turn, {end / 1024:.1f} MiB with the report"
    )
    print(
        f"growth: {per_turn:.2f} KiB per turn (target < {TARGET_KIB} KiB) -> "
        f"{'MET' if per_turn < TARGET_KIB else 'NOT MET'}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
