"""Turns per second against a model server of fixed latency, one process vs worker processes:
`python -m benchmarks.scaling`.

The model is the fake OpenAI-compatible server (glasses_rag/testing/fake_model_server.py) in its own process (no
GIL shared with the agent), answering every request after `--delay` seconds (300 ms by default) with scripted
replies to the agent's transcript prompts: decide -> web_search, decide -> answer (the answer rides on the
decision), then the self-check (one chain-of-verification round trip). So a turn is `round trips x delay` of model
time, and the ideal rate at concurrency c is

    ideal = c / (sequential model round trips per turn x delay)

with the round trips read from the traces (`tokens.sequential_calls`). Each concurrency runs twice: in one process
(`glasses_rag.harness.runner.run_task`, c threads) and in `--workers` processes
(`glasses_rag.harness.workers.ProcessWorkerPool`, c / workers threads each, started and warmed before the clock
starts, as a long run amortises their start). The figure is the measured rate over the ideal, for the whole run
and for its steady state (completions after the first wave and
before the last: the first wave starts every slot cold, the last drains). Search is off and there is no image, so
what is measured is the framework: graph, policy, HTTP client, traces written to disk, and (with workers) the
hand-off of conversations and records between processes. Every conversation has one turn of task 2.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
for k, v in {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "ANONYMIZED_TELEMETRY": "False",
}.items():
    os.environ.setdefault(k, v)

TARGET = 0.9


def _text(message: dict) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    return " ".join(p.get("text", "") for p in content or [] if isinstance(p, dict))


def respond(body: dict) -> dict:
    """The fake model's reply to one request (runs in the server process). The request is the turn's transcript:
    earlier calls are assistant messages, and the last user message says what is asked now."""
    from glasses_rag.testing.fake_model_server import FakeOpenAIServer as F

    messages = body.get("messages") or [{}]
    asked = _text(messages[-1])
    prompt_tokens = max(1, sum(len(_text(m)) for m in messages) // 4)  # a rough count: characters / 4

    def reply(text: str) -> dict:
        return F.text_reply(text, prompt_tokens=prompt_tokens, completion_tokens=max(1, len(text) // 4))

    if asked.rstrip().endswith("Decide the next step."):
        if not any(m.get("role") == "assistant" for m in messages):  # nothing looked up yet
            return reply(
                '{"action": "call_tool", "tool": "web_search", "arguments": {"query": "q"}, "rationale": "look it up"}'
            )
        return reply(
            '{"action": "answer", "answer": "a scripted answer", "confidence": 0.9, "entity": "x", '
            '"rationale": "enough"}'
        )
    if "chain of verification" in asked:
        return reply(
            '{"verifications": [{"question": "q", "answer": "a", "supported": true}], "supported": true, '
            '"confidence": 0.9, "reason": "r"}'
        )
    return reply('{"answer": "a scripted answer", "confidence": 0.9, "entity": "x", "rationale": "r"}')


def turn_summary(trace: Any) -> dict:
    """What the benchmark keeps of a turn (runs where the turn ran: in a worker, it is what comes back)."""
    return {
        "sequential_calls": trace.tokens.sequential_calls,
        "calls": trace.tokens.calls,
        "latency_ms": trace.latency_ms,
        "ended_by": trace.ended_by,
        "model_ms": sum(c.latency_ms for step in trace.steps for c in step.model_calls),
    }


def start_server(delay: float) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "glasses_rag.testing.fake_model_server",
            "--delay",
            str(delay),
            "--responder",
            f"{Path(__file__).resolve()}:respond",
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    url = proc.stdout.readline().strip() if proc.stdout else ""
    if not url.startswith("http"):
        proc.kill()
        raise RuntimeError("the fake server did not start")
    return proc, url


def agent_config(url: str, concurrency: int, stream: bool) -> Any:
    from glasses_rag.models.openai_client import pool_size_for
    from glasses_rag.models.vlm import ModelConfig
    from glasses_rag.retrieval.search import SearchConfig
    from graph.config import AgentConfig, BudgetConfig

    return AgentConfig(
        policy=ModelConfig(
            backend="openai",
            base_url=url,
            model="fake-vlm",
            max_retries=0,
            pool_size=pool_size_for(concurrency),
            stream=stream,
        ),
        search=SearchConfig(backend="none"),
        budget=BudgetConfig(budget_s=60),
        warm_up=False,
    )


def conversations(prefix: str, n: int) -> Iterator[Any]:
    from glasses_rag.retrieval.schema import Conversation, Turn

    for i in range(n):
        yield Conversation(
            session_id=f"{prefix}-{i}",
            turns=[Turn(interaction_id=f"{prefix}-{i}", query="Who makes this rocket?")],
            answers=["SpaceX"],
        )


class Clock:
    """Turn summaries and when each arrived; CPU of this process and of the given others over the timed part."""

    def __init__(self, pids: list[int]):
        import psutil

        self.procs = [psutil.Process(p) for p in pids]
        self.turns: list[dict] = []
        self.done_at: list[float] = []

    def turn(self, summary: dict) -> None:
        self.turns.append(summary)
        self.done_at.append(time.perf_counter())

    def cpu_s(self) -> float:
        me = resource.getrusage(resource.RUSAGE_SELF)
        return me.ru_utime + me.ru_stime + sum(sum(p.cpu_times()[:2]) for p in self.procs)

    def timed(self, run: Callable[[], Any]) -> dict:
        cpu0, t0 = self.cpu_s(), time.perf_counter()
        run()
        wall, cpu = time.perf_counter() - t0, self.cpu_s() - cpu0
        return {"wall_s": wall, "cpu_s": cpu, "t0": t0}


def run_one_process(url: str, c: int, turns: int, out: Path, stream: bool) -> dict:
    from glasses_rag.harness.runner import run_task
    from graph.build import build_agent
    from traces.store import TraceStore

    agent = build_agent(agent_config(url, c, stream), run_id=f"one{c}")
    store = TraceStore(out, f"one{c}")
    run_task(agent, conversations(f"warm1-{c}", c), 2, store, concurrency=c)  # one wave: connections opened
    clock = Clock([])
    t = clock.timed(
        lambda: run_task(
            agent,
            conversations(f"one{c}", turns),
            2,
            store,
            concurrency=c,
            on_turn=lambda trace: clock.turn(turn_summary(trace)),
        )
    )
    return measure(clock, t, c, "1 process")


def run_workers(url: str, c: int, workers: int, turns: int, out: Path, stream: bool) -> dict:
    from glasses_rag.harness.workers import ProcessWorkerPool, WorkerSpec

    per = max(1, c // workers)
    spec = WorkerSpec(
        config=agent_config(url, per, stream),
        task=2,
        out=out,
        run_id=f"workers{c}",
        concurrency=per,
        summarize=turn_summary,
    )
    with ProcessWorkerPool(spec, workers) as pool:
        pool.run(conversations(f"warm{workers}-{c}", c))  # one wave: imports done, threads and connections made
        clock = Clock(pool.pids)
        t = clock.timed(lambda: pool.run(conversations(f"workers{c}", turns), on_record=clock.turn))
    return measure(clock, t, c, f"{workers} workers")


def measure(clock: Clock, t: dict, c: int, mode: str) -> dict:
    done = clock.done_at
    n = len(done)
    # steady state: completions between the end of the first wave and the start of the last
    steady = (n - 2 * c) / (done[-c - 1] - done[c - 1]) if n > 2 * c and done[-c - 1] > done[c - 1] else float("nan")
    ended: dict[str, int] = {}
    for s in clock.turns:
        ended[s["ended_by"]] = ended.get(s["ended_by"], 0) + 1
    return {
        "concurrency": c,
        "mode": mode,
        "turns": n,
        "wall_s": round(t["wall_s"], 3),
        "turns_per_s": round(n / t["wall_s"], 3),
        "steady_turns_per_s": round(steady, 3),
        "sequential_calls": statistics.mean(s["sequential_calls"] for s in clock.turns),
        "calls_per_turn": statistics.mean(s["calls"] for s in clock.turns),
        "mean_turn_s": round(statistics.mean(s["latency_ms"] for s in clock.turns) / 1000, 3),
        "call_ms": round(sum(s["model_ms"] for s in clock.turns) / sum(s["calls"] for s in clock.turns), 1),
        "other_ms_per_turn": round(statistics.mean(s["latency_ms"] - s["model_ms"] for s in clock.turns), 1),
        "cpu_ms_per_turn": round(1000 * t["cpu_s"] / n, 2),
        "ended_by": ended,
    }


def figures(r: dict, delay: float, server_cpu_s: float) -> dict:
    """The run's rate against the ideal, and how busy the machine's cores were."""
    r["ideal_turns_per_s"] = round(r["concurrency"] / (r["sequential_calls"] * delay), 3)
    r["of_ideal"] = round(r["turns_per_s"] / r["ideal_turns_per_s"], 3)
    r["steady_of_ideal"] = round(r["steady_turns_per_s"] / r["ideal_turns_per_s"], 3)
    r["server_cpu_ms_per_turn"] = round(1000 * server_cpu_s / r["turns"], 2)
    r["cores_busy"] = round(
        (r["cpu_ms_per_turn"] + r["server_cpu_ms_per_turn"]) / 1000 * r["turns_per_s"] / (os.cpu_count() or 1), 3
    )
    return r


def measure_all(args: argparse.Namespace) -> list[dict]:
    import psutil

    started: list[tuple[subprocess.Popen, str]] = []
    try:
        for _ in range(args.servers):
            started.append(start_server(args.delay))
    except Exception:
        for proc, _ in started:
            proc.kill()
        raise
    url = ",".join(u for _, u in started)  # several servers are replicas of one model (a conversation keeps to one)
    servers = [psutil.Process(p.pid) for p, _ in started]

    def server_cpu() -> float:
        return sum(sum(s.cpu_times()[:2]) for s in servers)

    results = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for c in args.concurrency:
                runs = [
                    partial(run_one_process, url, c, args.rounds * c, Path(tmp), not args.no_stream),
                    partial(run_workers, url, c, args.workers, args.rounds * c, Path(tmp), not args.no_stream),
                ]
                for run in runs if args.workers > 1 else runs[:1]:
                    s0 = server_cpu()
                    load = os.getloadavg()[0]
                    r = run()
                    r["load_before"] = round(load, 2)
                    results.append(figures(r, args.delay, server_cpu() - s0))
    finally:
        for proc, _ in started:
            proc.terminate()
            proc.wait(10)
    return results


def print_results(args: argparse.Namespace, results: list[dict]) -> None:
    print(
        f"scaling: fake model server, {args.delay * 1000:.0f} ms per request, in its own process; task 2, no search, "
        f"no image; {os.cpu_count()} CPU(s), python {sys.version.split()[0]}; load average now "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    print(
        f"{'conc':>5} {'mode':<10}{'turns':>6}{'turns/s':>9}{'ideal':>8}{'of ideal':>9}{'steady':>8}{'of ideal':>9}"
        f"{'seq calls':>10}{'turn s':>8}{'call ms':>8}{'rest ms':>8}{'cpu ms/turn':>12}{'server ms/turn':>15}"
        f"{'cores busy':>11}{'load':>6}"
    )
    for r in results:
        print(
            f"{r['concurrency']:>5} {r['mode']:<10}{r['turns']:>6}{r['turns_per_s']:>9.2f}"
            f"{r['ideal_turns_per_s']:>8.2f}"
            f"{r['of_ideal']:>9.3f}{r['steady_turns_per_s']:>8.2f}{r['steady_of_ideal']:>9.3f}"
            f"{r['sequential_calls']:>10.2f}{r['mean_turn_s']:>8.2f}{r['call_ms']:>8.0f}{r['other_ms_per_turn']:>8.0f}"
            f"{r['cpu_ms_per_turn']:>12.1f}"
            f"{r['server_cpu_ms_per_turn']:>15.1f}{r['cores_busy']:>11.0%}{r['load_before']:>6.1f}"
        )
    for r in results:
        if r["mode"] != "1 process":
            verdict = "met" if r["of_ideal"] >= TARGET else "NOT met"
            print(
                f"at concurrency {r['concurrency']} with {r['mode']} (target >= {TARGET} of ideal): whole run "
                f"{r['of_ideal']:.3f} ({verdict}), steady state {r['steady_of_ideal']:.3f}; ended_by {r['ended_by']}"
            )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.scaling", description=__doc__.split("\n\n")[0])
    p.add_argument("--delay", type=float, default=0.3, help="seconds the fake model takes per request")
    p.add_argument("--concurrency", type=int, nargs="+", default=[64, 128])
    p.add_argument(
        "--workers", type=int, default=2, help="worker processes for the second figure (1: one process only)"
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=6,
        help="turns per conversation slot: turns = rounds x concurrency (the steady-state figure needs at least 3)",
    )
    p.add_argument("--servers", type=int, default=1, help="fake model server processes, used as replicas")
    p.add_argument("--no-stream", action="store_true", help="ask for whole replies instead of streamed chunks")
    p.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = p.parse_args(argv)
    results = measure_all(args)
    print_results(args, results)
    if args.json:
        args.json.write_text(
            json.dumps({"delay_s": args.delay, "load_average": os.getloadavg(), "results": results}, indent=2)
        )
    return 0


if __name__ == "__main__":
    from glasses_rag.core.calls import exit_process

    exit_process(main())
