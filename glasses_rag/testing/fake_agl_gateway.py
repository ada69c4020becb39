"""A fake Agent Lightning gateway on 127.0.0.1, for the runner's contract test (glasses_rag/training/engines/
agent_lightning.py), written from Agent Lightning 1.0.2's `server/routes/proxy.py`, `server/proxy.py` and
`server/routes/events.py`:

- `POST /proxy/rollout/<rollout>/attempt/<attempt>/mode/<train|val>/openai/v1/chat/completions`: refused with 401
  without the key (Bearer or x-api-key), 400 "Streaming responses are not supported" for `stream: true`, 429 with
  Retry-After while paused (`paused` requests); else the next scripted reply, as vLLM answers a request with
  `return_token_ids` and `logprobs` (top-level `prompt_token_ids`, `choices[0].token_ids`, `logprobs.content`),
  recorded as a `model_request` event of the rollout.
- `POST /api/rollouts/<rollout>/attempt/<attempt>/events` with `{"event_type", "data"}`: stored as an event.

    with FakeAglGateway(key="k", replies=['{"action": ...}'], paused=1) as gw:
        ...  # gw.url, gw.requests, gw.events[rollout], gw.refused_429
"""

from __future__ import annotations

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

CHAT = re.compile(r"^/proxy/rollout/([^/]+)/attempt/([^/]+)/mode/(train|val)/openai/v1/chat/completions$")
EVENTS = re.compile(r"^/api/rollouts/([^/]+)/attempt/([^/]+)/events$")


def token_reply(text: str, prompt: str) -> dict[str, Any]:
    """A vLLM chat completion for `text` with token ids (one per UTF-8 byte) and log-probabilities."""
    ids = list(text.encode())
    return {
        "id": "chatcmpl-agl",
        "object": "chat.completion",
        "model": "served",
        "prompt_token_ids": list(prompt.encode())[:4096],
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "stop",
                "logprobs": {"content": [{"token": chr(b), "logprob": -0.05} for b in ids]},
                "token_ids": ids,
            }
        ],
        "usage": {"prompt_tokens": len(prompt.encode()), "completion_tokens": len(ids)},
    }


class _GatewayHandler(BaseHTTPRequestHandler):
    server: Any
    protocol_version = "HTTP/1.1"

    def log_message(self, *a: Any) -> None:
        pass

    def _send(self, code: int, body: Any, headers: dict[str, str] | None = None) -> None:
        raw = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(raw)

    def do_POST(self) -> None:
        gw: FakeAglGateway = self.server.gateway
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        auth = self.headers.get("Authorization", "")
        with gw.lock:
            gw.requests.append({"path": self.path, "body": body, "auth": auth})
        if gw.key and auth != f"Bearer {gw.key}" and self.headers.get("x-api-key") != gw.key:
            return self._send(401, {"detail": "Invalid or missing API key"})
        chat, events = CHAT.match(self.path), EVENTS.match(self.path)
        if chat:
            return self._chat(gw, chat.group(1), chat.group(2), body)
        if events:
            event = {"event_type": body["event_type"], "data": body.get("data") or {}}
            gw.record(events.group(1), events.group(2), event)
            return self._send(200, {**event, "rollout_id": events.group(1), "attempt_id": events.group(2)})
        return self._send(404, {"detail": "Not Found"})

    def _chat(self, gw: FakeAglGateway, rollout: str, attempt: str, body: dict) -> None:
        with gw.lock:
            pause = gw.paused > 0
            gw.paused -= 1 if pause else 0
            gw.refused_429 += 1 if pause else 0
        if pause:
            reason = {"error": "gateway paused", "reason": "weight update"}
            return self._send(429, reason, {"Retry-After": "0", "X-Agl-Paused": "true"})
        if body.get("stream", False):
            return self._send(400, {"detail": "Streaming responses are not supported"})
        with gw.lock:
            text = gw.replies.pop(0) if gw.replies else '{"action": "answer", "answer": "I don\'t know"}'
        reply = token_reply(text, json.dumps(body.get("messages")))
        gw.record(rollout, attempt, {"event_type": "model_request", "data": {"request": body, "response": reply}})
        return self._send(200, reply)


class FakeAglGateway:
    def __init__(self, key: str = "", replies: list[str] | None = None, paused: int = 0):
        self.key, self.replies, self.paused = key, list(replies or []), paused
        self.refused_429 = 0
        self.requests: list[dict[str, Any]] = []
        self.events: dict[str, list[dict[str, Any]]] = {}
        self.lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _GatewayHandler)
        self.httpd.daemon_threads = True
        self.httpd.gateway = self  # type: ignore[attr-defined]
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def record(self, rollout: str, attempt: str, event: dict[str, Any]) -> None:
        with self.lock:
            self.events.setdefault(rollout, []).append({**event, "attempt_id": attempt, "timestamp": time.time()})

    def __enter__(self) -> FakeAglGateway:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


__all__ = ["FakeAglGateway", "token_reply"]
