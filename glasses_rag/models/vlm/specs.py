"""How a model is named: a spec string (`openai:<url>#<model>`, `transformers:<folder>`, `llamacpp:<file.gguf>`, each
optionally `+adapter=<adapter>`), a `--model-config` file (JSON or TOML), and the command line's model options on
top of either (see the package docstring, glasses_rag/models/vlm/__init__.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from glasses_rag.models.vlm.backends import BACKENDS
from glasses_rag.models.vlm.config import ModelConfig
from glasses_rag.models.vlm.options import ADAPTER_MARK

# Options the run harness sets for every model (from --concurrency), given to the backends that read them only.
HARNESS_DEFAULTS = frozenset({"pool_size"})


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
    """A spec string as a ModelConfig (see the package docstring for the formats).

    Example: `parse_spec("openai:http://127.0.0.1:8000/v1#m+adapter=tuned").adapter == "tuned"`
    """
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
            f"bad model spec {spec!r}: use {', '.join(k.spec for k in BACKENDS.values())} or a .json/.toml config "
            f"file (optionally followed by {ADAPTER_MARK}<adapter>)"
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
    without a model, and options the model's backend does not read, are errors (HARNESS_DEFAULTS aside: those go
    to the backends that read them)."""
    given = {k: v for k, v in options.items() if v is not None}
    unknown = set(given) - set(ModelConfig.model_fields)
    if unknown:
        raise ValueError(f"unknown model option(s): {', '.join(sorted(unknown))}")
    if config_file is not None:
        cfg = load_model_config(config_file)
    elif spec is None or spec == "rule":
        if given.keys() - HARNESS_DEFAULTS:
            raise ValueError(f"model option(s) {', '.join(sorted(given))} need a model (--model or --model-config)")
        return None
    else:
        cfg = parse_spec(spec)
    reads = BACKENDS.lookup(cfg.backend).fields()
    given = {k: v for k, v in given.items() if k not in HARNESS_DEFAULTS or k in reads}
    return ModelConfig.model_validate({**cfg.model_dump(exclude_unset=True), **given}) if given else cfg


def with_adapter(cfg: ModelConfig, folder: str | Path, name: str | None = None) -> ModelConfig:
    """`cfg` with the LoRA adapter in `folder` on top: transformers loads the folder (merged at load); an openai
    server (vLLM) gets the folder through its runtime LoRA API on every replica, and requests then ask for the
    served name (`name`, default the folder's name and a hash of its weights), never the folder's path.

    Example:
        with_adapter(parse_spec("openai:http://gpu:8000/v1#base"), "adapters/tuned").adapter  # "tuned-3f9c2a1b"
    """
    if cfg.backend == "llamacpp":
        raise ValueError("the llamacpp backend does not load adapters (merge it and convert the result to GGUF)")
    if cfg.backend == "transformers":
        return cfg.model_copy(update={"adapter": str(folder)})
    from glasses_rag.models.vlm.vllm_lora import serve_adapter

    return cfg.model_copy(update={"adapter": serve_adapter(cfg.base_urls(), folder, name, cfg.key())})
