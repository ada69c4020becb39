"""A text-only planner over a GGUF file, in-process with llama-cpp-python (an optional package).

A `Llama` object is not thread-safe (one llama.cpp context, one KV cache): two generations on it at once crash
the process (segfault, GGML_ASSERT). So every generation holds the backend's lock, and runs streamed: tokens are
evaluated only as the stream is read, and the stream is closed as soon as the turn's cancel scope is cancelled,
so an abandoned generation frees the model within one token (the prompt's prefill is not interruptible).

Images are dropped and messages are sent with string contents: llama-cpp-python's chat formats read string
contents only (`gemma` drops a list content's text and every system message, so the system text is moved into
the first user message for it).

A call with a `response_schema` is constrained by llama.cpp's own grammar sampler, with the GBNF grammar that
llama-cpp-python builds from the JSON schema (`LlamaGrammar.from_json_schema`, once per schema). It is built
here rather than through `response_format`, which silently falls back to "any JSON" when a schema does not
convert: a schema that does not convert is generated without a grammar, said in a warning, and the reply's mode
says so (json_text). The converter (llama-cpp-python 0.3.x) enforces the structure, consts, enums, required and
additional properties, but not numeric bounds (minimum/maximum): those are checked where the reply is used (the
tool's argument validation, the confidence's clamp).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path
from typing import Any

from glasses_rag.core.calls import current_scope
from glasses_rag.models.vlm.base import (
    BackendError,
    ChatReply,
    ReplyCancelled,
    Usage,
    load_chat_template,
    system_into_user,
    text_only_messages,
    without_generation_markers,
)

log = logging.getLogger(__name__)

# chat formats that have no system role
_NO_SYSTEM_ROLE = {"gemma"}


class LlamaCppBackend:
    supports_native_tools = False
    supports_structured = True
    supports_images = False

    def __init__(
        self,
        model_path: str | Path,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        n_gpu_layers: int = 0,
        chat_format: str | None = None,
        chat_template: str | None = None,
        **kwargs: Any,
    ):
        try:
            from llama_cpp import Llama
        except ImportError as e:
            raise ImportError(
                "the llamacpp backend needs llama-cpp-python, which is not installed: "
                "run `pip install llama-cpp-python`"
            ) from e
        p = Path(model_path)
        if not p.is_file():
            raise FileNotFoundError(f"GGUF model file not found: {p}")
        self.name = f"llamacpp:{p.name}"
        self.chat_format = chat_format
        self._lock = threading.Lock()
        self._grammars: dict[str, Any] = {}  # schema JSON -> LlamaGrammar (None: the schema does not convert)
        self.llm: Any = Llama(
            model_path=str(p),
            n_ctx=n_ctx,
            n_threads=n_threads,
            n_gpu_layers=n_gpu_layers,
            chat_format=chat_format,
            verbose=False,
            **kwargs,
        )
        if chat_template:
            from llama_cpp.llama_chat_format import Jinja2ChatFormatter

            eos = self.llm.detokenize([self.llm.token_eos()]).decode("utf-8", "ignore")
            bos = self.llm.detokenize([self.llm.token_bos()]).decode("utf-8", "ignore")
            self.llm.chat_handler = Jinja2ChatFormatter(
                without_generation_markers(load_chat_template(chat_template)), eos_token=eos, bos_token=bos
            ).to_chat_handler()

    def _messages(self, messages: list[dict]) -> list[dict]:
        if self.chat_format in _NO_SYSTEM_ROLE:
            messages = system_into_user(messages)
        return text_only_messages(messages)

    def _grammar(self, schema: dict) -> Any:
        """The grammar of a JSON schema, converted once per schema; None when llama-cpp-python cannot convert it."""
        key = json.dumps(schema, ensure_ascii=False)  # key order kept: it is the order the grammar writes them
        if key not in self._grammars:
            from llama_cpp import LlamaGrammar

            try:
                self._grammars[key] = LlamaGrammar.from_json_schema(key, verbose=False)
            except Exception as e:  # noqa: BLE001 - the converter raises plain exceptions on unsupported features
                log.warning(
                    "llama.cpp cannot turn this JSON schema into a grammar (%s: %s); generating without one",
                    type(e).__name__,
                    e,
                )
                self._grammars[key] = None
        return self._grammars[key]

    def warm_up(self) -> None:
        self.complete([{"role": "user", "content": "Hello"}], max_tokens=1)

    def _acquire(self, scope) -> None:
        while not self._lock.acquire(timeout=0.05):
            if scope is not None and scope.cancelled:
                raise ReplyCancelled("the turn ended while waiting for the model (another generation held it)")

    def complete(
        self,
        messages: list[dict],
        tools: list[dict] | None = None,
        max_tokens: int = 512,
        temperature: float = 0.0,
        response_schema: dict | None = None,
    ) -> ChatReply:
        t0 = time.perf_counter()
        scope = current_scope()
        kw: dict[str, Any] = {}
        if response_schema:
            grammar = self._grammar(response_schema["schema"])
            if grammar is not None:
                kw["grammar"] = grammar
        self._acquire(scope)
        text: list[str] = []
        finish = None
        try:
            try:
                stream = self.llm.create_chat_completion(
                    messages=self._messages(messages), max_tokens=max_tokens, temperature=temperature, stream=True, **kw
                )
                try:
                    for chunk in stream:
                        choice = (chunk.get("choices") or [{}])[0]
                        piece = (choice.get("delta") or {}).get("content")
                        if piece:
                            text.append(piece)
                        finish = choice.get("finish_reason") or finish
                        if scope is not None and scope.cancelled:
                            break
                finally:
                    stream.close()  # no further eval on the model once we stop reading
            except Exception as e:  # noqa: BLE001
                raise BackendError(f"llama.cpp generation failed: {type(e).__name__}: {e}") from e
            # streamed chunks carry no usage: completion tokens are the chunks read, the prompt the rest of the context
            n_out = len(text)
            n_in = max(0, int(getattr(self.llm, "n_tokens", 0)) - n_out)
        finally:
            self._lock.release()
        reply = ChatReply(
            text="".join(text),
            usage=Usage(input_tokens=n_in, output_tokens=n_out),
            finish_reason=finish,
            latency_ms=(time.perf_counter() - t0) * 1000.0,
            model=self.name,
            mode="structured" if "grammar" in kw else None,
        )
        if scope is not None and scope.cancelled:
            raise ReplyCancelled(
                "the turn ended during generation", reply.model_copy(update={"finish_reason": "cancelled"})
            )
        return reply
