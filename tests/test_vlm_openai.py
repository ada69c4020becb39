"""ModelPolicy + OpenAICompatibleBackend against a scripted local OpenAI-compatible server."""

from __future__ import annotations

import base64
import io
import json
import time

import pytest
from PIL import Image

from glasses_rag.core.calls import collect_model_calls
from glasses_rag.models.vlm import BackendError, load_model_config, parse_spec
from glasses_rag.models.vlm.openai_server import OpenAICompatibleBackend
from glasses_rag.policies.model.policy import ModelPolicy, make_model_policy
from glasses_rag.policies.protocol import IDK, Policy, PolicyReplyError, PolicyView, StepSummary, ToolSpec
from glasses_rag.testing.fake_model_server import FakeOpenAIServer
from tools.base import Hit

F = FakeOpenAIServer


@pytest.fixture(scope="module")
def server():
    with FakeOpenAIServer() as srv:
        yield srv


@pytest.fixture()
def srv(server):
    server.reset()
    yield server
    server.reset()


def _spec(name: str, desc: str, props: dict, required: list[str]) -> ToolSpec:
    schema = {
        "type": "function",
        "function": {
            "name": name,
            "description": desc,
            "parameters": {"type": "object", "properties": props, "required": required},
        },
    }
    sig = f"{name}({', '.join(f'{k}: str' for k in props)}) - {desc}"
    return ToolSpec(name=name, description=desc, signature=sig, json_schema=schema)


TOOLS = [
    _spec("web_search", "Search the web.", {"query": {"type": "string"}}, ["query"]),
    _spec("ocr", "Read text in the image.", {}, []),
]


def _view(**kw) -> PolicyView:
    base = dict(
        task=2, question="What brand is this bottle?", has_image=True, tools=TOOLS, remaining_steps=4, remaining_s=30.0
    )
    base.update(kw)
    return PolicyView(**base)


def _img():
    return Image.new("RGB", (2000, 1000), (200, 30, 30))


def _policy(srv, **kw) -> ModelPolicy:
    """Native tool calls first (the server-side structured mode has its own tests in test_model_modes.py)."""
    kw.setdefault("decision_mode", "native_tools")
    return make_model_policy(f"openai:{srv.base_url}#fake-vlm", max_retries=kw.pop("max_retries", 0), **kw)


def test_policy_protocol_and_native_tool_call_with_image(srv):
    srv.push(F.tool_call_reply("web_search", {"query": "red bottle brand"}, content="Looking it up."))
    p = _policy(srv)
    assert isinstance(p, Policy)
    with collect_model_calls() as calls:
        d = p.decide(_view(), _img())
    assert d.action == "call_tool" and d.tool == "web_search" and d.arguments == {"query": "red bottle brand"}
    req = srv.requests[0]
    assert req["model"] == "fake-vlm" and req["tool_choice"] == "auto"
    assert [t["function"]["name"] for t in req["tools"]] == ["web_search", "ocr", "final_answer"]
    user = req["messages"][-1]["content"]
    img_parts = [c for c in user if c["type"] == "image_url"]
    assert len(img_parts) == 1 and img_parts[0]["image_url"]["url"].startswith("data:image/jpeg;base64,")
    im = Image.open(io.BytesIO(base64.b64decode(img_parts[0]["image_url"]["url"].split(",", 1)[1])))
    assert max(im.size) == 1024  # downscaled
    text = next(c["text"] for c in user if c["type"] == "text")
    system = req["messages"][0]
    assert system["role"] == "system" and "What brand is this bottle?" in text
    assert "web_search(query: str)" in system["content"]  # the text tool list always, in the stable prefix
    # native tool calls are asked for natively: no bare {"action": ...} object that vLLM's tool parsers hold back
    assert '"action"' not in system["content"] and "final_answer" in system["content"]
    assert calls[0].prompt_tokens == 12 and calls[0].purpose == "decide" and calls[0].mode == "native_tools"


def test_json_in_text_with_junk(srv):
    srv.push(F.text_reply("I think OCR helps.\n```json\n{'action': 'call_tool', 'tool': 'ocr', 'arguments': {},}\n```"))
    d = _policy(srv).decide(_view(), _img())
    assert d.action == "call_tool" and d.tool == "ocr" and d.arguments == {}


