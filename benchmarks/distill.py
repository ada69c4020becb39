"""The training road in one command: a teacher's run, the SFT student, students that learn from the score (rejection
sampling, preferences, GRPO), and the base model and every student side by side in the real model loop on questions
no training ever saw, with paired bootstrap intervals.

    python -m benchmarks.distill                                   # --learn rft: base, sft, rft on the unseen set
    python -m benchmarks.distill --learn sft,rft,dpo,grpo --json out.json
    python -m benchmarks.distill --validate --learn rft,dpo        # choose options: the evaluation set unread

1. Teacher: the rule-based planner (a heuristic; `--teacher` takes a model spec) runs the training conversations of
   `--data`, scored by the official per-turn scoring (the offline rule judge); the export
   (glasses_rag.training.export) makes one example per decision; the SFT student is TRL SFTTrainer + peft LoRA on
   it (glasses_rag.training.finetune).
2. Rollouts (glasses_rag.training.rollouts), when a learner needs them: the SFT student samples `--samples`
   trajectories per training conversation at `--temperature`, in the real loop; each turn's reward is its score
   (less `--search-penalty` per search of a right answer); each request's token ids are recorded.
3. Learners: `rft` keeps the best trajectory per turn and fine-tunes the base on it (`--rounds`, each round sampling
   with the latest model: ReST-EM); `dpo` and `kto` train the SFT adapter further on pairs / rows of the rollouts
   (TRL DPOTrainer / KTOTrainer, the SFT adapter frozen as the reference); `grpo` trains it with TRL's GRPOTrainer,
   a rollout_func sampling each row's decision and finishing the turn through the agent, on the decision prompts
   of the turns whose rollouts disagreed (where a group can have an advantage).
4. Calibration (`--calibrate folds`; default off: each model's own "I don't know" only, no threshold): each model's
   threshold on its answers' token probability, chosen on k folds of the training conversations, each fold run by
   the same recipe trained without it (cross-fitting); a threshold is always a confidence a kept answer had.
5. Evaluation: the base model and each student run the same evaluation turns (the model makes every decision, the
   tools are real, decisions grammar-constrained, text-only), scored by the official per-turn scoring.

Unseen: by default the evaluation is the bundled set `unseen` (entities, photos, pages and questions written for
this purpose, used by no training and no tuning); `--eval-data same` carves it from `--data` instead (one pictured
entity in three with its conversations). Options are compared with `--validate` only (a split of the training
conversations); the evaluation set is run once per released default. docs/training.md has the protocol and the
measured runs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

for _k, _v in {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "ANONYMIZED_TELEMETRY": "False",
    "TRL_EXPERIMENTAL_SILENCE": "1",
}.items():
    os.environ.setdefault(_k, _v)

from benchmarks.distill_data import (  # noqa: E402
    Split,
    conversations,
    dataset,
    gemma_gguf,
    longest_decision,
    make_split,
    run,
    scoring,
    session_entities,
)
from benchmarks.distill_table import METRICS, figures, intervals, json_result, seeds_table, table, turn_flags  # noqa: E402

LEARNERS = ("sft", "rft", "dpo", "kto", "grpo")
DEFAULT_LEARN = "rft"
DEFAULT_TOOLS = "image_search,ocr,web_search"
DEFAULT_EVAL = "unseen"
DEFAULT_VALIDATION = "tuning-extra"
DEFAULT_TRAIN_TURNS = 29  # the earlier road's training conversations; K rollouts each fit the 45-minute budget
__all__ = ["METRICS", "Split", "main", "make_split"]


class Road:
    """One run of the road: its options, data, work folder, and the machine's load at each phase."""

    def __init__(self, args: argparse.Namespace, work: Path):
        self.args = args
        self.work = work
        self.load: list[float] = []
        self.t0 = time.perf_counter()

    def note(self, what: str) -> None:
        load = os.getloadavg()[0]
        self.load.append(load)
        minutes = (time.perf_counter() - self.t0) / 60
        print(f"  [{minutes:5.1f} min, load {load:.2f}] {what}", file=sys.stderr, flush=True)


# ---- runs ----------------------------------------------------------------------------------------------------------


