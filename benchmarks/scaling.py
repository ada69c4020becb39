"""Turns per second against a model server of fixed latency, by concurrency: `python benchmarks/scaling.py`.

The model is the fake OpenAI-compatible server (testing/fake_model_server.py) in its own process (no GIL shared with
the agent), answering every request after `--delay` seconds (300 ms by default) with scripted replies: decide ->
web_search, decide -> answer, answer, self-check (one chain-of-verification round trip). So a turn is
`round trips x delay` of model time, and the ideal rate at concurrency c is

    ideal = c / (sequential model round trips per turn x delay)

(read from the traces: calls per turn, all sequential here). The figure is the measured rate over that ideal, for
the whole run and for its steady state (completions after the first wave and before the last: the first wave
starts every slot cold, with a new thread and a new connection, and the last drains); a second ideal, c x the
rate measured at concurrency 1 in the same run, separates scaling from per-turn overhead.
Search is off (NullSearch) and there is no image, so what is measured is the framework: graph, policy, HTTP
client, traces written to disk. Every conversation has one turn of task 2.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
for k, v in {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
             "ANONYMIZED_TELEMETRY": "False"}.items():
    os.environ.setdefault(k, v)

TARGET = 0.85


def respond(body: dict) -> dict:
    """The fake model's reply to one request (runs in the server process)."""
    from testing.fake_model_server import FakeOpenAIServer as F

    text = json.dumps(body.get("messages", []))
    if "Decide the single next step" in text:
        done = text.split("Steps already done:", 1)[-1].split("Other observations:", 1)[0]
        if "web_search(" not in done:
            return F.text_reply('{"action": "call_tool", "tool": "web_search", "arguments": {"query": "q"}, '
                                '"rationale": "look it up"}', prompt_tokens=900, completion_tokens=30)
        return F.text_reply('{"action": "answer", "rationale": "enough"}', prompt_tokens=1000, completion_tokens=12)
    if "chain of verification" in text:
        return F.text_reply('{"verifications": [{"question": "q", "answer": "a", "supported": true}], '
                            '"supported": true, "confidence": 0.9, "reason": "r"}', prompt_tokens=400, completion_tokens=40)
    return F.text_reply('{"answer": "a scripted answer", "confidence": 0.9, "entity": "x", "rationale": "r"}',
                        prompt_tokens=700, completion_tokens=25)


def start_server(delay: float) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "testing.fake_model_server", "--delay", str(delay), "--responder",
                             f"{Path(__file__).resolve()}:respond"], stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    url = proc.stdout.readline().strip()
    if not url.startswith("http"):
        proc.kill()
        raise RuntimeError("the fake server did not start")
    return proc, url


