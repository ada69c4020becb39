"""What a model policy asks a model for, and how its replies are read: the JSON schemas of a decision (one
branch per allowed tool, one branch that answers with the answer itself), of an answer and of the self-checks;
the `final_answer` function offered with native tool calls; tolerant parsing of every reply shape into a
`Decision` / `AnswerDraft`. A reply that cannot be read raises `PolicyReplyError` (a `policy_error` step)."""

from __future__ import annotations

import json
import math
import re
from typing import Any

from pydantic import ValidationError

from glasses_rag.models.vlm.base import ChatReply, TokenLogprob, extract_json, parse_arguments
from glasses_rag.policies.protocol import (
    IDK,
    AnswerDraft,
    Decision,
    ParallelCall,
    PolicyReplyError,
    ToolSpec,
    is_abstention,
)

FINAL_ANSWER = "final_answer"  # the function a native-tools reply calls to answer (as in smolagents)
_ANSWER_WORDS = {"answer", FINAL_ANSWER, "finish", "final", "respond", "stop", "done"}
_CALL_WORDS = {"call_tool", "tool", "call", "use_tool", "tool_call", "function", "function_call"}
# Every free-text field of a reply schema has a length bound, so a constrained reply always reaches the grammar's
# end: a small model that repeats a character ("10000...") is stopped by the field's bound, not by the token cap
# (a reply cut there cannot be read). The bounds follow what each field is for: an answer is "a name, a number, a
# phrase or one sentence", a rationale or a reason one sentence, an entity a name.
ANSWER_CHARS = 160
SENTENCE_CHARS = 160
NAME_CHARS = 80
_TEXT = {"type": "string", "maxLength": SENTENCE_CHARS}
_ANSWER_TEXT = {"type": "string", "maxLength": ANSWER_CHARS}
_FLAG = {"type": "boolean"}
_CONFIDENCE = {"type": "number", "minimum": 0, "maximum": 1}
_ENTITY = {"anyOf": [{"type": "string", "maxLength": NAME_CHARS}, {"type": "null"}]}
ANSWER_FIELDS = {"answer": _ANSWER_TEXT, "confidence": _CONFIDENCE, "entity": _ENTITY, "rationale": _TEXT}
# the longest a bounded number is written (xgrammar writes a number with a minimum and maximum with a few digits
# at most; 24 characters leaves room to spare)
NUMBER_CHARS = 24


def snippet(text: str, n: int = 200) -> str:
    t = " ".join((text or "").split())
    return t if len(t) <= n else t[: n - 3] + "..."


# ---- schemas --------------------------------------------------------------------------------------------------


def _inline_refs(node: Any, defs: dict[str, Any]) -> Any:
    """A schema with its `$ref`s to `$defs` replaced by the definitions (tool schemas are not recursive), so that
    each tool's arguments stand alone inside the decision schema."""
    if isinstance(node, dict):
        if "$ref" in node and isinstance(node["$ref"], str):
            target = defs.get(node["$ref"].rsplit("/", 1)[-1], {})
            return _inline_refs({**target, **{k: v for k, v in node.items() if k != "$ref"}}, defs)
        return {k: _inline_refs(v, defs) for k, v in node.items() if k != "$defs"}
    if isinstance(node, list):
        return [_inline_refs(v, defs) for v in node]
    return node


def bounded_strings(node: Any, max_chars: int = SENTENCE_CHARS) -> Any:
    """A schema with a `maxLength` on every free string (one without an enum, a const, a pattern or its own bound):
    a tool's text arguments (a search query) get the same bound as the reply's own text fields."""
    if isinstance(node, dict):
        out = {k: bounded_strings(v, max_chars) for k, v in node.items()}
        if out.get("type") == "string" and not {"enum", "const", "pattern", "maxLength"} & set(out):
            out["maxLength"] = max_chars
        return out
    if isinstance(node, list):
        return [bounded_strings(v, max_chars) for v in node]
    return node


def max_json_chars(schema: dict[str, Any]) -> float:
    """The most characters a reply valid for `schema` can have, as the grammar writes it (compact JSON: one space
    after ':' and ','; every property of an object present), or infinity when a part has no bound (a string
    without maxLength, an array without maxItems, a number without both bounds). Each generated token writes at
    least one character of plain text, so a token cap of this many lets every reply finish (a string escape such
    as \\u00e9 or a byte-fallback token can write less than a character per token: text that needs them may be
    cut earlier)."""
    s = schema.get("schema", schema) if "name" in schema and "schema" in schema else schema
    return _chars(s)