def agent_config(args: argparse.Namespace, index_dir: Path, policy: Any, abstain_below: float | None = None) -> Any:
    from glasses_rag.retrieval.search import SearchConfig
    from graph.config import AgentConfig, BudgetConfig, ToolsConfig

    extra = {} if abstain_below is None else {"abstain_below": abstain_below}
    return AgentConfig(
        policy=policy,
        search=SearchConfig(index_dir=index_dir),
        self_check="off",
        **extra,
        tools=ToolsConfig(allowed=args.tools.split(",")),
        budget=BudgetConfig(budget_s=args.budget, max_steps=args.max_steps, answer_reserve_s=args.answer_reserve),
    )


def model_config(args: argparse.Namespace, adapter: str | None, name: str, tokens: bool = False, **kw: Any) -> Any:
    from glasses_rag.models.vlm import ModelConfig, parse_spec, with_adapter

    conf = {"answer_confidence": "tokens"} if tokens else {}
    if args.model:
        base = parse_spec(args.model).model_dump(exclude_unset=True)
        fields = {"text_only": True, "max_tokens": args.max_tokens, "name": name, **conf, **kw}
        cfg = ModelConfig.model_validate({**base, **fields})
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
        **kw,
    )


# ---- the road ------------------------------------------------------------------------------------------------------


def teach(road: Road, paths: Any, convs: list[Any]) -> tuple[Path, list[Any], dict[str, Any]]:
    """The teacher's run on the training conversations, exported; returns the export, the traces, the counts."""
    from glasses_rag.training.export import ExportOptions, examples_from_run, write_examples

    args = road.args
    policy = args.teacher if args.teacher != "rule" else "rule"
    report, traces, cpu = run(agent_config(args, paths.root, policy), convs, args.task, road.work, "teacher")
    opts = ExportOptions(tools=args.tools.split(","), budget_s=args.budget)
    examples = examples_from_run(traces, opts)
    out = write_examples(examples, road.work / "sft.jsonl")
    return out, traces, {"turns": len(traces), "examples": len(examples), "teacher": report.overall.truthfulness}


def without_sessions(data: Path, sessions: set[str], out: Path) -> Path:
    """An export less the examples of `sessions` (a fold's training data)."""
    lines = [ln for ln in data.read_text(encoding="utf-8").splitlines() if ln]
    kept = [ln for ln in lines if json.loads(ln)["meta"]["session_id"].split("~")[0] not in sessions]
    if not kept:
        raise SystemExit(f"{data}: no example left without {len(sessions)} conversation(s): raise --train-limit")
    out.write_text("".join(ln + "\n" for ln in kept), encoding="utf-8")
    return out


def finetune_on(road: Road, data: Path, out: Path, seed: int, steps: int | None = None) -> dict[str, Any]:
    from glasses_rag.training.finetune import FinetuneConfig, finetune

    args = road.args
    cfg = FinetuneConfig(
        data=str(data),
        model=args.model_path or str(gemma_gguf()),
        out=str(out),
        max_steps=steps or args.steps,
        grad_accum=1,
        seed=seed,
        threads=args.threads,
        chat_template="gemma" if not args.model else None,
    )
    return finished_card(out, road, cfg.max_steps) or finetune(cfg)


def finished_card(out: Path, road: Road, steps: int) -> dict[str, Any] | None:
    """The card of a student this work folder already holds, finished with `steps` steps (the same command again
    reuses it, and its training time is the one it took), else None."""
    card = Path(out) / "card.json"
    if not card.is_file():
        return None
    data = json.loads(card.read_text(encoding="utf-8"))
    if not data.get("finished"):
        return None
    if data.get("max_steps") != steps:
        raise SystemExit(
            f"{out} holds a student trained {data.get('max_steps')} steps, not {steps}: use another --work"
        )
    road.note(f"reused {out} (trained before: {data.get('seconds', 0):.0f} s)")
    return data


