"""A LoRA adapter folder checked before peft reads it: its `adapter_config.json` read bounded, its ranks within
what the model can hold (peft allocates `r` x width for every adapted layer before it reads a weight: `r:
100000000` asked for 25.6 GB), and its weights in safetensors (a pickle-only folder, `adapter_model.bin`, is
refused with one line rather than a raw UnpicklingError from torch.load's weights-only guard).

    check_adapter(Path("adapters/tuned"), model)   # ValueError, one line, naming the folder and what is wrong
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from glasses_rag.core.files import read_text_bounded

CONFIG = "adapter_config.json"
WEIGHTS = "adapter_model.safetensors"
MAX_CONFIG_BYTES = 1 << 20  # peft's adapter_config.json is a few KB


def read_adapter_config(adapter: Path) -> dict[str, Any]:
    """The folder's adapter_config.json; FileNotFoundError without one, ValueError when it is not a JSON object."""
    path = Path(adapter) / CONFIG
    if not path.is_file():
        raise FileNotFoundError(f"LoRA adapter folder not found (no {CONFIG}): {adapter}")
    try:
        cfg = json.loads(read_text_bounded(path, MAX_CONFIG_BYTES))
    except (OSError, ValueError, RecursionError) as e:
        raise ValueError(f"the adapter {adapter}: {CONFIG} cannot be read ({type(e).__name__}: {e})") from None
    if not isinstance(cfg, dict):
        raise ValueError(f"the adapter {adapter}: {CONFIG} is not a JSON object")
    return cfg


def widest_rank(model: Any) -> int:
    """The largest rank a LoRA update of `model` can have: the largest min(in, out) of its linear layers (a rank
    above a layer's smaller side adds parameters, never expressiveness)."""
    import torch.nn as nn

    sides = [min(m.in_features, m.out_features) for m in model.modules() if isinstance(m, nn.Linear)]
    return max(sides, default=1)


def check_adapter(adapter: Path, model: Any) -> dict[str, Any]:
    """The adapter's configuration when peft may load it into `model` (see the module docstring); ValueError or
    FileNotFoundError, one line, otherwise."""
    cfg = read_adapter_config(adapter)
    pickles = sorted(p.name for p in Path(adapter).glob("*") if p.suffix in (".bin", ".pt", ".pth", ".pkl"))
    if pickles and not (Path(adapter) / WEIGHTS).is_file():
        raise ValueError(
            f"the adapter {adapter} has no {WEIGHTS} (it has {', '.join(pickles)}: pickles, which are never "
            "loaded): save it with peft's save_pretrained, which writes safetensors"
        )
    bound = widest_rank(model)
    pattern = cfg.get("rank_pattern") or {}
    ranks = [cfg.get("r"), *(pattern.values() if isinstance(pattern, dict) else [pattern])]
    for r in ranks:
        if isinstance(r, bool) or not isinstance(r, int) or not 1 <= r <= bound:
            raise ValueError(
                f"the adapter {adapter}: LoRA rank {r!r} in {CONFIG} is not an integer from 1 to {bound} (the "
                "widest side of this model's layers): not loaded"
            )
    return cfg


__all__ = ["CONFIG", "WEIGHTS", "check_adapter", "read_adapter_config", "widest_rank"]
