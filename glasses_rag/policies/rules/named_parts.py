"""The kinds of the planner's named parts: answer sources, plan conditions, slot providers and query kinds.

They are kept in `Catalog`, four `glasses_rag.core.registry.Registry` tables that one module fills by explicit calls
(glasses_rag/policies/rules/catalog.py); the planner holds its catalog and reads a part by name, never by attribute.
The plan table (plan_table.py) names them and is validated against the catalog."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from glasses_rag.core.registry import Registry
from glasses_rag.policies.rules.candidates import Candidate, Offer, Part

# The turn is glasses_rag.policies.rules.reading.TurnReading; typed Any here so that this module imports nothing
# that uses it.
SourceFn = Callable[[Any, Part], "Candidate | None"]
ConditionFn = Callable[[Any, "Part | None"], bool]
SlotFn = Callable[[Any, "Part | None", "str | None"], list[Offer]]  # (turn, part, query kind) -> values on offer
QueryFn = Callable[[Any, "Part | None"], list[Offer]]


@dataclass(frozen=True)
class Source:
    name: str
    fn: SourceFn
    final: bool = True  # an answer the plan table may name (False: an intermediate result, e.g. a multi-hop bridge)
    checked: bool = True  # its answers pass the answer-type check (glasses_rag/policies/rules/answer_check.py)


@dataclass(frozen=True)
class Catalog:
    """The planner's named parts, one registry per kind.

    Args:
        sources: answer sources, fn(turn, part) -> Candidate | None.
        conditions: plan conditions, fn(turn, part or None) -> bool.
        slots: slot providers, fn(turn, part or None, query kind) -> the values on offer for that slot.
        queries: query kinds (what the `query` slot holds for a plan step), fn(turn, part or None) -> queries.

    Example::

        cat = Catalog()
        cat.conditions.add("has_image", lambda turn, part: turn.v.has_image)
    """

    sources: Registry[Source] = field(default_factory=lambda: Registry("answer source"))
    conditions: Registry[ConditionFn] = field(default_factory=lambda: Registry("plan condition"))
    slots: Registry[SlotFn] = field(default_factory=lambda: Registry("slot"))
    queries: Registry[QueryFn] = field(default_factory=lambda: Registry("query kind"))

    def source(self, name: str, fn: SourceFn, *, final: bool = True, checked: bool = True) -> None:
        """Add an answer source (`final`: a plan row may answer from it; `checked`: its answers pass the
        answer-type check)."""
        self.sources.add(name, Source(name, fn, final, checked))
