"""Tool calls written as text (hermes, llama3_json, pythonic) turned into ChatToolCalls, tolerant of junk."""

from __future__ import annotations

import random

import pytest

from glasses_rag.models.vlm.base import ChatReply, extract_json
from glasses_rag.models.vlm.openai_server import with_text_tool_calls
from glasses_rag.models.vlm.tool_parsers import tool_calls_from_text

Q = {"query": "red bottle"}


@pytest.mark.parametrize(
    "text,calls,rest",
    [
        (
            '<tool_call>{"name": "web_search", "arguments": {"query": "red bottle"}}</tool_call>',
            [("web_search", Q)],
            "",
        ),
        (
            'Looking.\n<tool_call>\n{"name": "web_search", "parameters": {"query": "red bottle"}}\n</tool_call>',
            [("web_search", Q)],
            "Looking.",
        ),
        ("<tool_call>{'name': 'web_search', 'arguments': {'query': 'red bottle'},}", [("web_search", Q)], ""),  # open
        (
            '<tool_call>[{"name": "ocr", "arguments": {}}, '
            '{"name": "web_search", "arguments": "{\\"query\\": \\"red bottle\\"}"}]'
            "</tool_call>",
            [("ocr", {}), ("web_search", Q)],
            "",
        ),
        ('<|python_tag|>{"name": "web_search", "parameters": {"query": "red bottle"}}', [("web_search", Q)], ""),
        (
            '{"name": "ocr", "parameters": {}}; {"name": "web_search", "arguments": {"query": "red bottle"}}',
            [("ocr", {}), ("web_search", Q)],
            "",
        ),
        ('```json\n{"name": "web_search", "arguments": {"query": "red bottle"}}\n```', [("web_search", Q)], ""),
        (
            '{"type": "function", "function": {"name": "web_search", "arguments": "{\\"query\\": \\"red bottle\\"}"}}',
            [("web_search", Q)],
            "",
        ),
        (
            'I will search. {"name": "web_search", "arguments": {"query": "red bottle", "filter": {"name": "x", '
            '"arguments": {}}}}',
            [("web_search", {"query": "red bottle", "filter": {"name": "x", "arguments": {}}})],
            "I will search.",
        ),
        ('[web_search(query="red bottle"), ocr()]', [("web_search", Q), ("ocr", {})], ""),
        (
            "```python\n[answer(answer='Paris', confidence=0.9, entity=null, ok=true)]\n```",
            [("answer", {"answer": "Paris", "confidence": 0.9, "entity": None, "ok": True})],
            "",
        ),
        ('web_search(query="red bottle")', [("web_search", Q)], ""),
        ('[tools.web_search(query="red bottle", sizes=(1, 2))]', [("tools.web_search", {**Q, "sizes": [1, 2]})], ""),
    ],
)
def test_tool_calls_in_text(text, calls, rest):
    got, left = tool_calls_from_text(text)
    assert [(c.name, c.arguments) for c in got] == calls and left == rest


@pytest.mark.parametrize(
    "text",
    [
        "",
        "Paris is the capital.",
        '{"action": "call_tool", "tool": "ocr", "arguments": {}}',  # a JSON decision stays text
        '{"name": "Falcon 9"}',
        "[1, 2, 3]",
        '[f(x=__import__("os").system("ls"))]',
        "[f(1, 2)]",
        "[f(**kw)]",
        "<tool_call>not json</tool_call>",
        '{"name": 3, "arguments": {}}',
        '{"name": "x", "arguments": 5}',
        "{" * 5000,
        "[" * 5000,
        "(" * 5000,
        "<tool_call>" * 500,
        '{"a": ' * 2000,
        "x" * 40000 + '{"name": "a", "arguments": {}}',
    ],
)
def test_no_tool_call_in_junk(text):
    assert tool_calls_from_text(text) == ([], text)


def test_fuzz_never_raises():
    rng = random.Random(7)
    alphabet = list("{}[]()\"':,;=\\ \n`aZ0._") + [
        "<tool_call>",
        "</tool_call>",
        '"name"',
        '"arguments"',
        "null",
        "<|python_tag|>",
        "web_search(",
        "```python",
    ]
    for _ in range(500):
        junk = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 80)))
        calls, rest = tool_calls_from_text(junk)
        assert isinstance(rest, str) and all(c.name for c in calls)


def test_a_reply_without_tool_calls_gets_those_written_in_its_text():
    reply = ChatReply(text='[web_search(query="red bottle")]', mode="native_tools")
    out = with_text_tool_calls(reply)
    assert [(c.name, c.arguments) for c in out.tool_calls] == [("web_search", Q)] and out.text == ""
    assert with_text_tool_calls(ChatReply(text="Paris")).text == "Paris"


def test_hostile_braces_are_bounded_in_json_extraction_too():
    assert extract_json("{" * 30000) is None and extract_json('{"a": ' * 8000) is None
