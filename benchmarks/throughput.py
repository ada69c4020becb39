"""Throughput and framework overhead on the demo benchmark (a script with printed figures, not a test).

    python benchmarks/throughput.py            # full demo Task 2 and Task 3
    python benchmarks/throughput.py --quick    # a few conversations, fewer repeats

1. turns/s of the rule-planner agent on demo Task 2 and Task 3 at concurrency 1 and N, over a
   CachedSearch-wrapped local index (a fresh cache per run; its hit rates are printed);
2. framework overhead per step: the tool calls the rule planner made are replayed through the graph
   (ScriptedPolicy, cached search backend) and, as a baseline, by calling the same tool functions
   directly in a straight loop (validate + run + fold the evidence, then the self-check). The
   difference per tool call is the graph's overhead; the target is < 5 ms per step.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
for k, v in {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
             "TOKENIZERS_PARALLELISM": "false", "ANONYMIZED_TELEMETRY": "False"}.items():
    os.environ.setdefault(k, v)

TARGET_MS = 5.0


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    if not xs:
        return float("nan")
    i = min(len(xs) - 1, max(0, round(q / 100 * (len(xs) - 1))))
    return xs[i]


def setup():
    from crag.dataset import load_all
    from crag.demo import ensure_demo
    from crag.local_search import LocalSearchIndex
    from models.image_embedder import make_image_embedder
    from models.ocr import OcrEngine
    from models.text_embedder import get_text_embedder
    from tools import load_builtin_tools

    demo = ensure_demo()
    reg = load_builtin_tools()
    base = LocalSearchIndex(demo.root, image_embedder=make_image_embedder(None)).warm_up()
    get_text_embedder().embed(["warm up"])
    ocr = OcrEngine()
    data = {2: load_all(demo.single_turn)[0], 3: load_all(demo.multi_turn)[0]}
    return reg, base, ocr, data


def resources_for(search, ocr):
    from models.resources import Resources

    r = Resources(search)
    r.get("ocr", lambda: ocr)
    return r


def throughput(reg, base, ocr, convs, task, concurrency, out_root):
    from crag.cache import CachedSearch
    from graph.agent import Agent, AgentConfig
    from graph.rule_planner import RuleBasedPlanner
    from graph.runner import run_task
    from traces.store import TraceStore

    search = CachedSearch(base)
    res = resources_for(search, ocr)
    pol = RuleBasedPlanner(res.text_embedder)
    res.policy = pol
    run_id = f"task{task}-c{concurrency}"
    agent = Agent(pol, res, AgentConfig(), registry=reg, run_id=run_id, search_name=search.name)
    store = TraceStore(out_root, run_id)
    t0 = time.perf_counter()
    traces, _, failed = run_task(agent, convs, task, store, concurrency=concurrency)
    dt = time.perf_counter() - t0
    return traces, dt, failed, search.stats()


def replay_overhead(reg, base, ocr, convs, traces, task, repeats):
    """Per turn: median graph time and median straight-line time for the same tool calls."""
    from crag.cache import CachedSearch
    from graph.agent import Agent, AgentConfig, TurnInput
    from graph.policy import AnswerDraft, Decision, ScriptedPolicy
    from graph.runner import prepare_image
    from tools.base import HistoryTurn, ToolContext

    search = CachedSearch(base)  # the fast backend: after the first repeat every search is a cache hit
    res = resources_for(search, ocr)
    by_sid = {c.session_id: c for c in convs}
    per_step: list[float] = []
    graph_ms: list[float] = []
    base_ms: list[float] = []
    n_steps = 0
    history: dict[str, list[HistoryTurn]] = {}
    for tr in traces:
        c = by_sid[tr.session_id]
        image, note = prepare_image(c)
        hist = history.setdefault(tr.session_id, [])
        calls = [(s.tool, dict(s.arguments)) for s in tr.steps if s.node == "act" and s.tool]
        draft = AnswerDraft(answer=tr.answer, confidence=max(0.0, min(1.0, tr.confidence or 0.9)))
        pol = ScriptedPolicy([Decision(action="call_tool", tool=t, arguments=a) for t, a in calls], draft, name="replay")
        res.policy = pol
        agent = Agent(pol, res, AgentConfig(budget_s=60, max_steps=max(8, len(calls) + 1)), registry=reg,
                      run_id="replay", search_name=search.name)
        inp = TurnInput(task=task, session_id=tr.session_id, interaction_id=tr.interaction_id,
                        turn_index=tr.turn_index, question=tr.question, image=image, image_note=note,
                        history=list(hist))
        steps = len(calls) + 1  # the tool calls plus the self-check call

        def straight():
            evidence, crop, ocr_text, subs = [], None, None, []
            for name, args in calls:
                ctx = ToolContext(task=task, question=inp.question, image=image, history=inp.history,
                                  evidence=evidence, crop=crop, ocr_text=ocr_text, sub_questions=subs, resources=res)
                try:
                    t, a = reg.validate(__import__("tools").ToolCall(tool=name, arguments=args), task)
                    out = t.run(ctx, a)
                except Exception:  # noqa: BLE001 - the graph records these as error steps
                    continue
                if out.replace_evidence:
                    evidence = list(out.hits)
                else:
                    evidence = evidence + out.hits
                crop = out.box or crop
                ocr_text = out.text if out.text is not None else ocr_text
                subs = list(out.sub_questions) or subs
            if draft.answer.strip().lower() not in ("i don't know",):
                t, a = reg.validate(__import__("tools").ToolCall(tool="self_check", arguments={}), task)
                t.run(ToolContext(task=task, question=inp.question, image=image, history=inp.history,
                                  evidence=evidence, ocr_text=ocr_text, draft_answer=draft.answer,
                                  draft_confidence=draft.confidence, resources=res), a)

        agent.run_turn(inp)  # warm every cache (search, OCR, embeddings) for both paths
        straight()
        g, b = [], []
        for _ in range(repeats):
            t0 = time.perf_counter()
            agent.run_turn(inp)
            g.append((time.perf_counter() - t0) * 1000)
            t0 = time.perf_counter()
            straight()
            b.append((time.perf_counter() - t0) * 1000)
        gm, bm = statistics.median(g), statistics.median(b)
        graph_ms.append(gm)
        base_ms.append(bm)
        per_step.append((gm - bm) / steps)
        n_steps += steps
        hist.append(HistoryTurn(question=tr.question, answer=tr.answer, entity=tr.entity))
    return per_step, graph_ms, base_ms, n_steps, search.stats()


def fmt_rates(stats) -> str:
    return (f"web {stats['web']['hit_rate']:.0%} ({stats['web']['hits']}/{stats['web']['hits'] + stats['web']['misses']}), "
            f"image {stats['image']['hit_rate']:.0%} ({stats['image']['hits']}/{stats['image']['hits'] + stats['image']['misses']}), "
            f"page {stats['page']['hit_rate']:.0%} ({stats['page']['hits']}/{stats['page']['hits'] + stats['page']['misses']})")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="a few conversations and fewer repeats")
    p.add_argument("--concurrency", type=int, default=4, help="N for the concurrent runs")
    p.add_argument("--repeats", type=int, default=None, help="replays per turn for the overhead figure")
    args = p.parse_args(argv)
    repeats = args.repeats or (3 if args.quick else 7)
    limits = {2: 12, 3: 5} if args.quick else {2: None, 3: None}

    t0 = time.perf_counter()
    reg, base, ocr, data = setup()
    print(f"setup (models, index, demo data): {time.perf_counter() - t0:.1f}s; CPUs: {os.cpu_count()}")
    print(f"search: cached({base.name}); policy: rule-based-planner (heuristic); {'quick' if args.quick else 'full'} run\n")
    out_root = Path(tempfile.mkdtemp(prefix="throughput-"))
    print(f"{'task':<6}{'conc':>5}{'convs':>7}{'turns':>7}{'seconds':>9}{'turns/s':>9}  cache hit rates")
    ref_traces = {}
    for task in (2, 3):
        convs = data[task][: limits[task]] if limits[task] else data[task]
        # first pass: cold model-level caches (text embeddings, OCR results); the timed runs below are warm
        traces, dt, failed, stats = throughput(reg, base, ocr, convs, task, 1, out_root / "cold")
        print(f"{task:<6}{'1*':>5}{len(convs):>7}{len(traces):>7}{dt:>9.2f}{len(traces) / dt:>9.2f}  {fmt_rates(stats)}")
        for conc in (1, args.concurrency):
            traces, dt, failed, stats = throughput(reg, base, ocr, convs, task, conc, out_root)
            if conc == 1:
                ref_traces[task] = (convs, traces)
            print(f"{task:<6}{conc:>5}{len(convs):>7}{len(traces):>7}{dt:>9.2f}{len(traces) / dt:>9.2f}  {fmt_rates(stats)}"
                  + (f"  FAILED {failed}" if failed else ""))
    print("* first pass, cold embedding/OCR caches; the other rows reuse them (steady state, warm caches)\n")
    all_steps: list[float] = []
    for task in (2, 3):
        convs, traces = ref_traces[task]
        per_step, g, b, n, stats = replay_overhead(reg, base, ocr, convs, traces, task, repeats)
        all_steps += per_step
        print(f"task {task} replay: {len(traces)} turns, {n} tool calls, {repeats} repeats; "
              f"graph {statistics.mean(g):.1f} ms/turn vs straight loop {statistics.mean(b):.1f} ms/turn; "
              f"overhead per step mean {statistics.mean(per_step):.2f} ms, p50 {pct(per_step, 50):.2f} ms, "
              f"p95 {pct(per_step, 95):.2f} ms; replay cache: {fmt_rates(stats)}")
    mean, p50, p95 = statistics.mean(all_steps), pct(all_steps, 50), pct(all_steps, 95)
    print(f"\nframework overhead per step (graph vs straight loop, same tool calls): mean {mean:.2f} ms, "
          f"p50 {p50:.2f} ms, p95 {p95:.2f} ms")
    print(f"target < {TARGET_MS:.0f} ms per step: mean {'MET' if mean < TARGET_MS else 'NOT MET'}, "
          f"p50 {'MET' if p50 < TARGET_MS else 'NOT MET'}, p95 {'MET' if p95 < TARGET_MS else 'NOT MET'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