def test_unknown_tool_is_returned_as_said(srv):
    srv.push(F.tool_call_reply("teleport", {"where": "moon"}))
    d = _policy(srv).decide(_view(), None)
    assert d.tool == "teleport" and d.arguments == {"where": "moon"}
    assert isinstance(srv.requests[0]["messages"][-1]["content"], str)  # no image -> plain text content


def test_malformed_reply_is_a_policy_reply_error(srv):
    srv.push(F.text_reply("blah blah no json here"))
    with collect_model_calls() as calls, pytest.raises(PolicyReplyError, match="no JSON decision") as e:
        _policy(srv).decide(_view(), _img())
    assert e.value.raw == "blah blah no json here" and calls[0].raw_reply == "blah blah no json here"


def test_malformed_http_payload_raises_for_the_graph_to_record(srv):
    srv.push({"unexpected": True}, ("status", 200, "not json at all"))
    p = _policy(srv)
    with pytest.raises(BackendError):
        p.decide(_view(), None)
    with pytest.raises(BackendError):
        p.answer(_view(), None)


def test_history_done_evidence_in_prompt(srv):
    srv.push(
        F.text_reply(
            '{"action": "answer", "answer": "Coca-Cola", "confidence": 0.8, "entity": null, "rationale": "enough"}'
        )
    )
    hit = Hit(source="web", score=1.0, title="Coca-Cola", snippet="x" * 5000, url="http://e/1")
    v = _view(
        done=[
            StepSummary(
                tool="web_search", arguments={"query": "q1"}, summary="found 3 pages", update={"evidence": [hit]}
            ),
            StepSummary(tool="ocr", error="no text engine", update={}),
            StepSummary(tool="ocr", arguments={"region": "crop"}, summary="read", update={"ocr_text": "COCA COLA"}),
        ]
    )
    d = _policy(srv, evidence_chars=100).decide(v, None)
    assert d.action == "answer" and d.rationale == "enough" and d.answer.answer == "Coca-Cola"
    messages = srv.requests[0]["messages"]
    # each finished call as the model's native call, then its result as the tool's message
    calls = [m["tool_calls"][0]["function"] for m in messages if m["role"] == "assistant"]
    assert [c["name"] for c in calls] == ["web_search", "ocr", "ocr"] and json.loads(calls[0]["arguments"]) == {
        "query": "q1"
    }
    results = [m["content"] for m in messages if m["role"] == "tool"]
    assert "[1] (web 1.00, http://e/1) Coca-Cola" in results[0] and "found 3 pages" not in results[0]  # hits, not
    assert "ERROR: no text engine" in results[1] and "COCA COLA" in results[2]  # a summary repeating them
    assert "x" * 200 not in results[0]  # evidence truncated
    assert messages[-1]["role"] == "user" and messages[-1]["content"].endswith("Decide the next step.\n")


def test_answer_parsing(srv):
    srv.push(
        F.text_reply('Answer:\n{"answer": "Coca-Cola", "confidence": 85, "entity": "Coca-Cola bottle"}'),
        F.text_reply('{"answer": "I do not know", "confidence": 0.9}'),
        F.text_reply("It is probably Pepsi."),
    )
    p = _policy(srv)
    a = p.answer(_view(), _img())
    assert a.answer == "Coca-Cola" and a.confidence == pytest.approx(0.85) and a.entity == "Coca-Cola bottle"
    assert "I don't know" in srv.requests[0]["messages"][-1]["content"][-1]["text"]
    b = p.answer(_view(), _img())
    assert b.answer == IDK and b.confidence == 0.0
    with pytest.raises(PolicyReplyError):
        p.answer(_view(), _img())


def test_retry_on_500_then_success(srv):
    srv.push(("status", 500, "boom"), ("status", 503, "busy"), F.tool_call_reply("ocr", "{}"))
    b = OpenAICompatibleBackend(srv.base_url, "fake-vlm", max_retries=2, retry_wait_s=0.01)
    r = b.complete([{"role": "user", "content": "hi"}], tools=[TOOLS[1].json_schema])
    assert r.tool_calls[0].name == "ocr" and len(srv.requests) == 3


