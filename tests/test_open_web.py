"""Open-web tools (SerpApi Google search, Google Lens, the page reader) and the two-level disk cache, against a local
fixture server on 127.0.0.1; tool profiles."""

from pathlib import Path

import pytest
from PIL import Image
from sg_support import FixtureWeb, article, organic, use_fixture_web
from support import make_agent

from glasses_rag.crag_mm.spec import BENCHMARK as CRAG_MM
from glasses_rag.policies.protocol import AnswerDraft, Decision, ScriptedPolicy
from glasses_rag.superglasses.spec import BENCHMARK as SUPERGLASSES
from glasses_rag.web import open_web
from glasses_rag.web.page_text import chunk_text, paragraph_sentences
from glasses_rag.web.serpapi import SerpApiClient, SerpApiError
from graph.agent import TurnInput
from tools import default_registry
from tools.base import Hit, ToolContext
from tools.registry import OPEN_WEB, ToolCall, ToolCallError, ToolProfile, ToolRegistry, tool

REGISTRY = default_registry()
google_search = REGISTRY.get("google_search").fn
google_lens = REGISTRY.get("google_lens").fn
read_webpage = REGISTRY.get("read_webpage").fn

F9 = [
    "Falcon 9 is a partially reusable medium-lift launch vehicle designed and manufactured by SpaceX.",
    "It first flew on 4 June 2010 from Cape Canaveral.",
    "The first stage is powered by nine Merlin engines burning RP-1 and liquid oxygen.",
    "Dr. Musk founded SpaceX in 2002; the vehicle is 70 m tall.",
]


@pytest.fixture
def web(tmp_path, monkeypatch):
    with FixtureWeb(image_dir=tmp_path / "img") as w:
        w.pages["f9"] = ("text/html; charset=utf-8", article("Falcon 9 - Encyclopedia", F9))
        w.pages["big"] = (
            "text/html",
            article("Big", [f"Filler sentence number {i} about nothing." for i in range(20000)]),
        )
        w.pages["pdf"] = ("application/pdf", "%PDF-1.4")
        w.web["Falcon 9 maker"] = organic(
            ("Falcon 9 - Encyclopedia", w.page_url("f9"), "Falcon 9 is made by SpaceX."),
            ("SpaceX", w.page_url("missing"), "SpaceX designs rockets."),
        )
        w.lens = {
            "search_metadata": {"status": "Success"},
            "knowledge_graph": [{"title": "Falcon 9", "subtitle": "Rocket", "link": w.page_url("f9")}],
            "visual_matches": [
                {"position": 1, "title": "Falcon 9 launch photo", "link": w.page_url("f9"), "source": "example.org"}
            ],
        }
        use_fixture_web(monkeypatch, w, tmp_path / "cache", tmp_path / "img")
        yield w
        open_web.reset_open_web()


def ctx(**kw) -> ToolContext:
    base = dict(task=2, question="who makes this rocket?")
    base.update(kw)
    return ToolContext(**base)


def test_web_search_hits_and_the_disk_cache_survives_a_restart(web):
    out = google_search(ctx(), query="Falcon  9 maker", k=5)
    hits = out.update["evidence"]
    assert [h.url for h in hits] == [web.page_url("f9"), web.page_url("missing")]
    assert hits[0].snippet == "Falcon 9 is made by SpaceX." and hits[0].score == 1.0 and hits[1].score == 0.5
    assert out.keywords == "Falcon 9 maker" and out.method == "serpapi:google"
    req = web.searches("google")[0]
    assert req["q"] == "Falcon 9 maker" and req["num"] == "5" and req["api_key"] == "test-key"
    again = google_search(ctx(), query="Falcon 9   maker", k=5)
    assert again.method == "serpapi:google (cached)" and len(web.searches()) == 1
    open_web.reset_open_web()  # a new process: the cache is on disk
    assert google_search(ctx(), query="Falcon 9 maker", k=5).method.endswith("(cached)")
    assert len(web.searches()) == 1
    assert open_web.get_open_web().stats()["searches"]["hits"] == 1
    empty = google_search(ctx(), query="no such thing", k=5)  # SerpApi's "no results" error is an empty list
    assert empty.update["evidence"] == [] and empty.summary == "no pages found"


