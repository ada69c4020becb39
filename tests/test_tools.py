"""Each built-in tool on real inputs (real OCR, real MiniLM, real images), through the registry."""

import pytest
from PIL import Image, ImageDraw

from glasses_rag.models.resources import ModelPaths, Resources
from tools import HistoryTurn, Hit, Replace, ToolCall, ToolContext, default_registry

REGISTRY = default_registry()


class RecordingSearch:
    """A search backend returning fixed results in the official format, recording what it was asked."""

    name = "recording"

    def __init__(self):
        self.images, self.queries = [], []

    def image_search(self, image, k=5):
        self.images.append(image.size)
        return [
            {
                "index": 0,
                "score": 0.91,
                "url": "https://kg/0",
                "entities": [
                    {"entity_name": "Falcon 9", "entity_attributes": {"manufacturer": "SpaceX", "height": "70 m"}}
                ],
            },
            {
                "index": 1,
                "score": 0.55,
                "url": "https://kg/1",
                "entities": [{"entity_name": "Saturn V", "entity_attributes": {"manufacturer": "Boeing"}}],
            },
        ][:k]

    def web_search(self, query, k=5):
        self.queries.append(query)
        return [
            {
                "index": i,
                "score": 0.8 - i / 10,
                "page_name": f"Page {i}",
                "page_snippet": f"snippet {i} about {query}",
                "page_url": f"https://web/{i}",
            }
            for i in range(k)
        ]

    def get_page(self, url):
        return f"Full text of {url}."


@pytest.fixture(scope="module")
def resources():
    return Resources(RecordingSearch(), ModelPaths())


def run(name, ctx, **args):
    t, a = REGISTRY.validate(ToolCall(tool=name, arguments=args), ctx.task)
    return t.run(ctx, a)


def ctx_for(resources, question="what is this?", image=None, task=2, **kw):
    return ToolContext(task=task, question=question, image=image, resources=resources, **kw)


def sign_image(text_lines=("ROUTE 42", "HARBOR LINE")):
    from PIL import ImageFont

    img = Image.new("RGB", (640, 420), (40, 90, 60))
    d = ImageDraw.Draw(img)
    d.rectangle((120, 100, 520, 300), fill=(250, 250, 250))
    font = ImageFont.load_default(size=44)
    for i, line in enumerate(text_lines):
        d.text((150, 130 + i * 70), line, fill=(0, 0, 0), font=font)
    return img


def test_every_builtin_tool_is_registered_with_a_description():
    names = set(REGISTRY.names())
    assert {"ocr", "detect_crop", "image_search", "query_decoupler", "web_search", "reranker"} <= names
    assert "self_check" not in names  # a verifier injected into the self_check node, not a plannable tool
    for n in names:
        assert REGISTRY.get(n).description
    assert "web_search" not in {t.name for t in REGISTRY.for_task(1)}
    assert "web_search" in {t.name for t in REGISTRY.for_task(3)}


def test_ocr_reads_rendered_text(resources):
    out = run("ocr", ctx_for(resources, image=sign_image()))
    assert out.method == "rapidocr"
    assert "ROUTE 42" in out.update["ocr_text"].upper() and "HARBOR" in out.update["ocr_text"].upper()


def test_ocr_on_a_photo_without_text_prints_nothing(resources, capfd):
    """rapidocr warns "The text detection result is empty" on its own handler: noise in a run's output."""
    out = run("ocr", ctx_for(resources, image=Image.new("RGB", (320, 240), (90, 120, 160))))
    assert out.update.get("ocr_text", "") == ""
    captured = capfd.readouterr()
    assert "RapidOCR" not in captured.err + captured.out


def test_ocr_without_image_raises_clearly(resources):
    with pytest.raises(ValueError, match="no usable image"):
        run("ocr", ctx_for(resources, image=None))


def test_detect_crop_heuristics_find_text_region_and_salient_object(resources):
    img = sign_image()
    out = run("detect_crop", ctx_for(resources, question="what does this sign say?", image=img), target="the sign")
    b = out.update["crop"]
    assert out.method.startswith("heuristic:ocr-box")
    assert 100 <= b.x0 < 200 and b.x1 <= 560 and b.area() < 640 * 420 / 2

    import skimage.data

    coffee = Image.fromarray(skimage.data.coffee())
    out = run("detect_crop", ctx_for(resources, question="what is in this cup?", image=coffee), target="the cup")
    assert out.method.startswith("heuristic:saliency")
    assert 0 < out.update["crop"].area() < coffee.width * coffee.height


