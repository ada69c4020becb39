"""A LoRA adapter merged into its base model's weights and saved as a plain model folder (with the base's
processor or tokenizer), for a server that cannot apply the adapter itself: vLLM serves no LoRA on Llama 3.2
Vision (0.10.2, its last version with Mllama, has no LoRA for it; later versions dropped Mllama), so an 11B Mllama
student is served merged.

    python -m glasses_rag.training.merge --model <base folder> --adapter adapters/vlm --out models/vlm-merged

The merged model is what the in-process backend evaluates (it merges the same way at load).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def merge(model: str | Path, adapter: str | Path, out: str | Path, dtype: str = "bfloat16") -> Path:
    """Base + adapter merged, saved to `out` with the base's processor (vision) or tokenizer; returns `out`."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText, AutoTokenizer

    from glasses_rag.core.files import write_atomic
    from glasses_rag.core.paths import named_folder, refuse_links
    from glasses_rag.models.vlm.transformers_local import is_vision_config, merged_adapter
    from glasses_rag.models.vlm.vision_inputs import load_processor, save_processor

    refuse_links(named_folder(out, "--out"), what="merged model folder (--out)")  # files are written by name
    base = Path(model)
    vision = is_vision_config(AutoConfig.from_pretrained(base, local_files_only=True))
    loader = AutoModelForImageTextToText if vision else AutoModelForCausalLM
    weights = loader.from_pretrained(base, dtype=getattr(torch, dtype), local_files_only=True)
    merged = merged_adapter(weights, Path(adapter))
    merged.save_pretrained(str(out))
    if vision:
        save_processor(load_processor(base, local_files_only=True), out, base)
    else:
        AutoTokenizer.from_pretrained(base, local_files_only=True).save_pretrained(str(out))
    card = {"base_model": str(base), "adapter": str(adapter), "dtype": dtype}
    write_atomic(Path(out) / "merged_from.json", json.dumps(card, indent=1) + "\n")
    return Path(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m glasses_rag.training.merge", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="the base model folder")
    p.add_argument("--adapter", required=True, help="the LoRA adapter folder (glasses_rag.training.finetune)")
    p.add_argument("--out", required=True, help="the merged model folder to write")
    p.add_argument("--dtype", default="bfloat16", help="bfloat16 (default), float16 or float32")
    args = p.parse_args(argv)
    print(f"merged -> {merge(args.model, args.adapter, args.out, args.dtype)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