def test_missing_key_is_a_tool_error_not_a_crash(web, monkeypatch):
    monkeypatch.delenv("SERPAPI_API_KEY")
    with pytest.raises(SerpApiError, match="SERPAPI_API_KEY"):
        google_search(ctx(), query="Falcon 9 maker")
    policy = ScriptedPolicy(
        [Decision(action="call_tool", tool="google_search", arguments={"query": "Falcon 9 maker"})],
        AnswerDraft(answer="I don't know", confidence=0.0),
    )
    agent = make_agent(policy, self_check="off", tools={"profile": "superglasses"})
    trace = agent.run_turn(TurnInput(task=2, session_id="s", interaction_id="i", question="who makes it?"))
    call = trace.tool_calls()[0]  # not offered without a key: a call to it is refused, saying why
    assert call.error.kind == "not_allowed" and "SERPAPI_API_KEY not set" in call.error.message
    assert trace.ended_by == "answer" and web.searches() == []


def test_retries_server_errors_and_reports_refusals(web):
    web.fail_next = 2
    client = SerpApiClient(web.base_url, api_key="test-key", max_retries=2, retry_wait_s=0.01)
    assert client.google("Falcon 9 maker")["organic_results"]
    assert len(web.searches()) == 3
    web.fail_next = 5
    with pytest.raises(SerpApiError, match="gave up after 2 attempts"):
        SerpApiClient(web.base_url, api_key="test-key", max_retries=1, retry_wait_s=0.01).google("x")
    web.fail_next = 0
    with pytest.raises(SerpApiError, match="Invalid API key"):
        SerpApiClient(web.base_url, api_key="wrong", max_retries=0).google("x")


def test_page_reader_extracts_main_text_chunks_and_caches(web):
    evidence = [
        Hit(source="web", score=1.0, url=web.page_url("f9"), snippet="Falcon 9 is made by SpaceX."),
        Hit(source="web", score=0.5, url=web.page_url("missing"), snippet="404"),
        Hit(source="web", score=0.3, url=web.page_url("pdf"), snippet="a pdf"),
    ]
    out = read_webpage(
        ctx(evidence=evidence), query="how many engines does the first stage have", max_pages=3, chunks_per_page=1
    )
    hits = out.update["evidence"]
    assert len(hits) == 1 and hits[0].url == web.page_url("f9") and hits[0].title == "Falcon 9 - Encyclopedia"
    assert "nine Merlin engines" in hits[0].content
    assert "missing" in out.summary and "404" in out.summary and "not a web page (application/pdf)" in out.summary
    page, cached = open_web.get_open_web().read(web.page_url("f9"))
    assert cached and page.error is None
    assert "Home" not in page.text and "cookie" not in page.text and page.text.count("nine Merlin engines") == 1
    assert [c.count("Merlin") for c in page.chunks] and all(len(c.split()) <= 120 for c in page.chunks)
    n = len([r for r in web.requests if r["path"] == "/pages/f9"])
    read_webpage(ctx(evidence=evidence[:1]), query="engines")  # from the disk cache: no new request
    assert len([r for r in web.requests if r["path"] == "/pages/f9"]) == n
    # failures are not cached: the missing page is asked again
    assert len([r for r in web.requests if r["path"] == "/pages/missing"]) == 1
    open_web.get_open_web().read(web.page_url("missing"))
    assert len([r for r in web.requests if r["path"] == "/pages/missing"]) == 2


def test_page_reader_bounds_the_download(web, monkeypatch):
    from glasses_rag.web.webpage import read_page

    ow = open_web.get_open_web()
    config = ow.config.model_copy(update={"max_page_bytes": 20_000})
    page = read_page(web.page_url("big"), ow.pages_http, ow.extractor, config)
    assert page.truncated and page.error is None and len(page.text) < 20_000
    assert read_page("file:///etc/passwd", ow.pages_http, ow.extractor, ow.config).error.startswith("ValueError")


def test_sentence_chunks_respect_abbreviations_and_the_word_bound():
    assert paragraph_sentences("Dr. Smith flew 3.5 km. It was fun.") == ["Dr. Smith flew 3.5 km.", "It was fun."]
    text = "\n".join(["One two three four five. Six seven eight nine ten."] * 3)
    chunks = chunk_text(text, chunk_words=10)
    assert chunks == ["One two three four five. Six seven eight nine ten."] * 3
    assert chunk_text("word " * 25, chunk_words=10) == ["word " * 9 + "word"] * 2 + ["word " * 4 + "word"]


def test_google_lens_publishes_the_image_and_caches_by_pixels(web, tmp_path):
    image = Image.new("RGB", (40, 30), (10, 20, 30))
    out = google_lens(ctx(image=image))
    hits = out.update["evidence"]
    assert hits[0].source == "image_kg" and hits[0].entity_name == "Falcon 9" and hits[0].score == 1.0
    assert hits[1].source == "web" and hits[1].url == web.page_url("f9")
    req = web.searches("google_lens")[0]
    assert req["url"].startswith(f"{web.base_url}/images/") and req["url"].endswith(".jpg")
    assert (tmp_path / "img" / Path(req["url"]).name).is_file()  # served where the URL says
    same = Image.new("RGB", (40, 30), (10, 20, 30))  # another object, same pixels
    assert google_lens(ctx(image=same)).method == "serpapi:google_lens (cached)" and len(web.searches()) == 1
    with pytest.raises(ValueError, match="no usable image"):
        google_lens(ctx())


