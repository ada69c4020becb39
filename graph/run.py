"""Run a CRAG-MM task end to end: `python -m graph.run --task {1,2,3}`.

By default everything is offline and embedded: the demo benchmark (generated on first use), the
local search index over it, the rule-based planner (a heuristic policy) and the rule judge (an
approximate judge). Every heuristic in use is named in the header this prints and in each trace.
"""

from __future__ import annotations

import argparse
import logging
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


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m graph.run",
        description="Run the agent on a CRAG-MM task and score it. Defaults are fully offline: the embedded demo "
                    "benchmark, the embedded local search index, the rule-based planner (heuristic) and the rule "
                    "judge (approximate).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--task", type=int, choices=[1, 2, 3], required=True,
                   help="1: image + question, image-KG search only; 2: adds web search; 3: multi-turn conversations")
    g = p.add_argument_group("data")
    g.add_argument("--data", default="demo",
                   help="'demo' (embedded benchmark, generated on first use), a local folder of CRAG-MM parquet/arrow "
                        "files, or a dataset name found in the local Hugging Face cache, e.g. crag-mm-2025/crag-mm-multi-turn-public")
    g.add_argument("--split", default=None, help="dataset split to read (default: the only/first split found)")
    g.add_argument("--limit", type=int, default=None, help="run only the first N conversations")
    g.add_argument("--demo-dir", type=Path, default=None, help="where the demo benchmark is generated (default: data/demo)")
    g = p.add_argument_group("output")
    g.add_argument("--out", type=Path, default=ROOT / "traces" / "runs", help="folder for run folders of JSON traces")
    g.add_argument("--run-id", default=None,
                   help="name of the run folder; reuse an existing one to resume an interrupted run (finished turns are kept)")
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
    g = p.add_argument_group("search backend")
    g.add_argument("--search", choices=["local", "cragmm"], default="local",
                   help="'local': embedded index over the demo KG and web corpus (or --index-dir); "
                        "'cragmm': the official cragmm-search-pipeline over local ChromaDB index folders")
    g.add_argument("--index-dir", type=Path, default=None, help="local index folder (kg.json, web.json, kg_images/); default: the demo's")
    g.add_argument("--cragmm-image-index", type=Path, default=None, help="ChromaDB folder with the 'image_embeddings' collection")
    g.add_argument("--cragmm-web-index", type=Path, default=None, help="ChromaDB folder with the 'web_search_embeddings' collection")
    g.add_argument("--cragmm-clip", type=Path, default=None, help="local CLIP folder used by the official image search")
    g.add_argument("--cragmm-text-model", type=Path, default=None, help="local text-embedding folder used by the official web search")
    g = p.add_argument_group("budget")
    g.add_argument("--budget", type=float, default=10.0, help="seconds per turn (CRAG-MM: 10)")
    g.add_argument("--max-steps", type=int, default=8, help="tool calls per turn")
    g.add_argument("--abstain-below", type=float, default=0.35, help="self-check confidence under which the answer is 'I don't know'")
    g.add_argument("--answer-reserve", type=float, default=None,
                   help="seconds of the budget kept for answer + self-check (default: min(1.5, 20%% of --budget); "
                        "raise it for slow VLMs)")
    g.add_argument("--concurrency", type=int, default=1, help="conversations run at once (one turn per conversation at a time)")
    g = p.add_argument_group("scoring")
    g.add_argument("--judge", default="rule",
                   help="'rule' (offline rule judge, approximate), 'none' (exact match only), or "
                        "'openai:<base_url>#<model>' (LLM judge with the official prompt)")
    g.add_argument("--judge-api-key-env", default="OPENAI_API_KEY", help="environment variable holding the judge's API key")
    g.add_argument("--tokenizer", type=Path, default=None,
                   help="local tokenizer folder for the official 75-token truncation (default: whitespace approximation)")
    p.add_argument("-v", "--verbose", action="store_true", help="log debug output")
    return p


def make_search(args) -> Any:
    if args.search == "cragmm":
        from crag.cragmm_backend import CragMMSearch

        missing = [n for n in ("cragmm_image_index", "cragmm_clip") if getattr(args, n) is None]
        if missing:
            raise SystemExit("--search cragmm needs " + ", ".join("--" + m.replace("_", "-") for m in missing))
        if args.task >= 2 and args.cragmm_web_index is not None and args.cragmm_text_model is None:
            raise SystemExit("--cragmm-web-index needs --cragmm-text-model (the model that built the web index)")
        return CragMMSearch(image_index_dir=args.cragmm_image_index, clip_model_dir=args.cragmm_clip,
                            web_index_dir=args.cragmm_web_index, text_model_dir=args.cragmm_text_model)
    from crag.demo import ensure_demo
    from crag.local_search import LocalSearchIndex
    from models.image_embedder import make_image_embedder

    root = args.index_dir or ensure_demo(args.demo_dir).root
    return LocalSearchIndex(root, image_embedder=make_image_embedder(args.clip),
                            text_embedder_path=args.text_embedder)


def make_judge(spec: str, key_env: str):
    from crag.scoring import LLMJudge, RuleJudge

    if spec == "none":
        return None
    if spec == "rule":
        return RuleJudge()
    if spec.startswith("openai:"):
        base, _, model = spec[len("openai:"):].partition("#")
        if not model:
            raise SystemExit("--judge openai:<base_url>#<model> needs a model name after '#'")
        return LLMJudge(base_url=base, model=model, api_key=os.environ.get(key_env))
    raise SystemExit(f"unknown --judge {spec!r}")


