"""Rollouts: K sampled trajectories per conversation from a model policy, in the real loop (the same graph, tools,
decision grammar and budgets as any run), each turn scored by the official per-turn scoring with the run's judge,
stored as ordinary runs (traces and requests) plus, per turn, its reward and the token record of every model
request (`rollouts.jsonl` in each run folder): the prompt's token ids, the ids the model produced and their
log-probabilities, as the backend returned them (`ChatReply.sampled`), so no learner tokenizes anything again.

    python -m glasses_rag.training.rollouts --model transformers:gemma.gguf+adapter=adapters/sft \\
        --chat-template gemma --data demo --task 2 --samples 4 --temperature 1.0 --seed 0 --out traces/rollouts

Sample k runs as run `<prefix>-s<k>` with seed `seed + k` (in-process: each request's generator is seeded by it and
the prompt's ids; from a server: the request's `seed`). A server records token ids only where it returns them
(vLLM >= 0.10.2 with the model config's `token_record`). The reward of a turn is its score (correct 1, "I don't
know" 0, wrong -1), minus `search_penalty` per search call when it is correct: MMSearch-R1's form (arXiv
2506.20670, §3: the penalty applies to right answers that searched, so a model is not taught to answer blind).
Running the same command again resumes: a turn with its record in `rollouts.jsonl` is not run again.
"""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from glasses_rag.models.vlm.base import ChatReply, SampledTokens, text_only_messages

REWARD_OF_SCORE = {"correct": 1.0, "missing": 0.0, "incorrect": -1.0}
RECORDS_FILE = "rollouts.jsonl"


class RolloutOptions(BaseModel):
    """How trajectories are sampled and rewarded."""

    samples: int = Field(4, ge=1, description="Trajectories per conversation (K).")
    temperature: float = Field(1.0, gt=0, le=2.0, description="Sampling temperature of every model request.")
    seed: int = Field(0, description="Sample k uses seed + k.")
    search_penalty: float = Field(
        0.0, ge=0, description="Subtracted from a right answer's reward per search call (MMSearch-R1's form)."
    )
    run_prefix: str = Field("rollout", description="Sample k runs as <run_prefix>-s<k>.")


class DecisionTokens(SampledTokens):
    """One model request of a turn as the model produced it: the token record plus what it was for."""

    purpose: str | None = Field(None, description="decide, answer, verify, ... (the trace's model call).")
    schema_name: str | None = Field(None, description="The reply schema's name (next_step: a decision).")
    text: str = ""
    messages: list[dict[str, Any]] = Field(
        default_factory=list,
        description="The request's messages as the model's chat template rendered them into prompt_ids (text only "
        "for a model that does not see the photo): TRL's conversational format, for the preference learners.",
    )


class TurnRollout(BaseModel):
    """One sampled trajectory of one turn: where it is, how it scored, and its requests' token records."""

    run_id: str
    sample: int
    seed: int
    session_id: str
    interaction_id: str
    turn_index: int
    score: str | None
    reward: float
    answer: str
    ended_by: str = Field("answer", description="Why the turn ended (answer, step_limit, time_budget, error).")
    tool_calls: int
    search_calls: int
    decisions: list[DecisionTokens]
    records_match: bool = Field(
        description="The records line up one to one with the trace's finished model calls (purposes filled in)."
    )


def search_calls(trace: Any) -> int:
    return sum(1 for ev in trace.tool_calls() if ev.tool.endswith("search") and ev.error is None)


def turn_reward(score: str | None, searches: int, penalty: float = 0.0) -> float:
    """The official per-turn score as a reward, less `penalty` per search call on a right answer.

    Example:
        >>> turn_reward("correct", 2, 0.1), turn_reward("missing", 2, 0.1), turn_reward("incorrect", 0)
        (0.8, 0.0, -1.0)
    """
    value = REWARD_OF_SCORE.get(score or "missing", 0.0)
    return round(value - penalty * searches, 6) if value > 0 else value