def test_no_retry_on_4xx(srv):
    srv.push(("status", 404, '{"error": "model not found"}'), F.text_reply("never"))
    b = OpenAICompatibleBackend(srv.base_url, "fake-vlm", max_retries=3, retry_wait_s=0.01)
    with pytest.raises(BackendError, match="404"):
        b.complete([{"role": "user", "content": "hi"}])
    assert len(srv.requests) == 1


def test_native_tools_rejected_falls_back_to_text(srv):
    srv.push(
        ("status", 400, '{"message": "\\"auto\\" tool choice requires --enable-auto-tool-choice"}'),
        F.text_reply('{"action": "call_tool", "tool": "ocr"}'),
    )
    p = _policy(srv)
    d = p.decide(_view(), None)
    assert d.tool == "ocr" and "tools" in srv.requests[0] and "tools" not in srv.requests[1] and len(srv.requests) == 2
    assert p.backend.supports_native_tools is False


def test_timeout_gives_up_and_policy_degrades(srv):
    srv.push(("hang", 3.0), ("hang", 3.0))
    b = OpenAICompatibleBackend(srv.base_url, "fake-vlm", timeout_s=0.3, max_retries=1, retry_wait_s=0.01)
    t0 = time.time()
    with pytest.raises(BackendError, match="timed out"):
        b.complete([{"role": "user", "content": "hi"}])
    assert time.time() - t0 < 2.5 and len(srv.requests) == 2
    srv.reset()
    srv.push(("hang", 3.0))
    p = ModelPolicy(OpenAICompatibleBackend(srv.base_url, "fake-vlm", timeout_s=0.3, max_retries=0))
    with collect_model_calls() as calls, pytest.raises(BackendError, match="timed out"):
        p.decide(_view(), None)
    assert calls[0].error and "timed out" in calls[0].error


def test_connection_refused_message():
    b = OpenAICompatibleBackend("http://127.0.0.1:9/v1", "m", max_retries=1, retry_wait_s=0.01, timeout_s=1)
    with pytest.raises(BackendError, match="cannot reach"):
        b.complete([{"role": "user", "content": "hi"}])


def test_model_from_server_list(srv):
    p = make_model_policy(f"openai:{srv.base_url}")
    assert p.backend.model == "fake-vlm"


def draft(answer: str):
    from glasses_rag.policies.protocol import AnswerDraft

    return AnswerDraft(answer=answer, confidence=0.8)


def by_purpose(requests):
    """(closed-book, chain-of-verification, consistency) requests: the first two run concurrently."""
    text = [json.dumps(r) for r in requests]
    cove = next(r for r, t in zip(requests, text) if "chain of verification" in t)
    cons = next(r for r, t in zip(requests, text) if "Closed-book answer" in t)
    closed = next(r for r in requests if r is not cove and r is not cons)
    return closed, cove, cons


def test_verify_dual_path_and_cove(srv):
    cove = {
        "verifications": [
            {"question": "Is the label red?", "answer": "yes", "supported": True},
            {"question": "Does evidence name Coca-Cola?", "answer": "yes", "supported": True},
        ],
        "supported": True,
        "confidence": 0.9,
        "reason": "evidence [1] names it",
    }
    srv.route("chain of verification", F.text_reply(json.dumps(cove)))
    srv.route("Closed-book answer", F.text_reply('{"consistent": true, "reason": "same brand"}'))
    srv.push(F.text_reply('{"answer": "Coca-Cola", "confidence": 0.6}'))
    p = _policy(srv)
    dual = p.verifier("dual-cove")
    v = dual.verify("What brand is this?", draft("Coca-Cola"), ["Coca-Cola bottle, red label"], _img())
    assert v.supported and v.confidence > 0.8 and v.method == "vlm-dual-path+cove"
    closed_req, cove_req, cons_req = by_purpose(srv.requests)
    assert "Coca-Cola bottle, red label" not in json.dumps(closed_req)  # closed book: no context
    assert "Closed-book answer: Coca-Cola" in cons_req["messages"][-1]["content"]
    assert "Coca-Cola bottle, red label" in json.dumps(cove_req)

    srv.reset()
    srv.route(
        "chain of verification",
        F.text_reply('{"verifications": [], "supported": false, "confidence": 0.2, "reason": "not in evidence"}'),
    )
    srv.route("Closed-book answer", F.text_reply('{"consistent": false, "reason": "different brands"}'))
    srv.push(F.text_reply('{"answer": "Pepsi", "confidence": 0.6}'))
    v = dual.verify("What brand is this?", draft("Coca-Cola"), ["a red bottle"], _img())
    assert not v.supported and v.confidence <= 0.3 and "inconsistent" in v.reason

    srv.reset()
    srv.push(F.text_reply("garbage"), F.text_reply("more garbage"))
    with pytest.raises(PolicyReplyError):  # an unparseable verification is an error the graph records
        dual.verify("What brand?", draft("Coca-Cola"), [], None)
    assert dual.verify("q", draft(IDK), [], None).supported is False