def run_at(url: str, concurrency: int, turns: int, out_dir: Path, stream: bool = True) -> dict:
    from crag.schema import Conversation, Turn
    from crag.search import NullSearch
    from graph.build import build_agent
    from graph.config import AgentConfig, BudgetConfig
    from graph.runner import run_task
    from models.openai_client import pool_size_for
    from models.vlm import ModelConfig
    from traces.store import TraceStore

    cfg = AgentConfig(policy=ModelConfig(backend="openai", base_url=url, model="fake-vlm", max_retries=0,
                                         pool_size=pool_size_for(concurrency), stream=stream),
                      budget=BudgetConfig(budget_s=60), warm_up=False)
    agent = build_agent(cfg, search=NullSearch(), run_id=f"scale{concurrency}")
    convs = [Conversation(session_id=f"c{concurrency}-{i}", turns=[Turn(interaction_id=f"c{concurrency}-{i}",
                                                                        query="Who makes this rocket?")],
                          answers=["SpaceX"]) for i in range(turns)]
    traces = []
    done_at: list[float] = []

    def finished(trace) -> None:
        traces.append(trace)
        done_at.append(time.perf_counter())

    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    stats = run_task(agent, convs, 2, TraceStore(out_dir, f"scale{concurrency}"), concurrency=concurrency,
                     on_turn=finished)
    wall = time.perf_counter() - t0
    # steady state: completions between the end of the first wave (every slot started cold: new thread, new
    # connection) and the start of the last (slots emptying), so the run's ramp-up and drain are left out
    c = concurrency
    steady = (len(done_at) - 2 * c) / (done_at[-c - 1] - done_at[c - 1]) if len(done_at) > 2 * c else float("nan")
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    calls = [t.tokens.calls for t in traces]
    return {"concurrency": concurrency, "turns": stats.turns, "wall_s": round(wall, 3),
            "turns_per_s": round(stats.turns / wall, 3), "steady_turns_per_s": round(steady, 3), "calls_per_turn": sum(calls) / len(calls),
            "tokens_per_turn": round(sum(t.tokens.prompt_tokens + t.tokens.completion_tokens for t in traces) / len(traces)),
            "mean_turn_s": round(sum(t.latency_ms for t in traces) / len(traces) / 1000, 3),
            "cpu_ms_per_turn": round(1000 * cpu / stats.turns, 2), "ended_by": stats.ended_by, "errors": stats.errors}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python benchmarks/scaling.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--delay", type=float, default=0.3, help="seconds the fake model takes per request")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64])
    p.add_argument("--rounds", type=int, default=6, help="turns per conversation slot: turns = rounds x concurrency "
                   "(the steady-state figure needs at least 3)")
    p.add_argument("--no-stream", action="store_true", help="ask for whole replies instead of streamed chunks")
    p.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = p.parse_args(argv)
    import psutil

    proc, url = start_server(args.delay)
    results = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            run_at(url, 4, 8, Path(tmp), not args.no_stream)  # warm: imports, graph compiled, connections opened
            server = psutil.Process(proc.pid)
            for c in args.concurrency:
                s0 = sum(server.cpu_times()[:2])
                r = run_at(url, c, max(4, args.rounds * c), Path(tmp), not args.no_stream)
                # the model server shares this machine's cores: its CPU is part of what limits scaling here
                r["server_cpu_ms_per_turn"] = round(1000 * (sum(server.cpu_times()[:2]) - s0) / r["turns"], 2)
                r["machine_cpu_share"] = round((r["cpu_ms_per_turn"] + r["server_cpu_ms_per_turn"]) / 1000
                                               * r["turns_per_s"] / (os.cpu_count() or 1), 3)
                r["ideal_turns_per_s"] = round(c / (r["calls_per_turn"] * args.delay), 3)
                r["of_ideal"] = round(r["turns_per_s"] / r["ideal_turns_per_s"], 3)
                r["steady_of_ideal"] = round(r["steady_turns_per_s"] / r["ideal_turns_per_s"], 3)
                results.append(r)
    finally:
        proc.terminate()
    base = next((r for r in results if r["concurrency"] == 1), None)
    print(f"scaling: fake model server, {args.delay * 1000:.0f} ms per request, in its own process; task 2, no search, "
          f"no image; {os.cpu_count()} CPU(s), python {sys.version.split()[0]}")
    print(f"{'conc':>5}{'turns':>7}{'turns/s':>10}{'ideal':>9}{'of ideal':>10}{'steady':>8}{'of ideal':>10}"
          f"{'c x (c=1)':>11}{'of that':>9}"
          f"{'calls/turn':>12}{'turn s':>8}{'cpu ms/turn':>13}{'server ms/turn':>16}{'cores busy':>12}")
    for r in results:
        from_c1 = base["turns_per_s"] * r["concurrency"] if base else float("nan")
        r["ideal_from_c1"] = round(from_c1, 3)
        print(f"{r['concurrency']:>5}{r['turns']:>7}{r['turns_per_s']:>10.2f}{r['ideal_turns_per_s']:>9.2f}"
              f"{r['of_ideal']:>10.3f}{r['steady_turns_per_s']:>8.2f}{r['steady_of_ideal']:>10.3f}{from_c1:>11.2f}{r['turns_per_s'] / from_c1:>9.3f}{r['calls_per_turn']:>12.1f}"
              f"{r['mean_turn_s']:>8.2f}{r['cpu_ms_per_turn']:>13.1f}{r['server_cpu_ms_per_turn']:>16.1f}"
              f"{r['machine_cpu_share']:>12.0%}")
    top = max(results, key=lambda r: r["concurrency"])
    verdict = {k: "met" if top[k] >= TARGET else "NOT met" for k in ("steady_of_ideal", "of_ideal")}
    print(f"at concurrency {top['concurrency']} (target >= {TARGET} of ideal): steady state {top['steady_of_ideal']:.3f} "
          f"({verdict['steady_of_ideal']}); whole run with ramp-up and drain {top['of_ideal']:.3f} "
          f"({verdict['of_ideal']}); errors {top['errors'] or 'none'}, ended_by {top['ended_by']}")
    if args.json:
        args.json.write_text(json.dumps({"delay_s": args.delay, "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    from core.calls import exit_process

    exit_process(main())
