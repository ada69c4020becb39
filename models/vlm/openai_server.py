"""A ChatBackend over any OpenAI-compatible /chat/completions server (vLLM, llama.cpp server, SGLang, ...)."""

from __future__ import annotations

import logging
import time
from typing import Any

import httpx

from models.openai_client import BackendError, OpenAIClient
from models.vlm.base import ChatReply, ChatToolCall, Usage, parse_arguments

log = logging.getLogger(__name__)


class OpenAICompatibleBackend:
    """POST {base_url}/chat/completions with native `tools` (tool_choice="auto").

    Retries (tenacity, exponential backoff) on connection errors, timeouts, 5xx and 429; a
    4xx is an error at once. When the server rejects native tools (vLLM started without
    `--enable-auto-tool-choice --tool-call-parser ...`), the request is resent once without
    them and `supports_native_tools` turns False: the policy's text JSON protocol still works.
    `model=None` asks the server's /models for the first model it serves.
    """

    supports_images = True

    def __init__(self, base_url: str, model: str | None = None, api_key: str | None = None, timeout_s: float = 120.0,
                 max_retries: int = 3, retry_wait_s: float = 0.5, native_tools: bool = True,
                 extra_body: dict[str, Any] | None = None, client: httpx.Client | None = None):
        self.client = OpenAIClient(base_url, api_key, timeout_s=timeout_s, max_retries=max_retries,
                                   retry_wait_s=retry_wait_s, client=client)
        self.base_url = self.client.base_url
        self.timeout_s = timeout_s
        self.supports_native_tools = native_tools
        self.extra_body = extra_body or {}
        self.model = model or self._first_model()
        self.name = f"openai:{self.model}"

    def close(self) -> None:
        self.client.close()

    def _first_model(self) -> str:
        ids = self.client.models()
        if not ids:
            raise BackendError(f"{self.base_url}/models lists no model; give one as openai:<base_url>#<model>")
        return ids[0]

    # ---- ChatBackend ------------------------------------------------------------------------

    def complete(self, messages: list[dict], tools: list[dict] | None = None, max_tokens: int = 512,
                 temperature: float = 0.0) -> ChatReply:
        payload: dict[str, Any] = {"model": self.model, "messages": messages, "max_tokens": max_tokens,
                                   "temperature": temperature, **self.extra_body}
        if tools and self.supports_native_tools:
            payload["tools"] = tools
            payload["tool_choice"] = "auto"
        t0 = time.perf_counter()
        try:
            data = self.client.chat(payload)
        except BackendError as e:
            msg = str(e).lower()
            if "tools" in payload and " 400" in msg and "tool" in msg:
                log.warning("server rejected native tools; falling back to the text JSON protocol: %s", e)
                self.supports_native_tools = False
                payload.pop("tools"), payload.pop("tool_choice")
                data = self.client.chat(payload)
            else:
                raise
        latency = (time.perf_counter() - t0) * 1000.0
        return self.parse_response(data, latency)

    @staticmethod
    def parse_response(data: dict, latency_ms: float = 0.0) -> ChatReply:
        choices = data.get("choices") or []
        if not choices or not isinstance(choices[0], dict):
            raise BackendError(f"reply has no choices: {str(data)[:300]}")
        msg = choices[0].get("message") or {}
        content = msg.get("content")
        if isinstance(content, list):  # some servers return content parts
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        text = content or ""
        calls = []
        for tc in msg.get("tool_calls") or []:
            fn = (tc or {}).get("function") or {}
            if fn.get("name"):
                calls.append(ChatToolCall(name=fn["name"], arguments=parse_arguments(fn.get("arguments")), id=tc.get("id")))
        u = data.get("usage") or {}
        return ChatReply(text=text or "", tool_calls=calls,
                         usage=Usage(input_tokens=int(u.get("prompt_tokens") or 0), output_tokens=int(u.get("completion_tokens") or 0)),
                         latency_ms=latency_ms, finish_reason=choices[0].get("finish_reason"), model=data.get("model"))
