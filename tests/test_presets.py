"""Presets: each builds and answers a turn offline (named stand-ins) and against a fake model server; each follows
its paper's order of steps, read back from the trace's tool_call events; UNSW's Algorithm 1 and EURECOM's IDK filter."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image
from support import KGAndPageSearch

from glasses_rag.crag_mm.spec import BENCHMARK as CRAG_MM
from glasses_rag.policies.presets import load_preset, preset_names
from glasses_rag.policies.presets.assemble import describe
from glasses_rag.policies.presets.verifiers import IdkVariantVerifier, algorithm_1
from glasses_rag.policies.protocol import IDK, AnswerDraft
from glasses_rag.superglasses.compare import compare
from glasses_rag.superglasses.logs import to_superglasses
from glasses_rag.superglasses.spec import BENCHMARK as SUPERGLASSES
from glasses_rag.testing.fake_model_server import FakeOpenAIServer as F
from glasses_rag.testing.scripted_model import ScriptedModel
from graph.agent import TurnInput
from graph.build import build_agent
from graph.config import AgentConfig, BudgetConfig
from traces.schema import TurnTrace
from traces.store import dump_trace

PRESETS = preset_names()
ROOT = Path(__file__).resolve().parents[1]
QUESTION = "who manufactures this rocket?"


KG = KGAndPageSearch  # one image-KG entity and one web page: enough for every preset to find the answer


def turn(question: str = QUESTION) -> TurnInput:
    return TurnInput(
        task=2, session_id="s", interaction_id="i", question=question, image=Image.new("RGB", (64, 48), (200, 30, 30))
    )


def make_agent(preset: str, model: str = "rule", budget_s: float = 10.0):
    config = AgentConfig(preset=preset, policy=model, budget=BudgetConfig(budget_s=budget_s), warm_up=False)
    return build_agent(config, search=KG(), run_id="test")


def rounds(trace: TurnTrace) -> list[list[str]]:
    """The tool calls in the order they ran, grouped by round (calls decided together run together)."""
    out: list[list[str]] = []
    for s in trace.tool_calls():
        if s.parallel_with is None or not out:
            out.append([])
        out[-1].append(s.tool)
    return out


Model = ScriptedModel
ANSWER_MARKERS = {  # a phrase of each preset's answer request (prompts/preset_requests_*.yaml)
    "mmrag-baseline": "truthfully answers the user question given an image",
    "no-retrieval": "truthfully answers the user question given an image",
    "superlens": "RAG Result:",
    "unsw-verify": "Use the retrieved context when it concerns the question",
    "eurecom": "Enhanced Context:",
}
ITEM_MARKS = ("Entity attributes: ", "<DOC>", "with relevance score", "[Info ", "Attributes: ", "Page content: ")


def run_with_model(name: str, model: Model | None = None, question: str = QUESTION) -> TurnTrace:
    with F(responder=model or Model()) as srv:
        agent = make_agent(name, f"openai:{srv.base_url}#fake-vlm", budget_s=30)
        return agent.run_turn(turn(question))


def purposes(trace: TurnTrace) -> list[str]:
    return sorted(c.purpose for c in trace.model_calls())


# ---- every preset -------------------------------------------------------------------------------------------


def test_bundled_presets_are_valid_and_cite_their_papers():
    assert set(PRESETS) >= {"react", "rule", "mmrag-baseline", "superlens", "unsw-verify", "eurecom", "no-retrieval"}
    for name in PRESETS:
        p = load_preset(name)
        assert p.name == name and p.paper and p.verification.follows
        assert all(s.follows and s.module for s in p.steps)
        assert name in describe(p)
        assert all(
            any((ROOT / "prompts" / f"{prompt}{x}").is_file() for x in (".txt", ".yaml")) for prompt in p.prompts
        )
        assert ".txt" not in p.paper  # cited by title and arXiv id / section, not by the papers folder's file names
        asked = [x for x in (p.answer.prompt if p.answer else None, p.verification.prompt) if x]
        assert all(x in p.prompts for x in asked), (name, asked, p.prompts)
    lens = load_preset("superlens")
    rerank = next(s for s in lens.steps if s.id == "rerank")
    assert rerank.args["min_score"] == 0.6 and rerank.args["image_weight"] == 0.4 and rerank.args["top_k"] == 10


def test_unknown_and_malformed_presets_are_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="unknown preset 'superlenz'"):
        load_preset("superlenz")
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "name: bad\ntitle: t\npaper: p\nsummary: s\npolicy: pipeline\nanswer: {follows: x}\n"
        "verification: {mode: none, follows: x}\nsteps:\n"
        "  - {id: a, module: A, follows: x, route: unsw-route, tools: [web_search]}\n"
    )
    with pytest.raises(ValueError, match="either `route` or `tools`"):
        load_preset(bad)
    with pytest.raises(ValueError, match="does not exist"):
        load_preset(tmp_path / "missing.yaml")
    (tmp_path / "folder.yaml").mkdir()
    with pytest.raises(ValueError, match="cannot be read"):
        load_preset(tmp_path / "folder.yaml")


@pytest.mark.parametrize("name", PRESETS)
def test_each_preset_answers_a_turn_offline_with_named_stand_ins(name):
    tr = make_agent(name).run_turn(turn())
    assert TurnTrace.model_validate_json(dump_trace(tr)) == tr  # one schema for every preset
    assert tr.policy.startswith(f"preset:{name}") and tr.steps[-1].node == "final" and tr.ended_by == "answer"
    assert not tr.error_kinds() and tr.tokens.calls == 0
    preset = load_preset(name)
    answer = next(s for s in tr.steps if s.node == "answer")
    if preset.policy == "pipeline":
        assert "offline stand-ins" in tr.policy and answer.rationale.startswith("stand-in rule-based-planner")
    if name == "no-retrieval":  # nothing can be known offline without retrieval
        assert tr.answer == IDK and not tr.tool_calls()
    else:
        assert tr.answer == "SpaceX"
    verdict = next((s for s in tr.steps if s.node == "verdict"), None)
    if preset.verification.mode in ("model-single", "unsw-algorithm-1"):
        assert verdict is not None and "stand-in for" in verdict.verdict.method
    if preset.verification.mode == "none":
        assert verdict is None
    assert to_superglasses(tr).answer == tr.answer  # the SuperGlasses export reads it as any trace


EXPECTED_CALLS = {
    "react": ["cove", "decide", "decide"],  # the second decision carries the answer
    "rule": [],
    "mmrag-baseline": ["answer", "decouple"],
    "superlens": ["answer", "decouple", "superlens-demand", "superlens-domain", "superlens-search"],
    "unsw-verify": ["answer", "closed_book", "consistency", "cove", "unsw-route", "unsw-summary"],
    "eurecom": ["answer", "eurecom-expand"],
    "no-retrieval": ["answer"],
}


@pytest.mark.parametrize("name", PRESETS)
def test_each_preset_answers_a_turn_with_a_model_server(name):
    tr = run_with_model(name)
    assert tr.answer == "SpaceX" and not tr.error_kinds() and tr.steps[-1].node == "final"
    assert purposes(tr) == EXPECTED_CALLS[name]
    assert tr.tokens.calls == len(EXPECTED_CALLS[name])
    assert "offline stand-ins" not in tr.policy
    if name == "rule":
        assert "the configured model is not used" in tr.policy


# ---- control flow, read from the trace ----------------------------------------------------------------------


def test_superlens_follows_figure_4_detector_and_decoupler_then_both_lenses_then_reranker():
    tr = run_with_model("superlens")
    assert rounds(tr) == [["detect_crop", "query_decoupler"], ["image_search", "web_search"], ["reranker"]]
    calls = {s.tool: s for s in tr.tool_calls()}
    assert calls["detect_crop"].arguments["target"] == "rocket"  # the object the search router named
    assert calls["image_search"].arguments["use_crop"] is True  # the image lens searches the detected region
    web = calls["web_search"]
    assert web.arguments["query"] == web.sub_question == "Who manufactures the Falcon 9?"  # one per sub-query
    assert calls["reranker"].arguments == {
        "query": QUESTION,
        "image_weight": 0.4,
        "min_score": 0.6,
        "top_k": 10,
        "dynamic": False,
    }
    first = tr.tool_calls()[0]
    # routing first: Figure 14's domain, Figure 15's direct answer, then the search router
    assert [c.purpose for c in first.model_calls] == ["superlens-domain", "superlens-demand", "superlens-search"]
    log = to_superglasses(tr)
    assert log.need_retrieval is True and log.tool_decision and log.hops
    report = compare([log], [log], embedder=None)  # glasses_rag.superglasses.compare reads preset traces as any other
    assert report.n_matched == 1 and report.tool_choice_agreement == 1.0


def test_superlens_demand_adaptive_answerer_answers_directly_or_retrieves_one_lens():
    direct = Model(
        Domain_of_the_question={
            "reasoning": "a Falcon 9 is made by SpaceX",
            "answer": "SpaceX",
            "confidence": 0.8,
            "needs_retrieval": False,
        }
    )
    with F(responder=direct) as srv:
        tr = make_agent("superlens", f"openai:{srv.base_url}#fake-vlm", budget_s=30).run_turn(turn())
        domain, answer = (json.dumps(r) for r in srv.requests)
    assert rounds(tr) == [] and tr.answer == "SpaceX" and purposes(tr) == ["superlens-demand", "superlens-domain"]
    assert "Identify the domain" in domain and "step by step" not in domain  # Figure 14: the domain alone
    assert "Domain of the question: Vehicle. Name the make, model and generation" in answer  # Figure 15's guideline
    image_only = Model(Decide_how_to_search={"image_search": True, "text_search": False, "object": "rocket"})
    assert rounds(run_with_model("superlens", image_only)) == [["detect_crop"], ["image_search"], ["reranker"]]


def test_superlens_without_its_demand_router_always_retrieves(tmp_path):
    data = load_preset("superlens").model_dump(mode="json", exclude_defaults=True)
    variant = tmp_path / "superlens-mandatory.yaml"
    variant.write_text(json.dumps({**data, "disabled": ["demand_router"]}))  # JSON is YAML
    direct = Model(
        Domain_of_the_question={"reasoning": "r", "answer": "SpaceX", "confidence": 0.8, "needs_retrieval": False}
    )
    with F(responder=direct) as srv:
        agent = make_agent(str(variant), f"openai:{srv.base_url}#fake-vlm", budget_s=30)
        tr = agent.run_turn(turn())
    assert (
        "superlens-demand" not in purposes(tr)
        and "superlens-domain" not in purposes(tr)
        and rounds(tr)[0] == ["detect_crop", "query_decoupler"]
    )
    assert "removed (ablation)" in tr.tool_calls()[0].rationale and "without demand_router" in tr.policy


def test_unsw_routes_then_retrieves_with_the_summary_then_reranks_then_verifies():
    tr = run_with_model("unsw-verify")
    assert rounds(tr) == [["image_search", "web_search"], ["reranker"]]
    web = next(s for s in tr.tool_calls() if s.tool == "web_search")
    assert web.arguments["query"] == f"{QUESTION} A Falcon 9 rocket on a launch pad."  # q' = q || s (eq. 2)
    rerank = next(s for s in tr.tool_calls() if s.tool == "reranker")
    assert rerank.arguments["lam"] == 1.5 and rerank.arguments["top_k"] == 3 and rerank.arguments["min_score"] == 0.1
    verdict = next(s for s in tr.steps if s.node == "verdict")
    assert verdict.verdict.method.startswith("unsw-algorithm-1") and verdict.decision == "keep"
    assert sorted(c.purpose for c in verdict.model_calls) == ["closed_book", "consistency", "cove"]


def test_unsw_router_skips_retrieval_and_abstains_on_real_time_questions():
    no_external = Model(Classify_a_question={"needs_external_info": False, "is_real_time": False})
    tr = run_with_model("unsw-verify", no_external)
    assert rounds(tr) == [] and "answer" in purposes(tr) and "unsw-summary" not in purposes(tr)
    real_time = Model(Classify_a_question={"needs_external_info": False, "is_real_time": True})
    tr = run_with_model("unsw-verify", real_time, "what is the price of this today?")
    assert tr.answer == IDK and "answer" not in purposes(tr)
    assert "Algorithm 1" in next(s for s in tr.steps if s.node == "answer").rationale


def test_mmrag_baseline_searches_the_whole_image_then_rewrites_then_searches_the_web():
    tr = run_with_model("mmrag-baseline")
    assert rounds(tr) == [["image_search"], ["query_decoupler"], ["web_search"]]
    image, _, web = tr.tool_calls()
    assert image.arguments == {"use_crop": False, "k": 30}
    assert web.arguments == {"query": "Who manufactures the Falcon 9?", "k": 50, "full_pages": False}  # snippets


def test_eurecom_expands_crops_searches_both_in_parallel_reranks_and_filters_idk():
    tr = run_with_model("eurecom")
    assert rounds(tr) == [["detect_crop"], ["image_search", "web_search"], ["reranker"]]
    web = next(s for s in tr.tool_calls() if s.tool == "web_search")
    assert web.arguments["query"] == f"{QUESTION} Who manufactures the Falcon 9 rocket?"
    assert next(s for s in tr.steps if s.node == "verdict").verdict.method.startswith("idk-variant-filter")


def test_no_retrieval_calls_no_tool_with_a_model():
    tr = run_with_model("no-retrieval")
    assert rounds(tr) == [] and purposes(tr) == ["answer"]


# ---- the presets' own self-checks ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "context,consistent,s_cov,keep",
    [
        (True, True, 0.9, True),
        (True, True, 0.89, False),
        (True, False, 1.0, False),
        (False, True, 1.0, True),
        (False, True, 0.95, False),
        (False, False, 1.0, False),
    ],
)
def test_unsw_algorithm_1(context, consistent, s_cov, keep):
    v = algorithm_1(context, consistent, s_cov, 0.9, 1.0, "SpaceX", "m")
    assert v.supported is keep and v.confidence == s_cov


def test_eurecom_idk_filter_turns_idk_variants_into_i_dont_know():
    from glasses_rag.models.text_embedder import get_text_embedder

    check = IdkVariantVerifier(get_text_embedder(None), 0.7)
    assert not check.verify("q", AnswerDraft(answer="Sorry, I don't know the answer.", confidence=0.9), []).supported
    kept = check.verify("q", AnswerDraft(answer="The Falcon 9 is built by SpaceX.", confidence=0.9), [])
    assert kept.supported and kept.confidence == 0.9


def test_superlens_on_superglasses_uses_the_open_web_lenses_and_reads_the_pages(tmp_path, monkeypatch):
    from sg_support import FixtureWeb, article, organic, use_fixture_web

    from glasses_rag.retrieval.search import NullSearch
    from glasses_rag.web import open_web
    from graph.config import ToolsConfig

    with FixtureWeb(image_dir=tmp_path / "img") as w, F(responder=Model()) as srv:
        w.pages["f9"] = (
            "text/html; charset=utf-8",
            article(
                "Falcon 9", ["Falcon 9 is a reusable rocket.", "It is manufactured by SpaceX in Hawthorne, California."]
            ),
        )
        w.web["Who manufactures the Falcon 9?"] = organic(("Falcon 9", w.page_url("f9"), "Falcon 9 by SpaceX."))
        w.lens = {
            "search_metadata": {"status": "Success"},
            "knowledge_graph": [{"title": "Falcon 9", "subtitle": "Rocket", "link": w.page_url("f9")}],
        }
        use_fixture_web(monkeypatch, w, tmp_path / "cache", tmp_path / "img")
        config = AgentConfig(
            preset="superlens",
            policy=f"openai:{srv.base_url}#fake-vlm",
            warm_up=False,
            tools=ToolsConfig(profile="superglasses"),
            budget=BudgetConfig(budget_s=30),
        )
        tr = build_agent(config, search=NullSearch(), run_id="sg", tool_profile=SUPERGLASSES.tools).run_turn(turn())
        open_web.reset_open_web()
    assert rounds(tr) == [
        ["detect_crop", "query_decoupler"],
        ["google_lens", "google_search"],
        ["read_webpage"],
        ["reranker"],
    ]
    assert not tr.error_kinds() and tr.answer == "SpaceX"
    read = next(s for s in tr.tool_calls() if s.tool == "read_webpage")
    assert read.arguments["max_pages"] == 50 and read.arguments["chunks_per_page"] == 0  # every passage, unfiltered
    assert any("Hawthorne" in (r.snippet or "") for r in read.results)
    log = to_superglasses(tr)
    assert log.tool_decision == ["Image Search", "Text Search"]


def test_mmrag_baseline_keeps_image_hits_under_0_75_out_of_the_answer_context():
    class TwoMatches(KG):
        def image_search(self, image, k=5):
            return [
                *super().image_search(image, k),
                {
                    "index": 1,
                    "score": 0.5,
                    "url": "https://kg/1",
                    "entities": [{"entity_name": "Saturn V", "entity_attributes": {"manufacturer": "Boeing"}}],
                },
            ]

    with F(responder=Model()) as srv:
        config = AgentConfig(
            preset="mmrag-baseline",
            policy=f"openai:{srv.base_url}#fake-vlm",
            warm_up=False,
            budget=BudgetConfig(budget_s=30),
        )
        tr = build_agent(config, search=TwoMatches(), run_id="t").run_turn(turn())
        bodies = [json.dumps(r) for r in srv.requests]
    assert {h.entity_name for h in tr.tool_calls()[0].results} == {"Falcon 9", "Saturn V"}  # both were found
    answer = next(b for b in bodies if ANSWER_MARKERS["mmrag-baseline"] in b)
    assert "Entity 1: Falcon 9" in answer and "Saturn V" not in answer  # CRAG-MM Appendix C.1: similarity >= 0.75


# ---- writing your own preset ----------------------------------------------------------------------------------


def _preset_file(tmp_path, steps: str) -> Path:
    path = tmp_path / "mine.yaml"
    path.write_text(
        "name: mine\ntitle: t\npaper: p\nsummary: s\npolicy: pipeline\nanswer: {follows: x}\n"
        f"verification: {{mode: none, follows: x}}\nsteps:\n{steps}"
    )
    return path


def test_a_misspelled_tool_or_router_is_a_one_line_error_naming_the_closest(tmp_path, capsys):
    from glasses_rag.policies.presets import main

    typo = _preset_file(tmp_path, "  - {id: image, module: A, follows: x, tools: [image_serch]}\n")
    with pytest.raises(ValueError) as e:
        load_preset(typo)
    assert "\n" not in str(
        e.value
    ) and "step 'image': unknown tool 'image_serch' (did you mean 'image_search'?)" in str(e.value)
    router = _preset_file(tmp_path, "  - {id: r, module: R, follows: x, route: superlens-demnd}\n")
    with pytest.raises(ValueError) as e:
        load_preset(router)
    assert "\n" not in str(e.value) and "unknown router 'superlens-demnd' (did you mean 'superlens-demand'?)" in str(
        e.value
    )
    assert main([str(router)]) == 2 and "did you mean 'superlens-demand'" in capsys.readouterr().err
    good = _preset_file(tmp_path, "  - {id: image, module: A, follows: x, tools: [image_search]}\n")
    assert main([str(good)]) == 0 and "mine: t" in capsys.readouterr().out  # a file outside the bundled folder


def test_the_docs_example_preset_has_tools_on_crag_mm_and_on_superglasses(tmp_path):
    import re

    from glasses_rag.policies.presets import apply_to_config
    from graph.config import ToolsConfig
    from tools import default_registry

    text = (ROOT / "docs" / "presets.md").read_text(encoding="utf-8")
    example = re.search(r"### Writing your own.*?```yaml\n(.*?)```", text, re.S).group(1)
    path = tmp_path / "example.yaml"
    path.write_text(example)
    preset = load_preset(path)
    for profile, wanted in (
        (CRAG_MM.tools, {"image_search", "web_search"}),
        (SUPERGLASSES.tools, {"google_lens", "google_search"}),
    ):
        config = apply_to_config(preset, AgentConfig(tools=ToolsConfig(profile=profile.name)))
        names = {t.name for t in default_registry().for_task(2, config.tools.allowed, profile)}
        assert wanted <= names, (profile, names)
        assert all(any(t in names for t in s.tools) for s in preset.steps)  # every step has a tool it can call


# ---- EURECOM: what the paper does and the disclosed gaps ---------------------------------------------------------


class PaperScale:
    """An embedder that gives Table 1's bge-large scores: the carried threshold is the paper's own."""

    name = "paper-scale"

    def similarity(self, text, variants):
        from glasses_rag.policies.presets.verifiers import TABLE_1

        return [next((s for t, s in TABLE_1 if t == text), 0.0)]


def test_eurecom_idk_threshold_is_carried_onto_the_embedders_scale_by_table_1():
    from glasses_rag.models.text_embedder import get_text_embedder
    from glasses_rag.policies.presets.verifiers import IDK_VARIANTS, TABLE_1, mapped_threshold

    assert mapped_threshold(PaperScale()) == pytest.approx(0.7, abs=1e-3)
    minilm = get_text_embedder(None)
    check = IdkVariantVerifier(minilm, 0.7, calibrate=True)
    kept, idk = (max(minilm.similarity(t, list(IDK_VARIANTS))) for t, _ in TABLE_1[:2])
    assert kept < check.threshold < idk  # Table 1's first row kept, its second filtered, as in the paper
    assert check.verify("q", AnswerDraft(answer=TABLE_1[0][0], confidence=0.9), []).supported
    assert not check.verify("q", AnswerDraft(answer=TABLE_1[1][0], confidence=0.9), []).supported
    assert "carried onto the embedder's scale" in check.verify("q", AnswerDraft(answer="x", confidence=1), []).method


def test_eurecom_entities_reach_the_answer_model_and_its_reranker_has_no_mad_cut():
    with F(responder=Model()) as srv:
        agent = make_agent("eurecom", f"openai:{srv.base_url}#fake-vlm", budget_s=30)
        tr = agent.run_turn(turn())
        bodies = [json.dumps(r) for r in srv.requests]
    answer = next(b for b in bodies if ANSWER_MARKERS["eurecom"] in b)
    assert "Entity: Falcon 9. Keywords: rocket, white" in answer  # Appendix D.3's pre-context
    assert "Enhanced Context: Who manufactures the Falcon 9 rocket?" in answer
    assert not any("entity_extraction" in b for b in bodies)  # not a call of a tool the model was never offered
    rerank = next(s for s in tr.tool_calls() if s.tool == "reranker")
    assert rerank.arguments["dynamic"] is False
    image = next(s for s in tr.tool_calls() if s.tool == "image_search")
    assert image.arguments["crop_only"] is True


def test_a_preset_with_a_reranker_loads_its_model_at_warm_up_not_inside_a_turn():
    config = AgentConfig(preset="eurecom", budget=BudgetConfig(budget_s=10), warm_up=True)
    agent = build_agent(config, search=KG(), run_id="warm")
    assert "reranker" in agent.resources._cache  # loaded (and run once) before the first turn


# ---- UNSW: text-only router, Appendix A.3 judge with image and context, Appendix A.4 CoV ------------------------


def test_unsw_router_is_text_only_and_the_judge_and_cov_see_image_and_reranked_context():
    with F(responder=Model()) as srv:
        make_agent("unsw-verify", f"openai:{srv.base_url}#fake-vlm", budget_s=30).run_turn(turn())
        bodies = [json.dumps(r) for r in srv.requests]
    router = next(b for b in bodies if "Classify a question" in b)
    assert "image_url" not in router  # §3.1: the router is a text model
    judge = next(b for b in bodies if "Judge impartially" in b)
    cov = next(b for b in bodies if "Fact-check the proposed answer" in b)
    for body in (judge, cov):
        assert "image_url" in body and "[Info 1] " in body and "Falcon 9. manufacturer: SpaceX" in body  # A.3 / A.4
    assert "You are a verification model" in judge and "You are a verification expert" in cov  # A.3 / A.4 roles
    assert "Phase 1, holistic" in cov and "0.25 very low" in cov and "is 0.0" in cov


def test_unsw_low_cov_confidence_turns_the_answer_into_i_dont_know():
    low = Model(proposed_answer_below_against_the_image={"confidence": 0.7, "reasoning": "r", "sub_questions": []})
    tr = run_with_model("unsw-verify", low)
    verdict = next(s for s in tr.steps if s.node == "verdict")
    assert verdict.verdict.confidence == 0.7 and not verdict.verdict.supported and tr.answer == IDK


# ---- docs/presets.md's stage tables, kept true -------------------------------------------------------------------


def stage_tables() -> dict[str, list[tuple[list[str], list[str], str]]]:
    """docs/presets.md 'Paper stage by stage': per preset, each row's (step ids, labels sent with a model,
    difference)."""
    import re

    text = (ROOT / "docs" / "presets.md").read_text(encoding="utf-8")
    section = text.split("## Paper stage by stage", 1)[1].split("\n## ", 1)[0]
    out = {}
    for block in section.split("\n### ")[1:]:
        name = re.match(r"`([\w-]+)`", block).group(1)
        rows = [line for line in block.splitlines() if line.startswith("| ") and not line.startswith("| paper")]
        cells = [[c.strip() for c in r.strip("|").split("|")] for r in rows if not r.startswith("| ---")]
        out[name] = [(re.findall(r"`([\w-]+)`", c[1]), re.findall(r"`([\w-]+)`", c[2]), c[3]) for c in cells]
    return out


def sent_in_order(tr: TurnTrace) -> list[str]:
    """The turn's model requests (by purpose) and tool calls (by name), in the order the trace records them."""
    calls = {id(s) for s in tr.tool_calls()}
    out: list[str] = []
    for s in tr.steps:
        out += [c.purpose for c in getattr(s, "model_calls", None) or []]
        if id(s) in calls:
            out.append(s.tool)
    return out


