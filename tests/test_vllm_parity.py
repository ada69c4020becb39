"""benchmarks/vllm_parity.py's parts that need no GPU: the reference prepared here (tiny model, adapter, in-process
greedy ids), the comparison with a server's ids (against the fake server), and the vLLM command it would start."""

from __future__ import annotations

import json

import pytest

from glasses_rag.testing.fake_model_server import FakeOpenAIServer

pytest.importorskip("trl")
pytest.importorskip("peft")


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    from benchmarks.vllm_parity import prepare

    path = prepare(tmp_path_factory.mktemp("parity"), steps=2, max_tokens=8)
    return json.loads(path.read_text())


def _server(reference, change: int | None = None) -> FakeOpenAIServer:
    """A server that answers each request with the reference's ids (the completion's token `change` altered)."""
    by_prompt = {json.dumps(r["messages"]): r for r in reference["requests"]}

    def answer(body):
        ref = by_prompt[json.dumps(body["messages"])]
        ids = list(ref["completion_ids"])
        if change is not None:
            ids[change] += 1
        reply = FakeOpenAIServer.text_reply(ref["text"])
        reply["prompt_token_ids"], reply["choices"][0]["token_ids"] = ref["prompt_ids"], ids
        return reply

    return FakeOpenAIServer(responder=answer)


def test_the_reference_is_the_merged_adapters_greedy_ids(reference):
    reqs = reference["requests"]
    assert len(reqs) == 4 and all(len(r["completion_ids"]) == 8 and r["prompt_ids"] for r in reqs)
    assert all("Decide the next step" in json.dumps(r["messages"]) for r in reqs)


def test_identical_ids_pass_and_one_changed_token_is_found(reference):
    from benchmarks.vllm_parity import compare, table

    with _server(reference) as srv:
        rows = compare(reference, srv.base_url)
        assert {b["model"] for b in srv.requests} == {"tuned"} and all(b["return_token_ids"] for b in srv.requests)
    assert all(r["prompt_same"] and r["completion_same"] for r in rows) and "4/4 decisions identical" in table(rows)
    with _server(reference, change=3) as srv:
        rows = compare(reference, srv.base_url)
    assert not any(r["completion_same"] for r in rows) and {r["first_difference"] for r in rows} == {3}


def test_the_vllm_command_serves_the_adapter_as_a_lora_module():
    from benchmarks.vllm_parity import vllm_command

    cmd = vllm_command("/m", "/a", 8123)
    assert cmd[:3] == ["vllm", "serve", "/m"] and "--enable-lora" in cmd
    assert cmd[cmd.index("--lora-modules") + 1] == "tuned=/a" and cmd[cmd.index("--dtype") + 1] == "float32"
