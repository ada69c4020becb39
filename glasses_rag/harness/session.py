"""One run from parsed command-line options: data, agent, run folder, turns, reports (`python -m graph.run`
is its command line)."""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time
from typing import Any

from glasses_rag.core.credentials import scrub_argv, scrub_data, scrub_text
from glasses_rag.evaluation import RunScorer
from glasses_rag.harness.benchmarks import benchmark_of
from glasses_rag.harness.console import (
    closing_lines,
    header_lines,
    resume_command,
    summary_lines,
    unreachable_line,
    unusable_line,
)
from glasses_rag.harness.run_data import load_data, prepare_data
from glasses_rag.harness.run_folder import check_model_servers, claim_run_folder, run_fingerprint
from glasses_rag.harness.run_scoring import SCORING_OPTIONS, make_scoring, plot_run, worker_scoring, write_reports


def agent_config_from_args(args: argparse.Namespace) -> Any:
    """The command line as an AgentConfig (the only place the CLI decides anything about the agent): the agent
    options given, the model options on top of --model / --model-config, the benchmark's tool profile."""
    from glasses_rag.harness.cli import nested
    from glasses_rag.harness.run_options import MODEL_OPTIONS, options
    from glasses_rag.models.openai_client import pool_size_for
    from glasses_rag.models.vlm import model_config_from_options
    from graph.config import AgentConfig

    given = nested(args, options(), "agent")
    model = model_config_from_options(
        args.model,
        args.model_config,
        pool_size=pool_size_for(args.concurrency),
        **{k: getattr(args, k) for k in MODEL_OPTIONS},
    )
    given["policy"] = model if model is not None else "rule"
    given.setdefault("tools", {})["profile"] = benchmark_of(args).tools.name
    return AgentConfig.model_validate(given)


def check_tool_choice(args: argparse.Namespace, config: Any) -> None:
    """--tools names tools the run offers: each a tool (a typo is one line with the closest name), allowed in the
    task under the benchmark's profile, and, with a preset, one of the preset's tools (--tools narrows them): never
    a run that silently offers fewer tools, or none."""
    from glasses_rag.policies.presets import load_preset
    from graph.build import load_tools

    names = config.tools.allowed
    if not names:
        return
    profile = benchmark_of(args).tools
    load_tools(config).offering_available(profile).check_names(names, args.task, profile)
    if config.preset:
        used = load_preset(config.preset, config.tools.modules).tools
        outside = [n for n in names if used is not None and n not in used]
        if outside:
            raise ValueError(
                f"--tools {','.join(outside)}: not among preset {config.preset}'s tools ({', '.join(used or [])}); "
                "--tools narrows the preset's tools"
            )


def agent_for_run(args: argparse.Namespace, config: Any, run_id: str, search: Any = None) -> Any:
    """The run's agent: `build_agent` over the data already prepared (the index it comes with, when the run names
    none), offering the tools of the benchmark's profile. Models are loaded and indexes built here."""
    from graph.build import build_agent

    return build_agent(
        config,
        run_id=run_id,
        task=args.task,
        search=search,
        index_dir=getattr(args, "default_index", None),
        tool_profile=benchmark_of(args).tools,
    )


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


