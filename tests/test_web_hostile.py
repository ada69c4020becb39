"""The open-web attacks of issue 20 against hostile servers on loopback (127.0.0.1 is the allow-listed "public" site,
127.0.0.2 and ::1 are internal) and a fake resolver / fake network for link-local, private and rebinding addresses:
no test sends a packet off the machine (`loopback_only` fails any connection to another address)."""

from __future__ import annotations

import ipaddress
import json
import logging
import socket
import ssl
import subprocess
import sys
import textwrap
import time
import tracemalloc
from pathlib import Path

import httpx
import psutil
import pytest
from support import make_agent

from glasses_rag.core.calls import WORKERS, CallTimeout, Cancelled, CancelScope, run_with_deadline, scope
from glasses_rag.policies.protocol import AnswerDraft, Decision, ScriptedPolicy
from glasses_rag.testing.hostile_web import HostileWeb, huge_results, huge_snippet
from glasses_rag.web import open_web
from glasses_rag.web.config import WebConfig
from glasses_rag.web.fetch_policy import FetchPolicy, RefusedURL
from glasses_rag.web.guarded_http import guarded_client, tcp_connect
from glasses_rag.web.open_web import OpenWeb
from glasses_rag.web.serpapi import SerpApiClient, SerpApiError, web_results
from glasses_rag.web.webpage import fetch
from graph.agent import TurnInput

ROOT = Path(__file__).resolve().parents[1]
PUBLIC_IP = "93.184.215.14"  # stands for a public address; the fake network routes it to a loopback server
KEY = "sk-test-SECRET-4242"


def loopback_only(ip, port, limit, options):
    assert ipaddress.ip_address(ip).is_loopback, f"a test tried to connect to {ip}"
    return tcp_connect(ip, port, limit, options)


class FakeDNS:
    """host -> successive answers (the last one repeats); records every question."""

    def __init__(self, answers: dict[str, list[list[str]]]):
        self.answers = answers
        self.asked: list[str] = []

    def __call__(self, host: str, port: int) -> list[str]:
        self.asked.append(host)
        seq = self.answers[host]
        return seq[min(self.asked.count(host), len(seq)) - 1]


class FakeNetwork:
    """A connection to a routed address reaches the loopback server on the same port; the peer it reports is the
    address asked for (as a real connection to it would), or `peer` to imitate a NAT or proxy in between."""

    def __init__(self, routes: dict[str, str], peer: str | None = None):
        self.routes = routes
        self.peer = peer
        self.calls: list[str] = []

    def __call__(self, ip, port, limit, options):
        self.calls.append(ip)
        if ip not in self.routes:
            raise OSError(f"fake network: no route to {ip}")
        sock, _ = loopback_only(self.routes[ip], port, limit, options)
        return sock, self.peer or ip


@pytest.fixture
def servers():
    with HostileWeb("127.0.0.1") as public, HostileWeb("127.0.0.2") as internal, HostileWeb("::1") as v6:
        public.pages["public"] = (
            "text/html",
            b"<html><body><article><p>This public page is about Ssrfa, a small "
            b"town with a nice harbour and a market every Sunday.</p></article>"
            b"</body></html>",
        )
        yield public, internal, v6


@pytest.fixture
def make_web(tmp_path):
    made: list[OpenWeb] = []

    def build(allow=(), resolver=None, connector=loopback_only, **config) -> OpenWeb:
        config.setdefault("timeout_s", 2.0)
        kw = {"resolver": resolver} if resolver is not None else {}
        web = OpenWeb(
            WebConfig(cache_dir=tmp_path / f"cache{len(made)}", allow=list(allow), **config), connector=connector, **kw
        )
        made.append(web)
        return web

    yield build
    for w in made:
        w.close()


def _refused(page) -> bool:
    return page.error is not None and page.error.startswith("refused by the fetch policy")


# ---------------------------------------------------------------------------------------------------------------
# 1. SSRF


