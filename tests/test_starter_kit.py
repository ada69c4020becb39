"""GlassesRAGAgent driven the way the official CRAG-MM starter kit's local_evaluation.py drives an agent.

The official evaluator batches TURNS: each batch holds at most one turn of each conversation (turn N+1
only in a later batch than turn N), and message_histories carry the agent's OWN earlier responses
(cut to 75 tokens), not the ground truth. `official_generate` below reproduces that loop.
"""

from __future__ import annotations

from collections import deque

import pytest

from glasses_rag.crag_mm.dataset import decode_image, load_all
from glasses_rag.crag_mm.demo import ensure_demo
from glasses_rag.frontends.starter_kit import (
    IDK,
    GlassesRAGAgent,
    NullSearch,
    OfficialPipelineSearch,
    answers_match,
    conversation_key,
    history_pairs,
    pipeline_has_web,
)
from glasses_rag.retrieval.local_search import LocalSearchIndex
from traces.schema import TurnTrace


@pytest.fixture(scope="module")
def demo():
    return ensure_demo()


@pytest.fixture(scope="module")
def index(demo):
    return LocalSearchIndex(demo.root)


def harness_image(conv):
    """The image as the official batch iterator hands it to an agent: decoded, egocentric frames resized to 960x1280."""
    image, _ = decode_image(conv.image)
    return image.resize((960, 1280)) if image is not None and conv.image_url is None else image


@pytest.fixture(scope="module")
def convs(demo):
    conversations, _ = load_all(demo.multi_turn, limit=3)
    return [c.model_copy(update={"image": harness_image(c)}) for c in conversations]


class FakeOfficialPipeline:
    """Calling convention of cragmm_search's UnifiedSearchPipeline: pipe(image|text, k=5) -> official dicts;
    `web_search` is a bool telling whether it was built with a web index (text raises without one)."""

    def __init__(self, index: LocalSearchIndex, web: bool = True):
        self.index = index
        self.web_search = web
        self.calls: list[str] = []

    def __call__(self, x, k: int = 5):
        if isinstance(x, str):
            self.calls.append("text")
            if not self.web_search:
                raise ValueError("Text input is not supported as web search is not enabled.")
            return self.index.web_search(x, k=k)
        self.calls.append("image")
        return self.index.image_search(x, k=k)


def _truncate75(text: str) -> str:
    return " ".join(text.split()[:75])  # stands in for the evaluator's 75-token Llama truncation


def official_generate(agent, conversations, use_ground_truth: bool = False):
    """The official generation loop: turn batches over conversations, histories from agent responses."""
    batch_size = int(min(16, max(1, agent.get_batch_size())))
    next_turn = {c.session_id: 0 for c in conversations}
    queue = deque(conversations)
    response_map: dict[str, str] = {}
    batches = []
    while queue:
        current = [queue.popleft() for _ in range(min(batch_size, len(queue)))]
        queries, images, histories, ids = [], [], [], []
        for c in current:
            t = next_turn[c.session_id]
            hist = []
            for j in range(t):
                prev = c.turns[j]
                shown = c.answers[j] if use_ground_truth else response_map[prev.interaction_id]
                hist += [{"role": "user", "content": prev.query}, {"role": "assistant", "content": shown}]
            queries.append(c.turns[t].query)
            images.append(c.image)
            histories.append(hist)
            ids.append(c.turns[t].interaction_id)
        answers = agent.batch_generate_response(queries, images, histories)
        assert isinstance(answers, list) and len(answers) == len(queries)
        batches.append((queries, histories, answers, list(agent.last_inputs), [c.session_id for c in current]))
        for iid, a in zip(ids, answers):
            response_map[iid] = _truncate75(a)
        for c in reversed(current):
            next_turn[c.session_id] += 1
            if next_turn[c.session_id] < len(c.turns):
                queue.appendleft(c)
    return response_map, batches


def test_official_loop_with_local_index(index, convs, tmp_path):
    agent = GlassesRAGAgent(index, budget_s=10.0, batch_size=2, trace_dir=tmp_path, run_id="sk")
    assert 1 <= agent.get_batch_size() <= 16 and agent.get_batch_size() == 2
    assert agent.web_enabled and agent.task_for([]) == 2 and agent.task_for([object()]) == 3
    responses, batches = official_generate(agent, convs)
    assert len(responses) == sum(len(c.turns) for c in convs)
    assert all(isinstance(a, str) and a.strip() for a in responses.values())
    # never two turns of one conversation in one batch; history = the agent's own earlier answers
    for _queries, histories, _answers, inputs, sids in batches:
        assert len(set(sids)) == len(sids)
        assert len({inp.session_id for inp in inputs}) == len(inputs)  # the adapter told them apart too
        for h, inp in zip(histories, inputs):
            assert inp is not None and len(inp.history) == len(h) // 2
            assert inp.task == (3 if h else 2)
            for turn, (q, a) in zip(inp.history, history_pairs(h)):
                assert (turn.question, turn.answer) == (q, a)
    # the entity the agent itself recognised is carried into later turns' history
    first = convs[0]
    t0 = TurnTrace.model_validate_json(
        (tmp_path / "sk")
        .joinpath(next(p.name for p in (tmp_path / "sk").glob("*__00.json") if _q(p) == first.turns[0].query))
        .read_text()
    )
    later = [
        inp
        for _, _, _, inps, _ in batches
        for inp in inps
        if inp and inp.history and inp.history[0].question == first.turns[0].query
    ]
    assert later, "no later turn of the first conversation"
    assert all(inp.history[0].entity == t0.entity for inp in later)
    assert len(list((tmp_path / "sk").glob("*.json"))) == len(responses)


