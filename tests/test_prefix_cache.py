"""The in-process backend's prefix cache (glasses_rag/models/vlm/prefix_cache.py) on a tiny Gemma 3 built from a config.

Greedy outputs must be the same token for token with and without the cache (sliding-window layers included), under
the decision grammar too; the cache must be hit (the later prompts compute only their new tokens); a generation
cancelled mid-forward must leave the stored entries usable; memory stays under its cap.
"""

from __future__ import annotations

import threading

import pytest

from glasses_rag.core.calls import CancelScope, collect_model_calls, scope
from glasses_rag.models.vlm.base import ReplyCancelled
from glasses_rag.models.vlm.prefix_cache import PrefixCache, common_prefix
from glasses_rag.policies.model.policy import ModelPolicy
from glasses_rag.policies.protocol import PolicyView, ToolSpec
from glasses_rag.testing.tiny_models import save_tiny_gemma3

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def gemma_dir(tmp_path_factory):
    return save_tiny_gemma3(tmp_path_factory.mktemp("tiny_gemma3"))


def _backend(folder, mb: int):
    from glasses_rag.models.vlm.transformers_local import TransformersVLMBackend

    return TransformersVLMBackend(folder, prefix_cache_mb=mb)


def _turn(n_steps: int) -> list[list[dict]]:
    """The prompts of a turn as a model policy sends them: one system text, each call adding to the previous."""
    system = {"role": "system", "content": "You plan tool calls. Tools: web_search(query), image_search(). " * 4}
    msgs = [system, {"role": "user", "content": "Question: what is the tallest tower in Paris?"}]
    out = []
    for i in range(n_steps):
        out.append([*msgs, {"role": "user", "content": f"Budget left: {n_steps - i} calls. Decide."}])
        msgs = [
            *msgs,
            {"role": "assistant", "content": f'{{"tool": "web_search", "q": "step {i}"}}'},
            {"role": "user", "content": f"Result {i}: the Eiffel Tower is 330 m tall (source {i})."},
        ]
    return out


def test_common_prefix():
    assert common_prefix(list(range(1000)), list(range(600)) + [0]) == 600
    assert common_prefix([1, 2], [1, 2]) == 2 and common_prefix([], [1]) == 0 and common_prefix([3], [4]) == 0


def test_outputs_are_identical_with_and_without_the_cache_and_the_cache_is_hit(gemma_dir):
    cached, plain = _backend(gemma_dir, 64), _backend(gemma_dir, 0)
    prompts = _turn(4) + _turn(2)  # a second turn: same system text, different transcript
    for msgs in prompts:
        a = cached.complete(msgs, max_tokens=24)
        b = plain.complete(msgs, max_tokens=24)
        assert a.text == b.text and a.usage == b.usage.model_copy(update={"cached_tokens": a.usage.cached_tokens})
        assert b.usage.cached_tokens == 0
    pc = cached.prefix_cache
    assert pc.hits == len(prompts) - 1 and pc.misses == 1  # every prompt after the first resumed
    assert pc.reused_tokens > 0.6 * sum(len(cached.tokenizer.apply_chat_template(p)) for p in prompts[1:])
    assert plain.prefix_cache.hits == 0 and len(plain.prefix_cache) == 0


