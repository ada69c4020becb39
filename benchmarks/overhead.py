"""Framework CPU per graph step against raw LangGraph graphs of the same shape (a script with printed figures).

    python -m benchmarks.overhead [--steps 16] [--batches 15] [--turns 10]

All graphs have the same nodes and edges (plan -> tools -> plan ... -> answer -> self_check -> final), route the
same way (the plan node returns a Command) and run the same number of supersteps. The raw graphs' nodes do no work
beyond appending one event per step to a list channel (operator.add); one raw graph keeps its state in a dict
(TypedDict), the other in a pydantic model, as ours does. Ours runs the real agent (build_agent, typed state with
the tools' reducers, typed and timestamped trace events, the registry's validation) with a scripted policy and a
no-op tool, both declared non-blocking (quick local work, run in the graph's thread), and self-check off. CPU time
(time.process_time, all threads) is measured, not wall time, in interleaved batches; the minimum batch of each
side is reported, so load from other processes does not decide the result. Target: ours <= 1.3 x each raw graph.
"""

from __future__ import annotations

import argparse
import operator
import time
from typing import Annotated, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import Command
from pydantic import BaseModel, Field

from crag.search import NullSearch
from graph.agent import TurnInput
from graph.build import build_agent
from graph.config import AgentConfig, BudgetConfig
from graph.policy import AnswerDraft, Decision, ScriptedPolicy
from tools.base import ToolContext, ToolOutput
from tools.registry import ToolRegistry, tool

TARGET = 1.3


class RawDict(TypedDict):
    steps: Annotated[list, operator.add]
    n: int


class RawModel(BaseModel):
    steps: Annotated[list, operator.add] = Field(default_factory=list)
    n: int = 0


def raw_graph(steps: int, state: type):
    def get(s, key):
        return s[key] if isinstance(s, dict) else getattr(s, key)

    def plan(s) -> Command:
        return Command(goto="tools" if get(s, "n") < steps else "answer")

    def tools(s) -> dict:
        return {"steps": [get(s, "n")], "n": get(s, "n") + 1}

    def nothing(s) -> dict:
        return {"steps": [None]}

    g = StateGraph(state)
    g.add_node("plan", plan, destinations=("tools", "answer"))
    for name, fn in (("tools", tools), ("answer", nothing), ("self_check", nothing), ("final", nothing)):
        g.add_node(name, fn)
    g.add_edge(START, "plan")
    g.add_edge("tools", "plan")
    g.add_edge("answer", "self_check")
    g.add_edge("self_check", "final")
    g.add_edge("final", END)
    return g.compile()


def our_agent(steps: int):
    reg = ToolRegistry()

    @reg.register
    @tool(blocking=False)
    def noop(ctx: ToolContext, x: int = 0) -> ToolOutput:
        """Does nothing.

        Args:
            x: ignored
        """
        return ToolOutput(summary="ok")

    policy = ScriptedPolicy([Decision(action="call_tool", tool="noop", arguments={"x": i}) for i in range(steps)],
                            AnswerDraft(answer="ok", confidence=0.9), blocking=False)
    config = AgentConfig(budget=BudgetConfig(max_steps=steps + 1, budget_s=600), self_check="off", warm_up=False)
    return build_agent(config, policy=policy, registry=reg, search=NullSearch())


def cpu_per_turn(fn, turns: int) -> float:
    t0 = time.process_time()
    for _ in range(turns):
        fn()
    return (time.process_time() - t0) / turns


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=16, help="tool calls per turn")
    ap.add_argument("--batches", type=int, default=15)
    ap.add_argument("--turns", type=int, default=10, help="turns per batch")
    args = ap.parse_args(argv)
    agent = our_agent(args.steps)
    inp = TurnInput(task=1, session_id="s", interaction_id="i", question="what is this?")
    tr = agent.run_turn(inp)
    assert len(tr.tool_calls()) == args.steps and tr.ended_by == "answer", tr.ended_by
    runs = {"ours": lambda: agent.run_turn(inp)}
    for name, state, start in (("raw-dict", RawDict, {"steps": [], "n": 0}), ("raw-pydantic", RawModel, RawModel())):
        graph = raw_graph(args.steps, state)
        runs[name] = lambda g=graph, s=start: g.invoke(s, config={"recursion_limit": 500})
    cpu: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(args.batches):  # interleaved: every side sees the same machine load
        for name, fn in runs.items():
            cpu[name].append(cpu_per_turn(fn, args.turns))
    supersteps = 2 * args.steps + 4
    per_step = {k: min(v) / supersteps * 1000 for k, v in cpu.items()}
    print(f"graph supersteps per turn: {supersteps} ({args.steps} tool calls); min of {args.batches} batches of "
          f"{args.turns} turns")
    for name in ("raw-dict", "raw-pydantic", "ours"):
        print(f"{name:>13}: {per_step[name]:.3f} ms CPU per step")
    for raw in ("raw-dict", "raw-pydantic"):
        r = per_step["ours"] / per_step[raw]
        print(f"ours / {raw}: {r:.2f} (target <= {TARGET}) -> {'MET' if r <= TARGET else 'NOT MET'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