def effective_concurrency(args: argparse.Namespace, config: Any) -> tuple[int, str]:
    """--concurrency, capped at the core count for a CPU-bound policy (turns would lose their budget otherwise)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    cores = max(1, cores // args.workers)  # each worker process runs --concurrency conversations
    if args.concurrency > cores and cpu_bound(config) and not args.oversubscribe:
        per = " per worker process" if args.workers > 1 else ""
        return cores, (
            f" (capped from {args.concurrency}: the policy runs on this machine's {cores} CPU core(s)"
            f"{per}; --oversubscribe to lift it)"
        )
    return args.concurrency, ""


def run(args: argparse.Namespace, argv: list[str] | None) -> int:
    from traces.store import TraceStore

    prepare_data(args)  # before the config: the data comes with its own search index
    config = agent_config_from_args(args)
    check_tool_choice(args, config)
    source, conversations = load_data(args)  # streamed: a dataset is never held decoded in memory
    scoring = make_scoring(args)
    kind = benchmark_of(args).run_name.format(task=args.task)
    label = f"{args.label}-" if getattr(args, "label", None) else ""
    store = TraceStore(args.out, args.run_id or f"{kind}-{label}{time.strftime('%Y%m%d-%H%M%S')}")
    fingerprint = run_fingerprint(args, config, source)
    lock = claim_run_folder(store, fingerprint, args.resume_anyway)
    try:
        return _run_claimed(args, argv, config, source, conversations, scoring, store, fingerprint)
    except KeyboardInterrupt:  # Ctrl-C: one line, the finished turns kept, and the command that goes on
        kept = sum(1 for _ in store.dir.glob("*__*.json"))
        line = f"interrupted: {kept} finished turn(s) kept in {store.dir}; resume with: {resume_of(argv, store)}"
        print(scrub_text(line), file=sys.stderr)
        return 130
    finally:
        lock.release()  # also on Ctrl-C: the folder is free for the resume


def _run_claimed(
    args: argparse.Namespace,
    argv: list[str] | None,
    config: Any,
    source: Any,
    conversations: Any,
    scoring: RunScorer,
    store: Any,
    fingerprint: str,
) -> int:
    from traces.store import write_json_atomic

    t0 = time.time()
    spec = benchmark_of(args)
    concurrency, capped = effective_concurrency(args, config)
    agent = agent_for_run(args, config, store.dir.name)  # models loaded and indexes built here
    check_model_servers({"--model": agent.llm, "--judge": scoring.judge})
    used = agent.config  # with the preset applied
    tools = [t.name for t in agent.registry.for_task(args.task, used.tools.allowed, agent.tool_profile)]
    print(
        scrub_text(
            "\n".join(
                header_lines(
                    args,
                    spec,
                    agent,
                    scoring,
                    source,
                    getattr(conversations, "rows", None),
                    tools,
                    store.dir,
                    f"{concurrency}{capped}",
                    time.time() - t0,
                )
            )
        ),
        flush=True,
    )
    manifest = run_manifest(args, agent, config, scoring, source, tools, concurrency, fingerprint, argv)
    manifest = scrub_data(manifest)  # a model config's api_key as ***, URL userinfo removed
    write_json_atomic(store.dir / "run.json", manifest)  # written first: a resumed run checks it
    stats, records = run_and_collect(args, agent, conversations, store, scoring, concurrency)
    report = write_reports(args, scoring, records, store)
    extra = spec.run_figures() if spec.run_figures is not None else {}
    finished = finished_manifest(manifest, agent, stats, conversations, t0, extra)
    write_json_atomic(store.dir / "run.json", scrub_data(finished))
    print(scrub_text("\n".join(summary_lines(stats))))  # first: how the turns ended is what a newcomer must not miss
    print(scrub_text(report.text))
    for line in closing_lines(stats, config.budget.budget_s, conversations):
        print(scrub_text(line))
    files = dict(report.files)
    plot = None if args.no_plot else plot_run(args, report, store.dir)  # after the summary
    if plot is not None:
        files["plot"] = plot
    print("report: " + ", ".join(str(p) for p in files.values()))
    failure = unreachable_line(stats, resume_of(argv, store)) or unusable_line(stats)
    if failure:
        print(scrub_text(failure), file=sys.stderr)
        return 1
    return 0 if not stats.failed_conversations else 1


def resume_of(argv: list[str] | None, store: Any) -> str:
    """The command that resumes the run in `store` (its folder named with --run-id)."""
    return resume_command(sys.argv[1:] if argv is None else list(argv), store.dir.name)


def run_manifest(
    args: argparse.Namespace,
    agent: Any,
    config: Any,
    scoring: RunScorer,
    source: Any,
    tools: list[str],
    concurrency: int,
    fingerprint: str,
    argv: list[str] | None,
) -> dict[str, Any]:
    """run.json as written before the first turn (a resumed run checks it): what the run is made of."""
    return {
        "run_id": agent.run_id,
        "label": getattr(args, "label", None),
        "benchmark": args.benchmark,
        "task": args.task,
        "data": str(source),
        "policy": agent.policy_name,
        "search": agent.search_name,
        "judge": scoring.judge_name,
        "scoring_mode": args.scoring_mode,
        "truncation": scoring.truncation,
        "tools": tools,
        "tools_not_offered": agent.registry.unavailable,
        "budget_s": config.budget.budget_s,
        "max_steps": config.budget.max_steps,
        "concurrency": concurrency,
        "workers": args.workers,
        "config": config.model_dump(mode="json"),
        "config_fingerprint": agent.fingerprint,
        "run_fingerprint": fingerprint,
        "argv": scrub_argv(sys.argv[1:] if argv is None else argv),
        "status": "running",
    }


def finished_manifest(
    manifest: dict[str, Any], agent: Any, stats: Any, conversations: Any, t0: float, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    """run.json once the turns are done: the manifest with how they went, the caches' figures (`extra`: the
    benchmark's own, e.g. the open-web cache's) and the seconds."""
    extra = extra or {}
    web_cache = extra.get("web_cache")
    search = agent.resources.search
    return {
        **manifest,
        "status": "finished",
        "stats": stats.model_dump(),
        "turns": stats.turns,
        "resumed_turns": stats.resumed_turns,
        "failed_conversations": stats.failed_conversations,
        "search_cache": search.stats() if hasattr(search, "stats") else None,
        "web_cache": web_cache,
        "seconds": round(time.time() - t0, 2),
        "load_report": conversations.report.model_dump() if hasattr(conversations, "report") else None,
        **{k: v for k, v in extra.items() if k != "web_cache"},
    }


def run_and_collect(
    args: argparse.Namespace, agent: Any, conversations: Any, store: Any, scoring: RunScorer, concurrency: int
) -> tuple[Any, list[Any]]:
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
            stats = _run_in_workers(
                args, agent, conversations, store, concurrency, progress, fingerprint, records.append
            )
        else:
            stats = run_task(
                agent,
                conversations,
                args.task,
                store,
                scorer=scoring,
                concurrency=concurrency,
                progress=progress,
                on_turn=keep_record,
                image_prep=args.image_prep,
                history_answer=scoring.history_answer,
                fingerprint=fingerprint,
            )
    finally:
        if bar:
            bar.close()
    return stats, records


def _run_in_workers(
    args: argparse.Namespace,
    agent: Any,
    conversations: Any,
    store: Any,
    concurrency: int,
    progress: Any,
    fingerprint: str | None,
    on_record: Any,
) -> Any:
    """The same run in `--workers` processes, each building its own agent and scoring from picklable options."""
    from glasses_rag.crag_mm.evaluate import record_from_trace
    from glasses_rag.harness.workers import WorkerSpec, run_task_in_workers

    spec = WorkerSpec(
        config=agent.config,
        index_dir=getattr(args, "default_index", None),
        tool_profile=agent.tool_profile,
        task=args.task,
        out=store.dir.parent,
        run_id=agent.run_id,
        concurrency=concurrency,
        image_prep=args.image_prep,
        fingerprint=fingerprint,
        scoring=functools.partial(worker_scoring, {k: getattr(args, k) for k in SCORING_OPTIONS}),
        summarize=record_from_trace,
    )
    return run_task_in_workers(spec, conversations, args.workers, progress=progress, on_record=on_record)
