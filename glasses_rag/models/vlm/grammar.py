"""JSON-schema constrained decoding for in-process Hugging Face models, with xgrammar (the grammar engine vLLM and
SGLang use) and its transformers logits processor.

At every generated token the logits of the tokens that would break the schema are masked, so a reply is either
JSON valid for the schema (generation stops at the grammar's end: after the closing brace only a stop token is
allowed) or, when `max_new_tokens` runs out first, a prefix of it (finish "length": the caller records it as an
unusable reply). JSON is generated compact (no free whitespace between tokens): a small model cannot then spend
its token budget on blank lines.

One `SchemaGrammars` per tokenizer: xgrammar's view of the vocabulary is built once (about 1.5 s for Gemma's
262k tokens, so `prepare()` runs at warm-up), and each schema is compiled once, cached by its JSON text, and,
given a `GrammarStore`, kept on disk for the next process (a compile takes ~15 s for that vocabulary, a load
under 1 s).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from glasses_rag.models.vlm.grammar_store import GrammarStore

log = logging.getLogger(__name__)

# tokens that end an assistant turn in common chat templates (Gemma, ChatML, Llama 3, Phi): after the grammar's
# end the model writes one of them (or the tokenizer's EOS), and generation stops there
TURN_END_TOKENS = ("<end_of_turn>", "<|im_end|>", "<|eot_id|>", "<|end|>", "<|endoftext|>")


def xgrammar_available() -> bool:
    try:
        import xgrammar  # noqa: F401
    except ImportError:
        return False
    return True


def stop_token_ids(tokenizer: Any, generation_config: Any = None) -> list[int]:
    """The ids that may end a constrained reply: the tokenizer's EOS, the model's generation EOS ids, and the
    turn-end tokens of the chat templates that exist in this vocabulary as single tokens."""
    ids: list[int] = []

    def add(value: Any) -> None:
        for i in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(i, int) and i >= 0 and i not in ids:
                ids.append(i)

    add(getattr(tokenizer, "eos_token_id", None))
    add(getattr(generation_config, "eos_token_id", None))
    vocab = tokenizer.get_vocab()
    add([vocab[t] for t in TURN_END_TOKENS if t in vocab])
    return ids


# how every schema is compiled (also part of a stored grammar's key)
COMPILE_OPTIONS = {"any_whitespace": False, "strict_mode": True}


class SchemaGrammars:
    """Compiled JSON-schema grammars for one tokenizer, and a fresh logits processor per generation."""

    def __init__(
        self,
        tokenizer: Any,
        vocab_size: int,
        stop_ids: list[int],
        max_cached: int = 64,
        store: GrammarStore | None = None,
    ):
        if not stop_ids:
            raise ValueError("constrained decoding needs at least one stop token id (the tokenizer has no EOS)")
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size
        self.stop_ids = list(stop_ids)
        self.max_cached = max_cached
        self.store = store
        self._info: Any = None
        self.compiles = 0  # schemas compiled so far (a cache hit compiles nothing)
        self.loaded = 0  # schemas read from the store instead
        self._compiler: Any = None
        self._cache: OrderedDict[str, Any] = OrderedDict()
        self._lock = threading.Lock()

    def prepare(self) -> None:
        """Build xgrammar's view of the vocabulary (once; later calls return at once)."""
        with self._lock:
            self._compiler_locked()

    def _compiler_locked(self) -> Any:
        if self._compiler is None:
            import xgrammar as xgr

            info = xgr.TokenizerInfo.from_huggingface(
                self.tokenizer, vocab_size=self.vocab_size, stop_token_ids=self.stop_ids
            )
            self._info = info
            self._compiler = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)  # cached here, by schema
        return self._compiler

    def compiled(self, schema: dict[str, Any]) -> Any:
        """The compiled grammar of a JSON schema (the `schema` part of a response_schema)."""
        # not sort_keys: the order of an object's properties is the order in which the grammar has them written
        key = json.dumps(schema, ensure_ascii=False)
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                return hit
            grammar = self._stored_or_compiled(key)
            self._cache[key] = grammar
            while len(self._cache) > self.max_cached:
                self._cache.popitem(last=False)
            return grammar

    def _stored_or_compiled(self, key: str) -> Any:
        compiler = self._compiler_locked()
        stored = self._store_key(key)
        if self.store is not None and stored is not None:
            grammar = self.store.load(stored, self._info)
            if grammar is not None:
                self.loaded += 1
                return grammar
        t0 = time.perf_counter()
        grammar = compiler.compile_json_schema(key, **COMPILE_OPTIONS)
        self.compiles += 1
        log.info("reply schema compiled in %.1f s (%d characters)", time.perf_counter() - t0, len(key))
        if self.store is not None and stored is not None:
            self.store.save(stored, grammar)
        return grammar

    def _store_key(self, key: str) -> str | None:
        """The stored grammar's key, or None (no store, or a key that cannot be made: then it is only compiled)."""
        if self.store is None:
            return None
        try:
            return self.store.key(self._info, key, "json_schema " + json.dumps(COMPILE_OPTIONS, sort_keys=True))
        except Exception as e:  # noqa: BLE001 - the store only saves time: never a reason to fail a reply
            log.warning("compiled grammar not looked up in %s: %s", self.store.folder, e)
            return None

    def logits_processor(self, schema: dict[str, Any]) -> Any:
        """A transformers LogitsProcessor that keeps one generation inside the schema (one per generate() call:
        it holds the matcher's state)."""
        from xgrammar.contrib.hf import LogitsProcessor

        return LogitsProcessor(self.compiled(schema))


__all__ = ["SchemaGrammars", "stop_token_ids", "xgrammar_available", "TURN_END_TOKENS"]
