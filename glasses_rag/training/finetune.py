"""LoRA fine-tuning on an export of glasses_rag.training.export: TRL's SFTTrainer with a peft LoRA adapter, loss on the
completions only (the decisions), written as an adapter folder with a card.

    python -m glasses_rag.training.finetune --data sft.jsonl --model <folder | file.gguf> --out adapters/gemma-distill
    accelerate launch -m glasses_rag.training.finetune --data sft.jsonl --model <VLM folder> --out adapters/vlm
        --dtype bfloat16

The same command trains Gemma 3 270M on a CPU and a vision-language model on GPUs (a dataset with a photo in any
example is a vision dataset: the model loads with its processor and its own chat template, and sees each photo as
the export wrote it, which is what inference sends). `accelerate launch` (or torchrun) spreads it over processes
(glasses_rag/training/accelerate/: DDP, DeepSpeed ZeRO-2 / ZeRO-3, FSDP; two CPU processes in CI); rank 0 alone
writes. The LoRA adapter targets the language model's linear layers only (`--target-modules language-model`), the
part vLLM applies LoRA to; `all-linear` also adapts the vision tower (in-process serving only). `--qlora` loads the
base in 4 bits (bitsandbytes, CUDA GPUs only).
The adapter folder holds peft's `adapter_config.json` and weights, the tokenizer with the chat template trained
with, and `card.json` + `README.md`: the data (file, SHA-256, examples), the base model, the hyperparameters, the
steps, the loss curve and the seconds. Checkpoints go to `<out>/checkpoints/`; running the same command again
resumes from the last one. Ctrl-C stops after the current step with a checkpoint written (a second Ctrl-C stops
at once); the adapter and card are written only by a run that finished.

Inputs and outputs are checked first: every line of the data (glasses_rag.training.sft_checks: a bad line, an
empty file, a photo outside the data's folder are one-line errors), and the `--out` folder, which must name a
folder and hold no symbolic link (the adapter's files would be written through it onto the link's target).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from glasses_rag.core.files import write_atomic
from glasses_rag.training.sft_data import has_images, load_examples, read_rows
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
    target_modules: str = Field(
        "language-model",
        description="LoRA targets: 'language-model' (every linear layer of the language model, the part vLLM "
        "serves LoRA on), 'all-linear' (peft's: the vision tower too, for in-process serving only) or "
        "comma-separated module names.",
    )
    qlora: bool = Field(
        False,
        description="QLoRA: the base model in 4-bit NF4 (bitsandbytes; CUDA GPUs only), the adapter in bfloat16.",
    )
    learning_rate: float = Field(2e-4, gt=0)
    optim: str = Field(
        "adamw_torch",
        description="The optimizer (transformers' names: adamw_torch, sgd, paged_adamw_8bit with --qlora, ...).",
    )
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


def cross_attention_over_completions(trainer: Any, processing: Any) -> None:
    """TRL 1.16's prompt-completion vision collator takes Mllama's `cross_attention_mask` from the prompt alone, so it
    is shorter than the prompt and completion it is used with (the forward pass fails), and left padding moves the
    prompts under it. The mask is made again from each final row of token ids, as the Mllama processor makes it (each
    `<|image|>` attended from its position to the next image or the end), tiles from `aspect_ratio_mask`."""
    import torch
    from transformers.models.mllama.processing_mllama import (
        convert_sparse_cross_attention_mask_to_dense,
        get_cross_attention_token_mask,
    )

    collate = trainer.data_collator
    image_token = getattr(processing, "image_token_id", None)
    if image_token is None or getattr(collate, "cross_attention_remade", False):
        return

    def remade(examples: list[dict[str, Any]]) -> dict[str, Any]:
        out = collate(examples)
        if "cross_attention_mask" not in out:
            return out
        ids = out["input_ids"].tolist()
        tiles = out["aspect_ratio_mask"].sum(-1).tolist()
        sparse = [get_cross_attention_token_mask(row, image_token) for row in ids]
        dense = convert_sparse_cross_attention_mask_to_dense(
            sparse, tiles, int(out["aspect_ratio_mask"].shape[-1]), len(ids[0])
        )
        out["cross_attention_mask"] = torch.as_tensor(dense, dtype=out["cross_attention_mask"].dtype)
        return out

    remade.cross_attention_remade = True  # type: ignore[attr-defined]
    trainer.data_collator = remade


# ---- loading -----------------------------------------------------------------------------------------------------


def model_folder(path: str) -> Path:
    p = Path(path).expanduser()
    if p.is_file() and p.suffix.lower() == ".gguf":
        from glasses_rag.models.vlm.gguf_folder import converted_gguf

        return converted_gguf(p)
    if not p.is_dir():
        raise FileNotFoundError(f"model not found: {p} (a local folder or a .gguf file; nothing is downloaded)")
    return p


def load_model(folder: Path, vision: bool, dtype: str, qlora: bool = False) -> tuple[Any, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText, AutoTokenizer

    from glasses_rag.models.vlm.transformers_local import tokenizer_options
    from glasses_rag.models.vlm.vision_inputs import load_processor

    gpu = torch.cuda.is_available()
    torch_dtype = (torch.bfloat16 if gpu else torch.float32) if dtype == "auto" else getattr(torch, dtype)
    kw: dict[str, Any] = {"local_files_only": True, **(quantized(torch_dtype) if qlora else {})}
    config = json.loads((folder / "config.json").read_text())
    tok_kw = {"local_files_only": True, **tokenizer_options(config.get("model_type", ""))}
    if vision:
        processing = load_processor(folder, **tok_kw)
        model = AutoModelForImageTextToText.from_pretrained(folder, dtype=torch_dtype, **kw)
    else:
        processing = AutoTokenizer.from_pretrained(folder, **tok_kw)
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch_dtype, **kw)
    fix_backbone_prefix(model)
    score_labelled_tokens_only()
    return model, processing


def check_qlora() -> None:
    """QLoRA runs on CUDA GPUs only (bitsandbytes' 4-bit kernels): refused clearly anywhere else."""
    import torch

    if not torch.cuda.is_available():
        raise ValueError(
            "--qlora needs a CUDA GPU: bitsandbytes' 4-bit (NF4) weights and kernels run on CUDA only, and this "
            "machine has none. Train in float32 on a CPU (leave --qlora out), or run the same command on a GPU "
            "machine with `pip install bitsandbytes`."
        )
    try:
        import bitsandbytes  # noqa: F401
    except ImportError as e:
        raise ImportError("--qlora needs bitsandbytes: pip install bitsandbytes") from e


def quantized(compute_dtype: Any) -> dict[str, Any]:
    """from_pretrained keywords that load the base in 4-bit NF4 with double quantization (the QLoRA paper's setting),
    each process on its own GPU."""
    from accelerate import PartialState
    from transformers import BitsAndBytesConfig

    bnb = BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=compute_dtype,
    )
    return {"quantization_config": bnb, "device_map": {"": PartialState().local_process_index}}


