"""Quantities: a count of the items a sentence lists ("how many titles did it win?"), the quantity a conversion
question converts."""

from __future__ import annotations

import re

from glasses_rag.policies.rules.candidates import Candidate, Part
from glasses_rag.policies.rules.config import WEB_QUANTITY_CONFIDENCE
from glasses_rag.policies.rules.questions import conversion_target
from glasses_rag.policies.rules.reading import TurnReading
from glasses_rag.policies.rules.web_text import page_sentences
from glasses_rag.text import nlp


def count(turn: TurnReading, part: Part) -> Candidate | None:
    """ "how many X did it ...?" with no number stated: count the items a sentence lists after X."""
    noun = part.spec.counted
    if not noun:
        return None
    for h in turn.web_hits:
        for s in page_sentences(h):
            m = re.search(rf"\b{re.escape(nlp.stem(noun))}\w*\s*(?::|were|are|include|included)\s+([^.;]+)", s, re.I)
            if m and (turn.entity is None or nlp.mentions(s, turn.entity) or nlp.mentions(h.title or "", turn.entity)):
                items = [i for i in re.split(r",\s*(?:and\s+)?|\s+and\s+", m.group(1)) if i.strip()]
                if len(items) >= 2:
                    return Candidate(str(len(items)), 0.5, f"counted {len(items)} {noun} listed in {h.url}", s)
    return None


def quantity(turn: TurnReading, part: Part) -> tuple[float, str, float] | None:
    """(value, unit, confidence) to convert: from the previous answer, else the entity's KG record or the web."""
    return turn.memo(("quantity", part.original), lambda: _quantity(turn, part))


def _quantity(turn: TurnReading, part: Part) -> tuple[float, str, float] | None:
    target = conversion_target(part.original)
    dim = turn.units.dimension(target) if target in turn.units.data.units else None
    if dim is None:
        return None

    def pick(text: str) -> tuple[float, str] | None:
        qs = [q for q in turn.units.quantities(text) if q.dimension == dim and q.unit and q.unit != target]
        return (qs[0].value, qs[0].unit) if len(qs) == 1 and qs[0].unit else None

    for t in reversed(turn.v.history):
        got = pick(t.answer) if not nlp.is_abstention(t.answer) else None
        if got:
            return got[0], got[1], 0.8
    hit = turn.entity_hit
    for k, val in (hit.attributes or {}).items() if hit is not None else []:
        got = pick(str(val)) if not nlp.is_instruction_attribute(k, val) else None
        if got and nlp.shares_stem(part.original + " height length weight size", str(k)):
            return got[0], got[1], turn.entity_conf
    for h in turn.web_hits:
        for s in page_sentences(h):
            got = pick(s)
            if got and turn.entity and nlp.mentions(s, turn.entity):
                return got[0], got[1], WEB_QUANTITY_CONFIDENCE
    return None
