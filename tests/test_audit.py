"""Attacks from the reliability audit: each of them hung, lost work, trusted bad data or accepted a bad value before.

FIFOs and decompression bombs as images, disk full while writing the report, repeated interaction ids, resuming
under another configuration, two processes on one run folder, a damaged embedding cache, kg/web entries with
missing keys, out-of-range CLI values, EXIF orientation, a viewer pointed at "/", CPU oversubscription."""

from __future__ import annotations

import errno
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from glasses_rag.core.images import MAX_DECODE_PIXELS, load_image
from glasses_rag.crag_mm.dataset import load_conversations
from glasses_rag.crag_mm.demo import ensure_demo
from glasses_rag.frontends.run import main

ROOT = Path(__file__).resolve().parents[1]
QUICK = ["--no-progress", "--budget", "20", "--judge", "rule", "--no-plot"]


@pytest.fixture(scope="module")
def demo_rows():
    return pq.read_table(ensure_demo().single_turn / "validation.parquet")


def write_rows(table, rows, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), folder / "validation.parquet")
    return folder


def run_dir(out: Path, run_id: str) -> Path:
    return out / run_id


def traces(d: Path) -> dict[str, dict]:
    return {p.name: json.loads(p.read_text()) for p in sorted(d.glob("*__*.json"))}


# ---- images ------------------------------------------------------------------------------------


def test_a_fifo_as_image_path_gets_a_note_and_the_run_goes_on(demo_rows, tmp_path):
    (tmp_path / "data").mkdir()
    fifo = tmp_path / "data" / "image.fifo"  # inside the dataset's folder: a path outside it is refused before this
    os.mkfifo(fifo)
    rows = demo_rows.slice(0, 2).to_pylist()
    rows[0]["image"] = {"bytes": None, "path": str(fifo)}  # opening it for reading would block forever
    data = write_rows(demo_rows, rows, tmp_path / "data")
    t0 = time.monotonic()
    assert main(["--task", "2", "--data", str(data), "--out", str(tmp_path / "runs"), "--run-id", "fifo", *QUICK]) == 0
    assert time.monotonic() - t0 < 60
    got = traces(tmp_path / "runs" / "fifo")
    assert len(got) == 2
    first = got[f"{rows[0]['session_id']}__00.json"]
    assert "not a regular file" in first["image"]["note"] and first["image"]["size"] is None
    assert (tmp_path / "runs" / "fifo" / "report.json").exists()


def _bomb_png(side: int) -> bytes:
    buf = io.BytesIO()
    Image.new("1", (side, side)).save(buf, "PNG")  # a few kB on disk, side*side*3 bytes decoded as RGB
    return buf.getvalue()


def test_decompression_bombs_are_refused_before_decoding_and_memory_stays_bounded(tmp_path):
    bomb = _bomb_png(12000)  # 144 Mpx: under PIL's own hard limit, 432 MB as RGB
    assert len(bomb) < 200_000 and 12000 * 12000 > MAX_DECODE_PIXELS
    img, info = load_image(bomb)
    assert img is None and "too large to decode safely" in info.note and info.original_size == (12000, 12000)
    # a big JPEG is decoded at reduced scale instead of refused
    big = io.BytesIO()
    Image.new("RGB", (8000, 6000), (90, 120, 30)).save(big, "JPEG", quality=50)
    img, info = load_image(big.getvalue())
    assert img is not None and max(img.size) <= 4000 and "reduced scale" in info.transforms[0]
    # eight bombs through the loader in a fresh process: peak RSS grows by far less than one full decode
    path = tmp_path / "bomb.png"
    path.write_bytes(bomb)
    code = (
        "import resource, sys; from glasses_rag.core.images import load_image\n"
        "base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        f"for _ in range(8): load_image({str(path)!r})\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout.strip()) < 100_000  # KiB: under 100 MB for all eight, where one decode is 432 MB


def test_exif_orientation_is_applied_and_noted():
    im = Image.new("RGB", (40, 20), (200, 10, 10))
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise to display
    buf = io.BytesIO()
    im.save(buf, "JPEG", exif=exif)
    img, info = load_image(buf.getvalue())
    assert img.size == (20, 40) and info.original_size == (40, 20)
    assert "exif-transpose (orientation 6)" in info.transforms


