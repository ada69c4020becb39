"""The rule-based planner's plan table: question type -> ordered tool capabilities and answer sources.

The table is data (graph/planner/planner_table.yaml), validated here: every step names a capability tag the planner
understands (tools/capability.py:BUILTIN), every condition, query and answer source is one the planner
implements, and every question type has a row. `load_plan_table()` reads the bundled table; a different file can
be passed (RulePlannerConfig.plan_table).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from graph.planner.questions import QUESTION_TYPES
from tools.capability import BUILTIN as CAPABILITIES

DEFAULT_TABLE = Path(__file__).with_name("planner_table.yaml")

Condition = Literal["has_image", "asks_text", "names_object", "several_parts", "entity_unsure", "entity_ambiguous",
                    "entity_known",
                    "kg_lacks_answer", "ocr_lacks_answer", "web_lacks_answer", "pages_unread", "many_web_hits",
                    "no_image_evidence", "bridge_unknown", "bridge_known", "side_missing", "quantity_unknown",
                    "quantity_known", "ocr_name_unchecked"]
Query = Literal["part", "hop1", "hop2", "sides", "quantity", "ocr_name"]
AnswerSource = Literal["entity_name", "class_attribute", "ocr_name", "ocr_text", "ocr_typed", "kg_attribute",
                       "web_span", "facts", "compare", "bridge_hop", "count", "converted_fact"]


class PlanStep(BaseModel):
    model_config = ConfigDict(extra="forbid")

    uses: str = Field(description="A capability tag; every allowed tool with it is called.")
    when: list[Condition] = Field(default_factory=list, description="All must hold for the step to be due.")
    with_previous: bool = Field(False, description="Runs in the same round as the step before it (independent calls).")
    query: Query | None = Field(None, description="What the planner passes as `query` to the tool.")

    @field_validator("uses")
    @classmethod
    def _known_capability(cls, v: str) -> str:
        if v not in CAPABILITIES:
            raise ValueError(f"unknown capability {v!r}; the planner understands {', '.join(sorted(CAPABILITIES))}")
        return v


class QuestionPlan(BaseModel):
    model_config = ConfigDict(extra="forbid")

    description: str
    steps: list[PlanStep]
    answer: list[AnswerSource] = Field(min_length=1)


class PlanTable(BaseModel):
    model_config = ConfigDict(extra="forbid")

    compound: list[PlanStep] = Field(default_factory=list, description="Steps for a question that asks several things.")
    types: dict[str, QuestionPlan]

    @model_validator(mode="after")
    def _every_type(self) -> PlanTable:
        missing = sorted(set(QUESTION_TYPES) - set(self.types))
        unknown = sorted(set(self.types) - set(QUESTION_TYPES))
        if missing or unknown:
            raise ValueError(f"plan table types must be exactly {', '.join(QUESTION_TYPES)}"
                             + (f"; missing: {', '.join(missing)}" if missing else "")
                             + (f"; unknown: {', '.join(unknown)}" if unknown else ""))
        return self

    def capabilities(self) -> set[str]:
        return {s.uses for p in self.types.values() for s in p.steps} | {s.uses for s in self.compound}


@lru_cache(maxsize=8)
def load_plan_table(path: str | Path | None = None) -> PlanTable:
    """The plan table at `path` (default: the bundled graph/planner/planner_table.yaml), validated."""
    p = Path(path) if path else DEFAULT_TABLE
    try:
        raw = yaml.safe_load(p.read_text(encoding="utf-8"))
    except OSError as e:
        raise ValueError(f"{p}: cannot read the plan table: {e}") from None
    except yaml.YAMLError as e:
        raise ValueError(f"{p}: not valid YAML: {e}") from None
    try:
        return PlanTable.model_validate(raw)
    except ValueError as e:
        raise ValueError(f"{p}: invalid plan table: {e}") from None
