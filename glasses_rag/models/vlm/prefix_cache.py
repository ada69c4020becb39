"""Reuse of the KV cache of prompts already computed, for in-process generation
(glasses_rag/models/vlm/transformers_local.py).

A model policy's requests share long prefixes: the system text and tool list are the same for every call of a run,
and a turn's calls repeat the previous prompt and add to it (glasses_rag/policies/model/prompts.py). A server keeps the
KV cache of what it computed and resumes from the longest stored prefix (vLLM's automatic prefix caching, llama.cpp's
prompt cache); this does the same in-process: after a generation, the cache of its tokens (prompt and reply) is stored,
keyed by those token ids; a later prompt that starts with the same ids gets a cache holding that common prefix and
computes only the rest. Entries are whole per-layer key/value tensors, bounded by `max_bytes` (least recently used
dropped first); an entry that another one extends is dropped as redundant.

Correctness: a stored entry is never written to again. The cache handed to generate() is a new DynamicCache built
from slices of the entry (its first update concatenates, making new tensors), so a generation that is cancelled
mid-forward, or constrained by a grammar (whose logits processor sees the whole sequence either way), leaves the
entry as it was. Every layer is kept whole (no sliding-window trimming), so any prefix can be cut from an entry;
sliding-window attention still applies through the attention mask. Keys are token ids only, so prompts with images
(whose image tokens' KV depend on the pixels, not the ids) are not cached by the backend.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any


@dataclass
class _CachedPrefix:
    ids: list[int]
    layers: list[tuple[Any, Any]]  # per layer (keys, values), [batch, heads, tokens, head_dim]
    nbytes: int


def common_prefix(a: list[int], b: list[int]) -> int:
    """The number of leading ids `a` and `b` share."""
    n = min(len(a), len(b))
    i = 0
    step = 256
    while i + step <= n and a[i : i + step] == b[i : i + step]:  # whole slices compare in C
        i += step
    while i < n and a[i] == b[i]:
        i += 1
    return i


class PrefixCache:
    """KV caches of earlier token sequences; `lookup(ids)` resumes from the longest stored prefix of `ids`.

    Args:
        max_bytes: memory the stored tensors may take (0: nothing is stored, every lookup misses).
        min_tokens: shorter common prefixes are not worth resuming from (a miss).

    Example:
        cache = PrefixCache(256 << 20)
        kv, n = cache.lookup(prompt_ids)          # None, 0 on a miss
        out = model.generate(ids, past_key_values=kv or cache.empty())
        cache.store(out[0, :kv_len].tolist(), the_cache_generate_filled)
    """

    def __init__(self, max_bytes: int, min_tokens: int = 8):
        self.max_bytes = max(0, int(max_bytes))
        self.min_tokens = min_tokens
        self.hits = 0
        self.misses = 0
        self.reused_tokens = 0
        self._entries: OrderedDict[int, _CachedPrefix] = OrderedDict()
        self._next = 0
        self._lock = threading.Lock()

    @property
    def nbytes(self) -> int:
        return sum(e.nbytes for e in self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)

    @staticmethod
    def empty() -> Any:
        """A cache that keeps every layer whole (what `store` can cut prefixes from)."""
        from transformers import DynamicCache

        return DynamicCache()

    def lookup(self, ids: list[int]) -> tuple[Any | None, int]:
        """(a DynamicCache holding the longest stored prefix of `ids`, its length), or (None, 0). At least one id
        is always left to compute (generation needs the last prompt token's logits)."""
        from transformers import DynamicCache

        with self._lock:
            best, best_n = None, 0
            for key, entry in self._entries.items():
                n = min(common_prefix(entry.ids, ids), len(ids) - 1)
                if n > best_n:
                    best, best_n = key, n
            if best is None or best_n < self.min_tokens:
                self.misses += 1
                return None, 0
            self._entries.move_to_end(best)
            layers = self._entries[best].layers
            self.hits += 1
            self.reused_tokens += best_n
        return DynamicCache([(k[:, :, :best_n], v[:, :, :best_n]) for k, v in layers]), best_n

    def store(self, ids: list[int], cache: Any) -> None:
        """Keep `cache` (a DynamicCache of exactly the tokens `ids`) for later lookups."""
        if self.max_bytes <= 0 or not ids:
            return
        layers = [(layer.keys, layer.values) for layer in cache.layers]
        if not layers or any(k is None or k.dim() != 4 or k.shape[2] != len(ids) for k, _ in layers):
            return  # not a whole-layer cache of these ids (e.g. a sliding-window layer): nothing to reuse safely
        nbytes = sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in layers)
        if nbytes > self.max_bytes:
            return
        with self._lock:
            for key in [k for k, e in self._entries.items() if common_prefix(e.ids, ids) == len(e.ids)]:
                del self._entries[key]  # extended by the new entry: every lookup it served, the new one serves
            self._entries[self._next] = _CachedPrefix(list(ids), layers, nbytes)
            self._next += 1
            while self.nbytes > self.max_bytes:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


__all__ = ["PrefixCache", "common_prefix"]
