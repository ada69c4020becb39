"""One turn record: the tool context and the policy's view are filled from the state's own fields (a field added to
`tools.base.ToolState` reaches tools, policies, the trace and the training export with no other edit), and the
training export renders the view the policy had from the state it folds back from the trace."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from glasses_rag.policies.protocol import ScriptedPolicy
from glasses_rag.retrieval.search import NullSearch
from glasses_rag.training.export import ExportOptions, dispatched, summary_of, turn_view
from graph.agent import TurnInput
from graph.build import build_agent
from graph.config import AgentConfig
from graph.state import tool_spec
from tools import Box, Fact, Hit, Replace, ToolContext, ToolOutput, ToolRegistry, tool
from tools.base import state_fields

ROOT = Path(__file__).resolve().parents[1]

# Runs in a fresh interpreter: tools/base.py is read with ONE line added to ToolState (a new field, `notes`), then
# the agent is built and run as usual, with a tool that writes the field and one that reads it.
NEW_FIELD = r'''
import ast, importlib.util, json, sys
from pathlib import Path

path = Path("tools/base.py")
src = path.read_text(encoding="utf-8")
cls = next(n for n in ast.parse(src).body if isinstance(n, ast.ClassDef) and n.name == "ToolState")
lines = src.splitlines(keepends=True)
line = '    notes: Annotated[list[str], append] = Field(default_factory=list, description="Notes, appended.")\n'
src = "".join(lines[: cls.end_lineno] + [line] + lines[cls.end_lineno :])
spec = importlib.util.spec_from_file_location("tools.base", path)
module = importlib.util.module_from_spec(spec)
sys.modules["tools.base"] = module
exec(compile(src, str(path), "exec"), module.__dict__)

from glasses_rag.policies.protocol import ScriptedPolicy
from glasses_rag.retrieval.search import NullSearch
from glasses_rag.training.export import ExportOptions, dispatched, summary_of, turn_view
from graph.agent import TurnInput
from graph.build import build_agent
from graph.config import AgentConfig
from tools import ToolContext, ToolOutput, ToolRegistry, tool

seen = {}


@tool(writes={"notes"})
def jot(ctx: ToolContext, text: str) -> ToolOutput:
    """Write a note."""
    return ToolOutput(summary="noted", update={"notes": [text]})


@tool()
def read_notes(ctx: ToolContext) -> ToolOutput:
    """Read the notes."""
    seen["tool"] = list(ctx.notes)
    return ToolOutput(summary=", ".join(ctx.notes))


calls = [("jot", {"text": "a"}), ("jot", {"text": "b"}), ("read_notes", {})]
policy = ScriptedPolicy(
    [{"action": "call_tool", "tool": t, "arguments": a} for t, a in calls], answer={"answer": "x", "confidence": 0.9}
)
registry = ToolRegistry([jot.__tool__, read_notes.__tool__])
config = AgentConfig(warm_up=False, self_check="off")
agent = build_agent(config, search=NullSearch(), policy=policy, registry=registry, run_id="notes")
trace = agent.run_turn(TurnInput(task=1, session_id="s", interaction_id="s-0", question="note it"))
exported = turn_view(trace, [], [], [summary_of(ev) for ev in dispatched(trace)], ExportOptions())
print(json.dumps({
    "policy": [list(getattr(v, "notes", ["<none>"])) for v in policy.views],
    "tool": seen.get("tool"),
    "trace": [ev.update for ev in trace.tool_calls()],
    "export": list(getattr(exported, "notes", ["<none>"])),
    "errors": trace.error_kinds(),
}))
'''


def test_a_field_added_to_the_tool_state_reaches_tools_policies_the_trace_and_the_export():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run(
        [sys.executable, "-c", NEW_FIELD], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert run.returncode == 0, run.stderr[-3000:]
    seen = json.loads(run.stdout.strip().splitlines()[-1])
    assert seen["errors"] == []
    assert seen["policy"] == [[], ["a"], ["a", "b"], ["a", "b"]]  # before each decision, folded by its reducer
    assert seen["tool"] == ["a", "b"]
    assert seen["trace"] == [{"notes": ["a"]}, {"notes": ["b"]}, {}]
    assert seen["export"] == ["a", "b"]


# ---- the export's view is the policy's view ----------------------------------------------------------------------

KG = Hit(source="image_kg", score=0.9, entity_name="Falcon 9", attributes={"height": "70 m"}, snippet="height: 70 m")
WEB = Hit(source="web", score=0.5, url="https://x.test/a", title="A", snippet="about falcons", query="falcon")


@tool(writes={"evidence", "crop"})
def look(ctx: ToolContext) -> ToolOutput:
    """Find things."""
    return ToolOutput(summary="2 hits", update={"evidence": [KG, WEB], "crop": Box(x0=1, y0=2, x1=30, y1=40)})


@tool(writes={"evidence", "facts"})
def keep_best(ctx: ToolContext) -> ToolOutput:
    """Keep the best hit."""
    best = max(ctx.evidence, key=lambda h: h.score)
    return ToolOutput(
        summary="kept 1", update={"evidence": Replace([best]), "facts": [Fact(text="70 m", source="keep_best")]}
    )


def test_the_export_renders_the_view_the_policy_had_from_the_trace_alone():
    registry = ToolRegistry([look.__tool__, keep_best.__tool__])
    decisions = [{"action": "call_tool", "tool": "look"}, {"action": "call_tool", "tool": "keep_best"}]
    policy = ScriptedPolicy(decisions, answer={"answer": "70 m", "confidence": 0.9})
    config = AgentConfig(warm_up=False, self_check="off")
    agent = build_agent(config, search=NullSearch(), policy=policy, registry=registry, run_id="record")
    trace = agent.run_turn(TurnInput(task=2, session_id="s", interaction_id="s-0", question="how tall is it?"))
    assert trace.error_kinds() == [] and len(policy.views) == 3
    assert [h.entity_name for h in policy.views[2].evidence] == ["Falcon 9"]  # replaced, not merged
    tools = [tool_spec(t) for t in registry.for_task(2)]
    done = [summary_of(ev) for ev in dispatched(trace)]
    for i, seen in enumerate(policy.views):
        exported = turn_view(trace, [], tools, done[:i], ExportOptions())
        assert state_fields(exported) == state_fields(seen), i
        assert exported.model_dump(exclude={"remaining_s"}) == seen.model_dump(exclude={"remaining_s"}), i
