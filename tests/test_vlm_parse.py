"""Tolerant parsing of model replies into Decisions, AnswerDrafts and JSON objects."""

from __future__ import annotations

import json
import random

import pytest

from glasses_rag.models.vlm.base import ChatReply, ChatToolCall, extract_json, image_to_data_url, parse_arguments
from glasses_rag.policies.model.policy import answer_from_text, decision_from_reply, load_prompt
from glasses_rag.policies.protocol import IDK, PolicyReplyError


@pytest.mark.parametrize(
    "text,expected",
    [
        ('{"a": 1}', {"a": 1}),
        ('Sure! Here it is:\n```json\n{"a": 1, "b": [1, 2,],}\n```\nHope it helps', {"a": 1, "b": [1, 2]}),
        ("{'action': 'answer', 'ok': True, 'n': None}", {"action": "answer", "ok": True, "n": None}),
        ("{'answer': 'I don't know', 'confidence': 0}", {"answer": "I don't know", "confidence": 0}),
        ("{'answer': 'O'Brien\\'s pub', 'x': 'say \"hi\"'}", {"answer": "O'Brien's pub", "x": 'say "hi"'}),
        ('{action: "call_tool", tool: "ocr"}', {"action": "call_tool", "tool": "ocr"}),
        ('text {"a": {"b": "}"}, "c": "{"} tail {"d": 2}', {"a": {"b": "}"}, "c": "{"}),
        ('junk {not json at all} then {"ok": 1}', {"ok": 1}),
        ('truncated {"a": {"b": [1, 2', {"a": {"b": [1, 2]}}),
        ('{"x": true, "y": false, "z": null,}', {"x": True, "y": False, "z": None}),
        ('<think>hmm {maybe}</think>\n{"action": "answer"}', {"action": "answer"}),
    ],
)
def test_extract_json(text, expected):
    assert extract_json(text) == expected


@pytest.mark.parametrize("text", ["", None, "no braces", "[1, 2, 3]", "{{{{", "}{", "{'a' 'b'}"])
def test_extract_json_none(text):
    assert extract_json(text) is None


def test_extract_json_fuzz_never_raises():
    rng = random.Random(1234)
    alphabet = list("{}[]\"':,\\ \n`aZ0-._") + ["true", "null", "```json", '{"a":']
    good = json.dumps({"action": "call_tool", "tool": "web_search", "arguments": {"query": "x y"}})
    for _ in range(400):
        junk = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 60)))
        out = extract_json(junk)
        assert out is None or isinstance(out, dict)
        # a good object after junk without braces is always found
        clean = junk.replace("{", "").replace("}", "")
        if clean.count('"') % 2 == 0 and clean.count("'") == 0 and "`" not in clean:
            assert extract_json(clean + " " + good) == json.loads(good)
    # random truncations of a good object never raise
    for i in range(len(good)):
        assert extract_json(good[:i]) is None or isinstance(extract_json(good[:i]), dict)


def test_parse_arguments():
    assert parse_arguments('{"query": "a"}') == {"query": "a"}
    assert parse_arguments("{'query': 'a',}") == {"query": "a"}
    assert parse_arguments({"k": 1}) == {"k": 1}
    assert parse_arguments("") == {} and parse_arguments(None) == {} and parse_arguments("garbage") == {}


def _d(text="", calls=()):
    return decision_from_reply(ChatReply(text=text, tool_calls=list(calls)))


