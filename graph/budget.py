"""A turn's budget: the one place its time and step arithmetic lives.

The nodes ask it how long a call may run and whether another step fits; the calls themselves run under those
timeouts (glasses_rag.core.calls, which only enforces them). Three limits bound a turn:

- time (`budget_s`): planning and tool rounds stop `reserve_s()` before the deadline, so that answering (given all
  but 30% of the reserve) and the self-check (all but 50 ms) still fit;
- tool calls (`max_steps`, parallel calls included);
- LangGraph supersteps (its recursion limit, read through `RemainingSteps`): the plan node stops calling tools while
  a tool round plus the finishing steps still fit.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

# Supersteps a turn needs after a `plan` that routes to answering: answer, self_check, final.
FINISH_STEPS = 3
# ... and one more tool round (tools, plan) before that.
TOOL_ROUND_STEPS = 2
MIN_CALL_S = 0.05  # the least an answer or self-check call is given, even past the deadline (it may be quick)
ANSWER_SHARE_OF_RESERVE = 0.3  # the part of the reserve the answer call leaves for the self-check
VERIFY_MARGIN_S = 0.05  # what the self-check leaves for the final node


@dataclass(frozen=True)
class TurnBudget:
    """The time and tool calls one turn may spend, from its start.

    Args:
        budget_s: seconds for the whole turn.
        max_steps: tool calls per turn (parallel calls count).
        answer_reserve_s: seconds kept for answer + self-check; None: min(1.5 s, 20% of the budget).
        started: the turn's start on the monotonic clock (default: now).

    Example::

        b = TurnBudget(budget_s=10.0, max_steps=8)
        b.reserve_s()  # 1.5
        b.tool_time_s()  # about 8.5: what a plan or tool round may use
    """

    budget_s: float
    max_steps: int
    answer_reserve_s: float | None = None
    started: float = field(default_factory=time.monotonic)

    @property
    def deadline(self) -> float:
        return self.started + self.budget_s

    def remaining_s(self) -> float:
        return self.deadline - time.monotonic()

    def reserve_s(self) -> float:
        """Time kept back for answer + self-check so the turn always ends inside its budget."""
        if self.answer_reserve_s is not None:
            return min(self.answer_reserve_s, 0.9 * self.budget_s)
        return min(1.5, 0.2 * self.budget_s)

    def tool_time_s(self) -> float:
        """What the policy's decision or a tool round may use: the time left less the reserve (<= 0: none)."""
        return self.remaining_s() - self.reserve_s()

    def answer_time_s(self) -> float:
        """What the answer call may use: the time left less the self-check's share of the reserve."""
        return max(MIN_CALL_S, self.remaining_s() - ANSWER_SHARE_OF_RESERVE * self.reserve_s())

    def verify_time_s(self) -> float:
        """What the self-check may use: the time left less a margin for the final node."""
        return max(MIN_CALL_S, self.remaining_s() - VERIFY_MARGIN_S)

    def steps_left(self, done: int) -> int:
        """Tool calls left after `done` calls."""
        return max(0, self.max_steps - done)

    def parallel_room(self, done: int) -> int:
        """Calls that may run beside the next one (negative when none)."""
        return self.max_steps - done - 1

    @staticmethod
    def graph_nearly_spent(remaining_steps: int) -> bool:
        """Whether LangGraph's recursion limit leaves no room for another tool round before finishing."""
        return remaining_steps <= FINISH_STEPS + TOOL_ROUND_STEPS
