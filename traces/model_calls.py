"""Figures about a run's model calls, read from its traces: calls per turn, how many ran one after another (the
critical path), how much of each prompt repeated the previous prompt of its turn (what a server's prefix cache can
reuse), decisions parsed, seconds per decision, tokens. `benchmarks.latency` prints them."""

from __future__ import annotations

import statistics
from collections.abc import Iterable

from pydantic import BaseModel, Field

from core.types import ModelCall
from traces.schema import TurnTrace


def shared_prefix(previous: list[str], current: list[str]) -> float:
    """The share of `current`'s prompt blocks that repeat `previous`'s from the start (block hashes are chained, so
    equal hashes mean equal prefixes); 0 when `current` has no full block."""
    n = 0
    for a, b in zip(previous, current):
        if a != b:
            break
        n += 1
    return n / len(current) if current else 0.0


def turn_prefix_shares(trace: TurnTrace) -> list[float]:
    """For the second and later model calls of a turn (in the order they were sent), the share of each prompt that
    repeats the previous call's prompt."""
    calls = sorted((c for c in trace.model_calls() if c.started_at is not None and c.prompt_blocks),
                   key=lambda c: c.started_at or 0.0)
    return [shared_prefix(a.prompt_blocks, b.prompt_blocks) for a, b in zip(calls, calls[1:])]


class CallFigures(BaseModel):
    turns: int = 0
    calls_per_turn: float = 0.0
    sequential_per_turn: float = Field(0.0, description="Model calls on the critical path per turn.")
    tool_calls_per_turn: float = 0.0
    decisions: int = 0
    decisions_parsed: int = 0
    decision_seconds_mean: float | None = None
    prompt_tokens_per_call: float | None = None
    completion_tokens_per_call: float | None = None
    prefix_share_mean: float | None = Field(None, description="Mean share of a prompt (second and later calls of a "
                                            "turn) that repeats the previous prompt of the turn.")
    prefix_share_min: float | None = None
    block_unit: str | None = None

    @property
    def parse_rate(self) -> float | None:
        return self.decisions_parsed / self.decisions if self.decisions else None


def _decisions(traces: list[TurnTrace]) -> tuple[list[ModelCall], int]:
    decided, unparsed = [], 0
    for t in traces:
        for s in t.steps:
            calls = [c for c in s.model_calls if c.purpose == "decide"]
            decided += calls
            unparsed += bool(calls) and s.error is not None and s.error.kind == "policy_error"
    return decided, unparsed


def call_figures(traces: Iterable[TurnTrace]) -> CallFigures:
    traces = list(traces)
    if not traces:
        return CallFigures()
    n = len(traces)
    calls = [c for t in traces for c in t.model_calls()]
    decided, unparsed = _decisions(traces)
    shares = [s for t in traces for s in turn_prefix_shares(t)]
    with_tokens = [c for c in calls if c.prompt_tokens is not None]
    units = {c.block_unit for c in calls if c.block_unit}
    return CallFigures(
        turns=n, calls_per_turn=len(calls) / n, sequential_per_turn=sum(t.tokens.sequential_calls for t in traces) / n,
        tool_calls_per_turn=sum(len(t.tool_calls()) for t in traces) / n, decisions=len(decided),
        decisions_parsed=len(decided) - unparsed,
        decision_seconds_mean=statistics.fmean(c.latency_ms for c in decided) / 1000 if decided else None,
        prompt_tokens_per_call=statistics.fmean(c.prompt_tokens or 0 for c in with_tokens) if with_tokens else None,
        completion_tokens_per_call=(statistics.fmean(c.completion_tokens or 0 for c in with_tokens)
                                    if with_tokens else None),
        prefix_share_mean=statistics.fmean(shares) if shares else None, prefix_share_min=min(shares) if shares else None,
        block_unit=", ".join(sorted(units)) or None)


def format_figures(f: CallFigures) -> list[str]:
    lines = [f"model calls per turn: {f.calls_per_turn:.2f} ({f.sequential_per_turn:.2f} one after another); "
             f"tool calls per turn: {f.tool_calls_per_turn:.2f}"]
    if f.decisions:
        secs = f" ; {f.decision_seconds_mean:.2f} s per decision" if f.decision_seconds_mean is not None else ""
        lines.append(f"decisions parsed: {f.decisions_parsed} of {f.decisions} ({f.parse_rate:.0%}){secs}")
    if f.prompt_tokens_per_call is not None:
        lines.append(f"tokens per call: {f.prompt_tokens_per_call:.0f} prompt + {f.completion_tokens_per_call:.0f} "
                     "completion")
    if f.prefix_share_mean is not None:
        lines.append(f"prompt prefix reused from the previous call of the turn: mean {f.prefix_share_mean:.0%}, "
                     f"min {f.prefix_share_min:.0%} (measured in {f.block_unit})")
    return lines
