"""Reply constraints (structured output, native tools, JSON in text) and their fallbacks, streaming, replicas,
text-only mode, image encoding, prompts generated from the registry, model options, the model decoupler and the
self-check's round trips, against the local fake OpenAI-compatible server."""

import json
import re
import threading
from enum import StrEnum
from typing import Literal

import jsonschema
import pytest
from PIL import Image
from support import make_agent

import glasses_rag.models.replicas as replicas
from glasses_rag.core.calls import collect_model_calls
from glasses_rag.models.vlm import ModelConfig, model_config_from_options, parse_spec
from glasses_rag.models.vlm.openai_server import OpenAICompatibleBackend
from glasses_rag.policies.model.policy import PROMPTS_DIR, ModelPolicy, decision_schema, make_model_policy
from glasses_rag.policies.protocol import IDK, PolicyView
from glasses_rag.testing.fake_model_server import FakeOpenAIServer
from graph.agent import TurnInput
from graph.state import tool_spec
from tools import default_registry
from tools.base import ToolContext, ToolOutput
from tools.registry import ToolRegistry, tool

F = FakeOpenAIServer
MSGS = [{"role": "user", "content": "hi"}]


def _view(task: int = 1, **kw) -> PolicyView:
    tools = [tool_spec(t) for t in default_registry().for_task(task)]
    base = dict(
        task=task,
        question="What brand is this bottle?",
        has_image=True,
        tools=tools,
        remaining_steps=4,
        remaining_s=30.0,
    )
    return PolicyView(**{**base, **kw})


def _policy(srv, **kw) -> ModelPolicy:
    return make_model_policy(f"openai:{srv.base_url}#fake-vlm", max_retries=0, **kw)


# ---- structured output -----------------------------------------------------------------------------------------


def test_decision_is_constrained_to_the_allowed_tools_schema(srv):
    srv.push(F.text_reply('{"action": "call_tool", "tool": "ocr", "arguments": {"region": "crop"}, "rationale": "r"}'))
    with collect_model_calls() as calls:
        d = _policy(srv).decide(_view(), Image.new("RGB", (32, 32)))
    assert d.tool == "ocr" and d.arguments == {"region": "crop"}
    rf = srv.requests[0]["response_format"]
    assert rf["type"] == "json_schema" and rf["json_schema"]["name"] == "next_step" and "tools" not in srv.requests[0]
    schema = rf["json_schema"]["schema"]
    tools = {o["properties"]["tool"]["const"] for o in schema["anyOf"] if "tool" in o["properties"]}
    assert tools == {t.name for t in default_registry().for_task(1)} and "web_search" not in tools
    ok = [
        {"action": "call_tool", "tool": "ocr", "arguments": {"region": "crop"}, "rationale": "r"},
        {"action": "call_tool", "tool": "image_search", "arguments": {"k": 3}, "rationale": "r"},
        {"action": "answer", "answer": "Pepsi", "confidence": 0.7, "entity": None, "rationale": "enough"},
    ]
    bad = [
        {"action": "call_tool", "tool": "ocr", "arguments": {"region": "sky"}, "rationale": "r"},  # not in the enum
        {"action": "call_tool", "tool": "image_search", "arguments": {"k": 0}, "rationale": "r"},  # below the bound
        {"action": "call_tool", "tool": "web_search", "arguments": {"query": "q"}, "rationale": "r"},  # not allowed
        {"action": "call_tool", "tool": "ocr", "arguments": {"zoom": 2}, "rationale": "r"},  # unknown argument
        {"action": "answer", "rationale": "enough"},
    ]  # an answer decision carries the answer
    for obj in ok:
        jsonschema.validate(obj, schema)
    for obj in bad:
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(obj, schema)
    assert "$ref" not in json.dumps(schema) and calls[0].mode == "structured"


def test_llama_cpp_server_shape_of_response_format(srv):
    srv.push(F.text_reply('{"answer": "Coca-Cola", "confidence": 0.8, "entity": null, "rationale": "r"}'))
    a = _policy(srv, response_format="json_object").answer(_view(), None)
    assert a.answer == "Coca-Cola"
    rf = srv.requests[0]["response_format"]
    assert rf["type"] == "json_object" and set(rf["schema"]["required"]) >= {"answer", "confidence"}


