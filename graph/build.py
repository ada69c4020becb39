"""The LangGraph StateGraph: plan -> act -> observe -> plan ... -> answer -> self_check -> final."""

from __future__ import annotations

from langgraph.graph import END, START, StateGraph

from graph import nodes
from graph.state import AgentState


def build_graph(checkpointer=None):
    g = StateGraph(AgentState)
    g.add_node("plan", nodes.plan)
    g.add_node("act", nodes.act)
    g.add_node("observe", nodes.observe)
    g.add_node("answer", nodes.answer)
    g.add_node("self_check", nodes.self_check)
    g.add_node("final", nodes.final)
    g.add_edge(START, "plan")
    g.add_conditional_edges("plan", nodes.route_after_plan, {"act": "act", "answer": "answer"})
    g.add_edge("act", "observe")
    g.add_edge("observe", "plan")
    g.add_edge("answer", "self_check")
    g.add_edge("self_check", "final")
    g.add_edge("final", END)
    return g.compile(checkpointer=checkpointer)
