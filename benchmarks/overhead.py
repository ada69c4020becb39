"""Framework CPU per graph step against raw LangGraph graphs of the same shape (a script with printed figures).

    python -m benchmarks.overhead [--steps 16] [--batches 15] [--turns 10]

What is compared, per turn of `--steps` tool calls:

- **Shape.** Every graph has the same five nodes and edges (START -> plan -> tools -> plan ... -> answer ->
  self_check -> final -> END), routes the same way (`plan` returns a `Command(goto=...)`), is compiled without a
  checkpointer and takes the same 2 x steps + 4 supersteps (checked before timing).
- **Raw graphs** (what a plain LangGraph user writes): `plan` takes the next call from a script, as ours does,
  and hands it to `tools` through the state (ours: `pending`; LangGraph's prebuilt agent: the tool calls in
  `messages`); otherwise the nodes do no work beyond one trace event per node visit where ours writes one
  (tools, answer, self_check, final), a plain dict `{node, index, timestamp}` (plus the call, for tools)
  appended to a list channel with `operator.add`, and a step counter. `raw-dict` keeps its state in a
  TypedDict, `raw-pydantic` in a pydantic model, as ours does.
- **Ours** is the real agent from `build_agent`, one `Agent.run_turn` per turn: the typed `AgentState` with the
  tools' reducers applied by LangGraph, the per-turn `TurnContext`, registry validation of every proposed call
  (allow-list, argument model), the turn's deadline and cancel scope around every policy and tool call, typed
  and timestamped trace events, the policy's view rebuilt every step, and the `TurnTrace` built at the end. Its
  policy replays a script and its tool does nothing; both are declared non-blocking (quick local work, run in
  the graph's thread, as the rule planner is), and self-check is off, so what is measured is framework work, not
  policy or tool work.
- **How the graphs are run.** The raw graphs are run the way a plain user runs them, `graph.invoke(state)`
  (LangGraph's defaults: it streams each step's values and its updates, the latter to look for interrupts); the
  target is judged on these. A turn of ours streams only the values its trace needs (`graph.stream(...,
  stream_mode="values")`, last item kept), which LangGraph does with less work; so each raw graph is also run
  that same way (`/values`), and ours is printed against it too, as the stricter figure.
- **Measure.** CPU time of the whole process (`time.process_time`: all threads) per superstep, in interleaved
  batches of `--turns` turns, so every side sees the same machine load. The minimum batch of each side is the
  figure (load from other processes only adds time); the median is printed beside it.
  Target: ours <= 1.3 x each raw graph run with `invoke()`.
"""

from __future__ import annotations

import argparse
import operator
import statistics
import time
from collections import deque
from collections.abc import Callable
from functools import partial
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import Command
from pydantic import BaseModel, Field

from glasses_rag.policies.protocol import AnswerDraft, Decision, ScriptedPolicy
from glasses_rag.retrieval.search import NullSearch
from graph.agent import Agent, TurnInput
from graph.build import build_agent
from graph.config import AgentConfig, BudgetConfig
from tools.base import ToolContext, ToolOutput
from tools.registry import ToolRegistry, tool

TARGET = 1.3
RAW = ("raw-dict", "raw-pydantic")
SAME_CALL = "/values"  # a raw graph consumed the way a turn consumes ours: its values stream, last item kept


class RawDict(TypedDict):
    steps: Annotated[list, operator.add]
    n: int
    call: dict | None


class RawModel(BaseModel):
    steps: Annotated[list, operator.add] = Field(default_factory=list)
    n: int = 0
    call: dict | None = None


def supersteps(steps: int) -> int:
    """plan + tools per call, then plan, answer, self_check, final."""
    return 2 * steps + 4


def raw_graph(steps: int, state: type):
    def get(s, key):
        return s[key] if isinstance(s, dict) else getattr(s, key)

    def event(s, node: str) -> dict:
        return {"node": node, "index": len(get(s, "steps")), "timestamp": time.time()}

    script = [{"tool": "noop", "arguments": {"x": i}} for i in range(steps)]  # (ours replays a script too)

    def plan(s) -> Command:  # the chosen call goes to `tools` through the state, as ours does (`pending`)
        n = get(s, "n")
        return Command(goto="tools", update={"call": script[n]}) if n < steps else Command(goto="answer")

    def tools(s) -> dict:
        return {"steps": [{**event(s, "tools"), **get(s, "call")}], "n": get(s, "n") + 1}

    def recorder(node: str):
        return lambda s: {"steps": [event(s, node)]}

    g = StateGraph(state)
    g.add_node("plan", plan, destinations=("tools", "answer"))
    g.add_node("tools", tools)
    for name in ("answer", "self_check", "final"):
        g.add_node(name, recorder(name))
    g.add_edge(START, "plan")
    g.add_edge("tools", "plan")
    g.add_edge("answer", "self_check")
    g.add_edge("self_check", "final")
    g.add_edge("final", END)
    return g.compile()


