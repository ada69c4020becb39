"""Helpers shared by tests: build an agent the one way the project builds it, and run a task collecting traces."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw, ImageFont

from glasses_rag.harness.benchmarks import tool_profile_named
from glasses_rag.harness.runner import RunStats, run_task
from glasses_rag.retrieval.search import NullSearch
from graph.build import build_agent
from graph.config import AgentConfig, BudgetConfig
from traces.schema import TurnTrace


def make_agent(
    policy: Any = None,
    search: Any = None,
    registry: Any = None,
    run_id: str = "test",
    budget_s: float = 10.0,
    max_steps: int = 8,
    **config: Any,
):
    """build_agent over `search` (default: no retrieval) with an AgentConfig built from the keywords (a tool
    profile named there is that benchmark's)."""
    cfg = AgentConfig(budget=BudgetConfig(budget_s=budget_s, max_steps=max_steps), warm_up=False, **config)
    return build_agent(
        cfg,
        search=search if search is not None else NullSearch(),
        policy=policy,
        registry=registry,
        run_id=run_id,
        tool_profile=tool_profile_named(cfg.tools.profile),
    )


def collect(agent: Any, convs: list, task: int, store: Any, **kw: Any) -> tuple[list[TurnTrace], RunStats]:
    """run_task, with the finished traces collected in input order."""
    got: list[TurnTrace] = []
    stats = run_task(agent, convs, task, store, on_turn=got.append, **kw)
    order: dict[str, int] = {}
    for c in convs:
        order.setdefault(c.session_id, len(order))
    got.sort(key=lambda t: (order.get(t.session_id.split("~")[0], 10**9), t.session_id, t.turn_index))
    return got, stats


def sign(*lines: str) -> Image.Image:
    """A photo of a sign: each line in large dark letters on a light board (what OCR reads)."""
    im = Image.new("RGB", (640, 360), (250, 250, 245))
    d = ImageDraw.Draw(im)
    for i, text in enumerate(lines):
        d.text((40, 120 + 90 * i), text, font=ImageFont.load_default(size=64), fill=(20, 20, 90))
    return im


class KGSearch:
    """A search backend whose image search always finds Falcon 9 (made by SpaceX) and whose web search finds nothing."""

    name = "fixed-kg"

    def image_search(self, image, k=5):
        return [
            {
                "index": 0,
                "score": 0.95,
                "url": "https://kg/0",
                "entities": [{"entity_name": "Falcon 9", "entity_attributes": {"manufacturer": "SpaceX"}}],
            }
        ]

    def web_search(self, query, k=5):
        return []


class KGAndPageSearch(KGSearch):
    """KGSearch whose web search also finds one page saying who makes Falcon 9: enough for every preset."""

    def web_search(self, query, k=5):
        return [
            {
                "page_url": "https://w/1",
                "page_name": "SpaceX",
                "score": 0.7,
                "page_snippet": "SpaceX manufactures the Falcon 9 rocket.",
            }
        ]


def model_loop_run(out: Path, run_id: str) -> list[dict]:
    """`graph.run --task 3 --limit 1` (one four-turn conversation) with the model loop against the fake server
    replaying glasses_rag.testing.scripted_model, into `out/run_id`; the request bodies the server received."""
    import pytest

    from glasses_rag.frontends.run import main
    from glasses_rag.testing.fake_model_server import FakeOpenAIServer
    from glasses_rag.testing.scripted_model import ScriptedModel

    mp = pytest.MonkeyPatch()
    mp.setenv("GLASSES_DEMO_DIR", str(Path(__file__).resolve().parents[1] / "data" / "demo"))
    try:
        with FakeOpenAIServer(responder=ScriptedModel()) as srv:
            assert (
                main(
                    [
                        "--task",
                        "3",
                        "--limit",
                        "1",
                        "--model",
                        f"openai:{srv.base_url}#fake-vlm",
                        "--out",
                        str(out),
                        "--run-id",
                        run_id,
                        "--no-progress",
                        "--no-plot",
                    ]
                )
                == 0
            )
            return list(srv.requests)
    finally:
        mp.undo()
