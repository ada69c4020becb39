"""RL on existing engines. Contract tests that always run: the verl agent loop's rollout against a fake server
manager (token ids in, token ids and log-probabilities out, the CRAG-MM score as `reward_score`), and the Agent
Lightning runner against a fake gateway (its URL and rollout ids from the environment, never streaming, retrying
on 429, posting the reward). Tests against the real libraries run where they import (verl 0.9: transformers >= 5.5;
Agent Lightning 1.0: Python >= 3.12)."""

from __future__ import annotations

import asyncio
import json
import os
from types import SimpleNamespace

import pytest
from support import KGSearch

from glasses_rag.models.vlm.base import SampledTokens
from glasses_rag.training.engines.turns import TurnSetup, pack

CALL = '{"action": "call_tool", "tool": "image_search", "arguments": {"k": 3}, "rationale": ""}'
ANSWER = '{"action": "answer", "answer": "SpaceX", "confidence": 0.9, "entity": "Falcon 9", "rationale": ""}'
ROW = {
    "task": 1,
    "session_id": "s0",
    "interaction_id": "s0-t0",
    "question": "who makes this rocket?",
    "ground_truth": "SpaceX",
}


class FakeServerManager:
    """verl's server manager as the agent loop calls it: `generate(request_id, *, prompt_ids, sampling_params,
    image_data)` -> TokenOutput(token_ids, log_probs, stop_reason); each reply the next scripted text's token ids
    and made-up log-probabilities."""

    def __init__(self, tokenizer, texts: list[str]):
        self.tokenizer, self.texts, self.calls = tokenizer, list(texts), []

    async def generate(self, request_id, *, prompt_ids, sampling_params, image_data=None, **kw):
        await asyncio.sleep(0)
        self.calls.append({"request_id": request_id, "prompt_ids": list(prompt_ids), "sampling": dict(sampling_params)})
        text = self.texts.pop(0)
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"] + [self.tokenizer.eos_token_id]
        logprobs = [-0.01 * (i % 7 + 1) for i in range(len(ids))]
        self.calls[-1].update(token_ids=ids, log_probs=logprobs)
        return SimpleNamespace(token_ids=ids, log_probs=logprobs, stop_reason="completed")


@pytest.fixture
def tokenizer():
    from glasses_rag.testing.tiny_models import gemma_tokenizer

    return gemma_tokenizer()


def _rollout(tokenizer, texts: list[str], ground_truth: str = "SpaceX"):
    from glasses_rag.training.engines.verl_loop import VerlTurnRollout

    manager = FakeServerManager(tokenizer, texts)
    setup = TurnSetup(tools=["image_search"], budget_s=60, max_steps=2, max_tokens=256)
    core = VerlTurnRollout(manager, tokenizer, None, setup, search=KGSearch())
    row = {**ROW, "ground_truth": ground_truth}
    sampling = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}
    out = asyncio.run(core.run(sampling, raw_prompt=[], extra_info={"glasses_rag": row}))
    return out, manager


def test_the_verl_rollout_gives_the_sampled_ids_their_log_probabilities_and_the_crag_mm_score(tokenizer):
    out, manager = _rollout(tokenizer, [CALL, ANSWER])
    assert len(manager.calls) == 2 and out.extra_fields["decisions"] == 2 and out.reward_score == 1.0
    first = manager.calls[0]
    assert out.prompt_ids == first["prompt_ids"]  # the prompt exactly as the server got it
    # every sampling request: verl's own sampling values, log-probabilities asked for, the decision's JSON schema
    assert all(c["sampling"]["temperature"] == 1.0 and c["sampling"]["logprobs"] is True for c in manager.calls)
    assert all("json" in c["sampling"]["structured_outputs"] for c in manager.calls)
    assert len({c["request_id"] for c in manager.calls}) == 1  # one trajectory, one server (its prefix cache)
    sampled = [i for i, m in zip(out.response_ids, out.response_mask) if m == 1]
    packed = out.extra_fields["packed"]
    assert sampled == sum((c["token_ids"] for c in manager.calls[:packed]), [])  # nothing re-tokenized
    logprobs = [lp for lp, m in zip(out.response_logprobs, out.response_mask) if m == 1]
    assert logprobs == sum((c["log_probs"] for c in manager.calls[:packed]), [])
    assert len(out.response_ids) == len(out.response_mask) == len(out.response_logprobs)


def test_a_wrong_answer_is_rewarded_minus_one_and_a_search_penalty_counts_each_search(tokenizer):
    out, _ = _rollout(tokenizer, [CALL, ANSWER], ground_truth="Boeing")
    assert out.reward_score == -1.0 and out.extra_fields["score"] == "incorrect"
    from glasses_rag.training.engines.turns import turn_reward

    trace = SimpleNamespace(score="correct", steps=[SimpleNamespace(search="image"), SimpleNamespace(search=None)])
    assert turn_reward(trace, penalty=0.1) == pytest.approx(0.9)


def test_decisions_pack_into_one_sequence_while_each_prompt_continues_the_last():
    a = SampledTokens(prompt_ids=[1, 2], completion_ids=[3, 4], logprobs=[-0.1, -0.2], logprob_source="raw")
    b = SampledTokens(prompt_ids=[1, 2, 3, 4, 9], completion_ids=[5], logprobs=[-0.3], logprob_source="raw")
    c = SampledTokens(prompt_ids=[1, 7], completion_ids=[8], logprobs=[-0.4], logprob_source="raw")
    p = pack([a, b, c])
    assert p.prompt_ids == [1, 2] and p.response_ids == [3, 4, 9, 5] and p.response_mask == [1, 1, 0, 1]
    assert p.response_logprobs == [-0.1, -0.2, 0.0, -0.3] and (p.packed, p.decisions) == (2, 3)


