"""A scripted OpenAI-compatible HTTP server on 127.0.0.1, for tests and offline demos.

    with FakeOpenAIServer() as srv:
        srv.push(FakeOpenAIServer.tool_call_reply("web_search", {"query": "x"}))
        srv.push(FakeOpenAIServer.text_reply('{"answer": "Paris", "confidence": 0.9}'))
        policy = make_policy(f"openai:{srv.base_url}#fake")

Each /chat/completions request pops the next scripted reply: a dict (sent as 200 JSON),
`("status", code, body)` or `("hang", seconds)`; with the script empty it answers an empty
text reply. `route(marker, reply)` answers any request whose body contains `marker` with `reply`
instead (for requests that run concurrently, whose arrival order is not fixed). Every request body
is kept in `requests`.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class FakeOpenAIServer:
    def __init__(self, models: tuple[str, ...] = ("fake-vlm",)):
        self.script: deque[Any] = deque()
        self.routes: list[tuple[str, Any]] = []
        self.requests: list[dict] = []
        self.models = models
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):  # quiet
                pass

            def _send(self, code: int, body: Any) -> None:
                raw = body.encode() if isinstance(body, str) else json.dumps(body).encode()
                try:
                    self.send_response(code)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(raw)))
                    self.end_headers()
                    self.wfile.write(raw)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def do_GET(self):
                if self.path.rstrip("/").endswith("/models"):
                    self._send(200, {"object": "list", "data": [{"id": m, "object": "model"} for m in outer.models]})
                else:
                    self._send(404, {"error": "not found"})

            def do_POST(self):
                n = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(n) or b"{}")
                with outer._lock:
                    outer.requests.append(body)
                    raw = json.dumps(body)
                    routed = next((i for i, (marker, _) in enumerate(outer.routes) if marker in raw), None)
                    if routed is not None:
                        item = outer.routes.pop(routed)[1]
                    else:
                        item = outer.script.popleft() if outer.script else FakeOpenAIServer.text_reply("")
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._send(404, {"error": "not found"})
                elif isinstance(item, tuple) and item[0] == "hang":
                    time.sleep(item[1])
                    self._send(200, FakeOpenAIServer.text_reply("too late"))
                elif isinstance(item, tuple) and item[0] == "status":
                    self._send(item[1], item[2])
                else:
                    self._send(200, item)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def start(self) -> "FakeOpenAIServer":
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> "FakeOpenAIServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def push(self, *items: Any) -> None:
        with self._lock:
            self.script.extend(items)

    def route(self, marker: str, reply: Any) -> None:
        """Answer the first request whose JSON body contains `marker` with `reply` (used once)."""
        with self._lock:
            self.routes.append((marker, reply))

    def reset(self) -> None:
        with self._lock:
            self.script.clear()
            self.routes.clear()
            self.requests.clear()

    @staticmethod
    def text_reply(text: str, prompt_tokens: int = 10, completion_tokens: int = 5) -> dict:
        return {"id": "cmpl-1", "object": "chat.completion", "model": "fake-vlm",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens}}

    @staticmethod
    def tool_call_reply(name: str, arguments: dict | str, content: str | None = None) -> dict:
        args = arguments if isinstance(arguments, str) else json.dumps(arguments)
        return {"id": "cmpl-2", "object": "chat.completion", "model": "fake-vlm",
                "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                    "role": "assistant", "content": content,
                    "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": name, "arguments": args}}]}}],
                "usage": {"prompt_tokens": 12, "completion_tokens": 7}}
