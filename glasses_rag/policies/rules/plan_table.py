"""The rule-based planner's plan table: question type -> ordered tool capabilities and answer sources.

The table is data (glasses_rag/policies/rules/planner_table.yaml), validated here: every step names a capability the
planner fills the inputs of (tools/capability.py:BUILTIN), every condition, query kind and answer source is one the
planner's catalog lists by name (glasses_rag/policies/rules/catalog.py), and every question type has a row.
`load_plan_table()` reads the bundled table; a different file can be passed (RulePlannerConfig.plan_table).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from glasses_rag.core.registry import Registry
from glasses_rag.policies.rules.catalog import planner_catalog
from glasses_rag.policies.rules.questions import QUESTION_TYPES
from tools.capability import BUILTIN as CAPABILITIES

DEFAULT_TABLE = Path(__file__).with_name("planner_table.yaml")


def _registered(kind: str, table: Registry, name: str, allowed: set[str] | None = None) -> str:
    names = set(table) if allowed is None else allowed
    if name not in names:
        raise ValueError(f"unknown {kind} {name!r}; the planner has {', '.join(sorted(names))}")
    return name


def answer_sources() -> set[str]:
    """The sources a plan row may answer from (listed as final)."""
    return {n for n, s in planner_catalog().sources.items() if s.final}


class PlanStep(BaseModel):
    model_config = ConfigDict(extra="forbid")

    uses: str = Field(description="A capability tag; every allowed tool with it is called.")
    when: list[str] = Field(default_factory=list, description="All must hold for the step to be due.")
    with_previous: bool = Field(False, description="Runs in the same round as the step before it (independent calls).")
    query: str | None = Field(None, description="What the planner passes as `query` to the tool (a query kind).")

    @field_validator("when")
    @classmethod
    def _known_conditions(cls, v: list[str]) -> list[str]:
        return [_registered("plan condition", planner_catalog().conditions, c) for c in v]

    @field_validator("query")
    @classmethod
    def _known_query(cls, v: str | None) -> str | None:
        return None if v is None else _registered("query kind", planner_catalog().queries, v)

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
    answer: list[str] = Field(min_length=1)

    @field_validator("answer")
    @classmethod
    def _known_sources(cls, v: list[str]) -> list[str]:
        return [_registered("answer source", planner_catalog().sources, a, answer_sources()) for a in v]


class PlanTable(BaseModel):
    model_config = ConfigDict(extra="forbid")

    compound: list[PlanStep] = Field(default_factory=list, description="Steps for a question that asks several things.")
    types: dict[str, QuestionPlan]

    @model_validator(mode="after")
    def _every_type(self) -> PlanTable:
        missing = sorted(set(QUESTION_TYPES) - set(self.types))
        unknown = sorted(set(self.types) - set(QUESTION_TYPES))
        if missing or unknown:
            raise ValueError(
                f"plan table types must be exactly {', '.join(QUESTION_TYPES)}"
                + (f"; missing: {', '.join(missing)}" if missing else "")
                + (f"; unknown: {', '.join(unknown)}" if unknown else "")
            )
        return self

    def capabilities(self) -> set[str]:
        return {s.uses for p in self.types.values() for s in p.steps} | {s.uses for s in self.compound}


@lru_cache(maxsize=8)
def load_plan_table(path: str | Path | None = None) -> PlanTable:
    """The plan table at `path` (default: the bundled glasses_rag/policies/rules/planner_table.yaml), validated."""
    from glasses_rag.core.yaml_data import read_yaml

    p = Path(path) if path else DEFAULT_TABLE
    try:
        raw = read_yaml(p, 1 << 20)  # no aliases, bounded nesting and size (a user's --plan-table)
    except OSError as e:
        raise ValueError(f"{p}: cannot read the plan table: {e}") from None
    try:
        return PlanTable.model_validate(raw)
    except ValueError as e:
        raise ValueError(f"{p}: invalid plan table: {e}") from None
