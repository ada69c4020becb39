from __future__ import annotations

import json

import pytest

from crag.evaluate import (
    EvalReport,
    TurnRecord,
    apply_early_stop,
    evaluate,
    format_table,
    records_from_traces,
    write_report,
)
from crag.scoring import RuleJudge


def test_early_stop_rule():
    assert apply_early_stop(["correct", "incorrect", "missing", "correct"])[0] == [
        "correct", "incorrect", "missing", "missing"]
    res, stopped = apply_early_stop(["incorrect", "incorrect", "correct", "correct"])
    assert res == ["incorrect", "incorrect", "missing", "missing"] and stopped == [False, False, True, True]
    # alternating never triggers; the pair itself keeps its results
    assert apply_early_stop(["incorrect", "correct", "incorrect", "correct"])[0] == [
        "incorrect", "correct", "incorrect", "correct"]
    assert apply_early_stop(["missing", "missing"])[0] == ["missing", "missing"]
    assert apply_early_stop(["missing", "missing", "incorrect"])[0] == ["missing", "missing", "missing"]
    assert apply_early_stop(["incorrect"])[0] == ["incorrect"]


C, I, M = "GT", "something else", "I don't know"


def _conv(sid, kinds, domain="vehicle", ego=False):
    out = []
    for i, k in enumerate(kinds):
        out.append(
            TurnRecord(
                session_id=sid, turn_index=i, query=f"q{i}", answer={"C": "gt", "I": I, "M": M}[k], ground_truth=C,
                labels={"domain": domain, "query_category": "simple", "image_quality": "normal", "dynamism": "static"},
                egocentric=ego,
            )
        )
    return out


@pytest.fixture()
def records():
    # A: C I M C -> C I M M ; B: I I C -> I I M ; E (ego): C
    return _conv("A", "CIMC") + _conv("B", "IIC", domain="food") + _conv("E", "C", domain="food", ego=True)


def test_hand_computed_metrics(records):
    rep = evaluate(records)  # exact match + IDK only
    o = rep.overall
    assert (o.total, o.correct, o.missing, o.incorrect, o.conversations) == (8, 2, 3, 3, 3)
    assert o.truthfulness == pytest.approx((2 * 2 + 3) / 8 - 1)  # -0.125
    assert o.accuracy == pytest.approx(2 / 8)
    assert o.missing_rate == pytest.approx(3 / 8)
    assert o.hallucination_rate == pytest.approx(3 / 8)
    # per conversation: A 1/4-1/4=0, B 0-2/3, E 1 -> mean
    assert o.multi_turn_score == pytest.approx((0 - 2 / 3 + 1) / 3)
    assert o.exact_match == 2
    by_sid = {(t.session_id, t.turn_index): t for t in rep.turns}
    assert by_sid[("A", 3)].raw_result == "correct" and by_sid[("A", 3)].result == "missing"
    assert by_sid[("A", 3)].early_stopped and not by_sid[("A", 3)].is_exact_match
    assert by_sid[("B", 2)].result == "missing"


def test_slices(records):
    rep = evaluate(records)
    dom = rep.slices["domain"]
    assert set(dom) == {"vehicle", "food"}
    assert dom["vehicle"].total == 4 and dom["vehicle"].truthfulness == pytest.approx((2 * 1 + 2) / 4 - 1)
    assert dom["food"].total == 4 and dom["food"].correct == 1 and dom["food"].incorrect == 2
    turn = rep.slices["turn_index"]
    assert turn["0"].total == 3 and turn["0"].correct == 2 and turn["0"].incorrect == 1
    assert turn["3"].missing == 1
    ego = rep.slices["egocentric"]
    assert ego["egocentric"].total == 1 and ego["normal"].total == 7
    assert rep.egocentric is not None and rep.egocentric.truthfulness == 1.0
    for key in ("query_category", "image_quality", "dynamism"):
        assert key in rep.slices


def test_single_turn_truthfulness_is_mean_of_scores():
    recs = []
    for i, k in enumerate("CCIMM"):
        recs += _conv(f"s{i}", k)
    o = evaluate(recs).overall
    assert o.truthfulness == pytest.approx((1 + 1 - 1 + 0 + 0) / 5)
    assert o.multi_turn_score == pytest.approx(o.truthfulness)


def test_rule_judge_and_missing_ground_truth():
    recs = [
        TurnRecord(session_id="x", turn_index=0, answer="It is 70 meters tall.", ground_truth="70 m"),
        TurnRecord(session_id="y", turn_index=0, answer="whatever", ground_truth=None),
    ]
    rep = evaluate(recs, judge=RuleJudge())
    assert rep.overall.correct == 1 and rep.skipped_no_ground_truth == 1
    assert rep.judge == "rule-judge (approximate)"
    assert any("approximate" in n for n in rep.notes)
    assert rep.slices["egocentric"]["unknown"].total == 1


def test_truncated_idk_is_not_missing():
    long = " ".join(["blah"] * 90) + " I don't know"
    rep = evaluate([TurnRecord(session_id="a", turn_index=0, answer=long, ground_truth="x")])
    assert rep.overall.incorrect == 1 and rep.turns[0].truncated


def _trace(sid, idx, answer, gt, score=None):
    from traces.schema import TurnTrace

    return TurnTrace(
        run_id="r", task=3, session_id=sid, interaction_id=f"{sid}-{idx}", turn_index=idx, question="q?",
        has_image=True, policy="p", search_backend="embedded", budget_s=10, max_steps=4, answer=answer,
        abstained=False, ended_by="answer", latency_ms=1.0, ground_truth=gt, score=score,
        labels={"domain": "plants", "query_category": "simple", "dynamism": None, "image_quality": "normal"},
    )


def test_records_from_traces_prescored_and_rescore():
    traces = [_trace("s", 0, "rose", "rose"), _trace("s", 1, "tulip", "daisy", score="correct"),
              _trace("t", 0, "I don't know", "x")]
    recs = records_from_traces(traces, egocentric={"s": True})
    assert recs[0].egocentric is True and recs[2].egocentric is None
    assert recs[1].result == "correct" and recs[0].labels["domain"] == "plants"
    rep = evaluate(recs)
    assert rep.overall.correct == 2 and rep.overall.missing == 1  # pre-scored kept
    assert rep.slices["dynamism"]["unknown"].total == 3
    rescored = evaluate(recs, rescore=True)
    assert rescored.overall.correct == 1 and rescored.overall.incorrect == 1


def test_write_report(tmp_path, records):
    rep = evaluate(records)
    paths = write_report(rep, tmp_path / "out")
    data = json.loads(paths["json"].read_text())
    again = EvalReport.model_validate(data)
    assert again.overall == rep.overall
    table = paths["table"].read_text()
    assert table == format_table(rep)
    lines = table.splitlines()
    assert any(line.startswith("overall") for line in lines)
    assert "domain=" not in table and "[domain]" in table
    row = next(line for line in lines if line.startswith("overall"))
    assert "-0.125" in row
    # fixed width: all metric rows have the same length
    rows = [line for line in lines if line.startswith("  ") or line.startswith("overall")]
    assert len({len(r) for r in rows}) == 1
    png = paths["plot"].read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 1000


def test_empty_evaluation(tmp_path):
    rep = evaluate([])
    assert rep.overall.total == 0
    write_report(rep, tmp_path)
