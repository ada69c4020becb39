"""A langchain-core chat model over any ChatBackend, with `bind_tools`."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.messages.utils import convert_to_openai_messages
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import ConfigDict


class BackendChatModel(BaseChatModel):
    """`BackendChatModel(backend=OpenAICompatibleBackend(...)).bind_tools([my_tool]).invoke(...)`.

    Tool calls come back as `AIMessage.tool_calls` (native ones from the backend; for
    text-only backends, a JSON object {"tool"/"name": ..., "arguments": {...}} in the reply is
    read as a call when tools are bound).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    backend: Any
    max_tokens: int = 512
    temperature: float = 0.0

    @property
    def _llm_type(self) -> str:
        return "glasses-rag-chat-backend"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"backend": getattr(self.backend, "name", type(self.backend).__name__)}

    def bind_tools(
        self, tools: Sequence[dict[str, Any] | type | Callable | Any], *, tool_choice: str | None = None, **kwargs: Any
    ):
        formatted = [convert_to_openai_tool(t) for t in tools]
        return self.bind(tools=formatted, **kwargs)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        from glasses_rag.models.vlm.base import extract_json, parse_arguments

        tools = kwargs.get("tools")
        oa_messages = convert_to_openai_messages(messages)
        reply = self.backend.complete(
            oa_messages,
            tools=tools,
            max_tokens=kwargs.get("max_tokens", self.max_tokens),
            temperature=kwargs.get("temperature", self.temperature),
        )
        text = reply.text
        if stop:
            for s in stop:
                if s in text:
                    text = text[: text.index(s)]
        calls = [
            {"name": c.name, "args": c.arguments, "id": c.id or f"call_{uuid.uuid4().hex[:12]}", "type": "tool_call"}
            for c in reply.tool_calls
        ]
        if not calls and tools:
            names = {t["function"]["name"] for t in tools if "function" in t}
            obj = extract_json(text) or {}
            name = obj.get("tool") or obj.get("name")
            if name in names:
                calls.append(
                    {
                        "name": name,
                        "args": parse_arguments(obj.get("arguments", obj.get("args"))),
                        "id": f"call_{uuid.uuid4().hex[:12]}",
                        "type": "tool_call",
                    }
                )
        n_in, n_out = reply.usage.input_tokens or 0, reply.usage.output_tokens or 0
        usage = {"input_tokens": n_in, "output_tokens": n_out, "total_tokens": n_in + n_out}
        msg = AIMessage(
            content=text,
            tool_calls=calls,
            usage_metadata=usage,
            response_metadata={
                "latency_ms": reply.latency_ms,
                "finish_reason": reply.finish_reason,
                "model_name": reply.model,
                "mode": reply.mode,
            },
        )
        return ChatResult(generations=[ChatGeneration(message=msg)])
