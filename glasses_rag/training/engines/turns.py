"""One CRAG-MM turn as an RL rollout: the agent (the same graph, tools, grammar and budgets as an evaluation) runs
it with a given model policy, the official per-turn scoring scores it, and the reward is that score (+1 right,
0 "I don't know", -1 wrong), optionally less a penalty per search call (MMSearch-R1's form).

Every engine consumes the same record per decision: the prompt's token ids, the completion's ids as the model
produced them, their log-probabilities (`glasses_rag.models.vlm.base.SampledTokens`) and the reward
(`DecisionRecord`). An engine that trains on one sequence per trajectory (verl) gets the decisions packed (`pack`).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from glasses_rag.models.vlm.base import SampledTokens

SCORE_REWARD = {"correct": 1.0, "missing": 0.0, "incorrect": -1.0}


class EngineRow(BaseModel):
    """One turn to roll out: what the agent is given, and the ground truth it is scored against."""

    task: int = Field(2, ge=1, le=3)
    session_id: str
    interaction_id: str
    question: str
    ground_truth: str | None = None
    image: str | None = Field(None, description="The photo's path (read with the harness's safe loader).")
    history: list[dict[str, Any]] = Field(default_factory=list, description="Earlier turns: {question, answer}.")


class TurnSetup(BaseModel):
    """How the agent runs a rollout's turn: as the evaluation runs it."""

    tools: list[str] = Field(default_factory=lambda: ["image_search", "ocr", "web_search"])
    budget_s: float = Field(60.0, gt=0)
    max_steps: int = Field(4, ge=0)
    index_dir: str | None = Field(None, description="The search index (default: the search config's).")
    judge: str = "rule"
    search_penalty: float = Field(0.0, ge=0, description="Subtracted from the reward per search call.")
    max_tokens: int = Field(512, ge=1)
    temperature: float = Field(1.0, ge=0)


class DecisionRecord(BaseModel):
    """One decision of a rollout as learners take it: the tokens and the reward of its trajectory."""

    interaction_id: str
    step: int
    tokens: SampledTokens
    reward: float


class PackedTrajectory(BaseModel):
    """A trajectory as one sequence: the first prompt, then each completion (mask 1, its log-probabilities) and the
    tokens that came between it and the next decision's prompt (mask 0). `packed` decisions of `decisions`: a
    decision whose prompt does not continue the sequence (a chat template that rewrites earlier turns) ends it, and
    the rest of the turn counts as the environment's."""

    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    response_logprobs: list[float]
    packed: int
    decisions: int


def pack(records: list[SampledTokens]) -> PackedTrajectory:
    """The decisions of one turn as one sequence (see PackedTrajectory); nothing is re-tokenized."""
    if not records:
        raise ValueError("a trajectory without a decision cannot be packed")
    first = records[0]
    out = PackedTrajectory(
        prompt_ids=list(first.prompt_ids),
        response_ids=list(first.completion_ids),
        response_mask=[1] * len(first.completion_ids),
        response_logprobs=list(first.logprobs),
        packed=1,
        decisions=len(records),
    )
    for rec in records[1:]:
        context = out.prompt_ids + out.response_ids
        if rec.prompt_ids[: len(context)] != context:
            break
        between = rec.prompt_ids[len(context) :]
        out.response_ids += between + list(rec.completion_ids)
        out.response_mask += [0] * len(between) + [1] * len(rec.completion_ids)
        out.response_logprobs += [0.0] * len(between) + list(rec.logprobs)
        out.packed += 1
    return out


def turn_reward(trace: Any, penalty: float = 0.0) -> float:
    """The CRAG-MM score of a scored turn, less `penalty` per search call."""
    searches = sum(1 for s in trace.steps if getattr(s, "search", None) is not None)  # image or text search hops
    return SCORE_REWARD.get(trace.score or "missing", 0.0) - penalty * searches


def turn_input(row: EngineRow) -> Any:
    """The agent's input for `row` (the photo read with the harness's loader: bounded, never raising)."""
    from glasses_rag.core.images import load_image
    from glasses_rag.core.types import HistoryTurn
    from graph.agent import TurnInput

    image, info = load_image(row.image) if row.image else (None, None)
    history = [HistoryTurn(question=h["question"], answer=h["answer"]) for h in row.history]
    kw = {"image_info": info} if info is not None else {}
    return TurnInput(
        task=row.task,
        session_id=row.session_id,
        interaction_id=row.interaction_id,
        turn_index=len(history),
        question=row.question,
        image=image,
        history=history,
        **kw,
    )


def run_turn(policy: Any, row: EngineRow, setup: TurnSetup, search: Any = None) -> tuple[Any, float]:
    """Run `row` with `policy` in the agent (self-check off: the reward judges the draft), score it with the
    setup's judge; returns the scored trace and its reward."""
    from glasses_rag.crag_mm.scoring import make_judge, make_truncator, score_trace
    from glasses_rag.retrieval.search import SearchConfig
    from graph.build import build_agent
    from graph.config import AgentConfig, BudgetConfig, ToolsConfig

    search_cfg = SearchConfig(index_dir=setup.index_dir) if setup.index_dir else SearchConfig()
    config = AgentConfig(
        search=search_cfg,
        tools=ToolsConfig(allowed=setup.tools),
        budget=BudgetConfig(budget_s=setup.budget_s, max_steps=setup.max_steps),
        self_check="off",
        warm_up=False,
    )
    agent = build_agent(config, policy=policy, search=search, run_id="rollout", task=row.task)
    trace = agent.run_turn(turn_input(row))
    trace.ground_truth = row.ground_truth
    score_trace(trace, make_judge(setup.judge), make_truncator(None))
    return trace, turn_reward(trace, setup.search_penalty)


__all__ = [
    "DecisionRecord",
    "EngineRow",
    "PackedTrajectory",
    "TurnSetup",
    "pack",
    "run_turn",
    "turn_input",
    "turn_reward",
]
