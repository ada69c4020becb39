"""Model backends: `make_backend(ModelConfig)` builds a ChatBackend from a spec string or a config file
(graph.model_policy turns a backend into the agent's policy).

Spec strings:
    openai:<base_url>#<model>      an OpenAI-compatible server, e.g.
                                   openai:http://127.0.0.1:8000/v1#Qwen/Qwen2.5-VL-7B-Instruct
                                   (without #<model>, the server's first /models entry)
    transformers:<folder>          a local Hugging Face folder (VLM or text-only causal LM)
    llamacpp:<file.gguf>           a GGUF text-only planner (needs llama-cpp-python)
    <file.json | file.toml>        a model config file (see ModelConfig)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from models.openai_client import BackendError
from models.vlm.base import ChatBackend, ChatReply, ChatToolCall, Usage, extract_json, image_to_data_url

BACKENDS = ("openai", "transformers", "llamacpp")


class ModelConfig(BaseModel):
    """Fields of a `--model-config` file (JSON or TOML; a TOML file may put them under [model])."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    backend: Literal["openai", "transformers", "llamacpp"]
    base_url: str | None = None
    model: str | None = None
    path: str | None = None
    api_key: str | None = None
    timeout_s: float = 120.0
    max_retries: int = 3
    temperature: float = 0.0
    max_tokens: int = 512
    device: str = "cpu"
    dtype: str | None = None
    native_tools: bool | None = None
    name: str | None = None


def load_model_config(path: str | Path) -> ModelConfig:
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"model config not found: {p}")
    if p.suffix.lower() == ".toml":
        import tomllib

        data = tomllib.loads(p.read_text(encoding="utf-8"))
    else:
        data = json.loads(p.read_text(encoding="utf-8"))
    if isinstance(data.get("model"), dict):
        data = data["model"]
    return ModelConfig.model_validate(data)


def parse_spec(spec: str) -> ModelConfig:
    """A spec string as a ModelConfig (see the module docstring for the formats)."""
    s = spec.strip()
    if s.lower().endswith((".json", ".toml")) and Path(s).is_file():
        return load_model_config(s)
    kind, sep, rest = s.partition(":")
    kind = kind.lower()
    if not sep or kind not in BACKENDS or not rest:
        raise ValueError(f"bad model spec {spec!r}: use openai:<base_url>#<model>, transformers:<folder>, "
                         f"llamacpp:<file.gguf> or a .json/.toml config file")
    if kind == "openai":
        url, _, model = rest.partition("#")
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"bad model spec {spec!r}: the base URL must start with http:// or https://")
        return ModelConfig(backend="openai", base_url=url, model=model or None)
    return ModelConfig(backend=kind, path=rest)


def make_backend(cfg: ModelConfig, **opts: Any) -> ChatBackend:
    if cfg.backend == "openai":
        from models.vlm.openai_server import OpenAICompatibleBackend

        if not cfg.base_url:
            raise ValueError("the openai backend needs base_url")
        return OpenAICompatibleBackend(cfg.base_url, cfg.model, api_key=cfg.api_key, timeout_s=cfg.timeout_s,
                                       max_retries=cfg.max_retries, native_tools=cfg.native_tools is not False, **opts)
    if not cfg.path:
        raise ValueError(f"the {cfg.backend} backend needs path")
    if cfg.backend == "transformers":
        from models.vlm.transformers_local import TransformersVLMBackend

        return TransformersVLMBackend(cfg.path, device=cfg.device, dtype=cfg.dtype, **opts)
    from models.vlm.llamacpp import LlamaCppBackend

    return LlamaCppBackend(cfg.path, **opts)


__all__ = ["BackendError", "ChatBackend", "ChatReply", "ChatToolCall", "ModelConfig", "Usage", "extract_json",
           "image_to_data_url", "load_model_config", "make_backend", "parse_spec"]
