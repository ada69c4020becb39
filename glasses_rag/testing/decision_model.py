"""A fake model that walks the JSON decision prompt through a fixed plan: image_search, then web_search (with the
turn's question as the query), then the answer riding on the last decision; a chain-of-verification request gets
a supported verdict. So a turn of the model policy makes 3 decisions + 1 self-check = 4 model calls and 2 tool
calls, and the model's own time is whatever the server's `--delay` says (0: it answers at once).

    python -m glasses_rag.testing.fake_model_server --responder glasses_rag.testing.decision_model:respond

Used by `benchmarks.agent_cpu` (the agent's own CPU per turn against a model server)."""

from __future__ import annotations

import json
import re
from typing import Any

from glasses_rag.testing.fake_model_server import FakeOpenAIServer

_QUESTION = re.compile(r"^Question: (.*)$", re.M)


def _texts(message: dict) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    return "\n".join(p.get("text", "") for p in content or [] if isinstance(p, dict) and p.get("type") == "text")


def respond(body: dict) -> dict:
    """The reply to one /chat/completions request body (runs in the server process)."""
    messages = body.get("messages") or [{}]
    asked = _texts(messages[-1])
    said = [_texts(m) for m in messages if m.get("role") == "assistant"]
    if "chain of verification" in asked:
        return _reply(
            {
                "verifications": [{"question": "is the entity right?", "answer": "yes", "supported": True}],
                "supported": True,
                "confidence": 0.9,
                "reason": "the results say so",
            }
        )
    if "Decide the next step" not in asked:  # a separate answer request
        return _reply({"answer": "I don't know", "confidence": 0.1, "entity": "", "rationale": "no decision asked"})
    if not any('"image_search"' in s for s in said):
        return _reply({"action": "call_tool", "tool": "image_search", "arguments": {}, "rationale": "what is it?"})
    if not any('"web_search"' in s for s in said):
        found = _QUESTION.search("\n".join(_texts(m) for m in messages if m.get("role") == "user"))
        query = found.group(1).strip()[:200] if found else "the pictured entity"
        return _reply(
            {
                "action": "call_tool",
                "tool": "web_search",
                "arguments": {"query": query},
                "rationale": "look the fact up",
            }
        )
    return _reply(
        {
            "action": "answer",
            "answer": "a scripted answer",
            "confidence": 0.9,
            "entity": "",
            "rationale": "enough evidence",
        }
    )


def _reply(obj: dict[str, Any]) -> dict:
    text = json.dumps(obj)
    return FakeOpenAIServer.text_reply(text, prompt_tokens=100, completion_tokens=max(1, len(text) // 4))


__all__ = ["respond"]
