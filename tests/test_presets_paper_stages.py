"""Issue 39: what a served model (and each tool) meets in the paper presets, stage by stage, against the papers.
One test (or more) per item: UNSW's Algorithm 1 when its verification fails (3), CRAG-MM's snippets (4), the
webpage reader without a hidden pre-filter (5), EURECOM's report values (6), Google Lens on the whole photo when
nothing was detected (7), the shape of each paper's requests (8), and the smaller points (9). jina-reranker-m0's
scoring (1) is in tests/test_mm_reranker_scoring.py."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from PIL import Image
from support import KGAndPageSearch, KGSearch

from glasses_rag.policies.presets import load_preset
from glasses_rag.policies.protocol import IDK
from glasses_rag.testing.fake_model_server import FakeOpenAIServer as F
from glasses_rag.testing.scripted_model import ScriptedModel
from graph.agent import TurnInput
from graph.build import build_agent
from graph.config import AgentConfig, BudgetConfig
from traces.schema import HistoryTurn

QUESTION = "who manufactures this rocket?"
PLANNER = "Tools (name(arguments)"  # the planner's system text (prompts/vlm_system.txt)


def turn(task: int = 2, question: str = QUESTION, history: list | None = None) -> TurnInput:
    return TurnInput(
        task=task,
        session_id="s",
        interaction_id="i",
        question=question,
        image=Image.new("RGB", (64, 48), (200, 30, 30)),
        history=history or [],
    )


def run(preset: str, model=None, search=None, the_turn=None, budget_s: float = 30):
    """One turn of `preset` against the scripted model server: (trace, request bodies as JSON text)."""
    with F(responder=model or ScriptedModel()) as srv:
        config = AgentConfig(
            preset=preset,
            policy=f"openai:{srv.base_url}#fake-vlm",
            warm_up=False,
            budget=BudgetConfig(budget_s=budget_s),
        )
        tr = build_agent(config, search=search or KGAndPageSearch(), run_id="t").run_turn(the_turn or turn())
        return tr, [json.dumps(r) for r in srv.requests]


def user_text(body: str) -> str:
    """The user message's text of a request body."""
    content = json.loads(body)["messages"][-1]["content"]
    return content if isinstance(content, str) else "".join(p.get("text", "") for p in content)


# ---- item 3: UNSW's Algorithm 1 returns the answer only when it passed verification --------------------------------


class CovFails(ScriptedModel):
    """The chain-of-verification request is refused by the server (the draft itself is confident, 0.9)."""

    def __call__(self, body):
        if "Fact-check the proposed answer" in json.dumps(body):
            return ("status", 400, {"error": {"message": "refused"}})
        return super().__call__(body)


def test_unsw_answers_i_dont_know_when_its_verification_fails_whatever_the_drafts_confidence():
    tr, _ = run("unsw-verify", CovFails())
    answer = next(s for s in tr.steps if s.node == "answer")
    verdict = next(s for s in tr.steps if s.node == "verdict")
    assert answer.confidence >= 0.5  # a confident draft, which the old self-check path kept
    assert verdict.error is not None and verdict.decision == "abstain" and tr.answer == IDK
    assert "keeps only a draft that passed it" in verdict.reason


# ---- item 4: CRAG-MM's baseline reads web snippets (page_snippet), up to 50 within 8K tokens ---------------


class FiftyPages(KGSearch):
    """50 web results: a short snippet each, and a long page behind it (get_page)."""

    def web_search(self, query, k=5):
        return [
            {
                "page_url": f"https://w/{i}",
                "page_name": f"page-{i:02d}",
                "score": 0.9 - i / 100,
                "page_snippet": f"snippet-{i:02d}: SpaceX makes the Falcon 9.",
            }
            for i in range(min(k, 50))
        ]

    def get_page(self, url):
        return "WHOLE PAGE TEXT " * 400


def test_mmrag_baseline_answers_from_50_snippets_not_from_the_first_whole_pages():
    tr, bodies = run("mmrag-baseline", search=FiftyPages())
    answer = user_text(next(b for b in bodies if "truthfully answers the user question" in b))
    assert answer.count("<DOC>") == 50 and all(f"snippet-{i:02d}" in answer for i in range(50))
    assert "WHOLE PAGE TEXT" not in answer  # C.1 step 4: web snippets, not pages
    web = next(s for s in tr.tool_calls() if s.tool == "web_search")
    assert "snippets only" in web.method