# ---- recording ----------------------------------------------------------------------------------------------


class RecordingBackend:
    """A ChatBackend that passes every request to `inner` and keeps the token record of each finished reply (in
    order, until `take()`); everything else is `inner`'s."""

    def __init__(self, inner: Any):
        self.inner = inner
        self._records: list[DecisionTokens | None] = []
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def complete(
        self,
        messages: list[dict],
        tools: list[dict] | None = None,
        max_tokens: int = 512,
        temperature: float = 0.0,
        response_schema: dict | None = None,
    ) -> ChatReply:
        reply = self.inner.complete(
            messages, tools=tools, max_tokens=max_tokens, temperature=temperature, response_schema=response_schema
        )
        schema = response_schema or {}
        record = None
        if reply.sampled is not None:
            sent = messages if getattr(self.inner, "supports_images", False) else text_only_messages(messages)
            record = DecisionTokens(
                **reply.sampled.model_dump(), schema_name=schema.get("name"), text=reply.text, messages=sent
            )
        with self._lock:
            self._records.append(record)
        return reply

    def take(self) -> list[DecisionTokens | None]:
        with self._lock:
            out, self._records = self._records, []
        return out


def turn_rollout(
    trace: Any, records: list[DecisionTokens | None], run_id: str, sample: int, seed: int, penalty: float
) -> TurnRollout:
    """A finished, scored turn and the records of its requests as a TurnRollout (purposes from the trace's
    finished model calls, when they line up)."""
    calls = [c for c in trace.model_calls() if not c.cancelled and c.error is None]
    match = len(calls) == len(records) and all(r is not None for r in records)
    decisions = [
        r.model_copy(update={"purpose": c.purpose if match else None})
        for r, c in zip(records, [*calls, *[None] * len(records)])
        if r is not None
    ]
    searches = search_calls(trace)
    return TurnRollout(
        run_id=run_id,
        sample=sample,
        seed=seed,
        session_id=trace.session_id,
        interaction_id=trace.interaction_id,
        turn_index=trace.turn_index,
        score=trace.score,
        reward=turn_reward(trace.score, searches, penalty),
        answer=trace.answer,
        ended_by=trace.ended_by,
        tool_calls=len(trace.tool_calls()),
        search_calls=searches,
        decisions=decisions,
        records_match=match,
    )


def set_seed(backend: Any, seed: int) -> None:
    """The seed of a backend's sampled requests: in-process, its `seed`; a server's, the request's `seed`."""
    inner = getattr(backend, "inner", backend)
    if isinstance(getattr(inner, "sampling", None), dict):
        inner.sampling["seed"] = seed
    else:
        inner.seed = seed


# ---- running conversations ------------------------------------------------------------------------------------


def scored(trace: Any, conv: Any, i: int, scorer: Callable[[Any], Any]) -> Any:
    """A finished turn's trace with its ground truth and, when it has one, its score."""
    trace.ground_truth = conv.answers[i] if i < len(conv.answers) else None
    trace.egocentric = conv.egocentric
    return scorer(trace) if trace.ground_truth is not None else trace


def run_conversations(
    agent: Any,
    convs: Iterable[Any],
    task: int,
    store: Any,
    scorer: Callable[[Any], Any],
    on_turn: Callable[[Any], None],
    skip: set[str] = frozenset(),  # type: ignore[assignment]
    history_answer: Callable[[str], str] = lambda a: a,
) -> None:
    """Every turn of `convs` in order, one conversation after another, as the run harness runs them (the photo
    prepared the same way, the history of earlier turns' answers), each trace scored, stored and handed to
    `on_turn`. A turn whose interaction id is in `skip` is not run again (its stored trace feeds the history).
    The harness is a layer above training; this is its sequential core, so that rollouts record each turn's
    requests as they happen."""
    from graph.agent import TurnInput
    from tools.base import HistoryTurn

    for conv in convs:
        photo = conv.photo()
        history: list[HistoryTurn] = []
        for i, turn in enumerate(conv.turns):
            trace = store.read(conv.session_id, i) if turn.interaction_id in skip else None
            if trace is None:
                trace = scored(agent.run_turn(TurnInput.of_turn(conv, i, task, photo, history)), conv, i, scorer)
                store.write(trace)
                on_turn(trace)
            shown = history_answer(trace.answer)
            history.append(HistoryTurn(question=turn.query or "", answer=shown, entity=trace.entity))


