"""Serving a LoRA adapter: in-process (transformers + peft, merged at load) and through an OpenAI-compatible server
that routes LoRA modules as vLLM 0.10.2 does (glasses_rag/testing/vllm_emulation.py: --enable-lora --lora-modules
name=path)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from glasses_rag.models.openai_client import BackendError
from glasses_rag.models.vlm import ModelConfig, make_backend, model_config_from_options, parse_spec
from glasses_rag.policies.model.policy import make_model_policy
from glasses_rag.testing.fake_model_server import FakeOpenAIServer
from glasses_rag.testing.vllm_emulation import VllmBehaviour

BASE = "google/gemma-3-270m-it"
MSGS = [
    {"role": "system", "content": "You answer questions."},
    {"role": "user", "content": "Question: what is the tallest tower in Paris?"},
]


# ---- the spec string and the config --------------------------------------------------------------------------


def test_adapter_in_spec_strings_and_options():
    t = parse_spec("transformers:/m/gemma.gguf+adapter=/runs/lora")
    assert (t.backend, t.path, t.adapter) == ("transformers", "/m/gemma.gguf", "/runs/lora")
    o = parse_spec(f"openai:http://127.0.0.1:8000/v1#{BASE}+adapter=tuned")
    assert (o.base_url, o.model, o.adapter) == ("http://127.0.0.1:8000/v1", BASE, "tuned")
    assert parse_spec("transformers:/m/folder").adapter is None
    kept = model_config_from_options("transformers:/m/x+adapter=/a", max_tokens=64)
    assert kept is not None and kept.adapter == "/a" and kept.max_tokens == 64
    assert model_config_from_options("transformers:/m/x", adapter="/b").adapter == "/b"
    with pytest.raises(ValueError, match="adapter"):
        parse_spec("transformers:/m/x+adapter=")
    with pytest.raises(ValueError, match="does not load adapters"):
        make_backend(ModelConfig(backend="llamacpp", path="/m/x.gguf", adapter="/a"))


# ---- in-process ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    pytest.importorskip("torch")
    pytest.importorskip("peft")
    from glasses_rag.testing.tiny_models import save_tiny_gemma3, save_tiny_lora

    root = tmp_path_factory.mktemp("adapter")
    model = save_tiny_gemma3(root / "gemma3")
    return model, save_tiny_lora(model, root / "lora")


def _peft_reference(model_dir, adapter_dir, max_tokens: int) -> str:
    """What peft itself generates with the adapter kept separate (not merged)."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(model_dir), str(adapter_dir)).eval()
    ids = tok.apply_chat_template(MSGS, add_generation_prompt=True, return_tensors="pt")
    with torch.inference_mode():
        out = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=max_tokens,
            do_sample=False,
            pad_token_id=0,
        )
    return tok.decode(out[0, ids.shape[1] :], skip_special_tokens=True).strip()


def test_transformers_backend_serves_the_adapter_merged(tiny):
    model_dir, adapter_dir = tiny
    base = make_backend(parse_spec(f"transformers:{model_dir}"))
    tuned = make_backend(parse_spec(f"transformers:{model_dir}+adapter={adapter_dir}"))
    got = tuned.complete(MSGS, max_tokens=16).text
    assert got != base.complete(MSGS, max_tokens=16).text  # the adapter changes what the model writes
    assert got == _peft_reference(model_dir, adapter_dir, 16)  # and merging it changed nothing peft would not
    assert tuned.name == f"transformers:{model_dir.name}+{adapter_dir.name}"
    assert not any("lora" in n for n, _ in tuned.model.named_modules())  # merged: a plain model


def test_the_policy_name_shows_the_adapter(tiny):
    model_dir, adapter_dir = tiny
    policy = make_model_policy(f"transformers:{model_dir}+adapter={adapter_dir}")
    assert policy.name == f"vlm:transformers:{model_dir.name}+{adapter_dir.name}"


def test_a_missing_or_unfitting_adapter_is_a_clear_error(tiny, tmp_path):
    model_dir, _ = tiny
    with pytest.raises(FileNotFoundError, match="adapter_config.json"):
        make_backend(ModelConfig(backend="transformers", path=str(model_dir), adapter=str(tmp_path / "nothing")))
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "adapter_config.json").write_text(
        json.dumps(
            {
                "peft_type": "LORA",
                "task_type": "CAUSAL_LM",
                "r": 2,
                "lora_alpha": 4,
                "target_modules": ["no_such_proj"],
                "base_model_name_or_path": None,
            }
        )
    )
    with pytest.raises(ValueError, match="does not fit this model"):
        make_backend(ModelConfig(backend="transformers", path=str(model_dir), adapter=str(bad)))


# ---- through a vLLM-like server ------------------------------------------------------------------------------


@pytest.fixture
def lora_server():
    vllm = VllmBehaviour(lora_modules={"tuned": "/adapters/tuned"})
    with FakeOpenAIServer(models=(BASE,), vllm=vllm) as srv:
        yield srv


def _post(srv, body: dict) -> tuple[int, dict]:
    req = urllib.request.Request(
        f"{srv.base_url}/chat/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_the_server_routes_lora_modules_as_vllm(lora_server):
    with urllib.request.urlopen(f"{lora_server.base_url}/models", timeout=10) as r:
        cards = json.loads(r.read())["data"]
    assert [(c["id"], c["parent"]) for c in cards] == [(BASE, None), ("tuned", BASE)]
    assert cards[1]["root"] == "/adapters/tuned"
    msgs = [{"role": "user", "content": "hi"}]
    assert _post(lora_server, {"model": "nope", "messages": msgs}) == (
        404,
        {"error": {"message": "The model `nope` does not exist.", "type": "NotFoundError", "param": None, "code": 404}},
    )
    for name in (BASE, "tuned"):
        lora_server.push(FakeOpenAIServer.text_reply("ok"))
        status, reply = _post(lora_server, {"model": name, "messages": msgs})
        assert status == 200 and reply["model"] == name


def test_openai_backend_sends_the_adapter_as_the_model(lora_server):
    policy = make_model_policy(f"openai:{lora_server.base_url}#{BASE}+adapter=tuned")
    assert policy.name == f"vlm:openai:{BASE}+tuned"
    lora_server.route('"model": "tuned"', FakeOpenAIServer.text_reply("from the adapter"))
    reply = policy.backend.complete(MSGS, max_tokens=8)
    assert reply.text == "from the adapter" and reply.model == "tuned"
    assert lora_server.requests[-1]["model"] == "tuned"
    base = make_backend(parse_spec(f"openai:{lora_server.base_url}#{BASE}"))
    lora_server.route(f'"model": "{BASE}"', FakeOpenAIServer.text_reply("from the base"))
    assert base.complete(MSGS, max_tokens=8).text == "from the base"


def test_an_adapter_the_server_does_not_serve_fails_at_once(lora_server):
    with pytest.raises(BackendError, match="--lora-modules nope=") as e:
        make_backend(parse_spec(f"openai:{lora_server.base_url}#{BASE}+adapter=nope"))
    assert "tuned" in str(e.value)  # it says what the server does serve
    # a server that answers 404 later (the adapter unloaded) gives the request's error, not a retry loop
    backend = make_backend(parse_spec(f"openai:{lora_server.base_url}#{BASE}+adapter=tuned"))
    lora_server.vllm.lora_modules.clear()
    lora_server.vllm.check_model = True  # vLLM checks every name; the fake only when told to (or given modules)
    with pytest.raises(BackendError, match="does not exist"):
        backend.complete(MSGS, max_tokens=8)
