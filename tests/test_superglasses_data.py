"""The SuperGlasses loader on parquet files in the exact shape of `xandery/SuperGlasses` (queries + images)."""

import io

import numpy as np
import pytest
from PIL import Image
from sg_support import jpeg, query_row, small_dataset, sub_q, write_superglasses

from glasses_rag.core.images import load_image
from glasses_rag.superglasses.loader import load_superglasses


def _load(root, **kw):
    it = load_superglasses(root, **kw)
    return {c.session_id: c for c in it}, it.report


def test_rows_join_images_and_keep_every_label(tmp_path):
    convs, rep = _load(small_dataset(tmp_path / "sg"))
    assert sorted(convs) == ["sg-0000", "sg-0001", "sg-0002", "sg-0003"]
    c = convs["sg-0001"]
    t = c.turns[0]
    assert (c.session_id, t.interaction_id, t.query, c.answers) == (
        "sg-0001",
        "sg-0001",
        "Who makes this rocket?",
        ["SpaceX"],
    )
    assert (
        t.labels["category"] == ["Entity Recognition", "Reasoning"]
        and t.query_category == "Entity Recognition|Reasoning"
    )
    assert {
        k: t.labels[k] for k in ("image_id", "difficulty", "glasses", "location", "hops", "use_image", "sg_id")
    } == {
        "image_id": 1,
        "difficulty": "Hard",
        "glasses": "Ray-Ban Meta",
        "location": "Outdoor",
        "hops": 2,
        "use_image": "Yes",
        "sg_id": "sg-0001",
    }
    assert (
        t.labels["sub_questions"][1]["retrieval-tools"]
        == '{"tool": "Text Search", "keywords": "Falcon 9 manufacturer"}'
    )
    image, info = load_image(c.image)
    assert image.size == (64, 48) and image.getpixel((30, 20))[0] > 150 and c.egocentric
    # image 1 is shared by two questions; image 2 is in the other shard
    assert load_image(convs["sg-0002"].image)[0].getpixel((5, 5))[2] > 150
    assert rep.loaded == 4 and rep.skipped == 0 and rep.images_joined == 3 and rep.use_image_no == 1
    assert len(rep.images_files) == 2 and len(rep.queries_files) == 1
    assert rep.missing_columns == [] and rep.extra_columns == []


def test_a_row_without_an_image_runs_without_it_and_is_reported(tmp_path):
    convs, rep = _load(small_dataset(tmp_path / "sg"))
    c = convs["sg-0003"]
    assert c.image is None and "no image for image_id 99" in c.image_error
    assert rep.image_errors == 1 and any("sg-0003" in m for m in rep.messages)


def test_use_image_no_runs_with_the_image_by_default_and_can_be_changed(tmp_path):
    root = small_dataset(tmp_path / "sg")
    convs, _ = _load(root)
    assert convs["sg-0002"].image is not None and convs["sg-0002"].turns[0].labels["use_image"] == "No"
    convs, rep = _load(root, use_image_no="no-image")
    assert convs["sg-0002"].image is None and "use_image is 'No'" in convs["sg-0002"].image_error
    convs, rep = _load(root, use_image_no="skip")
    assert (
        "sg-0002" not in convs and rep.skipped == 1 and "use_image is 'No'" in rep.messages[-1] + "".join(rep.messages)
    )


def test_limit_takes_the_first_rows_in_dataset_order(tmp_path):
    convs, rep = _load(small_dataset(tmp_path / "sg"), limit=2)
    assert sorted(convs) == ["sg-0000", "sg-0001"] and rep.loaded == 2


def test_odd_rows_are_kept_and_reported(tmp_path):
    noisy = Image.frombytes("RGB", (64, 64), np.random.default_rng(0).integers(0, 255, 64 * 64 * 3, np.uint8).tobytes())
    buf = io.BytesIO()
    noisy.save(buf, format="JPEG")
    truncated = buf.getvalue()[: len(buf.getvalue()) * 2 // 3]  # ends mid-scan, no end-of-image marker
    assert load_image(truncated)[0] is None  # the strict decoder refuses it
    rows = [
        query_row(0, 1, "", "x", [sub_q("q", "none")]),
        query_row(1, 2, "What is it?", "y", [], id=None),
        query_row(2, None, "What else?", "z", [sub_q("q", "none")]),
    ]
    convs, rep = _load(write_superglasses(tmp_path / "odd", rows, {1: jpeg(), 2: truncated}, shards=1))
    assert len(convs) == 3 and rep.loaded == 3 and rep.skipped == 0
    assert convs["sg-0000"].turns[0].query == "" and rep.bad_turns == 1
    assert "row-1" in convs and any("no id; named row-1" in m for m in rep.messages)
    assert rep.truncated_images == 1 and convs["row-1"].image.size == (64, 64)  # decoded leniently
    assert convs["sg-0002"].image is None and rep.image_errors == 1


def test_found_in_the_hugging_face_cache_by_its_id(tmp_path, monkeypatch):
    snap = tmp_path / "hub" / "datasets--xandery--SuperGlasses" / "snapshots" / "abc123"
    small_dataset(snap)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    convs, rep = _load("xandery/SuperGlasses")
    assert len(convs) == 4 and str(snap) in rep.queries_files[0]
    with pytest.raises(FileNotFoundError, match="huggingface-cli download"):
        load_superglasses("someone/not-cached")  # a Hub id: how to download it
    with pytest.raises(FileNotFoundError, match="not found") as e:
        load_superglasses(tmp_path / "nothing-here")  # a local path: no download hint naming the path
    assert "huggingface-cli" not in str(e.value)
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="queries parquet"):
        load_superglasses(tmp_path / "empty")