def test_default_policy_refuses_loopback_in_every_spelling(servers, make_web):
    public, internal, v6 = servers
    web = make_web()
    p = public.port
    urls = [
        f"http://127.0.0.1:{p}/secret",
        f"http://localhost:{p}/secret",
        f"http://2130706433:{p}/secret",
        f"http://0x7f.0.0.1:{p}/secret",
        f"http://017700000001:{p}/secret",
        f"http://[::ffff:127.0.0.1]:{p}/secret",
        f"http://[::ffff:7f00:1]:{p}/secret",
        v6.url("/secret"),
        f"http://0.0.0.0:{p}/secret",
    ]
    for url in urls:
        page, cached = web.read(url)
        assert _refused(page) and "hunter2" not in page.text and not cached, (url, page.error)
    assert "2130706433 means 127.0.0.1, a loopback address" in web.read(urls[2])[0].error
    assert "Invalid IPv4 address" in web.read(f"http://0177.0.0.1:{p}/secret")[0].error  # httpx refuses this one
    assert public.requests == [] and v6.requests == []  # refused before connecting
    assert web.stats()["pages"]["entries"] == 0


def test_every_redirect_hop_is_vetted(servers, make_web):
    public, internal, _ = servers
    web = make_web(allow=["127.0.0.1"])
    assert "Ssrfa" in web.read(public.url("/pages/public"))[0].text  # the allow-listed site is read
    hop = public.url("/redirect", to=internal.url("/secret"))
    for url in (
        internal.url("/secret"),
        f"http://2130706434:{internal.port}/secret",
        hop,
        public.url("/redirect", to=hop),
        public.url("/redirect", code=307, to=f"http://[::1]:{internal.port}/"),
    ):
        page, _ = web.read(url)
        assert _refused(page) and ("127.0.0.2" in page.error or "::1" in page.error), (url, page.error)
    assert internal.requests == []
    assert "more than 5 redirects" in web.read(public.url("/loop"))[0].error
    assert "not an http(s) url" in web.read(public.url("/redirect", to="file:///etc/passwd"))[0].error


def test_link_local_private_and_mixed_answers_are_refused_before_connecting(make_web):
    dns = FakeDNS(
        {
            "metadata.example": [["169.254.169.254"]],
            "intranet.example": [["10.0.0.5"]],
            "mixed.example": [[PUBLIC_IP, "192.168.0.1"]],
            "mapped.example": [["::ffff:169.254.169.254"]],
            "cgnat.example": [["100.64.0.7"]],
            "v6ll.example": [["fe80::1"]],
            "ula.example": [["fd12::1"]],
        }
    )
    net = FakeNetwork({})
    web = make_web(resolver=dns, connector=net)
    for host in dns.answers:
        page, _ = web.read(f"http://{host}/latest/meta-data/")
        assert _refused(page), (host, page.error)
    page, _ = web.read("http://169.254.169.254/latest/meta-data/iam/security-credentials/")
    assert page.error == (
        "refused by the fetch policy: 169.254.169.254 is a link-local address (GLASSES_WEB_ALLOW lifts this)"
    )
    assert "mixed.example resolves to 192.168.0.1, a private address" in web.read("http://mixed.example/")[0].error
    assert net.calls == []


def test_dns_rebinding_cannot_swap_the_address_after_the_check(servers, make_web):
    public, _, _ = servers
    dns = FakeDNS({"rebind.example": [[PUBLIC_IP], ["127.0.0.1"]]})  # public when checked, loopback afterwards
    net = FakeNetwork({PUBLIC_IP: "127.0.0.1"})
    web = make_web(resolver=dns, connector=net)
    page, _ = web.read(f"http://rebind.example:{public.port}/pages/public")
    assert page.error is None and "harbour" in page.text
    assert dns.asked == ["rebind.example"] and net.calls == [PUBLIC_IP]  # resolved once, connected to what was vetted
    assert public.requests[0]["host"] == f"rebind.example:{public.port}"  # the Host header keeps the name
    # the next connection resolves again and now gets loopback: refused, never connected
    page, _ = web.read(f"http://rebind.example:{public.port}/secret")
    assert _refused(page) and "rebind.example resolves to 127.0.0.1" in page.error and net.calls == [PUBLIC_IP]


