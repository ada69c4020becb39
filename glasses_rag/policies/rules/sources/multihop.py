"""Multi-hop questions ("in which city is the cafe that served this drink?"): hop 1 finds the bridge entity (the
cafe) from the KG record or the web, hop 2 asks the question about it; answered only when both hops are supported."""

from __future__ import annotations

from glasses_rag.policies.rules.answer_types import expected_answer
from glasses_rag.policies.rules.candidates import Candidate, Part
from glasses_rag.policies.rules.questions import parse_bridge
from glasses_rag.policies.rules.reading import TurnReading
from glasses_rag.policies.rules.sources.web import web_answer
from glasses_rag.policies.rules.spec import ExpectedAnswer
from glasses_rag.text import nlp


def _bridge_from_kg(turn: TurnReading, noun: str, clause: str) -> Candidate | None:
    hit = turn.entity_hit
    if hit is None or not hit.attributes:
        return None
    clause_words = nlp.stems(clause) | {nlp.stem(noun)}
    for k, val in hit.attributes.items():
        if nlp.is_instruction_attribute(k, val):
            continue
        pieces = [p.strip() for p in str(val).split(",") if p.strip()]
        by_noun = [p for p in pieces if nlp.stem(noun) in nlp.stems(p)]
        if by_noun or nlp.stems(str(k)) & clause_words:
            value = (by_noun or pieces or [str(val)])[0]
            return Candidate(value, turn.entity_conf, f"hop 1 from KG attribute '{k}' of {turn.entity}")
    return None


def bridge(turn: TurnReading, part: Part) -> Candidate | None:
    """Hop 1 of a multi-hop question: the entity the clause describes, from the KG record or the web."""
    b = parse_bridge(part.original)
    if b is None or turn.entity is None:
        return None
    got = _bridge_from_kg(turn, b.noun, b.clause)
    if got is not None:
        return got
    got = web_answer(
        turn, part, question=nlp.resolve_references(b.hop1, turn.entity), spec=ExpectedAnswer(kind="name", noun=b.noun)
    )
    if got is not None:
        got.note = "hop 1: " + got.note
    return got


def hop2_question(part: Part, bridge_text: str) -> str:
    b = parse_bridge(part.original)
    assert b is not None
    return b.hop2.format(bridge=bridge_text)


def bridge_hop(turn: TurnReading, part: Part) -> Candidate | None:
    """Hop 2's answer about the bridge entity hop 1 found."""
    first = turn.source("bridge", part)
    if parse_bridge(part.original) is None or first is None:
        return None
    hop2 = hop2_question(part, first.text)
    rest = nlp.stems(hop2) - nlp.stems(first.text) - {"name", "call", "called", "title"}
    if not rest:  # "what is the name of the street this cafe is on?": hop 1 is the answer
        return first
    second = web_answer(
        turn,
        part,
        question=hop2,
        spec=expected_answer(hop2, turn.units),
        must_mention=first.text,
        avoid=[turn.entity or ""],
    )
    if second is None:
        return None
    return Candidate(
        second.text,
        min(first.confidence, second.confidence),
        f"{first.note}: {first.text}; hop 2: {second.note}",
        second.sentence,
    )
