"""The same fine-tune on several processes, on an existing engine: torchrun starts two CPU processes (gloo) that
train with DDP, rank 0 alone writes, and the adapter is the one-process run's with the same global batch. The
accelerate configurations shipped for GPUs (DDP, DeepSpeed ZeRO-2 and ZeRO-3, FSDP) load with accelerate's own
loader and name only options its launcher knows. QLoRA is refused clearly on a CPU."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from test_training_export import _run

pytest.importorskip("trl")
pytest.importorskip("peft")

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def same_examples(tmp_path_factory):
    """Four copies of one decision example: every order of them is the same data, so a run on two processes
    (each its half of every batch) and a run on one (the whole batch) must end with the same adapter."""
    from glasses_rag.training.export import main

    tmp = tmp_path_factory.mktemp("ddp-data")
    run, _ = _run(tmp, ["SpaceX"], ["correct"])
    assert main(["--run", str(run), "--out", str(tmp / "all.jsonl")]) == 0
    line = (tmp / "all.jsonl").read_text().splitlines()[-1]
    (tmp / "sft.jsonl").write_text((line + "\n") * 4)
    return tmp / "sft.jsonl"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from glasses_rag.testing.tiny_models import save_tiny_gemma3

    return save_tiny_gemma3(tmp_path_factory.mktemp("tiny") / "gemma3")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _finetune_args(data: Path, model: Path, out: Path, batch: int) -> list[str]:
    return [
        "-m",
        "glasses_rag.training.finetune",
        *("--data", str(data), "--model", str(model), "--out", str(out), "--chat-template", "gemma"),
        *("--max-steps", "2", "--batch-size", str(batch), "--grad-accum", "1", "--threads", "1"),
        # SGD: an update proportional to the gradient (Adam's first steps are its sign, which turns the last-bit
        # differences of a gradient summed in another order into whole steps where it is near zero)
        *("--optim", "sgd", "--learning-rate", "0.5", "--lora-dropout", "0", "--max-length", "8192"),
    ]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


def _adapter(folder: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(folder / "adapter_model.safetensors"))


def test_two_processes_train_the_adapter_one_process_trains(same_examples, tiny, tmp_path):
    import torch

    port = _free_port()
    two = tmp_path / "two"
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2"]
    torchrun += ["--master_addr", "127.0.0.1", "--master_port", str(port)]
    done = subprocess.run(
        [*torchrun, *_finetune_args(same_examples, tiny, two, batch=1)],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("steps on 4 examples") == 1  # one line for the run: rank 0's
    card = json.loads((two / "card.json").read_text())
    assert card["processes"] == 2 and card["steps"] == 2 and card["finished"]
    one = tmp_path / "one"
    single = subprocess.run(
        [sys.executable, *_finetune_args(same_examples, tiny, one, batch=2)],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert single.returncode == 0, single.stderr[-3000:]
    a, b = _adapter(two), _adapter(one)
    assert a.keys() == b.keys() and a
    moved = max(float(t.abs().max()) for k, t in b.items() if "lora_B" in k)
    assert moved > 1e-4  # the adapter trained (LoRA's B starts at zero)
    for k in a:
        assert torch.allclose(a[k], b[k], atol=1e-5, rtol=1e-4), k


def test_only_rank_zero_writes_the_processor_and_the_card(tmp_path):
    from glasses_rag.training.finetune import save_outputs

    class Trainer:
        def __init__(self, zero: bool):
            self.zero, self.saved = zero, []

        def save_model(self, out: str) -> None:
            self.saved.append(out)

        def is_world_process_zero(self) -> bool:
            return self.zero

    class Tokenizer:
        def save_pretrained(self, out: str) -> None:
            (Path(out) / "tokenizer.json").write_text("{}")

    card = {"loss_curve": [], "hyperparameters": {}, "data": {}}
    for rank, zero in ((1, False), (0, True)):
        out = tmp_path / f"rank{rank}"
        out.mkdir()
        trainer = Trainer(zero)
        if zero:
            card = _card()
        save_outputs(trainer, Tokenizer(), out, tmp_path, card)
        assert trainer.saved == [str(out)]  # every rank enters the Trainer's save (it gathers, then rank 0 writes)
        assert sorted(p.name for p in out.iterdir()) == (["README.md", "card.json", "tokenizer.json"] if zero else [])


def _card() -> dict:
    hp = {"max_length": 64, "loss": "completion", "lora_r": 1, "lora_alpha": 1, "lora_dropout": 0.0}
    hp |= {"target_modules": "language-model", "learning_rate": 1.0, "batch_size": 1, "grad_accum": 1, "seed": 0}
    return {
        "base_model": "m",
        "data": {"file": "d", "sha256": "0" * 64, "examples": 1, "left_out_too_long": 0},
        "hyperparameters": hp,
        "steps": 1,
        "device": "cpu",
        "seconds": 1.0,
        "cpu_seconds": 1.0,
        "loss_curve": [],
    }


@pytest.mark.parametrize("name", ["multi_gpu", "deepspeed_zero2", "deepspeed_zero3", "fsdp"])
def test_the_shipped_accelerate_configurations_load_with_accelerate(name):
    from accelerate.commands.config.config_args import ClusterConfig, load_config_from_file
    from accelerate.commands.launch import launch_command_parser
    from accelerate.utils import DistributedType

    from glasses_rag.training.accelerate_configs import config_path

    cfg = load_config_from_file(str(config_path(name)))
    assert isinstance(cfg, ClusterConfig) and cfg.num_processes == 8 and cfg.mixed_precision == "bf16"
    kind = {"multi_gpu": "MULTI_GPU", "fsdp": "FSDP"}.get(name, "DEEPSPEED")
    assert cfg.distributed_type == DistributedType[kind]
    launch = vars(launch_command_parser().parse_args(["x.py"]))
    nested = {**(cfg.deepspeed_config or {}), **(cfg.fsdp_config or {})}
    assert not [k for k in nested if k not in launch]  # every option is one accelerate launch knows
    if name.startswith("deepspeed"):
        assert cfg.deepspeed_config["zero_stage"] == int(name[-1])


def test_qlora_is_refused_clearly_on_a_cpu(tmp_path):
    import torch

    from glasses_rag.training.finetune import FinetuneConfig, finetune

    if torch.cuda.is_available():
        pytest.skip("a CUDA machine runs QLoRA")
    cfg = FinetuneConfig(data=str(tmp_path / "none.jsonl"), model=str(tmp_path), out=str(tmp_path / "a"), qlora=True)
    with pytest.raises(ValueError, match="--qlora needs a CUDA GPU"):
        finetune(cfg)