def test_the_connected_peer_address_is_checked(servers, make_web):
    public, _, _ = servers
    dns = FakeDNS({"site.example": [[PUBLIC_IP]]})
    web = make_web(resolver=dns, connector=FakeNetwork({PUBLIC_IP: "127.0.0.1"}, peer="169.254.169.254"))
    page, _ = web.read(f"http://site.example:{public.port}/pages/public")
    assert _refused(page) and "is connected to 169.254.169.254, a link-local address" in page.error
    assert public.requests == []  # the connection was closed before a request was sent


def test_allow_list_from_the_environment_and_the_config(monkeypatch, servers, make_web):
    monkeypatch.setenv("GLASSES_WEB_ALLOW", "127.0.0.1, 10.0.0.0/8,intranet.example")
    config = WebConfig.from_env()
    assert config.allow == ["127.0.0.1", "10.0.0.0/8", "intranet.example"]
    policy = FetchPolicy.from_allow(config.allow)
    assert policy.vet("x", 80, lambda h, p: ["10.1.2.3"]) and policy.vet(
        "intranet.example", 80, lambda h, p: ["192.168.1.1"]
    )
    with pytest.raises(RefusedURL, match="192.168.1.2, a private address"):
        policy.vet("other.example", 80, lambda h, p: ["192.168.1.2"])
    monkeypatch.setenv("GLASSES_WEB_ALLOW", "10.0.0.0/33")
    with pytest.raises(ValueError, match="GLASSES_WEB_ALLOW="):
        WebConfig.from_env()
    public, _, _ = servers
    assert make_web(allow=["127.0.0.0/30"]).read(public.url("/pages/public"))[0].error is None


def test_a_refused_url_is_a_clear_error_in_the_turn_trace(monkeypatch, servers, tmp_path):
    public, internal, _ = servers
    public.serp = {"organic_results": [{"position": 1, "title": "Ssrfa admin", "link": internal.url("/secret")}]}
    for k, v in {
        "SERPAPI_API_KEY": KEY,
        "SERPAPI_BASE_URL": public.base_url,
        "GLASSES_WEB_ALLOW": "127.0.0.1",
        "GLASSES_WEB_CACHE": str(tmp_path / "cache"),
        "GLASSES_WEB_TIMEOUT": "3",
    }.items():
        monkeypatch.setenv(k, v)
    open_web.reset_open_web()
    policy = ScriptedPolicy(
        [
            Decision(action="call_tool", tool="google_search", arguments={"query": "Ssrfa admin"}),
            Decision(action="call_tool", tool="read_webpage", arguments={"query": "admin password"}),
        ],
        AnswerDraft(answer="I don't know", confidence=0.0),
    )
    agent = make_agent(policy, self_check="off", tools={"profile": "superglasses"})
    try:
        trace = agent.run_turn(
            TurnInput(task=2, session_id="s", interaction_id="i", question="What is the admin password of Ssrfa?")
        )
        read = trace.tool_calls()[1]
        assert (
            read.tool == "read_webpage"
            and "refused by the fetch policy: 127.0.0.2 is a loopback address" in read.summary
        )
        assert "hunter2" not in trace.model_dump_json() and internal.requests == []
        assert open_web.get_open_web().stats()["pages"]["entries"] == 0
    finally:
        open_web.reset_open_web()


# ---------------------------------------------------------------------------------------------------------------
# 2. total deadline, cancellation, exit


def test_a_trickling_page_is_cut_at_the_total_deadline(servers, make_web):
    public, _, _ = servers
    web = make_web(allow=["127.0.0.1"], timeout_s=1.5)
    t0 = time.monotonic()
    page, _ = web.read(public.url("/trickle"))
    took = time.monotonic() - t0
    assert "total deadline of 1.5s" in page.error and 1.4 < took < 2.5
    _wait_for(lambda: public.disconnects, 1.5)  # the server sees the socket closed
    assert public.disconnects[0][1] - t0 < took + 1.0


@pytest.mark.parametrize("mode", ["trickle", "stall"])
def test_a_trickling_or_stalled_search_reply_is_cut(servers, mode):
    public, _, _ = servers
    public.serp = mode
    client = SerpApiClient(public.base_url, api_key=KEY, timeout_s=1.0, max_retries=0)
    t0 = time.monotonic()
    with pytest.raises(SerpApiError, match="total deadline of 1s"):
        client.google("slow")
    assert time.monotonic() - t0 < 1.6
    client.close()
    _wait_for(lambda: public.disconnects, 1.0)
    assert public.disconnects


