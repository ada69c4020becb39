"""Every model request is kept as sent: the run folder's requests/ holds each distinct piece once (messages, tool
specs, response schema), each trace's model call names its request, and `read_request` gives back exactly the
messages the server received (image data URLs as their SHA-256). Traces also keep the history a turn was given
and where its image came from; the viewer shows all of it."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from support import model_loop_run

from glasses_rag.core.sent import stored_message, stored_request
from traces.requests import RequestNotStored, read_request
from traces.schema import TurnTrace

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def model_run(tmp_path_factory):
    """Task 3 (one conversation of four turns) with the model loop against the fake server."""
    out = tmp_path_factory.mktemp("runs")
    bodies = model_loop_run(out, "m")
    run = out / "m"
    traces = [TurnTrace.model_validate_json(p.read_text()) for p in sorted(run.glob("*__*.json"))]
    return run, traces, bodies


def test_each_call_reads_back_exactly_as_the_server_received_it(model_run):
    run, traces, bodies = model_run
    calls = [c for t in traces for c in t.model_calls()]
    assert len(calls) == len(bodies) >= 8 and all(c.request_id for c in calls)
    sent = [read_request(run, c.request_id) for c in calls]
    # the same requests, in the same order within each turn (turns ran one after another)
    for got, body in zip(sent, bodies, strict=True):
        assert got["messages"] == [stored_message(m) for m in body["messages"]]
        assert got["tools"] == body.get("tools")
        assert got["max_tokens"] == body.get("max_tokens", got["max_tokens"])
        fmt = body.get("response_format") or {}
        if fmt.get("type") == "json_schema":
            assert got["response_schema"]["schema"] == fmt["json_schema"]["schema"]
    # an image is kept as the hash of the exact data URL the server got
    image_parts = [
        (p, q)
        for got, body in zip(sent, bodies)
        for m, n in zip(got["messages"], body["messages"])
        if isinstance(m["content"], list)
        for p, q in zip(m["content"], n["content"])
        if p.get("type") == "image_url"
    ]
    assert image_parts
    for stored, original in image_parts:
        url = original["image_url"]["url"]
        assert (
            url.startswith("data:image/")
            and stored["image_url"]["url"] == "sha256:" + hashlib.sha256(url.encode()).hexdigest()
            and stored["image_url"]["data_url_chars"] == len(url)
        )


def _log_lines(run: Path) -> list[tuple[str, str]]:
    return [tuple(line.split("\t", 1)) for line in (run / "requests" / "pieces.jsonl").read_text().splitlines()]


def test_stored_pieces_are_deduplicated_and_bounded(model_run):
    run, traces, bodies = model_run
    lines = _log_lines(run)
    assert not list((run / "requests").glob("*.json"))  # one pieces file, not a file per piece
    assert len({k for k, _ in lines}) == len(lines)  # each piece once
    messages_sent = sum(len(b["messages"]) for b in bodies)
    pieces = [json.loads(text) for _, text in lines]
    records = [p for p in pieces if isinstance(p, dict) and p.get("kind") == "request"]
    assert len(records) == len({c.request_id for t in traces for c in t.model_calls()})
    assert len(lines) - len(records) < messages_sent / 2  # a growing transcript stores what is new only
    stored = (run / "requests" / "pieces.jsonl").stat().st_size
    sent = sum(len(json.dumps(b["messages"])) for b in bodies)
    assert stored < sent / 4, (stored, sent)  # images as hashes, repeated messages once


def test_traces_keep_the_history_and_the_image_source(model_run):
    _, traces, _ = model_run
    assert [len(t.history) for t in traces] == list(range(len(traces))) and len(traces) >= 2
    assert traces[1].history[0].question == traces[0].question
    assert all(t.image.sha256 and len(t.image.sha256) == 64 for t in traces)


def test_a_damaged_or_missing_piece_is_refused_and_the_viewer_says_so(model_run, tmp_path):
    import shutil

    from glasses_rag.frontends.viewer import build_html

    run, traces, _ = model_run
    copy = tmp_path / "copy"
    shutil.copytree(run, copy)
    rid = traces[0].model_calls()[0].request_id
    log = copy / "requests" / "pieces.jsonl"
    fake = '{"kind": "request", "messages": []}'  # not what the request's hash says
    edited = [f"{k}\t{fake if k == rid else text}" for k, text in _log_lines(copy)]
    log.write_text("\n".join(edited) + "\n")
    with pytest.raises(RequestNotStored, match="holds no intact line"):
        read_request(copy, rid)
    with pytest.raises(RequestNotStored):
        read_request(copy, "../../etc/passwd")
    page = build_html(copy, images={})
    assert (
        "holds no intact line" in page
        and page.count('class="sent"') == len([c for t in traces for c in t.model_calls()]) - 1
    )


def test_the_stored_form_is_content_addressed():
    msgs = [
        {"role": "system", "content": "s"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "q"},
                {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,AAAA"}},
            ],
        },
    ]
    rid, pieces = stored_request(msgs, tools=[{"type": "function", "function": {"name": "ocr"}}], max_tokens=9)
    rid2, pieces2 = stored_request([*msgs, {"role": "assistant", "content": "a"}], max_tokens=9)
    assert rid != rid2 and pieces[rid]["messages"] == pieces2[rid2]["messages"][:2]  # shared prefix, same pieces
    assert "AAAA" not in json.dumps(pieces)


def test_the_history_in_a_trace_is_bounded():
    from traces.schema import TRACE_INPUT_LIMIT, TurnTrace

    huge = "q" * (TRACE_INPUT_LIMIT * 3)
    t = TurnTrace(
        run_id="r",
        task=3,
        session_id="s",
        interaction_id="i",
        turn_index=1,
        question="q",
        policy="p",
        search_backend="b",
        budget_s=1,
        max_steps=1,
        answer="a",
        abstained=False,
        ended_by="answer",
        latency_ms=1,
        history=[{"question": huge, "answer": "ok"}],
    )
    assert len(t.history[0].question) < TRACE_INPUT_LIMIT + 100 and t.history[0].question.endswith("in all]")


def test_pieces_are_written_again_into_a_run_folder_deleted_since(tmp_path):
    import shutil

    from glasses_rag.core.sent import piece_hash
    from traces.requests import read_piece, write_pieces

    value = {"kind": "x"}
    pieces = {piece_hash(value): value}
    assert write_pieces(tmp_path, pieces) == 1
    assert write_pieces(tmp_path, pieces) == 0  # known to this process: not looked up or written again
    shutil.rmtree(tmp_path / "requests")
    assert write_pieces(tmp_path, pieces) == 1
    assert read_piece(tmp_path, piece_hash(value)) == value


def test_only_the_trace_is_synced_and_its_pieces_are_written_before_it(model_run, tmp_path, monkeypatch):
    """Pieces are appended to the pieces file, not fsynced (a crash may tear one: the next test); the trace that
    names them is synced, and replaced into place after they were written."""
    import os

    from glasses_rag.core.sent import stored_request
    from traces.requests import read_piece
    from traces.store import TraceStore

    _, traces, _ = model_run
    trace = traces[0].model_copy(deep=True)
    rid, pieces = stored_request([{"role": "user", "content": "a question only this test asks"}])
    trace.model_calls()[0].with_request(rid, pieces)
    log = tmp_path / "r" / "requests" / "pieces.jsonl"
    seen: list[str] = []
    real_replace, real_fsync = os.replace, os.fsync

    def replace(a, b):
        seen.append(f"replace {Path(b).name}: {sorted(k for k, _ in _log_lines(tmp_path / 'r'))}")
        return real_replace(a, b)

    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(
        os, "fsync", lambda fd: (seen.append(Path(os.readlink(f"/proc/self/fd/{fd}")).name), real_fsync(fd))[1]
    )
    path = TraceStore(tmp_path, "r").write(trace)
    assert len(seen) == 2 and seen[0].startswith(f".{path.name}.")  # one fsync: the trace's temp file
    assert seen[1] == f"replace {path.name}: {sorted(pieces)}"  # the pieces were in their file by then
    assert log.exists() and read_piece(tmp_path / "r", rid) == pieces[rid]


@pytest.mark.parametrize("damage", ["torn", "cut at the tab", "edited", "gone"])
def test_a_piece_a_crash_tore_is_refused_and_appended_again_by_a_resumed_run(tmp_path, monkeypatch, damage):
    import traces.requests as requests
    from glasses_rag.core.sent import piece_hash
    from traces.requests import read_piece, write_pieces

    first, value = {"kind": "first"}, {"kind": "x", "text": "a piece " * 40}
    key = piece_hash(value)
    assert write_pieces(tmp_path, {piece_hash(first): first}) == 1
    assert write_pieces(tmp_path, {key: value}) == 1
    log = tmp_path / "requests" / "pieces.jsonl"
    text = log.read_text()
    last = text.index(key)
    cut = {
        "torn": text[: len(text) - 40],  # the crash came in the middle of the last line
        "cut at the tab": text[: last + 33],
        "edited": text.replace("a piece", "a peace"),
        "gone": text[:last],
    }[damage]
    log.write_text(cut)
    with pytest.raises(RequestNotStored, match="holds no intact line"):
        read_piece(tmp_path, key)  # never what the line holds
    assert read_piece(tmp_path, piece_hash(first)) == first  # the lines before it are intact
    monkeypatch.setattr(requests, "_STORED", type(requests._STORED)())  # a new process: nothing known
    assert write_pieces(tmp_path, {key: value}) == 1
    assert read_piece(tmp_path, key) == value and read_piece(tmp_path, piece_hash(first)) == first
    assert write_pieces(tmp_path, {key: value}) == 0


def test_a_run_folder_with_a_file_per_piece_still_reads(tmp_path):
    """Run folders written before the pieces file: `requests/<hash>.json`, checked against the hash as before."""
    from glasses_rag.core.sent import piece_hash
    from traces.requests import read_piece

    value = {"kind": "x"}
    (tmp_path / "requests").mkdir()
    (tmp_path / "requests" / f"{piece_hash(value)}.json").write_text(json.dumps(value))
    assert read_piece(tmp_path, piece_hash(value)) == value
    (tmp_path / "requests" / f"{piece_hash(value)}.json").write_text('{"kind": "y"}')
    with pytest.raises(RequestNotStored, match="does not hold what its name says"):
        read_piece(tmp_path, piece_hash(value))