def _chars(node: Any) -> float:
    if not isinstance(node, dict):
        return float("inf")
    if "const" in node:
        return len(json.dumps(node["const"], ensure_ascii=False))
    if "enum" in node:
        return max((len(json.dumps(v, ensure_ascii=False)) for v in node["enum"]), default=0)
    for key in ("anyOf", "oneOf"):
        if key in node:
            return max((_chars(v) for v in node[key]), default=float("inf"))
    kind = node.get("type")
    if isinstance(kind, list):
        return max((_chars({**node, "type": k}) for k in kind), default=float("inf"))
    if kind == "string":
        return 2 + node["maxLength"] if "maxLength" in node else float("inf")
    if kind == "boolean":
        return 5
    if kind == "null":
        return 4
    if kind in ("number", "integer"):
        if "minimum" not in node or "maximum" not in node:
            return float("inf")
        if kind == "integer":
            return max(len(str(int(node["minimum"]))), len(str(int(node["maximum"]))))
        return NUMBER_CHARS
    if kind == "array":
        if "maxItems" not in node:
            return float("inf")
        n = int(node["maxItems"])
        return 2 + n * _chars(node.get("items", {})) + 2 * max(0, n - 1)
    if kind == "object" or "properties" in node:
        props = node.get("properties") or {}
        if node.get("additionalProperties", True) is not False and not props:
            return float("inf")
        body = sum(len(json.dumps(k)) + 2 + _chars(v) for k, v in props.items())
        return 2 + body + 2 * max(0, len(props) - 1)
    return float("inf")


_SCHEMAS: dict[tuple, dict[str, Any]] = {}


def decision_schema(tools: list[ToolSpec]) -> dict[str, Any]:
    """The JSON schema of a next-step decision: a call of one of `tools` with arguments valid for it, or the
    answer itself. Built once per set of tools (a turn asks for it at every step)."""
    key = tuple((t.name, id(t.json_schema)) for t in tools)
    cached = _SCHEMAS.get(key)
    if cached is None:
        cached = _SCHEMAS[key] = _decision_schema(tools)
    return cached


def _decision_schema(tools: list[ToolSpec]) -> dict[str, Any]:
    options = []
    for t in tools:
        params = t.json_schema["function"]["parameters"]
        options.append(
            {
                "type": "object",
                "additionalProperties": False,
                "required": ["action", "tool", "arguments", "rationale"],
                "properties": {
                    "action": {"const": "call_tool"},
                    "tool": {"const": t.name},
                    "arguments": bounded_strings(_inline_refs(params, params.get("$defs", {}))),
                    "rationale": _TEXT,
                    "sub_question": _TEXT,
                    "needs_retrieval": _FLAG,
                },
            }
        )
    options.append(
        {
            "type": "object",
            "additionalProperties": False,
            "required": ["action", "answer", "confidence", "entity", "rationale"],
            "properties": {"action": {"const": "answer"}, **ANSWER_FIELDS, "needs_retrieval": _FLAG},
        }
    )
    return {"name": "next_step", "schema": {"anyOf": options}}


ANSWER_SCHEMA = {
    "name": "answer",
    "schema": {
        "type": "object",
        "additionalProperties": False,
        "required": ["answer", "confidence", "entity", "rationale"],
        "properties": ANSWER_FIELDS,
    },
}
COVE_SCHEMA = {
    "name": "verification",
    "schema": {
        "type": "object",
        "additionalProperties": False,
        "required": ["verifications", "supported", "confidence", "reason"],
        "properties": {
            "verifications": {
                "type": "array",
                "maxItems": 3,
                "items": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["question", "answer", "supported"],
                    "properties": {"question": _TEXT, "answer": _ANSWER_TEXT, "supported": _FLAG},
                },
            },
            "supported": _FLAG,
            "confidence": _CONFIDENCE,
            "reason": _TEXT,
        },
    },
}
CONSISTENCY_SCHEMA = {
    "name": "consistency",
    "schema": {
        "type": "object",
        "additionalProperties": False,
        "required": ["consistent", "reason"],
        "properties": {"consistent": _FLAG, "reason": _TEXT},
    },
}
FINAL_ANSWER_TOOL = {
    "type": "function",
    "function": {
        "name": FINAL_ANSWER,
        "description": "Give the final answer to the user's question (or \"I don't know\").",
        "parameters": ANSWER_SCHEMA["schema"],
    },
}