def our_agent(steps: int) -> Agent:
    reg = ToolRegistry()

    @reg.register
    @tool(blocking=False)
    def noop(ctx: ToolContext, x: int = 0) -> ToolOutput:
        """Does nothing.

        Args:
            x: ignored
        """
        return ToolOutput(summary="ok")

    # keep_views=False: the agent's real policies keep no history of what they were shown
    policy = ScriptedPolicy(
        [Decision(action="call_tool", tool="noop", arguments={"x": i}) for i in range(steps)],
        AnswerDraft(answer="ok", confidence=0.9),
        blocking=False,
        keep_views=False,
    )
    config = AgentConfig(budget=BudgetConfig(max_steps=steps + 1, budget_s=600), self_check="off", warm_up=False)
    return build_agent(config, policy=policy, registry=reg, search=NullSearch())


def turns_to_time(steps: int) -> dict[str, Callable[[], Any]]:
    """One turn of each side, checked to take the same supersteps; each raw graph run both ways (see the module
    docstring)."""
    agent = our_agent(steps)
    inp = TurnInput(task=1, session_id="s", interaction_id="i", question="what is this?")
    trace = agent.run_turn(inp)
    nodes = [s.node for s in trace.steps]
    assert len(trace.tool_calls()) == steps and trace.ended_by == "answer" and nodes[-2:] == ["answer", "final"], nodes
    runs: dict[str, Callable[[], Any]] = {"ours": lambda: agent.run_turn(inp)}
    config: dict[str, Any] = {"recursion_limit": 500}
    for name, state, start in zip(RAW, (RawDict, RawModel), ({"steps": [], "n": 0, "call": None}, RawModel())):
        graph = raw_graph(steps, state)
        taken = sum(1 for _ in graph.stream(start, config=config, stream_mode="updates"))
        assert taken == supersteps(steps), (name, taken)
        runs[name] = partial(graph.invoke, start, config=config)
        runs[name + SAME_CALL] = partial(last_values, graph, start, config)
    return runs


def last_values(graph: Any, start: Any, config: dict[str, Any]) -> Any:
    """A graph run the way `Agent.run_turn` runs ours: its values stream, the last item kept."""
    return deque(graph.stream(start, config=config, stream_mode="values"), maxlen=1)[-1]


def cpu_per_turn(fn: Callable[[], Any], turns: int) -> float:
    t0 = time.process_time()
    for _ in range(turns):
        fn()
    return (time.process_time() - t0) / turns


def measure(runs: dict[str, Callable[[], Any]], batches: int, turns: int) -> dict[str, list[float]]:
    for fn in runs.values():  # warm up: first-call caches, lazy imports
        cpu_per_turn(fn, 2)
    cpu: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(batches):  # interleaved: every side sees the same machine load
        for name, fn in runs.items():
            cpu[name].append(cpu_per_turn(fn, turns))
    return cpu


def report(cpu: dict[str, list[float]], n: int) -> None:
    best = {k: min(v) / n * 1000 for k, v in cpu.items()}
    median = {k: statistics.median(v) / n * 1000 for k, v in cpu.items()}
    for name in (*RAW, "ours"):
        extra = f"   {SAME_CALL}: {best[name + SAME_CALL]:.3f} ({median[name + SAME_CALL]:.3f})" if name in RAW else ""
        print(f"{name:>13}: {best[name]:.3f} ({median[name]:.3f}){extra}")
    for raw in RAW:
        r = best["ours"] / best[raw]
        same = best["ours"] / best[raw + SAME_CALL]
        print(
            f"ours / {raw}: {r:.2f} ({median['ours'] / median[raw]:.2f}) (target <= {TARGET}) -> "
            f"{'MET' if r <= TARGET else 'NOT MET'};  ours / {raw}{SAME_CALL}: {same:.2f} "
            f"({median['ours'] / median[raw + SAME_CALL]:.2f})"
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=16, help="tool calls per turn")
    ap.add_argument("--batches", type=int, default=15)
    ap.add_argument("--turns", type=int, default=10, help="turns per batch")
    args = ap.parse_args(argv)
    cpu = measure(turns_to_time(args.steps), args.batches, args.turns)
    n = supersteps(args.steps)
    print(
        f"graph supersteps per turn: {n} ({args.steps} tool calls); CPU ms per superstep, min (median) of "
        f"{args.batches} interleaved batches of {args.turns} turns; raw graphs run with invoke() and, "
        f"'{SAME_CALL}', streamed as ours is"
    )
    report(cpu, n)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
