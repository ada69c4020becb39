"""A hostile OpenAI-compatible model server on 127.0.0.1, for tests and for measuring what a bad server costs.

    with HostileModelServer("endless") as srv:
        backend = OpenAICompatibleBackend(srv.base_url, "x")   # every reply now streams forever

Every /chat/completions request gets the same treatment, whatever it asks (streamed or not, tools or a JSON
schema), chosen by `mode`:

- `endless`: text without end (SSE chunks when the request streams, else a chunked body that never closes);
- `endless-line`: a streamed reply that is one line never ended by a newline;
- `huge-args`: one native tool call whose `arguments` are `size` bytes of `(1,1,1,...)` (not JSON: a Python
  tuple, the worst case for a lenient parser), streamed in pieces or whole;
- `huge-body`: a non-streamed JSON reply of `size` bytes (a 200 MB answer), announced in Content-Length.

It is bounded so it can never outlive a test: each reply stops after `reply_s` seconds or `reply_bytes` bytes,
and `python -m glasses_rag.testing.hostile_model_server` exits after `--lifetime` seconds. The reply's body is built
once per piece, never whole, so the server itself stays small. `sent[i]` is how many bytes reply i got out.
"""

from __future__ import annotations

import argparse
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Literal

HostileMode = Literal["endless", "endless-line", "huge-args", "huge-body"]
MODES: tuple[str, ...] = ("endless", "endless-line", "huge-args", "huge-body")
PIECE = 16 * 1024


class HostileModelServer:
    def __init__(
        self,
        mode: HostileMode = "endless",
        *,
        size: int = 6 * 1024 * 1024,
        reply_s: float = 60.0,
        reply_bytes: int = 4 * 1024**3,
        port: int = 0,
    ):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
        self.mode, self.size, self.reply_s, self.reply_bytes = mode, size, reply_s, reply_bytes
        self.sent: list[int] = []
        self.lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), _HostileHandler)
        self.httpd.daemon_threads = True
        self.httpd.hostile = self  # type: ignore[attr-defined]
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)

    def start(self) -> HostileModelServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> HostileModelServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _chunk(delta: dict, finish: str | None = None) -> bytes:
    body = {
        "id": "chatcmpl-hostile",
        "object": "chat.completion.chunk",
        "model": "x",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return f"data: {json.dumps(body)}\n\n".encode()


class _HostileHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a: object) -> None:  # quiet
        pass

    @property
    def hostile(self) -> HostileModelServer:
        return self.server.hostile  # type: ignore[attr-defined]

    def do_GET(self) -> None:
        raw = json.dumps({"object": "list", "data": [{"id": "x", "object": "model"}]}).encode()
        self._head(200, "application/json", len(raw))
        self.wfile.write(raw)

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        stream = bool(body.get("stream"))
        with self.hostile.lock:
            self.hostile.sent.append(0)
            slot = len(self.hostile.sent) - 1
        try:
            self._reply(stream, slot)
        except OSError:  # the client went away: what it is supposed to do
            pass
        self.close_connection = True

    def _head(self, code: int, ctype: str, length: int | None = None) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        if length is None:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Content-Length", str(length))
        self.end_headers()

    def _reply(self, stream: bool, slot: int) -> None:
        h = self.hostile
        if h.mode == "huge-body" and not stream:
            self._huge_body(slot)
            return
        self._head(200, "text/event-stream" if stream else "application/json")
        for piece in self._pieces(stream):
            if not self._send(piece, slot):
                return
        self._send(b"", slot)  # the chunked body's end

    def _pieces(self, stream: bool):
        """The reply's pieces, without end for the endless modes (the caller stops at the bounds)."""
        h = self.hostile
        text = "x" * (PIECE // 2)
        if h.mode in ("endless", "huge-body") and stream:
            while True:
                yield _chunk({"content": text})
        elif h.mode == "endless":
            yield b'{"id": "chatcmpl-hostile", "choices": [{"index": 0, "message": {"role": "assistant", "content": "'
            while True:
                yield text.encode()
        elif h.mode == "endless-line":
            yield b'data: {"choices": [{"index": 0, "delta": {"content": "'
            while True:
                yield text.encode()
        else:
            yield from self._huge_args(stream)

    def _huge_args(self, stream: bool):
        h = self.hostile
        args = "(" + "1," * (PIECE // 2)
        n = max(1, h.size // len(args))
        call = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "web_search", "arguments": ""}}
        if stream:
            yield _chunk({"role": "assistant", "tool_calls": [call]})
            for _ in range(n):
                yield _chunk({"tool_calls": [{"index": 0, "function": {"arguments": args}}]})
            yield _chunk({"tool_calls": [{"index": 0, "function": {"arguments": "1)"}}]}, "tool_calls")
            yield b"data: [DONE]\n\n"
            return
        head = {
            "id": "chatcmpl-hostile",
            "object": "chat.completion",
            "model": "x",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "tool_calls",
                    "message": {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [{**call, "function": {"name": "web_search", "arguments": "@"}}],
                    },
                }
            ],
        }
        before, after = json.dumps(head).split("@")
        yield before.encode()
        for _ in range(n):
            yield args.encode()
        yield b"1)" + after.encode()

    def _huge_body(self, slot: int) -> None:
        h = self.hostile
        before, after = json.dumps(
            {
                "id": "chatcmpl-hostile",
                "object": "chat.completion",
                "model": "x",
                "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "@"}}],
            }
        ).split("@")
        n = max(1, h.size // PIECE)
        self._head(200, "application/json", len(before) + n * PIECE + len(after))
        pieces = [before.encode(), *(b"x" * PIECE for _ in range(n)), after.encode()]
        for piece in pieces:
            if not self._send(piece, slot, chunked=False):
                return

    def _send(self, piece: bytes, slot: int, chunked: bool = True) -> bool:
        """Write one piece; False once the reply's time or byte bound is reached."""
        h = self.hostile
        with h.lock:
            if h.sent[slot] > h.reply_bytes:
                return False
            h.sent[slot] += len(piece)
        if not hasattr(self, "_t0"):
            self._t0 = time.monotonic()
        if time.monotonic() - self._t0 > h.reply_s:
            return False
        self.wfile.write(b"%X\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
        return True

    def setup(self) -> None:
        super().setup()
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        prog="python -m glasses_rag.testing.hostile_model_server", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("mode", choices=MODES)
    p.add_argument("--size", type=int, default=6 * 1024 * 1024, help="bytes of huge-args / huge-body")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--lifetime", type=float, default=300.0, help="seconds after which the server exits")
    p.add_argument("--reply-s", type=float, default=60.0, help="seconds after which one reply stops")
    args = p.parse_args(argv)
    srv = HostileModelServer(args.mode, size=args.size, reply_s=args.reply_s, port=args.port).start()
    print(srv.base_url, flush=True)
    time.sleep(args.lifetime)
    srv.stop()


if __name__ == "__main__":
    main()
