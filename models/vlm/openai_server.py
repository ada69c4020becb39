"""A ChatBackend over any OpenAI-compatible /chat/completions server (vLLM, llama.cpp server, SGLang, ...)."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from models.openai_client import BackendError, OpenAIClient, RequestCancelled
from models.vlm.base import (
    ChatReply,
    ChatToolCall,
    DecisionMode,
    ReplyCancelled,
    Usage,
    load_chat_template,
    parse_arguments,
    system_into_user,
    text_only_messages,
)

log = logging.getLogger(__name__)

# Words in a 400/422 that say the server does not take a request field (as opposed to a bad prompt).
_REJECTS = {
    "structured": ("response_format", "json_schema", "json_object", "guided", "grammar", "structured"),
    "native_tools": ("tool",),
    "stream": ("stream",),
}


def _rejected(e: BackendError, feature: str) -> bool:
    msg = str(e).lower()
    return e.status in (400, 422) and any(w in msg for w in _REJECTS[feature])


class OpenAICompatibleBackend:
    """POST {base_url}/chat/completions, streamed, with the strongest constraint the server takes.

    A decision is constrained by `response_format` (the JSON schema of the allowed tools: vLLM's guided
    decoding, llama-cpp-python's grammar) when the policy offers a schema; a server that rejects it (400/422)
    is asked with native `tools` (tool_choice="auto"), and one that rejects those (vLLM started without
    `--enable-auto-tool-choice --tool-call-parser ...`) with neither: the prompt asks for JSON either way.
    What a server rejected is remembered, so later requests go straight to what works; `ChatReply.mode` says
    which was used. The same goes for streaming. Retries (tenacity) on connection errors, timeouts, 5xx and
    429 are the client's. Cancelling the caller's scope closes the connection (see models/openai_client.py).
    `model=None` asks the server's /models for the first model it serves.
    """

    def __init__(self, base_url: str | Sequence[str], model: str | None = None, api_key: str | None = None,
                 timeout_s: float = 120.0, max_retries: int = 3, retry_wait_s: float = 0.5, native_tools: bool = True,
                 response_format: str = "json_schema", stream: bool = True, pool_size: int = 16,
                 text_only: bool = False, chat_template: str | None = None, system_role: bool = True,
                 extra_body: dict[str, Any] | None = None):
        if response_format not in ("json_schema", "json_object"):
            raise ValueError(f"response_format must be json_schema or json_object, not {response_format!r}")
        self.client = OpenAIClient(base_url, api_key, timeout_s=timeout_s, max_retries=max_retries,
                                   retry_wait_s=retry_wait_s, pool_size=pool_size)
        self.base_url = self.client.base_url
        self.timeout_s = timeout_s
        self.supports_native_tools = native_tools
        self.supports_structured = True
        self.supports_images = not text_only
        self.text_only = text_only
        self.system_role = system_role
        self.stream = stream
        self.response_format = response_format
        self.extra_body = dict(extra_body or {})
        if chat_template:
            self.extra_body["chat_template"] = load_chat_template(chat_template)  # vLLM's per-request field
        self.model = model or self._first_model()
        self.name = f"openai:{self.model}"

    def close(self) -> None:
        self.client.close()

    def _first_model(self) -> str:
        ids = self.client.models()
        if not ids:
            raise BackendError(f"{self.base_url}/models lists no model; give one as openai:<base_url>#<model>")
        return ids[0]

    def _format(self, schema: dict) -> dict:
        if self.response_format == "json_object":  # llama-cpp-python: a grammar from the schema
            return {"type": "json_object", "schema": schema["schema"]}
        return {"type": "json_schema", "json_schema": {"name": schema.get("name", "reply"), "schema": schema["schema"]}}

    # ---- ChatBackend ------------------------------------------------------------------------

    def complete(self, messages: list[dict], tools: list[dict] | None = None, max_tokens: int = 512,
                 temperature: float = 0.0, response_schema: dict | None = None) -> ChatReply:
        if not self.system_role:
            messages = system_into_user(messages)
        if self.text_only:
            messages = text_only_messages(messages)
        t0 = time.perf_counter()
        while True:
            payload: dict[str, Any] = {"model": self.model, "messages": messages, "max_tokens": max_tokens,
                                       "temperature": temperature, **self.extra_body}
            mode: DecisionMode | None = None
            if response_schema and self.supports_structured:
                payload["response_format"] = self._format(response_schema)
                mode = "structured"
            elif tools and self.supports_native_tools:
                payload["tools"] = tools
                payload["tool_choice"] = "auto"
                mode = "native_tools"
            try:
                data = self.client.chat(payload, stream=self.stream)
            except RequestCancelled as e:
                partial = self.parse_response(e.partial, (time.perf_counter() - t0) * 1000.0) if e.partial else None
                if partial is not None:
                    partial.mode, partial.finish_reason = mode, "cancelled"
                raise ReplyCancelled(str(e), partial) from None
            except BackendError as e:
                if mode == "structured" and _rejected(e, "structured"):
                    log.warning("%s rejected response_format %s; trying native tools / JSON in text: %s",
                                self.base_url, self.response_format, e)
                    self.supports_structured = False
                elif mode == "native_tools" and _rejected(e, "native_tools"):
                    log.warning("%s rejected native tools; falling back to JSON in text: %s", self.base_url, e)
                    self.supports_native_tools = False
                elif self.stream and _rejected(e, "stream"):
                    log.warning("%s rejected streaming; asking without it: %s", self.base_url, e)
                    self.stream = False
                else:
                    raise
                continue
            reply = self.parse_response(data, (time.perf_counter() - t0) * 1000.0)
            reply.mode = mode
            return reply

    @staticmethod
    def parse_response(data: dict, latency_ms: float = 0.0) -> ChatReply:
        choices = data.get("choices") or []
        if not choices or not isinstance(choices[0], dict):
            raise BackendError(f"reply has no choices: {str(data)[:300]}")
        msg = choices[0].get("message") or {}
        content = msg.get("content")
        if isinstance(content, list):  # some servers return content parts
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        calls = []
        for tc in msg.get("tool_calls") or []:
            fn = (tc or {}).get("function") or {}
            if fn.get("name"):
                calls.append(ChatToolCall(name=fn["name"], arguments=parse_arguments(fn.get("arguments")), id=tc.get("id")))
        u = data.get("usage") or {}
        return ChatReply(text=content or "", tool_calls=calls,
                         usage=Usage(input_tokens=_count(u.get("prompt_tokens")), output_tokens=_count(u.get("completion_tokens"))),
                         latency_ms=latency_ms, finish_reason=choices[0].get("finish_reason"), model=data.get("model"))


def _count(v: Any) -> int | None:
    """A token count from a server's usage object; None when it sent none (or junk)."""
    try:
        return int(v) if v is not None else None
    except (TypeError, ValueError):
        return None
