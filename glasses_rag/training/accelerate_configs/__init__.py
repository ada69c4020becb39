"""accelerate configurations for training on several processes, shipped with the package (so a wheel has them):

- `multi_gpu.yaml`: DDP, one process per GPU (8 by default; `--num_processes` overrides).
- `deepspeed_zero2.yaml`, `deepspeed_zero3.yaml`: DeepSpeed ZeRO stage 2 (optimizer states and gradients sharded)
  and 3 (weights too), bfloat16.
- `fsdp.yaml`: PyTorch FSDP 2, sharded per transformer block.

    accelerate launch --config_file $(python -m glasses_rag.training.accelerate_configs deepspeed_zero3) \\
        -m glasses_rag.training.finetune --data sft.jsonl --model <VLM folder> --out adapters/vlm

On CPUs (CI: two processes, gloo) accelerate launch runs one process (its multi-CPU launcher is MPI's); use
`torchrun --nproc_per_node 2 -m glasses_rag.training.finetune ...`, which the fine-tune runs as DDP the same way.
"""

from __future__ import annotations

import sys
from pathlib import Path

FOLDER = Path(__file__).parent
NAMES = ("multi_gpu", "deepspeed_zero2", "deepspeed_zero3", "fsdp")


def config_path(name: str) -> Path:
    """The path of the shipped configuration `name` (one of NAMES)."""
    path = FOLDER / f"{name.removesuffix('.yaml')}.yaml"
    if not path.is_file():
        raise ValueError(f"no accelerate configuration {name!r}: one of {', '.join(NAMES)}")
    return path


def main(argv: list[str] | None = None) -> int:
    """`python -m glasses_rag.training.accelerate_configs [NAME]`: the path of NAME, or every name and path."""
    args = sys.argv[1:] if argv is None else argv
    if args:
        print(config_path(args[0]))
    else:
        for name in NAMES:
            print(f"{name:16} {config_path(name)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