# ---- the rollouts ---------------------------------------------------------------------------------------------


def read_rollouts(folder: str | Path) -> list[TurnRollout]:
    """The records of one run folder (or of every run folder under `folder`), in file order; a torn last line
    (an interrupted run) is left out."""
    root = Path(folder)
    files = [root / RECORDS_FILE] if (root / RECORDS_FILE).is_file() else sorted(root.glob(f"*/{RECORDS_FILE}"))
    out = []
    for f in files:
        for line in f.read_text(encoding="utf-8").splitlines():
            try:
                out.append(TurnRollout.model_validate_json(line))
            except ValueError:
                continue
    return out


def _append(path: Path, rollout: TurnRollout) -> None:
    with path.open("a", encoding="utf-8") as f:
        f.write(rollout.model_dump_json() + "\n")
        f.flush()


def sample_runs(
    agent_config: Any,
    policy: Any,
    convs: Iterable[Any],
    task: int,
    out_dir: str | Path,
    opts: RolloutOptions,
    scoring: tuple[Any, Any],
) -> list[TurnRollout]:
    """K runs over `convs` by agents of `agent_config` with `policy` (a model policy from `recording_policy`: the
    model is loaded once for all K); `scoring` is (judge, truncator). Returns every turn's rollout, resumed ones
    included."""
    from glasses_rag.crag_mm.scoring import score_trace
    from graph.build import build_agent
    from traces.store import TraceStore

    judge, truncator = scoring
    convs = list(convs)  # each sample runs them all
    out: list[TurnRollout] = []
    recorder = policy.backend
    for k in range(opts.samples):
        run_id, seed = f"{opts.run_prefix}-s{k}", opts.seed + k
        store = TraceStore(Path(out_dir), run_id)
        done = read_rollouts(store.dir)
        agent = build_agent(agent_config, policy=policy, run_id=run_id, task=task)
        set_seed(recorder, seed)
        recorder.take()  # a warm-up's requests are no turn's

        def on_turn(
            trace: Any, run_id: str = run_id, seed: int = seed, k: int = k, store: Any = store, done: list = done
        ) -> None:
            rollout = turn_rollout(trace, recorder.take(), run_id, k, seed, opts.search_penalty)
            _append(store.dir / RECORDS_FILE, rollout)
            done.append(rollout)

        run_conversations(
            agent,
            convs,
            task,
            store,
            lambda t: score_trace(t, judge=judge, truncator=truncator),
            on_turn,
            skip={r.interaction_id for r in done},
            history_answer=truncator.truncate,
        )
        out += done
    return out


def recording_policy(model: Any, temperature: float) -> Any:
    """The model policy of ModelConfig `model` at `temperature`, its backend a RecordingBackend."""
    from glasses_rag.policies.model.policy import make_model_policy

    policy = make_model_policy(model.model_copy(update={"temperature": temperature}))
    policy.backend = RecordingBackend(policy.backend)
    return policy


