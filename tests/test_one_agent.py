"""One agent: the CLI and the starter-kit adapter (driven as the official harness drives it) build it the same way,
see the same pixels and history, and give the same answers to the same questions."""

from __future__ import annotations

import json

from glasses_rag.crag_mm.dataset import decode_image, load_all
from glasses_rag.crag_mm.demo import ensure_demo
from glasses_rag.crag_mm.scoring import make_truncator
from glasses_rag.frontends.run import main
from glasses_rag.frontends.starter_kit import GlassesRAGAgent
from glasses_rag.retrieval.local_search import LocalSearchIndex


def harness_image(conv):
    """What the official batch iterator hands an agent: egocentric frames (no image_url) resized to 960x1280."""
    image, _ = decode_image(conv.image)
    return image.resize((960, 1280)) if image is not None and conv.image_url is None else image


def harness_answers(agent, conversations) -> dict[str, str]:
    """The official loop: one turn per conversation per batch; history holds the agent's 75-token-truncated answers."""
    truncate = make_truncator(None).truncate
    answers: dict[str, str] = {}
    for conv in conversations:
        history: list[dict] = []
        image = harness_image(conv)
        for turn in conv.turns:
            out = agent.batch_generate_response([turn.query], [image], [history])[0]
            answers[turn.interaction_id] = out
            history = [
                *history,
                {"role": "user", "content": turn.query},
                {"role": "assistant", "content": truncate(out)},
            ]
    return answers


def cli_answers(tmp_path, task: int, limit: int) -> dict[str, str]:
    assert (
        main(
            [
                "--task",
                str(task),
                "--limit",
                str(limit),
                "--out",
                str(tmp_path),
                "--run-id",
                f"t{task}",
                "--no-progress",
                "--no-plot",
            ]
        )
        == 0
    )
    return {
        t["interaction_id"]: t["answer"]
        for t in (json.loads(p.read_text()) for p in (tmp_path / f"t{task}").glob("*__*.json"))
    }


def test_the_cli_and_the_starter_kit_give_the_same_answers(tmp_path):
    demo = ensure_demo()
    single, _ = load_all(demo.single_turn, limit=6)
    multi, _ = load_all(demo.multi_turn, limit=1)
    index = LocalSearchIndex(demo.root)  # what a harness built over the same index would hand the adapter
    adapter = GlassesRAGAgent(index, task=2)
    assert adapter.config == adapter.agent.config and adapter.agent.fingerprint
    got = harness_answers(adapter, single)
    assert got == cli_answers(tmp_path, 2, 6)
    run = json.loads((tmp_path / "t2" / "run.json").read_text())
    assert run["config_fingerprint"] == adapter.agent.fingerprint  # literally the same configuration
    from_run = GlassesRAGAgent(index, task=2, config=tmp_path / "t2" / "run.json")  # a CLI run's config, reused
    assert from_run.agent.fingerprint == run["config_fingerprint"]
    adapter3 = GlassesRAGAgent(index, task=3)
    got3 = harness_answers(adapter3, multi)
    assert got3 == cli_answers(tmp_path, 3, 1)
    assert {inp.task for inp in adapter3.last_inputs} == {3}  # multi-turn conversations run as task 3


def test_the_cli_defaults_are_the_agent_config_defaults():
    """No option means the library's default agent: the CLI does not carry its own copy of the thresholds."""
    from glasses_rag.frontends.run import build_parser, resolve_benchmark
    from glasses_rag.harness.session import agent_config_from_args
    from glasses_rag.policies.rules.rule_planner import RulePlannerConfig
    from graph.config import AgentConfig

    parser = build_parser()
    config = agent_config_from_args(resolve_benchmark(parser, parser.parse_args(["--task", "2"])))
    assert config.planner == RulePlannerConfig()
    assert config.abstain_below == AgentConfig.model_fields["abstain_below"].default
    assert config.budget == AgentConfig.model_fields["budget"].default_factory()  # type: ignore[misc]
