"""The planner's named parts, registered with decorators: answer sources, plan conditions, slot providers and query
kinds. The plan table (plan_table.py) names them and is validated against these registries; a name is looked up
here, never by attribute."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from glasses_rag.policies.rules.candidates import Candidate, Offer, Part

# The turn is glasses_rag.policies.rules.reading.Turn; typed Any here so that the registry imports nothing that uses it.
SourceFn = Callable[[Any, Part], "Candidate | None"]
ConditionFn = Callable[[Any, "Part | None"], bool]
SlotFn = Callable[[Any, "Part | None", "str | None"], list[Offer]]  # (turn, part, query kind) -> values on offer
QueryFn = Callable[[Any, "Part | None"], list[Offer]]


@dataclass(frozen=True)
class Source:
    name: str
    fn: SourceFn
    final: bool  # an answer the plan table may name (False: an intermediate result, e.g. a multi-hop bridge)
    checked: bool  # its answers pass the answer-type check (glasses_rag/policies/rules/answer_check.py)


SOURCES: dict[str, Source] = {}
CONDITIONS: dict[str, ConditionFn] = {}
SLOTS: dict[str, SlotFn] = {}
QUERIES: dict[str, QueryFn] = {}


def _registrar(table: dict[str, Any], kind: str, name: str, entry: Callable[[Any], Any] = lambda fn: fn) -> Callable:
    """A decorator that records `entry(fn)` under `name` (a name registered twice is an error) and returns fn."""
    def wrap(fn: Any) -> Any:
        if name in table:
            raise ValueError(f"two planner {kind}s are named {name!r}")
        table[name] = entry(fn)
        return fn
    return wrap


def source(name: str, *, final: bool = True, checked: bool = True) -> Callable[[SourceFn], SourceFn]:
    """Register an answer source: fn(turn, part) -> Candidate | None."""
    return _registrar(SOURCES, "answer source", name, lambda fn: Source(name, fn, final, checked))


def condition(name: str) -> Callable[[ConditionFn], ConditionFn]:
    """Register a plan condition: fn(turn, part or None) -> bool."""
    return _registrar(CONDITIONS, "condition", name)


def slot(name: str) -> Callable[[SlotFn], SlotFn]:
    """Register a slot provider: fn(turn, part or None, query kind) -> the values on offer for that slot."""
    return _registrar(SLOTS, "slot", name)


def query(name: str) -> Callable[[QueryFn], QueryFn]:
    """Register a query kind (what the `query` slot holds for a plan step): fn(turn, part or None) -> queries."""
    return _registrar(QUERIES, "query kind", name)
