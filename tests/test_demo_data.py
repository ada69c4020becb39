"""The embedded demo benchmark builds deterministically and round-trips through the loader."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from crag import demo
from crag.dataset import load_all
from crag.demo import DOMAINS, IMAGE_QUALITY, QUERY_CATEGORIES, ensure_demo


@pytest.fixture(scope="module")
def paths():
    return ensure_demo()


def test_demo_builds_and_is_cached(paths):
    m = json.loads(paths.manifest.read_text())
    assert m["fingerprint"] == demo.fingerprint()
    before = paths.manifest.stat().st_mtime_ns
    assert ensure_demo().root == paths.root
    assert paths.manifest.stat().st_mtime_ns == before  # not rebuilt


def test_demo_is_deterministic(tmp_path, paths):
    other = ensure_demo(tmp_path / "demo2")
    for rel in ("kg.json", "web.json", "questions.json"):
        assert (other.root / rel).read_text() == (paths.root / rel).read_text()
    a = (other.single_turn / "validation.parquet").read_bytes()
    b = (paths.single_turn / "validation.parquet").read_bytes()
    assert a == b


def test_round_trip_through_loader(paths):
    single, rep = load_all(paths.single_turn)
    assert rep.skipped == 0 and rep.image_errors == 0, rep.messages
    assert rep.layout == "v0.1.2 dict-of-lists"
    assert len(single) == len(demo.SINGLE_TURN) >= 40
    multi, rep2 = load_all(paths.multi_turn)
    assert len(multi) == len(demo.MULTI_TURN) >= 12
    assert all(2 <= len(c.turns) <= 4 and len(c.answers) == len(c.turns) for c in multi)
    for c in single + multi:
        assert c.image is not None and c.egocentric is True
        for t in c.turns:
            assert t.domain in DOMAINS and t.query_category in QUERY_CATEGORIES
            assert t.image_quality in IMAGE_QUALITY and t.dynamism in demo.DYNAMISM
    qualities = Counter(c.turns[0].image_quality for c in single)
    assert set(qualities) == set(IMAGE_QUALITY)


def test_question_metadata_and_corpus(paths):
    meta = demo.load_question_meta(paths)
    kinds = Counter(m["kind"] for m in meta.values())
    for k in ("recognition", "kg", "web", "ocr", "multi-hop", "comparison", "no-answer", "general"):
        assert kinds[k] >= 1, k
    web = demo.load_web(paths)
    assert 30 <= len(web) <= 60
    assert len({p["page_url"] for p in web}) == len(web)
    assert any(p["prompt_injection"] for p in web)
    kg = demo.load_kg(paths)
    assert any(r["distractor"] for r in kg)
    for r in kg:
        assert (paths.root / r["image_file"]).exists()
        attrs = r["entities"][0]["entity_attributes"]
        assert all(k == k.lower() and isinstance(v, str) for k, v in attrs.items())
