"""Optional text-only planner over a GGUF file with llama-cpp-python (not a project dependency).

Images are dropped (the planner reads the question, tools, OCR text and evidence); tools go
through the policy's text JSON protocol.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from models.vlm.base import BackendError, ChatReply, Usage, text_only_messages


class LlamaCppBackend:
    supports_native_tools = False
    supports_images = False

    def __init__(self, model_path: str | Path, n_ctx: int = 4096, n_threads: int | None = None,
                 n_gpu_layers: int = 0, chat_format: str | None = None, **kwargs: Any):
        try:
            from llama_cpp import Llama
        except ImportError as e:
            raise ImportError("the llamacpp backend needs llama-cpp-python, which is not installed: "
                              "run `pip install llama-cpp-python`") from e
        p = Path(model_path)
        if not p.is_file():
            raise FileNotFoundError(f"GGUF model file not found: {p}")
        self.name = f"llamacpp:{p.name}"
        self.llm = Llama(model_path=str(p), n_ctx=n_ctx, n_threads=n_threads, n_gpu_layers=n_gpu_layers,
                         chat_format=chat_format, verbose=False, **kwargs)

    def complete(self, messages: list[dict], tools: list[dict] | None = None, max_tokens: int = 512,
                 temperature: float = 0.0) -> ChatReply:
        t0 = time.perf_counter()
        try:
            out = self.llm.create_chat_completion(messages=text_only_messages(messages), max_tokens=max_tokens,
                                                  temperature=temperature)
        except Exception as e:  # noqa: BLE001
            raise BackendError(f"llama.cpp generation failed: {e}") from e
        msg = out["choices"][0]["message"]
        u = out.get("usage") or {}
        return ChatReply(text=msg.get("content") or "", usage=Usage(input_tokens=u.get("prompt_tokens", 0),
                         output_tokens=u.get("completion_tokens", 0)), latency_ms=(time.perf_counter() - t0) * 1000.0,
                         finish_reason=out["choices"][0].get("finish_reason"))