def test_spec_and_config(tmp_path, srv):
    c = parse_spec("openai:http://127.0.0.1:8000/v1#Qwen/Qwen2.5-VL-7B-Instruct")
    assert c.base_url == "http://127.0.0.1:8000/v1" and c.model == "Qwen/Qwen2.5-VL-7B-Instruct"
    assert parse_spec("transformers:/m/qwen").path == "/m/qwen"
    assert parse_spec("llamacpp:/m/x.gguf").backend == "llamacpp"
    for bad in ("nope:/x", "openai:127.0.0.1:8000#m", "transformers:"):
        with pytest.raises(ValueError):
            parse_spec(bad)
    t = tmp_path / "m.toml"
    t.write_text(
        f'[model]\nbackend = "openai"\nbase_url = "{srv.base_url}"\nmodel = "fake-vlm"\ntimeout_s = 5\n'
        'max_retries = 0\ntemperature = 0.2\nmax_tokens = 64\nname = "vlm-fake"\n'
    )
    j = tmp_path / "m.json"
    j.write_text(json.dumps({"backend": "openai", "base_url": srv.base_url, "model": "fake-vlm", "max_tokens": 32}))
    assert load_model_config(t).temperature == 0.2 and load_model_config(j).max_tokens == 32
    p = make_model_policy(str(t))
    assert p.name == "vlm-fake" and p.max_tokens == 64 and p.backend.timeout_s == 5
    srv.push(F.text_reply('{"action": "answer"}'))
    p.decide(_view(), None)
    assert srv.requests[0]["max_tokens"] == 64 and srv.requests[0]["temperature"] == 0.2


def test_llamacpp_missing_gives_clear_error(tmp_path):
    try:
        import llama_cpp  # noqa: F401

        pytest.skip("llama-cpp-python is installed")
    except ImportError:
        pass
    with pytest.raises(ImportError, match="pip install llama-cpp-python"):
        make_model_policy(f"llamacpp:{tmp_path / 'x.gguf'}")


def test_langchain_chat_model_bind_tools(srv):
    from langchain_core.messages import HumanMessage
    from langchain_core.tools import tool as lc_tool

    from glasses_rag.models.vlm.langchain_chat import BackendChatModel

    @lc_tool
    def web_search(query: str) -> str:
        """Search the web."""
        return query

    srv.push(
        F.tool_call_reply("web_search", {"query": "eiffel tower height"}),
        F.text_reply('{"tool": "web_search", "arguments": {"query": "q2"}}'),
        F.text_reply("Plain answer."),
    )
    chat = BackendChatModel(backend=OpenAICompatibleBackend(srv.base_url, "fake-vlm", max_retries=0))
    bound = chat.bind_tools([web_search])
    m = bound.invoke([HumanMessage(content="How tall is the Eiffel tower?")])
    assert m.tool_calls[0]["name"] == "web_search" and m.tool_calls[0]["args"] == {"query": "eiffel tower height"}
    assert srv.requests[0]["tools"][0]["function"]["name"] == "web_search"
    assert srv.requests[0]["messages"][0] == {"role": "user", "content": "How tall is the Eiffel tower?"}
    m2 = bound.invoke("again")
    assert m2.tool_calls[0]["args"] == {"query": "q2"}
    m3 = chat.invoke("hi")
    assert m3.content == "Plain answer." and not m3.tool_calls and m3.usage_metadata["input_tokens"] == 10
