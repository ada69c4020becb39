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
import os
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

from glasses_rag.core.credentials import scrub_argv, scrub_data, scrub_log_handlers, scrub_text

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach for a model hub at run time
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")  # chromadb
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
TASK_DATA = {1: "single_turn", 2: "single_turn", 3: "multi_turn"}
TASK_TEXT = {1: "single-turn, image-KG search only", 2: "single-turn, image-KG + web search", 3: "multi-turn, image-KG + web search"}


class _Parser(argparse.ArgumentParser):
    """Options are parsed as text, then validated by the configuration fields they set (glasses_rag/harness/cli.py); the run's
    own options get their defaults, and the benchmark's defaults are applied."""

    def parse_args(self, args: Any = None, namespace: Any = None) -> argparse.Namespace:  # type: ignore[override]
        from glasses_rag.harness.cli import convert
        from glasses_rag.harness.run_options import ROOTS, options

        args = task_alias(list(sys.argv[1:] if args is None else args))
        parsed = convert(self, super().parse_args(args, namespace), options(), ROOTS)
        for opt in options():
            if opt.path.startswith("run.") and getattr(parsed, opt.name) is None:
                info = ROOTS["run"].model_fields[opt.path.split(".")[1]]
                setattr(parsed, opt.name, info.get_default(call_default_factory=True))
        return parsed

    def error(self, message: str) -> Any:  # type: ignore[override]
        """One line, not the 45-line usage: what was wrong and where the options are listed."""
        self.exit(2, f"{self.prog}: error: {message} ({self.prog} --help lists every option)\n")


def task_alias(argv: list[str]) -> list[str]:
    """`--task superglasses` is read as `--benchmark superglasses` (SuperGlasses has one task of its own)."""
    out: list[str] = []
    for i, a in enumerate(argv):
        if a == "--task=superglasses" or (a == "superglasses" and i > 0 and argv[i - 1] == "--task"):
            if out and out[-1] == "--task":
                out.pop()
            out += ["--benchmark", "superglasses"]
        else:
            out.append(a)
    return out


def environment_help() -> str:
    """The environment variables the run reads, for --help."""
    from glasses_rag.web.config import ENV, KEY_ENV, MB, WebConfig

    rows = [(KEY_ENV, "SerpApi key for the SuperGlasses open-web tools (google_search, google_lens)."),
            ("OPENAI_API_KEY", "API key of an LLM judge (see --judge-api-key-env)."),
            ("GLASSES_CACHE_DIR", "Folder for derived files kept between runs (default ~/.cache/glasses-rag)."),
            ("GLASSES_GGUF_CACHE", "Folder for GGUF models converted for transformers (default "
                                   "~/.cache/glasses-rag/gguf)."),
            ("GLASSES_DEMO_DIR", "Where the demo benchmark is generated (default data/demo)."),
            ("GLASSES_IMAGE_ROOT", "A folder a dataset's image paths may also point into (see --image-root).")]
    for field, (var, scale) in ENV.items():
        info = WebConfig.model_fields[field]
        rows.append((var, (info.description or field) + _env_default(info.get_default(call_default_factory=True),
                                                                      scale, MB)))
    width = max(len(v) for v, _ in rows)
    lines = [textwrap.fill(d, 100, initial_indent=f"  {v.ljust(width)}  ", subsequent_indent=" " * (width + 4))
             for v, d in rows]
    return "environment variables (open web: docs/open-web.md):\n" + "\n".join(lines)


def _env_default(value: Any, scale: float | None, mb: int) -> str:
    """' (KiB; default 2048)': the unit the variable is written in, and the default in that unit."""
    unit = {1024: "KiB", mb: "MiB", 3600: "hours"}.get(int(scale or 0))
    if value in (None, [], ""):
        return f" ({unit})" if unit else ""
    if scale:
        value = f"{value / scale:g}"
    elif isinstance(value, Path):
        value = str(value).replace(str(Path.home()), "~", 1)
    elif isinstance(value, float):
        value = f"{value:g}"
    return f" ({unit}; default {value})" if unit else f" (default {value})"