# ---- CLI --------------------------------------------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m glasses_rag.training.rollouts", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="the policy: a model spec or a .json/.toml model config")
    p.add_argument("--chat-template", help="the model's chat template (a bundled name, a .jinja file)")
    p.add_argument("--data", default="demo", help="a bundled question set or a dataset folder")
    p.add_argument("--task", type=int, default=2, choices=[1, 2, 3])
    p.add_argument("--limit", type=int, help="conversations (default: all)")
    p.add_argument("--tools", default="image_search,ocr,web_search", help="the tools offered")
    p.add_argument("--budget", type=float, default=60.0, help="seconds per turn")
    p.add_argument("--max-steps", type=int, default=4, help="tool calls per turn")
    p.add_argument("--max-tokens", type=int, default=512, help="tokens per model reply")
    for name, field in RolloutOptions.model_fields.items():
        kind: Any = {int: int, float: float}.get(field.annotation, str)  # type: ignore[arg-type]
        p.add_argument("--" + name.replace("_", "-"), type=kind, default=field.default, help=field.description)
    p.add_argument("--out", type=Path, default=Path("traces/rollouts"), help="where the runs go")
    return p


def summary(rollouts: list[TurnRollout]) -> str:
    """Counts per sample and the turns whose samples disagree (the ones a learner can learn from)."""
    by_turn: dict[str, set[float]] = {}
    for r in rollouts:
        by_turn.setdefault(r.interaction_id, set()).add(r.reward)
    scores = {s: sum(r.score == s for r in rollouts) for s in ("correct", "missing", "incorrect")}
    decisions = sum(len(r.decisions) for r in rollouts)
    return (
        f"{len(rollouts)} trajectories of {len(by_turn)} turns: {scores}; {decisions} recorded requests; "
        f"{sum(len(v) > 1 for v in by_turn.values())} turns whose samples differ in reward"
    )


def main(argv: list[str] | None = None) -> int:
    from glasses_rag.crag_mm.dataset import load_conversations
    from glasses_rag.crag_mm.scoring import make_judge, make_truncator
    from glasses_rag.models.vlm import parse_spec
    from glasses_rag.retrieval.search import SearchConfig
    from graph.config import AgentConfig, BudgetConfig, ToolsConfig

    args = parser().parse_args(argv)
    opts = RolloutOptions(**{k: getattr(args, k) for k in RolloutOptions.model_fields})
    try:
        paths = dataset_paths_of(args.data)
    except ValueError as e:
        raise SystemExit(f"{args.data}: {e}") from e
    split = {1: "single_turn", 2: "single_turn", 3: "multi_turn"}[args.task]
    convs = load_conversations(getattr(paths, split), limit=args.limit)
    extra = {"chat_template": args.chat_template} if args.chat_template else {}
    model = parse_spec(args.model).model_copy(update={"max_tokens": args.max_tokens, **extra})
    config = AgentConfig(
        policy=model,
        search=SearchConfig(index_dir=paths.root),
        self_check="off",
        tools=ToolsConfig(allowed=args.tools.split(",")),
        budget=BudgetConfig(budget_s=args.budget, max_steps=args.max_steps),
    )
    rollouts = sample_runs(
        config,
        recording_policy(model, opts.temperature),
        convs,
        args.task,
        args.out,
        opts,
        (make_judge("rule"), make_truncator(None)),
    )
    print(summary(rollouts))
    print(f"runs and {RECORDS_FILE} under {args.out}")
    return 0


def dataset_paths_of(spec: str) -> Any:
    """The dataset of a bundled question set, built once where `graph.run` builds it (the demo under data/demo, the
    others beside it), else a question set's folder: its root or one of its dataset folders (single_turn/,
    multi_turn/). A content folder whose name cannot be a build folder is a ValueError."""
    from glasses_rag.crag_mm.builds import content_build, dataset_paths, ensure_dataset, question_set_root
    from glasses_rag.crag_mm.content import find_content, load_content
    from glasses_rag.crag_mm.demo import demo_paths, ensure_demo

    if spec == "demo":
        return ensure_demo()
    content = find_content(spec)
    if content is None:
        return dataset_paths(question_set_root(spec) or spec)
    return ensure_dataset(load_content(content), content_build(content, demo_paths().root.parent))


if __name__ == "__main__":
    sys.exit(main())
