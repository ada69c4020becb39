"""Whether a model really drives the loop, read from turn traces: how many of its decisions could be read, how
many tool calls ran, and whether the tools' results were in front of the model when it answered.

A decision is a `decide` model call. It *finished* when it was neither cancelled (the turn's budget ran out) nor
failed in the backend; a finished decision *parsed* when its event carries no `policy_error` (the reply was read
as a call or an answer). An answer is *informed* when the model call that gave it came after at least one tool
call that ran without error in the same turn: the model prompts carry every finished call's result (one growing
transcript per turn), so that answer was written with the results in its prompt.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from traces.schema import AnswerEvent, PlanEvent, ToolCallEvent, TurnTrace


class LoopStats(BaseModel):
    """Counts over turns; `add` one trace at a time (run summaries, benchmarks)."""

    turns: int = 0
    decisions: int = Field(0, description="Decide calls that finished (not cancelled, no backend error).")
    decisions_parsed: int = Field(0, description="Finished decisions read as a tool call or an answer.")
    decisions_cancelled: int = Field(0, description="Decide calls stopped because the turn's budget ran out.")
    decisions_failed: int = Field(0, description="Decide calls the backend failed (errors, not replies).")
    tool_calls: int = Field(0, description="Tool calls made on the model's decisions.")
    tool_calls_ok: int = Field(0, description="Of those, the calls that ran without an error.")
    turns_with_tools: int = Field(0, description="Turns with at least one tool call that ran without an error.")
    informed_answers: int = Field(0, description="Answers the model gave after a successful tool call of the turn.")

    def add(self, trace: TurnTrace) -> None:
        self.turns += 1
        ok_before = 0
        plan_calls: list = []
        for event in trace.steps:
            failed_parse = event.error is not None and event.error.kind == "policy_error"
            for call in event.model_calls:
                if call.purpose == "decide":
                    self._count_decision(call.cancelled, call.error is not None, failed_parse)
            if isinstance(event, PlanEvent):
                plan_calls = event.model_calls
            elif isinstance(event, ToolCallEvent):
                self.tool_calls += 1
                ok_before += event.error is None
            elif isinstance(event, AnswerEvent) and event.error is None and ok_before:
                source = plan_calls if event.from_decision else event.model_calls
                self.informed_answers += any(not c.cancelled and c.error is None for c in source)
        self.tool_calls_ok += ok_before
        self.turns_with_tools += ok_before > 0

    def _count_decision(self, cancelled: bool, failed: bool, unparsed: bool) -> None:
        if cancelled:
            self.decisions_cancelled += 1
        elif failed:
            self.decisions_failed += 1
        else:
            self.decisions += 1
            self.decisions_parsed += not unparsed

    @property
    def parse_rate(self) -> float | None:
        return self.decisions_parsed / self.decisions if self.decisions else None

    def summary(self) -> str:
        """One line: the decisions read, the tools run, the answers given with tool results."""
        rate = f"{100 * self.parse_rate:.0f}%" if self.parse_rate is not None else "n/a"
        per_turn = self.tool_calls_ok / self.turns if self.turns else 0.0
        return (
            f"{self.decisions_parsed}/{self.decisions} decision(s) parsed ({rate}; {self.decisions_cancelled} "
            f"cancelled by the budget, {self.decisions_failed} failed); {self.tool_calls_ok} tool call(s) run "
            f"({per_turn:.1f} per turn, in {self.turns_with_tools} of {self.turns} turn(s)); "
            f"{self.informed_answers} answer(s) given after a tool's result"
        )


__all__ = ["LoopStats"]
