"""The loader reads both CRAG-MM layouts, decodes labels from features and survives bad rows."""

from __future__ import annotations

import io

import pytest
from datasets import ClassLabel, Dataset, DatasetDict, Features, Image, List, Value
from PIL import Image as PILImage

from glasses_rag.crag_mm.dataset import IMAGE_URL_ONLY, LoadReport, decode_image, load_all, load_conversations

DOMAINS = ["animal", "other", "shopping"]
CATS = ["reasoning", "simple-knowledge", "simple-recognition"]
DYN = ["fast-changing", "static"]
QUAL = ["rotated", "low light", "normal"]


def _png(color=(200, 30, 30)) -> bytes:
    buf = io.BytesIO()
    PILImage.new("RGB", (24, 16), color).save(buf, format="PNG")
    return buf.getvalue()


def _turn_feats():
    return {
        "interaction_id": Value("string"),
        "domain": ClassLabel(names=DOMAINS),
        "query_category": ClassLabel(names=CATS),
        "dynamism": ClassLabel(names=DYN),
        "query": Value("string"),
        "image_quality": ClassLabel(names=QUAL),
    }


def _ans_feats():
    return {"interaction_id": Value("string"), "ans_full": Value("string")}


def _v012_rows():
    def turns(ids, qs):
        return {
            "interaction_id": ids,
            "domain": [2] * len(ids),
            "query_category": [2] * len(ids),
            "dynamism": [1] * len(ids),
            "query": qs,
            "image_quality": [1] * len(ids),
        }

    return [
        {
            "session_id": "ok",
            "image": {"bytes": _png(), "path": None},
            "image_url": None,
            "turns": turns(["a", "b"], ["what is this?", "who makes it?"]),
            "answers": {"interaction_id": ["a", "b"], "ans_full": ["a cup", "acme"]},
        },
        {
            "session_id": "url-only",
            "image": None,
            "image_url": "https://example.com/x.jpg",
            "turns": turns(["c"], ["what is this?"]),
            "answers": {"interaction_id": ["c"], "ans_full": ["x"]},
        },
        {
            "session_id": "corrupt",
            "image": {"bytes": b"\x89PNG\r\n\x1a\nnot really", "path": None},
            "image_url": None,
            "turns": turns(["d"], ["what is this?"]),
            "answers": {"interaction_id": ["d"], "ans_full": ["y"]},
        },
        {
            "session_id": "no-query",
            "image": {"bytes": _png(), "path": None},
            "image_url": None,
            "turns": turns(["e"], [""]),
            "answers": {"interaction_id": ["e"], "ans_full": ["z"]},
        },
        {
            "session_id": "mismatch",
            "image": {"bytes": _png(), "path": None},
            "image_url": None,
            "turns": turns(["f", "g"], ["q1?", "q2?"]),
            "answers": {"interaction_id": ["f"], "ans_full": ["only one"]},
        },
        {
            "session_id": "last",
            "image": {"bytes": _png((0, 0, 255)), "path": None},
            "image_url": None,
            "turns": turns(["h"], ["what color?"]),
            "answers": {"interaction_id": ["h"], "ans_full": ["blue"]},
        },
    ]


def _v012_dataset():
    feats = Features(
        {
            "session_id": Value("string"),
            "image": Image(),
            "image_url": Value("string"),
            "turns": {k: List(v) for k, v in _turn_feats().items()},
            "answers": {k: List(v) for k, v in _ans_feats().items()},
        }
    )
    return Dataset.from_list(_v012_rows(), features=feats)


def _check_v012(convs, rep):
    ids = [c.session_id for c in convs]
    # a turn without a query keeps its conversation (it is answered "I don't know"); a turn/answer mismatch does not
    assert ids == ["ok", "url-only", "corrupt", "no-query", "last"], rep.messages
    assert rep.loaded == 5 and rep.skipped == 1 and rep.bad_turns == 1
    assert any("no-query" in m and "no query" in m for m in rep.messages) and any("mismatch" in m for m in rep.messages)
    assert convs[3].turns[0].query == ""
    ok = convs[0]
    image, err = decode_image(ok.image)  # images are decoded by the runner, lazily
    assert err is None and image.size == (24, 16) and ok.egocentric is True
    assert [t.domain for t in ok.turns] == ["shopping", "shopping"]
    assert ok.turns[0].query_category == "simple-recognition" and ok.turns[0].dynamism == "static"
    assert ok.turns[0].image_quality == "low light" and ok.answers == ["a cup", "acme"]
    url = convs[1]
    assert url.image is None and url.image_error == IMAGE_URL_ONLY and url.egocentric is False
    bad = convs[2]
    assert bad.egocentric is True and decode_image(bad.image)[1].startswith("corrupt image")
    assert rep.image_errors == 1


