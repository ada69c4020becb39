"""`ModelConfig`, the model as a `--model-config` file and the command line's model options write it: a backend's name
and its options, flat. The options are declared once, by who reads them (glasses_rag/models/vlm/options.py); an
option that only another backend reads is a one-line error, not silently ignored. `make_backend` builds the backend
through the one registry (glasses_rag/models/vlm/backends.py) from that backend's own configuration.
"""

from __future__ import annotations

from typing import Any

from pydantic import (
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from glasses_rag.models.vlm.backends import BACKENDS
from glasses_rag.models.vlm.base import ChatBackend
from glasses_rag.models.vlm.options import CommonOptions, LlamaCppOptions, OpenAIOptions, TransformersOptions

# The order of the fields when ModelConfig listed them all in one class: a config is written (run.json) and hashed
# (the run's configuration fingerprint, which a resumed run must match) in this order, so run folders made before the
# options were grouped by backend resume as they did.
FILE_ORDER = (
    "backend", "base_url", "replicas", "model", "path", "api_key", "api_key_env", "name", "adapter",
    "prompt_profile", "answer_confidence", "token_record", "prefix_cache_mb", "jump_forward", "prompt_lookup",
    "timeout_s", "max_retries", "pool_size", "stream", "temperature", "max_tokens", "top_p", "top_k", "min_p",
    "repetition_penalty", "presence_penalty", "frequency_penalty", "seed", "text_only", "system_role",
    "image_max_side", "decision_mode", "response_format", "json_object_enforced", "tool_choice", "max_outstanding",
    "native_tools", "chat_template", "chat_format", "n_ctx", "n_threads", "n_gpu_layers", "device", "dtype",
    "cache_dir",
)  # fmt: skip


class ModelConfig(CommonOptions, OpenAIOptions, TransformersOptions, LlamaCppOptions):
    """Fields of a `--model-config` file (JSON or TOML; a TOML file may put them under [model]): `backend`, the options
    every backend takes, and those of that backend (an option of another backend is refused).

    Example: `ModelConfig(backend="openai", base_url="http://127.0.0.1:8000/v1", model="m", max_tokens=64)`;
    `ModelConfig(backend="llamacpp", path="m.gguf", prefix_cache_mb=0)` raises (a transformers option).
    """

    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    backend: str = Field(description="The backend: openai, transformers or llamacpp (the spec string's prefix).")

    @field_validator("backend")
    @classmethod
    def _registered(cls, name: str) -> str:
        BACKENDS.lookup(name)  # ValueError naming the closest backend
        return name

    @model_validator(mode="after")
    def _only_options_of_its_backend(self) -> ModelConfig:
        kind = BACKENDS.lookup(self.backend)
        # at its default, another backend's option is what a dump writes (run.json holds every field): read back
        fields = type(self).model_fields
        foreign = sorted(
            f
            for f in self.model_fields_set - kind.fields()
            if getattr(self, f) != fields[f].get_default(call_default_factory=True)
        )
        if foreign:
            owners = {f: [k.name for k in BACKENDS.values() if f in k.fields()] for f in foreign}
            named = ", ".join(f"{f} ({'/'.join(owners[f])})" for f in foreign)
            raise ValueError(f"option(s) of another backend, which the {self.backend} backend does not read: {named}")
        return self

    @model_serializer(mode="wrap")
    def _in_file_order(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        return {k: data[k] for k in (*FILE_ORDER, *data) if k in data}

    def backend_config(self) -> CommonOptions:
        """The backend's own configuration (`OpenAIConfig`, ...): what its factory is built from."""
        kind = BACKENDS.lookup(self.backend)
        return kind.config.model_validate(self.model_dump(include=set(kind.fields())))


def make_backend(cfg: ModelConfig, **opts: Any) -> ChatBackend:
    """The chat backend `cfg` names, built by its registered factory from its own options (`opts`: the factory's
    extra keyword arguments)."""
    return BACKENDS.lookup(cfg.backend).build(cfg.backend_config(), **opts)
