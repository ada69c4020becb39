"""Preferences from rollouts: DPO pairs and KTO rows, trained with TRL's DPOTrainer / KTOTrainer and a peft LoRA
adapter (by default the SFT student's, trained further, with a frozen copy of it as the reference).

    python -m glasses_rag.training.preferences --kind dpo --runs traces/rollouts --model $GGUF \\
        --init-adapter adapters/sft --out adapters/dpo

- **DPO pairs.** For two trajectories of the same turn with different rewards, the first decision where they part
  from the same prompt: chosen = the higher reward's decision, rejected = the other's (Rafailov et al. 2023). The
  same prompt means the same token ids, except the seconds of the budget line ("Budget left: ... 57 s"), which
  wall time moves between two runs; the pair then takes the chosen decision's prompt. At most `per_turn` pairs a
  turn, the widest reward gaps first.
- **KTO rows.** Every decision of every trajectory, desirable when its trajectory's reward is > 0 (Ethayarajh et
  al. 2024): an answer that scored, and the calls that led to it.

Rows are TRL's conversational preference format (the prompt messages the model's chat template rendered into the
recorded prompt ids, the decision's text) and TRL prepares them as usual, except that each row's ids are the
recorded ones, not its text tokenized again (`recorded_tokens`): a sampled decision is not always written in the
tokens its text tokenizes to, and the learner trains on the ids the model produced (no end-of-turn token after
them: the grammar ended the decision, the model wrote none).
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Literal

from glasses_rag.training.learners import LearnerConfig, cpu_args, train_and_save, trainable_model
from glasses_rag.training.rollouts import DecisionTokens, TurnRollout, read_rollouts

Kind = Literal["dpo", "kto"]
_SECONDS = re.compile(r"\d+(?= s\b)")


def prompt_key(d: DecisionTokens) -> str:
    """The prompt as text with the budget line's seconds blanked (the one part wall time changes)."""
    parts = []
    for m in d.messages:
        content = m.get("content") if isinstance(m.get("content"), str) else json.dumps(m.get("content"))
        parts.append(f"{m.get('role')}\x00{content}")
    if not parts:
        return ",".join(map(str, d.prompt_ids))
    parts[-1] = _SECONDS.sub("#", parts[-1])
    return "\x01".join(parts)


def first_divergence(a: TurnRollout, b: TurnRollout) -> tuple[DecisionTokens, DecisionTokens] | None:
    """The first decisions of `a` and `b` that differ while their prompts are the same (see prompt_key); None
    when the trajectories part elsewhere (a different prompt first) or never."""
    for da, db in zip(a.decisions, b.decisions):
        if prompt_key(da) != prompt_key(db):
            return None
        if da.completion_ids != db.completion_ids:
            return da, db
    return None


def by_turn(rollouts: list[TurnRollout]) -> dict[str, list[TurnRollout]]:
    out: dict[str, list[TurnRollout]] = {}
    for r in rollouts:
        if r.records_match and r.decisions:
            out.setdefault(r.interaction_id, []).append(r)
    return out


def dpo_pairs(rollouts: list[TurnRollout], per_turn: int = 4) -> list[dict[str, Any]]:
    """TRL preference rows (prompt, chosen, rejected) with the recorded ids, at most `per_turn` a turn."""
    rows = []
    for turn, trajs in by_turn(rollouts).items():
        found: dict[tuple, dict[str, Any]] = {}
        pairs = sorted(itertools.combinations(trajs, 2), key=lambda p: -abs(p[0].reward - p[1].reward))
        for a, b in pairs:
            if a.reward == b.reward:
                continue
            hi, lo = (a, b) if a.reward > b.reward else (b, a)
            split = first_divergence(hi, lo)
            if split is None:
                continue
            chosen, rejected = split
            key = (prompt_key(chosen), tuple(chosen.completion_ids), tuple(rejected.completion_ids))
            found.setdefault(key, pair_row(chosen, rejected, turn, hi.reward, lo.reward))
        rows += list(found.values())[:per_turn]
    return rows


