"""The request path against a server that behaves as vLLM does (glasses_rag/testing/vllm_emulation.py): native tool
calls in every parser shape, streamed or not, the streaming parsers' hold-back, a per-request chat_template refused with
400, json_object ignoring the schema, sampling filled from generation_config.json, and replica affinity."""

from __future__ import annotations

import json
import logging
import threading
import time

import pytest
from PIL import Image

import glasses_rag.models.openai_client as oc
import glasses_rag.models.replicas as replicas
from glasses_rag.core.calls import affinity, collect_model_calls, run_many, run_with_deadline
from glasses_rag.core.types import ModelCall, requests_per_replica
from glasses_rag.models.openai_replies import StreamedCompletion
from glasses_rag.models.vlm.base import complete_and_report
from glasses_rag.models.vlm.openai_server import OpenAICompatibleBackend
from glasses_rag.policies.model.policy import decision_from_reply, make_model_policy
from glasses_rag.policies.protocol import PolicyView
from glasses_rag.testing.fake_model_server import FakeOpenAIServer
from glasses_rag.testing.vllm_emulation import VllmBehaviour
from graph.state import tool_spec
from tools import default_registry

F = FakeOpenAIServer
MSGS = [{"role": "user", "content": "hi"}]
SEARCH = {
    "type": "function",
    "function": {
        "name": "web_search",
        "description": "Search the web.",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string"}, "k": {"type": "integer"}},
            "required": ["query"],
        },
    },
}
ANSWER = {
    "type": "function",
    "function": {
        "name": "answer",
        "description": "Answer the user.",
        "parameters": {
            "type": "object",
            "properties": {
                "answer": {"type": "string"},
                "confidence": {"type": "number"},
                "entity": {"type": ["string", "null"]},
                "rationale": {"type": "string"},
            },
            "required": ["answer", "confidence"],
        },
    },
}
TOOLS = [SEARCH, ANSWER]


def _vllm(**kw) -> FakeOpenAIServer:
    return FakeOpenAIServer(vllm=VllmBehaviour(**kw))


def _backend(srv, **kw) -> OpenAICompatibleBackend:
    return OpenAICompatibleBackend(srv.base_url, "fake-vlm", max_retries=0, **kw)


# ---- 1. native tool calls in every parser shape, streamed or not ---------------------------------------------

# (parser, what the model wrote): the parser's own shape, and shapes that vLLM returns (or streams) as content
SHAPES = [
    ("hermes", '<tool_call>\n{"name": "web_search", "arguments": {"query": "red bottle brand", "k": 3}}\n</tool_call>'),
    (
        "hermes",
        'Let me look.\n<tool_call>\n{"name": "web_search", "arguments": {"query": "red bottle brand", "k": 3}}'
        "\n</tool_call>",
    ),
    ("llama3_json", '{"name": "web_search", "parameters": {"query": "red bottle brand", "k": 3}}'),
    ("llama3_json", '<|python_tag|>{"name": "web_search", "arguments": {"query": "red bottle brand", "k": 3}}'),
    ("llama3_json", ' \n{"name": "web_search", "parameters": {"query": "red bottle brand", "k": 3}}'),
    ("pythonic", '[web_search(query="red bottle brand", k=3)]'),
    ("pythonic", "```python\n[web_search(query='red bottle brand', k=3)]\n```"),
]


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("version", ["0.10", "0.11+"])
@pytest.mark.parametrize("parser,text", SHAPES)
def test_a_tool_call_in_every_parser_shape_is_parsed(parser, text, version, stream):
    with _vllm(tool_parser=parser, version=version, piece=3) as srv:
        srv.push(F.text_reply(text, completion_tokens=30))
        with collect_model_calls() as calls:
            reply = _backend(srv, stream=stream).complete(MSGS, tools=TOOLS)
    assert [(c.name, c.arguments) for c in reply.tool_calls] == [("web_search", {"query": "red bottle brand", "k": 3})]
    d = decision_from_reply(reply)
    assert d.action == "call_tool" and d.tool == "web_search" and d.arguments["query"] == "red bottle brand"
    assert srv.requests[0].get("stream") is (True if stream else None)
    assert calls == [] or calls[0].mode == "native_tools"


