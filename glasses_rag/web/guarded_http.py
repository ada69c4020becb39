"""HTTP clients whose every connection is vetted by the fetch policy and whose every request has a total deadline
and stops when its turn ends.

httpx sends through httpcore, which makes each connection with a `NetworkBackend`. `GuardedBackend` is that
backend: it resolves the host once, checks every address with the `FetchPolicy` (glasses_rag.web.fetch_policy), connects
to a vetted address itself (so the name is never resolved again: no DNS rebinding), checks the connected socket's
peer address, and hands httpcore a `GuardedStream`. Host header, SNI and certificate checks keep the host name
(httpcore takes them from the URL, not from the address connected to).

Every connect, TLS handshake, read and write waits in slices of at most `POLL_S` and, between slices, checks
the request's `Guard`: its total deadline (set with `deadline(total_s)` around the whole request, redirects and
body included) and the cancel scope of the calling turn (glasses_rag.core.calls.current_scope()). So a server that sends
a byte per second is cut at the deadline, and a turn that ends stops its requests within a slice; the socket is
closed by httpcore as the exception passes. Clients keep no idle connections (no socket outlives a request) and
ignore proxy variables (a proxy would make the policy check the proxy's address instead of the page's).

Host name resolution (getaddrinfo) cannot be interrupted: it is bounded by the system resolver's own timeout.
"""

from __future__ import annotations

import contextvars
import errno
import ipaddress
import math
import select
import socket
import ssl
import time
import zlib
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpcore
import httpx

from glasses_rag.core.calls import CancelScope, current_scope
from glasses_rag.web.fetch_policy import FetchPolicy, Resolver, literal_address, system_resolver

POLL_S = 0.1  # longest a blocking socket call waits before the deadline and the cancel scope are checked again


@dataclass
class Guard:
    """The limits of one request: a total deadline (time.monotonic) and the turn's cancel scope."""

    deadline: float
    total_s: float
    scope: CancelScope | None = None

    def remaining(self, timeout_error: type[Exception] = httpcore.ReadTimeout) -> float:
        if self.scope is not None:
            self.scope.raise_if_cancelled()
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise timeout_error(f"the request took longer than its total deadline of {self.total_s:g}s")
        return left


_GUARD: contextvars.ContextVar[Guard | None] = contextvars.ContextVar("glasses_http_guard", default=None)


@contextmanager
def deadline(total_s: float) -> Iterator[Guard]:
    """Every request made inside shares one total deadline of `total_s` and stops when the current scope is
    cancelled."""
    guard = Guard(time.monotonic() + total_s, total_s, current_scope())
    token = _GUARD.set(guard)
    try:
        yield guard
    finally:
        _GUARD.reset(token)


def wait_slice(timeout: float | None, started: float, timeout_error: type[Exception]) -> float:
    """How long the next blocking wait may last: at most POLL_S, within the guard's deadline and the caller's own
    per-operation `timeout` (counted from `started`); raises when either has passed or the turn was cancelled."""
    guard = _GUARD.get()
    left = guard.remaining(timeout_error) if guard is not None else math.inf
    if timeout is not None:
        own = timeout - (time.monotonic() - started)
        if own <= 0:
            raise timeout_error(f"timed out after {timeout:g}s")
        left = min(left, own)
    return min(left, POLL_S)


class GuardedStream(httpcore.NetworkStream):
    """A socket whose waits are sliced by `wait_slice`."""

    def __init__(self, sock: socket.socket):
        self._sock = sock

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        started = time.monotonic()
        while True:
            self._sock.settimeout(wait_slice(timeout, started, httpcore.ReadTimeout))
            try:
                return self._sock.recv(max_bytes)
            except TimeoutError:
                continue
            except OSError as e:
                raise httpcore.ReadError(str(e)) from e

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        started = time.monotonic()
        view = memoryview(buffer)
        while view:
            self._sock.settimeout(wait_slice(timeout, started, httpcore.WriteTimeout))
            try:
                view = view[self._sock.send(view) :]
            except TimeoutError:
                continue
            except OSError as e:
                raise httpcore.WriteError(str(e)) from e

    def close(self) -> None:
        self._sock.close()

    def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        started = time.monotonic()
        try:
            tls = ssl_context.wrap_socket(self._sock, server_hostname=server_hostname, do_handshake_on_connect=False)
            tls.setblocking(False)
            while True:
                try:
                    tls.do_handshake()
                    break
                except ssl.SSLWantReadError:
                    select.select([tls], [], [], wait_slice(timeout, started, httpcore.ConnectTimeout))
                except ssl.SSLWantWriteError:
                    select.select([], [tls], [], wait_slice(timeout, started, httpcore.ConnectTimeout))
        except (ssl.SSLError, OSError) as e:
            self._sock.close()
            raise httpcore.ConnectError(f"TLS handshake with {server_hostname} failed: {e}") from e
        except BaseException:
            self._sock.close()
            raise
        return GuardedStream(tls)

    def get_extra_info(self, info: str) -> Any:
        if info == "ssl_object" and isinstance(self._sock, ssl.SSLSocket):
            return self._sock._sslobj  # type: ignore[attr-defined]  # what httpcore's own stream returns
        if info == "server_addr":
            return self._sock.getpeername()
        if info == "client_addr":
            return self._sock.getsockname()
        if info == "socket":
            return self._sock
        if info == "is_readable":  # an idle connection the server closed
            return bool(select.select([self._sock], [], [], 0)[0])
        return None


