"""benchmarks/generalization.py: the retrieval ablation is chosen by tag, deltas are computed per set and task,
and missing content folders are skipped (the script runs before the other sets exist)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import generalization as g  # noqa: E402


def test_the_ablation_removes_the_retrieval_tools_by_tag():
    kept = g.without_retrieval(2)
    assert "image_search" not in kept and "web_search" not in kept
    assert {"ocr", "detect_crop"} <= set(kept)


def row(s, t, agent, truth, score, halluc=0.0):
    return {
        "set": s,
        "task": t,
        "agent": agent,
        "n": 10,
        "accuracy": 0,
        "missing": 0,
        "hallucination": halluc,
        "truthfulness": truth,
        "score": score,
    }


def test_ablation_and_paraphrase_deltas():
    rows = [
        row("demo", 2, "default", 0.8, 0.7),
        row("demo", 2, "no-retrieval", 0.1, 0.05),
        row("demo-paraphrase", 2, "default", 0.75, 0.6, halluc=0.2),
    ]
    d = {x["set"]: x for x in g.deltas(rows)}
    assert round(d["demo"]["ablation_truthfulness"], 3) == 0.7 and round(d["demo"]["ablation_score"], 3) == 0.65
    assert round(d["demo-paraphrase"]["paraphrase_score"], 3) == -0.1
    assert d["demo"]["hallucination_ok"] and not d["demo-paraphrase"]["hallucination_ok"]


def test_missing_content_folders_are_skipped(tmp_path, capsys):
    assert g.main(["--sets", "no-such-set", "--content-root", str(tmp_path), "--json", str(tmp_path / "o.json")]) == 0
    out = capsys.readouterr().out
    assert "skipped" in out and "no-such-set" in out
    assert '"skipped": [\n  "no-such-set"\n ]' in (tmp_path / "o.json").read_text()
