"""The parts of a question: a compound question asks several things, each answered on its own."""

from __future__ import annotations

from dataclasses import dataclass

from glasses_rag.policies.rules.answer_types import expected_answer
from glasses_rag.policies.rules.candidates import Part
from glasses_rag.policies.rules.questions import classify, conversion_target
from glasses_rag.policies.rules.spec import ExpectedAnswer
from glasses_rag.text import nlp
from glasses_rag.text.units import UnitTable


@dataclass(frozen=True)
class PartsContext:
    """What splitting and resolving the parts needs from the turn."""

    entity: str | None
    person: str | None  # someone an earlier answer named, for "he"/"she"
    entity_is_person: bool | None
    use_image: bool
    history_entity: bool
    units: UnitTable


def _expected(question: str, qtype: str, units: UnitTable) -> ExpectedAnswer:
    """The answer type a part asks for; a conversion asks for its quantity in the unit it names."""
    target = conversion_target(question) if qtype == "conversion" else None
    if target is None:
        return expected_answer(question, units)
    return ExpectedAnswer(kind="quantity", dimension=units.dimension(target), unit=target)


def build_parts(question: str, sub_questions: list[str], max_parts: int, ctx: PartsContext) -> list[Part]:
    """The question's parts, each with "this"/"it" resolved (or the decoupler's sub-question), its type and the
    answer type it expects."""
    originals = nlp.split_question(question)[:max_parts]
    subs = sub_questions[:max_parts]
    parts: list[Part] = []
    for i, o in enumerate(originals):
        if subs and len(subs) == len(originals):
            r = subs[i]
        else:
            r = nlp.resolve_references(o, ctx.entity, person=ctx.person, entity_is_person=ctx.entity_is_person)
        qtype = classify(o, has_image=ctx.use_image, history_entity=ctx.history_entity)
        if qtype == "follow_up" and ctx.entity and r == o and not nlp.has_pronoun(o):
            r = f"{o.strip().rstrip('?')} of {ctx.entity}?"  # "who is the owner?" -> "... of Luna Bakery?"
        if i and len(nlp.content_words(o)) < 2 and parts:
            # an elliptical part ("..., and in what year?") borrows the first part's subject and plan
            r = f"{r} {parts[0].resolved}"
            qtype = parts[0].qtype if parts[0].qtype != "recognition" else qtype
        parts.append(
            Part(
                o,
                r if qtype != "web_fact" else o,
                qtype,
                _expected(o, qtype, ctx.units),
                None if qtype == "web_fact" else ctx.entity,
            )
        )
    return parts