@pytest.mark.parametrize(
    "parser,text",
    [
        (
            "hermes",
            '<tool_call>{"name": "answer", "parameters": {"answer": "Coca-Cola", "confidence": 0.9, '
            '"entity": null, "rationale": "label"}}</tool_call>',
        ),  # vLLM's hermes wants "arguments"
        (
            "llama3_json",
            "{'name': 'answer', 'parameters': {'answer': 'Coca-Cola', 'confidence': 0.9, 'entity': None, "
            "'rationale': 'label'}}",
        ),  # not JSON: vLLM cannot decode it
        (
            "pythonic",
            ' [answer(answer="Coca-Cola", confidence=0.9, entity=None, rationale="label")]',
        ),  # a leading space
    ],
)
def test_the_answer_function_that_vllm_leaves_in_the_content_is_parsed(parser, text):
    with _vllm(tool_parser=parser) as srv:
        srv.push(F.text_reply(text, completion_tokens=30))
        reply = _backend(srv, stream=False).complete(MSGS, tools=TOOLS)
    assert reply.tool_calls[0].name == "answer"
    assert reply.tool_calls[0].arguments == {
        "answer": "Coca-Cola",
        "confidence": 0.9,
        "entity": None,
        "rationale": "label",
    }


def test_required_tool_choice_is_sent_and_parsed():
    with _vllm(tool_parser=None, version="0.10") as srv:  # 0.10 constrains "required" without a tool parser
        srv.push(*[F.text_reply('[{"name": "web_search", "parameters": {"query": "q"}}]', completion_tokens=12)] * 2)
        reply = _backend(srv, tool_choice="required").complete(MSGS, tools=TOOLS)
    assert [r["tool_choice"] for r in srv.requests] == ["required", "required"]
    assert [r.get("stream") for r in srv.requests] == [True, None]  # 0.10.2 streams an error event (#24509)
    assert [(c.name, c.arguments) for c in reply.tool_calls] == [("web_search", {"query": "q"})]


@pytest.mark.parametrize(
    "parser,text",
    [
        ("llama3_json", '{"action": "call_tool", "tool": "web_search", "arguments": {"query": "q"}, "rationale": "r"}'),
        ("hermes", '<tool_call>{"action": "call_tool", "tool": "web_search", "arguments": {"query": "q"}}</tool_call>'),
        ("pythonic", '[{"action": "call_tool", "tool": "web_search", "arguments": {"query": "q"}}]'),
    ],
)
@pytest.mark.parametrize("version", ["0.10", "0.11+"])
def test_a_held_back_stream_is_asked_again_unstreamed_and_later_requests_are_not_streamed(
    parser, text, version, caplog
):
    with _vllm(tool_parser=parser, version=version) as srv:
        srv.push(*[F.text_reply(text, completion_tokens=25)] * 3)
        b = _backend(srv)
        with collect_model_calls() as calls, caplog.at_level(logging.WARNING):
            first = complete_and_report(b, "decide", MSGS, tools=TOOLS)
            second = b.complete(MSGS, tools=TOOLS)
    assert [r.get("stream") for r in srv.requests] == [True, None, None]  # the held-back one asked again at once
    for reply in (first, second):
        d = decision_from_reply(reply)
        assert d.tool == "web_search" and d.arguments == {"query": "q"}
    assert calls[0].error is None and calls[0].mode == "native_tools"
    warned = [r.message for r in caplog.records if "no longer streamed" in r.message]
    assert len(warned) == 1 and "held it back" in warned[0]


def test_an_empty_stream_without_generated_tokens_is_not_called_a_hold_back():
    with _vllm(tool_parser="llama3_json") as srv:
        srv.push(F.text_reply("", completion_tokens=1))
        b = _backend(srv)
        assert b.complete(MSGS, tools=TOOLS).text == "" and b.stream_tools


def test_streamed_hermes_call_written_with_parameters_loses_its_arguments_and_says_so():
    text = '<tool_call>{"name": "web_search", "parameters": {"query": "q"}}</tool_call>'
    with _vllm(tool_parser="hermes") as srv:
        srv.push(F.text_reply(text, completion_tokens=20), F.text_reply(text, completion_tokens=20))
        b = _backend(srv)
        reply = b.complete(MSGS, tools=TOOLS)  # asked again unstreamed: vLLM returns the text, parsed here
    assert [(c.name, c.arguments) for c in reply.tool_calls] == [("web_search", {"query": "q"})]
    assert [r.get("stream") for r in srv.requests] == [True, None] and not b.stream_tools


def test_stream_assembly_of_tool_call_deltas_without_index_or_with_repeated_names():
    acc = StreamedCompletion()
    for delta in (
        {"tool_calls": [{"id": "a", "type": "function", "function": {"name": "web_search"}}]},
        {"tool_calls": [{"function": {"name": "web_search", "arguments": '{"que'}}]},
        {"tool_calls": [{"function": {"arguments": 'ry": "x"}'}}]},
        {"tool_calls": [{"id": "b", "function": {"name": "ocr", "arguments": {}}}]},
        {"tool_calls": [{"index": 1, "function": {"arguments": ""}}]},
    ):
        acc.add({"choices": [{"index": 0, "delta": delta}]})
    got = [
        (c["function"]["name"], c["function"]["arguments"])
        for c in acc.completion()["choices"][0]["message"]["tool_calls"]
    ]
    assert got == [("web_search", '{"query": "x"}'), ("ocr", "")]