def test_image_search_merges_crop_and_full_results(resources):
    from tools.base import Box

    img = Image.new("RGB", (300, 200), (120, 10, 10))
    out = run("image_search", ctx_for(resources, image=img, crop=Box(x0=10, y0=10, x1=110, y1=90)))
    assert [h.entity_name for h in out.update["evidence"]] == ["Falcon 9", "Saturn V"]
    assert out.update["evidence"][0].attributes["manufacturer"] == "SpaceX"
    assert resources.search.images[-2:] == [(300, 200), (100, 80)]


def test_web_search_records_keywords_and_fetches_page_text(resources):
    out = run("web_search", ctx_for(resources), query="  Falcon 9   first flight ", k=3)
    assert out.keywords == "Falcon 9 first flight" and len(out.update["evidence"]) == 3
    assert out.update["evidence"][0].content == "Full text of https://web/0."
    with pytest.raises(ValueError):
        run("web_search", ctx_for(resources), query="   ")


def test_query_decoupler_splits_and_resolves_with_entity_from_evidence(resources):
    ev = [Hit(source="image_kg", score=0.9, entity_name="Falcon 9", attributes={})]
    out = run("query_decoupler", ctx_for(resources, "Who built this rocket and when did it first fly?", evidence=ev))
    assert out.update["sub_questions"] == ["Who built Falcon 9?", "when did Falcon 9 first fly?"]
    hist = [HistoryTurn(question="what is this?", answer="Chelsea the cat", entity="Chelsea")]
    out = run("query_decoupler", ctx_for(resources, "How old is it?", history=hist))
    assert out.update["sub_questions"] == ["How old is Chelsea?"]


def test_reranker_orders_by_relevance_and_drops_outliers(resources):
    ev = [
        Hit(source="web", score=0.5, title="Bananas", snippet="Bananas are yellow fruit rich in potassium."),
        Hit(source="web", score=0.5, title="Falcon 9", snippet="Falcon 9 is a reusable rocket built by SpaceX."),
        Hit(source="web", score=0.5, title="Weather", snippet="Rain is expected tomorrow afternoon."),
        Hit(source="web", score=0.5, title="SpaceX", snippet="SpaceX manufactures the Falcon 9 launch vehicle."),
    ]
    out = run("reranker", ctx_for(resources, "Which company builds the Falcon 9 rocket?", evidence=ev), lam=0.5)
    assert isinstance(out.update["evidence"], Replace) and out.method == "heuristic:minilm-embedding"
    hits = out.update["evidence"].value
    assert {h.title for h in hits[:2]} == {"Falcon 9", "SpaceX"}
    assert "Weather" not in {h.title for h in hits}
    assert all(a.rerank_score >= b.rerank_score for a, b in zip(hits, hits[1:]))


def test_heuristic_verifier_supports_grounded_answers_and_rejects_invented_ones():
    from glasses_rag.policies.protocol import AnswerDraft
    from glasses_rag.policies.self_check import EvidenceSupportVerifier

    ev = [Hit(source="web", score=0.8, title="SpaceX", snippet="The Falcon 9 is built by SpaceX in Hawthorne.").text()]
    v = EvidenceSupportVerifier()
    ok = v.verify("who builds it?", AnswerDraft(answer="SpaceX", confidence=0.9), ev)
    bad = v.verify("who builds it?", AnswerDraft(answer="Boeing", confidence=0.9), ev)
    assert ok.supported and ok.confidence == pytest.approx(0.9)
    assert not bad.supported and bad.confidence == 0.0
    assert ok.method == "heuristic:evidence-support"


def test_bad_arguments_are_rejected_before_running(resources):
    from tools import ToolCallError

    with pytest.raises(ToolCallError) as e:
        REGISTRY.validate(ToolCall(tool="web_search", arguments={"query": "x", "k": "lots"}), 2)
    assert e.value.kind == "bad_arguments"
    with pytest.raises(ToolCallError) as e:
        REGISTRY.validate(ToolCall(tool="web_search", arguments={"query": "x"}), 1)
    assert e.value.kind == "not_allowed"