def test_the_verl_agent_loop_against_the_real_library(tokenizer):
    """Where verl imports: the loop is registered under `glasses_rag` with a target hydra can import, and a rollout
    is a valid AgentLoopOutput whose reward lands on the last response token (verl's rm_scores)."""
    pytest.importorskip("verl.experimental.agent_loop", reason="verl 0.9 needs transformers >= 5.5 (its own env)")
    import hydra
    from verl.experimental.agent_loop.agent_loop import (
        AgentLoopBase,
        AgentLoopMetrics,
        AgentLoopOutput,
        _agent_loop_registry,
    )

    from glasses_rag.training.engines.verl_loop import GlassesRagAgentLoop

    assert issubclass(GlassesRagAgentLoop, AgentLoopBase)
    assert hydra.utils.get_class(_agent_loop_registry["glasses_rag"]["_target_"]) is GlassesRagAgentLoop
    out, _ = _rollout(tokenizer, [CALL, ANSWER])
    fields = out.model_dump(exclude={"reward_score"})
    loop_out = AgentLoopOutput(**fields, reward_score=out.reward_score, metrics=AgentLoopMetrics())
    scores = loop_out.as_dict()["rm_scores"]
    assert float(scores[-1]) == 1.0 and float(scores[:-1].abs().sum()) == 0.0


# ---- Agent Lightning ---------------------------------------------------------------------------------------------


def _agl_env(gw, rollout: str = "r-1", key: str = "k3y") -> dict[str, str]:
    return {
        "AGL_OPENAI_BASE_URL": f"{gw.url}/proxy/rollout/{rollout}/attempt/0/mode/train/openai/v1",
        "AGL_EVENT_URL": f"{gw.url}/api/rollouts/{rollout}/attempt/0/events",
        "AGL_KEY": key,
        "GLASSES_RAG_ROW": json.dumps(ROW),
        "GLASSES_RAG_SETUP": json.dumps({"tools": ["image_search"], "budget_s": 60, "max_steps": 2}),
    }


def test_the_agent_lightning_runner_uses_the_gateway_never_streams_retries_429_and_posts_the_reward(monkeypatch):
    from glasses_rag.testing.fake_agl_gateway import FakeAglGateway
    from glasses_rag.training.engines import agent_lightning

    with FakeAglGateway(key="k3y", replies=[CALL, ANSWER], paused=2) as gw:
        for k, v in _agl_env(gw).items():
            monkeypatch.setenv(k, v)
        assert agent_lightning.main(search=KGSearch()) == 0
    assert gw.refused_429 == 2  # paused twice (429 + Retry-After), then served: the same request again
    chats = [r for r in gw.requests if r["path"].endswith("/chat/completions")]
    assert len(chats) == 4 and all(not r["body"].get("stream") for r in chats)
    assert all(r["path"].startswith("/proxy/rollout/r-1/attempt/0/mode/train/openai/v1") for r in chats)
    assert all(r["auth"] == "Bearer k3y" for r in gw.requests)
    model_events = [e for e in gw.events["r-1"] if e["event_type"] == "model_request"]
    assert len(model_events) == 2 and all(e["data"]["response"]["choices"][0]["token_ids"] for e in model_events)
    (reward,) = [e for e in gw.events["r-1"] if e["event_type"] == "reward"]
    assert reward["data"]["value"] == 1.0 and reward["data"]["source"] == "agent"


def test_the_agent_lightning_runner_says_what_is_missing(monkeypatch):
    from glasses_rag.training.engines import agent_lightning

    monkeypatch.delenv("AGL_OPENAI_BASE_URL", raising=False)
    with pytest.raises(SystemExit, match="AGL_OPENAI_BASE_URL"):
        agent_lightning.main()
    monkeypatch.setenv("AGL_OPENAI_BASE_URL", "http://gw/proxy/nothing/openai/v1")
    monkeypatch.setenv("AGL_EVENT_URL", "http://gw/api/rollouts/r/attempt/0/events")
    monkeypatch.setenv("GLASSES_RAG_ROW", json.dumps(ROW))
    with pytest.raises(SystemExit, match="rollout"):
        agent_lightning.main()


@pytest.mark.skipif(not os.environ.get("AGL_PYTHON"), reason="AGL_PYTHON: a Python >= 3.12 with agentlightning")
def test_the_agent_lightning_runner_against_the_real_gateway(tmp_path):
    """The real Agent Lightning 1.0 gateway (run by AGL_PYTHON) in front of the vLLM emulation: the runner's model
    requests are recorded with their token ids and its reward is stored, as the trainer reads them (triplets)."""
    from glasses_rag.testing.agl_real_check import run_real_gateway_check

    result = run_real_gateway_check(os.environ["AGL_PYTHON"], tmp_path, [CALL, ANSWER], KGSearch())
    assert result["reward"] == 1.0 and result["model_requests"] == 2
    assert all(t["prompt_token_ids"] and t["response_token_ids"] for t in result["triplets"])