# ---- item 5: the webpage reader hides nothing from the reranker (SuperLens App. D) or the baseline (E.3) ----------


class Pages:
    """12 pages of 8 passages each."""

    def read(self, url):
        n = url.rsplit("/", 1)[-1]
        return SimpleNamespace(error=None, title=f"page {n}", chunks=[f"p{n} passage {j}" for j in range(8)]), False


@pytest.mark.parametrize("preset", ["superlens", "mmrag-baseline"])
def test_the_reader_passes_every_page_and_passage_on_with_the_presets_arguments(preset, monkeypatch):
    import glasses_rag.web.open_web as open_web
    from glasses_rag.core.types import Hit
    from glasses_rag.models.resources import ModelPaths, Resources
    from tools import ToolContext
    from tools.read_webpage import read_webpage

    monkeypatch.setattr(open_web, "get_open_web", Pages)
    step = next(s for s in load_preset(preset).steps if s.id == "read_pages")
    found = [Hit(source="web", score=0.9 - i / 100, url=f"https://w/{i}", title=f"r{i}") for i in range(12)]
    ctx = ToolContext(task=2, question=QUESTION, image=None, resources=Resources(None, ModelPaths()), evidence=found)
    args = {k: v for k, v in step.args.items() if k != "query"}
    out = read_webpage(ctx, query=QUESTION, **args)
    hits = out.update["evidence"]
    assert len(hits) == 12 * 8  # every page, every passage: no word-overlap pre-filter
    assert [h.content for h in hits[:8]] == [f"p0 passage {j}" for j in range(8)]  # in page order
    assert "unfiltered" in out.method


# ---- item 6: EURECOM's report values ------------------------------------------------------------------------------


def test_eurecom_retrieves_200_and_gives_task_1_all_5000_evidence_tokens_to_images():
    preset = load_preset("eurecom")
    args = {s.id: s.args for s in preset.steps}
    assert args["image_search"]["k"] == 200 and args["web_search"]["k"] == 200  # Table 4, §2.3, §3.1
    tr, _ = run("eurecom", the_turn=turn(task=1), search=KGSearch())
    image = next(s for s in tr.tool_calls() if s.tool == "image_search")
    assert image.arguments["k"] == 200
    answer = next(s for s in tr.steps if s.node == "answer")
    assert "/5000 image tokens" in answer.rationale  # §2.4, not the Task 2 split's 1,250
    tr2, _ = run("eurecom")
    assert "/1250 image tokens" in next(s for s in tr2.steps if s.node == "answer").rationale


# ---- item 7: Google Lens on the whole photo when nothing was detected -----------------------------------------------


def lens_context(crop_method: str | None):
    from glasses_rag.core.types import Box
    from glasses_rag.models.resources import ModelPaths, Resources
    from tools import ToolContext

    crop = None if crop_method is None else Box(x0=0, y0=0, x1=20, y1=20, label="rocket", method=crop_method)
    return ToolContext(
        task=2,
        question=QUESTION,
        image=Image.new("RGB", (64, 48), (200, 30, 30)),
        resources=Resources(None, ModelPaths()),
        crop=crop,
    )


def test_google_lens_searches_the_whole_photo_unless_a_detector_found_the_object(monkeypatch):
    import glasses_rag.web.open_web as open_web
    from glasses_rag.web.serpapi import SearchResults
    from tools.google_lens import google_lens

    sizes: list[tuple[int, int]] = []

    class Lens:
        def lens_search(self, image, k=5, refine=""):
            sizes.append(image.size)
            return SearchResults(), False

    monkeypatch.setattr(open_web, "get_open_web", Lens)
    for method, searched in (
        ("grounding-dino:tiny", (20, 20)),
        ("heuristic:saliency-crop", (64, 48)),
        (None, (64, 48)),
    ):
        sizes.clear()
        out = google_lens(lens_context(method), use_crop=True)
        assert sizes == [searched], method
        assert ("stand-in" in out.method) is (method or "").startswith("heuristic:")


# ---- item 8: each request in its paper's shape ---------------------------------------------------------------------


