"""Model backends: `make_backend(ModelConfig)` builds a ChatBackend from a spec string or a config file
(glasses_rag.policies.model.policy turns a backend into the agent's policy).

Spec strings:
    openai:<base_url>[,<base_url>...]#<model>
                                   an OpenAI-compatible server, e.g.
                                   openai:http://127.0.0.1:8000/v1#Qwen/Qwen2.5-VL-7B-Instruct; several URLs are
                                   replicas of one model: a conversation stays on one, new ones go to the
                                   least busy (without #<model>, the server's first /models entry)
    transformers:<folder | file.gguf>
                                   a local Hugging Face folder (VLM or text-only causal LM), or a GGUF file
                                   (converted once, cached; text-only)
    llamacpp:<file.gguf>           a GGUF text-only planner in-process (needs llama-cpp-python)
    <file.json | file.toml>        a model config file (see ModelConfig)

Any spec but a config file may end with `+adapter=<adapter>` (ModelConfig.adapter): a LoRA adapter folder loaded
on top of the model (transformers), or the name of a LoRA module the server serves (openai, vLLM
`--lora-modules name=path`), e.g. transformers:$GGUF+adapter=runs/lora or openai:http://h:8000/v1#base+adapter=tuned.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from glasses_rag.models.openai_client import BackendError
from glasses_rag.models.vlm.base import ChatBackend, ChatReply, ChatToolCall, Usage, extract_json, image_to_data_url

BACKENDS = ("openai", "transformers", "llamacpp")
ADAPTER_MARK = "+adapter="


class ModelConfig(BaseModel):
    """Fields of a `--model-config` file (JSON or TOML; a TOML file may put them under [model])."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    backend: Literal["openai", "transformers", "llamacpp"]
    base_url: str | None = Field(None, description="openai: the server's base URL (the first replica).")
    replicas: list[str] = Field(
        default_factory=list,
        description="openai: more base URLs serving the same model; "
        "a conversation's requests stay on one replica (its prefix cache holds the photo) "
        "unless it is down or has max_outstanding requests in flight, new conversations go "
        "to the one with the fewest outstanding requests, and a failing replica is left "
        "out for a while.",
    )
    model: str | None = None
    path: str | None = Field(None, description="transformers: a local folder or a .gguf file; llamacpp: a .gguf file.")
    api_key: str | None = Field(None, description="openai: this server's API key (sent to it alone, as Bearer).")
    api_key_env: str | None = Field(
        None,
        description="openai: the environment variable holding this server's API "
        "key, e.g. VLLM_API_KEY (api_key wins when both are set). No other variable is "
        "read: OPENAI_API_KEY is the LLM judge's, never sent to a model server.",
    )
    name: str | None = Field(None, description="The policy's name in traces and CLI output.")
    adapter: str | None = Field(
        None,
        description="A LoRA adapter on top of the model. transformers: a local peft "
        "adapter folder, merged into the model's weights at load; openai: the name of a "
        "LoRA module the server serves (vLLM --enable-lora --lora-modules name=path), sent "
        "as each request's model. The policy's name shows it (model+adapter). In a spec "
        "string: <spec>+adapter=<folder or name>.",
    )
    prompt_profile: Literal["full", "compact"] = Field(
        "full",
        description="How the model policy writes its prompts (glasses_rag/policies/model/prompts.py): "
        "'full' (the default) "
        "or 'compact' (a shorter system text and tool list, for small models; docs/models.md). Each model call's "
        "trace record names the profile that rendered its prompt.",
    )
    answer_confidence: Literal["written", "tokens"] = Field(
        "written",
        description="Where an answer's confidence (the one `--abstain-below` compares) comes from: 'written', the "
        "number the model writes in its reply; 'tokens', the geometric mean probability of the tokens that wrote "
        "the answer (in-process transformers backend; a backend that gives no token log-probabilities keeps the "
        "written number, said once in the log). benchmarks.distill calibrates the threshold on held-out data.",
    )
    token_record: bool = Field(
        False,
        description="openai: ask the server for the prompt's and the reply's token ids and the reply's "
        "log-probabilities (vLLM >= 0.10.2: return_token_ids, logprobs), so rollouts record what the model produced "
        "without tokenizing again (ChatReply.sampled; the in-process backend always records them).",
    )
    prefix_cache_mb: int = Field(
        256,
        ge=0,
        description="transformers: memory for the KV cache of earlier prompts, "
        "reused by a later prompt that starts with the same tokens (least recently used "
        "dropped first; 0: off).",
    )
    jump_forward: bool = Field(
        True,
        description="transformers: write the tokens a decision's grammar forces (keys, "
        "punctuation, the rest of a tool's name) in one forward pass with the token before "
        "them, each confirmed against the model's own greedy choice: the same reply, fewer "
        "passes (models/vlm/decoding.py).",
    )
    prompt_lookup: int = Field(
        8,
        ge=0,
        description="transformers: in free text (a rationale, a query, an answer), draft up to this "
        "many tokens from where the last ones occurred earlier in the prompt or the reply, each "
        "confirmed against the model's own greedy choice as jump-forward's are: the same reply in "
        "float32 (bfloat16 may round a near-tie the other way), fewer passes when the model copies "
        "(0: off; needs jump_forward).",
    )
    timeout_s: float = Field(120.0, gt=0, description="openai: seconds per request attempt.")
    max_retries: int = Field(3, ge=0)
    pool_size: int | None = Field(
        None,
        ge=1,
        description="openai: HTTP connections kept (default: from the run's "
        "concurrency, glasses_rag.models.openai_client.pool_size_for).",
    )
    stream: bool = Field(
        True,
        description="openai: stream replies (the connection then closes on cancel and "
        "llama.cpp servers stop generating); servers that reject streaming are asked without it.",
    )
    temperature: float = Field(0.0, ge=0.0, le=2.0)
    max_tokens: int = Field(512, ge=1)
    # Sampling sent explicitly with every request (decision, answer, self-check, decoupler), so that vLLM's
    # default `--generation-config auto` fills none of them from the model's generation_config.json. The
    # defaults are the neutral values (with temperature 0: greedy decoding); see docs/vllm.md.
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(
        0,
        ge=-1,
        description="0: off (vLLM, llama.cpp; sent as -1 to a server that asks for "
        "that, as SGLang does). Not in OpenAI's API: dropped after a server rejects it.",
    )
    min_p: float = Field(0.0, ge=0.0, le=1.0, description="Not in OpenAI's API: dropped after a server rejects it.")
    repetition_penalty: float = Field(
        1.0, gt=0.0, le=2.0, description="1.0: off. Not in OpenAI's API: dropped after a server rejects it."
    )
    presence_penalty: float = Field(0.0, ge=-2.0, le=2.0)
    frequency_penalty: float = Field(0.0, ge=-2.0, le=2.0)
    seed: int | None = Field(None, description="Sampling seed (only matters with temperature > 0).")
    text_only: bool = Field(False, description="Never send the image; prompts say the model cannot see it.")
    system_role: bool = Field(
        True,
        description="False: the system text is sent at the start of the first user "
        "message, for chat formats without a system role (llama-cpp-python's gemma drops "
        "system messages).",
    )
    image_max_side: int = Field(1024, ge=64, description="Longest side of the image sent to the model, in pixels.")
    decision_mode: Literal["auto", "structured", "native_tools", "json_text"] = Field(
        "auto",
        description="How the next-step decision is constrained. auto: a JSON schema of the allowed tools "
        "(response_format) where the server supports it, else native tool calls, else JSON asked for in the text.",
    )
    response_format: Literal["json_schema", "json_object"] = Field(
        "json_schema",
        description="openai: the response_format shape the server takes for a JSON schema: "
        "'json_schema' (OpenAI, vLLM, SGLang) or 'json_object' with a 'schema' (llama-cpp-python's server).",
    )
    json_object_enforced: bool = Field(
        False,
        description="openai: the server enforces the 'schema' of a "
        "json_object response_format (llama-cpp-python's server does; vLLM and SGLang "
        "ignore it and only make the reply some JSON object). False: such calls are "
        "recorded as mode 'json_object', not 'structured'.",
    )
    tool_choice: Literal["auto", "required"] = Field(
        "auto",
        description="openai: the tool_choice sent with native tools. 'required' makes vLLM constrain the "
        "reply to a tool call (guided decoding), so no text is left for its parser to miss.",
    )
    max_outstanding: int = Field(
        64,
        ge=1,
        description="openai: requests in flight on one replica past which a "
        "conversation's requests leave their replica for the least busy one.",
    )
    native_tools: bool | None = Field(
        None,
        description="Offer tools natively (None: when the backend supports it). "
        "False is the same as leaving native tools out of decision_mode.",
    )
    chat_template: str | None = Field(
        None,
        description="transformers / llamacpp: the chat template to use "
        "instead of the model's own: a bundled name (gemma, chatml, llama3), a .jinja "
        "file, or the template text. openai: sent as vLLM's per-request chat_template.",
    )
    chat_format: str | None = Field(
        None,
        description="llamacpp: a llama-cpp-python chat_format (e.g. gemma, chatml); default: the GGUF's own template.",
    )
    n_ctx: int | None = Field(
        None,
        ge=256,
        description="Context size in tokens: llamacpp n_ctx (default 4096); "
        "transformers: longer prompts are refused with a clear error.",
    )
    n_threads: int | None = Field(
        None,
        ge=1,
        description="llamacpp / transformers: CPU threads (transformers on a "
        "CPU: default torch's, at most the CPUs less one; glasses_rag.models.vlm."
        "transformers_local.cpu_threads).",
    )
    n_gpu_layers: int = Field(0, description="llamacpp: layers offloaded to the GPU (-1: all).")
    device: str = "cpu"
    dtype: str | None = Field(
        None,
        description="transformers: float32, bfloat16, float16, auto, or int8 (CPU: every linear layer quantized "
        "to int8 after loading, about 2.5 times faster decode steps for a small model; docs/models.md).",
    )
    cache_dir: str | None = Field(
        None, description="transformers: where a converted GGUF model is kept (default ~/.cache/glasses-rag/gguf)."
    )

    @model_validator(mode="after")
    def _check(self) -> ModelConfig:
        if self.backend == "openai" and not self.base_url and self.replicas:
            self.base_url, self.replicas = self.replicas[0], self.replicas[1:]
        return self

    def key(self) -> str | None:
        """The server's API key: `api_key`, else the variable `api_key_env` names (which must then be set)."""
        if self.api_key or not self.api_key_env:
            return self.api_key
        value = os.environ.get(self.api_key_env)
        if not value:
            raise ValueError(f"api_key_env names {self.api_key_env}, which is not set")
        return value

    def base_urls(self) -> list[str]:
        return [u for u in [self.base_url, *self.replicas] if u]

    def sampling(self) -> dict[str, Any]:
        """The request fields every call sends besides temperature and max_tokens (see the fields above)."""
        fields = ("top_p", "top_k", "min_p", "repetition_penalty", "presence_penalty", "frequency_penalty", "seed")
        return {k: getattr(self, k) for k in fields if getattr(self, k) is not None}

    def decision_modes(self) -> tuple[str, ...]:
        """The constraints the policy may offer, strongest first."""
        modes = {
            "auto": ("structured", "native_tools", "json_text"),
            "structured": ("structured", "json_text"),
            "native_tools": ("native_tools", "json_text"),
            "json_text": ("json_text",),
        }[self.decision_mode]
        if self.native_tools is False:
            modes = tuple(m for m in modes if m != "native_tools")
        return modes


