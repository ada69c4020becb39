"""The model backends, one registry (`BACKENDS`, a glasses_rag.core.registry.Registry): a backend's name, the
configuration it is built from (glasses_rag/models/vlm/options.py) and its factory. A factory imports its backend's
module only when called, so naming a backend costs nothing until it is built.

    kind = BACKENDS.lookup("openai")       # ValueError naming the closest backend for a typo
    backend = kind.build(kind.config(base_url="http://127.0.0.1:8000/v1", model="m"))
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from glasses_rag.core.registry import Registry
from glasses_rag.models.vlm.base import ChatBackend
from glasses_rag.models.vlm.options import CommonOptions, LlamaCppConfig, OpenAIConfig, TransformersConfig


@dataclass(frozen=True)
class BackendKind:
    """A named backend: the configuration model its factory takes, and the factory."""

    name: str
    config: type[CommonOptions]
    build: Callable[..., ChatBackend]
    spec: str  # how a spec string names it, for messages

    def fields(self) -> frozenset[str]:
        """The options this backend reads (the `backend` name included)."""
        return frozenset(self.config.model_fields)


def build_openai(cfg: OpenAIConfig, **opts: Any) -> ChatBackend:
    from glasses_rag.models.openai_client import pool_size_for
    from glasses_rag.models.vlm.openai_server import OpenAICompatibleBackend

    if not cfg.base_url:
        raise ValueError("the openai backend needs base_url")
    return OpenAICompatibleBackend(
        cfg.base_urls(),
        cfg.model,
        api_key=cfg.key(),
        timeout_s=cfg.timeout_s,
        max_retries=cfg.max_retries,
        native_tools=cfg.native_tools is not False,
        response_format=cfg.response_format,
        stream=cfg.stream,
        pool_size=cfg.pool_size or pool_size_for(1),
        text_only=cfg.text_only,
        chat_template=cfg.chat_template,
        system_role=cfg.system_role,
        sampling={**cfg.sampling(), **_logprob_fields(cfg)},
        tool_choice=cfg.tool_choice,
        json_object_enforced=cfg.json_object_enforced,
        max_outstanding=cfg.max_outstanding,
        adapter=cfg.adapter,
        **opts,
    )


def _logprob_fields(cfg: OpenAIConfig) -> dict[str, Any]:
    """What an OpenAI-compatible request asks for besides sampling: the written tokens' log-probabilities when the
    policy reads an answer's confidence from them, and with `token_record` the prompt's and the reply's token ids
    too (vLLM's `return_token_ids`), for rollouts."""
    if cfg.token_record:
        return {"logprobs": True, "return_token_ids": True}
    return {"logprobs": True} if cfg.answer_confidence == "tokens" else {}


def build_transformers(cfg: TransformersConfig, **opts: Any) -> ChatBackend:
    from glasses_rag.models.vlm.transformers_local import TransformersVLMBackend

    if not cfg.path:
        raise ValueError("the transformers backend needs path")
    return TransformersVLMBackend(
        cfg.path,
        device=cfg.device,
        dtype=cfg.dtype,
        chat_template=cfg.chat_template,
        text_only=cfg.text_only,
        n_ctx=cfg.n_ctx,
        n_threads=cfg.n_threads,
        cache_dir=cfg.cache_dir,
        adapter=cfg.adapter,
        prefix_cache_mb=cfg.prefix_cache_mb,
        jump_forward=cfg.jump_forward,
        prompt_lookup=cfg.prompt_lookup,
        seed=cfg.seed,
        **opts,
    )


def build_llamacpp(cfg: LlamaCppConfig, **opts: Any) -> ChatBackend:
    if not cfg.path:
        raise ValueError("the llamacpp backend needs path")
    if cfg.adapter:
        raise ValueError(
            "the llamacpp backend does not load adapters: use transformers:<model>+adapter=<folder>, or "
            "merge the adapter and convert the result to GGUF"
        )
    from glasses_rag.models.vlm.llamacpp import LlamaCppBackend

    return LlamaCppBackend(
        cfg.path,
        n_ctx=cfg.n_ctx or 4096,
        n_threads=cfg.n_threads,
        n_gpu_layers=cfg.n_gpu_layers,
        chat_format=cfg.chat_format,
        chat_template=cfg.chat_template,
        **opts,
    )


BACKENDS: Registry[BackendKind] = Registry(
    "model backend",
    [
        (k.name, k)
        for k in (
            BackendKind("openai", OpenAIConfig, build_openai, "openai:<base_url>[,<base_url>...]#<model>"),
            BackendKind("transformers", TransformersConfig, build_transformers, "transformers:<folder or file.gguf>"),
            BackendKind("llamacpp", LlamaCppConfig, build_llamacpp, "llamacpp:<file.gguf>"),
        )
    ],
)