def make_policy(args, resources) -> Any:
    from graph.rule_planner import RuleBasedPlanner, RulePlannerConfig

    if args.model_config is None and args.model == "rule":
        floor = getattr(resources.search, "image_score_floor", None)
        cfg = RulePlannerConfig() if floor is None else RulePlannerConfig(min_image_score=floor)
        return RuleBasedPlanner(resources.text_embedder, cfg)
    from models.vlm import load_model_config, make_policy as make_vlm_policy

    if args.model_config is not None:
        return make_vlm_policy(load_model_config(args.model_config))
    return make_vlm_policy(args.model)


def load_data(args):
    from crag.dataset import load_conversations
    from crag.demo import ensure_demo

    if args.data == "demo":
        demo = ensure_demo(args.demo_dir)
        source = getattr(demo, TASK_DATA[args.task])
    else:
        source = args.data
    return source, load_conversations(source, split=args.split, limit=args.limit)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        return _run(args, argv)
    except (FileNotFoundError, ValueError, ImportError, OSError) as e:
        # bad paths, specs or missing optional packages: say so plainly, no traceback
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        return 2


def _run(args, argv: list[str] | None) -> int:
    from crag.cache import CachedSearch
    from crag.evaluate import evaluate, format_table, records_from_traces, write_report
    from crag.scoring import make_truncator, score_turn
    from graph.agent import Agent, AgentConfig
    from graph.runner import run_task, write_run_manifest
    from models.resources import ModelPaths, Resources
    from tools import load_builtin_tools, load_tool_modules
    from traces.store import TraceStore

    registry = load_builtin_tools()
    load_tool_modules(args.tools_module)
    t0 = time.time()
    source, conversations = load_data(args)  # streamed: a dataset is never held decoded in memory
    report_load = getattr(conversations, "report", None)
    search = CachedSearch(make_search(args))  # query -> results and url -> page, shared by all turns
    resources = Resources(search, ModelPaths(text_embedder=args.text_embedder, detector=args.detector,
                                             clip=args.clip, reranker=args.reranker))
    policy = make_policy(args, resources)
    resources.policy = policy
    judge = make_judge(args.judge, args.judge_api_key_env)
    truncator = make_truncator(args.tokenizer)
    run_id = args.run_id or f"task{args.task}-{time.strftime('%Y%m%d-%H%M%S')}"
    allowed = [t.strip() for t in args.tools.split(",")] if args.tools else None
    agent = Agent(policy, resources, AgentConfig(budget_s=args.budget, max_steps=args.max_steps,
                                                 abstain_below=args.abstain_below, allowed_tools=allowed,
                                                 answer_reserve_s=args.answer_reserve),
                  registry=registry, run_id=run_id, search_name=getattr(search, "name", "search"))
    store = TraceStore(args.out, run_id)
    tools = [t.name for t in registry.for_task(args.task, allowed)]
    judge_name = getattr(judge, "name", "exact-match only")
    rows = getattr(conversations, "rows", None)
    header = [
        f"task {args.task} ({TASK_TEXT[args.task]}) on {source}: {rows if rows is not None else '?'} conversation(s)",
        f"policy: {policy.name}",
        f"search: {agent.search_name}",
        f"tools:  {', '.join(tools)}",
        f"judge:  {judge_name}; truncation: {getattr(truncator, 'name', type(truncator).__name__)}",
        f"traces: {store.dir}",
    ]
    print("\n".join(header), flush=True)
    # Load models and build indexes before the clock of the first turn starts.
    t_warm = time.time()
    resources.warm_up()
    print(f"warm-up: {time.time() - t_warm:.1f}s (models loaded, indexes built)", flush=True)

    def scorer(trace):
        s = score_turn(trace.question, trace.answer, trace.ground_truth, judge=judge, truncator=truncator)
        trace.score, trace.judge = s.result, s.judge
        return trace

    bar = None
    if not args.no_progress:
        from tqdm import tqdm

        bar = tqdm(total=rows, unit="conversation", file=sys.stderr)
    traces, resumed, failed = run_task(agent, conversations, args.task, store, scorer=scorer,
                                       concurrency=args.concurrency, progress=(lambda n: bar.update(1)) if bar else None)
    if bar:
        bar.close()
    report = evaluate(records_from_traces(traces), judge=judge, truncator=truncator)
    files = write_report(report, store.dir)
    write_run_manifest(store, {
        "run_id": run_id, "task": args.task, "data": str(source), "policy": policy.name, "search": agent.search_name,
        "judge": judge_name, "tools": tools, "budget_s": args.budget, "max_steps": args.max_steps,
        "turns": len(traces), "resumed_turns": resumed, "failed_conversations": failed,
        "search_cache": search.stats(),
        "seconds": round(time.time() - t0, 2), "argv": sys.argv[1:] if argv is None else argv,
        "load_report": report_load.model_dump() if hasattr(report_load, "model_dump") else None,
    })
    print(format_table(report))
    if resumed:
        print(f"resumed: {resumed} finished turn(s) kept from an earlier run")
    if failed:
        print(f"failed:  {failed} conversation(s) raised (see log); the others were kept")
    if report_load is not None and getattr(report_load, "skipped", 0):
        print(f"data:    {report_load.skipped} malformed row(s) skipped; reasons in run.json")
    print("report: " + ", ".join(str(p) for p in files.values()))
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
