"""A hostile or merely different model server cannot hurt the user (issue 28, items 1, 3, 7, 8, 9): replies are read
under a byte cap from max_tokens, arguments are parsed in bounded time and memory, each key goes only to its own
server, a model config cannot send a local file as its chat template, and vLLM 0.10.2's and llama.cpp's servers
are met on their own terms."""

from __future__ import annotations

import json
import logging
import time
import tracemalloc

import pytest

from glasses_rag.core.calls import collect_model_calls, run_many
from glasses_rag.crag_mm.scoring import make_judge
from glasses_rag.models.openai_client import BackendError, ContextTooLong, ReplyTooLarge, reply_byte_cap
from glasses_rag.models.vlm import make_backend, parse_spec
from glasses_rag.models.vlm.base import complete_and_report, load_chat_template, loads_lenient, parse_arguments
from glasses_rag.models.vlm.openai_server import OpenAICompatibleBackend
from glasses_rag.policies.model.policy import decision_from_reply
from glasses_rag.testing.fake_model_server import FakeOpenAIServer
from glasses_rag.testing.hostile_model_server import HostileModelServer
from glasses_rag.testing.vllm_emulation import VllmBehaviour

F = FakeOpenAIServer
MSGS = [{"role": "user", "content": "hi"}]
SEARCH = {
    "type": "function",
    "function": {
        "name": "web_search",
        "description": "Search the web.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
    },
}
TOOLS = [SEARCH]


def _backend(url: str, **kw) -> OpenAICompatibleBackend:
    return OpenAICompatibleBackend(url, "x", max_retries=0, **kw)


# ---- 1. byte caps and bounded parsing --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "mode,stream",
    [("endless", True), ("endless", False), ("endless-line", True), ("huge-args", True), ("huge-args", False)],
)
def test_an_endless_or_huge_reply_is_cut_at_the_byte_cap_from_max_tokens(mode, stream):
    with HostileModelServer(mode, reply_s=20) as srv:
        b = _backend(srv.base_url, stream=stream)
        t0 = time.monotonic()
        with pytest.raises(ReplyTooLarge, match=f"{reply_byte_cap({'max_tokens': 64})}-byte cap|more than"):
            b.complete(MSGS, tools=TOOLS, max_tokens=64)
        b.close()
    assert time.monotonic() - t0 < 5
    assert reply_byte_cap({"max_tokens": 64}) == 64 * 1024 + 64 * 1024


def test_a_200_mb_body_is_refused_from_its_announced_length_before_it_is_read():
    with HostileModelServer("huge-body", size=200 * 1024 * 1024) as srv:
        b = _backend(srv.base_url, stream=False)
        with pytest.raises(ReplyTooLarge, match="announced a reply of 2097"):
            b.complete(MSGS, max_tokens=512)
        b.close()
        assert srv.sent[0] < 4 * 1024 * 1024  # the server could not even get its body out


def test_huge_tool_arguments_within_the_cap_are_parsed_in_bounded_time_and_memory():
    # max_tokens 8192 allows 8.3 MB: the 6 MB of "(1,1,...)" arrive, and must not reach ast.literal_eval whole
    with HostileModelServer("huge-args", size=6 * 1024 * 1024) as srv:
        b = _backend(srv.base_url, stream=True)
        tracemalloc.start()
        t0 = time.process_time()
        reply = b.complete(MSGS, tools=TOOLS, max_tokens=8192)
        cpu = time.process_time() - t0
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        b.close()
    assert reply.tool_calls[0].name == "web_search" and reply.tool_calls[0].arguments == {}
    assert cpu < 10 and peak < 300 * 1024 * 1024


