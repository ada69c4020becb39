"""What kind of answer a question wants: `ExpectedAnswer` (see
glasses_rag/policies/rules/answer_types.py:expected_answer)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

AnswerKind = Literal[
    "person",
    "place",
    "year",
    "date",
    "time",
    "weekday",
    "number",
    "quantity",
    "money",
    "duration",
    "yes_no",
    "name",
    "text",
]


class ExpectedAnswer(BaseModel):
    model_config = ConfigDict(frozen=True)  # hashable: answers are memoised per part and spec

    kind: AnswerKind = "text"
    dimension: str | None = None  # quantities: length, mass, speed, temperature, volume, area, age, energy;
    # durations: frequency; dates: "day" when a calendar date is asked ("on what date")
    counted: str | None = None  # "how many <noun>": the noun a number must count
    noun: str | None = None  # "which <noun>": the class the answer belongs to
    other: bool = False  # "what other / else": the entity's own known values are not the answer
    unit: str | None = None  # money: the currency asked for ("in euros" -> "€"); the answer must be in it
