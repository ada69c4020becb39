"""A run's decisions (or SuperGlasses annotated trajectories) as chat-format JSONL for fine-tuning a tool-choosing
model with TRL's `SFTTrainer`.

    python -m traces.sft --run traces/runs/<run_id> --out sft.jsonl [--keep correct|answered|all]
    python -m traces.sft --superglasses annotations.jsonl --out sft.jsonl

One line per turn, in TRL's conversational tool-calling format (TRL docs, "Dataset formats and types", Tool
Calling: a `messages` column whose assistant turns carry `tool_calls`, and a `tools` column of JSON schemas):

    {"messages": [{"role": "system", ...}, {"role": "user", "content": <question, conversation so far>},
                  {"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "web_search",
                                                         "arguments": {"query": "..."}}}]},
                  {"role": "tool", "name": "web_search", "content": <what the tool returned, as summarised>},
                  ...,
                  {"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "answer",
                                                         "arguments": {"answer": ..., "confidence": ..., ...}}}]}],
     "tools": [<the task's tools as OpenAI function specs>, <the answer function>]}

The assistant turns are the decisions as the model should write them in native-tools mode: each tool call the
agent dispatched (calls the registry refused, e.g. an unknown tool, are left out with their results; calls run
together are one assistant turn), then the `answer` function. From a run, `--keep correct` (default) keeps the
turns the judge scored correct; `answered` keeps every turn that answered without an error; `all` keeps every
turn. From SuperGlasses annotations, each hop with a search becomes a call (Image Search -> image_search, Text
Search -> web_search with its keywords, the annotated snippet as the result) and the ground truth the answer.
The photo is not in the traces, so the messages are text; the prompts are the agent's system prompt and a
short question prompt, not the full decision prompt the agent renders per step.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from core.files import write_atomic
from crag.scoring import PROMPTS_DIR
from tools import default_registry
from traces.schema import AnswerEvent, ToolCallEvent, TurnTrace
from traces.superglasses import IMAGE, NOT_DISPATCHED, TEXT, SGLog, import_logs, read_run

Keep = Literal["correct", "answered", "all"]
Call = tuple[str, dict[str, Any], str]  # tool name, arguments, what it returned
SUPERGLASSES_TASK = 2  # SuperGlasses questions are single-turn with web search allowed

# The final decision as a function (the agent's native-tools mode offers the same one)
ANSWER_TOOL: dict[str, Any] = {"type": "function", "function": {
    "name": "answer", "description": "Give the final answer to the user's question (or say you don't know).",
    "parameters": {"type": "object", "properties": {
        "answer": {"type": "string", "description": "The answer, or \"I don't know\"."},
        "confidence": {"type": "number", "minimum": 0, "maximum": 1},
        "entity": {"type": ["string", "null"], "description": "The entity the answer is about."},
        "rationale": {"type": "string"}}, "required": ["answer", "confidence"]}}}


class Function(BaseModel):
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class ToolCallOut(BaseModel):
    type: Literal["function"] = "function"
    function: Function


class Message(BaseModel):
    role: Literal["system", "user", "assistant", "tool"]
    content: str | None = None
    tool_calls: list[ToolCallOut] | None = None
    name: str | None = None  # the tool a tool message answers


class SFTRecord(BaseModel):
    """One training example in TRL's documented conversational tool-calling shape."""

    messages: list[Message]
    tools: list[dict[str, Any]]

    def line(self) -> str:
        return json.dumps(self.model_dump(mode="json", exclude_none=True), ensure_ascii=False)


# ---- pieces of a record ----------------------------------------------------------------------------------------


def system_prompt() -> str:
    return (PROMPTS_DIR / "vlm_system.txt").read_text(encoding="utf-8").strip()


def user_prompt(question: str, history: list[tuple[str, str]], has_image: bool) -> str:
    parts = ["An image from the user's smart glasses is attached." if has_image else "No image is available."]
    if history:
        parts.append("Earlier in this conversation:\n" + "\n".join(
            f"{i}. Q: {q} A: {a}" for i, (q, a) in enumerate(history, 1)))
    parts.append(f"Question: {question}")
    return "\n\n".join(parts)


def tool_specs(task: int, used: Iterable[str]) -> list[dict[str, Any]]:
    """The task's tools as OpenAI function specs (plus a bare spec for a used tool outside the built-in set),
    then the answer function."""
    specs = {t.name: t.json_schema() for t in default_registry().for_task(task)}
    for name in used:
        specs.setdefault(name, {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}})
    return [*specs.values(), ANSWER_TOOL]


def answer_message(answer: str, confidence: float | None, entity: str | None, rationale: str | None) -> Message:
    args: dict[str, Any] = {"answer": answer, "confidence": round(float(confidence if confidence is not None else 1.0), 3)}
    if entity:
        args["entity"] = entity
    if rationale:
        args["rationale"] = rationale
    return Message(role="assistant", tool_calls=[ToolCallOut(function=Function(name="answer", arguments=args))])