# ---- 2. a per-request chat_template -----------------------------------------------------------------------------


def test_a_refused_chat_template_is_dropped_with_one_warning_and_kept_where_it_is_taken(caplog):
    with _vllm() as srv, caplog.at_level(logging.WARNING):
        b = _backend(srv, chat_template="chatml")
        srv.push(F.text_reply("one"), F.text_reply("two"))
        assert b.complete(MSGS).text == "one" and b.complete(MSGS).text == "two"
    sent = [("chat_template" in r) for r in srv.requests]
    assert sent == [True, False, False]  # refused once, then never sent again
    warned = [r.message for r in caplog.records if "trust-request-chat-template" in r.message]
    assert len(warned) == 1 and "drop chat_template" in warned[0]
    for kw in (dict(trust_request_chat_template=True), dict(version="0.10")):  # taken: it keeps being sent
        with _vllm(**kw) as srv:
            srv.push(F.text_reply("ok"), F.text_reply("ok"))
            b = _backend(srv, chat_template="chatml")
            b.complete(MSGS)
            b.complete(MSGS)
        assert all("<|im_start|>" in r["chat_template"] for r in srv.requests) and len(srv.requests) == 2


# ---- 3. json_object ignores the schema --------------------------------------------------------------------------


def test_json_object_is_recorded_as_such_and_warned_once(caplog):
    schema = {"name": "answer", "schema": {"type": "object", "properties": {"answer": {"type": "string"}}}}
    with _vllm() as srv, caplog.at_level(logging.WARNING):
        srv.push(F.text_reply('{"answer": "x"}'), F.text_reply('{"answer": "y"}'))
        b = _backend(srv, response_format="json_object")
        with collect_model_calls() as calls:
            complete_and_report(b, "answer", MSGS, response_schema=schema)
            complete_and_report(b, "answer", MSGS, response_schema=schema)
    assert [c.mode for c in calls] == ["json_object", "json_object"]
    assert srv.requests[0]["response_format"] == {"type": "json_object", "schema": schema["schema"]}
    warned = [r.message for r in caplog.records if "json_object" in r.message]
    assert len(warned) == 1 and "llama-cpp-python" in warned[0] and "json_object_enforced" in warned[0]


def test_a_server_declared_to_enforce_json_object_schemas_is_structured(srv):
    srv.push(F.text_reply('{"answer": "x"}'))
    r = _backend(srv, response_format="json_object", json_object_enforced=True).complete(
        MSGS, response_schema={"name": "a", "schema": {"type": "object"}}
    )
    assert r.mode == "structured"


# ---- 4. explicit sampling for every call kind -------------------------------------------------------------------

GENERATION_CONFIG = {
    "temperature": 0.7,
    "top_p": 0.8,
    "top_k": 20,
    "min_p": 0.05,
    "repetition_penalty": 1.05,
    "presence_penalty": 1.5,
    "frequency_penalty": 0.5,
    "max_new_tokens": 2048,
}
GREEDY = {
    "temperature": 0.0,
    "top_p": 1.0,
    "top_k": 0,
    "min_p": 0.0,
    "repetition_penalty": 1.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
}
EVERYTHING = json.dumps(
    {
        "action": "answer",
        "rationale": "r",
        "answer": "SpaceX",
        "confidence": 0.9,
        "entity": "Falcon 9",
        "supported": True,
        "consistent": True,
        "reason": "ok",
        "verifications": [],
        "sub_questions": ["who makes it?"],
    }
)


def _view() -> PolicyView:
    tools = [tool_spec(t) for t in default_registry().for_task(1)]
    return PolicyView(
        task=1, question="Who makes this rocket?", has_image=True, tools=tools, remaining_steps=4, remaining_s=30.0
    )


