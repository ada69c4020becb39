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

Each backend is one entry of `BACKENDS` (glasses_rag/models/vlm/backends.py: its configuration and its factory);
its options are declared once, grouped by who reads them (options.py); `ModelConfig` (config.py) is the flat shape
of a config file and of the command line, and refuses an option its backend does not read. specs.py reads spec
strings, config files and the command line's model options.

Any spec but a config file may end with `+adapter=<adapter>` (ModelConfig.adapter): a LoRA adapter folder loaded
on top of the model (transformers), or the name of a LoRA module the server serves (openai, vLLM
`--lora-modules name=path`), e.g. transformers:$GGUF+adapter=runs/lora or openai:http://h:8000/v1#base+adapter=tuned.
`with_adapter(cfg, folder)` gives a config the adapter in `folder` for any backend: in-process the folder itself;
for vLLM, the folder loaded into the running server (its runtime LoRA API, glasses_rag/models/vlm/vllm_lora.py) and
the served name it gets.
"""

from __future__ import annotations

from glasses_rag.models.openai_client import BackendError
from glasses_rag.models.vlm.backends import BACKENDS, BackendKind
from glasses_rag.models.vlm.base import ChatBackend, ChatReply, ChatToolCall, Usage, extract_json, image_to_data_url
from glasses_rag.models.vlm.config import ModelConfig, make_backend
from glasses_rag.models.vlm.options import (
    ADAPTER_MARK,
    CommonOptions,
    LlamaCppConfig,
    LocalOptions,
    OpenAIConfig,
    OpenAIOptions,
    TransformersConfig,
)
from glasses_rag.models.vlm.specs import load_model_config, model_config_from_options, parse_spec, with_adapter

__all__ = [
    "ADAPTER_MARK",
    "BACKENDS",
    "BackendError",
    "BackendKind",
    "ChatBackend",
    "ChatReply",
    "ChatToolCall",
    "CommonOptions",
    "LlamaCppConfig",
    "LocalOptions",
    "ModelConfig",
    "OpenAIConfig",
    "OpenAIOptions",
    "TransformersConfig",
    "Usage",
    "extract_json",
    "image_to_data_url",
    "load_model_config",
    "make_backend",
    "model_config_from_options",
    "parse_spec",
    "with_adapter",
]