def _wait_for(cond, timeout_s: float) -> None:
    end = time.monotonic() + timeout_s
    while not cond() and time.monotonic() < end:
        time.sleep(0.02)


def _sockets_to(port: int) -> list:
    return [c for c in psutil.Process().net_connections(kind="tcp") if c.raddr and c.raddr.port == port]


def test_the_turn_end_stops_the_fetch_within_a_second(servers, make_web):
    public, _, _ = servers
    web = make_web(allow=["127.0.0.1"], timeout_s=60.0)
    turn = CancelScope()
    t0 = time.monotonic()
    with pytest.raises(CallTimeout):
        run_with_deadline(lambda: web.read(public.url("/trickle")), 1.0, turn)
    turn.cancel()
    _wait_for(lambda: WORKERS.busy == 0 and public.disconnects, 1.0)
    assert WORKERS.busy == 0, "the abandoned fetch is still running"
    assert public.disconnects and public.disconnects[0][1] - t0 < 2.0
    assert _sockets_to(public.port) == []


def test_the_turn_end_stops_a_connect_that_never_completes(make_web):
    def never(ip, port, limit, options):
        while True:
            time.sleep(limit())

    web = make_web(resolver=FakeDNS({"slow.example": [[PUBLIC_IP]]}), connector=never, timeout_s=60.0)
    turn = CancelScope()
    with pytest.raises(CallTimeout):
        run_with_deadline(lambda: web.read("http://slow.example/"), 0.5, turn)
    _wait_for(lambda: WORKERS.busy == 0, 1.0)
    assert WORKERS.busy == 0
    done = CancelScope()
    done.cancel()
    with scope(done), pytest.raises(Cancelled):
        web.read("http://slow.example/")


EXIT_SCRIPT = textwrap.dedent("""
    import time
    from glasses_rag.core.calls import CallTimeout, CancelScope, exit_process, run_with_deadline
    from glasses_rag.testing.hostile_web import HostileWeb
    from glasses_rag.web.config import WebConfig
    from glasses_rag.web.open_web import OpenWeb
    with HostileWeb("127.0.0.1") as srv:
        web = OpenWeb(WebConfig(cache_dir=r"{cache}", allow=["127.0.0.1"], timeout_s=60))
        try:
            run_with_deadline(lambda: web.read(srv.url("/trickle")), 1.0, CancelScope())
        except CallTimeout:
            print("turn over", time.monotonic(), flush=True)
    exit_process(0, timeout_s=30.0)
""")


def test_the_process_exits_promptly_after_a_turn_with_a_hung_fetch(tmp_path):
    script = EXIT_SCRIPT.format(cache=tmp_path / "cache")
    p = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={**__import__("os").environ, "PYTHONPATH": str(ROOT)},
    )
    end = time.monotonic()
    assert p.returncode == 0, p.stderr[-2000:]
    turn_over = float(p.stdout.split("turn over", 1)[1].split()[0])
    assert end - turn_over < 5.0, f"exit took {end - turn_over:.1f}s"  # it took 30 s: the fetch thread never ended
    assert "still running" not in p.stderr


# ---------------------------------------------------------------------------------------------------------------
# 3. parser CPU bomb


def _busy_children() -> list[psutil.Process]:
    out = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.cpu_percent(interval=0.2) > 20:
                out.append(child)
        except psutil.NoSuchProcess:
            pass
    return out


def test_the_parser_bomb_is_cut_at_the_extraction_time_limit(servers, make_web):
    public, _, _ = servers
    web = make_web(allow=["127.0.0.1"], extract_timeout_s=2.0)
    t0 = time.monotonic()
    page, _ = web.read(public.url("/bomb", kb=2048))
    took = time.monotonic() - t0
    assert page.error.startswith("ExtractionTimeout") and page.truncated and took < 4.0
    assert _busy_children() == []
    assert "Ssrfa" in web.read(public.url("/pages/public"))[0].text  # a fresh worker serves the next page


