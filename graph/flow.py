"""The LangGraph graph of one turn:

    START -> plan --(tool call)--> act -> observe --> plan ...
               \\--(answer / step limit / time budget)--> answer -> self_check -> final -> END
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
        g.add_node("plan", nodes.plan, destinations=("act", "answer"))
        g.add_node("act", nodes.act)
        g.add_node("observe", nodes.observe)
        g.add_node("answer", nodes.answer)
        g.add_node("self_check", nodes.self_check)
        g.add_node("final", nodes.final)
        g.add_edge(START, "plan")
        g.add_edge("act", "observe")
        g.add_edge("observe", "plan")
        g.add_edge("answer", "self_check")
        g.add_edge("self_check", "final")
        g.add_edge("final", END)
        _COMPILED = g.compile()
    return _COMPILED
