"""An answer's confidence from its tokens' probabilities, and the threshold chosen on held-out turns
(glasses_rag.policies.model.replies.answer_token_confidence, ModelPolicy's `answer_confidence`,
glasses_rag.training.calibrate)."""

from __future__ import annotations

import json
import logging
import math

import pytest

from glasses_rag.models.vlm.base import ChatReply, TokenLogprob
from glasses_rag.policies.model.policy import ModelPolicy
from glasses_rag.policies.model.replies import answer_token_confidence
from glasses_rag.policies.protocol import IDK
from glasses_rag.retrieval.search import NullSearch
from glasses_rag.training.calibrate import CalibrationPoint, choose_threshold, points_from_traces
from graph.agent import TurnInput
from graph.build import build_agent
from graph.config import AgentConfig


def _tokens(*pieces: tuple[str, float]) -> list[TokenLogprob]:
    return [TokenLogprob(token=t, logprob=lp) for t, lp in pieces]


def test_the_confidence_is_the_geometric_mean_of_the_answer_values_tokens_and_its_closing_quote():
    lp = _tokens(
        ('{"action": "answer", "answer": "', -0.01),  # the key and the opening quote: forced, not counted
        ("Fal", -1.0),
        ("con 9", -0.2),
        ('", "confidence": 1.0, ', -0.3),  # the token that ends the answer is counted
        ('"entity": "Falcon 9"}', -5.0),  # the rest is not
    )
    assert answer_token_confidence(lp) == pytest.approx(math.exp((-1.0 - 0.2 - 0.3) / 3))
    assert answer_token_confidence(None) is None
    assert answer_token_confidence(_tokens(('{"action": "call_tool", "tool": "ocr"}', -0.1))) is None
    escaped = _tokens(('{"answer": "', 0.0), ('say \\"hi\\"', -0.5), ('"}', -0.5))
    assert answer_token_confidence(escaped) == pytest.approx(math.exp(-0.5))


class _Backend:
    """A chat backend that answers every request with `text` and, optionally, its tokens' log-probabilities."""

    name = "fake"
    supports_structured = True
    supports_native_tools = False
    supports_images = False

    def __init__(self, text: str, logprobs: list[TokenLogprob] | None):
        self.text, self.logprobs = text, logprobs

    def complete(self, messages, tools=None, max_tokens=512, temperature=0.0, response_schema=None) -> ChatReply:
        return ChatReply(text=self.text, logprobs=self.logprobs, finish_reason="stop", mode="structured")


ANSWER = '{"action": "answer", "answer": "Falcon 9", "confidence": 1.0, "entity": "", "rationale": ""}'
ANSWER_TOKENS = _tokens((ANSWER[:32], -0.01), ("Falcon 9", -2.0), (ANSWER[40:], -0.5))


def _turn(policy: ModelPolicy, abstain_below: float):
    config = AgentConfig(warm_up=False, self_check="off", abstain_below=abstain_below)
    agent = build_agent(config, policy=policy, search=NullSearch(), task=1, run_id="t")
    return agent.run_turn(TurnInput(task=1, session_id="s", interaction_id="i", question="what rocket is this?"))


def test_a_token_confidence_below_the_threshold_makes_the_answer_i_dont_know_and_the_trace_says_why():
    policy = ModelPolicy(_Backend(ANSWER, ANSWER_TOKENS), answer_confidence="tokens")
    conf = math.exp((-2.0 - 0.5) / 2)
    low = _turn(policy, abstain_below=conf + 0.01)
    answer_event = next(s for s in low.steps if s.node == "answer")
    assert answer_event.answer == "Falcon 9" and answer_event.confidence == pytest.approx(conf, abs=1e-4)
    assert answer_event.confidence_from == "tokens"
    assert low.answer == IDK
    assert "draft confidence" in next(s for s in low.steps if s.node == "verdict").reason
    assert _turn(policy, abstain_below=conf - 0.01).answer == "Falcon 9"
    # the same reply with the written confidence (1.0) keeps the answer at the same threshold
    written = ModelPolicy(_Backend(ANSWER, ANSWER_TOKENS))
    kept = _turn(written, abstain_below=conf + 0.01)
    assert kept.answer == "Falcon 9" and next(s for s in kept.steps if s.node == "answer").confidence_from is None