def test_fallback_structured_then_native_tools_then_json_text_is_remembered():
    """A rejected constraint is not offered again; each request's prompt asks for the reply shape that request is
    constrained to (a native-tools request never asks for a bare JSON object)."""
    answer = '{"action": "answer", "answer": "x", "confidence": 0.5, "entity": null, "rationale": "r"}'
    with FakeOpenAIServer(response_formats=(), tools=False) as srv:  # a server that takes neither
        srv.push(F.text_reply(answer), F.text_reply("I would call ocr."), F.text_reply(answer))
        p = _policy(srv)
        with collect_model_calls() as calls:
            assert p.decide(_view(), None).action == "answer"
            assert p.decide(_view(), None).action == "answer"
        structured, plain1, native, plain2, plain3 = srv.requests
        assert "response_format" in structured and not {"tools", "response_format"} & plain1.keys()
        assert "tools" in native and "final_answer" in native["messages"][0]["content"]
        # the fallback reply to the native prompt could not be read: asked again with the JSON prompt
        assert plain2["messages"] == native["messages"] and not {"tools", "response_format"} & plain2.keys()
        assert not {"tools", "response_format"} & plain3.keys() and '"action"' in plain3["messages"][0]["content"]
        assert [c.mode for c in calls] == ["json_text", "json_text", "json_text"]
        srv.reset()
        srv.push(F.text_reply(answer))
        p.decide(_view(), None)
        assert len(srv.requests) == 1 and not {"tools", "response_format"} & srv.requests[0].keys()  # remembered
    with FakeOpenAIServer(response_formats=()) as srv:  # tools but no response_format (e.g. an old server)
        srv.push(F.text_reply(answer), F.tool_call_reply("ocr", {}))
        p = _policy(srv)
        p.decide(_view(), None)
        with collect_model_calls() as calls:
            assert p.decide(_view(), None).tool == "ocr"
        assert calls[0].mode == "native_tools"


def test_forced_json_text_mode_sends_no_constraint(srv):
    srv.push(F.text_reply('{"action": "answer"}'))
    with collect_model_calls() as calls:
        _policy(srv, decision_mode="json_text").decide(_view(), None)
    assert "tools" not in srv.requests[0] and "response_format" not in srv.requests[0]
    assert calls[0].mode == "json_text"


# ---- streaming -------------------------------------------------------------------------------------------------


def test_stream_chunks_are_assembled(srv):
    srv.push(F.tool_call_reply("web_search", {"query": "a long enough query to span chunks"}, content="Let me look."))
    b = OpenAICompatibleBackend(srv.base_url, "fake-vlm", max_retries=0)
    r = b.complete(MSGS, tools=[{"type": "function", "function": {"name": "web_search", "parameters": {}}}])
    req = srv.requests[0]
    assert req["stream"] is True and req["stream_options"] == {"include_usage": True}
    assert r.text == "Let me look." and r.tool_calls[0].name == "web_search"
    assert r.tool_calls[0].arguments == {"query": "a long enough query to span chunks"}
    assert (r.usage.input_tokens, r.usage.output_tokens, r.finish_reason, r.mode) == (
        12,
        7,
        "tool_calls",
        "native_tools",
    )


def test_a_server_that_reports_no_usage_gives_unknown_token_counts_not_zero(srv):
    from glasses_rag.core.calls import collect_model_calls
    from glasses_rag.harness.console import summary_lines
    from glasses_rag.harness.runner import RunStats
    from glasses_rag.models.vlm.base import complete_and_report
    from traces.schema import TokenTotals

    reply = F.text_reply('{"action": "answer"}')
    del reply["usage"]  # as llama-cpp-python's server does when streaming
    srv.push(reply)
    b = OpenAICompatibleBackend(srv.base_url, "fake-vlm", max_retries=0)
    with collect_model_calls() as calls:
        r = complete_and_report(b, "decide", MSGS)
    assert r.usage.input_tokens is None and r.usage.output_tokens is None
    assert calls[0].prompt_tokens is None and calls[0].completion_tokens is None
    stats = RunStats(model_calls=1, calls_without_usage=1)
    assert "1 call(s) without token counts" in summary_lines(stats)[-1]
    assert TokenTotals(calls=1, calls_without_usage=1).prompt_tokens == 0


def test_server_without_streaming_is_asked_without_it():
    with FakeOpenAIServer(stream=False) as srv:
        srv.push(F.text_reply("plain"), F.text_reply("again"))
        b = OpenAICompatibleBackend(srv.base_url, "fake-vlm", max_retries=0)
        assert b.complete(MSGS).text == "plain" and b.stream is False
        assert b.complete(MSGS).text == "again"
        assert [r.get("stream") for r in srv.requests] == [True, None, None]


