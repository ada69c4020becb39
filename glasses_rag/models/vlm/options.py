"""The model options, grouped by who reads them: every backend (`CommonOptions`: what the model policy asks for and
how), an OpenAI-compatible server (`OpenAIOptions`), an in-process model (`LocalOptions`, then `TransformersOptions`
and `LlamaCppOptions`). Each backend's own configuration is the common options plus its group (`OpenAIConfig`,
`TransformersConfig`, `LlamaCppConfig`); its factory (glasses_rag/models/vlm/backends.py) reads nothing else.
`glasses_rag.models.vlm.ModelConfig`, the shape of a `--model-config` file and of the command line's model options,
holds every group and refuses an option its backend does not read (set to other than its default).
"""

from __future__ import annotations

import os
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

ADAPTER_MARK = "+adapter="


class CommonOptions(BaseModel):
    """Options every backend takes: the policy's name, prompts, replies and decisions."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    name: str | None = Field(None, description="The policy's name in traces and CLI output.")
    adapter: str | None = Field(
        None,
        description="A LoRA adapter on top of the model. transformers: a local peft "
        "adapter folder, merged into the model's weights at load; openai: the name of a "
        "LoRA module the server serves (vLLM --enable-lora --lora-modules name=path), sent "
        "as each request's model. The policy's name shows it (model+adapter). In a spec "
        f"string: <spec>{ADAPTER_MARK}<folder or name>.",
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
    temperature: float = Field(0.0, ge=0.0, le=2.0)
    max_tokens: int = Field(512, ge=1)
    text_only: bool = Field(False, description="Never send the image; prompts say the model cannot see it.")
    image_max_side: int = Field(1024, ge=64, description="Longest side of the image sent to the model, in pixels.")
    decision_mode: Literal["auto", "structured", "native_tools", "json_text"] = Field(
        "auto",
        description="How the next-step decision is constrained. auto: a JSON schema of the allowed tools "
        "(response_format) where the server supports it, else native tool calls, else JSON asked for in the text.",
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


SAMPLING_FIELDS = ("top_p", "top_k", "min_p", "repetition_penalty", "presence_penalty", "frequency_penalty", "seed")


class OpenAIOptions(BaseModel):
    """Options of an OpenAI-compatible server (vLLM, llama-cpp-python's server, SGLang, OpenAI)."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    base_url: str | None = Field(None, description="openai: the server's base URL (the first replica).")
    replicas: list[str] = Field(
        default_factory=list,
        description="openai: more base URLs serving the same model; "
        "a conversation's requests stay on one replica (its prefix cache holds the photo) "
        "unless it is down or has max_outstanding requests in flight, new conversations go "
        "to the one with the fewest outstanding requests, and a failing replica is left "
        "out for a while.",
    )
    model: str | None = Field(None, description="openai: the served model's name (default: the server's first).")
    api_key: str | None = Field(None, description="openai: this server's API key (sent to it alone, as Bearer).")
    api_key_env: str | None = Field(
        None,
        description="openai: the environment variable holding this server's API "
        "key, e.g. VLLM_API_KEY (api_key wins when both are set). No other variable is "
        "read: OPENAI_API_KEY is the LLM judge's, never sent to a model server.",
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
    token_record: bool = Field(
        False,
        description="openai: ask the server for the prompt's and the reply's token ids and the reply's "
        "log-probabilities (vLLM >= 0.10.2: return_token_ids, logprobs), so rollouts record what the model produced "
        "without tokenizing again (ChatReply.sampled; the in-process backend always records them).",
    )
    system_role: bool = Field(
        True,
        description="False: the system text is sent at the start of the first user "
        "message, for chat formats without a system role (llama-cpp-python's gemma drops "
        "system messages).",
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

    @model_validator(mode="after")
    def _first_replica_is_the_base_url(self) -> Any:
        if not self.base_url and self.replicas:
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
        return {k: getattr(self, k) for k in SAMPLING_FIELDS if getattr(self, k) is not None}


class LocalOptions(BaseModel):
    """Options of a model run in this process."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    path: str | None = Field(None, description="transformers: a local folder or a .gguf file; llamacpp: a .gguf file.")
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


class TransformersOptions(LocalOptions):
    """Options of the in-process transformers backend."""

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
    seed: int | None = Field(None, description="transformers: sampling seed (only matters with temperature > 0).")
    device: str = Field("cpu", description="transformers: the torch device (cpu, cuda, cuda:1, ...).")
    dtype: str | None = Field(
        None,
        description="transformers: float32, bfloat16, float16, auto, or int8 (CPU: every linear layer quantized "
        "to int8 after loading, about 2.5 times faster decode steps for a small model; docs/models.md).",
    )
    cache_dir: str | None = Field(
        None, description="transformers: where a converted GGUF model is kept (default ~/.cache/glasses-rag/gguf)."
    )


class LlamaCppOptions(LocalOptions):
    """Options of the in-process llama.cpp backend (llama-cpp-python)."""

    chat_format: str | None = Field(
        None,
        description="llamacpp: a llama-cpp-python chat_format (e.g. gemma, chatml); default: the GGUF's own template.",
    )
    n_gpu_layers: int = Field(0, description="llamacpp: layers offloaded to the GPU (-1: all).")


class OpenAIConfig(CommonOptions, OpenAIOptions):
    """What the openai backend is built from."""

    backend: Literal["openai"] = "openai"


class TransformersConfig(CommonOptions, TransformersOptions):
    """What the transformers backend is built from."""

    backend: Literal["transformers"] = "transformers"


class LlamaCppConfig(CommonOptions, LlamaCppOptions):
    """What the llamacpp backend is built from."""

    backend: Literal["llamacpp"] = "llamacpp"
