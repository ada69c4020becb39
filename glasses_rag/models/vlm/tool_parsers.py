"""Tool calls written as text, turned into `ChatToolCall`s: what a server's tool-call parser left in `content`.

vLLM returns a reply's text as `content` (no `tool_calls`) whenever its parser could not extract a call: a
hermes block whose JSON says `parameters` instead of `arguments`, a llama3_json object preceded by a space, a
pythonic list the regex does not take, any server started without a parser. In-process models write the same
shapes. Three are recognised, tolerant of junk (code fences, prose around, single quotes, trailing commas, a
block left open at the end):

- hermes (Qwen, Hermes):      <tool_call>{"name": "web_search", "arguments": {"query": "x"}}</tool_call>
- llama3_json (Llama 3.x):    <|python_tag|>{"name": "web_search", "parameters": {"query": "x"}}  (several: `;`)
- pythonic (Llama 3.2/4):     [web_search(query="x"), ocr()]

An object counts as a call only with a string `name` and an `arguments` or `parameters` object: a JSON decision
such as `{"action": "call_tool", "tool": ...}` stays text for the caller's own parser.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

from glasses_rag.models.vlm.base import ChatToolCall, balanced_objects, loads_lenient, parse_arguments

MAX_CHARS = 32_000  # longer replies are not searched for calls (an answer, or junk)
MAX_CALLS = 16

_HERMES = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.S)
_FENCE = re.compile(r"^\s*```[A-Za-z]*\s*\n?(.*?)\n?```\s*$", re.S)
_SPECIAL = ("<|python_tag|>", "<|python_start|>", "<|python_end|>", "<|eom_id|>", "<|eot_id|>")
_LITERAL_NAMES = {"true": True, "false": False, "null": None, "none": None}


def tool_calls_from_text(text: str | None) -> tuple[list[ChatToolCall], str]:
    """The tool calls written in `text` (hermes blocks, llama3 JSON objects or a pythonic list) and the text
    left around them; ([], text) when there are none."""
    if not text or len(text) > MAX_CHARS:
        return [], text or ""
    for parse in (_hermes, _pythonic, _json_objects):
        found = parse(text)
        if found is not None and found[0]:
            return found
    return [], text


def _hermes(text: str) -> tuple[list[ChatToolCall], str] | None:
    if "<tool_call>" not in text:
        return None
    calls: list[ChatToolCall] = []
    for block in _HERMES.findall(text):
        calls += _calls_from_json(_strip(block))
    rest = _HERMES.sub("", text).replace("</tool_call>", "")
    return calls, rest.strip()


def _json_objects(text: str) -> tuple[list[ChatToolCall], str] | None:
    body = _strip(text)
    if "{" not in body:
        return None
    calls: list[ChatToolCall] = []
    taken: list[str] = []
    for chunk in balanced_objects(body):
        if any(chunk in t for t in taken):  # inside a call already found (its arguments), or found twice
            continue
        found = _calls_from_json(chunk)
        if found:
            calls += found
            taken.append(chunk)
        if len(calls) >= MAX_CALLS:
            break
    rest = body
    for t in taken:
        rest = rest.replace(t, "", 1)
    return calls, re.sub(r"^[\s;]+|[\s;]+$", "", rest)


def _calls_from_json(chunk: str) -> list[ChatToolCall]:
    """A JSON call object (or a list of them) as calls; [] when it is not one."""
    val = loads_lenient(chunk.strip()) if chunk.strip() else None
    items = val if isinstance(val, list) else [val]
    return [c for c in (_call_from_obj(v) for v in items) if c is not None]


def _call_from_obj(obj: Any) -> ChatToolCall | None:
    if not isinstance(obj, dict):
        return None
    if isinstance(obj.get("function"), dict):  # the OpenAI shape written out as text
        obj = {**obj["function"], "id": obj.get("id")}
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip() or not ("arguments" in obj or "parameters" in obj):
        return None
    raw = obj["arguments"] if "arguments" in obj else obj["parameters"]
    if raw is not None and not isinstance(raw, (dict, str)):
        return None
    ident = obj.get("id")
    return ChatToolCall(name=name.strip(), arguments=parse_arguments(raw), id=ident if isinstance(ident, str) else None)


def _pythonic(text: str) -> tuple[list[ChatToolCall], str] | None:
    body = _strip(text)
    if not (body.startswith("[") and body.endswith("]")) and not re.match(r"^[A-Za-z_][\w.]*\(.*\)$", body, re.S):
        return None
    try:
        tree = ast.parse(body, mode="eval").body
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    nodes = tree.elts if isinstance(tree, ast.List) else [tree]
    calls: list[ChatToolCall] = []
    for node in nodes:
        call = _call_from_ast(node)
        if call is None:
            return None  # a list that is not all calls is data, not tool calls
        calls.append(call)
    return calls, ""


def _call_from_ast(node: ast.AST) -> ChatToolCall | None:
    if not isinstance(node, ast.Call) or node.args:
        return None
    name = _dotted(node.func)
    if name is None:
        return None
    args: dict[str, Any] = {}
    for kw in node.keywords:
        if kw.arg is None:  # **kwargs
            return None
        try:
            args[kw.arg] = _literal(kw.value)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return None
    return ChatToolCall(name=name, arguments=args)


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def _literal(node: ast.AST) -> Any:
    """A Python literal, with JSON's true/false/null taken as well (models mix the two)."""
    if isinstance(node, ast.Name) and node.id.lower() in _LITERAL_NAMES:
        return _LITERAL_NAMES[node.id.lower()]
    if isinstance(node, ast.List):
        return [_literal(e) for e in node.elts]
    if isinstance(node, ast.Dict):
        return {_literal(k): _literal(v) for k, v in zip(node.keys, node.values, strict=True) if k is not None}
    value = ast.literal_eval(node)
    return list(value) if isinstance(value, (tuple, set)) else value


def _strip(text: str) -> str:
    """Without a code fence around the whole text and without Llama's tool-call special tokens."""
    body = text.strip()
    fence = _FENCE.match(body)
    if fence:
        body = fence.group(1).strip()
    for token in _SPECIAL:
        body = body.replace(token, "")
    return body.strip()


def tool_call_json(call: ChatToolCall) -> str:
    """A call as the hermes / llama3_json JSON object (for prompts and fine-tuning data)."""
    return json.dumps({"name": call.name, "arguments": call.arguments}, ensure_ascii=False)