def sample(road: Road, paths: Any, convs: list[Any], adapter: str, tag: str, seed: int) -> Path:
    """The rollouts of the student `adapter` on `convs` (K runs under `<work>/<tag>/`)."""
    from glasses_rag.training.rollouts import RolloutOptions, recording_policy, sample_runs

    args = road.args
    opts = RolloutOptions(
        samples=args.samples, temperature=args.temperature, seed=seed, search_penalty=args.search_penalty
    )
    served = {"token_record": True} if (args.model or "").startswith("openai:") else {}  # the server's ids
    policy = recording_policy(model_config(args, adapter, f"sampler-{tag}", seed=seed, **served), args.temperature)
    config = agent_config(road.args, paths.root, policy.name, abstain_below=0.0)
    out = road.work / tag
    rollouts = sample_runs(config, policy, convs, args.task, out, opts, scoring())
    from glasses_rag.training.rollouts import summary

    road.note(f"rollouts {tag}: {summary(rollouts)}")
    return out


# ---- the students ----------------------------------------------------------------------------------------------------


class Students:
    """Trains the students of one seed (each learner's recipe as a function of the conversations left out, so the
    calibration folds can retrain it without theirs)."""

    def __init__(self, road: Road, paths: Any, convs: list[Any], seed: int):
        self.road, self.paths, self.convs, self.seed = road, paths, convs, seed
        self.work = road.work / f"seed{seed}"
        self.work.mkdir(parents=True, exist_ok=True)
        self.cards: dict[str, dict[str, Any]] = {}
        self.sft_data: Path | None = None
        self.teacher: list[Any] = []
        self.rollouts: Path | None = None
        self.sft_full = ""
        self.failed: dict[str, str] = {}

    def base_data(self) -> None:
        self.sft_data, self.teacher, info = teach(self.road, self.paths, self.convs)
        self.road.note(f"teacher: {info}")

    def sft(self, out_of: set[str], tag: str = "") -> str:
        assert self.sft_data is not None
        data = self.sft_data if not out_of else without_sessions(self.sft_data, out_of, self.work / f"sft{tag}.jsonl")
        out = self.work / f"sft{tag}"
        self.cards[f"sft{tag}"] = finetune_on(self.road, data, out, self.seed)
        self.road.note(f"sft{tag} trained ({self.cards[f'sft{tag}']['seconds']:.0f} s)")
        return str(out)

    def sample_from(self, adapter: str) -> Path:
        if self.rollouts is None:
            self.rollouts = sample(self.road, self.paths, self.convs, adapter, f"seed{self.seed}/rollouts", self.seed)
        return self.rollouts

    def rft(self, sampler: str, out_of: set[str], tag: str = "") -> str:
        from glasses_rag.training.export import ExportOptions
        from glasses_rag.training.rft import RftOptions, rounds

        args = self.road.args
        export = ExportOptions(tools=args.tools.split(","), budget_s=args.budget)

        def draw(adapter: str | None, r: int) -> Path:
            if r == 1:
                return self.sample_from(sampler)
            assert adapter is not None
            return sample(self.road, self.paths, self.convs, adapter, f"seed{self.seed}/rollouts-r{r}{tag}", self.seed)

        def train(data: Path, r: int) -> str:
            data = without_sessions(data, out_of, data.with_suffix(".fold.jsonl")) if out_of else data
            out = self.work / f"rft{tag}-r{r}"
            self.cards[f"rft{tag}"] = finetune_on(self.road, data, out, self.seed, args.rft_steps)
            self.road.note(f"rft{tag} round {r} trained")
            return str(out)

        adapter, log = rounds(RftOptions(rounds=args.rounds), draw, train, sampler, export, self.work)
        self.cards[f"rft{tag}"]["rounds"] = log
        return adapter

    def preference(self, kind: str, init: str, out_of: set[str], tag: str = "") -> str:
        from glasses_rag.training.preferences import dpo_pairs, kto_rows, train_preferences
        from glasses_rag.training.rollouts import read_rollouts

        rollouts = [r for r in read_rollouts(self.sample_from(init)) if r.session_id not in out_of]
        rows = dpo_pairs(rollouts) if kind == "dpo" else kto_rows(rollouts)
        cfg = self.learner_config(kind + tag, init)
        done = finished_card(Path(cfg.out), self.road, cfg.max_steps)
        self.cards[kind + tag] = done or train_preferences(kind, rows, cfg)  # type: ignore[arg-type]
        self.road.note(f"{kind}{tag} trained on {len(rows)} rows")
        return cfg.out

    def grpo(self, init: str, out_of: set[str], tag: str = "") -> str:
        from glasses_rag.training.grpo import GrpoOptions, GrpoRollout, grpo_rows, train_grpo
        from glasses_rag.training.rollouts import read_rollouts

        args = self.road.args
        rollouts = read_rollouts(self.sample_from(init))
        rewards: dict[str, set[float]] = {}
        for r in rollouts:
            rewards.setdefault(r.interaction_id, set()).add(r.reward)
        disagree = {k for k, v in rewards.items() if len(v) > 1}  # where a group can have an advantage
        assert self.sft_data is not None
        rows = [json.loads(ln) for ln in self.sft_data.read_text(encoding="utf-8").splitlines() if ln]
        rows = [r for r in rows if r["meta"]["session_id"] not in out_of]
        picked = [r for r in rows if r["meta"]["interaction_id"] in disagree] or rows
        data, contexts = grpo_rows(picked, self.teacher, self.convs)
        opts = GrpoOptions(
            generations=args.generations,
            temperature=args.temperature,
            search_penalty=args.search_penalty,
            max_completion_length=args.max_tokens,
            seed=self.seed,
        )
        config = agent_config(args, self.paths.root, model_config(args, init, "grpo"), abstain_below=0.0)
        rollout = GrpoRollout(config, contexts, opts, args.task, scoring(), {"max_tokens": args.max_tokens})
        cfg = self.learner_config("grpo" + tag, init).model_copy(update={"beta": 0.0, "max_steps": args.grpo_steps})
        done = finished_card(Path(cfg.out), self.road, cfg.max_steps)
        self.cards["grpo" + tag] = done or train_grpo(cfg, opts, data, rollout)
        self.road.note(f"grpo{tag} trained on {len(data)} prompts ({len(disagree)} turns disagreed)")
        return cfg.out

    def learner_config(self, name: str, init: str) -> Any:
        from glasses_rag.training.learners import LearnerConfig

        args = self.road.args
        return LearnerConfig(
            model=args.model_path or str(gemma_gguf()),
            out=str(self.work / name),
            init_adapter=init,
            chat_template="gemma" if not args.model else None,
            max_steps=args.pref_steps,
            seed=self.seed,
            threads=args.threads,
        )

    def train(self, learn: list[str], out_of: set[str] = frozenset(), tag: str = "") -> dict[str, str]:  # type: ignore[assignment]
        """Every student of `learn` (the SFT student always: the others start from it or sample with it)."""
        sft = self.sft(out_of, tag)
        if not tag:
            self.sft_full = sft  # the sampler of the rollouts every learner shares
        out = {"sft": sft}
        recipes = {
            "rft": lambda: self.rft(self.sft_full, out_of, tag),
            "dpo": lambda: self.preference("dpo", sft, out_of, tag),
            "kto": lambda: self.preference("kto", sft, out_of, tag),
            "grpo": lambda: self.grpo(sft, out_of, tag),
        }
        for name in learn:
            try:
                out[name] = recipes[name]()
            except ValueError as e:  # nothing to learn from (no pair, no kept trajectory): said, not hidden
                self.failed[name + tag] = str(e)
                self.road.note(f"{name}{tag}: not trained: {e}")
        return out


