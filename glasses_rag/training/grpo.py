"""GRPO (Shao et al. 2024, arXiv 2402.03300) with TRL's GRPOTrainer and its `rollout_func`: the rows are exported
decision prompts; for each, the rollout samples G decisions with the model being trained, under the decision
grammar, finishes each turn through the agent (the same graph, tools and budgets), and gives TRL the ids it sampled
and the turn's official score as the reward (MMSearch-R1's form with `search_penalty`, arXiv 2506.20670).

    python -m glasses_rag.training.grpo --data sft.jsonl --runs traces/runs/teacher --dataset demo \\
        --model $GGUF --init-adapter adapters/sft --out adapters/grpo --max-steps 16

How a row's turn is finished: the agent runs the turn from its start with a backend that answers the decisions
before the row's step with the recorded ones (the export's completions: the calls run again, deterministic), the
row's step with a decision the model samples from the row's prompt itself (so the prompt TRL trains on is the row,
token for token; the live prompt differs from it only in the budget line's seconds), and every later decision with
a sample of the model from the live prompt. TRL's contract (trl 1.16, `GRPOTrainer(rollout_func=...)`): the
function gets the prompts of this process (each repeated `num_generations` times) and returns per prompt the
`prompt_ids`, `completion_ids` and `logprobs` (the sampling distribution's: the grammar's mask at the temperature);
the other fields (here `reward`) reach the reward functions. TRL computes the loss (default `dapo`), the group
advantages and, with `beta` > 0, the KL to the reference.

On a CPU: float32, LoRA, no gradient checkpointing, no vLLM (the rollout runs in-process on the trained weights,
so no importance-sampling correction is needed: the sampler is the policy). TRL counts every completion as
"clipped" (`completions/clipped_ratio` 1.0): its check looks for an end-of-turn id, and a grammar ends a decision
without one (the model writes none; the ids are what it wrote).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from glasses_rag.models.vlm.base import ChatReply, SampledTokens
from glasses_rag.training.learners import LearnerConfig, cpu_args, train_and_save, trainable_model
from glasses_rag.training.rollouts import scored, search_calls, turn_reward

DECISION_SCHEMA_NAME = "next_step"


class GrpoOptions(BaseModel):
    generations: int = Field(4, ge=2, description="Decisions sampled per prompt (G), one group.")
    temperature: float = Field(1.0, gt=0, le=2.0)
    search_penalty: float = Field(0.0, ge=0, description="Subtracted per search call from a right answer.")
    max_completion_length: int = Field(512, ge=8, description="Tokens per sampled decision at most.")
    seed: int = 0


def prompt_key(messages: list[dict[str, Any]]) -> str:
    return json.dumps([[m.get("role"), m.get("content")] for m in messages], ensure_ascii=False)


@dataclass
class RowContext:
    """What finishing a row's turn needs: the conversation, the turn, what the agent was given as history, the
    recorded decisions before the row's step, and the row's prompt."""

    conv: Any
    turn_index: int
    history: list[Any]
    replay: list[str]
    step: int
    prompt: list[dict[str, Any]]


def grpo_rows(rows: list[dict[str, Any]], traces: list[Any], convs: list[Any]) -> tuple[list[dict], dict[str, Any]]:
    """The GRPO dataset (`{"prompt": messages}`) and each prompt's RowContext, from export rows (decision examples
    of glasses_rag.training.export) of the turns in `traces` (the run they were exported from). Rows the agent
    cannot reach by replaying (counterfactuals, self-checks) are left out."""
    by_turn = {t.interaction_id: t for t in traces}
    by_session = {c.session_id: c for c in convs}
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        meta = row.get("meta", {})
        label = str(meta.get("label", ""))
        if meta.get("purpose") == "verify" or label.startswith(("counterfactual", "check")):
            continue
        if meta.get("interaction_id") in by_turn and meta.get("session_id") in by_session:
            groups.setdefault(meta["interaction_id"], []).append(row)
    out, contexts = [], {}
    for iid, group in groups.items():
        group.sort(key=lambda r: r["meta"]["step"])
        trace = by_turn[iid]
        done = [r["completion"][0]["content"] for r in group]
        for row in group:
            step = int(row["meta"]["step"])
            ctx = RowContext(
                by_session[trace.session_id], trace.turn_index, trace.history, done[:step], step, row["prompt"]
            )
            contexts[prompt_key(row["prompt"])] = ctx
            out.append({"prompt": row["prompt"]})
    return out, contexts


class ReplayBackend:
    """The backend of a GRPO rollout's turn: decision requests before the row's step get the recorded decisions,
    the row's step is sampled by `inner` from the row's prompt, later requests go to `inner` as they are."""

    def __init__(self, inner: Any):
        self.inner = inner
        self.ctx: RowContext | None = None
        self.sampled: SampledTokens | None = None
        self.decided = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def start(self, ctx: RowContext, seed: int) -> None:
        self.ctx, self.sampled, self.decided = ctx, None, 0
        self.inner.seed = seed

    def complete(
        self,
        messages: list[dict],
        tools: list[dict] | None = None,
        max_tokens: int = 512,
        temperature: float = 0.0,
        response_schema: dict | None = None,
    ) -> ChatReply:
        kw: dict[str, Any] = dict(
            tools=tools, max_tokens=max_tokens, temperature=temperature, response_schema=response_schema
        )
        schema = response_schema or {}
        if self.ctx is not None and schema.get("name") == DECISION_SCHEMA_NAME:
            i, self.decided = self.decided, self.decided + 1
            if i < self.ctx.step:
                text = self.ctx.replay[i]
                return ChatReply(text=text, mode="structured", finish_reason="stop", model="replay")
            if i == self.ctx.step:
                reply = self.inner.complete(self.ctx.prompt, **kw)
                self.sampled = reply.sampled
                return reply
        return self.inner.complete(messages, **kw)


@dataclass
class GrpoRollout:
    """TRL's `rollout_func` over the agent: `__call__(prompts, trainer)`."""

    agent_config: Any
    contexts: dict[str, RowContext]
    opts: GrpoOptions
    task: int
    scoring: tuple[Any, Any]
    model_config: dict[str, Any] = field(default_factory=dict)  # ModelPolicy options (max_tokens, ...)
    log: list[dict[str, Any]] = field(default_factory=list)
    _agent: Any = None
    _backend: Any = None
    _calls: int = 0
    _photos: dict[str, Any] = field(default_factory=dict)

    def bind(self, model: Any, tokenizer: Any) -> None:
        """The agent over the model being trained (built once; its prefix cache emptied: the weights moved)."""
        from glasses_rag.models.vlm.transformers_local import TransformersVLMBackend
        from glasses_rag.policies.model.policy import ModelPolicy
        from graph.build import build_agent

        if self._backend is None:
            inner = TransformersVLMBackend.from_model(model.get_base_model(), tokenizer, name="grpo-policy")
            self._backend = ReplayBackend(inner)
            policy = ModelPolicy(
                self._backend, name="grpo-policy", temperature=self.opts.temperature, **self.model_config
            )
            self._agent = build_agent(self.agent_config, policy=policy, run_id="grpo", task=self.task)
        self._backend.inner.prefix_cache.clear()

    def one(self, prompt: list[dict[str, Any]], seed: int) -> dict[str, Any]:
        """One rollout: the row's turn finished with a sampled decision at the row's step; its ids and reward."""
        from glasses_rag.crag_mm.scoring import score_trace
        from graph.agent import TurnInput

        ctx = self.contexts[prompt_key(prompt)]
        judge, truncator = self.scoring
        photo = self._photos.get(ctx.conv.session_id) or ctx.conv.photo()
        self._photos[ctx.conv.session_id] = photo
        self._backend.start(ctx, seed)
        trace = self._agent.run_turn(TurnInput.of_turn(ctx.conv, ctx.turn_index, self.task, photo, ctx.history))
        trace = scored(trace, ctx.conv, ctx.turn_index, lambda t: score_trace(t, judge=judge, truncator=truncator))
        sampled = self._backend.sampled
        reward: float | None = self.reward_of(trace)
        if sampled is None:  # the turn ended before the row's step: nothing sampled, no reward (TRL skips it)
            stop = self._backend.inner.grammars.stop_ids[0]
            sampled = SampledTokens(prompt_ids=[stop], completion_ids=[stop], logprobs=[0.0], logprob_source="masked")
            reward = None
        self.log.append(
            {
                "seed": seed,
                "step": ctx.step,
                "answer": trace.answer,
                "score": trace.score,
                "reward": reward,
                "completion_ids": sampled.completion_ids,
            }
        )
        return {"sampled": sampled, "reward": reward}

    def reward_of(self, trace: Any) -> float:
        """The turn's reward: its official score, less the search penalty on a right answer."""
        return turn_reward(trace.score, search_calls(trace), self.opts.search_penalty)

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list]:
        model = trainer.accelerator.unwrap_model(trainer.model)
        self.bind(model, trainer.processing_class)
        was_training = model.training
        model.eval()  # no LoRA dropout while sampling
        try:
            self._calls += 1
            done = [self.one(p, self.opts.seed + 10_000 * self._calls + k) for k, p in enumerate(prompts)]
        finally:
            model.train(was_training)
        return {
            "prompt_ids": [d["sampled"].prompt_ids for d in done],
            "completion_ids": [d["sampled"].completion_ids for d in done],
            "logprobs": [d["sampled"].logprobs for d in done],
            "reward": [d["reward"] for d in done],
        }