@pytest.mark.parametrize("version", ["0.10", "0.11+"])
def test_every_call_kind_sends_explicit_sampling_so_generation_config_fills_nothing(version):
    from tools.base import ToolContext
    from tools.query_decoupler import model_decouple

    with _vllm(version=version, generation_config=GENERATION_CONFIG) as srv:
        srv.responder = lambda body: F.text_reply(EVERYTHING)
        p = make_model_policy(f"openai:{srv.base_url}#fake-vlm", max_retries=0)
        img = Image.new("RGB", (32, 32))
        with collect_model_calls() as calls:
            p.decide(_view(), img)
            draft = p.answer(_view(), img)
            p.verifier("dual-cove").verify("Who makes this rocket?", draft, ["SpaceX builds Falcon 9"], img)
            model_decouple(
                p.backend,
                ToolContext(task=2, question="Who makes it and when?", image=img),
                "Who makes it and when?",
                None,
            )
    purposes = sorted(c.purpose for c in calls)
    assert purposes == sorted(["decide", "answer", "closed_book", "cove", "consistency", "decouple"])
    assert len(srv.effective) == len(calls)
    for body, eff in zip(srv.requests, srv.effective, strict=True):
        assert {k: eff[k] for k in GREEDY} == GREEDY, body["messages"][-1]
        assert eff["max_tokens"] == body["max_tokens"] <= 512  # asked explicitly, below generation_config's cap
        assert {"top_p", "top_k", "min_p", "repetition_penalty", "presence_penalty", "frequency_penalty"} <= set(body)


def test_the_llm_judge_sends_explicit_sampling():
    from glasses_rag.crag_mm.scoring import LLMJudge

    for mode in ("kddcup2025", "crag-mm-release"):
        with _vllm(generation_config=GENERATION_CONFIG) as srv:
            srv.push(F.text_reply('{"accuracy": true}' if mode == "kddcup2025" else "Result: CORRECT"))
            v = LLMJudge(srv.base_url, "judge", mode=mode, max_attempts=1).judge("q", "gt", "resp")
            assert v.correct is True
            eff, body = srv.effective[0], srv.requests[0]
        expected_t = 1.0 if mode == "kddcup2025" else 0.0  # the official code's (API default / 0)
        assert eff["temperature"] == expected_t and eff["repetition_penalty"] == 1.0
        assert eff["presence_penalty"] == 0.0 and eff["frequency_penalty"] == 0.0 and eff["min_p"] == 0.0
        assert body["top_p"] == 1.0 and body["top_k"] == 0 and body["max_tokens"] > 0


def test_sampling_fields_outside_openais_api_are_dropped_once_a_server_rejects_them(caplog):
    with (
        FakeOpenAIServer(reject_fields=("top_k", "min_p", "repetition_penalty")) as srv,
        caplog.at_level(logging.WARNING),
    ):
        srv.push(F.text_reply("one"), F.text_reply("two"))
        b = _backend(srv, sampling={"top_p": 1.0, "top_k": 0, "min_p": 0.0, "repetition_penalty": 1.0})
        assert b.complete(MSGS).text == "one" and b.complete(MSGS).text == "two"
    first, *served = srv.requests
    assert first["top_k"] == 0 and len(served) == 2  # one 400, then without all three extensions
    assert all(not {"top_k", "min_p", "repetition_penalty"} & set(r) and r["top_p"] == 1.0 for r in served)
    assert len([r for r in caplog.records if "does not take the sampling field" in r.message]) == 1


def test_a_server_whose_no_top_k_is_minus_one_gets_that():
    with FakeOpenAIServer() as srv:
        srv.push(
            ("status", 400, {"object": "error", "message": "top_k must be -1 (disable) or at least 1, got 0."}),
            F.text_reply("one"),
            F.text_reply("two"),
        )
        b = _backend(srv, sampling={"top_k": 0})
        assert b.complete(MSGS).text == "one" and b.complete(MSGS).text == "two"
    assert [r["top_k"] for r in srv.requests] == [0, -1, -1]


# ---- 6. replica affinity ------------------------------------------------------------------------------------------


def _replica_of(srvs: list[FakeOpenAIServer]) -> list[int]:
    return [len(s.requests) for s in srvs]


def test_a_conversation_stays_on_one_replica_even_through_worker_threads():
    with FakeOpenAIServer() as a, FakeOpenAIServer() as b:
        backend = OpenAICompatibleBackend([a.base_url, b.base_url], "fake-vlm", max_retries=0)

        def call() -> None:
            complete_and_report(backend, "decide", MSGS)

        with collect_model_calls() as calls:
            for _turn in range(3):  # three turns, each: sequential calls, parallel calls, a call under a deadline
                with affinity("session-1"):
                    call()
                    run_many([call, call], timeout_s=10)
                    run_with_deadline(call, timeout_s=10)
        assert sorted(_replica_of([a, b])) == [0, 12]
        counts = requests_per_replica(calls)
        assert list(counts.values()) == [12] and len({c.replica for c in calls}) == 1
        with affinity("session-2"):  # another conversation: the least busy replica (ties in turn), then it stays
            for _ in range(4):
                backend.complete(MSGS)
        assert sorted(_replica_of([a, b])) in ([0, 16], [4, 12])
        # without affinity: per request, least outstanding (both idle: alternating)
        before = _replica_of([a, b])
        for _ in range(4):
            backend.complete(MSGS)
        assert [x - y for x, y in zip(_replica_of([a, b]), before, strict=True)] == [2, 2]


