"""The rule planner under concurrency on this machine's CPU (a script with printed figures, not a test).

    python -m benchmarks.throughput [--task 2] [--levels 1 2 16] [--repeat 2]

The default agent (rule planner, local demo index, local models: MiniLM, OCR, the heuristic image embedder) runs the
demo's task-2 questions at several concurrency levels, each level over the same turns (repeated --repeat times so
16 conversations are really in flight). Printed per level: turns/s, how many turns ended by the time budget, and the
CPU seconds per turn. Local models use one thread per call (glasses_rag.models.resources.limit_cpu_threads), so 16 turns
at once share the cores instead of fighting over them. Target: no turn ends by budget at concurrency 16 on 2 cores.
(The CLI caps concurrency at the core count for CPU-bound policies unless --oversubscribe; this measures the
uncapped case.)
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    from glasses_rag.crag_mm.dataset import load_all
    from glasses_rag.crag_mm.demo import ensure_demo
    from glasses_rag.harness.runner import run_task
    from graph.build import build_agent
    from graph.config import AgentConfig
    from traces.store import TraceStore

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", type=int, default=2, choices=[1, 2, 3])
    ap.add_argument("--levels", type=int, nargs="+", default=[1, 2, 16])
    ap.add_argument("--repeat", type=int, default=2, help="run the dataset this many times per level")
    args = ap.parse_args(argv)
    demo = ensure_demo()
    convs, _ = load_all(demo.multi_turn if args.task == 3 else demo.single_turn)
    agent = build_agent(AgentConfig(), task=args.task, index_dir=demo.root)  # warm: models loaded, indexes built
    agent.resources.get("ocr", __import__("glasses_rag.models.ocr", fromlist=["OcrEngine"]).OcrEngine)
    print(f"task {args.task}: {len(convs)} conversation(s) x {args.repeat}, budget {agent.config.budget.budget_s:g}s")
    print(f"{'concurrency':>11} {'turns':>6} {'turns/s':>8} {'by budget':>9} {'CPU s/turn':>10}")
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for level in args.levels:
            batch = [
                c.model_copy(update={"session_id": f"{c.session_id}-r{r}"}) for r in range(args.repeat) for c in convs
            ]
            store = TraceStore(Path(tmp), f"c{level}")
            c0, w0 = time.process_time(), time.perf_counter()
            stats = run_task(agent, batch, args.task, store, concurrency=level)
            wall, cpu = time.perf_counter() - w0, time.process_time() - c0
            by_budget = stats.ended_by.get("time_budget", 0)
            ok &= by_budget == 0 or level < 16
            print(f"{level:>11} {stats.turns:>6} {stats.turns / wall:>8.2f} {by_budget:>9} {cpu / stats.turns:>10.3f}")
    print(f"no turn ended by budget at concurrency 16: {'MET' if ok else 'NOT MET'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
