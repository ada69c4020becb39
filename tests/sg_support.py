"""Test helpers for SuperGlasses: a dataset in the exact shape of `xandery/SuperGlasses` (both configs as parquet),
and a local HTTP fixture server on 127.0.0.1 that speaks the SerpApi JSON and serves HTML pages."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from glasses_rag.superglasses.sample import jpeg, query_row, sample_dataset, sub_q, write_superglasses  # noqa: F401

# the builders are the library's (glasses_rag/superglasses/sample.py): the sample that ships is the data these tests use
small_dataset = sample_dataset


ARTICLE = (
    "<html><head><title>{title}</title></head><body><nav><a href='/'>Home</a> <a href='/x'>Menu item</a></nav>"
    "<article><h1>{title}</h1>{paras}</article><footer>Copyright 2026 - cookie policy - contact</footer>"
    "</body></html>"
)


def article(title: str, sentences: list[str], per_para: int = 2) -> str:
    paras = "".join("<p>" + " ".join(sentences[i : i + per_para]) + "</p>" for i in range(0, len(sentences), per_para))
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
                        data = outer.web.get(
                            params.get("q", ""),
                            {
                                "search_metadata": {"status": "Success"},
                                "error": "Google hasn't returned any results for this query.",
                            },
                        )
                    return self._send(200, json.dumps(data).encode(), "application/json")
                if u.path.startswith("/pages/") and u.path[len("/pages/") :] in outer.pages:
                    ctype, body = outer.pages[u.path[len("/pages/") :]]
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
        return [
            r for r in self.requests if r["path"] == "/search.json" and (engine is None or r.get("engine") == engine)
        ]

    def __enter__(self) -> FixtureWeb:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def organic(*results: tuple[str, str, str]) -> dict:
    """A SerpApi engine=google reply with organic results (title, link, snippet)."""
    return {
        "search_metadata": {"status": "Success"},
        "organic_results": [
            {"position": i + 1, "title": t, "link": link, "snippet": s} for i, (t, link, s) in enumerate(results)
        ],
    }


def use_fixture_web(monkeypatch, web: FixtureWeb, cache_dir: Path, image_dir: Path | None = None) -> None:
    """Point the open-web tools at the fixture server (key, base URL, cache, image hosting) for one test."""
    from glasses_rag.web.open_web import reset_open_web

    monkeypatch.setenv("SERPAPI_API_KEY", web.key)
    monkeypatch.setenv("SERPAPI_BASE_URL", web.base_url)
    monkeypatch.setenv("GLASSES_WEB_CACHE", str(cache_dir))
    monkeypatch.setenv("GLASSES_WEB_TIMEOUT", "5")
    monkeypatch.setenv(
        "GLASSES_WEB_ALLOW", "127.0.0.1"
    )  # the fixture server is on loopback, which is refused by default
    if image_dir is not None:
        monkeypatch.setenv("GLASSES_IMAGE_DIR", str(image_dir))
        monkeypatch.setenv("GLASSES_IMAGE_BASE_URL", f"{web.base_url}/images")
    reset_open_web()