def test_decisions_from_text_shapes():
    d = _d(
        '{"action": "call_tool", "tool": "web_search", "arguments": {"query": "q"}, "rationale": "r", '
        '"sub_question": "sq", "needs_retrieval": "yes"}'
    )
    assert (d.action, d.tool, d.arguments, d.rationale, d.sub_question, d.needs_retrieval) == (
        "call_tool",
        "web_search",
        {"query": "q"},
        "r",
        "sq",
        True,
    )
    d = _d('{"action": "web_search", "arguments": "{\\"query\\": \\"q\\"}"}')  # action = tool name, string args
    assert d.tool == "web_search" and d.arguments == {"query": "q"}
    d = _d('<tool_call>{"name": "ocr", "arguments": {}}</tool_call>')  # hermes style in text
    assert d.action == "call_tool" and d.tool == "ocr"
    d = _d('{"tool_calls": [{"function": {"name": "crop", "arguments": "{\\"label\\": \\"cup\\"}"}}]}')
    assert d.tool == "crop" and d.arguments == {"label": "cup"}
    assert _d('{"action": "answer", "reason": "enough"}').rationale == "enough"
    assert _d('{"action": "final_answer"}').action == "answer"
    assert _d('{"action": "call_tool"}').action == "answer"  # no tool named
    assert _d('{"tool": "answer"}').action == "answer"
    d = _d('{"action": "call_tool", "tool": "no_such_tool", "arguments": {"x": 1}}')
    assert d.tool == "no_such_tool"  # the registry, not the parser, rejects unknown tools


def test_native_tool_calls_win_over_text():
    d = _d('{"action": "answer"}', [ChatToolCall(name="ocr", arguments={})])
    assert d.action == "call_tool" and d.tool == "ocr"
    assert _d("", [ChatToolCall(name="final_answer")]).action == "answer"


@pytest.mark.parametrize("text", ["", "   ", "I cannot help with that.", "{'action': ", "[1,2]", '{"action": 5}'])
def test_unparseable_decision(text):
    with pytest.raises(PolicyReplyError):
        _d(text)


def test_answers():
    a = answer_from_text('```json\n{"answer": "Eiffel Tower", "confidence": "90%", "entity": "Eiffel Tower"}\n```')
    assert a.answer == "Eiffel Tower" and a.confidence == pytest.approx(0.9) and a.entity == "Eiffel Tower"
    assert answer_from_text('{"answer": "x", "confidence": 7}').confidence == pytest.approx(0.07)
    assert answer_from_text('{"answer": "x", "confidence": "high"}').confidence == 0.0
    assert answer_from_text('{"answer": "x", "confidence": 1.5e9}').confidence == 1.0
    assert answer_from_text('{"answer": ["a", "b"], "confidence": 0.5}').answer == "a, b"
    for idk in (
        '{"answer": "I don\'t know.", "confidence": 0.8}',
        '{"answer": "", "confidence": 1}',
        '{"answer": "Unknown", "confidence": 0.4}',
    ):
        a = answer_from_text(idk)
        assert a.answer == IDK and a.confidence == 0.0
    for junk in ("no json", ""):
        with pytest.raises(PolicyReplyError):
            answer_from_text(junk)


def test_prompts_exist_and_render():
    from glasses_rag.policies.model.prompts import TEMPLATES

    for name in TEMPLATES:
        t = load_prompt(name)
        assert t.template.strip()
    text = load_prompt("vlm_answer").safe_substitute(idk=IDK)
    assert IDK in text and "$idk" not in text
    turn = load_prompt("vlm_turn").safe_substitute(question="Q?", task=2, history="(none)", image_note="")
    assert "Q?" in turn and "$" not in turn


def test_image_to_data_url_modes():
    from PIL import Image

    for mode in ("RGB", "RGBA", "L", "P"):
        url = image_to_data_url(Image.new(mode, (3000, 10)), max_side=512)
        assert url.startswith("data:image/jpeg;base64,")


def test_several_native_tool_calls_become_parallel_calls():

    reply = ChatReply(
        text="",
        tool_calls=[
            ChatToolCall(name="image_search", arguments={}),
            ChatToolCall(name="web_search", arguments={"query": "falcon 9"}),
        ],
    )
    d = decision_from_reply(reply)
    assert d.tool == "image_search" and [(p.tool, p.arguments) for p in d.parallel] == [
        ("web_search", {"query": "falcon 9"})
    ]
