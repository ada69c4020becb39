"""The viewer in headless Chromium shows what a newcomer needs: each model request as sent (collapsed), the
history a turn was given, the reason next to numbers outside [0, 1] and next to chips that disagree with the
table, matched KG images (embedded once, small), offline demo addresses as marked text (never links), and the
photo once per conversation."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from support import model_loop_run

from glasses_rag.frontends.viewer import load_traces, render_run
from glasses_rag.frontends.viewer_parts import KgImages, is_offline_demo_url

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = Path("/usr/bin/chromium")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A model-loop run of one four-turn conversation (fake server), and a rule run of five task-2 questions where
    a ground-truth "I don't know" is answered so (hallucination -0.2, truthfulness 1.2)."""
    from glasses_rag.frontends.run import main

    out = tmp_path_factory.mktemp("runs")
    model_loop_run(out, "model")
    mp = pytest.MonkeyPatch()
    mp.setenv("GLASSES_DEMO_DIR", str(ROOT / "data" / "demo"))
    try:
        assert (
            main(["--task", "2", "--limit", "5", "--out", str(out), "--run-id", "rule", "--no-progress", "--no-plot"])
            == 0
        )
    finally:
        mp.undo()
    return out / "model", out / "rule"


def _dom(page: Path, tmp_path: Path) -> str:
    r = subprocess.run(
        [str(CHROMIUM), *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", page.resolve().as_uri()],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert "<article" in r.stdout, r.stderr[-2000:]
    return r.stdout


@pytest.mark.skipif(not CHROMIUM.exists(), reason="/usr/bin/chromium is absent (apt-get install -y chromium)")
def test_requests_history_kg_images_and_offline_links_in_chromium(runs, tmp_path):
    model, _ = runs
    dom = _dom(render_run(model), tmp_path)
    traces, _ = load_traces(model)
    calls = sum(len(t.model_calls()) for t in traces)
    assert 'data-ready="1"' in re.search(r"<body[^>]*>", dom).group(0)  # the page's script ran under its CSP
    assert dom.count('<details class="sent">') == calls and "Model requests, as sent" in dom
    assert "You are the planning and answering model" in dom  # the system text, as sent
    assert "[image sha256:" in dom and "data URL of" in dom  # the photo as its hash
    assert dom.count('<details class="history">') == len(traces) - 1  # every turn after the first
    assert not re.search(r'href="https?://[a-z.]*demo\.local', dom) and "(offline demo page)" in dom
    kg = re.findall(r'class="kg (kg-\d+)"', dom)
    assert kg and len(set(kg)) < len(kg)  # shown wherever matched, embedded once each
    assert len(re.findall(r"\.kg-\d+\{background-image:url\(data:image/jpeg;base64,", dom)) == len(set(kg))
    # the photo: drawn with the first turn, not again with each later turn without boxes
    photos = len(re.findall(r'<div class="thumb img-\d+"', dom))
    assert photos < len(traces) and dom.count("same photo as the conversation") == len(traces) - photos


@pytest.mark.skipif(not CHROMIUM.exists(), reason="/usr/bin/chromium is absent (apt-get install -y chromium)")
def test_numbers_outside_the_range_and_chips_carry_their_reason_in_chromium(runs, tmp_path):
    _, rule = runs
    dom = _dom(render_run(rule), tmp_path)
    explain = re.search(r'id="metrics-explain">([^<]*)<', dom).group(1)
    assert "BOTH correct and missing" in explain and "below 0" in explain
    assert re.search(r"<th>overall \*</th>", dom)
    chips = re.search(r'id="chips-explain">([^<]*)<', dom).group(1)
    assert "each turn's own score" in chips and "both correct and missing" in chips
    assert 'title="the official hallucination count: total - correct - missing' in dom


def test_kg_images_are_read_only_from_the_kg_folder(tmp_path):
    (tmp_path / "kg_images").mkdir()
    (tmp_path / "secret.png").write_bytes(b"x")
    (tmp_path / "kg.json").write_text(
        '{"images": [{"url": "https://demo.local/a", "image_file": "../secret.png"}, '
        '{"url": "https://demo.local/b", "image_file": "kg_images/../../x.png"}, '
        '{"url": "https://demo.local/c", "image_file": "kg_images/missing.png"}]}'
    )
    kg = KgImages([tmp_path])
    assert kg.files == {"https://demo.local/c": "kg_images/missing.png"}  # unsafe names never even listed
    assert kg.thumb("https://demo.local/a") is None and kg.thumb("https://demo.local/c") is None
    assert is_offline_demo_url("https://images.demo.local/x.jpg") and not is_offline_demo_url("https://example.org")
