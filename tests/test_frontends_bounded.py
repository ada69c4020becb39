"""The viewer and the run diff on run folders someone handed over (issue 40, items 5-7): the folder cannot widen what
may be read, the work is bounded (stat before read, capped requests and pages, linear in traces, one trace in memory
at a time in the diff), and nothing from it reaches the terminal as control characters.

Figures (time, peak memory) of the audit's cases at full size: `python -m benchmarks.frontend_scale`."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import weakref
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from benchmarks.frontend_scale import one_turn
from glasses_rag.core.sent import piece_hash
from glasses_rag.core.types import ModelCall
from glasses_rag.frontends import viewer
from glasses_rag.frontends.diff import main as diff_main
from glasses_rag.frontends.run_diff import diff_runs
from glasses_rag.frontends.viewer import build_html
from traces.requests import write_pieces
from traces.schema import ImageInfo, TurnTrace
from traces.store import TraceStore

ROOT = Path(__file__).resolve().parents[1]
PHOTO = re.compile(r"\.img-\d+\{background-image:url\(data:image/jpeg;base64,")


def turn(session: str, question: str = "what is this?", calls: list | None = None, **kw) -> TurnTrace:
    return one_turn(session, question, calls, **{"run_id": "r", **kw})


def write_run(root: Path, name: str, traces: list[TurnTrace], run_json: dict | None = None) -> Path:
    store = TraceStore(root, name)
    for t in traces:
        store.write(t)
    if run_json is not None:
        (store.dir / "run.json").write_text(json.dumps(run_json), encoding="utf-8")
    return store.dir


# ---- item 5: trust settings come from the viewer, never from the run folder ------------------------------------


@pytest.fixture()
def foreign_image_run(tmp_path, monkeypatch):
    """A dataset row whose image path leaves the dataset's folder, and a run.json recording `--image-root /`."""
    from glasses_rag.crag_mm.demo import ensure_demo

    monkeypatch.delenv("GLASSES_IMAGE_ROOT", raising=False)
    table = pq.read_table(ensure_demo(ROOT / "data" / "demo").single_turn / "validation.parquet")
    row = table.slice(0, 1).to_pylist()[0]
    secret = tmp_path / "elsewhere" / "secret.png"
    secret.parent.mkdir()
    Image.new("RGB", (64, 48), (200, 10, 10)).save(secret)
    row["image"] = {"bytes": None, "path": str(secret)}
    data = tmp_path / "data"
    data.mkdir()
    pq.write_table(pa.Table.from_pylist([row], schema=table.schema), data / "validation.parquet")
    trace = turn(row["session_id"], image=ImageInfo(size=(64, 48)))
    run = write_run(tmp_path / "runs", "foreign", [trace], {"data": str(data), "argv": ["--image-root", "/"]})
    return run, secret.parent


def test_a_run_folder_cannot_widen_the_image_confinement(foreign_image_run, monkeypatch):
    run, elsewhere = foreign_image_run
    page = build_html(run)
    assert not PHOTO.findall(page), "the run folder's own --image-root let the viewer embed an outside image"
    assert "refused" in page or 'class="thumb placeholder"' in page
    # the viewer's own command line (or its environment) may widen it
    assert len(PHOTO.findall(build_html(run, image_root=str(elsewhere)))) == 1
    monkeypatch.setenv("GLASSES_IMAGE_ROOT", str(elsewhere))
    assert len(PHOTO.findall(build_html(run))) == 1


# ---- item 6: bounded work ---------------------------------------------------------------------------------------


def test_stored_requests_repeating_one_piece_are_cut_and_say_so(tmp_path):
    piece = {"role": "user", "content": "x" * 20_000}
    key = piece_hash(piece)
    record = {"kind": "request", "messages": [key] * 2_000, "tools": None, "response_schema": None}
    rid = piece_hash(record)
    run = tmp_path / "run"
    write_pieces(run, {key: piece, rid: record})
    calls = [ModelCall(purpose="decide", request_id=rid) for _ in range(3)]
    write_run(tmp_path, "run", [turn(f"s{i}", calls=calls) for i in range(4)])
    page = build_html(run, images={})
    assert len(page) < 3_000_000, f"{len(page):,} characters from a run folder of ~200 KB"
    assert page.count('<details class="sent">') == 12  # every request is listed
    assert "the same as message 1" in page and "more message(s) not shown" in page


def test_trace_files_are_looked_at_before_they_are_read(tmp_path, monkeypatch):
    """A sparse file named like a trace is skipped from its size, never opened (the audit's was 2 GB: 4.2 GB of
    memory before it was skipped); the viewer and the diff say so."""
    run = write_run(tmp_path, "run", [turn("real")])
    huge = run / "huge__00.json"
    with open(huge, "wb") as f:
        f.truncate(40 << 20)  # over the 32 MB a trace may be
    opened: list[str] = []
    real_open = os.open

    def watch(path, *a, **kw):
        opened.append(os.fspath(path))
        return real_open(path, *a, **kw)

    for target in ("builtins.open", "io.open"):
        monkeypatch.setattr(target, _watching(open, opened))
    monkeypatch.setattr(os, "open", watch)
    page = build_html(run, images={})
    d = diff_runs([run, write_run(tmp_path, "other", [turn("real")])])
    assert not [p for p in opened if p.endswith("huge__00.json")], "the oversized trace was opened"
    assert "huge__00.json" in page and "1 trace file(s) skipped" in page
    assert d.runs[0].turns == 1 and any("huge__00.json" in s for s in d.runs[0].skipped)