# ---- outputs -----------------------------------------------------------------------------------


def test_a_full_disk_never_leaves_a_broken_report_or_temp_files(tmp_path, monkeypatch):
    from glasses_rag.crag_mm.evaluate import TurnRecord, evaluate, write_report

    report = evaluate([TurnRecord(session_id="s", turn_index=0, answer="Paris", ground_truth="Paris")])
    paths = write_report(report, tmp_path, plot=False)
    good = paths["json"].read_bytes()

    real_fsync = os.fsync

    def disk_full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)
    report2 = evaluate([TurnRecord(session_id="s", turn_index=0, answer="Rome", ground_truth="Paris")])
    with pytest.raises(OSError):
        write_report(report2, tmp_path, plot=False)
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert paths["json"].read_bytes() == good  # the previous good report is intact
    assert not list(tmp_path.glob(".*.tmp"))


def test_temp_files_of_a_killed_writer_are_cleared_on_the_next_run(demo_rows, tmp_path):
    d = tmp_path / "runs" / "tmp"
    d.mkdir(parents=True)
    (d / ".demo-st-000__00.json.abc123.tmp").write_text('{"half": ')
    data = write_rows(demo_rows, demo_rows.slice(0, 1).to_pylist(), tmp_path / "data")
    assert main(["--task", "1", "--data", str(data), "--out", str(tmp_path / "runs"), "--run-id", "tmp", *QUICK]) == 0
    assert not list(d.glob(".*.tmp"))


# ---- data --------------------------------------------------------------------------------------


def test_repeated_interaction_ids_are_scored_by_position_with_a_warning(demo_rows, tmp_path):
    mt = pq.read_table(ensure_demo().multi_turn / "validation.parquet")
    row = mt.slice(0, 1).to_pylist()[0]
    n = len(row["turns"]["interaction_id"])
    row["turns"]["interaction_id"] = ["same"] * n
    row["answers"]["interaction_id"] = ["same"] * n
    expected = list(row["answers"]["ans_full"])
    data = write_rows(mt, [row], tmp_path / "data")
    it = load_conversations(data)
    conv = next(iter(it))
    assert conv.answers == expected  # turn i is scored against answer i, not against the last answer with that id
    assert any("interaction ids repeat" in m for m in it.report.messages)


def test_kg_and_web_entries_with_missing_keys_are_a_one_line_error(tmp_path, capsys):
    import shutil

    demo = ensure_demo()
    for name, key, field in (("kg", "images", "entities"), ("web", "pages", "page_url")):
        idx = tmp_path / name
        shutil.copytree(demo.root, idx, ignore=shutil.ignore_patterns("cache", "*.parquet"))
        path = idx / f"{name}.json"
        data = json.loads(path.read_text())
        entry = data[key][3]
        if name == "kg":
            entry["entities"][0].pop("entity_name")
        else:
            entry.pop(field)
        path.write_text(json.dumps(data))
        rc = main(["--task", "2", "--index-dir", str(idx), "--limit", "1", "--out", str(tmp_path / "runs"), *QUICK])
        err = capsys.readouterr().err
        assert rc == 2 and "Traceback" not in err
        assert f"{name}.json: entry 3" in err and ("entity_name" in err or "page_url" in err), err


def test_a_damaged_embedding_cache_is_rebuilt_not_trusted(tmp_path):
    import shutil

    from glasses_rag.retrieval.local_search import LocalSearchIndex

    idx = tmp_path / "index"
    shutil.copytree(ensure_demo().root, idx, ignore=shutil.ignore_patterns("*.parquet"))
    good = LocalSearchIndex(idx).warm_up()
    want = good.web_search("falcon 9 engines", k=3)
    caches = sorted((idx / "cache").glob("*.npy"))
    assert caches
    for p in caches:  # a cache of the wrong shape, as an old or foreign build would leave
        np.save(p, np.ones((3, 7), dtype=np.float32))
    again = LocalSearchIndex(idx).warm_up()
    got = again.web_search("falcon 9 engines", k=3)
    assert [r["page_url"] for r in got] == [r["page_url"] for r in want]
    assert [r["score"] for r in got] == pytest.approx([r["score"] for r in want], abs=1e-5)
    assert all(np.load(p).shape[0] > 3 for p in caches)  # repaired on disk