def build_parser() -> argparse.ArgumentParser:
    from glasses_rag.harness.cli import add_options
    from glasses_rag.harness.run_options import ROOTS, options

    description = textwrap.fill(
        "Run the agent on a CRAG-MM task (or SuperGlasses) and score it. Defaults are fully offline: the embedded "
        "demo benchmark, the embedded local search index, the rule-based planner (heuristic) and the rule judge "
        "(approximate). Every agent option is a field of graph.config.AgentConfig (its model options of "
        "glasses_rag.models.vlm.ModelConfig): help and defaults come from there.", 100)
    p = _Parser(prog="python -m graph.run", description=description, epilog=environment_help(),
                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_options(p, options(), ROOTS)
    return p


def resolve_benchmark(p: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.Namespace:
    """Defaults that depend on the benchmark (SuperGlasses: task 2, no local index, native images)."""
    sg = args.benchmark == "superglasses"
    if args.task is None:
        if not sg:
            p.error("--task is required: --task 1, 2 or 3 (CRAG-MM), or --benchmark superglasses")
        args.task = 2
    if args.search is None:
        args.search = "none" if sg else "local"
    if args.image_prep is None:
        args.image_prep = "native" if sg else "harness"
    return args


def agent_config(args: argparse.Namespace) -> Any:
    """The command line as an AgentConfig (the only place the CLI decides anything about the agent): the agent
    options given, the model options on top of --model / --model-config, the benchmark's tool profile."""
    from glasses_rag.harness.cli import nested
    from glasses_rag.harness.run_options import MODEL_OPTIONS, options
    from glasses_rag.models.openai_client import pool_size_for
    from glasses_rag.models.vlm import model_config_from_options
    from graph.config import AgentConfig

    given = nested(args, options(), "agent")
    model = model_config_from_options(args.model, args.model_config, pool_size=pool_size_for(args.concurrency),
                                      **{k: getattr(args, k) for k in MODEL_OPTIONS})
    given["policy"] = model if model is not None else "rule"
    given.setdefault("tools", {})["profile"] = args.benchmark
    return AgentConfig.model_validate(given)


def load_data(args: argparse.Namespace):
    from glasses_rag.crag_mm.dataset import load_conversations

    if args.benchmark == "superglasses":
        from glasses_rag.superglasses.loader import load_superglasses
        from glasses_rag.superglasses.sample import SAMPLE_NAMES, ensure_sample

        if args.data == "demo":
            raise ValueError("--benchmark superglasses needs --data: 'sample' (the offline sample, built on first "
                             "use), a local copy of xandery/SuperGlasses (folder of its parquet files) or the dataset "
                             "id when it is in the Hugging Face cache")
        if args.data in SAMPLE_NAMES:
            from glasses_rag.crag_mm.demo import demo_paths

            args.data = str(ensure_sample(demo_paths(args.demo_dir).root.parent / "superglasses-sample"))
        return args.data, load_superglasses(args.data, limit=args.limit, image_root=args.image_root)
    from glasses_rag.superglasses.loader import looks_like_superglasses

    built = build_content(args)
    if built is not None:
        source = getattr(built, TASK_DATA[args.task])
    elif looks_like_superglasses(args.data):
        raise ValueError(f"{args.data} holds SuperGlasses questions: run it with --benchmark superglasses")
    else:
        source = args.data
    return source, load_conversations(source, split=args.split, limit=args.limit, image_root=args.image_root)


def build_content(args: argparse.Namespace) -> Any:
    """`--data` naming a benchmark content folder (bundled: demo, demo-paraphrase, heldout; or a folder with a
    benchmark.yaml): build its dataset and index once (data/<name>/ beside the demo), and search that index
    unless --index-dir says otherwise. None for any other --data."""
    from glasses_rag.crag_mm.benchmark import dataset_paths, ensure_dataset, find_content, load_content
    from glasses_rag.crag_mm.demo import demo_paths, ensure_demo

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
    if config.preset:
        from glasses_rag.policies.presets import load_preset

        if load_preset(config.preset).policy == "rule":  # the rule planner decides, whatever model is configured
            return True
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
    """The run folder cannot be used as asked (held by another process, or made with another configuration), or a
    model server the run needs cannot be reached."""


def check_model_servers(*parts: Any) -> None:
    """At warm-up: every HTTP model the run uses (the policy's, an LLM judge's) takes a connection on at least one
    replica, or the run stops here with one line (instead of minutes of retries and a report of "I don't know"s)."""
    for part in parts:
        client = getattr(part, "client", None)
        check = getattr(client, "unreachable", None)
        if not callable(check):
            continue
        down = check()
        if down and len(down) == len(getattr(client, "replicas", down)):
            raise RunRefused(f"cannot reach the model server {'; '.join(down)} (is it running? see --model)")


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
    remove_stale_tmp(store.dir / "requests")
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
    configure_logging(args.verbose)
    if args.run_id is not None:
        from traces.store import check_run_id

        try:
            check_run_id(args.run_id)  # before anything is read or written: '..' would write outside --out
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    try:
        return _run(args, argv)
    except RunRefused as e:
        print(f"error: {scrub_text(str(e))}", file=sys.stderr)
        return 2
    except (FileNotFoundError, ValueError, ImportError, OSError, RecursionError) as e:
        # bad paths, specs, data (nested too deeply, too) or missing optional packages: one line, no traceback
        print(f"error: {error_line(e)}", file=sys.stderr)
        return 2
    except RuntimeError as e:  # after the clause above: RecursionError is a RuntimeError
        from glasses_rag.models.openai_client import BackendError

        if not isinstance(e, BackendError):
            raise
        print(f"error: {error_line(e)}", file=sys.stderr)  # e.g. /models asked at start-up and refused
        return 2


def error_line(e: BaseException) -> str:
    """`e` as one line, without the input a validation error quotes (a config file's api_key) and without
    credentials. Example: `error_line(ValueError("bad\nspec"))` -> "ValueError: bad spec"."""
    from pydantic import ValidationError

    if isinstance(e, ValidationError):
        found = e.errors(include_input=False, include_url=False)
        where = "; ".join(f"{'.'.join(map(str, d['loc'])) or '(top)'}: {d['msg']}" for d in found[:5])
        text = f"{e.error_count()} validation error(s) for {e.title}: {where}"
    elif isinstance(e, RecursionError):
        text = "the input is nested too deeply to read"
    else:
        text = str(e)
    return scrub_text(f"{type(e).__name__}: {' '.join(text.split())}")[:2000]


OUR_LOGGERS = ("glasses_rag", "tools", "traces", "graph")


def configure_logging(verbose: bool) -> None:
    """Warnings for everything; with -v, debug output from this project's own loggers only (a library at DEBUG
    logs request URLs, headers and payloads)."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    scrub_log_handlers()  # every record, whichever logger: no URL userinfo, no key
    for name in OUR_LOGGERS:
        logging.getLogger(name).setLevel(logging.DEBUG if verbose else logging.NOTSET)


def search_line(agent: Any, superglasses: bool) -> str:
    if superglasses and agent.search_name == "none":
        return "none (no local index: the open-web tools search the web)"
    return agent.search_name


def summary_lines(stats: Any) -> list[str]:
    ended = ", ".join(f"{k} {v}" for k, v in sorted(stats.ended_by.items())) or "none"
    lines = [f"turns:   {stats.turns} ({stats.resumed_turns} resumed); ended by: {ended}"]
    errors = ", ".join(f"{k} {v}" for k, v in sorted(stats.errors.items()))
    lines.append(f"errors:  {errors} (in {stats.turns_with_errors} turn(s))" if errors else "errors:  none")
    if stats.turns:
        lines.append(f"tools:   {stats.tool_calls} call(s), {stats.tool_calls / stats.turns:.2f} per turn")
    if stats.model_calls:
        lines += model_lines(stats)
    return lines


def model_lines(stats: Any) -> list[str]:
    """Model calls per turn (and on the critical path), the loop's decisions and tool calls, requests per replica."""
    n = max(1, stats.turns)
    unreported = stats.calls_without_usage
    lines = [f"model:   {stats.model_calls} call(s): {stats.model_calls / n:.2f} per turn, "
             f"{stats.sequential_calls / n:.2f} one after another; {stats.prompt_tokens} prompt + "
             f"{stats.completion_tokens} completion tokens"
             + (f" ({unreported} call(s) without token counts from the backend)" if unreported else "")]
    if stats.loop.decisions or stats.loop.decisions_cancelled:
        lines.append(f"loop:    {stats.loop.summary()}")
    if stats.replicas:
        lines.append("replicas: " + ", ".join(f"{k} {v}" for k, v in sorted(stats.replicas.items())))
    return lines


class Scoring:
    """How the run's turns are scored: the benchmark's judge, the 75-token truncation, the official mode."""

    def __init__(self, args: argparse.Namespace):
        from glasses_rag.crag_mm.scoring import make_judge, make_truncator
        from glasses_rag.superglasses import evaluate as sge

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
        from glasses_rag.crag_mm.scoring import score_trace
        from glasses_rag.superglasses import evaluate as sge

        if not self.superglasses:
            return score_trace(trace, judge=self.judge, truncator=self.truncator, mode=self.mode)
        s = sge.score_superglasses(trace.question, trace.answer, trace.ground_truth, self.judge)
        trace.score, trace.judge = s.result, s.judge
        return trace


SCORING_OPTIONS = ("benchmark", "scoring_mode", "judge", "judge_api_key_env", "tokenizer")


def worker_scoring(options: dict[str, Any]) -> tuple[Scoring, Any]:
    """Scoring as each worker process builds it (glasses_rag.harness.workers.WorkerSpec.scoring): the scorer, and the
    truncation later turns see of an answer."""
    scoring = Scoring(argparse.Namespace(**options))
    return scoring, scoring.truncator.truncate


def effective_concurrency(args: argparse.Namespace, config: Any) -> tuple[int, str]:
    """--concurrency, capped at the core count for a CPU-bound policy (turns would lose their budget otherwise)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    cores = max(1, cores // args.workers)  # each worker process runs --concurrency conversations
    if args.concurrency > cores and cpu_bound(config) and not args.oversubscribe:
        per = " per worker process" if args.workers > 1 else ""
        return cores, (f" (capped from {args.concurrency}: the policy runs on this machine's {cores} CPU core(s)"
                       f"{per}; --oversubscribe to lift it)")
    return args.concurrency, ""


def header_lines(args: argparse.Namespace, agent: Any, scoring: Scoring, source: Any, rows: Any, tools: list[str],
                 traces: Path, concurrency: str, warm_s: float) -> list[str]:
    """What the run is made of: every component by name (heuristic stand-ins say so in their names)."""
    sg = scoring.superglasses
    verifier = getattr(agent.verifier, "name", "off") if agent.verifier is not None else "off"
    return [
        ("SuperGlasses (single-turn, image + open web)" if sg else f"task {args.task} ({TASK_TEXT[args.task]})")
        + f" on {source}: {rows if rows is not None else '?'} conversation(s)",
        f"policy: {agent.policy_name}",
        f"search: {search_line(agent, sg)}",
        f"tools:  {', '.join(tools)}" + not_offered_text(agent.registry.unavailable),
        f"self-check: {verifier}",
        f"judge:  {scoring.describe()}",
        *([f"web:    {open_web_line()}"] if sg else []),
        f"traces: {traces}",
        f"concurrency: {concurrency}" + (f" in each of {args.workers} worker processes" if args.workers > 1 else ""),
        f"warm-up: {warm_s:.1f}s (models loaded, indexes built)",
    ]


def not_offered_text(missing: dict[str, str]) -> str:
    """'; not offered: google_lens (SERPAPI_API_KEY not set), ...': tools left out for what they lack here."""
    if not missing:
        return ""
    return "; not offered: " + ", ".join(f"{n} ({why})" for n, why in sorted(missing.items()))


def closing_lines(stats: Any, budget_s: float, conversations: Any) -> list[str]:
    """Warnings after the report: turns lost to the budget, failed conversations, skipped rows."""
    lines = []
    by_budget = stats.ended_by.get("time_budget", 0)
    if stats.turns and by_budget / stats.turns > 0.1:
        lines.append(f"warning: {by_budget} of {stats.turns} turn(s) ran out of their {budget_s:g}s budget; answers "
                     "were lost to time, not to the questions (lower --concurrency, raise --budget or use a faster "
                     "model)")
    if stats.failed_conversations:
        lines.append(f"failed:  {stats.failed_conversations} conversation(s) raised (see log); the others were kept")
    skipped = getattr(getattr(conversations, "report", None), "skipped", 0)
    if skipped:
        lines.append(f"data:    {skipped} malformed row(s) skipped; reasons in run.json")
    return lines


def _run(args: argparse.Namespace, argv: list[str] | None) -> int:
    from traces.store import TraceStore

    build_content(args)  # before the config: a benchmark content folder brings its own search index
    config = agent_config(args)
    source, conversations = load_data(args)  # streamed: a dataset is never held decoded in memory
    scoring = Scoring(args)
    kind = "superglasses" if scoring.superglasses else f"task{args.task}"
    store = TraceStore(args.out, args.run_id or f"{kind}-{time.strftime('%Y%m%d-%H%M%S')}")
    fingerprint = run_fingerprint(args, config, source)
    lock = claim_run_folder(store, fingerprint, args.resume_anyway)
    try:
        return _run_claimed(args, argv, config, source, conversations, scoring, store, fingerprint)
    finally:
        lock.release()  # also on Ctrl-C: the folder is free for the resume


def _run_claimed(args: argparse.Namespace, argv: list[str] | None, config: Any, source: Any, conversations: Any,
                 scoring: Scoring, store: Any, fingerprint: str) -> int:
    from graph.build import build_agent
    from traces.store import write_json_atomic

    t0 = time.time()
    concurrency, capped = effective_concurrency(args, config)
    agent = build_agent(config, run_id=store.dir.name, task=args.task)  # models loaded and indexes built here
    check_model_servers(agent.llm, scoring.judge)
    used = agent.config  # with the preset applied
    tools = [t.name for t in agent.registry.for_task(args.task, used.tools.allowed, used.tools.profile)]
    print(scrub_text("\n".join(header_lines(args, agent, scoring, source, getattr(conversations, "rows", None), tools,
                                            store.dir, f"{concurrency}{capped}", time.time() - t0))), flush=True)
    manifest = {
        "run_id": store.dir.name, "benchmark": args.benchmark, "task": args.task, "data": str(source),
        "policy": agent.policy_name, "search": agent.search_name, "judge": scoring.judge_name,
        "scoring_mode": args.scoring_mode, "truncation": scoring.truncator.name, "tools": tools,
        "tools_not_offered": agent.registry.unavailable,
        "budget_s": config.budget.budget_s, "max_steps": config.budget.max_steps, "concurrency": concurrency,
        "workers": args.workers, "config": config.model_dump(mode="json"), "config_fingerprint": agent.fingerprint,
        "run_fingerprint": fingerprint, "argv": scrub_argv(sys.argv[1:] if argv is None else argv),
        "status": "running",
    }
    manifest = scrub_data(manifest)  # a model config's api_key as ***, URL userinfo removed
    write_json_atomic(store.dir / "run.json", manifest)  # written first: a resumed run checks it
    stats, records = run_and_collect(args, agent, conversations, store, scoring, concurrency)
    report, files, text = write_reports(args, scoring, records, store)
    write_json_atomic(store.dir / "run.json", scrub_data({
        **manifest, "status": "finished", "stats": stats.model_dump(), "turns": stats.turns,
        "resumed_turns": stats.resumed_turns, "failed_conversations": stats.failed_conversations,
        "search_cache": agent.resources.search.stats() if hasattr(agent.resources.search, "stats") else None,
        "web_cache": open_web_stats() if scoring.superglasses else None, "seconds": round(time.time() - t0, 2),
        "load_report": conversations.report.model_dump() if hasattr(conversations, "report") else None,
    }))
    print(scrub_text("\n".join(summary_lines(stats))))  # first: how the turns ended is what a newcomer must not miss
    print(scrub_text(text))
    for line in closing_lines(stats, config.budget.budget_s, conversations):
        print(scrub_text(line))
    if not args.no_plot:
        files["plot"] = plot_run(scoring, report, store.dir)  # after the summary
    print("report: " + ", ".join(str(p) for p in files.values()))
    unreachable = unreachable_line(stats)
    if unreachable:
        print(unreachable, file=sys.stderr)
        return 1
    return 0 if not stats.failed_conversations else 1


def unreachable_line(stats: Any) -> str | None:
    """An error line when most turns could not reach their model server: their answers are not the model's."""
    if not stats.turns or (stats.turns_unreachable * 2 <= stats.turns and not stats.stopped_unreachable):
        return None
    stopped = (" it stopped starting turns after the server was unreachable in several turns in a row (the same "
               "command resumes once the server is back);" if stats.stopped_unreachable else "")
    return (f"error: {stats.turns_unreachable} of {stats.turns} turn(s) could not reach the model server (the "
            f"traces' `error` says why);{stopped} the scores above are not the model's")


def run_and_collect(args: argparse.Namespace, agent: Any, conversations: Any, store: Any, scoring: Scoring,
                    concurrency: int) -> tuple[Any, list[Any]]:
    """Run every conversation; keep one compact scoring record per turn (the traces themselves are dropped)."""
    from glasses_rag.crag_mm.evaluate import TurnRecord, record_from_trace
    from glasses_rag.harness.runner import run_task

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
            stats = _run_in_workers(args, agent, conversations, store, concurrency, progress, fingerprint,
                                    records.append)
        else:
            stats = run_task(agent, conversations, args.task, store, scorer=scoring, concurrency=concurrency,
                             progress=progress, on_turn=keep_record, image_prep=args.image_prep,
                             history_answer=scoring.truncator.truncate, fingerprint=fingerprint)
    finally:
        if bar:
            bar.close()
    return stats, records


def _run_in_workers(args: argparse.Namespace, agent: Any, conversations: Any, store: Any, concurrency: int,
                    progress: Any, fingerprint: str | None, on_record: Any) -> Any:
    """The same run in `--workers` processes, each building its own agent and scoring from picklable options."""
    from glasses_rag.crag_mm.evaluate import record_from_trace
    from glasses_rag.harness.workers import WorkerSpec, run_task_in_workers

    spec = WorkerSpec(config=agent.config, task=args.task, out=store.dir.parent, run_id=agent.run_id,
                      concurrency=concurrency, image_prep=args.image_prep, fingerprint=fingerprint,
                      scoring=functools.partial(worker_scoring, {k: getattr(args, k) for k in SCORING_OPTIONS}),
                      summarize=record_from_trace)
    return run_task_in_workers(spec, conversations, args.workers, progress=progress, on_record=on_record)


def write_reports(args: argparse.Namespace, scoring: Scoring, records: list[Any], store: Any
                  ) -> tuple[Any, dict[str, Any], str]:
    """The CRAG-MM report (and, on SuperGlasses, its own sliced report and logs); returns what to print."""
    from glasses_rag.crag_mm.evaluate import evaluate, format_table, write_report

    report = evaluate(records, judge=scoring.judge, truncator=scoring.truncator, mode=args.scoring_mode)
    if not scoring.superglasses:
        files = write_report(report, store.dir, plot=False)  # the chart comes after the summary, not before
        return report, files, format_table(report)
    from glasses_rag.superglasses import evaluate as sge
    from glasses_rag.superglasses.logs import read_run

    # a SuperGlasses run writes its own report only (the CRAG-MM table would name metrics it is not scored by);
    # `report` is still returned for callers that tabulate any run alike (benchmarks.presets)
    sg_report, sg_logs = sge.evaluate_superglasses(read_run(store.dir), scoring.judge_name)
    files = sge.write_superglasses_report(sg_report, sg_logs, store.dir)
    return report, files, sge.format_superglasses(sg_report)


def plot_run(scoring: Scoring, report: Any, run_dir: Path) -> Path:
    """The run's chart: CRAG-MM truthfulness by slice, or SuperGlasses accuracy by slice."""
    if not scoring.superglasses:
        from glasses_rag.crag_mm.evaluate import plot_report

        return plot_report(report, run_dir / "truthfulness_by_slice.png")
    from glasses_rag.superglasses import evaluate as sge

    sg_report = sge.SuperGlassesReport.model_validate_json((run_dir / "superglasses_report.json").read_text("utf-8"))
    return sge.plot_superglasses(sg_report, run_dir / "superglasses_accuracy.png")


def open_web_line() -> str:
    from glasses_rag.superglasses import evaluate as sge

    return sge.open_web_line()


def open_web_stats() -> Any:
    from glasses_rag.superglasses import evaluate as sge

    return sge.open_web_stats()

if __name__ == "__main__":
    from glasses_rag.core.calls import exit_process

    exit_process(main())  # cancels what is still in flight; never an abort in the interpreter's teardown
