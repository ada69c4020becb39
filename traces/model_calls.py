"""What a server's caches and a turn's latency make of its model calls, read from turn traces: how much of each
prompt repeats the previous prompt of its turn (what vLLM's automatic prefix cache can reuse), and how many calls
ran one after another, by how many tools the turn used. `benchmarks.latency` prints them; the decisions themselves
are counted by traces/model_loop.py."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable

from pydantic import BaseModel, Field

from traces.schema import TurnTrace

PREFIX_TARGET = 0.8  # issue 19: second and later calls of a turn


def shared_blocks(previous: list[str], current: list[str]) -> int:
    """How many leading prompt blocks `current` shares with `previous` (block hashes are chained, so equal hashes
    mean equal prefixes)."""
    n = 0
    for a, b in zip(previous, current):
        if a != b:
            break
        n += 1
    return n


def shared_prefix(previous: list[str], current: list[str]) -> float:
    """The share of `current`'s prompt blocks that repeat `previous`'s from the start; 0 when `current` has no full
    block."""
    return shared_blocks(previous, current) / len(current) if current else 0.0


class PrefixShare(BaseModel):
    purpose: str
    share: float = Field(description="Of this call's prompt, the share that repeats the previous call's prompt.")
    kept: float = Field(description="Of the previous call's prompt, the share this call's prompt begins with.")


def turn_prefix_shares(trace: TurnTrace) -> list[PrefixShare]:
    """For the second and later model calls of a turn (in the order they were sent): how much of each prompt the
    previous call's prompt covers, and how much of the previous prompt was kept as its prefix."""
    calls = sorted(
        (c for c in trace.model_calls() if c.started_at is not None and c.prompt_blocks),
        key=lambda c: c.started_at or 0.0,
    )
    out = []
    for a, b in zip(calls, calls[1:]):
        if a.block_unit != b.block_unit:  # token blocks and character blocks cannot be compared
            continue
        out.append(
            PrefixShare(
                purpose=b.purpose,
                share=shared_prefix(a.prompt_blocks, b.prompt_blocks),
                kept=shared_blocks(a.prompt_blocks, b.prompt_blocks) / len(a.prompt_blocks),
            )
        )
    return out


class PrefixReuse(BaseModel):
    calls: int = Field(0, description="Second and later model calls of a turn, with their prompt's block hashes.")
    mean: float | None = Field(None, description="Mean share of a prompt that repeats the previous prompt.")
    minimum: float | None = None
    at_target: float | None = Field(None, description=f"Share of those calls reusing >= {PREFIX_TARGET:.0%}.")
    kept_mean: float | None = Field(
        None,
        description="Mean share of the previous prompt kept as the next one's "
        "prefix (below 100% only by the previous call's final instruction).",
    )
    by_purpose: dict[str, float] = Field(default_factory=dict, description="Mean share per call purpose.")
    unit: str | None = Field(None, description="tokens (the backend's tokenizer) or chars (no local tokenizer).")


def prefix_reuse(traces: Iterable[TurnTrace]) -> PrefixReuse:
    traces = list(traces)
    shares = [s for t in traces for s in turn_prefix_shares(t)]
    if not shares:
        return PrefixReuse()
    values = [s.share for s in shares]
    grouped: dict[str, list[float]] = defaultdict(list)
    for s in shares:
        grouped[s.purpose].append(s.share)
    units = {c.block_unit for t in traces for c in t.model_calls() if c.block_unit}
    return PrefixReuse(
        calls=len(values),
        mean=statistics.fmean(values),
        minimum=min(values),
        at_target=sum(v >= PREFIX_TARGET for v in values) / len(values),
        kept_mean=statistics.fmean(s.kept for s in shares),
        by_purpose={p: statistics.fmean(v) for p, v in sorted(grouped.items())},
        unit=", ".join(sorted(units)) or None,
    )


def critical_path_by_tools(traces: Iterable[TurnTrace]) -> dict[int, float]:
    """Mean model calls on a turn's critical path, by the number of tool calls the turn made."""
    grouped: dict[int, list[int]] = defaultdict(list)
    for t in traces:
        if t.tokens.calls:
            grouped[len(t.tool_calls())].append(t.tokens.sequential_calls)
    return {n: statistics.fmean(v) for n, v in sorted(grouped.items())}


def format_prefix_reuse(p: PrefixReuse) -> str:
    if p.mean is None or p.minimum is None or p.at_target is None:
        return "prompt prefix reuse: n/a (no second call in a turn)"
    purposes = ", ".join(f"{k} {v:.0%}" for k, v in p.by_purpose.items())
    return (
        f"prompt prefix reused from the previous call of the turn ({p.unit}): mean {p.mean:.0%} of each prompt "
        f"(target >= {PREFIX_TARGET:.0%}), min {p.minimum:.0%}, {p.at_target:.0%} of {p.calls} call(s) at >= "
        f"{PREFIX_TARGET:.0%}; by purpose: {purposes}; of the previous prompt, {p.kept_mean:.0%} kept as the "
        "next one's prefix (the rest of each prompt is the new tool result and instruction)"
    )


__all__ = [
    "PrefixReuse",
    "PrefixShare",
    "shared_blocks",
    "PREFIX_TARGET",
    "critical_path_by_tools",
    "format_prefix_reuse",
    "prefix_reuse",
    "shared_prefix",
    "turn_prefix_shares",
]