# ---- calibration and evaluation --------------------------------------------------------------------------------------


def folds_of(convs: list[Any], k: int) -> list[set[str]]:
    """k folds of the training conversations (every k-th conversation, in dataset order)."""
    return [{c.session_id for c in convs[j::k]} for j in range(k)]


def calibrate(road: Road, students: Students, learn: list[str]) -> dict[str, Any]:
    """Each model's threshold from cross-fitted folds: for fold j, the model's recipe trained without fold j runs
    fold j (answer confidence from its tokens, no threshold); the thresholds come from the points of all folds
    (glasses_rag.training.calibrate.choose_threshold: never a confidence no kept answer had)."""
    from glasses_rag.training.calibrate import choose_threshold, points_from_traces, probabilities_of

    args = road.args
    points: dict[str, list[Any]] = {m: [] for m in ["base", "sft", *learn]}
    traced: dict[str, list[Any]] = {}  # every fold's traces of a model, for the kind of its confidences
    for j, fold in enumerate(folds_of(students.convs, args.folds)):
        fold_convs = [c for c in students.convs if c.session_id in fold]
        adapters = {"base": None, **students.train(learn, out_of=fold, tag=f"-fold{j}")}
        for name, adapter in adapters.items():
            if name == "base" and j > 0:  # the base model trained on nothing: one run of every conversation
                continue
            convs = students.convs if name == "base" else fold_convs
            cfg = agent_config(args, students.paths.root, model_config(args, adapter, name, tokens=True), 0.0)
            _, traces, _ = run(cfg, convs, args.task, students.work, f"calibrate-{name}-fold{j}")
            points[name] += points_from_traces(traces, *scoring())
            traced.setdefault(name, []).extend(traces)
        road.note(f"calibration fold {j + 1}/{args.folds} run")
    # a backend's own kind of confidence, over all its folds (a mix of kinds is refused)
    return {name: choose_threshold(p, probabilities_of(traced.get(name, []))) for name, p in points.items()}


