"""The graph on scripted policies: tool order, budget end, unknown tool, tool exception, hang."""

import json
import time

import pytest

from glasses_rag.policies.protocol import AnswerDraft, Decision, ScriptedPolicy
from glasses_rag.retrieval.search import NullSearch
from graph.agent import TurnInput
from graph.build import build_agent
from graph.config import AgentConfig, BudgetConfig
from tools.base import Hit, ToolContext, ToolOutput
from tools.registry import ToolRegistry, tool
from traces.schema import TurnTrace

reg = ToolRegistry()


@reg.register
@tool(writes={"evidence"})
def lookup(ctx: ToolContext, query: str, k: int = 2) -> ToolOutput:
    """Return k fake hits for the query.

    Args:
        query: what to look up
        k: how many hits
    """
    return ToolOutput(
        summary=f"{k} hits for {query}",
        keywords=query,
        method="fake",
        update={
            "evidence": [
                Hit(source="web", score=1.0 - i / 10, url=f"https://x/{i}", snippet=f"{query} {i}") for i in range(k)
            ]
        },
    )


@reg.register
@tool(tasks={2, 3})
def web_only(ctx: ToolContext) -> ToolOutput:
    """Only allowed in tasks 2 and 3."""
    return ToolOutput(summary="web")


@reg.register
@tool()
def boom(ctx: ToolContext) -> ToolOutput:
    """Always raises."""
    raise RuntimeError("kaboom")


@reg.register
@tool()
def sleepy(ctx: ToolContext, seconds: float = 30.0) -> ToolOutput:
    """Hangs for a long time."""
    time.sleep(seconds)
    return ToolOutput(summary="woke up")


def make(policy, **budget):
    config = AgentConfig(budget=BudgetConfig(**budget), warm_up=False)
    return build_agent(config, policy=policy, registry=reg, search=NullSearch(), run_id="t")


def run(policy, task=1, **budget):
    return make(policy, **budget).run_turn(
        TurnInput(task=task, session_id="s", interaction_id="i", question="what is this?")
    )


def call(name, **args):
    return Decision(action="call_tool", tool=name, arguments=args)


def test_tools_run_in_the_order_the_policy_chose_and_answer_is_kept_when_supported():
    p = ScriptedPolicy(
        [call("lookup", query="rocket", k=3), call("lookup", query="falcon")],
        AnswerDraft(answer="rocket 1", confidence=0.8),
    )
    tr = run(p)
    tools = [s.tool for s in tr.steps if s.node == "tool_call"]
    assert tools == ["lookup", "lookup"]
    assert [s.node for s in tr.steps] == ["tool_call", "tool_call", "plan", "answer", "verdict", "final"]
    assert tr.answer == "rocket 1" and not tr.abstained
    assert tr.steps[0].search_keywords == "rocket" and len(tr.steps[0].results) == 3
    # the second view the policy saw holds the first tool's evidence
    assert len(p.views[1].evidence) == 3 and p.views[1].done[0].tool == "lookup"
    assert tr.steps[-2].verdict.supported


def test_unsupported_answer_becomes_idk():
    tr = run(ScriptedPolicy([call("lookup", query="rocket")], AnswerDraft(answer="banana", confidence=0.9)))
    assert tr.answer == "I don't know" and tr.abstained
    assert tr.steps[-2].decision == "abstain"


def test_unknown_tool_and_bad_arguments_are_error_steps_not_crashes():
    p = ScriptedPolicy(
        [
            call("teleport", where="mars"),
            call("lookup", k="many"),
            call("lookup", query="x", extra=1),
            call("lookup", query="ok"),
        ],
        AnswerDraft(answer="ok 0", confidence=0.9),
    )
    tr = run(p)
    kinds = [s.error.kind if s.error else None for s in tr.steps if s.node == "tool_call"]
    assert kinds == ["unknown_tool", "bad_arguments", "bad_arguments", None]
    assert "teleport" in tr.steps[0].error.message
    assert p.views[1].done[0].error.startswith("unknown_tool")
    assert tr.answer == "ok 0"


def test_task_allow_list_blocks_web_tool_in_task_1_only():
    tr1 = run(ScriptedPolicy([call("web_only")]), task=1)
    tr2 = run(ScriptedPolicy([call("web_only")]), task=2)
    assert tr1.steps[0].error.kind == "not_allowed"
    assert tr2.steps[0].error is None


def test_tool_exception_is_recorded_and_the_turn_goes_on():
    tr = run(ScriptedPolicy([call("boom"), call("lookup", query="z")], AnswerDraft(answer="z 1", confidence=0.9)))
    assert tr.steps[0].error.kind == "tool_exception" and "kaboom" in tr.steps[0].error.message
    assert tr.answer == "z 1"


def test_step_limit_ends_in_an_answer():
    p = ScriptedPolicy([call("lookup", query=str(i)) for i in range(50)], AnswerDraft(answer="3 0", confidence=0.9))
    tr = run(p, max_steps=4)
    assert sum(s.node == "tool_call" for s in tr.steps) == 4
    assert tr.ended_by == "step_limit" and tr.answer == "3 0"