def call_messages(groups: list[list[Call]]) -> list[Message]:
    """Assistant turns (one per group of calls decided together), each followed by its tools' results."""
    out: list[Message] = []
    for group in groups:
        out.append(Message(role="assistant", tool_calls=[ToolCallOut(function=Function(name=n, arguments=a))
                                                        for n, a, _ in group]))
        out += [Message(role="tool", name=n, content=result) for n, _, result in group]
    return out


# ---- from a run ---------------------------------------------------------------------------------------------


def kept(trace: TurnTrace, keep: Keep) -> bool:
    if keep == "all":
        return True
    answered = not trace.abstained and not trace.error and trace.ended_by != "error"
    return answered and (keep == "answered" or trace.score == "correct")


def trace_groups(trace: TurnTrace) -> list[list[Call]]:
    """The dispatched tool calls of a turn, grouped as decided (a call `parallel_with` another joins its group)."""
    groups: list[list[Call]] = []
    for ev in trace.steps:
        if not isinstance(ev, ToolCallEvent) or (ev.error is not None and ev.error.kind in NOT_DISPATCHED):
            continue
        result = f"ERROR: {ev.error.message}" if ev.error else (ev.summary or "")
        item = (ev.tool, dict(ev.arguments), result)
        if ev.parallel_with and groups:
            groups[-1].append(item)
        else:
            groups.append([item])
    return groups


def record_from_trace(trace: TurnTrace, history: list[tuple[str, str]]) -> SFTRecord:
    groups = trace_groups(trace)
    ans = next((ev for ev in reversed(trace.steps) if isinstance(ev, AnswerEvent)), None)
    has_image = trace.image.size is not None
    messages = [Message(role="system", content=system_prompt()),
                Message(role="user", content=user_prompt(trace.question, history, has_image)),
                *call_messages(groups),
                answer_message(trace.answer, trace.confidence, trace.entity, ans.rationale if ans else None)]
    return SFTRecord(messages=messages, tools=tool_specs(trace.task, [n for g in groups for n, _, _ in g]))


def records_from_run(traces: list[TurnTrace], keep: Keep = "correct") -> list[SFTRecord]:
    """One record per kept turn; a turn's history is the conversation's earlier turns as the agent answered them."""
    by_session: dict[str, list[TurnTrace]] = {}
    for t in traces:
        by_session.setdefault(t.session_id, []).append(t)
    out = []
    for turns in by_session.values():
        turns.sort(key=lambda t: t.turn_index)
        for i, t in enumerate(turns):
            if kept(t, keep):
                out.append(record_from_trace(t, [(p.question, p.answer) for p in turns[:i]]))
    return out


# ---- from SuperGlasses annotations ------------------------------------------------------------------------------


def record_from_superglasses(log: SGLog) -> SFTRecord | None:
    """An annotated trajectory as a record; None without a question or a ground truth."""
    if not log.question or not log.ground_truth:
        return None
    groups: list[list[Call]] = []
    for hop in log.hops:
        if hop.tool_used == IMAGE:
            groups.append([("image_search", {}, hop.search_result_snippet or "")])
        elif hop.tool_used == TEXT:
            query = hop.search_keywords or hop.sub_question or log.question
            groups.append([("web_search", {"query": query}, hop.search_result_snippet or "")])
    has_image = log.labels.get("use_image") is not False
    messages = [Message(role="system", content=system_prompt()),
                Message(role="user", content=user_prompt(log.question, [], has_image)),
                *call_messages(groups), answer_message(log.ground_truth, 1.0, None, None)]
    return SFTRecord(messages=messages, tools=tool_specs(SUPERGLASSES_TASK, []))


# ---- CLI --------------------------------------------------------------------------------------------------------


def write_records(records: list[SFTRecord], out: str | Path) -> Path:
    path = Path(out)
    write_atomic(path, "".join(r.line() + "\n" for r in records))
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m traces.sft", description=__doc__.split("\n\n")[0])
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--run", help="a run folder, traces/runs/<run_id>")
    src.add_argument("--superglasses", help="SuperGlasses annotations (any layout traces.superglasses reads)")
    p.add_argument("--out", required=True, help="the JSONL file to write")
    p.add_argument("--keep", choices=["correct", "answered", "all"], default="correct",
                   help="which turns of a run: judged correct (default), answered without error, or all")
    args = p.parse_args(argv)
    problems: list[str] = []
    if args.run:
        traces = read_run(args.run, problems)
        if args.keep == "correct" and traces and not any(t.score for t in traces):
            print(f"no turn of {args.run} is scored: rescore it first, or use --keep answered", file=sys.stderr)
            return 2
        records = records_from_run(traces, args.keep)
        source = f"{len(traces)} turn(s)"
    else:
        logs = import_logs(args.superglasses, problems)
        records = [r for r in (record_from_superglasses(lg) for lg in logs) if r is not None]
        source = f"{len(logs)} annotated trajectories"
    for msg in problems:
        print(f"warning: {msg}", file=sys.stderr)
    path = write_records(records, args.out)
    print(f"{len(records)} example(s) from {source} -> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
