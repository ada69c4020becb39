"""Rejection-sampling fine-tuning (expert iteration: STaR, Zelikman et al. 2022; ReST-EM, Singh et al. 2023,
arXiv 2312.06585): keep, per turn, the best-scoring of the sampled trajectories, export them with the training
export (glasses_rag.training.export: the same prompts, completions and labels as any run's), and fine-tune the base
model on them, a few rounds, each round's samples from the latest model, each fine-tune from the base.

    python -m glasses_rag.training.rft --runs traces/rollouts --out rft.jsonl     # one round's data
    python -m glasses_rag.training.finetune --data rft.jsonl --model $GGUF --out adapters/rft
    python -m benchmarks.distill --learn rft --rounds 2                           # the whole loop, measured

Best = the highest reward (the official score, less the search penalty); ties go to a turn that did not end in
an error, then to fewer tool calls, then to the earlier sample. A turn keeps at most `per_turn` trajectories
(distinct answers and calls). The export labels them as it labels any run: a turn judged right teaches its answer;
one whose best sample said "I don't know" teaches that; one where every sample was wrong teaches "I don't know"
(`wrong: idk`). So the data says where this model, sampled, reaches the right answer, and where it does not.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from glasses_rag.training.rollouts import TurnRollout, read_rollouts


class RftOptions(BaseModel):
    per_turn: int = Field(1, ge=1, description="Trajectories kept per turn (the best, distinct ones).")
    rounds: int = Field(1, ge=1, description="Sample, select, fine-tune from the base: this many times.")


def best_trajectories(rollouts: list[TurnRollout], per_turn: int = 1) -> list[TurnRollout]:
    """Per turn, the best `per_turn` distinct trajectories (by reward, then fewer tool calls, then sample),
    turns in the order first seen.

    Example:
        >>> from glasses_rag.training.rollouts import TurnRollout
        >>> def r(k, reward, calls, answer):
        ...     return TurnRollout(run_id=f"s{k}", sample=k, seed=k, session_id="s", interaction_id="t",
        ...         turn_index=0, score=None, reward=reward, answer=answer, tool_calls=calls, search_calls=calls,
        ...         decisions=[], records_match=True)
        >>> best = [r(0, 0.0, 0, "I don't know"), r(1, 1.0, 2, "A"), r(2, 1.0, 1, "A"), r(3, 1.0, 1, "B")]
        >>> [x.sample for x in best_trajectories(best, per_turn=3)]  # sample 1 repeats sample 2
        [2, 3, 0]
    """
    by_turn: dict[str, list[TurnRollout]] = {}
    for r in rollouts:
        by_turn.setdefault(r.interaction_id, []).append(r)
    out = []
    for trajs in by_turn.values():
        kept: list[TurnRollout] = []
        seen: set[tuple] = set()
        # a turn that ended in an error teaches nothing (the export leaves it out): last among equal rewards
        for r in sorted(trajs, key=lambda t: (-t.reward, t.ended_by == "error", t.tool_calls, t.sample)):
            key = (r.answer, tuple(d.text for d in r.decisions))
            if key in seen:
                continue
            seen.add(key)
            kept.append(r)
            if len(kept) == per_turn:
                break
        out += kept
    return out


def traces_of(chosen: list[TurnRollout], runs_dir: str | Path) -> list[Any]:
    """The stored traces of the chosen trajectories (`<runs_dir>/<run_id>/`), in their order; a trajectory kept
    twice for one turn gets its copy a distinct session (`~<k>`), so the export keeps both."""
    from traces.store import TraceStore

    out, used = [], set()
    for r in chosen:
        trace = TraceStore(Path(runs_dir), r.run_id).read(r.session_id, r.turn_index)
        if trace is None:
            continue
        if (r.session_id, r.turn_index) in used:
            trace = trace.model_copy(update={"session_id": f"{r.session_id}~{r.sample}"})
        used.add((r.session_id, r.turn_index))
        out.append(trace)
    return out


def rft_examples(runs_dir: str | Path, opts: RftOptions, export: Any) -> tuple[list[Any], dict[str, Any]]:
    """The training examples of one round (glasses_rag.training.export.Example) from the rollout runs under
    `runs_dir`, exported with ExportOptions `export`, and what was kept."""
    from glasses_rag.training.export import examples_from_run

    rollouts = read_rollouts(runs_dir)
    chosen = best_trajectories(rollouts, opts.per_turn)
    traces = traces_of(chosen, runs_dir)
    examples = examples_from_run(traces, export)
    counts = {
        "trajectories": len(rollouts),
        "turns": len({r.interaction_id for r in rollouts}),
        "kept": len(chosen),
        "kept_by_score": {s: sum(r.score == s for r in chosen) for s in ("correct", "missing", "incorrect")},
        "examples": len(examples),
    }
    return examples, counts


def rounds(
    opts: RftOptions,
    sample: Callable[[str | None, int], Path],
    train: Callable[[Path, int], str],
    first_sampler: str | None,
    export: Any,
    work: Path,
) -> tuple[str, list[dict[str, Any]]]:
    """ReST-EM's loop: round r samples with the latest model (`sample(adapter, r)` -> the folder of its rollout
    runs; round 1 with `first_sampler`), keeps the best trajectories, writes them (`<work>/rft-r<r>.jsonl`) and
    fine-tunes the base on them (`train(data, r)` -> the adapter folder). Returns the last adapter and each
    round's counts."""
    from glasses_rag.training.export import write_examples

    adapter, log = first_sampler, []
    for r in range(1, opts.rounds + 1):
        runs = sample(adapter, r)
        examples, counts = rft_examples(runs, opts, export)
        if not examples:
            raise ValueError(f"RFT round {r}: no example from {runs} (no trajectory was kept)")
        data = write_examples(examples, work / f"rft-r{r}.jsonl")
        adapter = train(data, r)
        log.append({"round": r, **counts, "adapter": adapter})
    assert adapter is not None
    return adapter, log


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m glasses_rag.training.rft", description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", required=True, help="a folder of rollout runs (glasses_rag.training.rollouts)")
    p.add_argument("--out", required=True, help="the JSONL export to write")
    p.add_argument("--per-turn", type=int, default=1, help="trajectories kept per turn (default 1)")
    p.add_argument("--tools", default="image_search,ocr,web_search", help="the tools the model is offered")
    p.add_argument("--budget", type=float, default=60.0, help="the turn budget the prompts state (seconds)")
    return p


def main(argv: list[str] | None = None) -> int:
    from glasses_rag.training.export import ExportOptions, write_examples

    args = parser().parse_args(argv)
    export = ExportOptions(tools=args.tools.split(","), budget_s=args.budget)
    examples, counts = rft_examples(args.runs, RftOptions(per_turn=args.per_turn), export)
    write_examples(examples, args.out)
    print(f"{counts} -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
