"""Per-turn latency by graph node, model calls and tokens, and peak memory: `python benchmarks/latency.py`.

Setups measured (each over the same demo conversations, turns in order with the agent's own history):

* ``rule``      the default: rule-based planner (heuristic) + embedded local demo index;
* ``vlm-fake``  the model policy over glasses_rag/testing/fake_model_server.py, a scripted OpenAI-compatible server on
                127.0.0.1 that answers instantly: it measures the FRAMEWORK's overhead around a model
                (prompt building, HTTP, parsing, the self-check call), NOT any model's speed; the token
                counts it reports are estimates (request characters / 4), not a tokenizer's;
* ``transformers`` with ``--transformers PATH`` (a local folder or a .gguf file; ``--chat-template`` for a
                model without one, ``--text-only`` for a text model);
* ``openai``    with ``--openai URL#MODEL`` (vLLM or any OpenAI-compatible server).

Rows: time per turn in ms (mean, p50, p95, max over the turns in which the row's component ran): plan/policy
(the policy's decisions), one row per tool (its own run time), answer, self_check (the verdict, incl. the
model's verification calls), graph overhead (turn latency minus all of those) and the whole turn. Model calls
and tokens per turn are read from the traces (each model call's record: prompt and completion tokens, purpose).
The first turn of each setup (lazy model loading) is run before measuring and reported as "cold turn". Memory
is measured in a second pass over the same turns: tracemalloc peak (Python allocations only) and getrusage max
RSS (whole process, never goes down, so a later setup's figure includes the earlier ones). `--once` runs the
turns once (no cold turn, no memory pass): for a real model on a CPU, where a turn takes tens of seconds.

For a model policy it also prints whether the model drives the loop (traces/model_loop.py): the share of its
finished decisions that parsed, the tool calls that ran per turn, the answers given after a tool's result;
seconds per decision, tokens per call, model calls per turn on the critical path, finish reasons and modes.
The real-model figures in README come from:

    python -m benchmarks.latency --no-fake --no-rule --once --task 1 2 3 --limit 4 --transformers $GGUF \
        --chat-template gemma --text-only --max-tokens 96 --budget 90 --answer-reserve 30 \
        [--prefix-cache-mb 0] [--prompt-profile compact] [--dtype bfloat16]

It also prints the process's CPU seconds per turn and per decision (the timing pass), turn seconds by the number of
tool calls run, and the share of prompt tokens served from a prefix cache.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import time
import tracemalloc
from collections import Counter
from pathlib import Path
from typing import Any

for k, v in {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "ANONYMIZED_TELEMETRY": "False",
}.items():
    os.environ.setdefault(k, v)

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

TASK_DATA = {1: "single_turn", 2: "single_turn", 3: "multi_turn"}


def scripted_reply(body: dict) -> dict:
    """The fake server's reply, chosen from the request, so a whole turn runs the full model path: decide ->
    image_search (with an image), web_search once (when offered), then the answer inside the decision;
    verification: supported. Token counts are estimates (characters / 4, +256 per image)."""
    from glasses_rag.models.vlm.base import message_text
    from glasses_rag.testing.fake_model_server import FakeOpenAIServer as F

    msgs = body.get("messages", [])
    texts = [message_text(m.get("content")) for m in msgs]
    has_image = '"image_url"' in json.dumps(msgs)
    est_in = max(1, sum(len(t) for t in texts) // 4) + (256 if has_image else 0)

    def reply(s: str) -> dict:
        return F.text_reply(s, prompt_tokens=est_in, completion_tokens=max(1, len(s) // 4))

    last, system = (texts[-1] if texts else ""), (texts[0] if texts else "")
    if "Decide the next step" in last:
        done = " ".join(t for m, t in zip(msgs, texts) if m.get("role") == "assistant")
        for tool, args in (("image_search", "{}"), ("web_search", '{"query": "the entity"}')):
            if f"{tool}(" in system and f'"{tool}"' not in done and (tool != "image_search" or has_image):
                return reply(f'{{"action": "call_tool", "tool": "{tool}", "arguments": {args}, "rationale": "look"}}')
        return reply(
            '{"action": "answer", "answer": "a scripted answer", "confidence": 0.9, '
            '"entity": "scripted entity", "rationale": "enough evidence"}'
        )
    if "chain of verification" in last:
        return reply(
            '{"verifications": [{"question": "is the entity right?", "answer": "yes", "supported": true}], '
            '"supported": true, "confidence": 0.9, "reason": "the evidence states it"}'
        )
    if "Two answers were written" in last:
        return reply('{"consistent": true, "reason": "same fact"}')
    return reply('{"answer": "a scripted answer", "confidence": 0.9, "entity": "scripted entity", "rationale": "r"}')


# --------------------------------------------------------------------------------------------
# Measuring
# --------------------------------------------------------------------------------------------


def breakdown(trace) -> dict[str, float]:
    """ms per component of one TurnTrace."""
    out: dict[str, float] = {"plan/policy": 0.0}
    for s in trace.steps:
        if s.node in ("plan", "tool_call") and s.policy_ms:
            out["plan/policy"] += s.policy_ms
        if s.node == "tool_call":
            key = f"tool:{s.tool}"
            out[key] = out.get(key, 0.0) + (s.latency_ms or 0.0)
        elif s.node == "answer":
            out["answer"] = out.get("answer", 0.0) + (s.policy_ms or 0.0)
        elif s.node == "verdict":
            out["self_check"] = out.get("self_check", 0.0) + (s.latency_ms or 0.0)
    out["graph overhead"] = max(0.0, trace.latency_ms - sum(out.values()))
    out["turn total"] = trace.latency_ms
    return out


def _stats(xs: list[float]) -> dict[str, float]:
    xs = sorted(xs)
    p95 = xs[min(len(xs) - 1, max(0, int(round(0.95 * (len(xs) - 1)))))]
    return {
        "n": len(xs),
        "mean": round(statistics.fmean(xs), 2),
        "p50": round(statistics.median(xs), 2),
        "p95": round(p95, 2),
        "max": round(xs[-1], 2),
    }


def run_turns(agent, conversations, task: int | None = None) -> list:
    """All turns in order (history = the agent's own answers); the traces. `conversations` are (task,
    conversation) pairs, or conversations of `task`."""
    from glasses_rag.core.images import load_image, prepare
    from graph.agent import TurnInput
    from tools.base import HistoryTurn

    out = []
    for item in conversations:
        task, conv = item if isinstance(item, tuple) else (task, item)
        image, info = prepare(*load_image(conv.image), conv.egocentric, "harness")
        history: list[HistoryTurn] = []
        for i, turn in enumerate(conv.turns if task == 3 else conv.turns[:1]):
            trace = agent.run_turn(
                TurnInput(
                    task=task,
                    session_id=conv.session_id,
                    interaction_id=turn.interaction_id,
                    turn_index=i,
                    question=turn.query,
                    image=image,
                    image_info=info,
                    history=list(history),
                )
            )
            out.append(trace)
            history.append(HistoryTurn(question=turn.query, answer=trace.answer, entity=trace.entity))
    return out


def token_figures(turns: list) -> dict[str, Any] | None:
    """Model calls and tokens per turn, from the traces; None when no model was called."""
    from traces.model_calls import critical_path_by_tools, prefix_reuse

    calls = [t.tokens.calls for t in turns]
    if not any(calls):
        return None
    by_purpose = Counter(c.purpose for t in turns for c in t.model_calls())
    modes = Counter(c.mode for t in turns for c in t.model_calls())
    return {
        "calls_per_turn": _stats([float(x) for x in calls]),
        "prompt_per_turn": _stats([float(t.tokens.prompt_tokens) for t in turns]),
        "completion_per_turn": _stats([float(t.tokens.completion_tokens) for t in turns]),
        "prompt_total": sum(t.tokens.prompt_tokens for t in turns),
        "completion_total": sum(t.tokens.completion_tokens for t in turns),
        "calls_by_purpose": dict(by_purpose),
        "modes": {str(k): v for k, v in modes.items()},
        "cancelled": sum(c.cancelled for t in turns for c in t.model_calls()),
        "critical_path_calls_per_turn": _stats([float(t.tokens.sequential_calls) for t in turns]),
        "critical_path_by_tool_calls": critical_path_by_tools(turns),
        "prefix_reuse": prefix_reuse(turns).model_dump(),
    }


def loop_figures(turns: list) -> dict[str, Any] | None:
    """Whether the model drove the loop (traces/model_loop.py), and what its decisions cost: seconds per finished
    decision, tokens per finished call, model calls per turn on the critical path, finish reasons."""
    from traces.model_loop import LoopStats

    loop = LoopStats()
    for t in turns:
        loop.add(t)
    if not (loop.decisions or loop.decisions_cancelled):
        return None
    done = [c for t in turns for c in t.model_calls() if not c.cancelled and c.error is None]
    decide = [c for c in done if c.purpose == "decide"]
    return {
        "loop": loop.model_dump(),
        "summary": loop.summary(),
        "parse_rate": loop.parse_rate,
        "tool_calls_ok_per_turn": round(loop.tool_calls_ok / max(1, loop.turns), 2),
        "s_per_decision": _stats([c.latency_ms / 1000 for c in decide]) if decide else None,
        "prompt_tokens_per_call": _stats([float(c.prompt_tokens or 0) for c in done]) if done else None,
        "completion_tokens_per_call": _stats([float(c.completion_tokens or 0) for c in done]) if done else None,
        "finish_reasons": dict(Counter(str(c.finish_reason) for t in turns for c in t.model_calls())),
    }


def _memory_pass(agent, conversations) -> float:
    tracemalloc.start()
    tracemalloc.reset_peak()
    run_turns(agent, conversations)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return round(peak / 2**20, 2)


def measure(
    label: str, note: str, policy: Any, args, conversations, search, preset: str | None = None
) -> dict[str, Any]:
    """One setup over `conversations` ((task, conversation) pairs)."""
    from glasses_rag.models.resources import ModelPaths
    from graph.build import build_agent
    from graph.config import AgentConfig, BudgetConfig

    t0 = time.perf_counter()
    cfg = AgentConfig(
        policy=policy,
        preset=preset,
        self_check=args.self_check,
        budget=BudgetConfig(
            budget_s=args.budget,
            answer_reserve_s=args.answer_reserve,
            **({"max_steps": args.max_steps} if args.max_steps is not None else {}),
        ),
        models=ModelPaths(detector=args.detector, clip=args.clip, reranker=args.reranker),
    )
    tasks = sorted({task for task, _ in conversations})
    agent = build_agent(cfg, search=search, run_id=f"bench-{label}", task=tasks[0] if len(tasks) == 1 else None)
    load_s = time.perf_counter() - t0
    cold = None if args.once else run_turns(agent, conversations[:1])[0]  # the first turn pays lazy loading
    stats = getattr(getattr(agent.policy, "backend", None), "decode_stats", None)  # in-process decoding
    before = dict(vars(stats)) if stats is not None else None
    cpu0 = _cpu_s()
    turns = run_turns(agent, conversations)  # timing pass (tracemalloc would slow it)
    cpu_s = _cpu_s() - cpu0
    decoding = {k: v - before[k] for k, v in vars(stats).items()} if stats is not None and before is not None else None
    comps: dict[str, list[float]] = {}
    for trace in turns:
        for k, v in breakdown(trace).items():
            comps.setdefault(k, []).append(v)
    peak = None if args.once else _memory_pass(agent, conversations)
    rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    return {
        "setup": label,
        "note": note,
        "policy": agent.policy_name,
        "search": agent.search_name,
        "task": tasks,
        "turns": len(turns),
        "build_s": round(load_s, 3),
        "cold_turn_ms": cold.latency_ms if cold else None,
        "ms": {k: _stats(v) for k, v in comps.items()},
        "turns_per_s": round(1000 * len(turns) / max(1e-9, sum(t.latency_ms for t in turns)), 2),
        "tool_calls_per_turn": _stats([float(len(t.tool_calls())) for t in turns]),
        "abstained": sum(1 for t in turns if t.abstained),
        "ended_by": dict(Counter(t.ended_by for t in turns)),
        "errors": dict(Counter(k for t in turns for k in t.error_kinds())),
        "tokens": token_figures(turns),
        "model_loop": loop_figures(turns),
        "tracemalloc_peak_mib": peak,
        "max_rss_mib": round(rss_kib / 1024, 1),
        "cpu": cpu_figures(turns, cpu_s),
        "decoding": decoding,
    }


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def cpu_figures(turns: list, cpu_s: float) -> dict[str, Any]:
    """CPU seconds of the timing pass (the whole process: model, tools, graph) per turn and per decision, turn
    seconds by the number of tool calls run, and the prompt tokens served from a prefix cache."""
    calls = [c for t in turns for c in t.model_calls()]
    decisions = sum(1 for c in calls if c.purpose == "decide")
    by_tools: dict[int, list[float]] = {}
    for t in turns:
        by_tools.setdefault(len(t.tool_calls()), []).append(t.latency_ms / 1000)
    prompt = sum(c.prompt_tokens or 0 for c in calls)
    cached = sum(c.cached_tokens or 0 for c in calls)
    return {
        "cpu_s": round(cpu_s, 2),
        "cpu_s_per_turn": round(cpu_s / max(1, len(turns)), 2),
        "cpu_s_per_decision": round(cpu_s / decisions, 2) if decisions else None,
        "turn_s_by_tool_calls": {k: _stats(v) for k, v in sorted(by_tools.items())},
        "cached_prompt_share": round(cached / prompt, 3) if prompt else None,
        "prompt_profiles": dict(Counter(str(c.prompt_profile) for c in calls if c.prompt_profile)),
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
    cold = f"cold turn {r['cold_turn_ms']:.0f} ms" if r["cold_turn_ms"] is not None else "one pass (--once)"
    lines = [
        f"== {r['setup']}: {r['note']}",
        f"   policy: {r['policy']} | search: {r['search']} | task {r['task']} | {r['turns']} turn(s) | "
        f"agent built in {r['build_s']:.2f}s | {cold}",
        f"   {'component (ms per turn*)':<28}{'turns':>6}{'mean':>10}{'p50':>10}{'p95':>10}{'max':>10}",
    ]
    for k in sorted(r["ms"], key=_order):
        s = r["ms"][k]
        lines.append(f"   {k:<28}{s['n']:>6}{s['mean']:>10.1f}{s['p50']:>10.1f}{s['p95']:>10.1f}{s['max']:>10.1f}")
    lines.append("   * a row's statistics are over the turns in which that component ran (the 'turns' column)")
    tc = r["tool_calls_per_turn"]
    lines.append(f"   turns/s: {r['turns_per_s']:.2f} (one conversation at a time)")
    lines.append(
        f"   tool calls per turn: mean {tc['mean']:.1f}, max {tc['max']:.0f}; abstained {r['abstained']}/{r['turns']}; "
        f"ended_by {r['ended_by']}; errors {r['errors'] or 'none'}"
    )
    lines += _model_lines(r["tokens"]) + _loop_lines(r.get("model_loop"))
    lines += cpu_lines(r.get("cpu")) if r["tokens"] else []
    lines += decoding_lines(r.get("decoding"))
    memory = (
        f"tracemalloc peak {r['tracemalloc_peak_mib']:.1f} MiB (Python allocations during the turns); "
        if r["tracemalloc_peak_mib"] is not None
        else ""
    )
    lines.append(f"   memory: {memory}max RSS {r['max_rss_mib']:.0f} MiB (process so far)")
    return "\n".join(lines)


def _model_lines(t: dict[str, Any] | None) -> list[str]:
    from traces.model_calls import PrefixReuse, format_prefix_reuse

    if t is None:
        return ["   model: no language model in this setup"]
    by_tools = ", ".join(f"{n} tool call(s): {v:.1f}" for n, v in t["critical_path_by_tool_calls"].items())
    return [
        f"   model calls per turn: mean {t['calls_per_turn']['mean']:.1f} (max {t['calls_per_turn']['max']:.0f}) "
        f"by purpose {t['calls_by_purpose']}, modes {t['modes']}, cancelled {t['cancelled']}",
        f"   tokens per turn (from the traces): prompt mean {t['prompt_per_turn']['mean']:.0f} "
        f"(max {t['prompt_per_turn']['max']:.0f}), completion mean {t['completion_per_turn']['mean']:.0f}; "
        f"total {t['prompt_total']} prompt / {t['completion_total']} completion",
        f"   model calls per turn on the critical path: mean {t['critical_path_calls_per_turn']['mean']:.1f}; "
        f"by tools used: {by_tools} (target for the model loop: <= 3 with one tool, <= 4 with two)",
        f"   {format_prefix_reuse(PrefixReuse.model_validate(t['prefix_reuse']))}",
    ]


def _loop_lines(m: dict[str, Any] | None) -> list[str]:
    if m is None:
        return []
    rate = "n/a" if m["parse_rate"] is None else f"{100 * m['parse_rate']:.1f}%"

    def stat(name: str, unit: str, fmt: str = ".0f") -> str:
        s = m[name]
        return (
            "n/a"
            if s is None
            else (f"mean {s['mean']:{fmt}}{unit}, p50 {s['p50']:{fmt}}{unit}, p95 {s['p95']:{fmt}}{unit} (n={s['n']})")
        )

    return [
        f"   model loop: {m['summary']}",
        f"   decision parse rate {rate}; tool calls run per turn {m['tool_calls_ok_per_turn']:.2f}",
        f"   seconds per decision: {stat('s_per_decision', ' s', '.1f')}",
        f"   tokens per call: prompt {stat('prompt_tokens_per_call', '')}; completion "
        f"{stat('completion_tokens_per_call', '')}; finish reasons {m['finish_reasons']}",
    ]


def cpu_lines(c: dict[str, Any] | None) -> list[str]:
    if not c:
        return []
    turns = "; ".join(
        f"{k} tool call(s): mean {v['mean']:.1f} s, max {v['max']:.1f} s (n={v['n']})"
        for k, v in c["turn_s_by_tool_calls"].items()
        if v
    )
    share = "n/a" if c["cached_prompt_share"] is None else f"{100 * c['cached_prompt_share']:.0f}%"
    return [
        f"   CPU seconds (whole process, timing pass): {c['cpu_s']} s, {c['cpu_s_per_turn']} per turn, "
        f"{c['cpu_s_per_decision']} per decision",
        f"   turn seconds by tool calls run: {turns}",
        f"   prompt tokens from the prefix cache: {share}; prompt profiles {c['prompt_profiles'] or 'n/a'}",
    ]


def decoding_lines(d: dict[str, int] | None) -> list[str]:
    """In-process constrained decoding (glasses_rag/models/vlm/decoding.py): forward passes against tokens written."""
    if not d or not d.get("tokens"):
        return []
    return [
        f"   in-process decoding: {d['tokens']} token(s) in {d['forwards']} forward pass(es) "
        f"({d['forwards'] / d['tokens']:.2f} per token, the prompts' included); drafted {d['drafted']} token(s), "
        f"{d['accepted']} confirmed by the model's own choice (of them from prompt lookup: "
        f"{d.get('looked_up', 0)} drafted, {d.get('looked_up_accepted', 0)} confirmed)"
    ]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python benchmarks/latency.py",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument(
        "--task",
        type=int,
        choices=[1, 2, 3],
        nargs="+",
        default=[3],
        help="CRAG-MM task(s), run one after another (3: multi-turn demo conversations)",
    )
    p.add_argument(
        "--limit", type=int, default=4, help="demo conversations to run per task (all their turns for task 3)"
    )
    p.add_argument("--budget", type=float, default=10.0, help="per-turn time budget, seconds")
    p.add_argument(
        "--answer-reserve",
        type=float,
        default=None,
        help="seconds of the budget kept for the answer (default: the library's); raise it for a slow model",
    )
    p.add_argument("--max-steps", type=int, default=None, help="tool calls per turn (default: the library's)")
    p.add_argument("--self-check", choices=["on", "off"], default="on")
    p.add_argument("--once", action="store_true", help="run the turns once: no cold turn, no memory pass (slow models)")
    p.add_argument("--no-rule", action="store_true", help="skip the rule-based planner setup")
    p.add_argument("--json", type=Path, default=None, help="also write the results here")
    p.add_argument("--no-fake", action="store_true", help="skip the fake-server model setup")
    p.add_argument(
        "--presets",
        default=None,
        help="also run these presets (comma-separated; 'all' for every one) "
        "with the scripted fake model (glasses_rag/testing/scripted_model.py)",
    )
    p.add_argument(
        "--fake-delay",
        type=float,
        default=0.0,
        help="seconds the fake model server takes per request "
        "(e.g. 0.3 for a figure of turns/s against a model's round trip)",
    )
    p.add_argument("--transformers", type=Path, default=None, help="local transformers folder or .gguf file")
    p.add_argument("--chat-template", default=None, help="for --transformers: gemma, chatml, llama3 or a .jinja file")
    p.add_argument("--text-only", action="store_true", help="for --transformers / --openai: never send the image")
    p.add_argument("--max-tokens", type=int, default=None, help="for --transformers / --openai")
    p.add_argument("--device", default="cpu", help="device for --transformers")
    p.add_argument("--dtype", default=None, help="for --transformers: float32 (CPU default), bfloat16, ...")
    p.add_argument(
        "--prompt-profile",
        choices=["full", "compact"],
        default=None,
        help="for --transformers / --openai: the model policy's prompt profile (default full)",
    )
    p.add_argument(
        "--prefix-cache-mb",
        type=int,
        default=None,
        help="for --transformers: memory of the prompt prefix cache (0: off; default the library's)",
    )
    p.add_argument(
        "--no-jump-forward",
        action="store_true",
        help="for --transformers: one forward pass per token (the replies are the same; for comparison)",
    )
    p.add_argument(
        "--prompt-lookup",
        type=int,
        default=None,
        help="for --transformers: the longest draft copied from the prompt in free text (0: off; the same replies "
        "in float32)",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="for --transformers: torch CPU threads (default torch's: the physical cores)",
    )
    p.add_argument(
        "--openai",
        default=None,
        help="OpenAI-compatible server as URL#MODEL, e.g. http://127.0.0.1:8000/v1#Qwen/Qwen2.5-VL-7B-Instruct",
    )
    p.add_argument("--detector", type=Path, default=None, help="local GroundingDINO/OWLv2 folder")
    p.add_argument("--clip", type=Path, default=None, help="local CLIP folder for the demo image index")
    p.add_argument("--reranker", type=Path, default=None, help="local cross-encoder folder")
    p.add_argument("--demo-dir", type=Path, default=None, help="demo benchmark folder (default data/demo)")
    return p


def preset_setups(args) -> tuple[Any, list[tuple[str, str, Any, str]]]:
    """The presets asked for, each against one fake server that answers as glasses_rag/testing/scripted_model.py scripts
    it."""
    if not args.presets:
        return None, []
    from glasses_rag.models.vlm import ModelConfig
    from glasses_rag.policies.presets import preset_names
    from glasses_rag.testing.fake_model_server import FakeOpenAIServer
    from glasses_rag.testing.scripted_model import ScriptedModel

    names = preset_names() if args.presets == "all" else [n.strip() for n in args.presets.split(",") if n.strip()]
    server = FakeOpenAIServer(responder=ScriptedModel(), delay_s=args.fake_delay).start()
    model = ModelConfig(backend="openai", base_url=server.base_url, model="fake-vlm", max_retries=0)
    delay = f"{args.fake_delay * 1000:.0f} ms per request" if args.fake_delay else "instant"
    return server, [
        (f"preset:{n}", f"preset {n} -> FAKE model server ({delay}, scripted replies)", model, n) for n in names
    ]


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from glasses_rag.crag_mm.dataset import load_all
    from glasses_rag.crag_mm.demo import ensure_demo
    from glasses_rag.models.image_embedder import make_image_embedder
    from glasses_rag.models.vlm import ModelConfig, model_config_from_options
    from glasses_rag.retrieval.local_search import LocalSearchIndex

    demo = ensure_demo(args.demo_dir)
    conversations = [
        (task, conv) for task in args.task for conv in load_all(getattr(demo, TASK_DATA[task]), limit=args.limit)[0]
    ]
    index = LocalSearchIndex(demo.root, image_embedder=make_image_embedder(args.clip))  # one index for every setup
    options = {
        "text_only": args.text_only or None,
        "max_tokens": args.max_tokens,
        "prompt_profile": args.prompt_profile,
    }
    setups: list[tuple] = []
    if not args.no_rule:
        setups.append(("rule", "default: rule-based planner (heuristic), embedded local demo index", "rule"))
    server = None
    if not args.no_fake:
        from glasses_rag.testing.fake_model_server import FakeOpenAIServer

        server = FakeOpenAIServer(responder=scripted_reply, delay_s=args.fake_delay).start()
        delay = f"{args.fake_delay * 1000:.0f} ms per request" if args.fake_delay else "instant"
        setups.append(
            (
                "vlm-fake",
                f"model policy -> FAKE local OpenAI-compatible server ({delay}, scripted "
                "replies): framework overhead only, NOT model speed; tokens estimated as chars/4",
                ModelConfig(backend="openai", base_url=server.base_url, model="fake-vlm", max_retries=0),
            )
        )
    if args.transformers is not None:
        cfg = model_config_from_options(
            f"transformers:{args.transformers}",
            device=args.device,
            chat_template=args.chat_template,
            dtype=args.dtype,
            prefix_cache_mb=args.prefix_cache_mb,
            n_threads=args.threads,
            jump_forward=False if args.no_jump_forward else None,
            prompt_lookup=args.prompt_lookup,
            **options,
        )
        setups.append(("transformers", f"local transformers model {args.transformers} on {args.device}", cfg))
    if args.openai:
        setups.append(
            (
                "openai",
                f"OpenAI-compatible server {args.openai}",
                model_config_from_options(f"openai:{args.openai}", **options),
            )
        )
    preset_server, preset_rows = preset_setups(args)
    setups += preset_rows
    extras = [f"{n}={getattr(args, n)}" for n in ("detector", "clip", "reranker") if getattr(args, n)]
    print(
        f"latency benchmark: task {args.task}, {len(conversations)} demo conversation(s), budget {args.budget}s; "
        f"local models: {', '.join(extras) or 'none (heuristic detector/CLIP/reranker)'}; "
        f"python {sys.version.split()[0]}, {os.cpu_count()} CPU(s)\n",
        flush=True,
    )
    results = []
    try:
        for label, note, policy, *preset in setups:
            try:
                r = measure(label, note, policy, args, conversations, index, *preset)
            except Exception as e:  # noqa: BLE001 - one broken backend does not hide the others
                print(f"== {label}: FAILED: {type(e).__name__}: {e}\n", flush=True)
                results.append({"setup": label, "note": note, "error": f"{type(e).__name__}: {e}"})
                continue
            results.append(r)
            print(format_result(r) + "\n", flush=True)
    finally:
        for srv in (server, preset_server):
            if srv is not None:
                srv.stop()
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps({"task": args.task, "limit": args.limit, "budget_s": args.budget, "results": results}, indent=2)
        )
        print(f"json: {args.json}")
    return 0 if all("error" not in r for r in results) else 1


if __name__ == "__main__":
    from glasses_rag.core.calls import exit_process

    exit_process(main())