def lora_targets(model: Any, spec: str) -> Any:
    """peft `target_modules` for `spec`: 'all-linear' as peft reads it, comma-separated names as a list, and
    'language-model' as a pattern matching exactly the linear layers under the model's decoder (its language
    model), so that no vision-tower or projector layer is adapted."""
    import re

    import torch.nn as nn

    if spec == "all-linear":
        return spec
    if spec != "language-model":
        return [t.strip() for t in spec.split(",") if t.strip()]
    decoder = model.get_decoder()
    prefix = next(name for name, module in model.named_modules() if module is decoder)
    names = [n for n, m in decoder.named_modules() if isinstance(m, nn.Linear) and not n.endswith("lm_head") and n]
    if not names:
        raise ValueError(f"{type(model).__name__}: no linear layer under its language model ({prefix or 'the model'})")
    leaves = sorted({n.rsplit(".", 1)[-1] for n in names})
    head = re.escape(prefix) + r"\." if prefix else ""
    return rf"{head}(?:.*\.)?(?:{'|'.join(map(re.escape, leaves))})"


# ---- Ctrl-C ----------------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def callers_ctrl_c() -> Iterator[None]:
    """Around building and training a trainer: the trainer's stop callback (finetune.stop_callback) takes Ctrl-C
    from its construction on; afterwards the caller's handler is back (benchmarks.distill's evaluations after a
    training stop on Ctrl-C again)."""
    previous = signal.getsignal(signal.SIGINT)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


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

    targets = lora_targets(model, cfg.target_modules)
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
        optim=cfg.optim,
        num_train_epochs=cfg.epochs,
        max_steps=cfg.max_steps,
        per_device_train_batch_size=cfg.batch_size,
        gradient_accumulation_steps=cfg.grad_accum,
        max_length=cfg.max_length,  # a bound: longer examples were left out, so nothing is cut
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


def prepare(cfg: FinetuneConfig) -> tuple[Path, Any, Any, Any, int]:
    """The base model folder, the model, its processor or tokenizer (with the chat template trained with) and the
    examples that fit, with how many were left out as too long."""
    from transformers import set_seed

    if cfg.qlora:
        check_qlora()
    set_seed(cfg.seed)  # the same LoRA initialisation in every process and every run
    folder = model_folder(cfg.model)
    vision = has_images(cfg.data)
    read_rows(cfg.data, vision)  # every line checked, photos confined, before a model is loaded
    model, processing = load_model(folder, vision, cfg.dtype, cfg.qlora)
    config_type = getattr(getattr(model, "config", None), "model_type", "")
    set_chat_template(processing, chat_template_for(processing, config_type, cfg.chat_template))
    ds, too_long = load_examples(cfg.data, cfg.max_length, processing, vision)
    if len(ds) == 0:
        raise ValueError(f"{cfg.data}: no example fits max_length={cfg.max_length} (or the file is empty)")
    return folder, model, processing, ds, too_long


