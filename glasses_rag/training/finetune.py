"""LoRA fine-tuning on an export of glasses_rag.training.export: TRL's SFTTrainer with a peft LoRA adapter, loss on the
completions only (the decisions), written as an adapter folder with a card.

    python -m glasses_rag.training.finetune --data sft.jsonl --model <folder | file.gguf> --out adapters/gemma-distill
    accelerate launch -m glasses_rag.training.finetune --data sft.jsonl --model <VLM folder> --out adapters/vlm
        --dtype bfloat16

The same command trains Gemma 3 270M on a CPU and a vision-language model on GPUs (a dataset with an `images`
column is a vision dataset: the model loads with its processor; `accelerate launch` spreads it over the GPUs).
The adapter folder holds peft's `adapter_config.json` and weights, the tokenizer with the chat template trained
with, and `card.json` + `README.md`: the data (file, SHA-256, examples), the base model, the hyperparameters, the
steps, the loss curve and the seconds. Checkpoints go to `<out>/checkpoints/`; running the same command again
resumes from the last one. Ctrl-C stops after the current step with a checkpoint written (a second Ctrl-C stops
at once); the adapter and card are written only by a run that finished.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from glasses_rag.core.files import write_atomic
from glasses_rag.training.templates import chat_template_for, set_chat_template


class FinetuneConfig(BaseModel):
    """Everything a fine-tuning run depends on (written to the card). Defaults: the usual LoRA SFT settings
    (TRL's and peft's documented examples: r 16, alpha 32, dropout 0.05, all linear layers, learning rate 2e-4),
    not tuned on any evaluation."""

    data: str = Field(description="A JSONL export of glasses_rag.training.export (prompt-completion or messages).")
    model: str = Field(description="The base model: a local Hugging Face folder or a .gguf file (converted once).")
    out: str = Field(description="The adapter folder to write.")
    chat_template: str | None = Field(
        None,
        description="A bundled name, .jinja file or text (default: the model's own, else its family's bundled one).",
    )
    lora_r: int = Field(16, ge=1)
    lora_alpha: int = Field(32, ge=1)
    lora_dropout: float = Field(0.05, ge=0, lt=1)
    target_modules: str = Field("all-linear", description="peft target_modules ('all-linear' or comma-separated).")
    learning_rate: float = Field(2e-4, gt=0)
    epochs: float = Field(2.0, gt=0)
    max_steps: int = Field(-1, description="Optimizer steps (-1: from the epochs).")
    batch_size: int = Field(1, ge=1)
    grad_accum: int = Field(2, ge=1)
    max_length: int = Field(
        4096,
        ge=64,
        description="Longer examples are left out (counted in the card), never "
        "cut: a cut example would lose its completion.",
    )
    loss: str = Field(
        "completion",
        description="completion: loss on the completions (prompt-completion data); "
        "assistant: loss on the assistant turns ({% generation %} markers; messages data).",
    )
    save_steps: int = Field(20, ge=1)
    gradient_checkpointing: bool | None = Field(
        None,
        description="Recompute activations in the backward pass "
        "(default: on a GPU only; a small model on a CPU has the memory).",
    )
    seed: int = 0
    dtype: str = Field("auto", description="float32 on a CPU (auto), bfloat16 on a GPU (auto), or named.")
    threads: int | None = Field(None, ge=1, description="CPU threads for torch (default: torch's).")


# ---- the workarounds --------------------------------------------------------------------------------------------


def fix_backbone_prefix(model: Any) -> None:
    """Gemma3ForCausalLM (transformers 4.57) declares `base_model_prefix = "language_model"` but keeps its backbone
    in `.model`, so `model.base_model` is the whole model, and TRL's fused LM head (which calls `base_model` for the
    hidden states) fails. A model whose prefix names no attribute while it has a `.model` backbone gets that
    prefix on the instance; other models are left alone."""
    prefix = getattr(model, "base_model_prefix", "")
    if prefix and not hasattr(model, prefix) and hasattr(model, "model"):
        model.base_model_prefix = "model"


def score_labelled_tokens_only() -> None:
    """TRL 1.16's fused LM head scores only the labelled positions (the completion) on CUDA and XPU; elsewhere it
    scores every position through the whole vocabulary (fixed tile shapes for compiled backends such as Neuron).
    On a CPU, with Gemma's 262k-token vocabulary and a completion-only loss, that is most of a step's time for
    nothing: there, only the labelled positions are scored too (the loss is the same)."""
    import trl.trainer.utils as trl_utils

    original = trl_utils._use_triton
    if getattr(original, "labelled_only", False):
        return

    def compact(device: Any) -> bool:
        return device.type == "cpu" or original(device)

    compact.labelled_only = True  # type: ignore[attr-defined]
    trl_utils._use_triton = compact


# ---- loading -----------------------------------------------------------------------------------------------------


def model_folder(path: str) -> Path:
    p = Path(path).expanduser()
    if p.is_file() and p.suffix.lower() == ".gguf":
        from glasses_rag.models.vlm.gguf_folder import converted_gguf

        return converted_gguf(p)
    if not p.is_dir():
        raise FileNotFoundError(f"model not found: {p} (a local folder or a .gguf file; nothing is downloaded)")
    return p


def load_examples(path: str, max_length: int, processing: Any) -> tuple[Any, int]:
    """The export as a datasets.Dataset with TRL's columns only, less the examples longer than `max_length`
    tokens (returned as a count)."""
    import datasets

    ds = datasets.load_dataset("json", data_files=str(path), split="train")
    keep = [c for c in ("prompt", "completion", "messages", "images", "tools") if c in ds.column_names]
    ds = ds.select_columns(keep)
    if "images" in keep:
        ds = ds.cast_column("images", datasets.Sequence(datasets.Image()))
    tok = getattr(processing, "tokenizer", processing)

    def length(ex: dict) -> int:
        msgs = ex["messages"] if "messages" in ex else [*ex["prompt"], *ex["completion"]]
        text = tok.apply_chat_template(msgs, tokenize=False, chat_template=tok.chat_template)
        return len(tok(text, add_special_tokens=False)["input_ids"])

    before = len(ds)
    ds = ds.filter(lambda ex: length(ex) <= max_length)
    return ds, before - len(ds)


def load_model(folder: Path, vision: bool, dtype: str) -> tuple[Any, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText, AutoProcessor, AutoTokenizer

    from glasses_rag.models.vlm.transformers_local import tokenizer_options

    gpu = torch.cuda.is_available()
    torch_dtype = (torch.bfloat16 if gpu else torch.float32) if dtype == "auto" else getattr(torch, dtype)
    kw: dict[str, Any] = {"local_files_only": True}
    config = json.loads((folder / "config.json").read_text())
    tok_kw = {**kw, **tokenizer_options(config.get("model_type", ""))}
    if vision:
        processing = AutoProcessor.from_pretrained(folder, **tok_kw)
        model = AutoModelForImageTextToText.from_pretrained(folder, dtype=torch_dtype, **kw)
    else:
        processing = AutoTokenizer.from_pretrained(folder, **tok_kw)
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch_dtype, **kw)
    fix_backbone_prefix(model)
    score_labelled_tokens_only()
    return model, processing


# ---- Ctrl-C ----------------------------------------------------------------------------------------------------------


def stop_callback() -> Any:
    """A TrainerCallback that turns the first Ctrl-C into 'save a checkpoint after this step and stop'."""
    from transformers import TrainerCallback

    class StopOnInterrupt(TrainerCallback):
        def __init__(self) -> None:
            self.asked = False
            signal.signal(signal.SIGINT, self._on_sigint)

        def _on_sigint(self, _sig: int, _frame: Any) -> None:
            if self.asked:
                raise KeyboardInterrupt
            self.asked = True
            print("\nstopping after this step (a checkpoint is written; Ctrl-C again to stop now)", file=sys.stderr)

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            if self.asked:
                control.should_save = True
                control.should_training_stop = True
            return control

    return StopOnInterrupt()


# ---- training ----------------------------------------------------------------------------------------------------


def trainer_for(cfg: FinetuneConfig, model: Any, processing: Any, ds: Any) -> Any:
    from peft import LoraConfig
    from trl import SFTConfig, SFTTrainer

    targets: Any = cfg.target_modules if cfg.target_modules == "all-linear" else cfg.target_modules.split(",")
    lora = LoraConfig(
        r=cfg.lora_r,
        lora_alpha=cfg.lora_alpha,
        lora_dropout=cfg.lora_dropout,
        target_modules=targets,
        task_type="CAUSAL_LM",
    )
    args = SFTConfig(
        output_dir=str(Path(cfg.out) / "checkpoints"),
        learning_rate=cfg.learning_rate,
        num_train_epochs=cfg.epochs,
        max_steps=cfg.max_steps,
        per_device_train_batch_size=cfg.batch_size,
        gradient_accumulation_steps=cfg.grad_accum,
        max_length=None,
        seed=cfg.seed,
        logging_steps=1,
        save_steps=cfg.save_steps,
        save_total_limit=2,
        report_to="none",
        lr_scheduler_type="linear",
        warmup_ratio=0.05,
        completion_only_loss=cfg.loss == "completion" if "prompt" in ds.column_names else None,
        assistant_only_loss=cfg.loss == "assistant",
        dataloader_num_workers=0,
        dataset_num_proc=None,
        bf16=str(model.dtype) == "torch.bfloat16",
        use_cpu=not _gpu(),
        gradient_checkpointing=_gpu() if cfg.gradient_checkpointing is None else cfg.gradient_checkpointing,
    )
    return SFTTrainer(
        model=model,
        args=args,
        train_dataset=ds,
        processing_class=processing,
        peft_config=lora,
        callbacks=[stop_callback()],
    )


def _gpu() -> bool:
    import torch

    return torch.cuda.is_available()


def last_checkpoint(out: Path) -> str | None:
    from transformers.trainer_utils import get_last_checkpoint

    folder = out / "checkpoints"
    return get_last_checkpoint(str(folder)) if folder.is_dir() else None


def finetune(cfg: FinetuneConfig) -> dict[str, Any]:
    """Train, write the adapter and its card; returns the card (`finished` False when Ctrl-C stopped it).

    Example:
        finetune(FinetuneConfig(data="sft.jsonl", model="gemma.gguf", out="adapters/g", max_steps=2))
    """
    import torch

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    t0, c0 = time.perf_counter(), time.process_time()
    folder = model_folder(cfg.model)
    vision = _has_images(cfg.data)
    model, processing = load_model(folder, vision, cfg.dtype)
    config_type = getattr(getattr(model, "config", None), "model_type", "")
    template = chat_template_for(getattr(processing, "tokenizer", processing), config_type, cfg.chat_template)
    set_chat_template(processing, template)
    ds, too_long = load_examples(cfg.data, cfg.max_length, processing)
    if len(ds) == 0:
        raise ValueError(f"{cfg.data}: no example fits max_length={cfg.max_length} (or the file is empty)")
    previous = signal.getsignal(signal.SIGINT)
    try:
        trainer = trainer_for(cfg, model, processing, ds)  # its callback takes Ctrl-C for the training only
        resumed = last_checkpoint(Path(cfg.out))
        result = trainer.train(resume_from_checkpoint=resumed)
    finally:
        signal.signal(signal.SIGINT, previous)  # e.g. benchmarks.distill's evaluations after it: Ctrl-C stops them
    finished = trainer.state.global_step >= trainer.state.max_steps
    card = make_card(
        cfg,
        trainer,
        folder,
        len(ds),
        too_long,
        resumed,
        finished,
        time.perf_counter() - t0,
        time.process_time() - c0,
        result.training_loss,
    )
    if finished:
        trainer.save_model(cfg.out)
        processing.save_pretrained(cfg.out)
        write_card(Path(cfg.out), card)
    return card


def _has_images(path: str) -> bool:
    with open(path, encoding="utf-8") as f:
        first = f.readline()
    return bool(first.strip()) and bool(json.loads(first).get("images"))


def make_card(
    cfg: FinetuneConfig,
    trainer: Any,
    folder: Path,
    n: int,
    too_long: int,
    resumed: str | None,
    finished: bool,
    seconds: float,
    cpu_seconds: float,
    loss: float,
) -> dict[str, Any]:
    import peft
    import transformers
    import trl

    from glasses_rag.models.vlm.gguf_folder import file_sha256

    curve = [{"step": h["step"], "loss": round(h["loss"], 4)} for h in trainer.state.log_history if "loss" in h]
    return {
        "base_model": str(folder),
        "data": {"file": cfg.data, "sha256": file_sha256(Path(cfg.data)), "examples": n, "left_out_too_long": too_long},
        "hyperparameters": cfg.model_dump(exclude={"data", "model", "out"}),
        "steps": trainer.state.global_step,
        "max_steps": trainer.state.max_steps,
        "finished": finished,
        "resumed_from": resumed,
        "train_loss": round(float(loss), 4),
        "loss_curve": curve,
        "seconds": round(seconds, 1),
        "cpu_seconds": round(cpu_seconds, 1),
        "device": "cuda" if _gpu() else "cpu",
        "cpu_count": os.cpu_count(),
        "versions": {"trl": trl.__version__, "peft": peft.__version__, "transformers": transformers.__version__},
    }


def write_card(out: Path, card: dict[str, Any]) -> None:
    write_atomic(out / "card.json", json.dumps(card, indent=1) + "\n")
    curve = ", ".join(f"{p['step']}: {p['loss']}" for p in card["loss_curve"])
    hp = card["hyperparameters"]
    text = (
        f"# LoRA adapter\n\nBase model: `{card['base_model']}`\n\n"
        f"Data: `{card['data']['file']}` (sha256 {card['data']['sha256'][:16]}, {card['data']['examples']} "
        f"examples, {card['data']['left_out_too_long']} left out as longer than {hp['max_length']} tokens)\n\n"
        f"Trained with `python -m glasses_rag.training.finetune` (TRL SFTTrainer + peft LoRA, loss on the "
        f"{hp['loss']}s): "
        f"r {hp['lora_r']}, alpha {hp['lora_alpha']}, dropout {hp['lora_dropout']}, targets {hp['target_modules']}, "
        f"learning rate {hp['learning_rate']}, batch {hp['batch_size']} x {hp['grad_accum']} accumulation, "
        f"{card['steps']} steps, seed {hp['seed']}, on {card['device']}: {card['seconds']} s "
        f"({card['cpu_seconds']} s CPU).\n\nLoss by step: {curve}\n"
    )
    write_atomic(out / "README.md", text)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m glasses_rag.training.finetune", description=__doc__.split("\n\n")[0])
    for name, field in FinetuneConfig.model_fields.items():
        flag = "--" + name.replace("_", "-")
        help_text = (field.description or f"default {field.default}").replace("%", "%%")
        if field.annotation in (bool, bool | None):
            p.add_argument(flag, action=argparse.BooleanOptionalAction, default=None, help=help_text)
            continue
        kind: Any = {int: int, float: float}.get(field.annotation, str)  # type: ignore[arg-type]
        p.add_argument(flag, type=kind, required=field.is_required(), default=None, help=help_text)
    return p


def main(argv: list[str] | None = None) -> int:
    args = vars(parser().parse_args(argv))
    cfg = FinetuneConfig.model_validate({k: v for k, v in args.items() if v is not None})
    card = finetune(cfg)
    where = cfg.out if card["finished"] else f"{cfg.out}/checkpoints (stopped; run again to resume)"
    print(
        f"{card['steps']} steps on {card['data']['examples']} examples, loss {card['train_loss']}, "
        f"{card['seconds']} s -> {where}"
    )
    return 0 if card["finished"] else 130


if __name__ == "__main__":
    sys.exit(main())
