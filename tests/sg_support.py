"""Test helpers for SuperGlasses: a dataset in the exact shape of `xandery/SuperGlasses` (both configs as parquet),
and a local HTTP fixture server on 127.0.0.1 that speaks the SerpApi JSON and serves HTML pages."""

from __future__ import annotations

import io
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from PIL import Image


def jpeg(color=(200, 30, 30), size=(64, 48)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format="JPEG")
    return buf.getvalue()


def sub_q(text: str, tools: Any) -> dict[str, str]:
    """One `sub_questions` item; `retrieval-tools` is stored as text in the parquet (dicts and lists as JSON)."""
    return {"sub_question": text, "retrieval-tools": tools if isinstance(tools, str) else json.dumps(tools)}


def query_row(i: int, image_id: int | None, question: str, answer: str, subs: list[dict], **labels: Any) -> dict:
    row = {"id": f"sg-{i:04d}", "image_id": image_id, "image": f"{image_id}.jpg", "question": question,
           "answer": answer, "category": ["Entity Recognition"], "domain": "Vehicle", "difficulty": "Easy",
           "dynamism": "Static", "image_quality": "Normal", "glasses": "Ray-Ban Meta", "location": "Outdoor",
           "hops": len(subs), "use_image": "Yes", "sub_questions": subs}
    row.update(labels)
    return row


def write_superglasses(root: Path, rows: list[dict], images: dict[int, bytes], shards: int = 2) -> Path:
    """`root/queries/test-00000-of-00001.parquet` and `root/images/test-000NN-of-0000S.parquet`, written by
    `datasets` with the dataset's features (Image() cells as {bytes, path} structs)."""
    from datasets import Dataset, Features, Sequence, Value
    from datasets import Image as HFImage

    (root / "queries").mkdir(parents=True, exist_ok=True)
    (root / "images").mkdir(parents=True, exist_ok=True)
    qfeat = Features({
        "id": Value("string"), "image_id": Value("int64"), "image": Value("string"), "question": Value("string"),
        "answer": Value("string"), "category": Sequence(Value("string")), "domain": Value("string"),
        "difficulty": Value("string"), "dynamism": Value("string"), "image_quality": Value("string"),
        "glasses": Value("string"), "location": Value("string"), "hops": Value("int64"), "use_image": Value("string"),
        "sub_questions": [{"sub_question": Value("string"), "retrieval-tools": Value("string")}],
    })
    cols = {k: [r.get(k) for r in rows] for k in qfeat}
    Dataset.from_dict(cols, features=qfeat).to_parquet(str(root / "queries" / "test-00000-of-00001.parquet"))
    ids = sorted(images)
    ifeat = Features({"image_id": Value("int64"), "image": HFImage()})
    for s in range(shards):
        part = ids[s::shards]
        Dataset.from_dict({"image_id": part, "image": [{"bytes": images[i], "path": f"{i}.jpg"} for i in part]},
                          features=ifeat).to_parquet(str(root / "images" / f"test-{s:05d}-of-{shards:05d}.parquet"))
    return root


def small_dataset(root: Path) -> Path:
    """Four questions over three images: one-hop image search, two-hop image + text, no retrieval (use_image
    "No"), and a question whose image_id is in no images file."""
    rows = [
        query_row(0, 1, "What is this rocket?", "Falcon 9", [sub_q("What is the rocket?", {"Image Search": {"url": "https://example.org/f9"}})],
                  difficulty="Easy"),
        query_row(1, 1, "Who makes this rocket?", "SpaceX",
                  [sub_q("What is the rocket?", ["Image Search"]),
                   sub_q("Who makes Falcon 9?", {"tool": "Text Search", "keywords": "Falcon 9 manufacturer"})],
                  difficulty="Hard", category=["Entity Recognition", "Reasoning"]),
        query_row(2, 2, "What colour is the sky?", "blue", [sub_q("What colour is the sky?", "none")],
                  use_image="No", domain="Nature", glasses="Xiaomi"),
        query_row(3, 99, "When was this tower built?", "1889",
                  [sub_q("When was the Eiffel Tower built?", '{"Text Search": "Eiffel Tower built year"}')],
                  domain="Landmark", glasses="RayNeo"),
    ]
    return write_superglasses(root, rows, {1: jpeg((200, 30, 30)), 2: jpeg((30, 30, 200)), 3: jpeg((0, 200, 0))})