def _logprob_fields(cfg: ModelConfig) -> dict[str, Any]:
    """What an OpenAI-compatible request asks for besides sampling: the written tokens' log-probabilities when the
    policy reads an answer's confidence from them, and with `token_record` the prompt's and the reply's token ids
    too (vLLM's `return_token_ids`), for rollouts."""
    if cfg.token_record:
        return {"logprobs": True, "return_token_ids": True}
    return {"logprobs": True} if cfg.answer_confidence == "tokens" else {}


def load_model_config(path: str | Path) -> ModelConfig:
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"model config not found: {p}")
    try:
        if p.suffix.lower() == ".toml":
            import tomllib

            data = tomllib.loads(p.read_text(encoding="utf-8"))
        else:
            data = json.loads(p.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise ValueError(f"model config {p}: expected an object of model options")
        if isinstance(data.get("model"), dict):
            data = data["model"]
        return ModelConfig.model_validate(data)
    except RecursionError:
        raise ValueError(f"model config {p}: nested too deeply to read") from None


def parse_spec(spec: str) -> ModelConfig:
    """A spec string as a ModelConfig (see the module docstring for the formats)."""
    s = spec.strip()
    if s.lower().endswith((".json", ".toml")) and Path(s).is_file():
        return load_model_config(s)
    s, mark, adapter = s.partition(ADAPTER_MARK)
    if mark and not adapter.strip():
        raise ValueError(f"bad model spec {spec!r}: {ADAPTER_MARK} needs an adapter folder or name after it")
    cfg = _parse_backend_spec(spec, s)
    if not mark:
        return cfg
    return ModelConfig.model_validate({**cfg.model_dump(exclude_unset=True), "adapter": adapter.strip()})


def _parse_backend_spec(spec: str, s: str) -> ModelConfig:
    kind, sep, rest = s.partition(":")
    kind = kind.lower()
    if not sep or kind not in BACKENDS or not rest:
        raise ValueError(
            f"bad model spec {spec!r}: use openai:<base_url>[,<base_url>...]#<model>, "
            f"transformers:<folder or file.gguf>, llamacpp:<file.gguf> or a .json/.toml config file "
            f"(optionally followed by {ADAPTER_MARK}<adapter>)"
        )
    if kind == "openai":
        urls, _, model = rest.partition("#")
        bases = [u.strip() for u in urls.split(",") if u.strip()]
        if not bases or not all(u.startswith(("http://", "https://")) for u in bases):
            raise ValueError(f"bad model spec {spec!r}: each base URL must start with http:// or https://")
        return ModelConfig(backend="openai", base_url=bases[0], replicas=bases[1:], model=model or None)
    return ModelConfig(backend=kind, path=rest)


def model_config_from_options(
    spec: str | None = None, config_file: str | Path | None = None, **options: Any
) -> ModelConfig | None:
    """What a front end's model options mean: `config_file` (or else `spec`) with the options given on the
    command line (not None) on top. None for the rule planner ('rule' with no config file); model options
    without a model are an error."""
    given = {k: v for k, v in options.items() if v is not None}
    unknown = set(given) - set(ModelConfig.model_fields)
    if unknown:
        raise ValueError(f"unknown model option(s): {', '.join(sorted(unknown))}")
    if config_file is not None:
        cfg = load_model_config(config_file)
    elif spec is None or spec == "rule":
        if given.keys() - {"pool_size"}:
            raise ValueError(f"model option(s) {', '.join(sorted(given))} need a model (--model or --model-config)")
        return None
    else:
        cfg = parse_spec(spec)
    return ModelConfig.model_validate({**cfg.model_dump(exclude_unset=True), **given}) if given else cfg


def make_backend(cfg: ModelConfig, **opts: Any) -> ChatBackend:
    if cfg.backend == "openai":
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
            # the answer's token probabilities, when the policy reads its confidence from them
            sampling={**cfg.sampling(), **_logprob_fields(cfg)},
            tool_choice=cfg.tool_choice,
            json_object_enforced=cfg.json_object_enforced,
            max_outstanding=cfg.max_outstanding,
            adapter=cfg.adapter,
            **opts,
        )
    if not cfg.path:
        raise ValueError(f"the {cfg.backend} backend needs path")
    if cfg.backend == "transformers":
        from glasses_rag.models.vlm.transformers_local import TransformersVLMBackend

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


__all__ = [
    "BackendError",
    "ChatBackend",
    "ChatReply",
    "ChatToolCall",
    "ModelConfig",
    "Usage",
    "extract_json",
    "image_to_data_url",
    "load_model_config",
    "make_backend",
    "model_config_from_options",
    "parse_spec",
]