def test_a_backend_without_log_probabilities_keeps_the_written_confidence_and_says_so_once(caplog):
    policy = ModelPolicy(_Backend(ANSWER, None), answer_confidence="tokens")
    with caplog.at_level(logging.WARNING):
        assert _turn(policy, abstain_below=0.5).answer == "Falcon 9"
        _turn(policy, abstain_below=0.5)
    assert sum("no token log-probabilities" in r.getMessage() for r in caplog.records) == 1


def _points(rows: list[tuple[float | None, int]], abstained: int = 0) -> list[CalibrationPoint]:
    return [
        CalibrationPoint(turn=str(i), confidence=c, answered=a, abstained=abstained) for i, (c, a) in enumerate(rows)
    ]


def test_the_threshold_keeps_the_answers_above_the_best_cut():
    th = choose_threshold(_points([(0.9, 1), (0.7, 1), (0.6, -1), (0.4, 1), (0.2, -1), (None, 0)]))
    # the lowest kept confidence, not halfway to the first dropped one (a threshold a kept answer supports)
    assert th.abstain_below == pytest.approx(0.7) and th.kept == 2 and th.answered == 5 and th.turns == 6
    assert th.truthfulness == pytest.approx(2 / 6) and th.truthfulness_without == pytest.approx(1 / 6)


def test_the_threshold_keeps_nothing_when_no_answer_helps_and_everything_when_all_do():
    # no answer kept: not halfway to 1.0 (a more confident model would pass it unsupported) but 1.0, said so
    none = choose_threshold(_points([(0.9, -1), (0.5, -1)]))
    assert none.abstain_below == 1.0 and none.kept == 0 and none.truthfulness == 0.0 and not none.supported
    # every answer kept: the lowest of them, not half of it (no answer below 0.5 was ever seen kept)
    every = choose_threshold(_points([(0.9, 1), (0.5, 1)]))
    assert every.abstain_below == pytest.approx(0.5) and every.kept == 2 and every.truthfulness == 1.0
    tie = choose_threshold(_points([(0.9, 1), (0.8, -1), (0.7, 1)]))  # +1 after the first and after all three
    assert tie.kept == 1, "on a tie the fewest answers are kept"
    # a question whose answer is "I don't know": abstaining there scores 1, answering it does not
    idk_right = choose_threshold(_points([(0.9, -1)], abstained=1))
    assert idk_right.kept == 0 and idk_right.truthfulness == 1.0
    assert choose_threshold([]).turns == 0


def test_points_rescore_a_draft_that_a_threshold_replaced():
    policy = ModelPolicy(_Backend(ANSWER, ANSWER_TOKENS), answer_confidence="tokens")
    trace = _turn(policy, abstain_below=0.99)
    trace.ground_truth, trace.score = "Falcon 9", "missing"
    from glasses_rag.crag_mm.scoring import make_judge, make_truncator

    (point,) = points_from_traces([trace], make_judge("rule"), make_truncator(None))
    assert point.answered == 1 and point.abstained == 0 and point.confidence == pytest.approx(0.2865, abs=1e-3)
    data = json.loads(trace.model_dump_json())
    assert any(s.get("confidence_from") == "tokens" for s in data["steps"])


@pytest.mark.parametrize("stream", [False, True])
def test_a_servers_log_probabilities_give_the_answers_confidence_streamed_or_not(stream):
    """A model config with `answer_confidence: tokens` asks an OpenAI-compatible server for `logprobs` and reads
    the answer's tokens from `choices[0].logprobs.content` (vLLM streams one entry per chunk)."""
    from glasses_rag.policies.model.policy import make_model_policy
    from glasses_rag.policies.protocol import PolicyView
    from glasses_rag.testing.fake_model_server import FakeOpenAIServer

    reply = FakeOpenAIServer.text_reply(ANSWER)
    reply["choices"][0]["logprobs"] = {"content": [t.model_dump() for t in ANSWER_TOKENS]}
    with FakeOpenAIServer() as srv:
        srv.push(reply)
        policy = make_model_policy(
            f"openai:{srv.base_url}#fake-vlm",
            max_retries=0,
            decision_mode="json_text",
            answer_confidence="tokens",
            stream=stream,
        )
        view = PolicyView(
            task=1, question="What rocket is this?", has_image=False, tools=[], remaining_steps=2, remaining_s=30.0
        )
        decision = policy.decide(view)
        assert srv.requests[0]["logprobs"] is True and bool(srv.requests[0].get("stream")) is stream
    # the server's raw log-probabilities (vLLM's default), and the answer says so
    assert decision.answer is not None and decision.answer.confidence_from == "tokens-raw"
    assert decision.answer.confidence == pytest.approx(math.exp(-1.25), abs=1e-4)


