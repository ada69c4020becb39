"""A scripted model for the fake OpenAI-compatible server: a fixed JSON reply per prompt kind, so every preset's
model steps (routers, decoupler, summaries, the model loop, chain of verification, consistency) run their full
path without a model. Markers are phrases of the prompts in prompts/; `over` replaces some replies by marker.
Used by tests/test_presets.py and `benchmarks.latency --presets`."""

from __future__ import annotations

import json
from typing import Any

from glasses_rag.testing.fake_model_server import FakeOpenAIServer

REPLIES: dict[str, dict[str, Any]] = {
    "Identify the domain of a question": {"domain": "Vehicle"},
    "Domain of the question": {
        "reasoning": "I have no knowledge about the maker",
        "answer": "I don't know",
        "confidence": 0.1,
        "needs_retrieval": True,
    },
    "Decide how to search": {"image_search": True, "text_search": True, "object": "rocket"},
    "Keep a simple question as one sub-question": {
        "sub_questions": ["Who manufactures the Falcon 9?"],
        "entity": "Falcon 9",
    },
    "Classify a question": {"needs_external_info": True, "is_real_time": False},
    "one-sentence summary of the image": {"summary": "A Falcon 9 rocket on a launch pad."},
    "rewrite the question so that it names them": {
        "expanded_query": "Who manufactures the Falcon 9 rocket?",
        "entities": ["Falcon 9, rocket, white"],
    },
    "chain of verification": {
        "verifications": [{"question": "q", "answer": "a", "supported": True}],
        "supported": True,
        "confidence": 0.95,
        "reason": "the KG says so",
    },
    "Closed-book answer": {"consistent": True, "reason": "same maker"},
    "proposed answer below against the image": {
        "confidence": 0.95,
        "reasoning": "the KG says so",
        "sub_questions": [{"question": "who makes it?", "finding": "Supported"}],
    },
    "Judge impartially": {"consistent": True, "reason": "same maker"},
}
ANSWER = {"answer": "SpaceX", "confidence": 0.9, "entity": "Falcon 9", "rationale": "KG"}


class ScriptedModel:
    """The model loop gets one image search, then the answer in the same reply as the decision to answer."""

    def __init__(self, **over: dict):
        self.replies = {**REPLIES, **{k.replace("_", " "): v for k, v in over.items()}}

    def __call__(self, body: dict) -> Any:
        text = json.dumps(body)
        for marker, reply in self.replies.items():
            if marker in text:
                return FakeOpenAIServer.text_reply(json.dumps(reply))
        if "Decide the next step" in text:
            done = "image_search({" in text
            return FakeOpenAIServer.text_reply(
                json.dumps(
                    {"action": "answer", **ANSWER, "rationale": "found"}
                    if done
                    else {"action": "call_tool", "tool": "image_search", "arguments": {}, "rationale": "look it up"}
                )
            )
        return FakeOpenAIServer.text_reply(json.dumps(ANSWER))


__all__ = ["ANSWER", "REPLIES", "ScriptedModel"]