def pair_row(chosen: DecisionTokens, rejected: DecisionTokens, turn: str, hi: float, lo: float) -> dict[str, Any]:
    return {
        "prompt": chosen.messages,
        "chosen": [{"role": "assistant", "content": chosen.text}],
        "rejected": [{"role": "assistant", "content": rejected.text}],
        "prompt_ids": chosen.prompt_ids,
        "chosen_ids": chosen.completion_ids,
        "rejected_ids": rejected.completion_ids,
        "meta": {"interaction_id": turn, "chosen_reward": hi, "rejected_reward": lo},
    }


def kto_rows(rollouts: list[TurnRollout]) -> list[dict[str, Any]]:
    """TRL unpaired preference rows (prompt, completion, label) for every recorded decision; duplicates (the same
    prompt, decision and label) once."""
    rows: dict[tuple, dict[str, Any]] = {}
    for turn, trajs in by_turn(rollouts).items():
        for r in trajs:
            for d in r.decisions:
                label = r.reward > 0
                row = {
                    "prompt": d.messages,
                    "completion": [{"role": "assistant", "content": d.text}],
                    "label": label,
                    "prompt_ids": d.prompt_ids,
                    "completion_ids": d.completion_ids,
                    "meta": {"interaction_id": turn, "reward": r.reward, "sample": r.sample},
                }
                rows.setdefault((prompt_key(d), tuple(d.completion_ids), label), row)
    return list(rows.values())


def _key(messages: Any) -> str:
    return json.dumps(messages, sort_keys=True, ensure_ascii=False)


def recorded_ids(rows: list[dict[str, Any]], kind: Kind) -> dict[str, list[int]]:
    """What TRL's tokenization of each row should give: the prompt messages -> the recorded prompt ids; the prompt
    and a decision -> those ids followed by the decision's sampled ids."""
    table: dict[str, list[int]] = {}
    outs = (
        [("chosen", "chosen_ids"), ("rejected", "rejected_ids")]
        if kind == "dpo"
        else [("completion", "completion_ids")]
    )
    for row in rows:
        table[_key(row["prompt"])] = list(row["prompt_ids"])
        for text, ids in outs:
            table[_key(row["prompt"] + row[text])] = list(row["prompt_ids"]) + list(row[ids])
    return table


@contextmanager
def recorded_tokens(kind: Kind, table: dict[str, list[int]]) -> Iterator[None]:
    """Inside, TRL's dataset preparation for `kind` (tokenize, then its own filtering, KTO's KL completions and
    desirability check) takes each row's ids from `table` (recorded_ids) instead of tokenizing its text again: a
    sampled decision's ids are not always the ones its text tokenizes to, and the learner must train on the ids
    the model produced. Rows not in the table are tokenized by TRL as usual."""
    import trl.trainer.dpo_trainer as dpo_module
    import trl.trainer.kto_trainer as kto_module

    module: Any = dpo_module if kind == "dpo" else kto_module
    original = module._tokenize

    def tokenize(processing_class: Any, input: Any, **kw: Any) -> dict[str, list]:
        ids = table.get(_key(input)) if isinstance(input, list) else None
        return {"input_ids": list(ids)} if ids is not None else original(processing_class, input, **kw)

    module._tokenize = tokenize
    try:
        yield
    finally:
        module._tokenize = original


