"""Plan-table conditions, fn(turn, part) -> bool, listed by name in catalog.py. A plan step is due when all its
conditions hold (`part` is None for the compound-question steps)."""

from __future__ import annotations

import re

from glasses_rag.policies.rules.candidates import Part
from glasses_rag.policies.rules.reading import TurnReading
from glasses_rag.policies.rules.sources.comparison import missing_sides
from glasses_rag.policies.rules.sources.identity import class_or_name
from glasses_rag.policies.rules.sources.quantities import quantity
from glasses_rag.text import nlp

_NAMES_OBJECT = re.compile(r"\b(?:this|that|these|those)\s+([a-z][a-z-]+)", re.I)


def _asked(turn: TurnReading, part: Part | None) -> str:
    return part.original if part else turn.question


def has_image(turn: TurnReading, part: Part | None) -> bool:
    """The photo is about what is asked (a later turn may ask about something else)."""
    return turn.use_image


def asks_text(turn: TurnReading, part: Part | None) -> bool:
    """The question is about text (a sign, a label, a title, a price ...)."""
    return nlp.asks_about_text(_asked(turn, part))


def names_object(turn: TurnReading, part: Part | None) -> bool:
    """The question points at an object by name ("this tower")."""
    m = _NAMES_OBJECT.search(_asked(turn, part))
    return m is not None and m.group(1).lower() not in nlp.FUNCTION_WORDS | nlp.PHOTO_NOUNS


def several_parts(turn: TurnReading, part: Part | None) -> bool:
    """The question asks several things and no decoupler has split it yet."""
    return len(turn.parts) > 1 and not turn.v.sub_questions


def entity_unsure(turn: TurnReading, part: Part | None) -> bool:
    """Image search ran and found no confident match."""
    return turn.ran("finds_entity") and turn.image_conf <= 0


def entity_ambiguous(turn: TurnReading, part: Part | None) -> bool:
    """Look-alike matches tie and the photo's text has not been read yet."""
    return bool(turn.rivals) and not turn.ran("reads_text")


def entity_known(turn: TurnReading, part: Part | None) -> bool:
    return turn.entity is not None


def kg_lacks_answer(turn: TurnReading, part: Part | None) -> bool:
    return part is not None and turn.source("kg_attribute", part) is None and class_or_name(turn, part) is None


def ocr_lacks_answer(turn: TurnReading, part: Part | None) -> bool:
    return part is not None and turn.source("ocr_text", part) is None and turn.source("ocr_typed", part) is None


def web_lacks_answer(turn: TurnReading, part: Part | None) -> bool:
    """No multi-hop answer yet."""
    return part is not None and turn.source("bridge_hop", part) is None


def pages_unread(turn: TurnReading, part: Part | None) -> bool:
    return any(not h.content for h in turn.web_hits)


def many_web_hits(turn: TurnReading, part: Part | None) -> bool:
    return len(turn.web_hits) >= 3 and not turn.ran("reranks")


def no_image_evidence(turn: TurnReading, part: Part | None) -> bool:
    return not turn.kg_hits


def bridge_known(turn: TurnReading, part: Part | None) -> bool:
    """Hop 1 of a multi-hop question is answered."""
    return part is not None and turn.source("bridge", part) is not None


def bridge_unknown(turn: TurnReading, part: Part | None) -> bool:
    return not bridge_known(turn, part)


def side_missing(turn: TurnReading, part: Part | None) -> bool:
    """A compared side has no value yet."""
    return part is not None and bool(missing_sides(turn, part))


def ocr_name_unchecked(turn: TurnReading, part: Part | None) -> bool:
    """A name read in the photo that no page mentions yet: text in a photo alone does not say what the thing is."""
    return part is not None and turn.ocr_title() is not None and turn.source("ocr_name", part) is None


def quantity_known(turn: TurnReading, part: Part | None) -> bool:
    """The quantity a conversion question converts is known."""
    return part is not None and quantity(turn, part) is not None


def quantity_unknown(turn: TurnReading, part: Part | None) -> bool:
    return not quantity_known(turn, part)
