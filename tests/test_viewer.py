"""The static HTML trace viewer: a real short run rendered to one page, escaping, images, headless Chromium."""

from __future__ import annotations

import io
import json
import re
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from glasses_rag.frontends.viewer import build_html, load_traces, render_run
from glasses_rag.frontends.viewer import main as viewer_main
from tools.base import Box
from traces.schema import FinalEvent, ImageInfo, StepError, ToolCallEvent, TraceHit, TurnTrace
from traces.store import TraceStore

CHROMIUM = Path("/usr/bin/chromium")
PHOTO = re.compile(r"\.img-\d+\{background-image:url\(data:image/jpeg;base64,")  # a conversation's photo
EVIL = [
    "<script>document.body.setAttribute('data-pwned','1')</script>",
    "<img src=x onerror=\"document.body.setAttribute('data-pwned','2')\">",
    '"><svg onload=alert(3)>',
    "</textarea></pre></style><script>alert(4)</script>",
]


def evil_trace(run_id: str) -> TurnTrace:
    """A turn whose every free-text field carries markup, as web text can."""
    steps = [
        ToolCallEvent(
            index=0,
            tool="web_search",
            arguments={"query": EVIL[2]},
            sub_question=EVIL[0],
            search_keywords=EVIL[1],
            method="fake",
            summary=EVIL[3],
            results=[
                TraceHit(source="web", score=0.9, url="javascript:alert(5)", title=EVIL[1], snippet=EVIL[0]),
                TraceHit(source="web", score=0.5, url="https://example.org/a?b=1&c=<2>", snippet=EVIL[1]),
            ],
            latency_ms=12.5,
            policy_ms=3.0,
        ),
        ToolCallEvent(
            index=1,
            tool="ocr",
            method="fake-ocr",
            ocr_text=EVIL[1],
            detected_box=Box(x0=10, y0=10, x1=60, y1=40, label=EVIL[2], method="fake-detector"),
            error=StepError(kind="tool_exception", message=EVIL[0]),
        ),
        FinalEvent(index=2, decision="answer", answer=EVIL[1]),
    ]
    return TurnTrace(
        run_id=run_id,
        task=1,
        session_id="zz-evil",
        interaction_id="zz-evil-t0",
        turn_index=0,
        question="what does " + EVIL[2] + " say?",
        image=ImageInfo(size=(640, 480), note=EVIL[0]),
        labels={"domain": EVIL[3]},
        policy="scripted",
        search_backend="fake",
        budget_s=10,
        max_steps=8,
        steps=steps,
        answer=EVIL[0],
        abstained=False,
        ended_by="answer",
        latency_ms=100.0,
        ground_truth=EVIL[1],
        score="incorrect",
        judge="rule",
        error=EVIL[3],
    )


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A real run (task 1, rule planner, demo data, 2 conversations) plus an injection trace and a damaged file."""
    from glasses_rag.frontends.run import main as run_main

    out = tmp_path_factory.mktemp("runs")
    assert run_main(["--task", "1", "--limit", "2", "--no-progress", "--run-id", "viewer", "--out", str(out)]) == 0
    d = out / "viewer"
    TraceStore(out, "viewer").write(evil_trace("viewer"))
    (d / "broken__00.json").write_text('{"schema_version": "1.0", "run_id": ', encoding="utf-8")
    (d / "foreign__00.json").write_text(json.dumps({"hello": "world"}), encoding="utf-8")
    return d


@pytest.fixture(scope="module")
def page(run_dir) -> tuple[Path, str]:
    p = render_run(run_dir)
    return p, p.read_text(encoding="utf-8")


class TagCollector(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def real_traces(run_dir: Path) -> list[TurnTrace]:
    traces, _ = load_traces(run_dir)
    return [t for t in traces if t.session_id != "zz-evil"]


def test_every_turn_box_answer_and_header_is_on_the_page(run_dir, page):
    path, html = page
    assert path == run_dir / "index.html"
    traces, skipped = load_traces(run_dir)
    assert len(traces) == 3 and {n for n, _ in skipped} == {"broken__00.json", "foreign__00.json"}
    assert html.count('<article class="turn') == len(traces)
    from markupsafe import escape  # the template engine's escaping

    for t in real_traces(run_dir):
        assert f'id="turn-{t.session_id}-{t.turn_index}"' in html
        assert escape(t.question) in html and escape(t.answer) in html and escape(t.ground_truth) in html
        assert f'data-score="{t.score}"' in html
        for s in t.steps:
            assert f'<span class="idx">#{s.index}</span>' in html
    # the rule planner cropped at least once on this data; every crop is drawn on the image
    n_boxes = sum(1 for t in real_traces(run_dir) for s in t.tool_calls() if s.detected_box is not None)
    assert n_boxes >= 1
    assert html.count('<div class="box"') == n_boxes  # the evil turn has no image: its box is listed, not drawn
    # images inline, once per conversation, as JPEG data URLs; nothing fetched from outside (the other data URLs
    # are the matched KG images, once each)
    assert len(PHOTO.findall(html)) == 2
    assert html.count("data:image/jpeg;base64,") == 2 + len(re.findall(r"\.kg-\d+\{background-image", html))
    assert not re.search(r"<(link|iframe|object|embed)\b|@import|url\(\s*['\"]?https?:|src\s*=\s*['\"]?https?:", html)
    # header: run.json and report.json
    run = json.loads((run_dir / "run.json").read_text())
    for key in ("policy", "search", "judge"):
        assert escape(run[key]) in html
    assert "10.0 s/turn" in html and "truthfulness" in html and "hallucination_rate" in html
    # damaged files are listed, not fatal; the turn without an image shows a placeholder
    assert "broken__00.json" in html and "foreign__00.json" in html and "2 trace file(s) skipped" in html
    assert 'class="thumb placeholder"' in html
    # filters
    for marker in ('class="f-score"', 'id="f-tool"', 'id="f-text"', 'id="f-error"', '<details class="step'):
        assert marker in html
    assert '<option value="web_search">' in html


def test_injected_markup_is_shown_as_text(page):
    _, html = page
    for raw in EVIL:
        assert raw not in html
    # escaped by the template engine (markupsafe writes ' as &#39;)
    assert "&lt;script&gt;document.body.setAttribute(&#39;data-pwned&#39;,&#39;1&#39;)&lt;/script&gt;" in html
    assert "&lt;img src=x onerror=&#34;" in html
    p = TagCollector()
    p.feed(html)
    names = [t for t, _ in p.tags]
    assert names.count("script") == 1 and "img" not in names and "svg" not in names and "textarea" not in names
    for tag, attrs in p.tags:
        assert not any(k.startswith("on") for k in attrs), (tag, attrs)
        assert not (attrs.get("href") or "").lower().startswith("javascript:")
    # the javascript: url is text only; the https one is a link, with its query escaped
    assert 'href="https://example.org/a?b=1&amp;c=&lt;2&gt;"' in html
    # the CSP only lets the page's own script (pinned by hash) run
    csp = next(a["content"] for t, a in p.tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy")
    assert re.search(r"script-src 'sha256-[A-Za-z0-9+/=]+';", csp) and "default-src 'none'" in csp


def test_images_from_dict_dataset_or_missing_never_crash(run_dir, tmp_path):
    sid = real_traces(run_dir)[0].session_id
    # no images at all: placeholders only
    html = build_html(run_dir, images={})
    assert not PHOTO.findall(html) and html.count('class="thumb placeholder"') == 3
    # one image given by the caller; a non-image and a broken image become placeholders with a reason
    data = _jpeg_bytes()
    broken = Image.open(io.BytesIO(data[: len(data) // 2]))  # header fine, pixels truncated
    html = build_html(run_dir, images={sid: Image.new("RGB", (900, 600), (200, 30, 30)), "zz-evil": broken})
    assert len(PHOTO.findall(html)) == 1 and "image could not be rendered" in html
    # a dataset that does not exist: a note in the header, placeholders, no exception
    html = build_html(run_dir, data=str(tmp_path / "nowhere"))
    assert "images could not be read from" in html and not PHOTO.findall(html)
    # an empty folder renders an empty page
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "no readable turn traces" in build_html(empty)


def test_boxes_are_scaled_to_the_image_the_agent_saw(tmp_path):
    store = TraceStore(tmp_path, "r")
    t = evil_trace("r")
    t.session_id, t.image = (
        "big",
        ImageInfo(original_size=(4096, 2048), size=(2048, 1024), transforms=["downscaled to 2048x1024"]),
    )
    t.steps = [
        ToolCallEvent(
            index=0, tool="detect_crop", detected_box=Box(x0=1024, y0=512, x1=2048, y1=1024, label="half", method="m")
        )
    ]
    store.write(t)
    html = build_html(store.dir, images={"big": Image.new("RGB", (4096, 2048), (10, 120, 40))})
    assert "left:50.00%;top:50.00%;width:50.00%;height:50.00%" in html
    assert "width:480px;height:240px" in html


def test_cli(run_dir, tmp_path, capsys):
    out = tmp_path / "page.html"
    assert viewer_main([str(run_dir), "--out", str(out), "--no-images"]) == 0
    assert out.exists() and str(out) in capsys.readouterr().out
    assert viewer_main([str(tmp_path / "missing")]) == 2


def _jpeg_bytes() -> bytes:
    buf = io.BytesIO()
    noise = np.random.default_rng(0).integers(0, 255, (128, 128, 3), dtype=np.uint8)
    Image.fromarray(noise).save(buf, format="JPEG")
    return buf.getvalue()


CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason="/usr/bin/chromium is absent (apt-get install -y chromium); CI installs it for this test",
)
def test_headless_chromium_renders_the_page(run_dir, page, tmp_path):
    path, _ = page
    shot = tmp_path / "shot.png"
    base = [str(CHROMIUM), *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}"]
    r = subprocess.run(
        [*base, f"--screenshot={shot}", "--window-size=1280,2000", path.resolve().as_uri()],
        capture_output=True,
        text=True,
        timeout=90,
    )
    print(f"viewer screenshot: {shot}")
    assert shot.exists(), r.stderr[-2000:]
    with Image.open(shot) as im:
        assert im.size == (1280, 2000)
        a = np.asarray(im.convert("RGB"), dtype=np.float32)
    assert a.std() > 20, "screenshot looks blank"
    assert len(np.unique(a.reshape(-1, 3)[::7], axis=0)) > 200  # text, badges and the photos, not a flat page
    assert a[:60].mean() < 100  # the dark run header is at the top

    r = subprocess.run([*base, "--dump-dom", path.resolve().as_uri()], capture_output=True, text=True, timeout=90)
    dom = r.stdout
    assert "<article" in dom, r.stderr[-2000:]
    body = re.search(r"<body[^>]*>", dom).group(0)
    n_turns = dom.count('<article class="turn')
    assert 'data-ready="1"' in body and f'data-shown="{n_turns}"' in body  # the filter script ran over every turn
    assert f"{n_turns} of {n_turns} turn(s) shown" in dom
    assert 'data-pwned="' not in dom  # no injected script or handler ran