# ---- replies --------------------------------------------------------------------------------------------------


def confidence(v: Any) -> float:
    """A confidence as models write it (0.8, "80%", 80, "0.8") on 0..1; junk is 0, and so are NaN and infinities
    (NaN compares false with everything: clamped, it would have been 1.0, above any threshold)."""
    try:
        if isinstance(v, str):
            v = v.strip()
            c = float(v.rstrip("%").strip()) / (100.0 if v.endswith("%") else 1.0)
        else:
            c = float(v)
    except (TypeError, ValueError, OverflowError):
        return 0.0
    if not math.isfinite(c):
        return 0.0
    if c > 1.0:
        c = c / 100.0 if c <= 100.0 else 1.0
    return max(0.0, min(1.0, c))


PLACEHOLDER = re.compile(r"<[^<>]{1,60}>")


def answer_from_obj(obj: dict[str, Any], text: str = "") -> AnswerDraft:
    keys = [k for k in ("answer", "final_answer", "response") if k in obj]
    if not keys:
        raise PolicyReplyError(f"the reply has no answer field: {snippet(text or json.dumps(obj, default=str))}", text)
    ans = obj[keys[0]]
    if isinstance(ans, (list, tuple)):
        ans = ", ".join(str(a) for a in ans)
    ans = "" if ans is None else str(ans).strip()
    ent = obj.get("entity")
    entity = str(ent) if ent and str(ent).strip().lower() not in ("null", "none") else None
    rationale = str(obj.get("rationale") or obj.get("reason") or "")
    if is_abstention(ans) or PLACEHOLDER.fullmatch(ans):  # a small model copies the format's "<answer or ...>"
        return AnswerDraft(answer=IDK, confidence=0.0, rationale=rationale, entity=entity)
    return AnswerDraft(
        answer=ans, confidence=confidence(obj.get("confidence", 0.0)), rationale=rationale, entity=entity
    )


_ANSWER_VALUE = re.compile(r'"(?:answer|final_answer)"\s*:\s*"((?:[^"\\]|\\.)*)"')


def answer_token_confidence(logprobs: list[TokenLogprob] | None) -> float | None:
    """The geometric mean probability of the tokens that wrote a JSON reply's answer value, its closing quote
    included (where the answer ends is part of it); None without log-probabilities or an answer value.

    A length-normalised sequence likelihood: the model's own belief in the words it wrote, which a small model's
    written "confidence" (always 1.0 after fine-tuning on confident targets) is not.

    Example:
        >>> lp = [TokenLogprob(token='{"answer": "', logprob=0.0), TokenLogprob(token="Paris", logprob=-0.5),
        ...       TokenLogprob(token='"}', logprob=-0.1)]
        >>> round(answer_token_confidence(lp), 3)
        0.741
    """
    if not logprobs:
        return None
    m = _ANSWER_VALUE.search("".join(t.token for t in logprobs))
    if m is None:
        return None
    start, end = m.start(1), m.end(1) + 1
    pos, chosen = 0, []
    for t in logprobs:
        if pos + len(t.token) > start and pos < end:
            chosen.append(t.logprob)
        pos += len(t.token)
    return math.exp(sum(chosen) / len(chosen)) if chosen else None


def answer_from_text(text: str) -> AnswerDraft:
    obj = extract_json(text)
    if not obj:
        raise PolicyReplyError(f"no JSON answer in the reply: {snippet(text) or '<empty>'}", text)
    return answer_from_obj(obj, text)


