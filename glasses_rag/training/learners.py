"""What the learners from outcomes share (training/preferences.py: DPO and KTO; training/grpo.py:
GRPO): their configuration, the trainable model (the base with a new LoRA adapter, or an adapter trained further, as
DPO after SFT), TRL's trainer run with resume and Ctrl-C, and the adapter folder with its card.

TRL and peft compute every loss; nothing here does. On a CPU: float32, no gradient checkpointing, LoRA (the TRL
defaults that need a GPU, bf16 and vLLM, are off).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from glasses_rag.core.files import write_atomic


class LearnerConfig(BaseModel):
    """One training run of a learner from outcomes (written to its card). Defaults: TRL's documented settings for
    a LoRA run of the kind (beta 0.1 for DPO and KTO), not tuned on any evaluation; `max_steps` and the learning
    rate are the CPU budget's."""

    model: str = Field(description="The base model: a local Hugging Face folder or a .gguf file (converted once).")
    out: str = Field(description="The adapter folder to write.")
    init_adapter: str | None = Field(
        None,
        description="A LoRA adapter to train further (e.g. the SFT student's; DPO and KTO then use a frozen copy "
        "of it as the reference), else a new adapter on the base model.",
    )
    chat_template: str | None = Field(None, description="A bundled name, .jinja file or text (default: the model's).")
    max_steps: int = Field(24, ge=1)
    learning_rate: float = Field(5e-5, gt=0)
    batch_size: int = Field(2, ge=1)
    grad_accum: int = Field(1, ge=1)
    beta: float = Field(0.1, ge=0, description="DPO/KTO: the reference's weight; GRPO: the KL coefficient (0: none).")
    lora_r: int = Field(16, ge=1)
    lora_alpha: int = Field(32, ge=1)
    lora_dropout: float = Field(0.05, ge=0, lt=1)
    max_length: int = Field(4096, ge=64, description="Longer examples are left out, never cut.")
    save_steps: int = Field(10, ge=1)
    seed: int = 0
    threads: int | None = Field(None, ge=1, description="CPU threads for torch (default: torch's).")


def lora_config(cfg: LearnerConfig) -> Any:
    from peft import LoraConfig

    return LoraConfig(
        r=cfg.lora_r,
        lora_alpha=cfg.lora_alpha,
        lora_dropout=cfg.lora_dropout,
        target_modules="all-linear",
        task_type="CAUSAL_LM",
    )


def trainable_model(cfg: LearnerConfig) -> tuple[Any, Any, Any]:
    """(model, tokenizer with the chat template trained with, peft config or None): the base model of `cfg.model`
    with `cfg.init_adapter` loaded trainable (peft config None), or the bare base model and a new LoRA config."""
    import torch

    from glasses_rag.training.finetune import load_model, model_folder
    from glasses_rag.training.templates import chat_template_for, set_chat_template

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    model, tok = load_model(model_folder(cfg.model), False, "auto")
    set_chat_template(tok, chat_template_for(tok, getattr(model.config, "model_type", ""), cfg.chat_template))
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    if cfg.init_adapter is None:
        return model, tok, lora_config(cfg)
    from peft import PeftModel

    return PeftModel.from_pretrained(model, cfg.init_adapter, is_trainable=True), tok, None


def cpu_args(cfg: LearnerConfig) -> dict[str, Any]:
    """TrainingArguments shared by the learners' TRL configs (CPU-safe: no bf16, no gradient checkpointing)."""
    import torch

    gpu = torch.cuda.is_available()
    return {
        "output_dir": str(Path(cfg.out) / "checkpoints"),
        "learning_rate": cfg.learning_rate,
        "max_steps": cfg.max_steps,
        "per_device_train_batch_size": cfg.batch_size,
        "gradient_accumulation_steps": cfg.grad_accum,
        "seed": cfg.seed,
        "logging_steps": 1,
        "save_steps": cfg.save_steps,
        "save_total_limit": 2,
        "report_to": "none",
        "lr_scheduler_type": "linear",
        "warmup_ratio": 0.05,
        "dataloader_num_workers": 0,
        "bf16": gpu,
        "use_cpu": not gpu,
        "gradient_checkpointing": False,
    }


def lora_state(model: Any) -> dict[str, Any]:
    """A copy of the trainable LoRA weights (what a test compares before and after a step)."""
    return {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" in n and p.requires_grad}


def train_and_save(trainer: Any, cfg: LearnerConfig, kind: str, data: dict[str, Any]) -> dict[str, Any]:
    """Run `trainer` (resuming from `<out>/checkpoints` when a checkpoint is there; the first Ctrl-C stops after
    the step with a checkpoint written), then, when it finished, write the adapter, the tokenizer and the card
    (`card.json`); returns the card (`finished` False when stopped). Build and train the trainer inside
    `finetune.callers_ctrl_c()`, which puts the caller's Ctrl-C handler back afterwards."""
    from glasses_rag.training.finetune import last_checkpoint

    t0, c0 = time.perf_counter(), time.process_time()
    resumed = last_checkpoint(Path(cfg.out))
    result = trainer.train(resume_from_checkpoint=resumed)
    finished = trainer.state.global_step >= trainer.state.max_steps
    card = learner_card(trainer, cfg, kind, data, resumed, finished)
    card.update(
        train_loss=round(float(result.training_loss), 4),
        seconds=round(time.perf_counter() - t0, 1),
        cpu_seconds=round(time.process_time() - c0, 1),
    )
    if finished:
        trainer.save_model(cfg.out)
        trainer.processing_class.save_pretrained(cfg.out)
        write_atomic(Path(cfg.out) / "card.json", json.dumps(card, indent=1) + "\n")
    return card


def learner_card(
    trainer: Any, cfg: LearnerConfig, kind: str, data: dict[str, Any], resumed: str | None, finished: bool
) -> dict[str, Any]:
    import peft
    import transformers
    import trl

    logged = [{k: round(v, 4) for k, v in h.items() if isinstance(v, float)} for h in trainer.state.log_history]
    return {
        "kind": kind,
        "base_model": cfg.model,
        "init_adapter": cfg.init_adapter,
        "data": data,
        "hyperparameters": cfg.model_dump(exclude={"model", "out", "init_adapter"}),
        "steps": trainer.state.global_step,
        "max_steps": trainer.state.max_steps,
        "finished": finished,
        "resumed_from": resumed,
        "log": logged,
        "device": "cpu" if not _gpu() else "cuda",
        "cpu_count": os.cpu_count(),
        "versions": {"trl": trl.__version__, "peft": peft.__version__, "transformers": transformers.__version__},
    }


def _gpu() -> bool:
    import torch

    return torch.cuda.is_available()


__all__ = [
    "LearnerConfig",
    "cpu_args",
    "lora_config",
    "lora_state",
    "train_and_save",
    "trainable_model",
]
