"""Comparisons: a value for each compared side (KG record or web sentence, in base units), compared only when both
are found: "Westcliff Tower (54 meters vs 31 meters)"."""

from __future__ import annotations

import re

from glasses_rag.policies.rules.answer_types import YEAR
from glasses_rag.policies.rules.candidates import Candidate, Part, SideValue
from glasses_rag.policies.rules.questions import Comparison, parse_comparison
from glasses_rag.policies.rules.reading import TurnReading
from glasses_rag.policies.rules.web_text import page_sentences
from glasses_rag.text import nlp

_SELF = re.compile(r"\b(this|these|that|those|it|its|he|she|him|her)\b", re.I)
_YEAR_CUES = frozenset(
    nlp.stem(w)
    for w in (
        "year",
        "born",
        "built",
        "founded",
        "launched",
        "opened",
        "established",
        "published",
        "released",
        "first",
        "completed",
        "created",
    )
)
_CUES = {
    "length": {"height", "tall", "high", "long", "length", "metr", "meter", "stand", "tower", "rise"},
    "mass": {"weight", "weigh", "mass", "heavy"},
    "speed": {"speed", "fast"},
    "temperature": {"temperatur", "hot", "cold"},
}
_QUERY_WORDS = {"length": "height tall", "mass": "weight", "speed": "speed", "temperature": "temperature"}


def is_self(turn: TurnReading, side: str) -> bool:
    return bool(_SELF.search(side)) or (turn.entity is not None and nlp.mentions(side, turn.entity))


def side_name(turn: TurnReading, side: str) -> str:
    if is_self(turn, side) and turn.entity:
        return turn.entity
    asked = re.search(re.escape(side.strip()), turn.question, re.I)  # as written in the question
    return re.sub(r"^(?:the|a|an)\s+", "", (asked.group(0) if asked else side).strip(), flags=re.I)


def side_query(cmp: Comparison, side: str) -> str:
    name = re.sub(r"^(?:the|a|an)\s+", "", side.strip(), flags=re.I)
    word = (" ".join(cmp.events) or "year") if cmp.dimension == "year" else _QUERY_WORDS.get(cmp.dimension, "")
    return f"{name} {word}".strip()


def _year(text: str, context: str, event: str | None) -> tuple[float, str] | None:
    cues = nlp.stems(event or "") or _YEAR_CUES
    if not (nlp.stems(context) & cues):
        return None
    m = YEAR.search(text)
    digits = re.search(r"\d+", m.group(0)) if m else None
    if m is None or digits is None:
        return None
    return float(int(digits.group(0)) * (-1 if re.search(r"BC", m.group(0), re.I) else 1)), m.group(0)


def measure(turn: TurnReading, cmp: Comparison, text: str, context: str, event: str | None) -> tuple[float, str] | None:
    """The value of the compared dimension in `text` (context: the attribute name or the sentence)."""
    if cmp.dimension == "year":
        return _year(text, context, event)
    cue = _CUES.get(cmp.dimension, set())
    if cue and not (nlp.stems(context) & {nlp.stem(c) for c in cue} or set(nlp.words(context)) & cue):
        return None
    qs = [q for q in turn.units.quantities(text) if q.dimension == cmp.dimension]
    if len(qs) != 1:
        return None  # none, or several and nothing tells which
    return qs[0].base, qs[0].text


def _kg_side(turn: TurnReading, cmp: Comparison, event: str | None) -> SideValue | None:
    for k, val in (turn.entity_hit.attributes or {}).items() if turn.entity_hit is not None else []:
        if nlp.is_instruction_attribute(k, val):
            continue
        v = measure(turn, cmp, str(val), str(k), event)
        if v is not None:
            return SideValue(v[0], v[1], turn.entity_conf)
    return None


def _web_side(turn: TurnReading, cmp: Comparison, side: str, name: str, event: str | None) -> SideValue | None:
    best: tuple[float, SideValue] | None = None
    probe = f"{name} {side_query(cmp, side)}"
    for h in turn.web_hits:
        if not nlp.mentions(f"{h.title or ''}. {h.content or h.snippet}", name):
            continue
        for s in page_sentences(h):
            if not (nlp.mentions(s, name) or nlp.mentions(h.title or "", name)):
                continue
            v = measure(turn, cmp, s, s, event)
            if v is None:
                continue
            sim = float(turn.p.embedder.similarity(probe, [s])[0])
            if sim >= turn.c.min_web_sim and (best is None or sim > best[0]):
                best = (sim, SideValue(v[0], v[1], sim))
    return best[1] if best else None


def side_value(turn: TurnReading, cmp: Comparison, side: str, event: str | None) -> SideValue | None:
    """The side's value: from the entity's KG record when the side is the pictured entity, else from the web."""
    if is_self(turn, side):
        if turn.entity is None:
            return None
        got = _kg_side(turn, cmp, event)
        if got is not None:
            return got
    return _web_side(turn, cmp, side, side_name(turn, side), event)


def side(turn: TurnReading, cmp: Comparison, side_text: str, event: str | None) -> SideValue | None:
    return turn.memo(("side", side_text, event), lambda: side_value(turn, cmp, side_text, event))


def _events(cmp: Comparison) -> list[str | None]:
    return list(cmp.events) or [None, None]


def missing_sides(turn: TurnReading, part: Part) -> list[str]:
    """The compared sides no value was found for yet (the pictured side only once the entity is known)."""
    cmp = parse_comparison(part.original)
    if cmp is None:
        return []
    return [
        s
        for s, ev in zip(cmp.sides, _events(cmp))
        if side(turn, cmp, s, ev) is None and not (is_self(turn, s) and turn.entity is None)
    ]


def compare(turn: TurnReading, part: Part) -> Candidate | None:
    """Both sides' values compared in base units."""
    cmp = parse_comparison(part.original)
    if cmp is None:
        return None
    a, b = (side(turn, cmp, s, ev) for s, ev in zip(cmp.sides, _events(cmp)))
    if a is None or b is None or a.value == b.value:
        return None
    shown = f"{a.text} vs {b.text}"
    conf = min(a.confidence, b.confidence)
    note = f"compared {side_name(turn, cmp.sides[0])} ({a.text}) with {side_name(turn, cmp.sides[1])} ({b.text})"
    if cmp.relation == "before_after":
        return Candidate(f"{'before' if a.value < b.value else 'after'} ({shown})", conf, note)
    first_wins = (a.value > b.value) if cmp.relation == "more" else (a.value < b.value)
    if cmp.yes_no:
        return Candidate(f"{'Yes' if first_wins else 'No'} ({shown})", conf, note)
    winner = side_name(turn, cmp.sides[0] if first_wins else cmp.sides[1])
    return Candidate(f"{winner} ({shown})", conf, note)
