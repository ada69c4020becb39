"""What a run prints: the header naming every component, the summary of how turns ended, closing warnings."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from glasses_rag.evaluation import Benchmark, RunScorer


def search_line(agent: Any, spec: Benchmark) -> str:
    if spec.search_note and agent.search_name == "none":
        return f"none ({spec.search_note})"
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
    lines = [
        f"model:   {stats.model_calls} call(s): {stats.model_calls / n:.2f} per turn, "
        f"{stats.sequential_calls / n:.2f} one after another; {stats.prompt_tokens} prompt + "
        f"{stats.completion_tokens} completion tokens"
        + (f" ({unreported} call(s) without token counts from the backend)" if unreported else "")
    ]
    if stats.loop.decisions or stats.loop.decisions_cancelled:
        lines.append(f"loop:    {stats.loop.summary()}")
    if stats.replicas:
        lines.append("replicas: " + ", ".join(f"{k} {v}" for k, v in sorted(stats.replicas.items())))
    return lines


def header_lines(
    args: argparse.Namespace,
    spec: Benchmark,
    agent: Any,
    scoring: RunScorer,
    source: Any,
    rows: Any,
    tools: list[str],
    traces: Path,
    concurrency: str,
    warm_s: float,
) -> list[str]:
    """What the run is made of: every component by name (heuristic stand-ins say so in their names)."""
    verifier = getattr(agent.verifier, "name", "off") if agent.verifier is not None else "off"
    return [
        f"{spec.task_text(args.task)} on {source}: {rows if rows is not None else '?'} conversation(s)",
        f"policy: {agent.policy_name}",
        f"search: {search_line(agent, spec)}",
        f"tools:  {', '.join(tools)}" + not_offered_text(agent.registry.unavailable),
        f"self-check: {verifier}",
        f"judge:  {scoring.describe()}",
        *(spec.header() if spec.header is not None else []),
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
        lines.append(
            f"warning: {by_budget} of {stats.turns} turn(s) ran out of their {budget_s:g}s budget; answers "
            "were lost to time, not to the questions (lower --concurrency, raise --budget or use a faster "
            "model)"
        )
    if stats.failed_conversations:
        lines.append(f"failed:  {stats.failed_conversations} conversation(s) raised (see log); the others were kept")
    skipped = getattr(getattr(conversations, "report", None), "skipped", 0)
    if skipped:
        lines.append(f"data:    {skipped} malformed row(s) skipped; reasons in run.json")
    return lines


def resume_command(argv: list[str], run_id: str) -> str:
    """The command that resumes this run, to copy: its own options (credentials left out), `--run-id` naming its
    folder. Example: `resume_command(["--task", "1"], "task1-x")` -> "python -m graph.run --task 1 --run-id task1-x"."""
    import shlex

    from glasses_rag.core.credentials import scrub_argv

    kept: list[str] = []
    skip = False
    for a in argv:
        if not skip and a != "--run-id" and not a.startswith("--run-id="):
            kept.append(a)
        skip = a == "--run-id"
    return shlex.join(["python", "-m", "graph.run", *scrub_argv(kept), "--run-id", run_id])


def unreachable_line(stats: Any, resume: str) -> str | None:
    """An error line when most turns could not reach their model server: their answers are not the model's; how
    to resume (those turns are run again) once it is back."""
    if not stats.turns or (stats.turns_unreachable * 2 <= stats.turns and not stats.stopped_unreachable):
        return None
    stopped = (
        " it stopped starting turns after the server was unreachable in several turns in a row;"
        if stats.stopped_unreachable
        else ""
    )
    return (
        f"error: {stats.turns_unreachable} of {stats.turns} turn(s) could not reach the model server (the "
        f"traces' `error` says why);{stopped} the scores above are not the model's; once the server is back, "
        f"resume (those turns run again, the others are kept) with: {resume}"
    )


def unusable_line(stats: Any) -> str | None:
    """An error line when most of the model's decisions could not be used (empty, malformed or oversized replies,
    replies the backend failed): the run answered without its model, whatever the scores say."""
    loop = stats.loop
    asked = loop.decisions + loop.decisions_failed
    if not asked or loop.decisions_parsed * 2 >= asked:
        return None
    unread = loop.decisions - loop.decisions_parsed
    return (
        f"error: only {loop.decisions_parsed} of {asked} decision(s) of the model could be used ({unread} reply(ies) "
        f"unreadable: empty or not the asked format; {loop.decisions_failed} failed: errors or oversized replies; "
        "the traces' `error` says why); the scores above are not the model's (check --model, its chat template "
        "and --decision-mode)"
    )
