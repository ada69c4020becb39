"""The trace of one turn: every step the agent took, comparable hop by hop to SuperGlasses search logs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from tools.base import Box, Verdict

SCHEMA_VERSION = "1.0"
SCHEMA_FILE = Path(__file__).with_name("turn_trace.schema.json")


class TraceHit(BaseModel):
    source: Literal["image_kg", "web"]
    score: float
    url: str | None = None
    title: str | None = None
    entity_name: str | None = None
    snippet: str = Field("", description="First 300 characters of the result text.")
    rerank_score: float | None = None


class StepError(BaseModel):
    kind: str = Field(description="unknown_tool | not_allowed | bad_arguments | tool_exception | timeout | policy_error | graph_error | bad_input")
    message: str


class Step(BaseModel):
    index: int
    node: Literal["plan", "act", "answer", "self_check", "final"]
    decision: str = Field(description="What was decided: 'call <tool>', 'answer', 'abstain', 'budget: ...'.")
    tool: str | None = None
    arguments: dict[str, Any] = Field(default_factory=dict)
    sub_question: str | None = None
    search_keywords: str | None = None
    needs_retrieval: bool | None = None
    rationale: str | None = None
    method: str | None = Field(None, description="Implementation that ran, e.g. 'rapidocr', 'heuristic:saliency-crop'.")
    summary: str | None = None
    results: list[TraceHit] = Field(default_factory=list)
    detected_box: Box | None = None
    ocr_text: str | None = None
    verdict: Verdict | None = None
    policy_ms: float | None = Field(None, description="Time the policy took to make this step's decision.")
    latency_ms: float = Field(0.0, description="Time the tool itself took.")
    error: StepError | None = None


class TurnTrace(BaseModel):
    schema_version: str = SCHEMA_VERSION
    run_id: str
    task: int
    session_id: str
    interaction_id: str
    turn_index: int
    question: str
    has_image: bool
    image_note: str | None = Field(None, description="Why the image is absent or unusable, if it is.")
    labels: dict[str, str | None] = Field(default_factory=dict, description="domain, query_category, dynamism, image_quality")
    egocentric: bool | None = Field(None, description="Egocentric (glasses) image, per the dataset: image bytes and no image_url.")
    policy: str
    search_backend: str
    budget_s: float
    max_steps: int
    steps: list[Step] = Field(default_factory=list)
    answer: str
    abstained: bool
    confidence: float | None = None
    entity: str | None = Field(None, description="The entity the answer is about; carried into later turns' history.")
    ended_by: Literal["answer", "step_limit", "time_budget", "error"]
    latency_ms: float
    ground_truth: str | None = None
    score: Literal["correct", "missing", "incorrect"] | None = None
    judge: str | None = None
    error: str | None = None


def export_json_schema(path: Path = SCHEMA_FILE) -> Path:
    path.write_text(json.dumps(TurnTrace.model_json_schema(), indent=2, sort_keys=True) + "\n")
    return path


if __name__ == "__main__":
    print(export_json_schema())