def test_v012_parquet_folder(tmp_path):
    (tmp_path / "data").mkdir()
    _v012_dataset().to_parquet(str(tmp_path / "data" / "validation-00000-of-00001.parquet"))
    convs, rep = load_all(tmp_path)
    assert rep.layout == "v0.1.2 dict-of-lists"
    _check_v012(convs, rep)


def test_v012_save_to_disk_dict_and_limit(tmp_path):
    DatasetDict({"validation": _v012_dataset()}).save_to_disk(str(tmp_path / "dd"))
    convs, rep = load_all(tmp_path / "dd", split="validation")
    _check_v012(convs, rep)
    rep2 = LoadReport()
    assert [c.session_id for c in load_conversations(tmp_path / "dd", limit=2, report=rep2)] == ["ok", "url-only"]
    assert rep2.loaded == 2


def test_v011_list_of_dicts(tmp_path):
    feats = Features(
        {
            "session_id": Value("string"),
            "image": Image(),
            "image_url": Value("string"),
            "turns": List(_turn_feats()),
            "answers": List(_ans_feats()),
        }
    )
    rows = [
        {
            "session_id": "s1",
            "image": {"bytes": _png(), "path": None},
            "image_url": "",
            "turns": [
                {
                    "interaction_id": "i1",
                    "domain": 0,
                    "query_category": 1,
                    "dynamism": 0,
                    "query": "what animal is this?",
                    "image_quality": 0,
                }
            ],
            "answers": [{"interaction_id": "i1", "ans_full": "a cat"}],
        },
        {
            "session_id": "s2",
            "image": {"bytes": _png(), "path": None},
            "image_url": "",
            "turns": [
                {
                    "interaction_id": "i2",
                    "domain": 1,
                    "query_category": 0,
                    "dynamism": 1,
                    "query": "q1?",
                    "image_quality": 2,
                },
                {
                    "interaction_id": "i3",
                    "domain": 1,
                    "query_category": 0,
                    "dynamism": 1,
                    "query": "q2?",
                    "image_quality": 2,
                },
            ],
            "answers": [{"interaction_id": "i2", "ans_full": "a1"}, {"interaction_id": "i3", "ans_full": "a2"}],
        },
        {"session_id": "broken", "image": None, "image_url": "", "turns": [], "answers": []},
    ]
    Dataset.from_list(rows, features=feats).save_to_disk(str(tmp_path / "v011"))
    convs, rep = load_all(tmp_path / "v011")
    assert rep.layout == "v0.1.1 list-of-dicts"
    assert [c.session_id for c in convs] == ["s1", "s2"] and rep.skipped == 1
    assert convs[0].egocentric is False  # image_url "" is not None: not egocentric, as the official code decides
    t = convs[0].turns[0]
    assert (t.domain, t.query_category, t.dynamism, t.image_quality) == (
        "animal",
        "simple-knowledge",
        "fast-changing",
        "rotated",
    )
    assert convs[1].answers == ["a1", "a2"] and convs[1].turns[1].domain == "other"


def test_missing_source_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    for var in ("HF_DATASETS_CACHE", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(FileNotFoundError, match="Download it beforehand"):
        list(load_conversations("crag-mm-2025/crag-mm-single-turn-public"))


def test_hub_cache_layout_is_found(tmp_path, monkeypatch):
    snap = tmp_path / "hf" / "hub" / "datasets--crag-mm-2025--crag-mm-multi-turn-public" / "snapshots" / "abc" / "data"
    snap.mkdir(parents=True)
    _v012_dataset().to_parquet(str(snap / "validation-00000-of-00001.parquet"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    for var in ("HF_DATASETS_CACHE", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        monkeypatch.delenv(var, raising=False)
    convs, rep = load_all("crag-mm-2025/crag-mm-multi-turn-public")
    _check_v012(convs, rep)


def test_iterator_carries_report(tmp_path):
    _v012_dataset().to_parquet(str(tmp_path / "validation.parquet"))
    it = load_conversations(tmp_path)
    assert it.report.loaded == 0
    convs = list(it)
    assert len(convs) == 5 and it.report.loaded == 5 and it.report.skipped == 1
    assert it.report.model_dump()["skipped"] == 1
