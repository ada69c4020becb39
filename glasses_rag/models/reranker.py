"""Rerankers for retrieved evidence, plus the CRUISE-style dynamic threshold.

* `CrossEncoderReranker(path)`   - a local cross-encoder folder (AutoModelForSequenceClassification);
  name "cross-encoder:<folder>".
* `EmbeddingReranker(embedder)`  - fallback: cosine similarity of MiniLM sentence embeddings;
  name "heuristic:minilm-embedding".

Both share `.score(query, texts) -> np.ndarray[float32]` of len(texts), higher = more relevant. Scores are
comparable only within one reranker.

`dynamic_threshold(scores, lam, top)` = median - lam * MAD (over the `top` best scores when given, as CRUISE's
eq. 5 takes them over the top 10), and `filter_by_threshold(items, scores, lam, min_keep, top)` keeps the items at
or above it, best first. `reranker_device` says where a reranker runs (the configured device, else the model
backend's).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar, runtime_checkable

import numpy as np

log = logging.getLogger(__name__)

EMBEDDING_METHOD = "heuristic:minilm-embedding"

T = TypeVar("T")

__all__ = [
    "Reranker",
    "CrossEncoderReranker",
    "EmbeddingReranker",
    "dynamic_threshold",
    "filter_by_threshold",
    "make_reranker",
    "reranker_device",
    "EMBEDDING_METHOD",
]


@runtime_checkable
class Reranker(Protocol):
    name: str

    def score(self, query: str, texts: list[str]) -> np.ndarray: ...


class CrossEncoderReranker:
    """A cross-encoder (query, passage) -> relevance in [0, 1], from a local transformers folder.

    One logit: sigmoid. Two labels: softmax probability of the positive class (label id 1, or the
    label named like "entail"/"relevant"/"positive"/"yes" if config.label2id says so). More labels:
    softmax of the last class.
    """

    def __init__(self, path: str | Path, device: str = "cpu", max_length: int = 512, batch_size: int = 32):
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        from glasses_rag.models.threads import set_torch_threads

        set_torch_threads()  # one thread per call unless configured otherwise (glasses_rag.models.resources)

        self.path = Path(path)
        self.name = f"cross-encoder:{self.path.name}"
        self.calibrated = True  # relevance probabilities in [0, 1]: a fixed score floor means the same everywhere
        self.device = device
        self.max_length = max_length
        self.batch_size = batch_size
        self._torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(str(self.path), local_files_only=True)
        self.model = (
            AutoModelForSequenceClassification.from_pretrained(str(self.path), local_files_only=True).to(device).eval()
        )
        self.num_labels = int(self.model.config.num_labels)
        self.positive_index = self._positive_index()
        tok_max = getattr(self.tokenizer, "model_max_length", None) or max_length
        pos_max = getattr(self.model.config, "max_position_embeddings", None) or max_length
        self.max_length = int(min(max_length, tok_max, pos_max))
        self._lock = threading.Lock()

    def _positive_index(self) -> int:
        if self.num_labels <= 1:
            return 0
        label2id = {str(k).lower(): int(v) for k, v in (getattr(self.model.config, "label2id", None) or {}).items()}
        for key in ("relevant", "positive", "entailment", "entail", "yes", "true"):
            if key in label2id:
                return label2id[key]
        return 1 if self.num_labels == 2 else self.num_labels - 1

    def __repr__(self) -> str:
        return f"CrossEncoderReranker({self.name!r})"

    def score(self, query: str, texts: list[str]) -> np.ndarray:
        torch = self._torch
        if not texts:
            return np.zeros(0, dtype=np.float32)
        out: list[np.ndarray] = []
        for i in range(0, len(texts), self.batch_size):
            batch = [str(t) for t in texts[i : i + self.batch_size]]
            with self._lock, torch.inference_mode():
                enc = self.tokenizer(
                    [str(query)] * len(batch),
                    batch,
                    padding=True,
                    truncation="longest_first",
                    max_length=self.max_length,
                    return_tensors="pt",
                )
                enc = {k: v.to(self.device) for k, v in enc.items()}
                logits = self.model(**enc).logits.float()
                if logits.shape[-1] == 1:
                    s = torch.sigmoid(logits[:, 0])
                else:
                    s = torch.softmax(logits, dim=-1)[:, self.positive_index]
            out.append(s.cpu().numpy().astype(np.float32))
        return np.concatenate(out)


class EmbeddingReranker:
    """Fallback reranker: cosine similarity from a `glasses_rag.models.text_embedder.TextEmbedder` (MiniLM)."""

    name = EMBEDDING_METHOD
    calibrated = False  # cosine similarities: a fixed floor set for a cross-encoder's scale does not carry over

    def __init__(self, text_embedder: Any):
        self.text_embedder = text_embedder

    def __repr__(self) -> str:
        return f"EmbeddingReranker({self.name!r})"

    def score(self, query: str, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros(0, dtype=np.float32)
        return np.asarray(self.text_embedder.similarity(str(query), [str(t) for t in texts]), dtype=np.float32)


def dynamic_threshold(scores: Sequence[float] | np.ndarray, lam: float = 1.0, top: int | None = None) -> float:
    """median(S) - lam * MAD(S), MAD = median(|s - median|) (unscaled), S the `top` best scores (all by default).

    The CRUISE (CRAG-MM) adaptive cut (UNSW report §3.2 eq. 5 takes S = the top 10): it keeps everything but the
    clear low outliers and adapts to each query's score distribution. -inf for no scores (keeps everything). One or
    two scores are a distribution too: their cut is at or below the lowest for lam >= 1, above it for lam < 1.
    """
    s = np.asarray(scores, dtype=np.float64).ravel()
    s = s[np.isfinite(s)]
    if s.size == 0:
        return float("-inf")
    if top is not None:
        s = np.sort(s)[::-1][: max(1, top)]
    med = float(np.median(s))
    mad = float(np.median(np.abs(s - med)))
    return med - float(lam) * mad


def filter_by_threshold(
    items: Sequence[T],
    scores: Sequence[float] | np.ndarray,
    lam: float = 1.0,
    min_keep: int = 1,
    top: int | None = None,
) -> list[tuple[T, float]]:
    """Items with score >= dynamic_threshold(scores, lam, top), as (item, score), best first.

    At least `min_keep` items (the best ones) are kept when there are that many. Ties keep input order.
    """
    s = np.asarray(scores, dtype=np.float64).ravel()
    if len(items) != s.size:
        raise ValueError(f"{len(items)} items but {s.size} scores")
    if s.size == 0:
        return []
    s = np.where(np.isfinite(s), s, -np.inf)
    t = dynamic_threshold(s, lam, top)
    order = sorted(range(s.size), key=lambda i: -s[i])  # stable: ties keep input order
    kept = [i for i in order if s[i] >= t]
    if len(kept) < min_keep:
        kept = order[: min(min_keep, s.size)]
    return [(items[i], float(s[i])) for i in kept]


def reranker_device(configured: str | None, model: Any = None) -> tuple[str, str]:
    """(device, why) for the reranker: `configured` (--reranker-device, or a preset's `device:`); else the model
    backend's device when the model runs in this process (transformers: its `device`; llama.cpp: cuda when it
    offloads layers); else (a served model, or none) cuda when torch sees a GPU, else cpu.

    Example: `reranker_device(None, parse_spec("transformers:/m").model_copy(update={"device": "cuda:1"}))`
    -> ("cuda:1", "the model backend's device")."""
    if configured:
        return configured, "configured"
    backend = getattr(model, "backend", None)
    if backend == "transformers":
        return str(getattr(model, "device", "cpu") or "cpu"), "the model backend's device"
    if backend == "llamacpp":
        gpu = getattr(model, "n_gpu_layers", 0) != 0
        return ("cuda" if gpu else "cpu"), "the model backend's device"
    try:
        import torch

        gpu = bool(torch.cuda.is_available())
    except ImportError:  # pragma: no cover - torch is a dependency
        gpu = False
    where = "a served model" if backend else "no model"
    return ("cuda" if gpu else "cpu"), f"{where}: {'a GPU is' if gpu else 'no GPU'} visible"


def make_reranker(path: str | Path | None, text_embedder: Any = None, device: str = "cpu") -> Reranker | None:
    """The reranker for a local folder (jina-reranker-m0 for a Qwen2-VL folder, else a cross-encoder); else the
    MiniLM embedding fallback; None if neither."""
    if path:
        p = Path(path)
        if p.exists():
            try:
                from glasses_rag.models.mm_reranker import JinaM0Reranker, is_jina_m0

                if is_jina_m0(p):  # a Qwen2-VL folder: the multimodal reranker (scores text against the image too)
                    return JinaM0Reranker(p, device=device)
                return CrossEncoderReranker(p, device=device)
            except Exception as e:
                log.warning("could not load cross-encoder from %s (%s: %s); using embeddings", p, type(e).__name__, e)
        else:
            log.warning("reranker folder %s does not exist; using embeddings", p)
    if text_embedder is not None:
        return EmbeddingReranker(text_embedder)
    return None