def test_hanging_tool_hits_the_time_budget_and_the_turn_ends_in_time():
    t0 = time.monotonic()
    tr = run(ScriptedPolicy([call("sleepy", seconds=30)], AnswerDraft(answer="x", confidence=0.9)), budget_s=1.5)
    assert time.monotonic() - t0 < 3.0
    assert tr.steps[0].error.kind == "timeout"
    assert tr.ended_by == "time_budget"
    assert tr.abstained  # "x" is unsupported by any evidence


def test_policy_that_raises_still_gives_an_answer():
    class Broken(ScriptedPolicy):
        def decide(self, view, image=None):
            raise ValueError("model returned garbage")

    tr = run(Broken([]))
    assert tr.steps[0].error.kind == "policy_error" and tr.answer == "I don't know"


def test_empty_question_is_a_clear_error():
    tr = make(ScriptedPolicy([])).run_turn(TurnInput(task=1, session_id="s", interaction_id="i", question="   "))
    assert tr.answer == "I don't know" and tr.error == "empty question"


def test_trace_round_trips_through_json_and_schema():
    import jsonschema

    from traces.schema import SCHEMA_FILE

    tr = run(ScriptedPolicy([call("lookup", query="rocket")], AnswerDraft(answer="rocket 0", confidence=0.9)))
    back = TurnTrace.model_validate_json(tr.model_dump_json())
    assert back == tr
    schema = json.loads(SCHEMA_FILE.read_text())
    assert schema == TurnTrace.model_json_schema(), "run `python -m traces.schema` to re-export the schema"
    jsonschema.validate(json.loads(tr.model_dump_json()), schema)


def test_tool_schema_comes_from_signature_and_docstring():
    t = reg.get("lookup")
    fn = t.json_schema()["function"]
    assert fn["name"] == "lookup" and fn["parameters"]["required"] == ["query"]
    assert fn["parameters"]["properties"]["query"]["description"] == "what to look up"
    with pytest.raises(TypeError):

        @ToolRegistry().register
        @tool()
        def undocumented(x: int) -> ToolOutput:
            return ToolOutput(summary="")


def test_parallel_calls_run_concurrently_and_each_is_a_step():
    from glasses_rag.policies.protocol import ParallelCall

    d = Decision(
        action="call_tool",
        tool="sleepy",
        arguments={"seconds": 0.6},
        parallel=[
            ParallelCall(tool="sleepy", arguments={"seconds": 0.6}),
            ParallelCall(tool="lookup", arguments={"query": "par"}, sub_question="sub"),
        ],
    )
    t0 = time.monotonic()
    tr = run(ScriptedPolicy([d], AnswerDraft(answer="par 0", confidence=0.9)))
    assert time.monotonic() - t0 < 1.1  # three calls, one of them 0.6 s twice over, took one call's time
    acts = [s for s in tr.steps if s.node == "tool_call"]
    assert [s.tool for s in acts] == ["sleepy", "sleepy", "lookup"]
    assert acts[2].sub_question == "sub" and len(acts[2].results) == 2
    assert [s.index for s in tr.steps] == list(range(len(tr.steps)))
    assert tr.answer == "par 0"


def test_parallel_calls_respect_the_step_limit():
    from glasses_rag.policies.protocol import ParallelCall

    d = Decision(
        action="call_tool",
        tool="lookup",
        arguments={"query": "a"},
        parallel=[ParallelCall(tool="lookup", arguments={"query": str(i)}) for i in range(10)],
    )
    tr = run(ScriptedPolicy([d]), max_steps=3)
    assert sum(s.node == "tool_call" for s in tr.steps) == 3


def test_answer_reserve_keeps_time_for_a_slow_answer_step():
    class SlowAnswer(ScriptedPolicy):
        def answer(self, view, image=None):
            time.sleep(0.8)
            return AnswerDraft(answer="rocket 0", confidence=0.9)

    p = SlowAnswer([call("sleepy", seconds=30)])
    tr = run(p, budget_s=2.0, answer_reserve_s=1.2)
    assert tr.steps[0].error.kind == "timeout"  # the tool got only budget - reserve
    assert tr.answer == "I don't know"  # answered in time; unsupported by any evidence, so abstained
    assert not any(s.error for s in tr.steps if s.node == "answer")
    tr = run(SlowAnswer([call("sleepy", seconds=30)]), budget_s=2.0)  # default reserve 0.4 s: the answer times out
    assert next(s for s in tr.steps if s.node == "answer").error.kind == "timeout"


def test_conversations_are_pulled_lazily_a_few_ahead_of_the_workers(tmp_path):
    """A dataset is never decoded whole: the runner pulls at most concurrency + max(1, concurrency // 8)
    conversations ahead of the finished ones, and every one of them runs."""
    from support import make_agent

    from glasses_rag.harness.runner import run_task
    from glasses_rag.retrieval.schema import Conversation, Turn
    from traces.store import TraceStore

    pulled, finished, ahead = [0], [0], []

    def conversations():
        for i in range(40):
            pulled[0] += 1
            ahead.append(pulled[0] - finished[0])
            yield Conversation(
                session_id=f"lazy-{i}", turns=[Turn(interaction_id=f"lazy-{i}", query="what is this?")], answers=["x"]
            )

    def done(_trace):
        finished[0] += 1

    stats = run_task(make_agent(), conversations(), 2, TraceStore(tmp_path, "lazy"), concurrency=8, on_turn=done)
    assert stats.turns == 40 and finished[0] == 40
    assert max(ahead) <= 8 + 1