def rollout_reward(prompts: list, completions: list, reward: list[float | None], **_: Any) -> list[float | None]:
    """The reward TRL reads: the score each rollout's turn got (None: no score, the completion is skipped)."""
    return list(reward)


def grpo_trainer(cfg: LearnerConfig, opts: GrpoOptions, rows: list[dict], rollout: GrpoRollout) -> Any:
    import datasets
    from trl import GRPOConfig, GRPOTrainer

    from glasses_rag.training.finetune import stop_callback

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is marked experimental in trl 1.16
    model, tok, peft_config = trainable_model(cfg)
    args = GRPOConfig(
        **{**cpu_args(cfg), "per_device_train_batch_size": opts.generations},
        num_generations=opts.generations,
        max_completion_length=opts.max_completion_length,
        temperature=opts.temperature,
        beta=cfg.beta,
        shuffle_dataset=True,
    )
    return GRPOTrainer(
        model=model,
        reward_funcs=[rollout_reward],
        args=args,
        train_dataset=datasets.Dataset.from_list(rows),
        processing_class=tok,
        peft_config=peft_config,
        rollout_func=rollout,
        callbacks=[stop_callback()],
    )


def train_grpo(cfg: LearnerConfig, opts: GrpoOptions, rows: list[dict], rollout: GrpoRollout) -> dict[str, Any]:
    """GRPO on `rows` (grpo_rows) with `rollout`; writes the adapter and its card (with the rollouts' log).

    Example:
        rows, contexts = grpo_rows(export_rows, teacher_traces, conversations)
        rollout = GrpoRollout(agent_config, contexts, GrpoOptions(), task=2, scoring=(judge, truncator))
        train_grpo(LearnerConfig(model=gguf, init_adapter="adapters/sft", out="adapters/grpo", beta=0.0), ...)
    """
    from glasses_rag.training.finetune import callers_ctrl_c

    if not rows:
        raise ValueError("no GRPO row: no exported decision of the given run could be replayed")
    with callers_ctrl_c():
        trainer = grpo_trainer(cfg, opts, rows, rollout)
        card = train_and_save(trainer, cfg, "grpo", {"rows": len(rows), "options": opts.model_dump()})
    rewards = [e["reward"] for e in rollout.log]
    card["rollouts"] = {"count": len(rollout.log), "rewards": {str(v): rewards.count(v) for v in set(rewards)}}
    if card["finished"]:
        Path(cfg.out, "rollouts.jsonl").write_text("".join(json.dumps(e) + "\n" for e in rollout.log))
    return card


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m glasses_rag.training.grpo", description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, help="an export (glasses_rag.training.export) of --runs")
    p.add_argument("--runs", required=True, help="the run folder it was exported from")
    p.add_argument("--dataset", default="demo", help="the run's question set or dataset folder")
    p.add_argument("--task", type=int, default=2, choices=[1, 2, 3])
    p.add_argument("--tools", default="image_search,ocr,web_search")
    p.add_argument("--budget", type=float, default=60.0)
    for name, fld in [*GrpoOptions.model_fields.items(), *LearnerConfig.model_fields.items()]:
        if name == "seed" and name in LearnerConfig.model_fields and name in GrpoOptions.model_fields:
            continue
        kind: Any = {int: int, float: float}.get(fld.annotation, str)  # type: ignore[arg-type]
        p.add_argument("--" + name.replace("_", "-"), type=kind, required=fld.is_required(), help=fld.description)
    p.add_argument("--seed", type=int, default=0)
    return p


