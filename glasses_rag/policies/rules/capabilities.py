"""Capabilities a tool file declares (tools.capability.Capability with `due`, `slots` and `answer`), used by the
planner with no plan-table row and no other edit:

- calls: when `due(reading)` holds, every allowed tool with the capability is called with the values of the
  capability's `slots` hooks (a slot without a hook takes the planner's own provider of that name, if any), unless
  the same call already ran;
- answers: the facts its tools wrote (glasses_rag.core.types.Fact, `value` first) answer parts whose expected type is
  `answer.kind` (any, when None) and whose question type is among `answer.question_types` (any, when empty), tried
  before the question type's own answer sources (`answer.first`) or after them; `answer.units` extend the units the
  answer-type check accepts, for this planner's turns only (reading.capability_units).

The built-in capabilities (tools.capability.BUILTIN) are used through the plan table instead.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from glasses_rag.policies.protocol import ParallelCall
from glasses_rag.policies.rules.candidates import Candidate, Offer, Part
from glasses_rag.policies.rules.named_parts import Catalog
from glasses_rag.policies.rules.plan import calls_for, combine
from glasses_rag.policies.rules.reading import TurnReading
from glasses_rag.text import nlp
from tools.capability import BUILTIN, Capability

log = logging.getLogger(__name__)


def extensions(turn: TurnReading) -> list[Capability]:
    """The capabilities the turn's tools carry that are not built in."""
    return [c for name, c in sorted(turn.capabilities.items()) if name not in BUILTIN]


def unprovided(cap: Capability, catalog: Catalog) -> list[str]:
    """The inputs of an extension capability that nothing fills: no `slots` hook of its own, no planner slot."""
    return [s for s in cap.inputs if s not in cap.slots and s not in catalog.slots]


def check_inputs(tools: Iterable[Any], catalog: Catalog) -> None:
    """Refuse, with a ValueError naming tool, capability and input, a tool whose capability (not a built-in one) has
    an input that nothing fills: the planner would never call it (plan.fill finds a required argument empty).

    Args:
        tools: the agent's tools (tools.registry.Tool) or their specs (anything with `name` and `capabilities`).
        catalog: the planner's named parts (catalog.planner_catalog()), whose `slots` fill inputs by name.

    Example::

        check_inputs(registry, planner_catalog())  # ValueError: tool 'lookup': capability 'looks_up' ...
    """
    for t in tools:
        for cap in t.capabilities:
            missing = [] if cap.name in BUILTIN else unprovided(cap, catalog)
            if missing:
                raise ValueError(
                    f"tool {t.name!r}: capability {cap.name!r} passes {', '.join(map(repr, missing))}, which no "
                    f"planner slot ({', '.join(catalog.slots)}) and no hook in its `slots` provides: add "
                    f"slots={{{missing[0]!r}: fn}} to the capability, or name a planner slot"
                )


def _hook(cap: Capability, what: str, fn: Any, turn: TurnReading) -> Any:
    """A tool file's hook, run so that a hook that raises only makes its capability not due (logged)."""
    try:
        return fn(turn)
    except Exception as e:  # noqa: BLE001 - code from a tool file must not end the turn
        log.warning("capability %s: its %s hook raised %s: %s", cap.name, what, type(e).__name__, e)
        return None


def _offer(turn: TurnReading, cap: Capability) -> dict[str, list[Offer]]:
    part = turn.parts[0] if turn.parts else None
    out: dict[str, list[Offer]] = {}
    for s in cap.inputs:
        if s in cap.slots:
            out[s] = [Offer(_hook(cap, f"slot {s!r}", cap.slots[s], turn), turn.resolved)]
        elif s in turn.catalog.slots:
            out[s] = turn.catalog.slots[s](turn, part, "part")
        else:  # refused when the planner was built (check_inputs); a hand-made view gets here
            raise ValueError(f"capability {cap.name!r}: no provider for its input {s!r}")
    return out


def due_calls(turn: TurnReading) -> tuple[list[ParallelCall], list[str]]:
    """The calls of every extension capability that is due, and why."""
    calls: list[ParallelCall] = []
    why: list[str] = []
    for cap in extensions(turn):
        if cap.due is None or not _hook(cap, "due", cap.due, turn):
            continue
        tools = [t for t in turn.v.tools if cap.name in t.tags]
        new = calls_for(turn, tools, combine(_offer(turn, cap)))
        if new:
            calls += new
            why.append(f"{cap.name} (due)")
    return calls, why


def _answers(cap: Capability, part: Part, first: bool) -> bool:
    use = cap.answer
    return (
        use is not None
        and use.first == first
        and (use.kind is None or use.kind == part.spec.kind)
        and (not use.question_types or part.qtype in use.question_types)
    )


def answer(turn: TurnReading, part: Part, first: bool) -> Candidate | None:
    """An answer from the facts an extension capability's tools wrote (see the module docstring)."""
    for cap in extensions(turn):
        if not _answers(cap, part, first):
            continue
        tools = {t.name for t in turn.v.tools if cap.name in t.tags}
        for f in reversed(turn.v.facts):
            text = f.value or f.text
            if f.source not in tools or not text or nlp.is_instruction(f.text):
                continue
            got = turn.checked(f"capability {cap.name}", part, Candidate(text, f.confidence, f"{cap.name}: {f.text}"))
            if got is not None:
                return got
    return None
