"""The chat template a training run uses, chosen in one place.

A model's own template is used when it has one; a GGUF converted by transformers has none (the GGUF's template is
not carried over), so a model without one gets the bundled template of its family
(glasses_rag/models/vlm/chat_templates: gemma, chatml for Qwen, llama3), unless one is named. The bundled templates
render tool calls and answers and mark the assistant's turns with `{% generation %}` for TRL's `assistant_only_loss`.
"""

from __future__ import annotations

from typing import Any

from glasses_rag.models.vlm.base import load_chat_template

FAMILY_TEMPLATES = {"gemma": "gemma", "qwen": "chatml", "llama": "llama3", "smollm": "chatml"}


def bundled_for(model_type: str) -> str | None:
    """The bundled template name for a model type (gemma3_text -> gemma), or None."""
    return next((name for prefix, name in FAMILY_TEMPLATES.items() if model_type.startswith(prefix)), None)


def chat_template_for(tokenizer: Any, model_type: str, named: str | None = None) -> str:
    """The template text to train with: `named` (a bundled name, a .jinja file or the text), else the tokenizer's
    own, else the bundled one of the model's family. Raises ValueError when there is none."""
    if named:
        return load_chat_template(named)
    own = getattr(tokenizer, "chat_template", None)
    if isinstance(own, str) and own:
        return own
    bundled = bundled_for(model_type)
    if bundled is None:
        raise ValueError(
            f"the model ({model_type}) has no chat template and no bundled one fits its family: name "
            "one with --chat-template (gemma, chatml, llama3, a .jinja file)"
        )
    return load_chat_template(bundled)


def set_chat_template(processing: Any, template: str) -> None:
    """Put `template` on a tokenizer or a processor (and the processor's tokenizer)."""
    processing.chat_template = template
    inner = getattr(processing, "tokenizer", None)
    if inner is not None and inner is not processing:
        inner.chat_template = template