def _q(path) -> str:
    return TurnTrace.model_validate_json(path.read_text()).question


def test_ground_truth_history_keeps_text_but_no_foreign_entity(index, convs):
    agent = GlassesRAGAgent(index, batch_size=4)
    _, batches = official_generate(agent, convs[:2], use_ground_truth=True)
    for _queries, histories, _answers, inputs, _ in batches:
        for h, inp in zip(histories, inputs):
            assert [(t.question, t.answer) for t in inp.history] == history_pairs(h)  # the harness's text is kept
    # a history answer the agent did not give never inherits the agent's remembered entity
    c = convs[0]
    first = agent.batch_generate_response([c.turns[0].query], [c.image], [[]])[0]
    entity = agent.last_traces[0].entity
    fake = [{"role": "user", "content": c.turns[0].query}, {"role": "assistant", "content": "Something else entirely"}]
    agent.batch_generate_response([c.turns[1].query], [c.image], [fake])
    assert agent.last_inputs[0].history[0].entity is None
    own = [{"role": "user", "content": c.turns[0].query}, {"role": "assistant", "content": first}]
    agent.batch_generate_response([c.turns[1].query], [c.image], [own])
    assert agent.last_inputs[0].history[0].entity == entity


def test_fake_official_pipeline_and_task_inference(index, convs):
    pipe = FakeOfficialPipeline(index, web=True)
    agent = GlassesRAGAgent(pipe, batch_size=3)
    assert (
        isinstance(agent.search.backend, OfficialPipelineSearch) and agent.web_enabled
    )  # behind the search cache, as in the CLI
    c = convs[0]
    out = agent.batch_generate_response([c.turns[0].query, "what is this?"], [c.image, convs[1].image], [[], []])
    assert len(out) == 2 and all(isinstance(a, str) for a in out)
    assert "image" in pipe.calls
    # official task-1 pipeline (no web index): web search is off, task 1
    pipe1 = FakeOfficialPipeline(index, web=False)
    assert pipeline_has_web(pipe1) is False
    agent1 = GlassesRAGAgent(pipe1, batch_size=2)
    assert not agent1.web_enabled and agent1.task_for([object()]) == 1
    agent1.batch_generate_response(["what does nasa stand for?"], [c.image], [[]])
    assert "text" not in pipe1.calls and agent1.last_inputs[0].task == 1
    assert agent1.search.web_search("nasa") == []
    # `task` forces it either way
    assert GlassesRAGAgent(pipe, task=1).task_for([]) == 1
    assert GlassesRAGAgent(pipe1, task=2).web_enabled
    assert isinstance(GlassesRAGAgent(None).search.backend, NullSearch)


def test_failing_item_gives_idk_without_affecting_others(index, convs, monkeypatch):
    agent = GlassesRAGAgent(index, batch_size=4)
    real = agent.agent.run_turn

    def flaky(inp):
        if "explode" in inp.question:
            raise RuntimeError("boom")
        return real(inp)

    monkeypatch.setattr(agent.agent, "run_turn", flaky)

    class BrokenImage:  # building the turn fails for this item
        def tobytes(self):
            raise OSError("truncated")

        def load(self):
            raise OSError("truncated")

    c0, c1 = convs[0], convs[1]
    queries = [c0.turns[0].query, "please explode", c1.turns[0].query, "what is this?"]
    images = [c0.image, c0.image, c1.image, BrokenImage()]
    ref = GlassesRAGAgent(index, batch_size=4).batch_generate_response(
        [queries[0], queries[2]], [images[0], images[2]], [[], []]
    )
    out = agent.batch_generate_response(queries, images, [[], [], [], []])
    assert len(out) == 4 and out[1] == IDK
    assert isinstance(out[3], str) and out[3]  # a broken image still gets an answer (the turn runs without it)
    assert [out[0], out[2]] == ref
    assert agent.last_traces[1] is None and agent.last_traces[0] is not None


def test_time_budget_abandons_a_hung_item(index, convs, monkeypatch):
    import threading
    import time as _t

    agent = GlassesRAGAgent(index, batch_size=2, budget_s=0.5, grace_s=0.2)
    real, release = agent.agent.run_turn, threading.Event()

    def hanging(inp):
        if "hang" in inp.question:
            release.wait(10)
            raise TimeoutError("released")
        return real(inp)

    monkeypatch.setattr(agent.agent, "run_turn", hanging)
    t0 = _t.perf_counter()
    try:
        out = agent.batch_generate_response(
            ["hang forever", "what is this?"], [convs[0].image, convs[0].image], [[], []]
        )
        elapsed = _t.perf_counter() - t0
    finally:
        release.set()  # let the abandoned worker end
    assert out[0] == IDK and isinstance(out[1], str) and out[1]
    assert elapsed < 3.0


def test_history_helpers():
    msgs = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": [{"type": "image"}]},
        {"role": "user", "content": "what is this?"},
        {"role": "assistant", "content": "Falcon 9"},
        {"role": "user", "content": [{"type": "text", "text": "who builds it?"}]},
        {"role": "assistant", "content": "SpaceX"},
    ]
    assert history_pairs(msgs) == [("what is this?", "Falcon 9"), ("who builds it?", "SpaceX")]
    long = "The Falcon 9 is a reusable two-stage rocket designed and built by SpaceX " * 10
    assert answers_match(long, _truncate75(long)) and not answers_match("Falcon 9", "Eileen Collins")
    assert conversation_key(None, "q2", [{"role": "user", "content": "q1"}]) == conversation_key(None, "q1", [])
