"""Handing a LoRA adapter to a running vLLM server, and the name requests then use for it.

vLLM serves an adapter either from its command line (`--enable-lora --lora-modules <name>=<folder>`) or, when its
environment has `VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`, from `POST /v1/load_lora_adapter` while it runs (vLLM 0.33.0,
`vllm/entrypoints/serve/lora/api_router.py`; the request bodies below are `vllm/entrypoints/serve/lora/protocol.py`).
Either way a request asks for the adapter by that served name in its `model` field, never by its folder; the folder
is read by the server, so it must be on the server's filesystem at the same path.

    name = serve_adapter(["http://gpu-box:8000/v1"], "adapters/tuned")      # e.g. "tuned-3f9c2a1b"
    openai:http://gpu-box:8000/v1#<base model>+adapter=<name>

`glasses_rag.models.vlm.with_adapter(cfg, folder)` does this for a model config of any backend (in-process: the
folder itself).
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import httpx
from pydantic import BaseModel

from glasses_rag.models.openai_client import BackendError, api_base

RUNTIME_LORA_HELP = (
    "start vLLM with --enable-lora (and --max-lora-rank at least the adapter's r) and the environment variable "
    "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True, or serve the adapter from the start with --lora-modules <name>=<folder>"
)


class LoadLoRAAdapterRequest(BaseModel):
    """The body of vLLM's POST /v1/load_lora_adapter (0.33.0)."""

    lora_name: str
    lora_path: str
    load_inplace: bool = False
    is_3d_lora_weight: bool = False


class UnloadLoRAAdapterRequest(BaseModel):
    """The body of vLLM's POST /v1/unload_lora_adapter (0.33.0)."""

    lora_name: str
    lora_int_id: int | None = None


def served_name(folder: str | Path) -> str:
    """A served name for the adapter in `folder`: its folder name and the first 8 hex digits of its weights' SHA-256,
    so two adapters never share a name and loading the same one again is recognised."""
    p = Path(folder)
    weights = next((p / f for f in ("adapter_model.safetensors", "adapter_model.bin") if (p / f).is_file()), None)
    if weights is None:
        raise FileNotFoundError(f"no LoRA adapter weights in {p} (adapter_model.safetensors or .bin)")
    digest = hashlib.sha256(weights.read_bytes()).hexdigest()[:8]
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", p.resolve().name).strip("-") or "adapter"
    return f"{stem}-{digest}"


def _headers(api_key: str | None) -> dict[str, str]:
    return {"Content-Type": "application/json", **({"Authorization": f"Bearer {api_key}"} if api_key else {})}


def _post(base_url: str, route: str, body: BaseModel, api_key: str | None, timeout_s: float) -> httpx.Response:
    url = f"{api_base(base_url)}/{route}"
    try:
        return httpx.post(url, content=body.model_dump_json(), headers=_headers(api_key), timeout=timeout_s)
    except httpx.HTTPError as e:
        raise BackendError(f"cannot reach {url}: {type(e).__name__}: {e}") from e


def _served_from(base_url: str, name: str, api_key: str | None, timeout_s: float) -> str | None:
    """The folder `/v1/models` says the LoRA module `name` was loaded from (its `root`), or None."""
    try:
        cards = httpx.get(f"{api_base(base_url)}/models", headers=_headers(api_key), timeout=timeout_s).json()
    except (httpx.HTTPError, ValueError):
        return None
    found = [c for c in cards.get("data") or [] if isinstance(c, dict) and c.get("id") == name]
    return str(found[0].get("root")) if found else None


def load_lora_adapter(
    base_url: str, name: str, folder: str | Path, api_key: str | None = None, timeout_s: float = 600.0
) -> str:
    """Load the adapter in `folder` into the vLLM server at `base_url` as `name`; the server's message. The same
    name already loaded from the same folder is fine; from another folder, or a server without the runtime LoRA
    API, is a BackendError that says what to do."""
    path = str(Path(folder).resolve())
    r = _post(base_url, "load_lora_adapter", LoadLoRAAdapterRequest(lora_name=name, lora_path=path), api_key, timeout_s)
    if r.status_code == 200:
        return r.text
    if r.status_code == 404 and "detail" in r.text and "Not Found" in r.text:
        raise BackendError(f"{base_url} has no /v1/load_lora_adapter: {RUNTIME_LORA_HELP}", status=404)
    if r.status_code == 400 and "already been loaded" in r.text:
        served = _served_from(base_url, name, api_key, timeout_s)
        if served == path:
            return f"LoRA adapter '{name}' already served from {path}"
        raise BackendError(
            f"{base_url} already serves another adapter as {name!r} (from {served}); unload it or choose another name",
            status=400,
        )
    raise BackendError(f"{base_url} refused to load the adapter {path} as {name!r} ({r.status_code}): {r.text[:500]}")


def unload_lora_adapter(base_url: str, name: str, api_key: str | None = None, timeout_s: float = 60.0) -> str:
    """Unload the LoRA module `name` from the vLLM server at `base_url`; the server's message."""
    r = _post(base_url, "unload_lora_adapter", UnloadLoRAAdapterRequest(lora_name=name), api_key, timeout_s)
    if r.status_code != 200:
        raise BackendError(f"{base_url} did not unload {name!r} ({r.status_code}): {r.text[:500]}", r.status_code)
    return r.text


def serve_adapter(base_urls: list[str], folder: str | Path, name: str | None = None, api_key: str | None = None) -> str:
    """Load the adapter in `folder` on every replica in `base_urls` (vLLM's runtime LoRA API); the served name
    requests must use (`name`, default `served_name(folder)`)."""
    served = name or served_name(folder)
    for url in base_urls:
        load_lora_adapter(url, served, folder, api_key)
    return served


__all__ = [
    "LoadLoRAAdapterRequest",
    "UnloadLoRAAdapterRequest",
    "load_lora_adapter",
    "serve_adapter",
    "served_name",
    "unload_lora_adapter",
]