def test_unsw_answer_and_verification_requests_have_their_own_roles_not_the_planners():
    _, bodies = run("unsw-verify")
    roles = {
        "Use the retrieved context when it concerns the question": "You are a helpful assistant",  # eq. 8
        "from the image and your own knowledge": "You are a helpful assistant",  # eq. 9
        "Judge impartially": "You are a verification model",  # A.3
        "Fact-check the proposed answer": "You are a verification expert",  # A.4
    }
    for marker, role in roles.items():
        body = next(b for b in bodies if marker in b)
        system = json.loads(body)["messages"][0]
        assert system["role"] == "system" and system["content"].startswith(role), marker
    assert not any(PLANNER in b for b in bodies)


def test_superlens_evidence_lines_show_the_rerankers_relevance():
    tr, bodies = run("superlens")
    kept = next(s for s in tr.tool_calls() if s.tool == "reranker").results
    answer = user_text(next(b for b in bodies if "RAG Result:" in b))
    for i, h in enumerate(kept, 1):
        assert f"Evidence {i} with relevance score {h.rerank_score:.2f}: " in answer  # Figures 17-18
    assert answer.rstrip().endswith(QUESTION)


def test_eurecom_entities_are_pre_context_lines_not_a_call_of_an_absent_tool():
    _, bodies = run("eurecom")
    answer = user_text(next(b for b in bodies if "Enhanced Context:" in b))
    assert answer.startswith(f"User Query: {QUESTION}\nEnhanced Context: Who manufactures the Falcon 9 rocket?")
    assert "Entity: Falcon 9. Keywords: rocket, white" in answer and "## Web Results" in answer  # Appendix D.3
    assert not any("entity_extraction" in b or PLANNER in b for b in bodies)


def test_mmrag_baseline_puts_the_question_after_the_context_and_keeps_the_whole_history():
    long_answer = "The Falcon 9 is a reusable two-stage rocket. " * 14  # 630 characters
    history = [HistoryTurn(question="what is this rocket called?", answer=long_answer.strip(), entity="Falcon 9")]
    _, bodies = run("mmrag-baseline", the_turn=turn(task=3, history=history))
    body = next(b for b in bodies if "truthfully answers the user question" in b)
    text = user_text(body)
    assert text.endswith(f"Query: {QUESTION}")  # C.2: the query last
    assert text.index("Web search context:") < text.index("Conversation history:") < text.index("Query:")
    assert long_answer.strip() in text  # C.1 step 5: the full conversation history
    assert "engage in multi-turn conversations" in json.loads(body)["messages"][0]["content"]


# ---- item 9: the smaller points ------------------------------------------------------------------------------------