@pytest.mark.parametrize("name", ["mmrag-baseline", "superlens", "unsw-verify", "eurecom", "no-retrieval"])
def test_docs_stage_tables_match_the_logged_requests(name):
    table = stage_tables()[name]
    preset = load_preset(name)
    ids = {s.id for s in preset.steps} | {"answer", "verification"}
    for steps, _, difference in table:
        assert set(steps) <= ids, (name, steps)
        assert difference.split(":")[0].split(" ")[0] in ("none", "stand-in", "gap"), difference
    with F(responder=Model()) as srv:
        tr = make_agent(name, f"openai:{srv.base_url}#fake-vlm", budget_s=30).run_turn(turn())
        bodies = [json.dumps(r) for r in srv.requests]
    answer_body = next(b for b in bodies if ANSWER_MARKERS[name] in b)
    sent = sent_in_order(tr)
    at = 0
    for _, labels, _ in table:  # each row's items, in any order among themselves, then the next row's
        assert sorted(sent[at : at + len(labels)]) == sorted(labels), (name, sent, labels)
        at += len(labels)
    assert at == len(sent), (name, sent[at:])
    answer = next(s for s in tr.steps if s.node == "answer")
    if preset.answer is not None and preset.answer.context is not None:  # the context the table names
        assert "answer context:" in answer.rationale
        rerank = next((s for s in tr.tool_calls() if s.tool == "reranker"), None)
        if rerank is not None:
            assert "the reranker's kept list" in answer.rationale
            kept = len(rerank.results)
            assert sum(answer_body.count(m) for m in ITEM_MARKS) == kept  # the kept list, no search listing
    for body in bodies:  # every request is the paper's own or a router's: no planner text, no tool transcript
        assert "Tools (name(arguments)" not in body and "Result of " not in body


def test_image_search_crop_only_searches_a_detection_alone_and_a_heuristic_crop_with_the_photo():
    from glasses_rag.core.types import Box
    from glasses_rag.models.resources import ModelPaths, Resources
    from tools import ToolCall, ToolContext, default_registry

    sizes: list[tuple[int, int]] = []

    class Sizes(KG):
        def image_search(self, image, k=5):
            sizes.append(image.size)
            return super().image_search(image, k)

    registry = default_registry()
    photo = Image.new("RGB", (64, 48), (200, 30, 30))
    for method, searched in (("grounding-dino:tiny", [(20, 20)]), ("heuristic:saliency-crop", [(64, 48), (20, 20)])):
        sizes.clear()
        ctx = ToolContext(
            task=2,
            question=QUESTION,
            image=photo,
            resources=Resources(Sizes(), ModelPaths()),
            crop=Box(x0=0, y0=0, x1=20, y1=20, label="rocket", method=method),
        )
        tool, args = registry.validate(ToolCall(tool="image_search", arguments={"crop_only": True}), 2)
        out = tool.run(ctx, args)
        assert sizes == searched, method
        assert ("stand-in" in out.method) is method.startswith("heuristic:")