def test_a_down_replica_moves_the_conversation_for_good(monkeypatch):
    monkeypatch.setattr(replicas, "COOLDOWN_S", (30.0, 60.0))
    with FakeOpenAIServer() as a, FakeOpenAIServer() as b:
        backend = OpenAICompatibleBackend([a.base_url, b.base_url], "fake-vlm", max_retries=0)
        with affinity("s"):
            backend.complete(MSGS)
        home, other = (a, b) if a.requests else (b, a)
        home.stop()
        with affinity("s"):
            for _ in range(3):
                backend.complete(MSGS)
        assert len(other.requests) == 3
        with FakeOpenAIServer(port=home.port) as back:  # home is back (it would get half of the requests
            home_replica = next(r for r in backend.client.replicas if str(home.port) in r.base_url)
            home_replica.down_until = 0.0  # without affinity), but "s" stays where it moved
            with affinity("s"):
                for _ in range(4):
                    backend.complete(MSGS)
            assert len(other.requests) == 7 and not back.requests


def test_a_saturated_replica_sends_the_request_elsewhere_but_keeps_the_conversation():
    with FakeOpenAIServer() as a, FakeOpenAIServer() as b:
        backend = OpenAICompatibleBackend([a.base_url, b.base_url], "fake-vlm", max_retries=0, max_outstanding=1)
        with affinity("s"):
            backend.complete(MSGS)
        home, other = (a, b) if a.requests else (b, a)
        home.push(("generate", "slow", 0.6))

        def slow() -> None:
            with affinity("s"):
                backend.complete(MSGS)

        t = threading.Thread(target=slow)
        t.start()
        deadline = time.monotonic() + 5
        while home.live == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        with affinity("s"), collect_model_calls():
            backend.complete(MSGS)  # home has its one request in flight: this one goes to the other replica
        t.join()
        assert len(other.requests) == 1
        with affinity("s"):
            backend.complete(MSGS)  # home is free again: back to it
        assert len(home.requests) == 3 and len(other.requests) == 1


def test_a_three_turn_conversation_through_the_agent_uses_one_replica():
    from support import make_agent

    from graph.agent import TurnInput
    from tools.base import HistoryTurn

    with FakeOpenAIServer() as a, FakeOpenAIServer() as b:
        for s in (a, b):
            s.responder = lambda body: F.text_reply(EVERYTHING)
        policy = make_model_policy(f"openai:{a.base_url},{b.base_url}#fake-vlm", max_retries=0)
        agent = make_agent(policy, budget_s=20)
        history: list[HistoryTurn] = []
        traces = []
        for i, q in enumerate(["who makes this rocket?", "when was it founded?", "where is it based?"]):
            tr = agent.run_turn(
                TurnInput(
                    task=3,
                    session_id="conv-1",
                    interaction_id=f"t{i}",
                    turn_index=i,
                    question=q,
                    image=Image.new("RGB", (64, 48)),
                    history=list(history),
                )
            )
            traces.append(tr)
            history.append(HistoryTurn(question=q, answer=tr.answer))
    calls: list[ModelCall] = [c for t in traces for c in t.model_calls()]
    assert len(calls) >= 6 and sorted(_replica_of([a, b])) == [0, len(calls)]
    assert requests_per_replica(calls) == {calls[0].replica: len(calls)}


# ---- transport ------------------------------------------------------------------------------------------------


def test_a_dropped_client_has_its_connections_closed_on_the_event_loop(srv, caplog):
    import gc

    srv.push(F.text_reply("ok"))
    b = _backend(srv)
    b.complete(MSGS)
    session = b.client._session
    assert session in oc._OPEN_SESSIONS  # held by the module, so no finalizer closes it off the loop's thread
    with caplog.at_level(logging.ERROR):
        del b
        gc.collect()
        deadline = time.monotonic() + 5
        while session in oc._OPEN_SESSIONS and time.monotonic() < deadline:
            time.sleep(0.01)
        gc.collect()
    assert session.closed and session not in oc._OPEN_SESSIONS
    assert not [r for r in caplog.records if "Unclosed" in r.getMessage()]