def main(argv: list[str] | None = None) -> int:
    from glasses_rag.crag_mm.dataset import load_conversations
    from glasses_rag.crag_mm.scoring import make_judge, make_truncator
    from glasses_rag.retrieval.search import SearchConfig
    from glasses_rag.superglasses.logs import read_run
    from glasses_rag.training.rollouts import dataset_paths_of
    from graph.config import AgentConfig, BudgetConfig, ToolsConfig

    args = vars(parser().parse_args(argv))
    paths = dataset_paths_of(args["dataset"])
    convs = list(load_conversations(getattr(paths, "multi_turn" if args["task"] == 3 else "single_turn")))
    rows = [json.loads(line) for line in Path(args["data"]).read_text(encoding="utf-8").splitlines() if line]
    data, contexts = grpo_rows(rows, read_run(args["runs"], []), convs)
    config = AgentConfig(
        search=SearchConfig(index_dir=paths.root),
        self_check="off",
        tools=ToolsConfig(allowed=args["tools"].split(",")),
        budget=BudgetConfig(budget_s=args["budget"]),
    )
    opts = GrpoOptions.model_validate({k: v for k, v in args.items() if k in GrpoOptions.model_fields and v})
    cfg = LearnerConfig.model_validate({k: v for k, v in args.items() if k in LearnerConfig.model_fields and v})
    rollout = GrpoRollout(config, contexts, opts, args["task"], (make_judge("rule"), make_truncator(None)))
    card = train_grpo(cfg.model_copy(update={"beta": args["beta"] or 0.0}), opts, data, rollout)
    print(f"{card['steps']} GRPO steps on {len(data)} prompts, {card['rollouts']}, {card['seconds']} s -> {cfg.out}")
    return 0 if card["finished"] else 130


if __name__ == "__main__":
    sys.exit(main())
