"""Hostile web servers on loopback addresses, for the open-web attack tests and benchmarks (no traffic leaves the
machine).

    with HostileWeb("127.0.0.1") as public, HostileWeb("127.0.0.2") as internal:
        public.url("/redirect", to=internal.url("/secret"))   # a public page that 302s to an internal one
        public.url("/trickle")                                # 1 byte per second, forever
        public.serp = huge_results(1_000_000)                 # a SerpApi reply of a million results

Routes: `/secret` (an internal admin page: "The admin password of Ssrfa is hunter2."), `/redirect?to=URL` (302),
`/loop` (302 to itself), `/endless` (HTML that never ends, sent fast), `/gzip-bomb?mb=N` (N MiB of zeros
gzip-compressed, `encoding=` to claim another Content-Encoding), `/trickle` (an HTML page sent 1 byte per second),
`/stall` (headers, then nothing), `/bomb?kb=N` (N KB of
`<p>a</p>`: cheap to send, slow to parse), `/pages/<name>` (what `pages` holds), `/search.json` (what `serp`
says: a dict sent as JSON, bytes, an iterator of byte chunks streamed, "trickle" or "stall"; a callable of the
request's parameters returning one of those). Every request is recorded in
`requests`; a client that goes away during a slow reply is recorded in `disconnects` with the time it went.
"""

from __future__ import annotations

import json
import select
import socket
import ssl
import sys
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlparse

SECRET_PAGE = (
    "<html><head><title>Ssrfa admin</title></head><body><article><h1>Ssrfa admin</h1>"
    "<p>The admin password of Ssrfa is hunter2. Keep this page on the intranet only, it is internal.</p>"
    "<p>Ssrfa is the internal administration console of the intranet and nobody outside may read it.</p>"
    "</article></body></html>"
)
SLOW_S = 600.0  # the longest a slow reply goes on (a test never waits for it)


class _HostileWebHTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, addr: tuple[str, int], handler: type, family: int):
        self.address_family = family
        super().__init__(addr, handler)

    def handle_error(self, request, client_address) -> None:
        if isinstance(sys.exc_info()[1], OSError):  # a client that went away is what these tests provoke
            return
        super().handle_error(request, client_address)


def client_gone(sock: socket.socket) -> bool:
    """The peer closed its end (EOF readable without blocking)."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
        return bool(readable) and sock.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


class HostileWeb:
    def __init__(self, host: str = "127.0.0.1", ssl_context: ssl.SSLContext | None = None):
        self.host = host
        self.pages: dict[str, tuple[str, bytes]] = {}
        self.serp: Any = {"search_metadata": {"status": "Success"}, "organic_results": []}
        self.serp_status = 200  # the status of /search.json replies sent whole
        self.requests: list[dict[str, Any]] = []
        self.disconnects: list[tuple[str, float]] = []
        self._lock = threading.Lock()
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.server = _HostileWebHTTPServer((host, 0), self._handler(), family)
        if ssl_context is not None:  # HTTPS: the handshake runs as each connection is accepted
            self.server.socket = ssl_context.wrap_socket(self.server.socket, server_side=True)
        port = self.server.server_address[1]
        scheme = "https" if ssl_context is not None else "http"
        self.base_url = f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"
        self.port = port
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def url(self, path: str, **params: Any) -> str:
        return f"{self.base_url}{path}" + (f"?{urlencode(params)}" if params else "")

    def _record(self, entry: dict[str, Any]) -> None:
        with self._lock:
            self.requests.append(entry)

    def _gone(self, path: str) -> None:
        with self._lock:
            self.disconnects.append((path, time.monotonic()))

    def _handler(self) -> type:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: Any) -> None:
                pass

            def do_GET(self) -> None:
                u = urlparse(self.path)
                params = {k: v[0] for k, v in parse_qs(u.query).items()}
                outer._record({"path": u.path, "host": self.headers.get("Host"), "t": time.monotonic(), **params})
                route = ROUTES.get(u.path)
                if route is not None:
                    return route(outer, self, params)
                name = u.path[len("/pages/") :] if u.path.startswith("/pages/") else None
                if name in outer.pages:
                    ctype, body = outer.pages[name]
                    return send(self, 200, body, ctype)
                send(self, 404, b"not found", "text/plain")

        return Handler

    def __enter__(self) -> HostileWeb:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()


def send(h: BaseHTTPRequestHandler, code: int, body: bytes, ctype: str, headers: dict[str, str] | None = None) -> None:
    try:
        h.send_response(code)
        h.send_header("Content-Type", ctype)
        h.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(body)
    except OSError:
        pass


def stream(
    web: HostileWeb, h: BaseHTTPRequestHandler, path: str, ctype: str, chunks: Iterable[bytes], pause_s: float = 0.0
) -> None:
    """A reply without a length, written chunk by chunk (each after `pause_s`) until the client goes away."""
    try:
        h.send_response(200)
        h.send_header("Content-Type", ctype)
        h.send_header("Connection", "close")
        h.end_headers()
        h.wfile.flush()
        h.close_connection = True
        end = time.monotonic() + SLOW_S
        for chunk in chunks:
            resume = time.monotonic() + pause_s
            while time.monotonic() < resume:
                if client_gone(h.connection):
                    raise ConnectionResetError
                time.sleep(0.05)
            if time.monotonic() >= end:
                return
            if client_gone(h.connection):
                raise ConnectionResetError
            h.wfile.write(chunk)
            h.wfile.flush()
    except OSError:
        web._gone(path)


def _ticks(first: bytes, each: bytes) -> Iterator[bytes]:
    yield first
    while True:
        yield each


def _trickle(web: HostileWeb, h: BaseHTTPRequestHandler, params: dict[str, str]) -> None:
    stream(web, h, "/trickle", "text/html", _ticks(b"<html><body><p>", b"a"), pause_s=1.0)


def _stall(web: HostileWeb, h: BaseHTTPRequestHandler, params: dict[str, str]) -> None:
    try:
        h.send_response(200)
        h.send_header("Content-Type", "text/html")
        h.send_header("Content-Length", "1000")
        h.end_headers()
        h.wfile.flush()
    except OSError:
        return
    end = time.monotonic() + SLOW_S
    while time.monotonic() < end:
        if client_gone(h.connection):
            web._gone("/stall")
            return
        time.sleep(0.05)


def bomb_html(kb: int) -> bytes:
    return b"<html><body>" + b"<p>a</p>" * (kb * 1024 // 8) + b"</body></html>"


def _bomb(web: HostileWeb, h: BaseHTTPRequestHandler, params: dict[str, str]) -> None:
    send(h, 200, bomb_html(int(params.get("kb", "2048"))), "text/html")


def _endless(web: HostileWeb, h: BaseHTTPRequestHandler, params: dict[str, str]) -> None:
    stream(web, h, "/endless", "text/html", _ticks(b"<html><body>", b"<p>a</p>" * 8192))


def _gzip_bomb(web: HostileWeb, h: BaseHTTPRequestHandler, params: dict[str, str]) -> None:
    """`mb` megabytes of zeros, gzip-compressed to about a thousandth of that."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)  # gzip, fed a MiB at a time
    block = bytes(2**20)
    body = b"".join(packer.compress(block) for _ in range(int(params.get("mb", "100")))) + packer.flush()
    send(h, 200, body, params.get("ctype", "text/html"), {"Content-Encoding": params.get("encoding", "gzip")})