# ---- runs --------------------------------------------------------------------------------------


def test_resume_under_another_configuration_is_refused_unless_asked(demo_rows, tmp_path, capsys):
    data = write_rows(demo_rows, demo_rows.slice(0, 2).to_pylist(), tmp_path / "data")
    base = ["--task", "2", "--data", str(data), "--out", str(tmp_path / "runs"), "--run-id", "cfg", *QUICK]
    assert main(base) == 0
    capsys.readouterr()
    assert main([*base, "--max-steps", "3"]) == 2
    err = capsys.readouterr().err
    assert "different configuration" in err and "--resume-anyway" in err
    assert main([*base, "--max-steps", "3", "--resume-anyway"]) == 0
    assert "resumed" in json.dumps(json.loads((tmp_path / "runs" / "cfg" / "run.json").read_text())["stats"])


def test_two_processes_on_one_run_folder(demo_rows, tmp_path, capsys):
    from filelock import FileLock

    data = write_rows(demo_rows, demo_rows.slice(0, 1).to_pylist(), tmp_path / "data")
    d = tmp_path / "runs" / "locked"
    d.mkdir(parents=True)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from filelock import FileLock; "
            f"lock = FileLock({str(d / '.lock')!r}); lock.acquire(); print('held', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        rc = main(["--task", "1", "--data", str(data), "--out", str(tmp_path / "runs"), "--run-id", "locked", *QUICK])
        assert rc == 2 and "another process is running" in capsys.readouterr().err
    finally:
        holder.kill()
        holder.wait(10)
    assert FileLock(str(d / ".lock")).acquire(timeout=5)


@pytest.mark.parametrize(
    "bad",
    [
        ["--limit", "-1"],
        ["--limit", "0"],
        ["--concurrency", "0"],
        ["--concurrency", "-3"],
        ["--budget", "inf"],
        ["--budget", "nan"],
        ["--budget", "0"],
        ["--max-steps", "-1"],
    ],
)
def test_out_of_range_cli_values_are_rejected(bad, capsys):
    with pytest.raises(SystemExit) as e:
        main(["--task", "1", *bad])
    assert e.value.code == 2 and "argument" in capsys.readouterr().err


def test_concurrency_is_capped_for_a_cpu_bound_policy(demo_rows, tmp_path, capsys):
    data = write_rows(demo_rows, demo_rows.slice(0, 2).to_pylist(), tmp_path / "data")
    cores = len(os.sched_getaffinity(0))
    assert (
        main(
            [
                "--task",
                "1",
                "--data",
                str(data),
                "--out",
                str(tmp_path / "runs"),
                "--run-id",
                "cap",
                "--concurrency",
                str(cores + 6),
                *QUICK,
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert f"concurrency: {cores} (capped from {cores + 6}" in out
    assert "ended by:" in out  # the summary says how turns ended (time_budget counted there)


def test_the_viewer_does_not_walk_the_filesystem_for_data(tmp_path):
    from glasses_rag.frontends.viewer import build_html
    from traces.schema import FinalEvent, ImageInfo, TurnTrace
    from traces.store import TraceStore

    store = TraceStore(tmp_path, "run")
    store.write(
        TurnTrace(
            run_id="run",
            task=1,
            session_id="s",
            interaction_id="i",
            turn_index=0,
            question="q?",
            image=ImageInfo(size=(10, 10)),
            policy="p",
            search_backend="b",
            budget_s=10,
            max_steps=8,
            steps=[FinalEvent(answer="x", decision="answer")],
            answer="x",
            abstained=False,
            ended_by="answer",
            latency_ms=1.0,
        )
    )
    (store.dir / "run.json").write_text(json.dumps({"data": "/"}))  # a run.json pointing at the whole disk
    t0 = time.monotonic()
    html = build_html(store.dir)
    assert time.monotonic() - t0 < 10 and 'class="thumb placeholder"' in html
