"""Shared, lazily loaded models and the search backend for one run.

Every real model is optional and read from a local path; when a path is not given the tool
that needs it falls back to a named heuristic, and the `method` it records says which ran.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from glasses_rag.models.threads import cache_dir, cpu_threads, limit_cpu_threads, set_torch_threads  # noqa: F401 - re-exported


class ModelPaths(BaseModel):
    """Local folders of optional real models (never downloaded at run time)."""

    text_embedder: Path | None = Field(
        None, description="sentence-embedding model folder; default: bundled all-MiniLM-L6-v2"
    )
    detector: Path | None = Field(
        None, description="GroundingDINO / OWLv2 folder for AutoModelForZeroShotObjectDetection"
    )
    clip: Path | None = Field(None, description="CLIP folder for image embeddings of the embedded image index")
    reranker: Path | None = Field(
        None,
        description="cross-encoder folder (AutoModelForSequenceClassification), or a "
        "jina-reranker-m0 folder (Qwen2-VL: scores items against the image too)",
    )
    reranker_device: str | None = Field(
        None,
        description="Device the reranker runs on (cpu, cuda, cuda:1, mps); default: a preset's `device:`, else the "
        "model backend's (an in-process model's device; with a served model or none, cuda when a GPU is visible, "
        "else cpu)",
    )


class Resources:
    """Holds the search backend and loads each model once, on first use, thread-safely."""

    def __init__(self, search: Any, paths: ModelPaths | None = None):
        self.search = search
        self.paths = paths or ModelPaths()
        self._lock = threading.Lock()
        self._key_locks: dict[str, threading.Lock] = {}
        self._cache: dict[str, Any] = {}

    def get(self, key: str, factory):
        """A shared object (embedder, OCR engine, detector, reranker), built once by `factory`."""
        # One lock per key: a factory may itself ask for another model (the reranker needs the
        # embedder), and one slow load must not block every other model.
        if key in self._cache:
            return self._cache[key]
        with self._lock:
            key_lock = self._key_locks.setdefault(key, threading.Lock())
        with key_lock:
            if key not in self._cache:
                self._cache[key] = factory()
            return self._cache[key]

    def text_embedder(self):
        from glasses_rag.models.text_embedder import get_text_embedder

        p = self.paths.text_embedder
        return self.get("text_embedder", lambda: get_text_embedder(str(p) if p else None))

    def warm_up(self) -> None:
        """Load what every run needs up front, so no turn pays for it inside its time budget."""
        self.text_embedder()
        warm = getattr(self.search, "warm_up", None)
        if callable(warm):
            warm()
