"""The LangGraph graph of one turn:

    START -> plan --(tool calls)--> tools --> plan ...
               \\--(answer / step limit / time budget)--> answer -> self_check -> final -> END

As in LangGraph's prebuilt agent: the policy node decides, the tools node runs what it chose (independent calls
together) and hands each call's state update back to LangGraph, whose reducers fold them in.
"""

from __future__ import annotations

from langgraph.graph import END, START, StateGraph

from graph import nodes
from graph.state import AgentState, TurnContext

_COMPILED = None


def build_graph():
    """The compiled graph; it holds no per-turn data (that travels as the run context), so it is built once."""
    global _COMPILED
    if _COMPILED is None:
        g = StateGraph(AgentState, context_schema=TurnContext)
        g.add_node("plan", nodes.plan, destinations=("tools", "answer"))
        g.add_node("tools", nodes.tools)
        g.add_node("answer", nodes.answer)
        g.add_node("self_check", nodes.self_check)
        g.add_node("final", nodes.final)
        g.add_edge(START, "plan")
        g.add_edge("tools", "plan")
        g.add_edge("answer", "self_check")
        g.add_edge("self_check", "final")
        g.add_edge("final", END)
        _COMPILED = g.compile()
    return _COMPILED
