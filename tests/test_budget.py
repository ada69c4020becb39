"""A turn's budget (graph/budget.py): the numbers the nodes used to compute themselves, now in one place."""

from __future__ import annotations

import pytest

from graph import budget as budget_module
from graph.budget import FINISH_STEPS, TOOL_ROUND_STEPS, TurnBudget


@pytest.fixture()
def clock(monkeypatch):
    """A monotonic clock the test sets."""
    now = {"t": 100.0}
    monkeypatch.setattr(budget_module.time, "monotonic", lambda: now["t"])
    return now


@pytest.mark.parametrize(
    ("budget_s", "reserve", "expected"),
    [(10.0, None, 1.5), (5.0, None, 1.0), (2.0, 3.0, 1.8), (10.0, 3.0, 3.0), (10.0, 0.0, 0.0)],
)
def test_the_reserve_is_the_configured_one_capped_or_the_default_share(budget_s, reserve, expected):
    assert TurnBudget(budget_s, 8, reserve, started=0.0).reserve_s() == pytest.approx(expected)


def test_each_call_gets_what_the_nodes_gave_it(clock):
    b = TurnBudget(10.0, 8, None, started=100.0)
    clock["t"] = 104.0  # 6 s left, 1.5 s reserve
    assert b.remaining_s() == 6.0
    assert b.tool_time_s() == 6.0 - 1.5
    assert b.answer_time_s() == 6.0 - 0.3 * 1.5
    assert b.verify_time_s() == 6.0 - 0.05
    clock["t"] = 111.0  # past the deadline: answer and self-check still get the minimum, tools nothing
    assert b.tool_time_s() < 0 and b.answer_time_s() == 0.05 and b.verify_time_s() == 0.05


def test_steps_count_tool_calls_and_the_graph_keeps_room_to_finish():
    b = TurnBudget(10.0, 3, started=0.0)
    assert [b.steps_left(d) for d in range(5)] == [3, 2, 1, 0, 0]
    assert [b.parallel_room(d) for d in range(4)] == [2, 1, 0, -1]
    assert FINISH_STEPS + TOOL_ROUND_STEPS == 5
    assert b.graph_nearly_spent(5) and not b.graph_nearly_spent(6)


def test_a_turn_at_its_step_limit_stops_planning_with_the_same_event():
    from support import make_agent

    from glasses_rag.policies.protocol import ScriptedPolicy
    from graph.agent import TurnInput

    calls = [{"action": "call_tool", "tool": "ocr", "arguments": {}}] * 3
    agent = make_agent(policy=ScriptedPolicy(calls), max_steps=1)
    trace = agent.run_turn(TurnInput(task=2, question="what does the sign say?", session_id="s", interaction_id="i"))
    stops = [s for s in trace.steps if getattr(s, "decision", None) == "stop"]
    assert trace.ended_by == "step_limit" and stops[0].reason == "step limit of 1 tool calls reached"