def test_the_turn_end_kills_the_extraction_worker(servers, make_web):
    public, _, _ = servers
    web = make_web(allow=["127.0.0.1"], extract_timeout_s=60.0)
    turn = CancelScope()
    with pytest.raises(CallTimeout):
        run_with_deadline(lambda: web.read(public.url("/bomb", kb=2048)), 2.0, turn)
    _wait_for(lambda: WORKERS.busy == 0, 1.0)
    assert WORKERS.busy == 0 and _busy_children() == []


def test_the_html_handed_to_the_extractor_is_capped(servers, make_web):
    public, _, _ = servers
    filler = "".join(f"<p>Filler paragraph number {i} of the page says nothing at all.</p>" for i in range(200))
    public.pages["long"] = (
        "text/html",
        f"<html><body>{filler}<p>The hidden fact sits at the end.</p></body></html>".encode(),
    )
    capped = make_web(allow=["127.0.0.1"], max_html_bytes=4096).read(public.url("/pages/long"))[0]
    assert capped.truncated and "Filler paragraph number 3 " in capped.text and "hidden fact" not in capped.text
    assert "hidden fact" in make_web(allow=["127.0.0.1"]).read(public.url("/pages/long"))[0].text


# ---------------------------------------------------------------------------------------------------------------
# 4. the API key never reaches a log


def test_the_api_key_is_redacted_from_every_log_line(servers, caplog):
    public, _, _ = servers
    public.serp = lambda params: {"error": f"Invalid API key {params.get('api_key')}; url ?api_key={params['api_key']}"}
    caplog.set_level(logging.DEBUG)
    client = SerpApiClient(public.base_url, api_key=KEY, max_retries=0)
    with pytest.raises(SerpApiError) as e:
        client.google("who is there")
    public.serp = {"organic_results": [{"position": 1, "title": "T", "link": "https://example.org/t"}]}
    client.google("who is there")
    client.close()
    assert "HTTP Request: GET" in caplog.text and "api_key=***" in caplog.text  # httpx's own INFO line, redacted
    assert any(r.name.startswith("httpcore") for r in caplog.records)  # DEBUG lines were captured too
    assert KEY not in caplog.text and KEY not in str(e.value)


# ---------------------------------------------------------------------------------------------------------------
# 6. search replies: bytes, items, malformed items


@pytest.mark.parametrize("reply", ["million_results", "200mb_snippet"])
def test_a_huge_search_reply_is_refused_at_the_byte_cap(servers, reply):
    public, _, _ = servers
    public.serp = (lambda p: huge_results(1_000_000)) if reply == "million_results" else (lambda p: huge_snippet(200))
    client = SerpApiClient(public.base_url, api_key=KEY, max_retries=0, max_bytes=2_000_000)
    tracemalloc.start()
    try:
        with pytest.raises(SerpApiError, match="more than 2000000 bytes"):
            client.google("big")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        client.close()
    assert peak < 12_000_000, f"peak {peak / 1e6:.1f} MB"  # it was +813 MB / +760 MB RSS


def test_search_replies_are_capped_in_items_and_field_sizes():
    data = {
        "organic_results": [
            {"position": i + 1, "title": "t" * 5000, "link": f"https://example.org/{i}", "snippet": "s" * 50_000}
            for i in range(150)
        ]
    }
    got = web_results(data, k=200, max_items=100)
    assert len(got.results) == 100 and got.notes == ["organic_results: only the first 100 of 150 items read"]
    assert len(got.results[0]["title"]) == 300 and len(got.results[0]["snippet"]) == 2000


def test_a_malformed_item_is_skipped_with_a_note_naming_it(servers, monkeypatch, tmp_path):
    data = {
        "answer_box": {"answer": ["not", "text"]},
        "organic_results": [
            {"position": "abc", "title": "Bad", "link": "https://example.org/bad"},
            {"position": 2, "title": "Good", "link": "https://example.org/good"},
            {"position": 3, "title": "No link"},
            {"position": 4, "title": "JS", "link": "javascript:x"},
            "not an object",
            {"position": 6, "title": {"x": 1}, "link": "https://example.org/t"},
        ],
    }
    got = web_results(data, k=5)
    assert [r["url"] for r in got.results] == ["https://example.org/good"]
    assert got.notes[0].startswith("answer_box skipped: answer:")
    assert got.notes[1].startswith("organic_results[0] skipped: position: Input should be a valid integer")
    assert [n.split(" skipped")[0] for n in got.notes[2:]] == [f"organic_results[{i}]" for i in (2, 3, 4, 5)]
    from sg_support import FixtureWeb, use_fixture_web

    from tools import default_registry
    from tools.base import ToolContext

    with FixtureWeb() as fixture:
        fixture.web["bad item"] = data
        use_fixture_web(monkeypatch, fixture, tmp_path / "cache")
        out = default_registry().get("google_search").fn(ToolContext(task=2, question="q"), query="bad item")
        open_web.reset_open_web()
    assert [h.url for h in out.update["evidence"]] == ["https://example.org/good"]
    assert "organic_results[0] skipped: position" in out.summary