def test_google_lens_without_image_hosting_is_a_clear_error(web, monkeypatch):
    monkeypatch.delenv("GLASSES_IMAGE_DIR")
    with pytest.raises(SerpApiError, match="GLASSES_IMAGE_DIR"):
        google_lens(ctx(image=Image.new("RGB", (8, 8), (1, 2, 3))))


# ---------------------------------------------------------------------------------------------------------------
# profiles


def test_profiles_separate_crag_mm_and_superglasses_tools():
    crag = {t.name for t in REGISTRY.for_task(2, profile=CRAG_MM.tools)}
    sg = {t.name for t in REGISTRY.for_task(2, profile=SUPERGLASSES.tools)}
    assert {"image_search", "web_search"} <= crag and not {"google_search", "google_lens", "read_webpage"} & crag
    assert {"google_search", "google_lens", "read_webpage"} <= sg and not {"image_search", "web_search"} & sg
    assert {"detect_crop", "ocr", "query_decoupler", "reranker"} <= crag & sg
    assert "google_search" not in {t.name for t in REGISTRY.for_task(1, profile=SUPERGLASSES.tools)}  # no web
    with pytest.raises(ToolCallError) as e:
        REGISTRY.validate(ToolCall(tool="google_search", arguments={"query": "x"}), 2, profile=CRAG_MM.tools)
    assert e.value.kind == "not_allowed" and "(it reaches open_web)" in e.value.message
    REGISTRY.validate(ToolCall(tool="google_search", arguments={"query": "x"}), 2, profile=SUPERGLASSES.tools)


def test_tools_declare_what_they_reach_and_a_profile_offers_what_it_allows():
    reg = ToolRegistry()

    @reg.register
    @tool()
    def plain(ctx: ToolContext) -> None:
        """Works on the turn alone: every benchmark offers it."""

    @reg.register
    @tool(reaches={OPEN_WEB})
    def web_only(ctx: ToolContext) -> None:
        """Reaches the open web."""

    offline = ToolProfile(name="offline", allows=frozenset())
    assert [t.name for t in reg.for_task(2, profile=CRAG_MM.tools)] == ["plain"]
    assert [t.name for t in reg.for_task(2, profile=SUPERGLASSES.tools)] == ["plain", "web_only"]  # not cached
    assert [t.name for t in reg.for_task(2, ["web_only"], profile=SUPERGLASSES.tools)] == ["web_only"]
    assert [t.name for t in reg.for_task(2, profile=offline)] == ["plain"]
    assert [t.name for t in reg.for_task(2)] == ["plain", "web_only"]  # no profile: every tool of the task

    def other(ctx: ToolContext) -> None:
        """Declared to reach something no profile knows."""

    with pytest.raises(TypeError, match="reaches must be a subset of"):
        tool(reaches={"kddcup"})(other)
    with pytest.raises(ValueError, match="unknown reach"):
        ToolProfile(name="bad", allows=frozenset({"kddcup"}))


def test_a_crag_mm_agent_never_runs_open_web_tools():
    policy = ScriptedPolicy(
        [Decision(action="call_tool", tool="google_search", arguments={"query": "x"})],
        AnswerDraft(answer="I don't know", confidence=0.0),
    )
    trace = make_agent(policy, self_check="off").run_turn(
        TurnInput(task=2, session_id="s", interaction_id="i", question="q?")
    )
    assert trace.tool_calls()[0].error.kind == "not_allowed"


def test_an_agent_configured_for_another_benchmark_needs_that_benchmarks_profile():
    from glasses_rag.retrieval.search import NullSearch
    from graph.build import build_agent
    from graph.config import AgentConfig

    config = AgentConfig(tools={"profile": "superglasses"}, warm_up=False)
    with pytest.raises(ValueError, match=r"names the tool profile 'superglasses'.*tool_profile=<its Benchmark>.tools"):
        build_agent(config, search=NullSearch())  # never a CRAG-MM agent under a SuperGlasses name
    agent = build_agent(config, search=NullSearch(), tool_profile=SUPERGLASSES.tools)
    assert "read_webpage" in {t.name for t in agent.registry.for_task(2, None, agent.tool_profile)}
