"""One pydantic configuration for the whole agent: policy, tools, search, budgets, thresholds, models.

`graph.build.build_agent(AgentConfig)` turns it into an Agent; the CLI, the starter-kit adapter, the
benchmarks and the tests only translate their inputs into it. `fingerprint()` identifies a configuration
(resume refuses to mix traces made under different ones).
"""

from __future__ import annotations

import hashlib
from typing import Any, Literal

import pydantic_core
from pydantic import BaseModel, ConfigDict, Field, model_validator

from glasses_rag.models.resources import ModelPaths
from glasses_rag.models.vlm import ModelConfig
from glasses_rag.policies.rules.rule_planner import RulePlannerConfig
from glasses_rag.retrieval.search import SearchConfig
from tools.registry import SEARCH_BACKEND, ToolProfile


class BudgetConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    budget_s: float = Field(
        10.0, gt=0, le=3600, description="Per-turn time budget in seconds (CRAG-MM: 10).", allow_inf_nan=False
    )
    max_steps: int = Field(8, ge=0, le=64, description="Maximum tool calls per turn.")
    answer_reserve_s: float | None = Field(
        None,
        ge=0,
        description="Seconds kept for answer + self-check "
        "(default: min(1.5, 20% of the budget); raise it for slow models).",
        allow_inf_nan=False,
    )
    max_question_chars: int = Field(
        2000, ge=1, description="Longer questions are cut, and the cut is noted in the trace."
    )
    max_answer_chars: int = Field(
        600, ge=20, description="Longer answers are cut (only the first 75 tokens are judged)."
    )
    graph_recursion_limit: int = Field(
        200,
        ge=10,
        description="LangGraph supersteps per turn; the plan node stops "
        "calling tools when few remain (RemainingSteps), so a turn never hits it.",
    )


# The tools an agent offers when no benchmark says otherwise: those that reach the run's search backend, never the
# open web (CRAG-MM's rules; glasses_rag.crag_mm's Benchmark declares this very profile). `build_agent` takes any
# other benchmark's profile from its caller (the harness reads it from the benchmark registry).
DEFAULT_TOOL_PROFILE = ToolProfile(name="crag-mm", allows=frozenset({SEARCH_BACKEND}))


class ToolsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    allowed: list[str] | None = Field(None, description="Narrow the task's allow-list to these tools.")
    modules: list[str] = Field(default_factory=list, description="Extra modules defining @tool functions.")
    profile: str = Field(
        DEFAULT_TOOL_PROFILE.name,
        min_length=1,
        description="The benchmark whose tool profile the run follows: only the tools that reach what it allows "
        "are offered (SuperGlasses: the open-web tools, not the CRAG-MM search tools).",
    )


class AgentConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    preset: str | None = Field(
        None,
        description="A published agent design to run: react, rule, mmrag-baseline, "
        "superlens, unsw-verify, eurecom, no-retrieval (python -m glasses_rag.policies.presets describes "
        "them), or the path of a preset YAML file. It sets the tools, their order, the "
        "self-check and its thresholds; steps that need a model use --model, and run as "
        "named heuristic stand-ins without one.",
    )
    policy: str | ModelConfig = Field(
        "rule",
        description="'rule' (the embedded rule-based planner, a heuristic), a "
        "model spec string (openai:<url>#<model>, transformers:<folder>, "
        "llamacpp:<file.gguf>) or a ModelConfig.",
    )
    models: ModelPaths = Field(default_factory=ModelPaths)
    search: SearchConfig = Field(default_factory=SearchConfig)
    tools: ToolsConfig = Field(default_factory=ToolsConfig)
    budget: BudgetConfig = Field(default_factory=BudgetConfig)
    planner: RulePlannerConfig = Field(default_factory=RulePlannerConfig)
    abstain_below: float = Field(
        0.35,
        ge=0,
        le=1,
        description="Self-check confidence under which the answer is 'I don't know'.",
        allow_inf_nan=False,
    )
    self_check: Literal["on", "off"] = Field(
        "on",
        description="Verify each draft before answering (the model's "
        "self-check with a model policy, else the heuristic evidence check).",
    )
    verify_mode: Literal["single", "dual-cove"] = Field(
        "single", description="Model self-check: one verification round trip, or dual path + chain-of-verification."
    )
    warm_up: bool = Field(True, description="Load models and build indexes before the first turn.")
    cpu_threads: int = Field(
        1,
        ge=1,
        le=256,
        description="Threads per local model call (BLAS, torch, onnxruntime): "
        "one keeps concurrent turns from oversubscribing the CPU.",
    )

    @model_validator(mode="before")
    @classmethod
    def _without_retired_fields(cls, data: Any) -> Any:
        """A configuration written before a field left it (an older run.json's) still reads: the field is dropped."""
        if not isinstance(data, dict):
            return data
        for section, fields in RETIRED_FIELDS.items():
            part = data.get(section)
            names = {name for _, name, _ in fields}
            if isinstance(part, dict) and names & set(part):
                data = {**data, section: {k: v for k, v in part.items() if k not in names}}
        return data

    def fingerprint(self) -> str:
        """A short hash of everything that changes what the agent answers."""
        # no preset hashes as before presets existed (run folders made then still resume); a preset counts with
        # its file's content
        data = with_retired_fields(self.model_dump(mode="json", exclude={"preset"} if self.preset is None else None))
        data = without_unset_placements(data)
        dump = pydantic_core.to_json(data).decode()  # what model_dump_json writes, the retired fields put back
        if self.preset is not None:
            from glasses_rag.policies.presets import preset_digest

            dump += preset_digest(self.preset)
        return hashlib.sha256(dump.encode()).hexdigest()[:16]


# Fields that left the configuration, hashed at the place and value they always had, so that a fingerprint stays
# what it was and run folders made before still resume: section -> (the field it followed, its name, its value).
# `search.demo_dir` (where the demo is built) became the run's --demo-dir: data is prepared by the harness, never by
# an agent (issue 38). A configuration that still has one (an older run.json's) reads, without it.
RETIRED_FIELDS: dict[str, list[tuple[str, str, Any]]] = {"search": [("index_dir", "demo_dir", None)]}


# Fields that say where something runs or what is recorded, not what the agent answers: left out of the fingerprint
# while unset or off, so fingerprints stay what they were before the field existed (section -> field names).
PLACEMENT_FIELDS: dict[str, tuple[str, ...]] = {"models": ("reranker_device",), "policy": ("token_record",)}


def without_unset_placements(data: dict[str, Any]) -> dict[str, Any]:
    """`data` without the placement fields that are None or False."""
    out = dict(data)
    for section, names in PLACEMENT_FIELDS.items():
        if isinstance(out.get(section), dict):
            out[section] = {k: v for k, v in out[section].items() if not (k in names and v in (None, False))}
    return out


def with_retired_fields(data: dict[str, Any]) -> dict[str, Any]:
    """`data` (a configuration dumped as JSON) with each retired field back in its old place."""
    out = dict(data)
    for section, fields in RETIRED_FIELDS.items():
        part = dict(out[section])
        for after, name, value in fields:
            keys = list(part)
            at = keys.index(after) + 1
            part = {**{k: part[k] for k in keys[:at]}, name: value, **{k: part[k] for k in keys[at:]}}
        out[section] = part
    return out
