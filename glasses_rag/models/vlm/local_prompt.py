"""The prompt of an in-process model (glasses_rag/models/vlm/transformers_local.py) as model inputs: chat messages
through the processor's chat template with the photos (a vision model) or the tokenizer's (a text model), bounded by
the context size, on the model's device.

    inputs, n_in = model_inputs(backend, [{"role": "user", "content": "Hello"}], max_tokens=16)
"""

from __future__ import annotations

from typing import Any

from glasses_rag.models.vlm.base import BackendError, data_url_to_image, system_into_user, text_only_messages

# processors that want one list of images per prompt (a nested list) rather than a flat list
NESTED_IMAGES = {"idefics", "idefics2", "idefics3", "smolvlm", "mllama"}


def model_inputs(b: Any, messages: list[dict], max_tokens: int) -> tuple[Any, int]:
    """The inputs of `messages` for the backend `b` and the prompt's length in tokens; a BackendError when the
    template rejects the messages or the prompt and `max_tokens` exceed the context."""
    import torch

    try:
        inputs = vision_inputs(b, messages) if b.is_vision else text_inputs(b, messages)
    except Exception as e:  # noqa: BLE001 - a template that rejects the messages
        raise BackendError(f"the chat template of {b.source.name} failed: {type(e).__name__}: {e}") from e
    n_in = int(inputs["input_ids"].shape[1])
    if b.n_ctx and n_in + max_tokens > b.n_ctx:
        raise BackendError(
            f"the prompt has {n_in} tokens; with max_tokens {max_tokens} it exceeds the context "
            f"size of {b.n_ctx} (n_ctx)"
        )
    inputs = inputs.to(b.device)
    if "token_type_ids" in inputs and "token_type_ids" not in b.forward_params:
        inputs.pop("token_type_ids")
    if b.is_vision and "pixel_values" in inputs and b.model.dtype != torch.float32:
        inputs["pixel_values"] = inputs["pixel_values"].to(b.model.dtype)
    return inputs, n_in


def template_kw(b: Any) -> dict:
    return {"chat_template": b.chat_template} if b.chat_template else {}


def vision_inputs(b: Any, messages: list[dict]) -> Any:
    """The processor's inputs: the chat template over text and image parts, with the photos (each thumbnailed to
    `max_image_side`); images are dropped when the backend does not send them."""
    if b.system_into_user:  # the template refuses a system message beside an image, as training did
        messages = system_into_user(messages)
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
                elif part.get("type") == "image_url" and b.supports_images:
                    images.append(_photo(b, part))
                    parts.append({"type": "image"})
        hf_messages.append({"role": m.get("role", "user"), "content": parts})
    prompt = b.processor.apply_chat_template(hf_messages, add_generation_prompt=True, tokenize=False, **template_kw(b))
    if not images:
        return b.processor(text=[prompt], return_tensors="pt")
    first, second = ([images], images) if b.model_type in NESTED_IMAGES else (images, [images])
    try:
        return b.processor(text=[prompt], images=first, return_tensors="pt")
    except (ValueError, TypeError, IndexError):
        return b.processor(text=[prompt], images=second, return_tensors="pt")


def _photo(b: Any, part: dict) -> Any:
    url = part["image_url"].get("url") if isinstance(part.get("image_url"), dict) else part.get("image_url")
    if not isinstance(url, str):
        raise ValueError("an image part without a URL")
    img = data_url_to_image(url)
    if b.max_image_side and max(img.size) > b.max_image_side:
        img.thumbnail((b.max_image_side, b.max_image_side))
    return img


def text_inputs(b: Any, messages: list[dict]) -> Any:
    """The tokenizer's inputs: the chat template over the messages' text."""
    return b.tokenizer.apply_chat_template(
        text_only_messages(messages),
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=True,
        **template_kw(b),
    )
