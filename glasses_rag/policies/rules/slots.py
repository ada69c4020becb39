"""What the planner passes to tools: slot providers, listed by name in catalog.py. A capability lists the slots its
tools receive (tools.capability.Capability.inputs); each tool maps them to its own argument names (`inputs` of @tool).
The `query` slot holds one of the query kinds a plan step names (catalog.py)."""

from __future__ import annotations

import re

from glasses_rag.policies.rules.candidates import Offer, Part
from glasses_rag.policies.rules.questions import conversion_target, parse_bridge, parse_comparison
from glasses_rag.policies.rules.reading import TurnReading
from glasses_rag.policies.rules.sources.comparison import missing_sides, side_query
from glasses_rag.policies.rules.sources.multihop import hop2_question
from glasses_rag.policies.rules.sources.quantities import quantity
from glasses_rag.text import nlp

_DIMENSION_WORDS = {
    "length": "height length",
    "mass": "weight",
    "speed": "speed",
    "volume": "volume",
    "temperature": "temperature",
    "area": "area",
}


def target_phrase(q: str) -> str:
    """What a detector should look for: the noun phrase after "this" ("the lighthouse"), else the main object."""
    m = re.search(r"\b(?:this|that|these|those)\s+((?:[A-Za-z-]+\s*){1,3})", q, re.I)
    if m:
        kept = [w for w in m.group(1).split() if w.lower() not in nlp.NOUN_PHRASE_STOP]
        if kept:
            return "the " + " ".join(kept[:3])
    return "the main object"


def target(turn: TurnReading, part: Part | None, kind: str | None) -> list[Offer]:
    return [Offer(target_phrase(part.original if part else turn.question))]


def question(turn: TurnReading, part: Part | None, kind: str | None) -> list[Offer]:
    return [Offer(turn.v.question)]


def entity(turn: TurnReading, part: Part | None, kind: str | None) -> list[Offer]:
    return [Offer(turn.entity or "")]


def value(turn: TurnReading, part: Part | None, kind: str | None) -> list[Offer]:
    """The quantity a conversion question converts (no call without one)."""
    qty = quantity(turn, part) if part is not None and conversion_target(part.original) else None
    return [Offer(qty[0], part.resolved)] if qty and part is not None else []


def from_unit(turn: TurnReading, part: Part | None, kind: str | None) -> list[Offer]:
    qty = quantity(turn, part) if part is not None else None
    return [Offer(qty[1])] if qty else []


def to_unit(turn: TurnReading, part: Part | None, kind: str | None) -> list[Offer]:
    unit = conversion_target(part.original) if part is not None else None
    return [Offer(unit)] if unit else []


def query_slot(turn: TurnReading, part: Part | None, kind: str | None) -> list[Offer]:
    """The search query of the step's query kind; no value when the step names none."""
    return turn.catalog.queries[kind](turn, part) if kind is not None else [Offer(None)]


# ---- query kinds ----------------------------------------------------------------------------------------


def part_query(turn: TurnReading, part: Part | None) -> list[Offer]:
    """The question part with "this"/"it" resolved, as keywords."""
    q = part.resolved if part else turn.question
    return [Offer(nlp.keywords(q, part.entity if part else turn.entity), q)]


def hop1_query(turn: TurnReading, part: Part | None) -> list[Offer]:
    """Hop 1 of a multi-hop question ("which cafe served <entity>?")."""
    if part is None:
        return part_query(turn, part)
    b = parse_bridge(part.original)
    hop1 = nlp.resolve_references(b.hop1, turn.entity) if b and turn.entity else part.resolved
    return [Offer(nlp.keywords(hop1, turn.entity), hop1)]


def hop2_query(turn: TurnReading, part: Part | None) -> list[Offer]:
    """Hop 2, about the bridge entity hop 1 found (none before)."""
    if part is None:
        return part_query(turn, part)
    got = turn.source("bridge", part)
    if got is None:
        return []
    hop2 = hop2_question(part, got.text)
    return [Offer(nlp.keywords(hop2, got.text), hop2)]


def sides_query(turn: TurnReading, part: Part | None) -> list[Offer]:
    """One query per compared side that has no value yet."""
    if part is None:
        return part_query(turn, part)
    cmp = parse_comparison(part.original)
    return [Offer(side_query(cmp, s), s) for s in missing_sides(turn, part)] if cmp else []


def ocr_name_query(turn: TurnReading, part: Part | None) -> list[Offer]:
    """The name read in the photo (its first lines)."""
    title = turn.ocr_title()
    return [Offer(title, title)] if title else []


def quantity_query(turn: TurnReading, part: Part | None) -> list[Offer]:
    """The entity and the measured dimension, for a conversion."""
    if part is None:
        return part_query(turn, part)
    words = _DIMENSION_WORDS.get(turn.units.dimension(conversion_target(part.original)) or "", "")
    return [Offer(f"{turn.entity} {words}".strip(), part.resolved)]
