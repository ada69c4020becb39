"""A dataset names images by path only inside its own folder (or an image root the user named): a row pointing at a
private file elsewhere is refused with the reason, and the turn runs without it."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image, ImageDraw

from glasses_rag.core.images import IMAGE_ROOT_ENV, confine
from glasses_rag.crag_mm.dataset import decode_image, load_all, load_conversations
from glasses_rag.frontends.run import main
from glasses_rag.superglasses.loader import load_superglasses
from tests.sg_support import jpeg, query_row, sub_q, write_superglasses

SECRET = "PRIVATE NOTE 4711"


def _note(path: Path) -> Path:
    """A private picture holding readable text (what OCR would put into the trace and the answer)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    im = Image.new("RGB", (960, 1280), "white")  # the harness's own frame: OCR reads it undistorted
    ImageDraw.Draw(im).text((40, 600), SECRET, fill="black", font_size=72)
    im.save(path)
    return path


def _crag_rows(root: Path, cells: dict[str, dict]) -> Path:
    """A CRAG-MM v0.1.2 parquet under `root/data` whose image cells are `cells` ({bytes, path} dicts)."""
    turns = {
        "interaction_id": ["i"],
        "domain": ["other"],
        "query_category": ["simple-recognition"],
        "dynamism": ["static"],
        "query": ["What does the note say?"],
        "image_quality": ["normal"],
    }
    rows = [
        {
            "session_id": sid,
            "image": cell,
            "image_url": None,
            "turns": {**turns, "interaction_id": [sid]},
            "answers": {"interaction_id": [sid], "ans_full": ["nothing"]},
        }
        for sid, cell in cells.items()
    ]
    (root / "data").mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), root / "data" / "validation-00000-of-00001.parquet")
    return root


def _png_bytes() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (32, 32), (10, 200, 10)).save(buf, format="PNG")
    return buf.getvalue()


def test_confine_resolves_symlinks_and_relative_paths(tmp_path):
    data, private = tmp_path / "data", _note(tmp_path / "private" / "note.png")
    (data / "img").mkdir(parents=True)
    (data / "img" / "ok.png").write_bytes(_png_bytes())
    (data / "img" / "link.png").symlink_to(private)
    assert confine("img/ok.png", [data])[0] == str(data / "img" / "ok.png")
    for bad in (str(private), "../private/note.png", "img/link.png", "img/../../private/note.png", "a\0b"):
        real, why = confine(bad, [data])
        assert real is None and "refused" in why, bad
    assert confine(str(private), [data, tmp_path / "private"])[0] == str(private)  # an image root the user named


def test_an_outside_image_path_in_a_crag_row_is_refused_and_the_turn_goes_on(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv(IMAGE_ROOT_ENV, raising=False)
    private = _note(tmp_path / "private" / "note.png")
    data = tmp_path / "ds"
    (data / "img").mkdir(parents=True)
    (data / "img" / "ok.png").write_bytes(_png_bytes())
    _crag_rows(
        data,
        {
            "abs": {"bytes": None, "path": str(private)},
            "rel": {"bytes": None, "path": "../private/note.png"},
            "inside": {"bytes": None, "path": "img/ok.png"},
        },
    )
    convs, rep = load_all(data)
    by_id = {c.session_id: c for c in convs}
    for sid in ("abs", "rel"):
        assert by_id[sid].image is None and "refused" in by_id[sid].image_error
    assert decode_image(by_id["inside"].image)[0].size == (32, 32) and rep.image_errors == 2
    # the user names the private folder: then it is read
    allowed = {c.session_id: c for c in load_conversations(data, image_root=tmp_path / "private")}
    assert decode_image(allowed["abs"].image)[0] is not None
    out = tmp_path / "runs"
    consoles = []
    for run_id, extra in (("refused", []), ("allowed", ["--image-root", str(tmp_path / "private")])):
        assert (
            main(
                [
                    "--task",
                    "1",
                    "--data",
                    str(data),
                    "--out",
                    str(out),
                    "--run-id",
                    run_id,
                    "--no-progress",
                    "--no-plot",
                    "--budget",
                    "20",
                    *extra,
                ]
            )
            == 0
        )
        consoles.append(capsys.readouterr())
    traces = {p.name: json.loads(p.read_text()) for p in (out / "refused").glob("*__00.json")}
    notes = {t["session_id"]: t["image"]["note"] or "" for t in traces.values()}
    assert "refused" in notes["abs"] and "refused" in notes["rel"] and traces["inside__00.json"]["image"]["size"]
    assert all(t["image"]["size"] is None for t in traces.values() if t["session_id"] != "inside")

    def written(run_id: str) -> str:
        return "".join(p.read_text(errors="replace") for p in (out / run_id).iterdir() if p.suffix != ".png")

    assert "4711" in written("allowed")  # the picture's text is read when it may be: this test can fail
    assert "4711" not in written("refused") + consoles[0].out + consoles[0].err


def test_superglasses_paths_outside_the_dataset_are_refused(tmp_path, monkeypatch):
    monkeypatch.delenv(IMAGE_ROOT_ENV, raising=False)
    root = tmp_path / "sg"
    _note(tmp_path / "private" / "secret_note.png")
    rows = [
        query_row(0, 1, "What is this?", "x", [sub_q("What?", ["Image Search"])]),
        query_row(1, 2, "And this?", "y", [sub_q("What?", ["Image Search"])]),
    ]
    rows[0]["image"] = "../private/secret_note.png"  # the row's own cell: its image_id is in no images file
    write_superglasses(root, rows, {2: jpeg()}, shards=1)
    convs = {c.session_id: c for c in load_superglasses(root)}
    assert convs["sg-0000"].image is None and "refused" in convs["sg-0000"].image_error
    assert convs["sg-0001"].image is not None
    monkeypatch.setenv(IMAGE_ROOT_ENV, str(tmp_path / "private"))  # the environment names the image root
    convs = {c.session_id: c for c in load_superglasses(root)}
    assert os.path.samefile(convs["sg-0000"].image, tmp_path / "private" / "secret_note.png")
