"""Prompt profiles (prompts/profiles.yaml): 'full' is the default prompt unchanged, 'compact' a shorter one for small
models, and each model call's trace record names the profile that rendered its prompt."""

from __future__ import annotations

import pytest

from glasses_rag.core.calls import collect_model_calls
from glasses_rag.policies.model.policy import make_model_policy
from glasses_rag.policies.model.prompts import Prompts, prompt_profile
from glasses_rag.policies.protocol import PolicyView, ToolSpec
from glasses_rag.testing.fake_model_server import FakeOpenAIServer

SEARCH = ToolSpec(
    name="web_search",
    signature="web_search(query: string, k: integer = 5)",
    description="Search the web for pages about the query. Returns titles and urls.",
    json_schema={
        "type": "function",
        "function": {
            "name": "web_search",
            "parameters": {
                "type": "object",
                "required": ["query"],
                "properties": {
                    "query": {"type": "string", "description": "search keywords"},
                    "k": {"type": "integer", "default": 5, "description": "how many pages"},
                },
            },
        },
    },
)
VIEW = PolicyView(
    task=2, question="When was this built?", has_image=False, tools=[SEARCH], remaining_steps=3, remaining_s=9.0
)


def test_full_is_the_default_and_compact_is_shorter():
    full, compact = Prompts(), Prompts(profile="compact")
    assert full.profile.name == "full" and Prompts(profile="full").system(VIEW, "json") == full.system(VIEW, "json")
    long, short = full.system(VIEW, "json")["content"], compact.system(VIEW, "json")["content"]
    assert "k: how many pages" in long and "search keywords" in long
    assert "- web_search(query: string) - Search the web for pages about the query." in short
    assert "how many pages" not in short and "$" not in short and "I don't know" in short
    assert len(short) < 0.75 * len(long)
    assert (compact.max_hits, compact.evidence_chars) == (3, 200)
    # what is not swapped is the same template: the turn and the decide text
    assert compact.turn(VIEW, None) == full.turn(VIEW, None) and compact.decide_text(VIEW) == full.decide_text(VIEW)


def test_an_unknown_profile_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown prompt profile 'tiny'.*full, compact"):
        prompt_profile("tiny")


def test_each_model_call_records_its_profile():
    with FakeOpenAIServer() as srv:
        for profile in ("compact", "full"):
            srv.push(
                FakeOpenAIServer.text_reply(
                    '{"action": "answer", "answer": "1900", "confidence": 0.9, "entity": "x", "rationale": "r"}'
                )
            )
            policy = make_model_policy(f"openai:{srv.base_url}#fake-vlm", prompt_profile=profile)
            with collect_model_calls() as calls:
                policy.decide(VIEW)
            assert [c.prompt_profile for c in calls] == [profile]
            system = srv.requests[-1]["messages"][0]["content"]
            assert ("how many pages" in system) == (profile == "full")
