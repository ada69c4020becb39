"""In-process backends never run two generations on one model object, and a cancelled turn frees the model
within a token; the process never aborts at exit because of a call still running native code.

llama-cpp-python is optional (an sdist that needs a compiler), so its backend is checked against a stand-in
`llama_cpp` module that fails loudly on concurrent use, as the real one crashes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
import types
from pathlib import Path

import pytest

from glasses_rag.core.calls import CallTimeout, CancelScope, collect_model_calls, run_with_deadline, scope
from glasses_rag.models.vlm.base import ReplyCancelled, complete_and_report

ROOT = Path(__file__).resolve().parents[1]
torch = pytest.importorskip("torch")


# ---- transformers ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_backend(tmp_path_factory):
    from test_vlm_transformers import _llama_config, _tokenizer
    from transformers import LlamaForCausalLM

    from glasses_rag.models.vlm.transformers_local import TransformersVLMBackend

    d = tmp_path_factory.mktemp("tiny_llama_inprocess")
    torch.manual_seed(0)
    tok = _tokenizer()
    cfg = _llama_config(len(tok))
    cfg.eos_token_id = None  # never stops early: generations last exactly max_tokens
    LlamaForCausalLM(cfg).save_pretrained(d)
    tok.save_pretrained(d)
    return TransformersVLMBackend(d)


MSGS = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello there"}]


def _count_concurrency(backend):
    state = {"now": 0, "max": 0, "calls": 0}
    real = backend.model.generate

    def generate(*a, **k):
        state["now"] += 1
        state["calls"] += 1
        state["max"] = max(state["max"], state["now"])
        try:
            return real(*a, **k)
        finally:
            state["now"] -= 1

    backend.model.generate = generate
    return state, real


def test_one_generation_at_a_time_per_model(tiny_backend):
    state, real = _count_concurrency(tiny_backend)
    try:
        threads = [
            threading.Thread(target=tiny_backend.complete, args=(MSGS,), kwargs={"max_tokens": 20}) for _ in range(4)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        tiny_backend.model.generate = real
    assert state["calls"] == 4 and state["max"] == 1


def test_a_timed_out_generation_stops_within_a_token_and_frees_the_model(tiny_backend):
    tiny_backend.complete(MSGS, max_tokens=1)  # torch's first-call set-up is not what this test times
    with collect_model_calls() as calls, pytest.raises(CallTimeout):
        run_with_deadline(
            lambda: complete_and_report(tiny_backend, "decide", MSGS, max_tokens=4000), 0.5, CancelScope()
        )
    deadline = time.monotonic() + 5.0  # generous: the suite runs on every core, this test beside others
    while tiny_backend._lock.locked() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not tiny_backend._lock.locked()
    (call,) = calls
    assert call.cancelled and call.finish_reason == "cancelled" and 0 < (call.completion_tokens or 0) < 4000
    r = tiny_backend.complete(MSGS, max_tokens=3)  # the next call runs normally
    assert r.usage.output_tokens == 3 and r.finish_reason == "length"


def test_a_constrained_generation_stops_on_cancellation_too(tiny_backend):
    long_text = {
        "name": "long",
        "schema": {"type": "object", "required": ["t"], "properties": {"t": {"type": "string", "minLength": 5000}}},
    }
    tiny_backend.complete(MSGS, max_tokens=1, response_schema=long_text)  # the grammar is compiled outside the timing
    with collect_model_calls() as calls, pytest.raises(CallTimeout):
        run_with_deadline(
            lambda: complete_and_report(tiny_backend, "decide", MSGS, max_tokens=6000, response_schema=long_text),
            0.5,
            CancelScope(),
        )
    deadline = time.monotonic() + 5.0
    while tiny_backend._lock.locked() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not tiny_backend._lock.locked()
    (call,) = calls
    assert call.cancelled and call.mode == "structured" and call.raw_reply.startswith('{"t": "')
    assert 0 < (call.completion_tokens or 0) < 6000


def test_a_cancelled_turn_stops_during_prefill_and_while_waiting(tiny_backend):
    s = CancelScope()
    s.cancel()
    with scope(s), pytest.raises(ReplyCancelled, match="prefill"):
        tiny_backend.complete(MSGS, max_tokens=5)
    tiny_backend._lock.acquire()  # another generation holds the model
    try:
        s2 = CancelScope()
        threading.Timer(0.2, s2.cancel).start()
        with scope(s2), pytest.raises(ReplyCancelled, match="waiting"):
            tiny_backend.complete(MSGS, max_tokens=5)
    finally:
        tiny_backend._lock.release()


def test_missing_chat_template_is_a_one_line_error(tmp_path):
    from test_vlm_transformers import _llama_config, _tokenizer
    from transformers import LlamaForCausalLM

    from glasses_rag.models.vlm.transformers_local import TransformersVLMBackend

    tok = _tokenizer()
    tok.chat_template = None
    LlamaForCausalLM(_llama_config(len(tok))).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="has no chat template: set chat_template") as e:
        TransformersVLMBackend(tmp_path)
    assert "\n" not in str(e.value)
    b = TransformersVLMBackend(tmp_path, chat_template="chatml")
    r = b.complete(MSGS, max_tokens=2)
    assert r.usage.input_tokens > 10


def test_context_size_is_enforced(tiny_backend):
    from glasses_rag.models.vlm.base import BackendError

    old = tiny_backend.n_ctx
    tiny_backend.n_ctx = 40
    try:
        with pytest.raises(BackendError, match="exceeds the context size of 40"):
            tiny_backend.complete([{"role": "user", "content": "word " * 50}], max_tokens=8)
    finally:
        tiny_backend.n_ctx = old


# ---- llama.cpp (stand-in module) ------------------------------------------------------------------------------


class _FakeLlama:
    """Streams one chunk per token with a pause; raises if two generations overlap on it (the real one crashes)."""

    instances: list = []

    def __init__(self, model_path, n_ctx, n_threads, n_gpu_layers, chat_format, verbose, **kw):
        self.chat_format = chat_format
        self.busy = False
        self.calls: list[dict] = []
        self.evaluated = 0
        self.n_tokens = 0
        _FakeLlama.instances.append(self)

    def create_chat_completion(self, messages, max_tokens, temperature, stream, **kw):
        assert stream, "generations must be streamed (cancellable)"
        self.calls.append({"messages": messages, **kw})

        def gen():
            if self.busy:
                raise RuntimeError("GGML_ASSERT: two generations on one context")
            self.busy = True
            try:
                yield {"choices": [{"delta": {"role": "assistant"}, "finish_reason": None}]}
                for i in range(max_tokens):
                    time.sleep(0.01)
                    self.evaluated += 1
                    self.n_tokens = 30 + i + 1
                    yield {"choices": [{"delta": {"content": "{"}, "finish_reason": None}]}
                yield {"choices": [{"delta": {}, "finish_reason": "length"}]}
            finally:
                self.busy = False

        return gen()


class _FakeGrammar:
    """llama-cpp-python's LlamaGrammar.from_json_schema: GBNF from a schema, or an exception for what it cannot
    convert."""

    def __init__(self, schema: dict):
        self.schema = schema

    @classmethod
    def from_json_schema(cls, schema: str, verbose: bool = True):
        if "unconvertible" in schema:
            raise ValueError("Unrecognized schema")
        return cls(json.loads(schema))


@pytest.fixture()
def fake_llama_cpp(monkeypatch, tmp_path):
    mod = types.ModuleType("llama_cpp")
    mod.Llama = _FakeLlama
    mod.LlamaGrammar = _FakeGrammar
    monkeypatch.setitem(sys.modules, "llama_cpp", mod)
    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF")
    return f


def test_llamacpp_serialises_cancels_and_flattens(fake_llama_cpp):
    from glasses_rag.models.vlm.llamacpp import LlamaCppBackend
    from glasses_rag.policies.model.policy import decision_schema

    b = LlamaCppBackend(fake_llama_cpp, chat_format="gemma")
    llm = _FakeLlama.instances[-1]
    errors: list[Exception] = []

    def run():
        try:
            b.complete(MSGS, max_tokens=15)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=run) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and llm.evaluated == 45
    # gemma has no system role and reads string contents only
    assert llm.calls[0]["messages"] == [{"role": "user", "content": "be brief\n\nhello there"}]
    # a cancelled turn stops the stream: no more tokens are evaluated
    llm.evaluated = 0
    with collect_model_calls() as calls, pytest.raises(CallTimeout):
        run_with_deadline(lambda: complete_and_report(b, "decide", MSGS, max_tokens=1000), 0.2, CancelScope())
    time.sleep(0.1)
    n = llm.evaluated
    time.sleep(0.1)
    assert llm.evaluated == n < 100 and not llm.busy
    assert calls[0].cancelled and calls[0].raw_reply.startswith("{")
    # the decision schema becomes llama.cpp's grammar, converted once per schema
    from glasses_rag.policies.protocol import ToolSpec

    spec = ToolSpec(
        name="ocr",
        description="d",
        signature="ocr()",
        json_schema={
            "type": "function",
            "function": {"name": "ocr", "parameters": {"type": "object", "properties": {}}},
        },
    )
    schema = decision_schema([spec])
    r = b.complete(MSGS, max_tokens=2, response_schema=schema)
    grammar = llm.calls[-1]["grammar"]
    assert grammar.schema == schema["schema"] and "response_format" not in llm.calls[-1]
    assert r.mode == "structured" and r.usage.output_tokens == 2 and r.usage.input_tokens == 30
    b.complete(MSGS, max_tokens=2, response_schema=decision_schema([spec]))
    assert llm.calls[-1]["grammar"] is grammar
    # a schema the converter rejects is generated without a grammar, and the reply says so
    r = b.complete(MSGS, max_tokens=2, response_schema={"name": "x", "schema": {"type": "unconvertible"}})
    assert "grammar" not in llm.calls[-1] and r.mode is None


# ---- exit -----------------------------------------------------------------------------------------------------


def _python(code: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=ROOT,
    )


def test_exit_waits_for_running_calls_or_ends_without_teardown():
    # a call still running at exit finishes before the interpreter tears down (atexit guard), output intact
    r = _python("""
        import time
        from glasses_rag.core.calls import CallTimeout, CancelScope, run_with_deadline
        def slow():
            time.sleep(0.8)
            print("call finished", flush=True)
        try:
            run_with_deadline(slow, 0.1, CancelScope())
        except CallTimeout:
            print("abandoned", flush=True)
    """)
    assert r.returncode == 0 and r.stdout.split() == ["abandoned", "call", "finished"], r.stderr
    # exit_process: the given exit code, at once when nothing runs
    r = _python("""
        from glasses_rag.core.calls import exit_process
        print("done")
        exit_process(3)
    """)
    assert r.returncode == 3 and r.stdout == "done\n"
    # a call that ignores cancellation past the drain: output flushed, os._exit with the code, no teardown race
    t0 = time.monotonic()
    r = _python("""
        import time
        from glasses_rag.core.calls import CallTimeout, CancelScope, exit_process, run_with_deadline
        try:
            run_with_deadline(lambda: time.sleep(30), 0.1, CancelScope())
        except CallTimeout:
            pass
        print("results written")
        exit_process(0, timeout_s=0.5)
    """)
    assert r.returncode == 0 and r.stdout == "results written\n" and time.monotonic() - t0 < 20