def evaluate_models(
    road: Road, paths: Any, convs: list[Any], adapters: dict[str, str | None], thresholds: dict[str, Any], tag: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Every model on the same evaluation turns; returns (figures, per-turn flags) by model."""
    args = road.args
    result, flags = {}, {}
    for name, adapter in adapters.items():
        th = thresholds.get(name)
        cfg = model_config(args, adapter, name, tokens=th is not None)
        config = agent_config(args, paths.root, cfg, abstain_below=th.abstain_below if th is not None else 0.0)
        report, traces, cpu = run(config, convs, args.task, road.work, f"eval-{name}{tag}")
        result[name] = figures(report, traces, args.task, cpu)
        if th is not None:
            result[name]["calibration"] = th.model_dump()
        flags[name] = turn_flags(report, args.task)
        road.note(f"evaluated {name}: {result[name]['right']} right, {result[name]['wrong']} wrong of {len(traces)}")
    return result, flags


# ---- the command -------------------------------------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.distill", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--learn",
        default=DEFAULT_LEARN,
        help=f"students, comma-separated: {', '.join(LEARNERS)} "
        f"(default {DEFAULT_LEARN}; the SFT student is always trained and evaluated)",
    )
    p.add_argument("--seeds", type=int, default=1, help="train every student with this many seeds (mean, spread)")
    p.add_argument("--data", default="demo", help="training data: a question set's name or folder (root or split)")
    p.add_argument("--index-dir", help="the training data's search index (default: the dataset's own)")
    p.add_argument(
        "--eval-data",
        default=DEFAULT_EVAL,
        help=f"evaluation data, as --data (default {DEFAULT_EVAL}; 'same': the unseen split of --data)",
    )
    p.add_argument("--eval-index-dir", help="the evaluation data's search index (default: the dataset's own)")
    p.add_argument("--task", type=int, default=2, choices=[1, 2, 3])
    p.add_argument("--eval-limit", type=int, help="evaluation turns, whole conversations (default: all)")
    p.add_argument(
        "--train-limit",
        type=int,
        default=DEFAULT_TRAIN_TURNS,
        help=f"training turns, whole conversations (default {DEFAULT_TRAIN_TURNS}: the road's CPU budget)",
    )
    p.add_argument(
        "--validate",
        action="store_true",
        help="evaluate on the validation data instead (options are chosen there; the evaluation set unread)",
    )
    p.add_argument(
        "--validation-data",
        default=DEFAULT_VALIDATION,
        help=f"the validation data (default {DEFAULT_VALIDATION}, the bundled tuning set; 'same': a split of the "
        "training conversations by entity, another hash)",
    )
    p.add_argument("--teacher", default="rule", help="'rule' (the rule-based planner) or a model spec")
    p.add_argument("--model", help="the student as a model spec (default: Gemma 3 270M, in-process)")
    p.add_argument("--model-path", help="the student's weights to fine-tune, when --model is not a local path")
    p.add_argument("--tools", default=DEFAULT_TOOLS, help=f"the tools offered (default {DEFAULT_TOOLS})")
    p.add_argument("--steps", type=int, default=48, help="SFT steps (batch 1; default 48)")
    p.add_argument("--rft-steps", type=int, help="RFT steps (batch 1; default: --steps)")
    p.add_argument("--samples", type=int, default=4, help="rollouts per training conversation (default 4)")
    p.add_argument("--temperature", type=float, default=1.0, help="sampling temperature of rollouts (default 1)")
    p.add_argument("--search-penalty", type=float, default=0.0, help="per search of a right answer (default 0)")
    p.add_argument("--rounds", type=int, default=1, help="RFT rounds, each from the base (default 1)")
    p.add_argument("--pref-steps", type=int, default=24, help="DPO/KTO steps (batch 2; default 24)")
    p.add_argument("--grpo-steps", type=int, default=16, help="GRPO steps (one prompt, G decisions; default 16)")
    p.add_argument("--generations", type=int, default=4, help="GRPO decisions per prompt (G; default 4)")
    p.add_argument(
        "--calibrate",
        choices=["folds", "off"],
        default="off",
        help="folds: each model's threshold on its answers' token probability from cross-fitted folds "
        "of the training conversations; off (default): each model's own \"I don't know\" only",
    )
    p.add_argument("--folds", type=int, default=2, help="calibration folds (default 2)")
    p.add_argument("--budget", type=float, default=60.0, help="seconds per turn (a CPU model needs more than 10)")
    p.add_argument("--answer-reserve", type=float, default=20.0)
    p.add_argument("--max-steps", type=int, default=4, help="tool calls per turn")
    p.add_argument("--max-tokens", type=int, help="tokens per model reply (default: the longest decision)")
    p.add_argument("--threads", type=int, help="CPU threads for the model (default: torch's)")
    p.add_argument("--seed", type=int, default=0, help="the first seed")
    p.add_argument("--work", type=Path, help="where traces, exports and adapters go (default: a temp folder)")
    p.add_argument("--json", type=Path, help="write the figures to this file")
    return p


def splits(args: argparse.Namespace, paths: Any, eval_paths: Any) -> tuple[Split, Any]:
    """(training/evaluation split, the evaluation data). `--validate` sets the evaluation data aside unread and
    evaluates on the validation data (`same`: a split of the training conversations, another hash)."""
    entities = session_entities(paths, args.task)
    if args.validate and args.validation_data != "same":
        val = dataset(args.validation_data)
        return make_split(entities, session_entities(val, args.task)), val
    same = args.eval_data == "same"
    if not args.validate:
        return make_split(entities, None if same else session_entities(eval_paths, args.task)), eval_paths
    train = make_split(entities, None).train if same else list(entities)  # less the carved evaluation split
    inner = make_split({s: entities[s] for s in train}, None, salt="validation")
    return Split(train=inner.train, eval=inner.eval, by=f"{inner.by}, validation split of the training side"), paths


def where(args: argparse.Namespace) -> str:
    if args.validate:
        data = args.validation_data
        return f"validation: {'a split of ' + args.data if data == 'same' else data}"
    return f"evaluation: {'a split of ' + args.data if args.eval_data == 'same' else args.eval_data}"


def learners(spec: str) -> list[str]:
    learn = [x.strip() for x in spec.split(",") if x.strip()]
    unknown = [x for x in learn if x not in LEARNERS]
    if unknown or not learn:
        raise SystemExit(f"--learn takes {', '.join(LEARNERS)} (got {spec!r})")
    return [x for x in dict.fromkeys(learn) if x != "sft"]


def one_seed(road: Road, data: tuple[Any, Any, list, list], learn: list[str], seed: int, first: Any) -> dict:
    """Train every student with `seed`, calibrate them if asked, evaluate them (and, the first time, the base)."""
    paths, eval_paths, train_convs, eval_convs = data
    students = Students(road, paths, train_convs, seed)
    if first is None:
        students.base_data()
    else:
        students.sft_data, students.teacher = first.sft_data, first.teacher
    adapters = students.train(learn)
    thresholds = calibrate(road, students, learn) if road.args.calibrate == "folds" else {}
    models: dict[str, str | None] = ({"base": None} if first is None else {}) | adapters
    result, flags = evaluate_models(road, eval_paths, eval_convs, models, thresholds, f"-seed{seed}")
    return {"students": students, "result": result, "flags": flags}


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    learn = learners(args.learn)
    default = learn[0] if learn else "sft"
    if args.model and not args.model_path:
        if args.model.startswith("openai:"):
            raise SystemExit("--model openai:... needs --model-path: the served base model's local folder to fine-tune")
        args.model_path = args.model.partition(":")[2].partition("+")[0]
    road = Road(args, args.work or Path(tempfile.mkdtemp(prefix="distill-")))
    road.work.mkdir(parents=True, exist_ok=True)
    paths = dataset(args.data)
    if args.index_dir:
        paths = replace(paths, root=Path(args.index_dir))
    eval_paths = dataset(args.eval_data) if args.eval_data != "same" and not args.validate else paths
    if args.eval_index_dir:
        eval_paths = replace(eval_paths, root=Path(args.eval_index_dir))
    if args.max_tokens is None:
        args.max_tokens = longest_decision(args.tools.split(","), args.task)
    split, eval_paths = splits(args, paths, eval_paths)
    train_convs = conversations(paths, args.task, split.train, args.train_limit)
    eval_convs = conversations(eval_paths, args.task, split.eval, args.eval_limit)
    road.note(
        f"split by {split.by}: {len(train_convs)} training and {len(eval_convs)} evaluation conversations "
        f"(task {args.task}); students sft, {', '.join(learn) or '-'}; work folder {road.work}"
    )
    data = (paths, eval_paths, train_convs, eval_convs)
    runs = []
    for seed in range(args.seed, args.seed + args.seeds):
        runs.append(one_seed(road, data, learn, seed, runs[0]["students"] if runs else None))
    return report(road, runs, ["sft", *learn], default)


def report(road: Road, runs: list[dict[str, Any]], students: list[str], default: str) -> int:
    """Print the table (the first seed's figures, every seed's truthfulness) and write the JSON."""
    args = road.args
    result: dict[str, Any] = dict(runs[0]["result"])
    cards = runs[0]["students"].cards
    students = [s for s in students if s in result]
    default = default if default in result else students[-1]
    result["train"] = {
        "train_seconds": cards[default]["seconds"],
        **{s: {"seconds": cards[s]["seconds"], "steps": cards[s]["steps"]} for s in students if s in cards},
    }
    result["intervals"] = intervals(runs[0]["flags"], students)
    result["default_student"] = default
    if len(runs) > 1:
        result["seeds"] = {s: [r["result"][s]["truthfulness"] for r in runs if s in r["result"]] for s in students}
    minutes = (time.perf_counter() - road.t0) / 60
    road.note("done")
    result["load"] = {"min": min(road.load), "max": max(road.load), "mean": sum(road.load) / len(road.load)}
    result["road_minutes"] = round(minutes, 1)
    failed = runs[0]["students"].failed
    students = [s for s in students if s in result]
    default = default if default in result else students[-1]
    if failed:
        result["failed"] = failed
    models = ["base", *students]
    n = result["base"]["n"]
    print(
        f"distill: teacher {args.teacher} on {args.data} (task {args.task}), students {', '.join(students)} from "
        f"{args.model or 'gemma3-270m (transformers, in-process, text-only, grammar-constrained)'}; evaluated on "
        f"{n} turns no training saw ({where(args)}); "
        f"rollouts {args.samples} per conversation at temperature {args.temperature:g}; abstention: "
        + ("each model's threshold from cross-fitted folds" if args.calibrate == "folds" else "the model's own")
        + "; judge: rule (offline, approximate)"
    )
    print(table(result, models))
    if "seeds" in result:
        print(seeds_table(result["seeds"]))
    for name, why in failed.items():
        print(f"not trained: {name}: {why}")
    load = result["load"]
    print(
        f"whole road: {minutes:.1f} min (wall), load average {load['min']:.2f}-{load['max']:.2f} "
        f"(mean {load['mean']:.2f}) on {os.cpu_count()} CPUs; work folder {road.work}"
    )
    if args.json:
        args.json.write_text(json.dumps(json_result(result, models, default), indent=1) + "\n")
        print(f"json: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
