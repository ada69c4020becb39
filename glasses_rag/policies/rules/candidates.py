"""The small value types the planner's modules pass around: a part of the question, a candidate answer, a compared
side's value, a value on offer for a tool argument."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from glasses_rag.policies.rules.questions import QuestionType
from glasses_rag.policies.rules.spec import AnswerSpec


@dataclass(frozen=True)
class Part:
    original: str  # as asked
    resolved: str  # with "this"/"it" replaced by the entity
    qtype: QuestionType
    spec: AnswerSpec
    entity: str | None  # what the part is about (None for general knowledge)

    def expecting(self, spec: AnswerSpec) -> Part:
        """The same part asking for another type of answer (Reading.answer_of)."""
        return replace(self, spec=spec)


@dataclass
class Candidate:
    text: str
    confidence: float
    note: str
    sentence: str | None = None  # the evidence sentence it was cut from


@dataclass
class SideValue:
    value: float  # base units (or the year)
    text: str
    confidence: float


@dataclass(frozen=True)
class Offer:
    """A value the planner offers for one slot (None: no value, the tool's default applies), and the sub-question
    the call works on."""

    value: Any = None
    sub_question: str | None = None
