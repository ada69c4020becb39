"""Answer sources from the facts tools wrote (glasses_rag.core.types.Fact): any fact of the expected type, and the
value a `converts_units` tool converted."""

from __future__ import annotations

from glasses_rag.policies.rules.answer_types import matches
from glasses_rag.policies.rules.candidates import Candidate, Part
from glasses_rag.policies.rules.reading import TurnReading
from glasses_rag.policies.rules.sources.quantities import quantity
from glasses_rag.text import nlp


def converted_fact(turn: TurnReading, part: Part) -> Candidate | None:
    """The value a `converts_units` tool wrote (a Fact)."""
    names = {t.name for t in turn.v.tools_with("converts_units")}
    qty = quantity(turn, part)
    for f in reversed(turn.v.facts):
        if f.source in names and (f.value or f.text) and not nlp.is_instruction(f.text):
            return Candidate(
                f.value or f.text, min(f.confidence, qty[2] if qty else 0.5), f"converted by {f.source}: {f.text}"
            )
    return None


def facts(turn: TurnReading, part: Part) -> Candidate | None:
    """A fact a tool wrote that has the expected type and shares a word with the question."""
    for f in reversed(turn.v.facts):
        text = f.value or f.text
        if (
            matches(text, part.spec, units=turn.units)
            and not nlp.is_instruction(f.text)
            and nlp.shares_stem(part.resolved, f.text)
        ):
            return Candidate(text, f.confidence * 0.8, f"fact from {f.source}")
    return None
