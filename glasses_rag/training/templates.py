"""The chat template a training run uses, chosen in one place.

A model's own template is used when it has one: a vision-language model's processor template first (it renders the
image tokens the processor expands; Qwen2.5-VL's tokenizer template, or a text family's template, would not), else
its tokenizer's. A GGUF converted by transformers has none (the GGUF's template is not carried over), so a model
without one gets the bundled template of its family (glasses_rag/models/vlm/chat_templates: gemma for Gemma and
Gemma 3, chatml for Qwen and Qwen2-VL / Qwen2.5-VL, llama3 for Llama and Llama 3.2 Vision), unless one is named. The
bundled templates render a message's content parts (text, and an image as the family's image token), tool calls and
answers, and mark the assistant's turns with `{% generation %}` for TRL's `assistant_only_loss`.
"""

from __future__ import annotations

from typing import Any

from glasses_rag.models.vlm.base import load_chat_template

FAMILY_TEMPLATES = {"gemma": "gemma", "qwen": "chatml", "llama": "llama3", "mllama": "llama3", "smollm": "chatml"}


def bundled_for(model_type: str) -> str | None:
    """The bundled template name for a model type (gemma3_text -> gemma, qwen2_5_vl -> chatml, mllama -> llama3),
    or None."""
    return next((name for prefix, name in FAMILY_TEMPLATES.items() if model_type.startswith(prefix)), None)


def own_chat_template(processing: Any) -> str | None:
    """The template a processor (else its tokenizer) or a tokenizer carries, or None."""
    for holder in (processing, getattr(processing, "tokenizer", None)):
        own = getattr(holder, "chat_template", None)
        if isinstance(own, str) and own:
            return own
    return None


def chat_template_for(processing: Any, model_type: str, named: str | None = None) -> str:
    """The template text to train with: `named` (a bundled name, a .jinja file or the text), else the model's own
    (a processor's before its tokenizer's), else the bundled one of the model's family. Raises ValueError when there
    is none."""
    if named:
        return load_chat_template(named)
    own = own_chat_template(processing)
    if own:
        return own
    bundled = bundled_for(model_type)
    if bundled is None:
        raise ValueError(
            f"the model ({model_type}) has no chat template and no bundled one fits its family: name "
            "one with --chat-template (gemma, chatml, llama3, a .jinja file)"
        )
    return load_chat_template(bundled)


def set_chat_template(processing: Any, template: str) -> None:
    """Put `template` on a tokenizer or a processor (and the processor's tokenizer); a processor's own template that
    was chosen stays as it is."""
    if getattr(processing, "chat_template", None) == template:
        return
    processing.chat_template = template
    inner = getattr(processing, "tokenizer", None)
    if inner is not None and inner is not processing:
        inner.chat_template = template