ARTICLE = ("<html><head><title>{title}</title></head><body><nav><a href='/'>Home</a> <a href='/x'>Menu item</a></nav>"
           "<article><h1>{title}</h1>{paras}</article><footer>Copyright 2026 - cookie policy - contact</footer>"
           "</body></html>")


def article(title: str, sentences: list[str], per_para: int = 2) -> str:
    paras = "".join("<p>" + " ".join(sentences[i:i + per_para]) + "</p>" for i in range(0, len(sentences), per_para))
    return ARTICLE.format(title=title, paras=paras)


class FixtureWeb:
    """SerpApi-compatible `/search.json` (engine=google: `web[q]`, engine=google_lens: `lens`), HTML pages under
    `/pages/<name>`, and any file of `image_dir` under `/images/`. Every request is recorded."""

    def __init__(self, key: str = "test-key", image_dir: Path | None = None):
        self.key = key
        self.image_dir = image_dir
        self.web: dict[str, dict] = {}
        self.lens: dict = {}
        self.pages: dict[str, tuple[str, str]] = {}
        self.fail_next = 0  # answer this many search requests with 500 first
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _send(self, code: int, body: bytes, ctype: str) -> None:
                try:
                    self.send_response(code)
                    self.send_header("Content-Type", ctype)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def do_GET(self):
                u = urlparse(self.path)
                params = {k: v[0] for k, v in parse_qs(u.query).items()}
                with outer._lock:
                    outer.requests.append({"path": u.path, **params})
                    fail = outer.fail_next > 0 and u.path == "/search.json"
                    if fail:
                        outer.fail_next -= 1
                if u.path == "/search.json":
                    if fail:
                        return self._send(500, b'{"error": "temporary"}', "application/json")
                    if params.get("api_key") != outer.key:
                        return self._send(401, json.dumps({"error": "Invalid API key."}).encode(), "application/json")
                    if params.get("engine") == "google_lens":
                        data = outer.lens
                    else:
                        data = outer.web.get(params.get("q", ""), {
                            "search_metadata": {"status": "Success"},
                            "error": "Google hasn't returned any results for this query."})
                    return self._send(200, json.dumps(data).encode(), "application/json")
                if u.path.startswith("/pages/") and u.path[len("/pages/"):] in outer.pages:
                    ctype, body = outer.pages[u.path[len("/pages/"):]]
                    return self._send(200, body.encode(), ctype)
                if u.path.startswith("/images/") and outer.image_dir is not None:
                    p = outer.image_dir / Path(u.path).name
                    if p.is_file():
                        return self._send(200, p.read_bytes(), "image/jpeg")
                self._send(404, b"not found", "text/plain")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def page_url(self, name: str) -> str:
        return f"{self.base_url}/pages/{name}"

    def searches(self, engine: str | None = None) -> list[dict[str, Any]]:
        return [r for r in self.requests if r["path"] == "/search.json" and (engine is None or r.get("engine") == engine)]

    def __enter__(self) -> FixtureWeb:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def organic(*results: tuple[str, str, str]) -> dict:
    """A SerpApi engine=google reply with organic results (title, link, snippet)."""
    return {"search_metadata": {"status": "Success"},
            "organic_results": [{"position": i + 1, "title": t, "link": link, "snippet": s}
                                for i, (t, link, s) in enumerate(results)]}


def use_fixture_web(monkeypatch, web: FixtureWeb, cache_dir: Path, image_dir: Path | None = None) -> None:
    """Point the open-web tools at the fixture server (key, base URL, cache, image hosting) for one test."""
    from web.open_web import reset_open_web

    monkeypatch.setenv("SERPAPI_API_KEY", web.key)
    monkeypatch.setenv("SERPAPI_BASE_URL", web.base_url)
    monkeypatch.setenv("GLASSES_WEB_CACHE", str(cache_dir))
    monkeypatch.setenv("GLASSES_WEB_TIMEOUT", "5")
    monkeypatch.setenv("GLASSES_WEB_ALLOW", "127.0.0.1")  # the fixture server is on loopback, which is refused by default
    if image_dir is not None:
        monkeypatch.setenv("GLASSES_IMAGE_DIR", str(image_dir))
        monkeypatch.setenv("GLASSES_IMAGE_BASE_URL", f"{web.base_url}/images")
    reset_open_web()