def _watching(real, opened: list[str]):
    def wrapper(file, *a, **kw):
        if isinstance(file, (str, bytes, os.PathLike)):
            opened.append(os.fsdecode(file))
        return real(file, *a, **kw)

    return wrapper


def test_a_fifo_named_like_a_trace_or_run_json_never_blocks(tmp_path):
    run = write_run(tmp_path, "run", [turn("real")])
    os.mkfifo(run / "fifo__00.json")  # reading it would wait for a writer forever
    os.mkfifo(run / "report.json")
    cmd = [sys.executable, "-m", "glasses_rag.frontends.viewer", str(run), "--no-images"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    page = (run / "index.html").read_text(encoding="utf-8")
    assert "fifo__00.json" in page and "not a regular file" in page


READS = {"session_id": 0}


class _Counted(TurnTrace):
    """A trace that counts the reads of its session id (how many times the viewer looks a turn up by session)."""

    def __getattribute__(self, name: str):
        if name == "session_id":
            READS["session_id"] += 1
        return super().__getattribute__(name)


def test_the_viewer_groups_turns_in_one_pass_not_one_per_conversation(tmp_path, monkeypatch):
    n = 300
    run = write_run(tmp_path, "run", [turn(f"s{i:04d}") for i in range(n)])
    validate = TurnTrace.model_validate_json.__func__
    monkeypatch.setattr(TurnTrace, "model_validate_json", classmethod(lambda cls, s: validate(_Counted, s)))
    READS["session_id"] = 0
    page = build_html(run, images={})
    assert page.count('<article class="turn') == n
    assert READS["session_id"] < 30 * n, f"{READS['session_id']:,} session-id reads for {n} turns: quadratic"


def test_a_page_shows_at_most_its_turns_and_says_how_many_are_left_out(tmp_path, monkeypatch):
    run = write_run(tmp_path, "run", [turn(f"s{i}") for i in range(8)])
    monkeypatch.setattr(viewer, "MAX_PAGE_TURNS", 5)
    page = build_html(run, images={})
    assert page.count('<article class="turn') == 5 and "3 of 8 trace file(s) not shown" in page


def test_the_diff_keeps_one_trace_in_memory_at_a_time(tmp_path, monkeypatch):
    a = write_run(tmp_path, "a", [turn(f"s{i}") for i in range(200)])
    b = write_run(tmp_path, "b", [turn(f"s{i}", score="incorrect") for i in range(200)])
    alive = {"now": 0, "most": 0}
    validate = TurnTrace.model_validate_json.__func__

    def counted(cls, text):
        t = validate(cls, text)
        alive["now"] += 1
        alive["most"] = max(alive["most"], alive["now"])
        weakref.finalize(t, lambda: alive.__setitem__("now", alive["now"] - 1))
        return t

    monkeypatch.setattr(TurnTrace, "model_validate_json", classmethod(counted))
    d = diff_runs([a, b])
    assert d.common == 200 and d.pairs[0].a_right_b_not == 200
    assert alive["most"] <= 4, f"{alive['most']} traces held at once"


def test_the_diff_page_shows_at_most_its_rows_and_says_so(tmp_path, monkeypatch):
    from glasses_rag.frontends import diff_page

    a = write_run(tmp_path, "a", [turn(f"s{i}") for i in range(5)])
    b = write_run(tmp_path, "b", [turn(f"s{i}") for i in range(5)])
    monkeypatch.setattr(diff_page, "MAX_PAGE_ROWS", 2)
    assert diff_main([str(a), str(b), "--html", str(tmp_path / "d.html")]) == 0
    html = (tmp_path / "d.html").read_text(encoding="utf-8")
    assert html.count('<tr class="qrow"') == 2 and "the first 2 of 5 questions" in html


# ---- item 7: nothing from a run folder reaches the terminal as control characters ------------------------------


def test_the_diff_prints_no_terminal_escape_from_a_question(tmp_path, capsys):
    evil = "what\x1b]0;owned\x07 is\x1b[2J this\x9b31m \u202eevil?"
    a = write_run(tmp_path, "a", [turn("s", question=evil)])
    b = write_run(tmp_path, "b\x1b[31m", [turn("s", question=evil, answer="no\x1b[5m")])
    assert diff_main([str(a), str(b), "--all"]) == 0  # every question in the text (the default lists what differs)
    out = capsys.readouterr().out
    assert not re.search("[\x1b\x07\x9b\u202e]", out)
    assert "\\x1b]0;owned\\x07" in out and "\\u202e" in out
    assert diff_main([str(a), str(b), "--json"]) == 0
    raw = capsys.readouterr().out
    assert not re.search("[\x1b\x07\x9b\u202e]", raw)
    assert json.loads(raw)["rows"][0]["question"] == evil  # the JSON still holds the question as it was