def test_search_results_and_notes_come_back_from_the_cache(servers, make_web, monkeypatch):
    public, _, _ = servers
    public.serp = {
        "organic_results": [
            {"position": 1, "title": "A", "link": "https://example.org/a"},
            {"position": "x", "link": "https://example.org/b"},
        ]
    }
    monkeypatch.setenv("SERPAPI_API_KEY", KEY)
    web = make_web(serpapi_base_url=public.base_url)
    reply, cached = web.web_search("a", k=3)
    again, cached_again = web.web_search("a", k=3)
    assert (
        again.notes
        and not cached
        and cached_again
        and again == reply
        and json.loads(again.model_dump_json())["results"][0]["url"]
    )


def test_the_run_header_names_the_fetch_policy(monkeypatch):
    from glasses_rag.superglasses.evaluate import open_web_line

    monkeypatch.delenv("GLASSES_WEB_ALLOW", raising=False)
    assert "pages: public addresses only, 15s per request" in open_web_line()
    monkeypatch.setenv("GLASSES_WEB_ALLOW", "127.0.0.1,10.0.0.0/8")
    assert "public addresses only + GLASSES_WEB_ALLOW 127.0.0.1,10.0.0.0/8" in open_web_line()
    monkeypatch.setenv("GLASSES_WEB_ALLOW", "not a host/99")
    assert open_web_line().startswith("open-web settings invalid: GLASSES_WEB_ALLOW='not a host/99'")


# ---------------------------------------------------------------------------------------------------------------
# HTTPS through the guarded transport


@pytest.fixture(scope="module")
def tls():
    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("site.example").configure_cert(server)
    client = ssl.create_default_context()
    ca.configure_trust(client)
    return server, client


def test_https_keeps_the_host_name_for_sni_and_the_certificate_check(tls):
    server_ctx, client_ctx = tls
    with HostileWeb("127.0.0.1", ssl_context=server_ctx) as site:
        site.pages["public"] = ("text/html", b"<p>The harbour of Ssrfa.</p>")
        dns = FakeDNS({"site.example": [[PUBLIC_IP]], "other.example": [[PUBLIC_IP]]})
        client = guarded_client(
            FetchPolicy(), timeout_s=3, resolver=dns, connector=FakeNetwork({PUBLIC_IP: "127.0.0.1"}), verify=client_ctx
        )
        got = fetch(f"https://site.example:{site.port}/pages/public", client, 100_000, 3.0)
        assert b"harbour" in got.body and site.requests[0]["host"] == f"site.example:{site.port}"
        with pytest.raises(httpx.ConnectError, match="certificate|hostname|TLS"):
            fetch(f"https://other.example:{site.port}/pages/public", client, 100_000, 3.0)  # cert is for site.example
        client.close()


def test_a_tls_handshake_that_never_comes_is_cut_at_the_deadline(tls):
    _, client_ctx = tls
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # the kernel accepts the TCP connection; nobody ever speaks TLS
    port = silent.getsockname()[1]
    client = guarded_client(
        FetchPolicy.from_allow(["127.0.0.1"]), timeout_s=1.0, connector=loopback_only, verify=client_ctx
    )
    t0 = time.monotonic()
    with pytest.raises(httpx.TimeoutException, match="total deadline of 1s"):
        fetch(f"https://127.0.0.1:{port}/", client, 1000, 1.0)
    assert time.monotonic() - t0 < 1.5
    client.close()
    silent.close()


# ---------------------------------------------------------------------------------------------------------------
# what the audit found holding already, kept by tests


