"""The open-web attacks of issue 20, each in a fresh process against hostile servers on loopback: what happened,
how long it took, the peak memory it cost, and what was still running afterwards.

    python -m benchmarks.web_attacks                 # every attack
    python -m benchmarks.web_attacks --only trickle bomb --json out.json

Each attack runs as `python -m benchmarks.web_attacks --one NAME` under a wall-clock limit (a hang shows as
"killed at the limit"). Figures: `seconds` (the attacked call), `peak_rss_mb` (the child's peak RSS above its
RSS after imports), `busy_after` (worker threads still running 1.5 s after the call returned), `cpu_after_s` (CPU
the process burned in the 2 s after the call returned), `exit_s` (from the call's return to the process's exit,
through glasses_rag.core.calls.exit_process as the CLI exits), `outcome` (what the caller saw). Nothing leaves the
machine: the "public" server is on 127.0.0.1 (allow-listed with GLASSES_WEB_ALLOW), the internal one on 127.0.0.2 and
::1.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
LIMIT_S = 150.0
KEY = "sk-SECRET-0123456789"


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _env(public: Any, tmp: Path, allow: str | None) -> None:
    os.environ.update(
        {
            "SERPAPI_API_KEY": KEY,
            "SERPAPI_BASE_URL": public.base_url,
            "GLASSES_WEB_CACHE": str(tmp / "cache"),
            "GLASSES_WEB_TIMEOUT": "3",
        }
    )
    if allow:
        os.environ["GLASSES_WEB_ALLOW"] = allow


def _read(url: str) -> str:
    from glasses_rag.web.open_web import get_open_web

    page, _ = get_open_web().read(url)
    if "hunter2" in page.text:
        return "LEAKED hunter2"
    return page.error or f"read {len(page.text)} chars"


def attack_ssrf_default(public: Any, internal: Any, v6: Any) -> dict[str, Any]:
    """No allow-list: loopback in its spellings, and ::1."""
    port = public.port
    urls = [
        f"http://127.0.0.1:{port}/secret",
        f"http://localhost:{port}/secret",
        f"http://2130706433:{port}/secret",
        f"http://0x7f.1:{port}/secret",
        f"http://[::ffff:127.0.0.1]:{port}/secret",
        v6.url("/secret"),
    ]
    return {u: _read(u) for u in urls}


def attack_ssrf_redirect(public: Any, internal: Any, v6: Any) -> dict[str, Any]:
    """127.0.0.1 allow-listed (the "public" site): links and redirects to 127.0.0.2 (internal)."""
    os.environ["GLASSES_WEB_ALLOW"] = "127.0.0.1"
    urls = [
        internal.url("/secret"),
        f"http://2130706434:{internal.port}/secret",
        public.url("/redirect", to=internal.url("/secret")),
        public.url("/redirect", to=public.url("/redirect", to=internal.url("/secret"))),
    ]
    return {u: _read(u) for u in urls}


def attack_trickle(public: Any, internal: Any, v6: Any) -> str:
    return _read(public.url("/trickle"))


def attack_bomb(public: Any, internal: Any, v6: Any) -> str:
    return _read(public.url("/bomb", kb=2048))


def _in_turn(fn: Any, budget_s: float) -> str:
    from glasses_rag.core.calls import CallTimeout, CancelScope, run_with_deadline

    turn = CancelScope()
    try:
        return str(run_with_deadline(fn, budget_s, turn))[:200]
    except CallTimeout as e:
        return f"turn budget hit: {e}"
    finally:
        turn.cancel()


def attack_trickle_turn(public: Any, internal: Any, v6: Any) -> str:
    """A 2 s turn budget around a 1-byte/s page (timeout 3 s per request)."""
    return _in_turn(lambda: _read(public.url("/trickle")), 2.0)


def attack_bomb_turn(public: Any, internal: Any, v6: Any) -> str:
    return _in_turn(lambda: _read(public.url("/bomb", kb=2048)), 3.0)


def _search(query: str) -> str:
    from glasses_rag.web.open_web import get_open_web

    try:
        results = get_open_web().web_search(query, k=5)[0]
    except Exception as e:  # noqa: BLE001 - the outcome is what is measured
        return f"{type(e).__name__}: {e}"[:300]
    items = getattr(results, "results", results)  # a SearchResults since issue 20, a plain list before
    return f"{len(items)} result(s), longest snippet {max((len(r.get('snippet') or '') for r in items), default=0)}"


def attack_serp_million(public: Any, internal: Any, v6: Any) -> str:
    from glasses_rag.testing.hostile_web import huge_results

    public.serp = lambda params: huge_results(1_000_000)
    return _search("million")


def attack_serp_snippet(public: Any, internal: Any, v6: Any) -> str:
    from glasses_rag.testing.hostile_web import huge_snippet

    public.serp = lambda params: huge_snippet(200)
    out = _search("snippet")
    size = sum(f.stat().st_size for f in Path(os.environ["GLASSES_WEB_CACHE"]).rglob("*") if f.is_file())
    return f"{out}; cache folder {size / 1e6:.1f} MB"


def attack_serp_trickle(public: Any, internal: Any, v6: Any) -> str:
    public.serp = "trickle"
    return _search("trickle")


def attack_serp_bad_item(public: Any, internal: Any, v6: Any) -> str:
    public.serp = {
        "organic_results": [
            {"position": "abc", "title": "Bad", "link": "https://example.org/bad"},
            {"position": 2, "title": "Good", "link": "https://example.org/good"},
        ]
    }
    return _search("bad item")


def attack_key_in_logs(public: Any, internal: Any, v6: Any) -> str:
    import io

    buf = io.StringIO()
    logging.basicConfig(level=logging.DEBUG, stream=buf, force=True)  # what `-v` did: every library at DEBUG
    public.serp = {"organic_results": [{"position": 1, "title": "T", "link": "https://example.org/t"}]}
    _search("logged")
    text = buf.getvalue()
    return f"key in log {text.count(KEY)} time(s) ({len(text.splitlines())} log lines)"


def extraction_overhead(repeat: int = 20) -> dict[str, Any]:
    """Text extraction of ordinary pages in this process vs in the worker process (cold start, then warm)."""
    from glasses_rag.web.extraction import Extractor
    from glasses_rag.web.page_text import page_text

    sentences = [f"Sentence number {i} tells the reader something about the harbour of Ssrfa." for i in range(1500)]
    pages = {
        "small_2kb": "<html><body><article>"
        + "".join(f"<p>{s}</p>" for s in sentences[:20])
        + "</article></body></html>",
        "article_120kb": "<html><body><article>"
        + "".join(f"<p>{s}</p>" for s in sentences)
        + "</article></body></html>",
    }
    out: dict[str, Any] = {}
    ex = Extractor(1)
    t0 = time.perf_counter()
    ex.run(pages["small_2kb"], None, 60)
    out["worker_cold_start_ms"] = round(1000 * (time.perf_counter() - t0), 1)
    for name, html in pages.items():
        page_text(html)  # warm the in-process imports
        t0 = time.perf_counter()
        for _ in range(repeat):
            page_text(html)
        inproc = (time.perf_counter() - t0) / repeat
        t0 = time.perf_counter()
        for _ in range(repeat):
            ex.run(html, None, 60)
        worker = (time.perf_counter() - t0) / repeat
        out[name] = {
            "in_process_ms": round(1000 * inproc, 2),
            "worker_ms": round(1000 * worker, 2),
            "overhead_ms": round(1000 * (worker - inproc), 2),
        }
    ex.close()
    return out


ATTACKS = {name[len("attack_") :]: fn for name, fn in globals().items() if name.startswith("attack_")}


def run_one(name: str) -> None:
    from glasses_rag.core.calls import WORKERS, exit_process
    from glasses_rag.testing.hostile_web import HostileWeb

    with (
        tempfile.TemporaryDirectory() as tmp,
        HostileWeb("127.0.0.1") as public,
        HostileWeb("127.0.0.2") as internal,
        HostileWeb("::1") as v6,
    ):
        _env(public, Path(tmp), "127.0.0.1" if name not in ("ssrf_default",) else None)
        import glasses_rag.web.open_web  # noqa: F401 - imports before the baseline

        rss0, t0 = _rss_mb(), time.perf_counter()
        outcome = ATTACKS[name](public, internal, v6)
        seconds = time.perf_counter() - t0
        cpu0 = _cpu_s()
        time.sleep(1.5)
        busy = WORKERS.busy
        time.sleep(0.5)
        cpu_after = _cpu_s() - cpu0
        cut = [round(t - t0 - seconds, 2) for _, t in public.disconnects]
        result = {
            "attack": name,
            "outcome": outcome,
            "seconds": round(seconds, 2),
            "peak_rss_mb": round(_rss_mb() - rss0, 1),
            "busy_after": busy,
            "cpu_after_s": round(cpu_after, 2),
            "server_saw_close_after_return_s": cut[:3],
        }
    print(json.dumps(result), flush=True)
    print(json.dumps({"exit_started": time.time()}), flush=True)
    exit_process(0, timeout_s=30.0)


def run_all(names: list[str], limit_s: float) -> list[dict[str, Any]]:
    out = []
    for name in names:
        t0 = time.perf_counter()
        cmd = [sys.executable, "-m", "benchmarks.web_attacks", "--one", name]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=limit_s, cwd=ROOT, env=env)
            lines = [json.loads(x) for x in p.stdout.splitlines() if x.startswith("{")]
            res = next(
                (x for x in lines if "attack" in x), {"attack": name, "outcome": f"no result: {p.stderr[-500:]}"}
            )
            res["process_s"] = round(time.perf_counter() - t0, 2)
            started = next((x["exit_started"] for x in lines if "exit_started" in x), None)
            res["exit_s"] = round(time.time() - started, 2) if started else None
        except subprocess.TimeoutExpired:
            res = {"attack": name, "outcome": f"killed at the {limit_s:g}s limit", "process_s": limit_s}
        print(json.dumps(res), flush=True)
        out.append(res)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--one", help=argparse.SUPPRESS)
    p.add_argument("--only", nargs="*", choices=sorted(ATTACKS), help="attacks to run (default: all)")
    p.add_argument("--limit", type=float, default=LIMIT_S, help="wall-clock limit per attack (s)")
    p.add_argument("--json", type=Path, help="also write the results here")
    p.add_argument("--overhead", action="store_true", help="only measure the extraction worker's overhead")
    args = p.parse_args(argv)
    if args.overhead:
        print(json.dumps(extraction_overhead(), indent=2))
        return 0
    if args.one:
        run_one(args.one)
        return 0
    results = run_all(args.only or sorted(ATTACKS), args.limit)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