def trainer(kind: Kind, cfg: LearnerConfig, model: Any, tok: Any, peft_config: Any, rows: list[dict]) -> Any:
    """TRL's DPOTrainer or KTOTrainer on `rows` (their TRL columns), LoRA, CPU-safe arguments; with an adapter
    being trained further (no peft_config), TRL's reference is a frozen copy of it."""
    import datasets
    from trl import DPOConfig, DPOTrainer, KTOConfig, KTOTrainer

    from glasses_rag.training.finetune import stop_callback

    cols = ("prompt", "chosen", "rejected") if kind == "dpo" else ("prompt", "completion", "label")
    ds = datasets.Dataset.from_list([{c: r[c] for c in cols} for r in rows])
    # the reference's log-probabilities once, before training (the reference is frozen: the same figures, one
    # forward pass less per step, a third of a step on a CPU)
    common = {
        **cpu_args(cfg),
        "beta": cfg.beta,
        "max_length": cfg.max_length,
        "dataset_num_proc": None,
        "precompute_ref_log_probs": True,
    }
    if kind == "dpo":
        return DPOTrainer(
            model=model,
            args=DPOConfig(**common),
            train_dataset=ds,
            processing_class=tok,
            peft_config=peft_config,
            callbacks=[stop_callback()],
        )
    return KTOTrainer(
        model=model,
        args=KTOConfig(**common),
        train_dataset=ds,
        processing_class=tok,
        peft_config=peft_config,
        callbacks=[stop_callback()],
    )


def train_preferences(kind: Kind, rows: list[dict[str, Any]], cfg: LearnerConfig) -> dict[str, Any]:
    """Train on `rows` (dpo_pairs or kto_rows), write the adapter and its card; returns the card.

    Example:
        train_preferences("dpo", dpo_pairs(read_rollouts("traces/rollouts")), LearnerConfig(model=gguf,
                          init_adapter="adapters/sft", out="adapters/dpo", max_steps=16))
    """
    from glasses_rag.training.finetune import callers_ctrl_c

    if not rows:
        raise ValueError(f"no {kind.upper()} row to train on")
    if kind == "kto" and len({r["label"] for r in rows}) < 2:
        raise ValueError(f"KTO needs desirable and undesirable rows: {len(rows)} row(s), all labelled alike")
    model, tok, peft_config = trainable_model(cfg)
    with callers_ctrl_c():
        with recorded_tokens(kind, recorded_ids(rows, kind)):
            learner = trainer(kind, cfg, model, tok, peft_config, rows)
        data: dict[str, Any] = {"rows": len(rows), "trained_rows": len(learner.train_dataset)}
        if kind == "kto":
            data["desirable"] = sum(r["label"] for r in rows)
        return train_and_save(learner, cfg, kind, data)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m glasses_rag.training.preferences", description=__doc__.split("\n\n")[0])
    p.add_argument("--kind", choices=["dpo", "kto"], required=True)
    p.add_argument("--runs", required=True, help="a folder of rollout runs (glasses_rag.training.rollouts)")
    p.add_argument("--per-turn", type=int, default=4, help="DPO pairs per turn at most (default 4)")
    p.add_argument("--rows-out", help="also write the rows to this JSONL file")
    for name, field in LearnerConfig.model_fields.items():
        kind: Any = {int: int, float: float}.get(field.annotation, str)  # type: ignore[arg-type]
        p.add_argument("--" + name.replace("_", "-"), type=kind, required=field.is_required(), help=field.description)
    return p


def main(argv: list[str] | None = None) -> int:
    args = vars(parser().parse_args(argv))
    rollouts = read_rollouts(args["runs"])
    rows = dpo_pairs(rollouts, args["per_turn"]) if args["kind"] == "dpo" else kto_rows(rollouts)
    if args["rows_out"]:
        with open(args["rows_out"], "w", encoding="utf-8") as f:
            f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    print(f"{len(rows)} {args['kind'].upper()} row(s) from {len(rollouts)} trajectories")
    cfg = LearnerConfig.model_validate({k: v for k, v in args.items() if k in LearnerConfig.model_fields and v})
    card = train_preferences(args["kind"], rows, cfg)
    print(f"{card['steps']} steps on {card['data']['rows']} rows, {card['seconds']} s -> {cfg.out}")
    return 0 if card["finished"] else 130


if __name__ == "__main__":
    sys.exit(main())