def test_malformed_log_probabilities_from_a_server_are_none():
    from glasses_rag.models.vlm.openai_server import token_logprobs

    assert token_logprobs(None) is None and token_logprobs({"content": []}) is None
    assert token_logprobs({"content": [{"token": "a", "logprob": "high"}]}) is None
    assert token_logprobs({"content": [{"token": "a", "logprob": float("nan")}]}) is None
    assert [t.logprob for t in token_logprobs({"content": [{"token": "a", "logprob": -9999.0}]})] == [-9999.0]
    assert [t.logprob for t in token_logprobs({"content": [{"token": "a", "logprob": 3}]})] == [0.0]


def test_an_answer_the_grammar_stopped_at_its_bound_is_i_dont_know_a_free_reply_is_not():
    """A small model repeating a digit ("1000...") writes to the answer's bound, confidently by its tokens; a
    structured reply whose answer fills the bound was cut there, not finished. An unconstrained reply may be long."""
    from glasses_rag.policies.model.replies import ANSWER_CHARS

    long = "1" + "0" * (ANSWER_CHARS - 1)
    text = json.dumps({"action": "answer", "answer": long, "confidence": 1.0, "entity": "", "rationale": ""})
    cut = _turn(ModelPolicy(_Backend(text, None)), abstain_below=0.0)
    assert cut.answer == IDK and "bound" in next(s for s in cut.steps if s.node == "answer").rationale

    class _Free(_Backend):
        supports_structured = False

        def complete(self, *a, **kw) -> ChatReply:
            return ChatReply(text=self.text, finish_reason="stop", mode=None)

    assert _turn(ModelPolicy(_Free(text, None)), abstain_below=0.0).answer == long


class _SourcedBackend(_Backend):
    def __init__(self, text: str, logprobs: list[TokenLogprob] | None, source: str):
        super().__init__(text, logprobs)
        self.source = source

    def complete(self, messages, tools=None, max_tokens=512, temperature=0.0, response_schema=None) -> ChatReply:
        reply = super().complete(messages, tools, max_tokens, temperature, response_schema)
        return reply.model_copy(update={"logprobs_from": self.source})


def test_the_answer_says_which_probabilities_its_confidence_used_and_calibration_keeps_them_apart():
    """In-process decoding reads the grammar-masked distribution, a server the raw one: the answer event says
    which, the threshold records it, and a run mixing the two is refused (a threshold does not carry over)."""
    from glasses_rag.training.calibrate import probabilities_of

    masked = _turn(ModelPolicy(_SourcedBackend(ANSWER, ANSWER_TOKENS, "masked"), answer_confidence="tokens"), 0.0)
    raw = _turn(ModelPolicy(_SourcedBackend(ANSWER, ANSWER_TOKENS, "raw"), answer_confidence="tokens"), 0.0)
    assert next(s for s in masked.steps if s.node == "answer").confidence_from == "tokens-masked"
    assert next(s for s in raw.steps if s.node == "answer").confidence_from == "tokens-raw"
    assert probabilities_of([masked, masked]) == "tokens-masked" and probabilities_of([raw]) == "tokens-raw"
    with pytest.raises(ValueError, match="calibrate each backend on its own run"):
        probabilities_of([masked, raw])
    assert choose_threshold(_points([(0.9, 1)]), "tokens-raw").probabilities == "tokens-raw"


def test_the_in_process_backend_reports_masked_log_probabilities(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("xgrammar")
    from glasses_rag.models.vlm import make_backend, parse_spec
    from glasses_rag.testing.tiny_models import save_tiny_gemma3

    backend = make_backend(parse_spec(f"transformers:{save_tiny_gemma3(tmp_path / 'g')}"))
    schema = {"name": "a", "schema": {"type": "object", "properties": {"a": {"type": "boolean"}}, "required": ["a"]}}
    reply = backend.complete([{"role": "user", "content": "yes?"}], max_tokens=16, response_schema=schema)
    assert reply.logprobs and reply.logprobs_from == "masked"