def test_a_misspelled_step_argument_is_a_one_line_error(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text(
        "name: mine\ntitle: t\npaper: p\nsummary: s\npolicy: pipeline\nanswer: {follows: x}\n"
        "verification: {mode: none, follows: x}\nsteps:\n"
        "  - {id: web, module: W, follows: x, tools: [web_search, google_search], args: {qeury: $question, k: 5}}\n"
    )
    with pytest.raises(ValueError) as e:
        load_preset(path)
    msg = str(e.value)
    assert "\n" not in msg and "step 'web': unknown argument 'qeury' for web_search / google_search" in msg
    assert "(did you mean 'query'?)" in msg


class FixedScores:
    name = "fixed"
    calibrated = True

    def __init__(self, scores):
        self.scores = scores

    def score(self, query, texts):
        return self.scores[: len(texts)]


def rerank(scores, **args):
    from glasses_rag.core.types import Hit
    from glasses_rag.models.resources import ModelPaths, Resources
    from tools import ToolContext
    from tools.reranker import reranker

    resources = Resources(None, ModelPaths())
    resources._cache["reranker"] = FixedScores(scores)
    hits = [Hit(source="web", score=0.5, title=f"t{i}", snippet="s") for i in range(len(scores))]
    out = reranker(ToolContext(task=2, question=QUESTION, image=None, resources=resources, evidence=hits), **args)
    return [h.title for h in out.update["evidence"].value]


def test_the_mad_cut_applies_to_one_or_two_items_and_over_the_top_10():
    assert rerank([0.9, 0.1], lam=0.5, top_k=5) == ["t0"]  # median 0.5 - 0.5 * MAD 0.4 = 0.3 cuts the second
    assert rerank([0.9, 0.1], lam=1.5, top_k=5) == ["t0", "t1"]  # UNSW's lam 1.5 keeps both (eq. 5)
    scores = [0.95, 0.94, 0.93, 0.92, 0.91, 0.9, 0.89, 0.88, 0.87, 0.86] + [0.1] * 20
    assert len(rerank(scores, lam=1.5, top_k=100)) == 30  # over all 30 scores the median is 0.1: nothing is cut
    # over the top 10 (eq. 5): median 0.905 - 1.5 * MAD 0.025 = 0.8675, so the tail and 0.86 are cut
    assert rerank(scores, lam=1.5, top_k=100, mad_top=10) == [f"t{i}" for i in range(9)]
    assert next(s for s in load_preset("unsw-verify").steps if s.id == "rerank").args["mad_top"] == 10


def test_the_ablations_without_search_row_runs_no_tool_and_no_router(tmp_path):
    import yaml

    from benchmarks.ablate import variants
    from graph.config import ToolsConfig

    rows = variants("superlens", 2, ToolsConfig(), tmp_path)
    row = next(v for v in rows if v.group == "A. No Retrieval")
    assert row.allowed == []  # no detector, no decoupler, no reranker, no search
    disabled = yaml.safe_load(open(row.preset))["disabled"]
    assert {"demand_router", "search_router"} <= set(disabled)
    assert row.reported == 32.82 and rows[0].reported == 44.10  # SuperGlasses Table 3 = Table 4's rows


def test_the_ablation_table_prints_table_3s_figures_beside_the_full_and_no_search_rows(tmp_path):
    from benchmarks.ablate import table, variants
    from benchmarks.preset_runs import Row
    from graph.config import ToolsConfig

    todo = variants("superlens", 2, ToolsConfig(), tmp_path)[:2]
    flags = {"s#0": (True, False), "s#1": (False, True)}
    rows = [Row(label=v.label, n=2, accuracy=0.5, truthfulness=0.5, flags=flags) for v in todo]
    text, _ = table(todo, rows)
    full, no_search = (line for line in text.splitlines() if "(full)" in line or "w/o Search" in line)
    assert full.rstrip().endswith("paper 44.10") and no_search.rstrip().endswith("paper 32.82")


def test_the_docs_name_eurecoms_expansion_prompt_and_its_offline_stand_in():
    from test_presets import stage_tables

    expand = next(row for row in stage_tables()["eurecom"] if row[0] == ["expand"])
    assert expand[2].startswith("stand-in")


# ---- item 2: the reranker runs on the device the user names ----------------------------------------------------------


def test_the_reranker_device_comes_from_the_cli_the_preset_or_the_model_backend(tmp_path):
    from glasses_rag.frontends import run as cli
    from glasses_rag.harness import session
    from glasses_rag.models.reranker import reranker_device
    from glasses_rag.models.vlm import ModelConfig
    from glasses_rag.policies.presets import apply_to_config

    p = cli.build_parser()
    args = cli.resolve_benchmark(p, p.parse_args(["--task", "2", "--reranker-device", "cuda:1"]))
    config = session.agent_config_from_args(args)
    assert config.models.reranker_device == "cuda:1"
    assert apply_to_config(load_preset("eurecom"), config).models.reranker_device == "cuda:1"  # the user's wins
    data = load_preset("eurecom").model_dump(mode="json", exclude_defaults=True)
    for s in data["steps"]:
        if s["id"] == "rerank":
            s["device"] = "cpu"
    mine = tmp_path / "eurecom-cpu.yaml"
    mine.write_text(json.dumps(data))
    assert apply_to_config(load_preset(mine), AgentConfig()).models.reranker_device == "cpu"  # the preset's `device:`
    local = ModelConfig(backend="transformers", path="/m", device="cuda:1")
    assert reranker_device(None, local) == ("cuda:1", "the model backend's device")
    assert reranker_device(None, ModelConfig(backend="llamacpp", path="/m.gguf", n_gpu_layers=-1))[0] == "cuda"
    bad = tmp_path / "bad.yaml"
    bad.write_text(json.dumps({**data, "steps": [{**data["steps"][1], "device": "cuda"}, *data["steps"][2:]]}))
    with pytest.raises(ValueError, match="`device` is the reranker's"):
        load_preset(bad)
