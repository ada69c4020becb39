"""How a model is named: a spec string (`openai:<url>#<model>`, `transformers:<folder>`, `llamacpp:<file.gguf>`, each
optionally `+adapter=<adapter>`), a `--model-config` file (JSON or TOML), and the command line's model options on
top of either (see the package docstring, glasses_rag/models/vlm/__init__.py)."""

from __future__ import annotations

import ipaddress
import json
import logging
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from glasses_rag.models.vlm.backends import BACKENDS
from glasses_rag.models.vlm.config import ModelConfig
from glasses_rag.models.vlm.options import ADAPTER_MARK

log = logging.getLogger(__name__)

# Options the run harness sets for every model (from --concurrency), given to the backends that read them only.
HARNESS_DEFAULTS = frozenset({"pool_size"})
MAX_CONFIG_BYTES = 1 << 20  # a model config is a few hundred bytes
# A config file (which may come from anyone) names the variable holding its server's key only when the name says it
# is an API key, and never the LLM judge's: AWS_SECRET_ACCESS_KEY or the judge's key would otherwise go to its URL.
KEY_SUFFIX = "_API_KEY"
JUDGE_KEYS = frozenset({"OPENAI_API_KEY"})


def load_model_config(path: str | Path) -> ModelConfig:
    """A `--model-config` file (JSON, or TOML with the options under [model] or at the top), read bounded; its
    `api_key_env` is read only for a `*_API_KEY` variable other than the judge's (`--model-api-key-env` names any
    other), with a warning when its URL is not this machine's."""
    from glasses_rag.core.files import read_text_bounded

    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"model config not found: {p}")
    try:
        text = read_text_bounded(p, MAX_CONFIG_BYTES)
        if p.suffix.lower() == ".toml":
            import tomllib

            data = tomllib.loads(text)
        else:
            data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError(f"model config {p}: expected an object of model options")
        if isinstance(data.get("model"), dict):
            data = data["model"]
        return file_key_variable(ModelConfig.model_validate(data), p)
    except RecursionError:
        raise ValueError(f"model config {p}: nested too deeply to read") from None
    except OSError as e:
        raise ValueError(f"model config {p}: cannot read it: {e}") from None


def is_local_url(url: str) -> bool:
    """Does `url` name this machine (localhost, a loopback address)? No name is resolved."""
    host = (urlsplit(url).hostname or "").strip("[]").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def file_key_variable(cfg: ModelConfig, path: Path) -> ModelConfig:
    """`cfg` when the `api_key_env` its file names may be read (see `load_model_config`); ValueError otherwise."""
    name = cfg.api_key_env
    if not name:
        return cfg
    if not name.endswith(KEY_SUFFIX) or name in JUDGE_KEYS:
        why = "the LLM judge's key" if name in JUDGE_KEYS else f"not a *{KEY_SUFFIX} variable"
        raise ValueError(
            f"model config {path}: api_key_env {name!r} is not read from a file ({why}): a config file names only "
            f"a *{KEY_SUFFIX} variable for its server; give another with --model-api-key-env"
        )
    remote = [u for u in cfg.base_urls() if not is_local_url(u)]
    if remote and not cfg.api_key:
        log.warning("model config %s sends the value of %s to %s, not this machine", path, name, ", ".join(remote))
    return cfg


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