def test_lenient_parsing_is_bounded_in_size():
    tuple_text = "(" + "1," * 1_000_000 + "1)"
    tracemalloc.start()
    t0 = time.process_time()
    assert loads_lenient(tuple_text) is None and parse_arguments(tuple_text) == {}
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert time.process_time() - t0 < 2 and peak < 100 * 1024 * 1024
    assert loads_lenient("{'a': 1, 'b': True,}") == {"a": 1, "b": True}  # short sloppy JSON is still repaired
    big_json = json.dumps({"query": "x" * 200_000})
    assert parse_arguments(big_json) == {"query": "x" * 200_000}  # strict JSON of any size is read


# ---- 3. credentials go only where they were configured; chat_template only from template files -------------------


def test_openai_api_key_is_never_sent_to_a_model_server(srv, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-judge-only")
    monkeypatch.setenv("VLLM_API_KEY", "sk-not-named")
    srv.push(F.text_reply("a"))
    make_backend(parse_spec(f"openai:{srv.base_url}#x")).complete(MSGS)
    assert "Authorization" not in srv.headers[0]


def test_a_model_server_gets_its_own_key_from_its_setting_or_its_variable(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-judge-only")
    monkeypatch.setenv("MY_VLLM_KEY", "sk-model")
    with F() as model_srv, F() as judge_srv:
        model_srv.push(F.text_reply("a"), F.text_reply("b"))
        cfg = parse_spec(f"openai:{model_srv.base_url}#x").model_copy(update={"api_key_env": "MY_VLLM_KEY"})
        make_backend(cfg).complete(MSGS)
        make_backend(cfg.model_copy(update={"api_key": "sk-config"})).complete(MSGS)
        judge_srv.push(F.text_reply('{"accuracy": true}'))
        make_judge(f"openai:{judge_srv.base_url}#j", mode="kddcup2025", api_key="sk-judge-only").judge("q", "a", "a")
    assert [h.get("Authorization") for h in model_srv.headers] == ["Bearer sk-model", "Bearer sk-config"]
    assert judge_srv.headers[0]["Authorization"] == "Bearer sk-judge-only"
    monkeypatch.delenv("MY_VLLM_KEY")
    with pytest.raises(ValueError, match="MY_VLLM_KEY, which is not set"):
        cfg.key()


def test_a_key_and_a_password_in_the_url_send_the_key_only(srv):
    # aiohttp refuses a request that carries both; the configured key is the server's credential
    srv.push(F.text_reply("a"))
    url = srv.base_url.replace("http://", "http://alice:pw@")
    make_backend(parse_spec(f"openai:{url}#x").model_copy(update={"api_key": "sk-model"})).complete(MSGS)
    assert srv.headers[0]["Authorization"] == "Bearer sk-model"


def test_chat_template_names_only_template_files(tmp_path, srv):
    secret = tmp_path / "id_rsa"
    secret.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nsecret\n")
    plain = tmp_path / "notes.jinja"
    plain.write_text("my bank pin is 1234")
    good = tmp_path / "mine.jinja"
    good.write_text("{% for m in messages %}{{ m.content }}{% endfor %}")
    for bad, why in ((secret, "neither a bundled one"), (plain, "no Jinja tag"), (tmp_path / "x.j2", "not found")):
        with pytest.raises(ValueError, match=why):
            _backend(srv.base_url, chat_template=str(bad))
    assert srv.requests == []  # nothing was sent
    assert load_chat_template(str(good)).startswith("{% for") and "<|im_start|>" in load_chat_template("chatml")


# ---- 7, 8. vLLM 0.10.2: "required" while streaming; the hold-back of a whole wave -------------------------------


def test_vllm_0_10_2_required_streams_an_error_event_and_the_request_is_asked_again_unstreamed(caplog):
    with F(vllm=VllmBehaviour(tool_parser=None, version="0.10")) as srv, caplog.at_level(logging.WARNING):
        srv.push(*[F.text_reply('[{"name": "web_search", "parameters": {"query": "q"}}]', completion_tokens=12)] * 3)
        b = _backend(srv.base_url, tool_choice="required")
        with collect_model_calls() as calls:
            first = complete_and_report(b, "decide", MSGS, tools=TOOLS)
        second = b.complete(MSGS, tools=TOOLS)
    assert [r.get("stream") for r in srv.requests] == [True, None, None]
    for reply in (first, second):
        assert [(c.name, c.arguments) for c in reply.tool_calls] == [("web_search", {"query": "q"})]
    assert calls[0].error is None
    assert any("streamed an error" in r.message and "no longer streamed" in r.message for r in caplog.records)


def test_a_held_back_first_wave_loses_no_decision():
    text = '{"action": "call_tool", "tool": "web_search", "arguments": {"query": "q"}}'
    with F(vllm=VllmBehaviour(tool_parser="llama3_json"), delay_s=0.3) as srv:
        srv.responder = lambda body: F.text_reply(text, completion_tokens=20)
        b = _backend(srv.base_url)
        results = run_many([lambda: b.complete(MSGS, tools=TOOLS)] * 8, timeout_s=30)
    assert all(ok for ok, _ in results)
    assert all(decision_from_reply(r).arguments == {"query": "q"} for _, r in results)
    streamed = [r.get("stream") for r in srv.requests]
    assert streamed.count(True) >= 8 - 1 and streamed.count(None) == streamed.count(True)  # each asked again once


# ---- 9. llama.cpp's servers; context too long; reasoning -------------------------------------------------------


@pytest.mark.parametrize(
    "owner,expect",
    [
        ("llamacpp", "repeat_penalty"),
        ("me", "repeat_penalty"),
        ("vllm", "repetition_penalty"),
        (None, "repetition_penalty"),
    ],
)
def test_the_repetition_penalty_goes_by_the_servers_own_name(owner, expect):
    with F(owned_by=owner) as srv:
        srv.push(F.text_reply("a"), F.text_reply('{"accuracy": true}'))
        _backend(srv.base_url, sampling={"repetition_penalty": 1.0, "top_k": 0}).complete(MSGS)
        make_judge(f"openai:{srv.base_url}#j", mode="kddcup2025").judge("q", "a", "a")  # the judge too
    for sent in srv.requests:
        assert sent[expect] == 1.0 and ({"repeat_penalty", "repetition_penalty"} - {expect}).isdisjoint(sent)
    assert len(srv.requests) == 2


def test_the_judge_falls_back_from_json_schema_like_the_policy(caplog):
    with F(response_formats=("json_object",)) as srv, caplog.at_level(logging.WARNING):  # llama-cpp-python
        srv.push(F.text_reply('{"accuracy": true}'), F.text_reply('{"accuracy": false}'))
        judge = make_judge(f"openai:{srv.base_url}#j", mode="kddcup2025")
        first, second = judge.judge("q", "a", "a"), judge.judge("q", "a", "b")
    assert (first.correct, first.status, second.correct) == (True, "ok", False)
    assert [(r.get("response_format") or {}).get("type") for r in srv.requests] == [
        "json_schema",
        "json_object",
        "json_object",
    ]
    assert sum("rejected response_format" in r.message for r in caplog.records) == 1


def test_http_500_on_tools_falls_back_to_json_in_text_without_retries_or_cool_down():
    err = (500, {"error": {"code": 500, "message": "tools param requires --jinja flag", "type": "server_error"}})
    with F(tools_error=err) as srv:
        srv.push(F.text_reply('{"action": "answer", "answer": "Paris"}'))
        b = OpenAICompatibleBackend(srv.base_url, "x", max_retries=3, retry_wait_s=0.01)
        reply = b.complete(MSGS, tools=TOOLS)
    assert [bool(r.get("tools")) for r in srv.requests] == [True, False]
    assert reply.mode is None and not b.supports_native_tools and "Paris" in reply.text
    assert b.client.replicas[0].failures == 0


def test_max_tokens_too_large_is_surfaced_as_what_it_is():
    msg = (
        "'max_tokens' or 'max_completion_tokens' is too large: 4096. This model's maximum context length is 4096 "
        "tokens and your request has 1000 input tokens (4096 > 4096 - 1000)."
    )
    with F() as srv:
        srv.push(("status", 400, {"error": {"message": msg, "type": "BadRequestError", "param": None, "code": 400}}))
        b = _backend(srv.base_url)
        with pytest.raises(ContextTooLong, match="do not fit the model's context.*is too large"):
            b.complete(MSGS, max_tokens=4096)
    assert len(srv.requests) == 1 and not b.client.max_completion_tokens


@pytest.mark.parametrize("stream", [True, False])
def test_reasoning_is_recorded_and_not_taken_for_a_hold_back(stream):
    reply = F.text_reply("", completion_tokens=300)
    reply["choices"][0]["message"]["reasoning_content"] = "Let me think about the bottle. " * 20
    reply["choices"][0]["finish_reason"] = "length"
    with F() as srv:
        srv.push(reply)
        b = _backend(srv.base_url, stream=stream)
        with collect_model_calls() as calls:
            got = complete_and_report(b, "decide", MSGS, tools=TOOLS)
    assert got.text == "" and got.reasoning.startswith("Let me think") and b.stream_tools
    assert calls[0].reasoning.startswith("Let me think") and calls[0].error is None and len(srv.requests) == 1


JUNK = [
    {"choices": {"0": 1}},
    {"choices": [{"message": "text"}]},
    {"choices": [{"message": {"content": 5}}]},
    {"choices": [{"message": {"content": "a", "tool_calls": "x"}}], "usage": [1]},
    {"choices": [{"message": {"tool_calls": [5, {"function": "f"}, {"function": {"name": 3}}]}}]},
    {"choices": [{"message": {"content": "a"}, "finish_reason": 7}], "model": {"a": 1}},
]


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("junk", JUNK)
def test_replies_of_the_wrong_shape_are_an_error_or_an_empty_reply_never_a_crash(junk, stream):
    with F() as srv:
        srv.push(junk)
        try:
            reply = _backend(srv.base_url, stream=stream).complete(MSGS, tools=TOOLS)
        except Exception as e:  # noqa: BLE001 - what is asserted is its kind (ServerUnreachable is one too)
            assert isinstance(e, BackendError), e
        else:
            assert reply.tool_calls == [] and isinstance(reply.text, str) and reply.model in (None, "fake-vlm")


@pytest.mark.parametrize("mode,extra", [("endless", []), ("huge-args", []), ("huge-body", ["--no-stream"])])
def test_the_cli_against_a_hostile_server_finishes_in_time_with_the_cap_in_the_trace(
    mode, extra, tmp_path, monkeypatch, capsys
):
    from pathlib import Path

    from glasses_rag.frontends.run import main
    from traces.schema import TurnTrace

    monkeypatch.setenv("GLASSES_DEMO_DIR", str(Path(__file__).resolve().parents[1] / "data" / "demo"))
    with HostileModelServer(mode, size=50 * 1024 * 1024) as srv:  # type: ignore[arg-type]
        t0 = time.monotonic()
        rc = main(
            [
                "--task",
                "1",
                "--limit",
                "1",
                "--model",
                f"openai:{srv.base_url}#x",
                "--budget",
                "5",
                "--out",
                str(tmp_path),
                "--run-id",
                "hostile",
                "--no-progress",
                *extra,
            ]
        )
    # every decision failed (oversized): the run says its scores are not the model's and exits 1 (issue 41 item 4)
    assert rc == 1 and time.monotonic() - t0 < 60
    assert "decision(s) of the model could be used" in capsys.readouterr().err
    traces = [TurnTrace.model_validate_json(p.read_text()) for p in (tmp_path / "hostile").glob("*__*.json")]
    errors = [c.error for t in traces for e in t.steps for c in e.model_calls if c.error]
    assert errors and all("ReplyTooLarge" in e for e in errors)
    capsys.readouterr()
