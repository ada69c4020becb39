"""Question types (rule-based, no model): which row of the plan table a question takes.

`classify` names the question type that picks a row of the planner's plan table
(glasses_rag/policies/rules/planner_table.yaml):
recognition, attribute (of the pictured entity), web_fact, text_in_image, comparison, multi_hop, aggregation,
follow_up, conversion. The question is first read in its canonical form (canonical.py); recognition.py tells
recognition questions, shapes.py takes comparisons, multi-hop questions and conversions apart (re-exported here).
"""

from __future__ import annotations

import re
from typing import Literal

from glasses_rag.policies.rules.canonical import canonical
from glasses_rag.policies.rules.lexicon import WORDS
from glasses_rag.policies.rules.recognition import class_noun, is_recognition
from glasses_rag.policies.rules.shapes import Bridge, Comparison, conversion_target, parse_bridge, parse_comparison
from glasses_rag.text import nlp

__all__ = [
    "QUESTION_TYPES",
    "Bridge",
    "Comparison",
    "QuestionType",
    "canonical",
    "class_noun",
    "classify",
    "conversion_target",
    "is_elliptical",
    "is_recognition",
    "parse_bridge",
    "parse_comparison",
]

QuestionType = Literal[
    "recognition",
    "attribute",
    "web_fact",
    "text_in_image",
    "comparison",
    "multi_hop",
    "aggregation",
    "follow_up",
    "conversion",
]
QUESTION_TYPES: tuple[str, ...] = QuestionType.__args__  # type: ignore[attr-defined]
_ELLIPTICAL_NOUNS = frozenset(WORDS.elliptical_nouns)
_AGGREGATION = re.compile(
    r"\bhow many\b.*\b(?:did|has|have|had)\b|\bhow many\b.*\b(?:in total|altogether|combined|so far|"
    r"in all|overall|ever)\b|\b(?:list|name) all\b|\ball the\b.*\b(?:which|that)\b",
    re.I,
)


def is_elliptical(question: str) -> bool:
    """A later turn that names no subject ("who is the owner?", "what is the price?"): about the conversation's
    entity. One content word at most, none of them a name."""
    cw = nlp.content_words(question)
    return (
        len(cw) <= 1
        and all(w in _ELLIPTICAL_NOUNS or not w[:1].isdigit() for w in cw)
        and not re.search(r"\b[A-Z]", question[1:])
    )


def classify(question: str, *, has_image: bool, history_entity: bool = False) -> QuestionType:
    """The plan-table row for a question (see glasses_rag/policies/rules/planner_table.yaml)."""
    q = question or ""
    refers = has_image and nlp.refers_to_image(q)
    pron = nlp.has_pronoun(q)
    if conversion_target(q) and (refers or pron or history_entity):
        return "conversion"
    if parse_comparison(q) is not None:
        return "comparison"
    if (
        has_image
        and is_recognition(q)
        and not (history_entity and not refers and not re.search(r"\b(this|that|these|those)\b", q, re.I))
    ):
        return "recognition"
    if parse_bridge(q) is not None and (refers or pron or history_entity):
        return "multi_hop"
    if history_entity and not refers and (pron or is_elliptical(q)):
        return "follow_up"
    if has_image and nlp.asks_about_text(q) and (refers or not pron):
        return "text_in_image"
    if refers or (has_image and pron):
        return "aggregation" if _AGGREGATION.search(q) else "attribute"
    return "web_fact"
