"""A tool added as one new file joins the agent: offered to model policies with its schema, chosen by the default
planner through its capability tags, its results in the state, the answer and the trace. No other edit."""

from __future__ import annotations

import sys
import textwrap

import pytest

from glasses_rag.crag_mm.dataset import decode_image, load_all
from glasses_rag.crag_mm.demo import ensure_demo
from glasses_rag.testing.fake_model_server import FakeOpenAIServer
from graph.agent import TurnInput
from graph.build import build_agent
from graph.config import AgentConfig, ToolsConfig

PLUGIN = textwrap.dedent('''
    """A second web search, written as a user would: one file, one decorated function."""
    from tools.base import Hit, ToolContext, ToolOutput
    from tools.registry import tool

    FACT = "Falcon 9 first stages usually land on the drone ship Of Course I Still Love You."


    @tool(tasks={2, 3}, tags={"searches_web"}, writes={"evidence"})
    def encyclopedia_search(ctx: ToolContext, query: str, k: int = 3) -> ToolOutput:
        """Search a small offline encyclopedia.

        Args:
            query: search keywords
            k: how many articles
        """
        hits = [Hit(source="web", score=0.9, url="https://encyclopedia.test/falcon-9-landing",
                    title="Falcon 9 landings", snippet=FACT, query=query)] if "falcon" in query.lower() else []
        return ToolOutput(summary=f"{len(hits)} article(s)", update={"evidence": hits}, keywords=query,
                          method="encyclopedia-test")
''')
QUESTION = "which drone ship does this rocket land on?"
ANSWER = "Of Course I Still Love You"


@pytest.fixture()
def plugin(tmp_path, monkeypatch):
    (tmp_path / "encyclopedia_plugin.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "encyclopedia_plugin"
    sys.modules.pop("encyclopedia_plugin", None)


@pytest.fixture(scope="module")
def rocket():
    demo = ensure_demo()
    conv = next(c for c in load_all(demo.single_turn)[0] if c.answers[0] == "Falcon 9")
    return decode_image(conv.image)[0]


def run(config: AgentConfig, image, policy=None):
    agent = build_agent(config, policy=policy, task=2, index_dir=ensure_demo().root)  # the data prepared first
    return agent, agent.run_turn(
        TurnInput(task=2, session_id="ext", interaction_id="ext-0", question=QUESTION, image=image)
    )


def test_the_rule_planner_chooses_the_new_tool_by_its_tag(plugin, rocket):
    agent, tr = run(AgentConfig(tools=ToolsConfig(modules=[plugin]), warm_up=False), rocket)
    assert "encyclopedia_search" in {s.name for s in agent.registry.with_tag("searches_web", 2)}
    calls = [s for s in tr.tool_calls() if s.tool == "encyclopedia_search"]
    assert calls, [s.tool for s in tr.tool_calls()]
    assert calls[0].error is None and calls[0].results[0].url == "https://encyclopedia.test/falcon-9-landing"
    assert "Falcon 9" in calls[0].arguments["query"] and calls[0].wrote == ["evidence"]
    assert ANSWER in tr.answer  # the plugin's evidence reached the answer step (only the plugin holds this fact)


def test_a_model_policy_is_offered_the_new_tool_and_its_call_runs(plugin, rocket):
    F = FakeOpenAIServer
    with F() as srv:
        srv.push(
            F.tool_call_reply("image_search", {}),
            F.tool_call_reply("encyclopedia_search", {"query": "Falcon 9 drone ship"}),
            F.text_reply('{"action": "answer", "rationale": "the encyclopedia says"}'),
            F.text_reply(f'{{"answer": "{ANSWER}", "confidence": 0.9, "entity": "Falcon 9"}}'),
            F.text_reply('{"verifications": [], "supported": true, "confidence": 0.9, "reason": "evidence [2]"}'),
        )
        config = AgentConfig(
            policy=f"openai:{srv.base_url}#fake-vlm", tools=ToolsConfig(modules=[plugin]), warm_up=False
        )
        _, tr = run(config, rocket)
        first = srv.requests[0]
    # offered with its schema: as a native tool, or as a branch of the structured-output decision schema
    if "tools" in first:
        params = next(
            t["function"]["parameters"] for t in first["tools"] if t["function"]["name"] == "encyclopedia_search"
        )
    else:
        branches = first["response_format"]["json_schema"]["schema"]["anyOf"]
        params = next(
            b["properties"]["arguments"]
            for b in branches
            if b["properties"].get("tool", {}).get("const") == "encyclopedia_search"
        )
    assert params["required"] == ["query"]
    assert params["properties"]["query"]["description"] == "search keywords"
    system = first["messages"][0]["content"]
    assert "encyclopedia_search(query: string, k: integer = 3)" in system  # the text tool list comes from the registry
    call = next(s for s in tr.tool_calls() if s.tool == "encyclopedia_search")
    assert call.error is None and call.results[0].snippet.endswith("Of Course I Still Love You.")
    assert tr.answer == ANSWER