Limit = Callable[[], float]
Connector = Callable[[str, int, Limit, Iterable[Any]], tuple[socket.socket, str]]


def tcp_connect(ip: str, port: int, limit: Limit, socket_options: Iterable[Any] = ()) -> tuple[socket.socket, str]:
    """(connected socket, its peer address): a non-blocking connect polled with `limit()` slices."""
    sock = socket.socket(socket.AF_INET6 if ":" in ip else socket.AF_INET, socket.SOCK_STREAM)
    try:
        for opt in socket_options:
            sock.setsockopt(*opt)
        sock.setblocking(False)
        err = sock.connect_ex((ip, port))
        while err in (errno.EINPROGRESS, errno.EALREADY, errno.EWOULDBLOCK):
            if select.select([], [sock], [], limit())[1]:
                err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if err:
            raise OSError(err, f"connect to {ip}:{port}: {errno.errorcode.get(err, err)}")
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock, str(sock.getpeername()[0])
    except BaseException:
        sock.close()
        raise


class GuardedBackend(httpcore.NetworkBackend):
    """Connections for httpcore: resolved once, vetted by `policy` (None: any address, for operator-configured
    servers), connected to the vetted address, the peer address checked."""

    def __init__(
        self, policy: FetchPolicy | None, resolver: Resolver = system_resolver, connector: Connector = tcp_connect
    ):
        self.policy = policy
        self.resolver = resolver
        self.connector = connector

    def _addresses(self, host: str, port: int) -> list[str]:
        if self.policy is not None:
            return [str(ip) for ip in self.policy.vet(host, port, self.resolver)]
        literal = literal_address(host)
        return [str(literal)] if literal is not None else self.resolver(host, port)

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        started = time.monotonic()
        try:
            addresses = self._addresses(host, port)
        except OSError as e:
            raise httpcore.ConnectError(str(e)) from e
        failures = []
        for ip in addresses:
            try:
                sock, peer = self.connector(
                    ip, port, lambda: wait_slice(timeout, started, httpcore.ConnectTimeout), socket_options or ()
                )
            except OSError as e:
                failures.append(str(e))
                continue
            if self.policy is not None:
                try:
                    self.policy.check_address(host, ipaddress.ip_address(peer), "is connected to")
                except ValueError:
                    sock.close()
                    raise
            return GuardedStream(sock)
        raise httpcore.ConnectError(f"cannot connect to {host}:{port}: {'; '.join(failures)[:300]}")


class GuardedTransport(httpx.HTTPTransport):
    """httpx's own transport (its request/response mapping and error types) over a pool that connects through a
    `GuardedBackend` and keeps no idle connection."""

    def __init__(self, backend: GuardedBackend, verify: bool | ssl.SSLContext = True):
        super().__init__(verify=verify, trust_env=False)
        self._pool.close()
        # httpx.HTTPTransport has no parameter for the network backend: its pool is replaced by an equal one with it
        self._pool = httpcore.ConnectionPool(
            ssl_context=httpx.create_ssl_context(verify=verify, trust_env=False),
            max_connections=32,
            max_keepalive_connections=0,
            http1=True,
            http2=False,
            network_backend=backend,
        )


def guarded_client(
    policy: FetchPolicy | None,
    *,
    timeout_s: float,
    resolver: Resolver = system_resolver,
    connector: Connector = tcp_connect,
    headers: dict[str, str] | None = None,
    verify: bool | ssl.SSLContext = True,
) -> httpx.Client:
    """An httpx.Client over a GuardedTransport; redirects are not followed (callers follow them hop by hop)."""
    transport = GuardedTransport(GuardedBackend(policy, resolver, connector), verify=verify)
    return httpx.Client(
        transport=transport,
        trust_env=False,
        follow_redirects=False,
        timeout=httpx.Timeout(timeout_s),
        headers={"Accept-Encoding": ACCEPT_ENCODING, **(headers or {})},
    )


ACCEPT_ENCODING = "gzip, deflate"  # the encodings `read_body` decodes with a bound on its output


def _decoder(response: httpx.Response) -> Any:
    enc = response.headers.get("content-encoding", "").strip().lower()
    if enc in ("", "identity"):
        return None
    if enc in ("gzip", "x-gzip"):
        return zlib.decompressobj(16 + zlib.MAX_WBITS)
    if enc == "deflate":
        return zlib.decompressobj()
    raise httpx.DecodingError(f"unsupported content encoding {enc[:50]!r}")


def read_body(response: httpx.Response, max_bytes: int) -> tuple[bytes, bool]:
    """(at most `max_bytes` of the decoded body, whether more was left unread). The body is decompressed here
    with a bound on each step's output, so a gzip bomb costs at most `max_bytes` of memory (httpx's own decoder
    would inflate a whole 64 KB read at once)."""
    decoder = _decoder(response)
    buf = bytearray()
    try:
        for raw in response.iter_raw():
            while raw:
                if decoder is None:
                    part, raw = raw, b""
                else:
                    part = decoder.decompress(raw, max_bytes + 1 - len(buf))
                    raw = decoder.unconsumed_tail
                buf += part
                if len(buf) > max_bytes:
                    return bytes(buf[:max_bytes]), True
                if decoder is not None and not part:
                    break
    except zlib.error as e:
        raise httpx.DecodingError(f"damaged {response.headers.get('content-encoding')} body: {e}") from e
    return bytes(buf), False
