"""A ChatBackend over a local Hugging Face folder (never downloads: local_files_only=True).

Note: with transformers 4.5x, the processors of Qwen2-VL / Qwen2.5-VL and SmolVLM include a
video processor that needs torchvision; without it they cannot load here (a clear ImportError
says so): serve those models with vLLM and use the openai backend instead.

Vision-language folders (Qwen2-VL / Qwen2.5-VL, SmolVLM / Idefics3, Llama-3.2-Vision, LLaVA,
Gemma 3, ...) load with AutoProcessor + AutoModelForImageTextToText and use the processor's
chat template with the images; text-only folders load with AutoTokenizer +
AutoModelForCausalLM and the tokenizer's chat template (images are dropped). Decoding is
greedy unless temperature > 0. Tools go through the policy's text JSON protocol.
"""

from __future__ import annotations

import inspect
import threading
import time
from pathlib import Path
from typing import Any

from models.vlm.base import BackendError, ChatReply, Usage, data_url_to_image, message_text, text_only_messages

# processors that want one list of images per prompt (a nested list) rather than a flat list
_NESTED_IMAGES = {"idefics", "idefics2", "idefics3", "smolvlm", "mllama"}


def _resolve_dtype(dtype: Any, device: str):
    import torch

    if dtype is None or dtype == "auto":
        return torch.float32 if device == "cpu" else "auto"
    if isinstance(dtype, str):
        name = {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "fp32": "float32", "float": "float32"}.get(dtype, dtype)
        try:
            return getattr(torch, name)
        except AttributeError:
            raise ValueError(f"unknown dtype {dtype!r}; use float32, bfloat16, float16 or auto") from None
    return dtype


def is_vision_config(config: Any) -> bool:
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES

    return config.model_type in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES or hasattr(config, "vision_config")


class TransformersVLMBackend:
    supports_native_tools = False

    def __init__(self, path: str | Path, device: str = "cpu", dtype: Any = None, trust_remote_code: bool = False,
                 max_image_side: int | None = None):
        from transformers import AutoConfig

        p = Path(path).expanduser()
        if not p.is_dir():
            raise FileNotFoundError(f"model folder not found: {p} (give a local folder; nothing is downloaded)")
        self.path = p
        self.device = device
        self.max_image_side = max_image_side
        self.name = f"transformers:{p.name}"
        self._lock = threading.Lock()
        kw = dict(local_files_only=True, trust_remote_code=trust_remote_code)
        self.config = AutoConfig.from_pretrained(p, **kw)
        self.model_type = self.config.model_type
        self.is_vision = is_vision_config(self.config)
        self.supports_images = self.is_vision
        torch_dtype = _resolve_dtype(dtype, device)
        if self.is_vision:
            from transformers import AutoModelForImageTextToText, AutoProcessor

            try:
                self.processor = AutoProcessor.from_pretrained(p, **kw)
            except ImportError as e:  # e.g. Qwen2-VL's video processor needs torchvision
                if "torchvision" not in str(e).lower():
                    raise
                raise ImportError(
                    f"the processor of {p} ({self.model_type}) needs torchvision (its video processor), which this "
                    "project does not install. Serve the model with vLLM and use the openai backend, or use a "
                    "processor without a video half (LLaVA, Idefics3, Mllama families).") from e
            self.tokenizer = getattr(self.processor, "tokenizer", self.processor)
            self.model = AutoModelForImageTextToText.from_pretrained(p, dtype=torch_dtype, **kw)
        else:
            from transformers import AutoModelForCausalLM, AutoTokenizer

            self.processor = None
            self.tokenizer = AutoTokenizer.from_pretrained(p, **kw)
            self.model = AutoModelForCausalLM.from_pretrained(p, dtype=torch_dtype, **kw)
        self.model.to(device)
        self.model.eval()
        self._forward_params = set(inspect.signature(self.model.forward).parameters)

    # ---- prompt building -----------------------------------------------------------------

    def _vision_inputs(self, messages: list[dict]):
        hf_messages, images = [], []
        for m in messages:
            content = m.get("content")
            parts: list[dict] = []
            if isinstance(content, str) or content is None:
                parts.append({"type": "text", "text": content or ""})
            else:
                for part in content:
                    if part.get("type") == "text":
                        parts.append({"type": "text", "text": part.get("text", "")})
                    elif part.get("type") == "image_url":
                        url = part["image_url"]["url"] if isinstance(part.get("image_url"), dict) else part.get("image_url")
                        img = data_url_to_image(url)
                        if self.max_image_side and max(img.size) > self.max_image_side:
                            img.thumbnail((self.max_image_side, self.max_image_side))
                        images.append(img)
                        parts.append({"type": "image"})
            hf_messages.append({"role": m.get("role", "user"), "content": parts})
        prompt = self.processor.apply_chat_template(hf_messages, add_generation_prompt=True, tokenize=False)
        if not images:
            return self.processor(text=[prompt], return_tensors="pt")
        first, second = ([images], images) if self.model_type in _NESTED_IMAGES else (images, [images])
        try:
            return self.processor(text=[prompt], images=first, return_tensors="pt")
        except (ValueError, TypeError, IndexError):
            return self.processor(text=[prompt], images=second, return_tensors="pt")

    def _text_inputs(self, messages: list[dict]):
        msgs = text_only_messages(messages)
        tok = self.tokenizer
        if getattr(tok, "chat_template", None):
            return tok.apply_chat_template(msgs, add_generation_prompt=True, return_tensors="pt", return_dict=True)
        prompt = "".join(f"{m['role']}: {m['content']}\n" for m in msgs) + "assistant: "
        return tok(prompt, return_tensors="pt")

    # ---- ChatBackend ------------------------------------------------------------------------

    def complete(self, messages: list[dict], tools: list[dict] | None = None, max_tokens: int = 512,
                 temperature: float = 0.0) -> ChatReply:
        import torch

        t0 = time.perf_counter()
        with self._lock:
            try:
                inputs = self._vision_inputs(messages) if self.is_vision else self._text_inputs(messages)
                inputs = inputs.to(self.device)
                if "token_type_ids" in inputs and "token_type_ids" not in self._forward_params:
                    inputs.pop("token_type_ids")
                if self.is_vision and "pixel_values" in inputs and self.model.dtype != torch.float32:
                    inputs["pixel_values"] = inputs["pixel_values"].to(self.model.dtype)
                gen: dict[str, Any] = {"max_new_tokens": max_tokens}
                if temperature and temperature > 0:
                    gen.update(do_sample=True, temperature=float(temperature))
                else:
                    gen.update(do_sample=False, temperature=None, top_p=None, top_k=None)
                pad = getattr(self.tokenizer, "pad_token_id", None)
                if pad is None:
                    pad = getattr(self.tokenizer, "eos_token_id", None)
                if pad is not None:
                    gen["pad_token_id"] = pad
                with torch.inference_mode():
                    out = self.model.generate(**inputs, **gen)
            except Exception as e:  # noqa: BLE001
                raise BackendError(f"local generation with {self.path} failed: {type(e).__name__}: {e}") from e
        n_in = int(inputs["input_ids"].shape[1])
        new = out[0, n_in:]
        text = self.tokenizer.decode(new, skip_special_tokens=True)
        return ChatReply(text=text.strip(), usage=Usage(input_tokens=n_in, output_tokens=int(new.shape[0])),
                         latency_ms=(time.perf_counter() - t0) * 1000.0, model=self.name)


__all__ = ["TransformersVLMBackend", "is_vision_config", "message_text"]
