"""Per-turn latency by graph node, tokens and peak memory: `python -m benchmarks.latency`.

Setups measured (each over the same demo conversations, turns in order with the agent's own history):

* ``rule``      the default: rule-based planner (heuristic) + embedded local demo index;
* ``vlm-fake``  VLMPolicy over models/vlm/fake_server.py, a scripted OpenAI-compatible server on
                127.0.0.1 that answers instantly: it measures the FRAMEWORK's overhead around a VLM
                (prompt building, HTTP, parsing, the extra self-check calls), NOT any model's speed;
                its token counts are estimates (request characters / 4), not a tokenizer's;
* ``transformers`` with ``--transformers PATH`` (a local VLM / causal-LM folder);
* ``openai``    with ``--openai URL#MODEL`` (vLLM or any OpenAI-compatible server);
* ``--detector/--clip/--reranker`` local folders apply to every setup (default: the named heuristics).

Columns: time per turn in ms (mean, p50, p95, max over the measured turns). Rows: plan/policy (the
policy's decide() calls), one row per tool (its own run time), answer (the policy's answer()),
self_check (the self-check tool, incl. a VLM's verification calls), graph overhead (turn latency minus
all of those) and the whole turn. Timings come from the traces (Step.policy_ms / Step.latency_ms).
The first turn of each setup (lazy model loading) is run before measuring and reported as "cold turn".
Memory is measured in a second pass over the same turns: tracemalloc peak (Python allocations only;
numpy/torch buffers allocated in C are not seen) and getrusage max RSS (whole process, never goes down,
so a later setup's figure includes the earlier ones).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

TASK_DATA = {1: "single_turn", 2: "single_turn", 3: "multi_turn"}


# --------------------------------------------------------------------------------------------
# The fake server's replies: chosen from the request, so a whole turn runs the full VLM path
# --------------------------------------------------------------------------------------------


class ScriptedVLM:
    """Stands in for FakeOpenAIServer.script: `popleft()` answers the request just received.

    decide: image_search first (when an image is attached), then web_search once (when the tool is
    offered), then answer; answer / closed-book: a short JSON answer; consistency / CoVe: supported.
    """

    def __init__(self, server):
        self.server = server

    def __bool__(self) -> bool:
        return True

    def __len__(self) -> int:
        return 1

    def clear(self) -> None:
        pass

    def extend(self, items) -> None:
        pass

    @staticmethod
    def _text(body: dict) -> str:
        parts = []
        for m in body.get("messages", []):
            c = m.get("content")
            if isinstance(c, str):
                parts.append(c)
            elif isinstance(c, list):
                parts += [p.get("text", "") for p in c if isinstance(p, dict) and p.get("type") == "text"]
        return "\n".join(parts)

    def popleft(self):
        from models.vlm.fake_server import FakeOpenAIServer as F

        body = self.server.requests[-1] if self.server.requests else {}
        text = self._text(body)
        has_image = "image_url" in json.dumps(body.get("messages", []))[:100000]
        est_in = max(1, len(text) // 4) + (256 if has_image else 0)  # estimate: chars/4 (+256 per image)

        def reply(s: str) -> dict:
            return F.text_reply(s, prompt_tokens=est_in, completion_tokens=max(1, len(s) // 4))

        def call(name: str, args: dict) -> dict:
            r = F.tool_call_reply(name, args)
            r["usage"] = {"prompt_tokens": est_in, "completion_tokens": 12}
            return r

        if "Decide the single next step" in text:
            done = text.split("Steps already done:", 1)[-1].split("Other observations:", 1)[0]
            offered = text.split("Available tools", 1)[-1].split("Steps already done:", 1)[0]
            q = re.search(r"Question: (.*)", text)
            question = q.group(1).strip() if q else "the question"
            if has_image and "image_search(" in offered and "image_search(" not in done:
                return call("image_search", {})
            if "web_search(" in offered and "web_search(" not in done:
                return call("web_search", {"query": question[:100]})
            return reply('{"action": "answer", "rationale": "enough evidence"}')
        if "Two answers were written" in text:
            return reply('{"consistent": true, "reason": "same fact"}')
        if "chain of verification" in text:
            return reply('{"verifications": [{"question": "is the entity right?", "answer": "yes", "supported": true}], '
                         '"supported": true, "confidence": 0.9, "reason": "the evidence states it"}')
        return reply('{"answer": "a scripted answer", "confidence": 0.9, "entity": "scripted entity"}')


# --------------------------------------------------------------------------------------------
# Measuring
# --------------------------------------------------------------------------------------------


def breakdown(trace) -> dict[str, float]:
    """ms per component of one TurnTrace."""
    out: dict[str, float] = {"plan/policy": 0.0}
    for s in trace.steps:
        if s.node in ("plan", "act") and s.policy_ms:
            out["plan/policy"] += s.policy_ms
        if s.node == "act" and s.tool:
            key = f"tool:{s.tool}"
            out[key] = out.get(key, 0.0) + (s.latency_ms or 0.0)
        elif s.node == "answer":
            out["answer"] = out.get("answer", 0.0) + (s.policy_ms or 0.0)
        elif s.node == "self_check":
            out["self_check"] = out.get("self_check", 0.0) + (s.latency_ms or 0.0) + (s.policy_ms or 0.0)
    out["graph overhead"] = max(0.0, trace.latency_ms - sum(out.values()))
    out["turn total"] = trace.latency_ms
    return out


def _stats(xs: list[float]) -> dict[str, float]:
    xs = sorted(xs)
    p95 = xs[min(len(xs) - 1, max(0, int(round(0.95 * (len(xs) - 1)))))]
    return {"n": len(xs), "mean": round(statistics.fmean(xs), 2), "p50": round(statistics.median(xs), 2),
            "p95": round(p95, 2), "max": round(xs[-1], 2)}


def _usage(policy) -> tuple[int, int, int] | None:
    u = getattr(policy, "usage", None)
    if u is None:
        return None
    return int(u.input_tokens), int(u.output_tokens), len(getattr(policy, "calls", []) or [])


def run_turns(agent, conversations, task: int) -> list[tuple[Any, tuple[int, int, int] | None]]:
    """All turns in order (history = the agent's own answers); (trace, token delta) per turn."""
    from graph.agent import TurnInput
    from graph.runner import prepare_image
    from tools.base import HistoryTurn

    out = []
    for conv in conversations:
        image, note = prepare_image(conv)
        history: list[HistoryTurn] = []
        for i, turn in enumerate(conv.turns):
            before = _usage(agent.policy)
            trace = agent.run_turn(TurnInput(task=task, session_id=conv.session_id, interaction_id=turn.interaction_id,
                                             turn_index=i, question=turn.query, image=image, image_note=note,
                                             history=list(history)))
            after = _usage(agent.policy)
            delta = None if before is None else tuple(a - b for a, b in zip(after, before))
            out.append((trace, delta))
            history.append(HistoryTurn(question=turn.query, answer=trace.answer, entity=trace.entity))
            if task != 3:
                break
    return out


def measure(label: str, note: str, policy_factory, args, conversations, search_factory) -> dict[str, Any]:
    from graph.agent import Agent, AgentConfig
    from models.resources import ModelPaths, Resources
    from tools import load_builtin_tools

    search = search_factory()
    resources = Resources(search, ModelPaths(detector=args.detector, clip=args.clip, reranker=args.reranker))
    t0 = time.perf_counter()
    policy = policy_factory(resources)
    load_s = time.perf_counter() - t0
    resources.policy = policy
    agent = Agent(policy, resources, AgentConfig(budget_s=args.budget), registry=load_builtin_tools(),
                  run_id=f"bench-{label}", search_name=getattr(search, "name", "search"))
    # cold turn: the first turn pays lazy loading (embedders, indexes, OCR, detectors)
    cold = run_turns(agent, conversations[:1], args.task)[0][0]
    # timing pass (no tracemalloc: it slows every Python allocation)
    turns = run_turns(agent, conversations, args.task)
    comps: dict[str, list[float]] = {}
    for trace, _ in turns:
        for k, v in breakdown(trace).items():
            comps.setdefault(k, []).append(v)
    tokens = None
    if turns and turns[0][1] is not None:
        ins = [d[0] for _, d in turns]
        outs = [d[1] for _, d in turns]
        calls = [d[2] for _, d in turns]
        tokens = {"input_per_turn": _stats([float(x) for x in ins]), "output_per_turn": _stats([float(x) for x in outs]),
                  "calls_per_turn": _stats([float(x) for x in calls]), "input_total": sum(ins), "output_total": sum(outs)}
    # memory pass over the same turns
    tracemalloc.start()
    tracemalloc.reset_peak()
    run_turns(agent, conversations, args.task)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    return {
        "setup": label, "note": note, "policy": getattr(policy, "name", type(policy).__name__),
        "search": agent.search_name, "task": args.task, "turns": len(turns), "policy_load_s": round(load_s, 3),
        "cold_turn_ms": cold.latency_ms, "ms": {k: _stats(v) for k, v in comps.items()},
        "tool_calls_per_turn": _stats([float(sum(1 for s in t.steps if s.node == "act")) for t, _ in turns]),
        "abstained": sum(1 for t, _ in turns if t.abstained),
        "ended_by": {e: sum(1 for t, _ in turns if t.ended_by == e) for e in {t.ended_by for t, _ in turns}},
        "tokens": tokens, "tracemalloc_peak_mib": round(peak / 2**20, 2), "max_rss_mib": round(rss_kib / 1024, 1),
    }


# --------------------------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------------------------


def _order(k: str) -> tuple[int, str]:
    if k == "plan/policy":
        return 0, k
    if k.startswith("tool:"):
        return 1, k
    return {"answer": 2, "self_check": 3, "graph overhead": 4, "turn total": 5}.get(k, 6), k


def format_result(r: dict[str, Any]) -> str:
    lines = [f"== {r['setup']}: {r['note']}",
             f"   policy: {r['policy']} | search: {r['search']} | task {r['task']} | {r['turns']} turn(s) | "
             f"policy load {r['policy_load_s']:.2f}s | cold turn {r['cold_turn_ms']:.0f} ms",
             f"   {'component (ms per turn*)':<28}{'turns':>6}{'mean':>10}{'p50':>10}{'p95':>10}{'max':>10}"]
    for k in sorted(r["ms"], key=_order):
        s = r["ms"][k]
        lines.append(f"   {k:<28}{s['n']:>6}{s['mean']:>10.1f}{s['p50']:>10.1f}{s['p95']:>10.1f}{s['max']:>10.1f}")
    lines.append("   * a row's statistics are over the turns in which that component ran (the 'turns' column)")
    tc = r["tool_calls_per_turn"]
    lines.append(f"   tool calls per turn: mean {tc['mean']:.1f}, max {tc['max']:.0f}; abstained {r['abstained']}/{r['turns']}; "
                 f"ended_by {r['ended_by']}")
    t = r["tokens"]
    if t is None:
        lines.append("   tokens: n/a (no language model in this setup)")
    else:
        lines.append(f"   tokens per turn: input mean {t['input_per_turn']['mean']:.0f} (max {t['input_per_turn']['max']:.0f}), "
                     f"output mean {t['output_per_turn']['mean']:.0f}; model calls per turn mean {t['calls_per_turn']['mean']:.1f}; "
                     f"total {t['input_total']} in / {t['output_total']} out")
    lines.append(f"   memory: tracemalloc peak {r['tracemalloc_peak_mib']:.1f} MiB (Python allocations during the turns); "
                 f"max RSS {r['max_rss_mib']:.0f} MiB (process so far)")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.latency", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--task", type=int, choices=[1, 2, 3], default=3, help="CRAG-MM task (3: multi-turn demo conversations)")
    p.add_argument("--limit", type=int, default=4, help="demo conversations to run (all their turns for task 3)")
    p.add_argument("--budget", type=float, default=10.0, help="per-turn time budget, seconds")
    p.add_argument("--json", type=Path, default=None, help="also write the results here")
    p.add_argument("--no-fake", action="store_true", help="skip the fake-server VLM setup")
    p.add_argument("--transformers", type=Path, default=None, help="local transformers VLM / causal-LM folder")
    p.add_argument("--device", default="cpu", help="device for --transformers")
    p.add_argument("--openai", default=None, help="OpenAI-compatible server as URL#MODEL, e.g. http://127.0.0.1:8000/v1#Qwen/Qwen2.5-VL-7B-Instruct")
    p.add_argument("--detector", type=Path, default=None, help="local GroundingDINO/OWLv2 folder")
    p.add_argument("--clip", type=Path, default=None, help="local CLIP folder for the demo image index")
    p.add_argument("--reranker", type=Path, default=None, help="local cross-encoder folder")
    p.add_argument("--demo-dir", type=Path, default=None, help="demo benchmark folder (default data/demo)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from crag.dataset import load_all
    from crag.demo import ensure_demo
    from crag.local_search import LocalSearchIndex
    from graph.rule_planner import RuleBasedPlanner
    from models.image_embedder import make_image_embedder

    demo = ensure_demo(args.demo_dir)
    conversations, _ = load_all(getattr(demo, TASK_DATA[args.task]), limit=args.limit)
    index = LocalSearchIndex(demo.root, image_embedder=make_image_embedder(args.clip))

    def search_factory():
        return index  # one index for every setup: its embeddings are built once (first setup's cold turn)

    setups: list[tuple[str, str, Any]] = [
        ("rule", "default: rule-based planner (heuristic), embedded local demo index",
         lambda res: RuleBasedPlanner(res.text_embedder)),
    ]
    server = None
    if not args.no_fake:
        from models.vlm import make_policy
        from models.vlm.fake_server import FakeOpenAIServer

        server = FakeOpenAIServer().start()
        server.script = ScriptedVLM(server)
        setups.append(("vlm-fake", "VLMPolicy -> FAKE local OpenAI-compatible server (instant scripted replies): "
                                   "framework overhead only, NOT model speed; tokens estimated as chars/4",
                       lambda res: make_policy(f"openai:{server.base_url}#fake-vlm", max_retries=0)))
    if args.transformers is not None:
        from models.vlm import make_policy

        setups.append(("transformers", f"local transformers model {args.transformers} on {args.device}",
                       lambda res: make_policy(f"transformers:{args.transformers}", device=args.device)))
    if args.openai:
        from models.vlm import make_policy

        setups.append(("openai", f"OpenAI-compatible server {args.openai}", lambda res: make_policy(f"openai:{args.openai}")))
    extras = [f"{n}={getattr(args, n)}" for n in ("detector", "clip", "reranker") if getattr(args, n)]
    print(f"latency benchmark: task {args.task}, {len(conversations)} demo conversation(s), "
          f"{sum(len(c.turns) if args.task == 3 else 1 for c in conversations)} turn(s) per setup, budget {args.budget}s; "
          f"local models: {', '.join(extras) or 'none (heuristic detector/CLIP/reranker)'}; "
          f"python {sys.version.split()[0]}, {os.cpu_count()} CPU(s)\n", flush=True)
    results = []
    try:
        for label, note, factory in setups:
            try:
                r = measure(label, note, factory, args, conversations, search_factory)
            except Exception as e:  # noqa: BLE001 - one broken backend does not hide the others
                print(f"== {label}: FAILED: {type(e).__name__}: {e}\n", flush=True)
                results.append({"setup": label, "note": note, "error": f"{type(e).__name__}: {e}"})
                continue
            results.append(r)
            print(format_result(r) + "\n", flush=True)
    finally:
        if server is not None:
            server.stop()
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"task": args.task, "limit": args.limit, "budget_s": args.budget,
                                         "results": results}, indent=2))
        print(f"json: {args.json}")
    return 0 if all("error" not in r for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