# ---- replicas --------------------------------------------------------------------------------------------------


def test_replicas_least_outstanding_and_failover(monkeypatch):
    monkeypatch.setattr(replicas, "COOLDOWN_S", (0.3, 1.0))
    with FakeOpenAIServer(delay_s=0.3) as a, FakeOpenAIServer(delay_s=0.3) as b:
        backend = OpenAICompatibleBackend([a.base_url, b.base_url], "fake-vlm", max_retries=0)
        threads = [threading.Thread(target=backend.complete, args=(MSGS,)) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(a.requests) == 4 and len(b.requests) == 4  # spread by outstanding requests, not piled on one
        port_b = b.port
        b.stop()
        a.reset()
        for _ in range(3):  # b is down: every request still succeeds, on a
            backend.complete(MSGS)
        assert len(a.requests) == 3
        down = [r for r in backend.client.replicas if r.failures]
        assert len(down) == 1 and str(port_b) in down[0].base_url
    with FakeOpenAIServer(port=port_b) as b2:  # b is back: after its cool-down it serves again
        import time

        time.sleep(0.35)
        backend.client.replicas[0].base_url = "http://127.0.0.1:9/v1"  # a is gone for good
        backend.complete(MSGS)
        assert len(b2.requests) == 1


def test_spec_with_replicas_and_options(tmp_path):
    c = parse_spec("openai:http://h1:8000/v1,http://h2:8000/v1#Qwen/Qwen2.5-VL-7B-Instruct")
    assert c.base_urls() == ["http://h1:8000/v1", "http://h2:8000/v1"] and c.model == "Qwen/Qwen2.5-VL-7B-Instruct"
    with pytest.raises(ValueError):
        parse_spec("openai:http://h1:8000/v1,h2:8000#m")
    with pytest.raises(ValueError, match="Extra inputs"):
        ModelConfig(backend="openai", base_url="http://h", colour="red")
    cfg = ModelConfig(
        backend="llamacpp",
        path="m.gguf",
        text_only=True,
        chat_format="gemma",
        n_ctx=2048,
        image_max_side=512,
        temperature=0.2,
        max_tokens=64,
        decision_mode="structured",
    )
    assert cfg.decision_modes() == ("structured", "json_text")
    assert model_config_from_options("rule", pool_size=64) is None
    with pytest.raises(ValueError, match="need a model"):
        model_config_from_options("rule", text_only=True)
    o = model_config_from_options(
        "openai:http://h:8000/v1#m", text_only=True, max_tokens=99, pool_size=64, chat_template=None
    )
    assert o.text_only and o.max_tokens == 99 and o.pool_size == 64 and o.chat_template is None
    f = tmp_path / "m.toml"
    f.write_text(
        '[model]\nbackend = "openai"\nbase_url = "http://h:8000/v1"\nmodel = "m"\nmax_tokens = 32\n'
        'response_format = "json_object"\n'
    )
    o = model_config_from_options("ignored", config_file=f, temperature=0.5)
    assert (o.max_tokens, o.response_format, o.temperature) == (32, "json_object", 0.5)


# ---- images, text-only -----------------------------------------------------------------------------------------


def test_text_only_sends_no_image_and_says_so(srv):
    srv.push(F.text_reply('{"action": "answer"}'))
    _policy(srv, text_only=True).decide(_view(), Image.new("RGB", (64, 64)))
    msgs = srv.requests[0]["messages"]
    assert all(isinstance(m["content"], str) for m in msgs)
    assert "cannot see it" in msgs[-1]["content"] and "is attached" not in msgs[-1]["content"]


def test_image_is_encoded_once_per_turn_and_size(srv, monkeypatch):
    import glasses_rag.models.vlm.base as base

    count = {"n": 0}
    real = base._encode

    def counting(*a, **k):
        count["n"] += 1
        return real(*a, **k)

    monkeypatch.setattr(base, "_encode", counting)
    srv.push(*[F.text_reply('{"action": "answer"}')] * 3)
    img = Image.new("RGB", (2048, 1536), (10, 20, 30))
    p = _policy(srv)
    p.decide(_view(), img)
    p.decide(_view(), img)
    assert count["n"] == 1
    urls = {json.dumps(r["messages"][-1]["content"][0]) for r in srv.requests}
    assert len(urls) == 1
    _policy(srv, image_max_side=512).decide(_view(), img)
    assert count["n"] == 2


# ---- prompts ---------------------------------------------------------------------------------------------------


def test_every_prompt_example_is_json_and_the_tool_list_comes_from_the_registry(srv):
    reg = ToolRegistry()

    @reg.register
    @tool(tags={"looks_up_weather"})
    def weather_lookup(ctx: ToolContext, city: str, unit: Literal["celsius", "fahrenheit"] = "celsius") -> ToolOutput:
        """Look up today's weather.

        Args:
            city: the city name
            unit: the temperature unit
        """
        return ToolOutput(summary="sunny")

    view = PolicyView(
        task=1,
        question="Is it warm there?",
        has_image=False,
        tools=[tool_spec(t) for t in reg.for_task(1)],
        remaining_steps=3,
        remaining_s=9.0,
    )
    srv.push(F.text_reply('{"action": "answer"}'))
    _policy(srv).decide(view, None)
    system = srv.requests[0]["messages"][0]["content"]  # the tool list is part of the turn's stable prefix
    assert (
        'weather_lookup(city: string, unit: "celsius" | "fahrenheit" = "celsius") - Look up today\'s weather.' in system
    )
    assert "city: the city name" in system and "unit: the temperature unit" in system
    assert "self-check" not in system.lower() and "weather_lookup" not in srv.requests[0]["messages"][-1]["content"]
    for p in PROMPTS_DIR.glob("vlm_*.txt"):
        for line in p.read_text().splitlines():
            if line.startswith("{"):  # an example, if a prompt shows one, is JSON
                json.loads(re.sub(r"\$\w+", "x", line))
    # the reply formats name every key in words and show no example a small model could copy (issue 41)
    keys = {
        "vlm_format_json": ["action", "tool", "arguments", "rationale", "answer", "confidence", "entity"],
        "vlm_answer": ["answer", "confidence", "entity", "rationale"],
        "vlm_cove": ["verifications", "question", "supported", "confidence", "reason"],
        "vlm_decouple": ["sub_questions", "entity"],
        "vlm_selfcheck_consistency": ["consistent", "reason"],
    }
    for name, named in keys.items():
        text = (PROMPTS_DIR / f"{name}.txt").read_text()
        assert all(f'"{k}"' in text for k in named), name


class Mode(StrEnum):
    fast = "fast"
    slow = "slow"


def test_decision_schema_inlines_enum_definitions():
    reg = ToolRegistry()

    @reg.register
    @tool()
    def scan(mode: Mode = Mode.fast) -> ToolOutput:
        """Scan."""
        return ToolOutput(summary="")

    schema = decision_schema([tool_spec(t) for t in reg.for_task(1)])["schema"]
    jsonschema.validate({"action": "call_tool", "tool": "scan", "arguments": {"mode": "slow"}, "rationale": ""}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(
            {"action": "call_tool", "tool": "scan", "arguments": {"mode": "x"}, "rationale": ""}, schema
        )


def test_every_reply_schema_is_bounded():
    """Every free text of a reply (an answer, a rationale, a tool's query) has a bound, so a grammar-constrained
    reply always reaches its end, within the schema's longest reply (max_json_chars)."""
    import xgrammar as xgr

    from glasses_rag.policies.model.replies import (
        ANSWER_CHARS,
        ANSWER_SCHEMA,
        CONSISTENCY_SCHEMA,
        COVE_SCHEMA,
        max_json_chars,
    )

    tools = [tool_spec(t) for t in default_registry().for_task(3)]
    schemas = [
        decision_schema(tools),
        *(decision_schema([t]) for t in tools),
        ANSWER_SCHEMA,
        COVE_SCHEMA,
        CONSISTENCY_SCHEMA,
    ]
    for schema in schemas:
        assert max_json_chars(schema) < 2000, schema["name"]
    # the bound is the grammar's: an answer one character too long is refused, the longest one fits the count
    grammar = xgr.Grammar.from_json_schema(json.dumps(ANSWER_SCHEMA["schema"]), any_whitespace=False, strict_mode=True)
    reply = '{"answer": "%s", "confidence": 0.5, "entity": null, "rationale": ""}'
    assert xgr.testing._is_grammar_accept_string(grammar, reply % ("1" * ANSWER_CHARS))
    assert not xgr.testing._is_grammar_accept_string(grammar, reply % ("1" * (ANSWER_CHARS + 1)))
    query = json.dumps(
        {"action": "call_tool", "tool": "web_search", "arguments": {"query": "q" * 161}, "rationale": ""}
    )
    web = xgr.Grammar.from_json_schema(
        json.dumps(decision_schema(tools)["schema"]), any_whitespace=False, strict_mode=True
    )
    assert not xgr.testing._is_grammar_accept_string(web, query)
    assert xgr.testing._is_grammar_accept_string(web, query.replace("q" * 161, "q" * 160))
    assert len(reply % ("1" * ANSWER_CHARS)) <= max_json_chars(ANSWER_SCHEMA)
    # an open part has no longest reply
    assert max_json_chars({"type": "object", "properties": {"q": {"type": "string"}}}) == float("inf")


# ---- the model decoupler and the self-check --------------------------------------------------------------------


def test_query_decoupler_uses_the_policy_model_and_falls_back_to_the_heuristic(srv):
    srv.push(F.text_reply('{"action": "call_tool", "tool": "query_decoupler", "arguments": {}, "rationale": "split"}'))
    srv.route(
        "Keep a simple question as one sub-question",
        F.text_reply(
            '{"sub_questions": ["Who built the Falcon 9?", "When did the Falcon 9 first fly?"], "entity": "Falcon 9"}'
        ),
    )
    srv.push(F.text_reply('{"action": "answer", "rationale": "r"}'), F.text_reply('{"answer": "I don\'t know"}'))
    agent = make_agent(_policy(srv), budget_s=20)
    tr = agent.run_turn(
        TurnInput(task=2, session_id="s", interaction_id="i", question="Who built this and when did it fly?")
    )
    (ev,) = tr.tool_calls()
    assert ev.method == "model-decoupler:openai:fake-vlm" and ev.sub_questions[1] == "When did the Falcon 9 first fly?"
    assert [c.purpose for c in ev.model_calls] == ["decide", "decouple"] and ev.model_calls[1].mode == "structured"
    srv.reset()
    srv.push(F.text_reply('{"action": "call_tool", "tool": "query_decoupler", "arguments": {}, "rationale": "split"}'))
    srv.route("Keep a simple question as one sub-question", F.text_reply("no idea"))
    srv.push(F.text_reply('{"action": "answer", "rationale": "r"}'), F.text_reply('{"answer": "I don\'t know"}'))
    tr = agent.run_turn(TurnInput(task=2, session_id="s", interaction_id="i", question="Who built it and when?"))
    (ev,) = tr.tool_calls()
    assert ev.method == "heuristic:rule-decoupler" and "heuristic was used" in ev.summary and ev.error is None


def _waves(timeline: list[dict]) -> int:
    """Sequential round trips: requests grouped while their time intervals overlap."""
    spans = sorted((e["start"], e["end"]) for e in timeline)
    waves, end = 0, None
    for s, e in spans:
        if end is None or s >= end:
            waves += 1
            end = e
        else:
            end = max(end, e)
    return waves


@pytest.mark.parametrize(
    "mode,waves,calls", [("single", 2, ["cove"]), ("dual-cove", 3, ["closed_book", "cove", "consistency"])]
)
def test_self_check_round_trips_beyond_the_answer(mode, waves, calls):
    """The decision carries the answer (no answer request); the self-check adds one round trip (single) or two
    (dual-cove: the closed-book answer and the verification run together, then the consistency judgement)."""
    cove = (
        '{"verifications": [{"question": "q", "answer": "a", "supported": true}], "supported": true, '
        '"confidence": 0.9, "reason": "r"}'
    )

    def respond(body: dict):
        text = json.dumps(body)
        if "chain of verification" in text:
            return F.text_reply(cove)
        if "Closed-book answer" in text:
            return F.text_reply('{"consistent": true, "reason": "same"}')
        if "Decide the next step" in text:
            return F.text_reply(
                '{"action": "answer", "answer": "SpaceX", "confidence": 0.9, "entity": "Falcon 9", "rationale": "r"}'
            )
        return F.text_reply('{"answer": "SpaceX", "confidence": 0.9, "entity": "Falcon 9", "rationale": "r"}')

    with FakeOpenAIServer(delay_s=0.5, responder=respond) as srv:
        agent = make_agent(_policy(srv), budget_s=20, verify_mode=mode)
        tr = agent.run_turn(TurnInput(task=1, session_id="s", interaction_id="i", question="Who makes this?"))
        timeline = list(srv.timeline)
    verdict = next(e for e in tr.steps if e.node == "verdict")
    assert sorted(c.purpose for c in verdict.model_calls) == sorted(calls) and verdict.decision == "keep"
    assert tr.answer == "SpaceX" and not any(e.model_calls for e in tr.steps if e.node == "answer")
    assert _waves(timeline) == waves == tr.tokens.sequential_calls


def test_prompts_within_a_turn_share_their_prefix():
    """Each request of a turn begins with the previous one's prompt (system text, tools, photo, question, earlier
    calls), so a server's prefix cache can reuse it; what changes comes last."""
    from traces.model_calls import turn_prefix_shares

    def respond(body: dict):
        text = json.dumps(body)
        if "chain of verification" in text:
            return F.text_reply('{"verifications": [], "supported": true, "confidence": 0.9, "reason": "r"}')
        calls = sum(m["role"] == "assistant" for m in body["messages"])
        if calls < 2:
            tool = ["ocr", "image_search"][calls]
            return F.text_reply(json.dumps({"action": "call_tool", "tool": tool, "arguments": {}, "rationale": "r"}))
        return F.text_reply(
            '{"action": "answer", "answer": "Pepsi", "confidence": 0.9, "entity": null, "rationale": "r"}'
        )

    with FakeOpenAIServer(responder=respond) as srv:
        agent = make_agent(_policy(srv), budget_s=20)
        tr = agent.run_turn(
            TurnInput(
                task=1,
                session_id="s",
                interaction_id="i",
                question="What brand is this?",
                image=Image.new("RGB", (64, 64), (200, 30, 30)),
            )
        )
        bodies = [r["messages"] for r in srv.requests]
    assert [c.purpose for c in tr.model_calls()] == ["decide", "decide", "decide", "cove"]
    assert tr.tokens.sequential_calls == 4  # two tools: decide, decide, decide+answer, self-check
    for before, after in zip(bodies, bodies[1:]):
        assert after[: len(before) - 1] == before[:-1]  # every message but the last instruction is kept as it was
    reuse = turn_prefix_shares(tr)
    shares = [s.share for s in reuse]
    assert len(shares) == 3 and min(shares) >= 0.6 and sum(shares) / len(shares) >= 0.8
    assert min(s.kept for s in reuse) >= 0.9  # only the previous call's final instruction is not kept


# ---- a model that repeats itself --------------------------------------------------------------------------------


def test_a_repeated_call_is_not_run_again_and_the_turn_goes_to_its_answer(srv):
    """A small model that asks for the same call again (Gemma 3 270M did, up to the step limit) is looping: the
    call is not run twice, and the turn moves on to its answer step."""
    same = '{"action": "call_tool", "tool": "ocr", "arguments": {"region": "full"}, "rationale": "read it"}'
    srv.push(
        F.text_reply(same),
        F.text_reply(same),
        F.text_reply('{"answer": "Pepsi", "confidence": 0.8, "entity": null, "rationale": "the label"}'),
    )
    agent = make_agent(_policy(srv), budget_s=20, self_check="off")
    tr = agent.run_turn(
        TurnInput(
            task=1,
            session_id="s",
            interaction_id="i",
            question="What brand is this?",
            image=Image.new("RGB", (64, 64), (200, 30, 30)),
        )
    )
    assert [s.tool for s in tr.tool_calls()] == ["ocr"]
    assert [c.purpose for c in tr.model_calls()] == ["decide", "decide", "answer"] and tr.answer == "Pepsi"
    plan = [e for e in tr.steps if e.node == "plan"][-1]
    assert plan.decision == "answer" and "repeated ocr" in plan.reason


def test_a_tool_without_arguments_that_ran_is_not_offered_again_by_the_schema():
    from glasses_rag.policies.model.policy import callable_again
    from glasses_rag.policies.protocol import StepSummary

    no_args = {"type": "function", "function": {"name": "snap", "parameters": {"type": "object", "properties": {}}}}
    spec = _view().tools[0].model_copy(update={"name": "snap", "json_schema": no_args})
    view = _view(tools=[spec, *_view().tools], done=[StepSummary(tool="snap", summary="done")])
    offered = {t.name for t in callable_again(view)}
    assert "snap" not in offered and offered == {t.name for t in _view().tools}


def test_an_answer_copied_from_the_format_placeholder_is_i_dont_know():
    from glasses_rag.policies.model.replies import answer_from_text

    assert answer_from_text('{"answer": "<answer or I don\'t know>", "confidence": 0.9}').answer == IDK
    assert answer_from_text('{"answer": "<b>Pepsi</b>", "confidence": 0.9}').answer == "<b>Pepsi</b>"
