"""Numbers that leave [0, 1] (a negative hallucination, truthfulness above 1) carry their reason where they are
shown: the console table and report.txt, the truthfulness chart (not clipped at 1), the presets table and chart.
The official formulas stay as they are (tests/test_evaluate.py and tests/test_scoring.py hold the parity)."""

from __future__ import annotations

import numpy as np
from PIL import Image

from benchmarks.preset_runs import Row
from benchmarks.presets import both_note, chart, table
from glasses_rag.crag_mm.evaluate import TurnRecord, evaluate, format_table, plot_report
from glasses_rag.crag_mm.scoring import WhitespaceApproxTruncator

IDK = "I don't know"


def _report(idk_turns: int = 1):
    """Five single-turn questions answered right, `idk_turns` of them a ground-truth "I don't know" answered so."""
    recs = [
        TurnRecord(
            session_id=f"s{i}", turn_index=0, query="q", answer="Paris", ground_truth="Paris", labels={"domain": "d"}
        )
        for i in range(5 - idk_turns)
    ]
    recs += [
        TurnRecord(session_id=f"i{i}", turn_index=0, query="q", answer=IDK, ground_truth=IDK, labels={"domain": "d"})
        for i in range(idk_turns)
    ]
    return evaluate(recs, judge=None, truncator=WhitespaceApproxTruncator())


def test_the_official_numbers_stay_and_the_table_says_why_they_leave_the_range():
    rep = _report()
    o = rep.overall
    assert (o.accuracy, o.missing_rate, o.incorrect) == (1.0, 0.2, -1)  # the official counting, unchanged
    assert abs(o.truthfulness - 1.2) < 1e-9 and o.correct_and_missing == 1
    text = format_table(rep)
    overall = next(line for line in text.splitlines() if line.startswith("overall"))
    assert overall.endswith(" *") and "1.2000" in overall
    star = next(line for line in text.splitlines() if line.startswith("* "))
    assert "1 turn(s) counted as BOTH correct and missing" in star and "below 0" in star and "docs/scoring.md" in star
    assert "correct-and-missing=1" in text
    clean = format_table(_report(idk_turns=0))
    assert " *" not in clean and "\n* " not in clean  # no note when every number is in range


def test_the_truthfulness_chart_shows_values_above_one_and_explains_them(tmp_path):
    path = plot_report(_report(), tmp_path / "t.png")
    with Image.open(path) as im:
        a = np.asarray(im.convert("RGB"))
    green = (a[..., 1] > 120) & (a[..., 0] < 80) & (a[..., 2] < 80)
    cols = np.where(green.any(axis=0))[0]
    # the bar (1.2) ends left of the axes' right edge: the x range was widened, the bar not clipped at 1.0
    right_edge = np.where((a[..., :3] < 40).all(axis=2).sum(axis=0) > a.shape[0] // 3)[0].max()
    assert cols.size and cols.max() < right_edge - 5
    assert a[-40:].min() < 100  # the note under the chart is drawn


def test_the_presets_table_and_chart_say_why_a_row_passes_one(tmp_path):
    rows = [
        Row(label="rule", n=5, truthfulness=1.2, accuracy=1.0, missing=0.2, correct_and_missing=1),
        Row(label="no-retrieval", n=5, truthfulness=-0.2, accuracy=0.2, missing=0.4),
    ]
    text = table(rows)
    assert next(line for line in text.splitlines() if line.startswith("rule ")).endswith(" *")
    assert not next(line for line in text.splitlines() if line.startswith("no-retrieval ")).endswith("*")
    assert "BOTH correct and missing" in text and "per preset: rule 1" in text
    assert both_note(rows[1:]) is None
    assert chart(rows, tmp_path / "p.png", "t").stat().st_size > 1000