def _action(obj: dict[str, Any], tool: Any) -> tuple[str, Any]:
    """("answer" | "call_tool", tool name) from the shapes models write."""
    action = obj.get("action")
    action = action.strip() if isinstance(action, str) else ""
    low = action.lower()
    if low in _ANSWER_WORDS:
        kind = "answer"
    elif low in _CALL_WORDS:
        kind = "call_tool"
    elif action:  # {"action": "web_search", ...}: the action is the tool's name
        kind, tool = "call_tool", tool or action
    else:
        kind = "call_tool" if tool else "answer"
    if kind == "call_tool" and (not tool or (isinstance(tool, str) and tool.strip().lower() in _ANSWER_WORDS)):
        kind, tool = "answer", None
    return kind, tool


def _unwrap_call(obj: dict[str, Any]) -> dict[str, Any]:
    """hermes / OpenAI-ish shapes: {"function": {...}} or {"tool_calls": [...]} -> tool and arguments on top."""
    obj = dict(obj)
    if "function" in obj and isinstance(obj["function"], dict):
        f = obj.pop("function")
        obj.setdefault("tool", f.get("name"))
        obj.setdefault("arguments", f.get("arguments"))
    if "tool_calls" in obj and isinstance(obj["tool_calls"], list) and obj["tool_calls"]:
        tc = obj["tool_calls"][0]
        if isinstance(tc, dict):
            inner = tc.get("function", tc)
            obj.setdefault("tool", inner.get("name") or inner.get("tool"))
            obj.setdefault("arguments", inner.get("arguments", inner.get("args")))
    return obj


def decision_from_obj(obj: dict[str, Any], fallback_rationale: str = "") -> Decision:
    """Normalise the shapes models write into a Decision (no check of the tool name). An answer decision that
    holds an answer field carries the answer."""
    obj = _unwrap_call(obj)
    tool = obj.get("tool") or obj.get("tool_name") or obj.get("name")
    args = obj.get("arguments", obj.get("args", obj.get("parameters", obj.get("tool_input"))))
    if not isinstance(obj.get("action"), str) and not isinstance(tool, str) and "answer" not in obj:
        raw = json.dumps(obj, default=str)
        raise PolicyReplyError(f"the reply names neither an action nor a tool: {snippet(raw)}", raw)
    kind, tool = _action(obj, tool)
    nr = obj.get("needs_retrieval")
    if isinstance(nr, str):
        nr = {"true": True, "yes": True, "false": False, "no": False}.get(nr.strip().lower())
    sq = obj.get("sub_question")
    rationale = str(obj.get("rationale") or obj.get("reason") or obj.get("thought") or fallback_rationale or "")
    return Decision.model_validate(
        {
            "action": kind,
            "tool": str(tool) if kind == "call_tool" else None,
            "arguments": parse_arguments(args) if kind == "call_tool" else {},
            "sub_question": str(sq) if sq not in (None, "") else None,
            "needs_retrieval": nr if isinstance(nr, bool) else None,
            "rationale": rationale,
            "answer": answer_from_obj(obj) if kind == "answer" and "answer" in obj else None,
        }
    )


def _from_tool_calls(reply: ChatReply) -> Decision:
    tc = reply.tool_calls[0]
    if tc.name.strip().lower() in _ANSWER_WORDS:
        draft = answer_from_obj(tc.arguments) if "answer" in tc.arguments else None
        return Decision(
            action="answer",
            answer=draft,
            rationale=(draft.rationale if draft else "") or snippet(reply.text) or "model chose to answer",
        )
    # several native calls in one reply are independent by construction: run them together
    more = [
        ParallelCall(tool=c.name, arguments=c.arguments)
        for c in reply.tool_calls[1:]
        if c.name.strip().lower() not in _ANSWER_WORDS
    ]
    return Decision(
        action="call_tool", tool=tc.name, arguments=tc.arguments, parallel=more, rationale=snippet(reply.text)
    )


def decision_from_reply(reply: ChatReply) -> Decision:
    """Native tool calls first, else JSON in the text; anything else is a PolicyReplyError."""
    if reply.tool_calls:
        return _from_tool_calls(reply)
    obj = extract_json(reply.text)
    if obj is None:
        raise PolicyReplyError(f"no JSON decision in the reply: {snippet(reply.text) or '<empty>'}", reply.text)
    try:
        return decision_from_obj(obj)
    except ValidationError as e:
        raise PolicyReplyError(
            f"invalid decision ({e.error_count()} errors): {snippet(reply.text)}", reply.text
        ) from None