def test_structured_decisions_are_identical_with_the_cache(gemma_dir):
    """Under the decision grammar (xgrammar) the cache changes nothing either."""
    pytest.importorskip("xgrammar")
    tools = [
        ToolSpec(
            name="web_search",
            signature="web_search(query: str)",
            description="search the web",
            json_schema={
                "type": "function",
                "function": {
                    "name": "web_search",
                    "parameters": {
                        "type": "object",
                        "properties": {"query": {"type": "string", "maxLength": 40}},
                        "required": ["query"],
                    },
                },
            },
        )
    ]
    view = PolicyView(
        question="What is the tallest tower in Paris?",
        task=1,
        tools=tools,
        remaining_steps=3,
        remaining_s=9.0,
        has_image=False,
    )
    replies = []
    for mb in (64, 0):
        policy = ModelPolicy(_backend(gemma_dir, mb), max_tokens=48)
        with collect_model_calls() as calls:
            replies.append(
                [
                    policy.request(
                        "decide",
                        policy.prompts.ask(policy.prompts.transcript(view, None, "json"), f"Decide ({i})."),
                        schema=_schema(view),
                    ).text
                    for i in range(3)
                ]
            )
        assert all(c.mode == "structured" for c in calls)
        if mb:
            assert [c.cached_tokens for c in calls][1:] and all(c.cached_tokens for c in calls[1:])
            assert all(c.prompt_profile == "full" for c in calls)
    assert replies[0] == replies[1]


def _schema(view):
    from glasses_rag.policies.model.replies import decision_schema

    return decision_schema(view.tools)


def test_a_cancelled_generation_leaves_the_cache_usable(gemma_dir):
    cached, plain = _backend(gemma_dir, 64), _backend(gemma_dir, 0)
    first, second = _turn(2)
    cached.complete(first, max_tokens=8)
    entries = len(cached.prefix_cache)
    cancel = CancelScope()
    fired = threading.Event()

    def cancel_in_forward(_m, _a):  # cancel from inside the prefill of the next call
        if not fired.is_set():
            fired.set()
            cancel.cancel()

    handle = cached.model.model.layers[1].register_forward_pre_hook(cancel_in_forward)
    try:
        with scope(cancel), pytest.raises(ReplyCancelled):
            cached.complete(second, max_tokens=8)
    finally:
        handle.remove()
    assert fired.is_set() and len(cached.prefix_cache) == entries  # nothing stored from the cancelled call
    assert cached.complete(second, max_tokens=16).text == plain.complete(second, max_tokens=16).text


def test_memory_cap_drops_the_least_recently_used(gemma_dir):
    backend = _backend(gemma_dir, 64)
    backend.complete(_turn(1)[0], max_tokens=4)
    one = backend.prefix_cache.nbytes
    assert one > 0
    backend.prefix_cache.max_bytes = int(one * 2.5)  # room for two such entries
    for i in range(4):  # unrelated prompts: no entry extends another
        backend.complete([{"role": "user", "content": f"{i} " + "unrelated words " * 20}], max_tokens=4)
        assert backend.prefix_cache.nbytes <= backend.prefix_cache.max_bytes
    assert len(backend.prefix_cache) <= 2


def test_concurrent_calls_give_the_same_outputs(gemma_dir):
    """Generations are serialised by the backend's lock; the cache they share gives each its own result."""
    cached, plain = _backend(gemma_dir, 64), _backend(gemma_dir, 0)
    prompts = _turn(3)
    want = [plain.complete(m, max_tokens=12).text for m in prompts]
    got: dict[int, str] = {}
    threads = [
        threading.Thread(target=lambda i=i: got.__setitem__(i, cached.complete(prompts[i], max_tokens=12).text))
        for i in range(len(prompts))
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert [got[i] for i in range(len(prompts))] == want
    assert cached.prefix_cache.hits >= 1


def test_an_entry_never_changes_when_a_lookup_is_extended():
    from transformers import DynamicCache

    cache = PrefixCache(1 << 20, min_tokens=1)
    kv = DynamicCache()
    kv.update(torch.ones(1, 1, 4, 2), torch.ones(1, 1, 4, 2), 0)
    cache.store([1, 2, 3, 4], kv)
    resumed, n = cache.lookup([1, 2, 9, 9, 9])
    assert n == 2 and resumed.get_seq_length() == 2
    resumed.update(torch.zeros(1, 1, 3, 2), torch.zeros(1, 1, 3, 2), 0)
    again, n = cache.lookup([1, 2, 3, 4, 5])
    assert n == 4 and bool((again.layers[0].keys == 1).all())
    assert cache.lookup([7, 8]) == (None, 0)