def finetune(cfg: FinetuneConfig) -> dict[str, Any]:
    """Train, write the adapter and its card; returns the card (`finished` False when Ctrl-C stopped it). Under
    several processes (accelerate launch, torchrun) each trains its share of every batch and rank 0 alone writes.

    Example:
        finetune(FinetuneConfig(data="sft.jsonl", model="gemma.gguf", out="adapters/g", max_steps=2))
    """
    import torch

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    t0, c0 = time.perf_counter(), time.process_time()
    check_out(cfg.out)
    folder, model, processing, ds, too_long = prepare(cfg)
    with callers_ctrl_c():  # e.g. benchmarks.distill's evaluations after it: Ctrl-C stops them
        trainer = trainer_for(cfg, model, processing, ds)  # its callback takes Ctrl-C for the training only
        if getattr(model.config, "model_type", "") == "mllama":
            cross_attention_over_completions(trainer, processing)
        resumed = last_checkpoint(Path(cfg.out))
        result = trainer.train(resume_from_checkpoint=resumed)
    finished = trainer.state.global_step >= trainer.state.max_steps
    times = (time.perf_counter() - t0, time.process_time() - c0)
    card = make_card(cfg, trainer, folder, (len(ds), too_long), resumed, finished, times, result.training_loss)
    if finished:
        check_out(cfg.out)  # again: the adapter's files are written by peft and transformers, by name
        save_outputs(trainer, processing, Path(cfg.out), folder, card)
    return card


def check_out(out: str) -> Path:
    """The adapter folder `out`, when it names a folder and holds no symbolic link anywhere (checkpoints included):
    peft and transformers write their files by name, through any link planted there (PathRefused, one line)."""
    from glasses_rag.core.paths import named_folder, refuse_links

    folder = named_folder(out, "--out")
    refuse_links(folder, what="adapter folder (--out)")
    return folder


def save_outputs(trainer: Any, processing: Any, out: Path, base: Path, card: dict[str, Any]) -> None:
    """The adapter, the processor (or tokenizer) and the card, written by rank 0 alone (every rank calls this: the
    Trainer's own save gathers what a sharded model holds, and writes on the main process only)."""
    from glasses_rag.models.vlm.vision_inputs import save_processor

    trainer.save_model(str(out))
    if trainer.is_world_process_zero():
        save_processor(processing, out, base)
        write_card(out, card)


def make_card(
    cfg: FinetuneConfig,
    trainer: Any,
    folder: Path,
    counts: tuple[int, int],
    resumed: str | None,
    finished: bool,
    times: tuple[float, float],
    loss: float,
) -> dict[str, Any]:
    """The card: `counts` (examples trained on, left out as too long), `times` (wall and CPU seconds)."""
    import peft
    import transformers
    import trl

    from glasses_rag.models.vlm.gguf_folder import file_sha256

    curve = [{"step": h["step"], "loss": round(h["loss"], 4)} for h in trainer.state.log_history if "loss" in h]
    return {
        "base_model": cfg.model,  # as the user gave it (a .gguf file, not the folder it was converted into)
        "base_model_folder": str(folder),
        "data": {
            "file": cfg.data,
            "sha256": file_sha256(Path(cfg.data)),
            "examples": counts[0],
            "left_out_too_long": counts[1],
        },
        "hyperparameters": cfg.model_dump(exclude={"data", "model", "out"}),
        "steps": trainer.state.global_step,
        "max_steps": trainer.state.max_steps,
        "finished": finished,
        "resumed_from": resumed,
        "train_loss": round(float(loss), 4),
        "loss_curve": curve,
        "seconds": round(times[0], 1),
        "cpu_seconds": round(times[1], 1),  # this process's (rank 0's)
        "device": "cuda" if _gpu() else "cpu",
        "processes": trainer.args.world_size,
        "cpu_count": os.cpu_count(),
        "versions": {"trl": trl.__version__, "peft": peft.__version__, "transformers": transformers.__version__},
    }


def write_card(out: Path, card: dict[str, Any]) -> None:
    write_atomic(out / "card.json", json.dumps(card, indent=1) + "\n")
    curve = ", ".join(f"{p['step']}: {p['loss']}" for p in card["loss_curve"])
    hp = card["hyperparameters"]
    folder = card.get("base_model_folder")
    converted = f" (converted into `{folder}`)" if folder and folder != card["base_model"] else ""
    text = (
        f"# LoRA adapter\n\nBase model: `{card['base_model']}`{converted}\n\n"
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
    try:
        cfg = FinetuneConfig.model_validate({k: v for k, v in args.items() if v is not None})
        if not Path(cfg.data).is_file():  # checked before the model is loaded (a GGUF is converted first)
            raise FileNotFoundError(f"--data {cfg.data}: no such file (an export of glasses_rag.training.export)")
        card = finetune(cfg)
    except (ValueError, OSError, ImportError) as e:  # bad data, a missing model, a link in --out: one line
        print(f"error: {' '.join(str(e).split())}"[:2000], file=sys.stderr)
        return 2
    where = cfg.out if card["finished"] else f"{cfg.out}/checkpoints (stopped; run again to resume)"
    if int(os.environ.get("RANK", "0")) == 0:  # one line for the run, not one per process
        print(
            f"{card['steps']} steps on {card['data']['examples']} examples, loss {card['train_loss']}, "
            f"{card['seconds']} s -> {where}"
        )
    return 0 if card["finished"] else 130


if __name__ == "__main__":
    sys.exit(main())