def test_endless_and_inflating_pages_are_cut_at_the_download_bound(servers, make_web):
    public, _, _ = servers
    web = make_web(allow=["127.0.0.1"], max_page_bytes=256 * 1024)
    tracemalloc.start()
    try:
        endless, _ = web.read(public.url("/endless"))
        bomb, _ = web.read(public.url("/gzip-bomb", mb=100))  # 100 MiB of zeros in ~100 KB
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert endless.truncated and endless.error is None and endless.text.startswith("a")
    assert bomb.truncated and bomb.error == "no main text found"
    assert peak < 8 * 2**20, f"peak {peak / 2**20:.1f} MiB"  # httpx's own decoder inflates 64 KB reads whole
    other = web.read(public.url("/gzip-bomb", mb=1, encoding="br"))[0]
    assert "DecodingError: unsupported content encoding 'br'" in other.error


def test_other_schemes_and_non_pages_are_refused(servers, make_web):
    public, _, _ = servers
    public.pages["bin"] = ("application/octet-stream", b"\x7fELF" + bytes(1000))
    web = make_web(allow=["127.0.0.1"])
    for url in (
        "file:///etc/passwd",
        "gopher://127.0.0.1:70/_GET",
        "ftp://example.org/x",
        "javascript:alert(1)",
        "data:text/html,<p>hi</p>",
    ):
        assert "not an http(s) url" in web.read(url)[0].error
    assert web.read(public.url("/pages/bin"))[0].error == "ValueError: not a web page (application/octet-stream)"


def test_pdfs_and_deeply_nested_pages_end_in_a_clear_error(servers, make_web):
    """Passed items of the audit, held here: a PDF is not read as a page; 60,000 nested tags (1.2 MB) are cut at
    the HTML cap and extracted within the time limit, with an error, not a hang or a crash."""
    public, _, _ = servers
    public.pages["pdf"] = ("application/pdf", b"%PDF-1.7\n" + bytes(2000))
    public.pages["nested"] = (
        "text/html",
        b"<html><body>" + b"<div><span>" * 60_000 + b"deep text" + b"</span></div>" * 60_000 + b"</body></html>",
    )
    web = make_web(allow=["127.0.0.1"], timeout_s=5.0)
    assert web.read(public.url("/pages/pdf"))[0].error == "ValueError: not a web page (application/pdf)"
    t0 = time.monotonic()
    nested, _ = web.read(public.url("/pages/nested"))
    assert nested.truncated and nested.error == "no main text found" and time.monotonic() - t0 < 10


@pytest.mark.parametrize(
    "reply,expect",
    [
        (("status", 429), "gave up after 2 attempts"),
        (("raw", b"<html>rate limited</html>"), "non-JSON"),
        (("raw", b"[1, 2]"), "not an object"),
    ],
)
def test_search_api_rate_limits_and_junk_are_clear_errors(servers, reply, expect):
    public, _, _ = servers
    kind, value = reply
    public.serp = value if kind == "raw" else (lambda p: {"error": "Too many requests"})
    if kind == "status":
        public.serp_status = value
    client = SerpApiClient(public.base_url, api_key=KEY, max_retries=1, retry_wait_s=0.01)
    with pytest.raises(SerpApiError, match=expect):
        client.google("x")
    client.close()


TWO_WRITERS = textwrap.dedent("""
    import sys
    from glasses_rag.web.web_cache import WebCache
    cache = WebCache(sys.argv[1])
    me = sys.argv[2]
    for i in range(150):
        cache.page(f"https://example.org/{me}/{i}", lambda: {"url": me, "text": "x" * 500})
        cache.page(f"https://example.org/shared/{i % 10}", lambda: {"url": "shared", "text": me})
    print(cache.stats()["pages"]["entries"])
""")


def test_two_processes_share_one_cache(tmp_path):
    env = {**__import__("os").environ, "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", TWO_WRITERS, str(tmp_path), name],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env=env,
        )
        for name in ("a", "b")
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-1000:] for o in outs]
    from glasses_rag.web.web_cache import WebCache

    cache = WebCache(tmp_path)
    assert cache.stats()["pages"]["entries"] == 310
    assert not list(tmp_path.glob("*.damaged-*"))
