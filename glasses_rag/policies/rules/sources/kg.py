"""Answer sources from the image KG record: the attribute the question asks for, and the attribute the class a
recognition question names ("what breed is this dog?")."""

from __future__ import annotations

import re

from glasses_rag.core.types import Hit
from glasses_rag.policies.rules.answer_types import YEAR, matches
from glasses_rag.policies.rules.candidates import Candidate, Part
from glasses_rag.policies.rules.config import HISTORY_ENTITY_CONFIDENCE
from glasses_rag.policies.rules.lexicon import PLACE_KEYS, TYPE_WORDS
from glasses_rag.policies.rules.reading import TurnReading
from glasses_rag.policies.rules.recognition import class_noun
from glasses_rag.policies.rules.relations import relation_clash
from glasses_rag.policies.rules.spec import ExpectedAnswer
from glasses_rag.text import nlp


def _typed_keys(turn: TurnReading, hit: Hit, spec: ExpectedAnswer) -> list[str]:
    """The attribute names whose value has the expected type (never one that carries instructions)."""
    attrs = hit.attributes or {}
    keys = [
        str(k)
        for k, val in attrs.items()
        if matches(str(val), spec, cased=False, units=turn.units)
        and not nlp.is_instruction_attribute(k, val)
        and not (spec.kind == "number" and YEAR.fullmatch(str(val).strip()))
    ]  # a year counts nothing
    return [k for k in keys if nlp.shares_stem(spec.counted, k)] if spec.counted else keys


def _key_score(
    turn: TurnReading, spec: ExpectedAnswer, key: str, sim: float, asked: set[str], typed_single: bool
) -> float | None:
    """How well an attribute name matches what is asked; None under the floor that applies to it. A name all of whose
    words are asked wins over one that adds a qualifier ("name" over "scientific name" for "what is its name?")."""
    kstems = nlp.stems(key)
    noun_ok = bool(spec.noun) and nlp.stem(spec.noun or "") in kstems
    # "where ...?", "which city ...?": the attribute must name a place ("location", "found at", "city")
    place_key = spec.kind == "place" and bool(kstems & PLACE_KEYS or re.search(r"\b(?:at|in|on|from|near)$", key))
    if spec.kind == "place" and not (noun_ok or place_key):
        return None
    # a key that shares no word (or synonym) with what is asked needs a close match on its own
    # every word of the name is asked (the head noun included: "name" for "what is its name?")
    exact = bool(kstems) and kstems <= asked | {nlp.stem(spec.noun or "-")}
    shared = bool(asked & kstems) or exact  # a word (or synonym) of what is asked: "discovered" / "found at"
    c = turn.c
    need = (
        c.min_attr_sim_shared
        if shared
        else c.min_attr_sim
        if noun_ok or place_key or typed_single
        else c.min_attr_sim_no_overlap
    )
    if sim < need:
        return None
    return sim + (0.2 if shared else 0.0) + (0.1 if noun_ok or place_key else 0.0) + (0.1 if exact else 0.0)


def kg_answer(turn: TurnReading, part: Part, hit: Hit | None = None) -> Candidate | None:
    """The KG attribute the question asks for: a name that shares a stem with the question or is very similar to it,
    whose value has the expected answer type."""
    hit = hit or turn.entity_hit
    spec = part.spec
    if hit is None or not hit.attributes or spec.other or spec.kind == "yes_no":
        return None
    owner = re.search(r"\bthe ([a-z-]+)'s?\s+[a-z]", part.original, re.I)
    if owner and nlp.stem(owner.group(1)) not in turn.topic_words(hit.entity_name, hit):
        return None  # "which prize did the author's debut win?": about the author's book, not this record
    keys = [k for k in _typed_keys(turn, hit, spec) if not relation_clash(k, part.original)]
    if not keys:
        return None
    ent_words = set(nlp.normalize(hit.entity_name or "").split())
    q = " ".join(w for w in nlp.words(part.resolved) if w not in ent_words) or part.resolved
    sims = turn.p.embedder.similarity(q, keys)
    asked = nlp.stems(q) - TYPE_WORDS  # what is asked, less the words that only name the answer's type
    # a specific type (a year, a length, a price) that only one attribute holds is evidence in itself
    typed_single = len(keys) == 1 and spec.kind not in ("text", "name", "person", "place")
    best: tuple[str, float] | None = None
    for k, sim in zip(keys, sims):
        score = _key_score(turn, spec, k, float(sim), asked, typed_single)
        if score is not None and (best is None or score > best[1]):
            best = (k, score)
    if best is None:
        return None
    value = str(hit.attributes[best[0]])
    if spec.noun and re.fullmatch(r"[\d.,]+", value.strip()) and spec.kind in ("text", "name"):
        value = f"{spec.noun} {value}"  # "which route ...?" + "42" -> "route 42"
    conf = (turn.entity_conf if hit is turn.entity_hit else HISTORY_ENTITY_CONFIDENCE) * min(1.0, 0.6 + best[1])
    return Candidate(value, conf, f"KG attribute '{best[0]}' of {hit.entity_name} (match {best[1]:.2f})")


def kg_attribute(turn: TurnReading, part: Part) -> Candidate | None:
    """The attribute of the entity's KG record that the question asks for, of the expected type."""
    return kg_answer(turn, part)


def holds_for_rivals(turn: TurnReading, source_name: str, part: Part, cand: Candidate) -> bool:
    """An answer drawn from the top match's KG record that every look-alike's record gives too."""
    if source_name not in ("kg_attribute", "class_attribute"):
        return False
    for h in turn.rivals:
        other = kg_answer(turn, part, hit=h) if source_name == "kg_attribute" else None
        if other is None or nlp.normalize(other.text) != nlp.normalize(cand.text):
            return False
    return True


def class_attribute(turn: TurnReading, part: Part) -> Candidate | None:
    """ "what breed is this dog?": the KG attribute named by the class the question asks for."""
    noun = class_noun(part.original)
    hit = turn.entity_hit
    if not noun or hit is None or not hit.attributes or noun in ("kind", "type", "sort", "name"):
        return None
    for k, val in hit.attributes.items():
        if nlp.stem(noun) == nlp.stem(str(k)) and not nlp.is_instruction_attribute(k, val):
            value = f"{noun} {val}" if re.fullmatch(r"[\d.,]+", str(val).strip()) else str(val)  # "pier" + "3"
            return Candidate(value, turn.entity_conf, f"KG attribute '{k}' of {hit.entity_name}")
    return None
