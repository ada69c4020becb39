"""A pipeline preset's answer context with a model: the reranker's kept list only, within the paper's token
budgets, counted with a local tokenizer or the named estimate (glasses_rag/policies/presets/context.py)."""

from __future__ import annotations

import json

from PIL import Image
from support import KGSearch
from test_presets import ANSWER_MARKERS

from glasses_rag.policies.presets.context import ESTIMATE, TokenCounter, answer_view, cut_hit
from glasses_rag.policies.presets.schema import ContextSpec
from glasses_rag.policies.protocol import PolicyView, StepSummary
from glasses_rag.testing.fake_model_server import FakeOpenAIServer as F
from glasses_rag.testing.scripted_model import ScriptedModel
from graph.agent import TurnInput
from graph.build import build_agent
from graph.config import AgentConfig, BudgetConfig
from tools.base import Hit

QUESTION = "who manufactures this rocket?"


class ManyPages(KGSearch):
    """One KG entity and 50 long web pages, each naming itself (page-07 ...)."""

    name = "many-pages"

    def web_search(self, query, k=5):
        return [
            {
                "page_url": f"https://w/{i}",
                "page_name": f"page-{i:02d}",
                "score": 0.9 - i / 100,
                "page_snippet": f"page-{i:02d} says SpaceX manufactures the Falcon 9. " + "filler text " * 150,
            }
            for i in range(min(k, 50))
        ]


def answer_request(preset: str) -> tuple[str, object]:
    with F(responder=ScriptedModel()) as srv:
        config = AgentConfig(
            preset=preset, policy=f"openai:{srv.base_url}#fake-vlm", warm_up=False, budget=BudgetConfig(budget_s=60)
        )
        tr = build_agent(config, search=ManyPages(), run_id="t").run_turn(
            TurnInput(task=2, session_id="s", interaction_id="i", question=QUESTION, image=Image.new("RGB", (64, 48)))
        )
        bodies = [json.dumps(r) for r in srv.requests]
    return next(b for b in bodies if ANSWER_MARKERS[preset] in b), tr


def test_unsw_answer_context_is_the_rerankers_kept_list_not_the_raw_results():
    body, tr = answer_request("unsw-verify")
    rerank = next(s for s in tr.tool_calls() if s.tool == "reranker")
    kept = {h.title or h.entity_name for h in rerank.results}
    assert 1 <= len(kept) <= 3
    shown = {f"page-{i:02d}" for i in range(50) if f"page-{i:02d} says" in body}
    assert shown <= kept and body.count("[Info ") == len(kept)  # eq. 7: the kept snippets only, each tagged
    assert "Result of" not in body and "Tools (name(arguments)" not in body  # no planner transcript, no tool list
    answer = next(s for s in tr.steps if s.node == "answer")
    assert "answer context:" in answer.rationale and "reranker's kept list" in answer.rationale


def test_mmrag_baseline_fills_8k_web_tokens_not_5_items_of_300_characters():
    body, tr = answer_request("mmrag-baseline")
    shown = [i for i in range(50) if f"page-{i:02d} says" in body]
    assert len(shown) > 5 and body.count("<DOC>") == len(shown)  # Appendix C.2's web blocks
    assert len(shown) < 50  # 50 snippets of ~1,850 characters do not fit in 8K tokens
    answer = next(s for s in tr.steps if s.node == "answer")
    assert "/8000 web tokens" in answer.rationale and ESTIMATE in answer.rationale
    used = int(answer.rationale.split("/8000 web tokens")[0].rsplit(" ", 1)[-1])
    assert 7000 < used <= 8000


class WordTokenizer:
    """A local tokenizer: one token per word."""

    def encode(self, text, add_special_tokens=False):
        return text.split()

    def decode(self, ids, skip_special_tokens=True):
        return " ".join(ids)


class LocalBackend:
    name = "local"
    tokenizer = WordTokenizer()


def test_budgets_count_with_the_backends_tokenizer_and_cut_the_last_item():
    counter = TokenCounter(LocalBackend())
    assert counter.name == "tokenizer of local" and counter.count("a b c") == 3
    page = Hit(source="web", score=0.5, title="T", snippet=" ".join(f"w{i}" for i in range(100)))
    cut = cut_hit(page, 11, counter)
    assert cut is not None and counter.count(cut.text()) == 11
    kg = Hit(source="image_kg", score=0.9, entity_name="E", attributes={"a": "x y", "b": "z " * 50})
    view = PolicyView(
        task=2,
        question="q",
        has_image=True,
        tools=[],
        remaining_steps=1,
        remaining_s=1.0,
        done=[
            StepSummary(tool="image_search", update={"evidence": [kg]}),
            StepSummary(tool="web_search", update={"evidence": [page, page]}),
        ],
    )
    seen, report = answer_view(view, ContextSpec(follows="x", image_tokens=10, web_tokens=150), counter)
    assert report.tokens == {"image": 10, "web": 150} and report.items == 3 and not report.reranked
    assert [len(s.update["evidence"]) for s in seen.done] == [1, 2]
    assert TokenCounter(None).name == ESTIMATE and TokenCounter(None).count("abcdefgh") == 2
