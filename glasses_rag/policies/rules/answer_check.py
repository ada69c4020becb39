"""Answer-type enforcement: an answer whose type does not fit what the question asks is never returned.

Every answer source the plan table names (and every fact an extension capability's tool wrote) passes `refuse`
before it may answer (glasses_rag/policies/rules/reading.py:TurnReading.checked). The expected type comes from the
question's wh-word and head noun (answer_types.expected_answer); an answer is refused when

- its text cannot hold an answer of that type (a year where a person is asked, a length where a weight is, a price
  in dollars where euros are asked: answer_types.matches, with the units of this planner's tools);
- it is a bare number (or measure) where a thing is asked ("what does this animal feed on?": a food, not "20");
- it is the pictured thing's own name where a person, a place or something else about it is asked ("who designed
  this building?" gets a person, not the building's name); the own name stays an answer to "what is it called?"
  and to a question naming a class ("which project is this logo for?": the "X logo" is X's);
- it is a single character where no letter, size or grade is asked.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from glasses_rag.core.types import Hit
from glasses_rag.policies.rules.answer_types import YEAR, matches
from glasses_rag.policies.rules.candidates import Part
from glasses_rag.policies.rules.lexicon import CLASS_KEYS, WORDS
from glasses_rag.text import nlp
from glasses_rag.text.units import UnitTable

_NAME_NOUNS = frozenset(WORDS.name_nouns)
_SINGLE_CHARACTER_NOUNS = frozenset(WORDS.single_character_nouns)
# a wh-word that asks for a thing, a person or a place (not how much / how long / when)
_ASKS_THING = re.compile(
    r"^(?:(?!\bhow\b|\bwhen\b).)*\b(?:what|which|who|whom|whose|where)\b(?:(?!\bhow\b|\bwhen\b).)*$", re.I
)
_ASKS_NAME = re.compile(r"\b(?:called|named|name|names|title|nickname)\b", re.I)
# question types whose answer is itself the entity's name, or is built from values rather than cut from text
_OWN_NAME_ANSWERS = frozenset({"recognition", "comparison"})


@dataclass(frozen=True)
class Context:
    entity: str | None
    entity_hit: Hit | None
    units: UnitTable


def _bare_measure(text: str, units: UnitTable) -> bool:
    """Only numbers, measures, years and punctuation: nothing that names a thing."""
    rest = text
    for q in sorted(units.quantities(text), key=lambda q: q.start, reverse=True):
        rest = rest[: q.start] + " " + rest[q.end :]
    rest = YEAR.sub(" ", rest)
    return not re.search(r"[A-Za-z]{2,}", rest) and bool(re.search(r"\d", text))


def _class_words(hit: Hit | None) -> set[str]:
    return {
        w
        for k, v in ((hit.attributes or {}).items() if hit is not None else [])
        if str(k).lower() in CLASS_KEYS
        for w in nlp.normalize(str(v)).split()
    }


def is_own_name(text: str, entity: str, hit: Hit | None) -> bool:
    """`text` names the entity itself: only words of its name, and every word of its name that is not a class word
    ("matplotlib" for the "Matplotlib logo" whose category is "software logo")."""
    cand = set(nlp.normalize(text).split()) - nlp.STOPWORDS
    own = set(nlp.normalize(entity).split()) - nlp.STOPWORDS
    core = own - _class_words(hit)
    return bool(cand) and cand <= own and bool(core) and core <= cand


def _asks_name(part: Part) -> bool:
    return (part.spec.noun in _NAME_NOUNS) or bool(_ASKS_NAME.search(part.original))


def refuse(text: str, part: Part, ctx: Context) -> str | None:
    """Why `text` cannot answer `part`, or None when it can."""
    spec = part.spec
    if not matches(text, spec, cased=False, units=ctx.units):
        return f"not of the type asked ({spec.kind}{' in ' + spec.unit if spec.unit else ''})"
    thing = spec.kind in ("person", "place", "name") or (spec.kind == "text" and not spec.other)
    if (
        thing
        and spec.noun is None
        and _ASKS_THING.search(part.original)
        and part.qtype != "text_in_image"
        and _bare_measure(text, ctx.units)
    ):
        return "a bare number where a thing is asked"
    other_thing = spec.kind in ("person", "place") or (spec.kind == "text" and spec.noun is None)
    if (
        other_thing
        and ctx.entity
        and part.qtype not in _OWN_NAME_ANSWERS
        and not _asks_name(part)
        and is_own_name(text, ctx.entity, ctx.entity_hit)
    ):
        return "the pictured thing's own name, where something else about it is asked"
    if thing and len(re.sub(r"\W", "", text)) < 2 and spec.noun not in _SINGLE_CHARACTER_NOUNS:
        return "a single character"
    return None