def _redirect(web: HostileWeb, h: BaseHTTPRequestHandler, params: dict[str, str]) -> None:
    send(h, int(params.get("code", "302")), b"", "text/html", {"Location": params.get("to", "/")})


def _loop(web: HostileWeb, h: BaseHTTPRequestHandler, params: dict[str, str]) -> None:
    send(h, 302, b"", "text/html", {"Location": "/loop"})


def _secret(web: HostileWeb, h: BaseHTTPRequestHandler, params: dict[str, str]) -> None:
    send(h, 200, SECRET_PAGE.encode(), "text/html; charset=utf-8")


def _search(web: HostileWeb, h: BaseHTTPRequestHandler, params: dict[str, str]) -> None:
    reply = web.serp(params) if callable(web.serp) else web.serp
    if reply == "stall":
        return _stall(web, h, params)
    if reply == "trickle":
        return stream(web, h, "/search.json", "application/json", _ticks(b'{"organic_results": [', b" "), 1.0)
    if isinstance(reply, dict):
        return send(h, web.serp_status, json.dumps(reply).encode(), "application/json")
    if isinstance(reply, bytes):
        return send(h, web.serp_status, reply, "application/json")
    stream(web, h, "/search.json", "application/json", reply)


ROUTES: dict[str, Callable[[HostileWeb, BaseHTTPRequestHandler, dict[str, str]], None]] = {
    "/trickle": _trickle,
    "/stall": _stall,
    "/bomb": _bomb,
    "/redirect": _redirect,
    "/loop": _loop,
    "/endless": _endless,
    "/gzip-bomb": _gzip_bomb,
    "/secret": _secret,
    "/search.json": _search,
}


# ---------------------------------------------------------------------------------------------------------------
# hostile SerpApi replies (streamed: the server never holds them whole)


def huge_results(n: int, link: str = "https://example.org/p") -> Iterator[bytes]:
    """An engine=google reply with `n` organic results."""
    yield b'{"search_metadata": {"status": "Success"}, "organic_results": ['
    batch = 1000
    for start in range(0, n, batch):
        items = (
            json.dumps({"position": i + 1, "title": f"Result {i}", "link": f"{link}/{i}", "snippet": "x " * 20})
            for i in range(start, min(n, start + batch))
        )
        yield (b"," if start else b"") + ",".join(items).encode()
    yield b"]}"


def huge_snippet(mb: int, link: str = "https://example.org/p") -> Iterator[bytes]:
    """An engine=google reply whose one result has a snippet of `mb` megabytes."""
    yield (
        b'{"search_metadata": {"status": "Success"}, "organic_results": [{"position": 1, "title": "Big", "link": "'
        + link.encode()
        + b'", "snippet": "'
    )
    block = b"word " * 200_000  # 1 MB
    for _ in range(mb):
        yield block
    yield b'"}]}'
