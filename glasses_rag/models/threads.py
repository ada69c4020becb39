"""CPU threads per local model call, and the folder for files derived between runs. Kept apart from
`glasses_rag.models.resources` so every model module can use it without importing the resources that load them."""

from __future__ import annotations

import os
import sys
from pathlib import Path

_CPU_THREADS = {"n": 1}


def cache_dir(*parts: str) -> Path:
    """Where derived files are kept between runs (converted models, rebuilt tokenizers): $GLASSES_CACHE_DIR, else
    ~/.cache/glasses-rag."""
    root = Path(os.environ.get("GLASSES_CACHE_DIR") or Path.home() / ".cache" / "glasses-rag")
    return root.joinpath(*parts)


def limit_cpu_threads(n: int = 1) -> None:
    """Threads each local model call may use (BLAS in numpy, torch). One by default: concurrent turns then run side
    by side on the cores instead of each fanning out over all of them and thrashing (on a busy 2-core machine a
    MiniLM query took 131-732 ms with the default threads, 18-24 ms with one)."""
    import numpy  # noqa: F401 - threadpoolctl limits only loaded libraries: load numpy's BLAS first (a fresh
    from threadpoolctl import threadpool_limits  # worker process builds its agent before anything imported numpy)

    _CPU_THREADS["n"] = n
    threadpool_limits(limits=n, user_api="blas")
    if "torch" in sys.modules:
        set_torch_threads()


def cpu_threads() -> int:
    return _CPU_THREADS["n"]


def set_torch_threads() -> None:
    """Apply the limit to torch (called by the models that load torch, so start-up need not import it)."""
    import torch

    if torch.get_num_threads() != _CPU_THREADS["n"]:
        torch.set_num_threads(_CPU_THREADS["n"])
