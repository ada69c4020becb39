"""glasses_rag.retrieval.cache.CachedSearch: identical results, copies, LRU bound, counters, thread safety,
forwarding."""

import threading

import numpy as np
import pytest
from PIL import Image

from glasses_rag.retrieval.cache import CachedSearch, image_key
from glasses_rag.retrieval.schema import ImageSearchResult, SearchBackend, WebSearchResult


class CountingBackend:
    """A fake backend that counts calls and returns fresh lists of dicts."""

    name = "fake"

    def __init__(self):
        self.calls = {"web": 0, "image": 0, "page": 0}
        self.lock = threading.Lock()

    def _count(self, kind):
        with self.lock:
            self.calls[kind] += 1

    def web_search(self, query, k=5):
        self._count("web")
        return [
            {
                "index": f"u{i}_chunk_0",
                "score": 1.0 - i / 10,
                "page_name": f"{query} {i}",
                "page_snippet": "s",
                "page_url": f"https://x/{i}",
            }
            for i in range(k)
        ]

    def image_search(self, image, k=5):
        self._count("image")
        m = float(np.asarray(image.convert("L")).mean())
        return [
            {
                "index": i,
                "score": m / 255,
                "url": f"https://img/{i}",
                "entities": [{"entity_name": f"e{i}", "entity_attributes": {"a": [1, 2]}}],
            }
            for i in range(k)
        ]

    def get_page(self, url):
        self._count("page")
        return None if url.endswith("missing") else f"content of {url}"

    def get_entity(self, name):
        return {"name": name}


class NoPages:
    name = "nopages"

    def web_search(self, query, k=5):
        return []

    def image_search(self, image, k=5):
        return []


class Flaky(CountingBackend):
    def __init__(self):
        super().__init__()
        self.fail = True

    def web_search(self, query, k=5):
        self._count("web")
        if self.fail:
            raise RuntimeError("backend down")
        return [{"index": 0, "score": 0.5, "page_name": "p", "page_snippet": "s", "page_url": "u"}]


def test_name_protocol_and_forwarding():
    c = CachedSearch(CountingBackend())
    assert c.name == "cached(fake)"
    assert isinstance(c, SearchBackend)
    assert c.get_entity("x") == {"name": "x"}  # forwarded
    assert callable(getattr(c, "get_page", None))
    n = CachedSearch(NoPages())
    assert getattr(n, "get_page", None) is None and not hasattr(n, "get_page")
    with pytest.raises(AttributeError):
        _ = n.not_there
    assert CachedSearch(c).backend is c.backend  # no double wrapping


def test_web_level_hits_on_normalised_query_and_k():
    b = CountingBackend()
    c = CachedSearch(b)
    r1 = c.web_search("falcon 9  engines", k=3)
    r2 = c.web_search("  falcon 9 engines ", k=3)
    assert r1 == r2 and b.calls["web"] == 1
    c.web_search("falcon 9 engines", k=4)  # a different k is a different entry
    c.web_search("Falcon 9 engines", k=3)  # case is kept by default
    assert b.calls["web"] == 3
    s = c.stats()["web"]
    assert (s["hits"], s["misses"], s["size"]) == (1, 3, 3)
    assert s["hit_rate"] == 0.25
    cf = CachedSearch(CountingBackend(), casefold=True)
    cf.web_search("Falcon", k=1)
    cf.web_search("falcon", k=1)
    assert cf.backend.calls["web"] == 1


def test_image_level_keys_on_pixel_bytes_not_object_identity():
    b = CountingBackend()
    c = CachedSearch(b)
    a = Image.new("RGB", (8, 8), (10, 20, 30))
    same = Image.new("RGB", (8, 8), (10, 20, 30))
    other = Image.new("RGB", (8, 8), (10, 20, 31))
    assert image_key(a) == image_key(same) != image_key(other)
    assert image_key(a) != image_key(a.convert("L"))
    assert c.image_search(a, k=2) == c.image_search(same, k=2)
    assert b.calls["image"] == 1
    c.image_search(other, k=2)
    assert b.calls["image"] == 2
    arr = np.zeros((4, 4), dtype=np.float32)
    assert image_key(arr) == image_key(arr.copy()) != image_key(arr.astype(np.float64))
    assert image_key(object()) is None


def test_results_are_copies_callers_cannot_mutate_the_cache():
    c = CachedSearch(CountingBackend())
    img = Image.new("RGB", (4, 4))
    first = c.web_search("q", k=2)
    first[0]["score"] = -99
    first.append({"junk": True})
    again = c.web_search("q", k=2)
    assert again[0]["score"] == 1.0 and len(again) == 2
    again[1]["page_name"] = "changed"
    assert c.web_search("q", k=2)[1]["page_name"] == "q 1"
    hit = c.image_search(img, k=1)
    hit[0]["entities"][0]["entity_attributes"]["a"].append(3)
    assert c.image_search(img, k=1)[0]["entities"][0]["entity_attributes"]["a"] == [1, 2]


def test_page_level_and_none_pages():
    b = CountingBackend()
    c = CachedSearch(b)
    assert c.get_page("https://x/1") == "content of https://x/1"
    assert c.get_page("https://x/1") == "content of https://x/1"
    assert c.get_page("https://x/missing") is None
    assert c.get_page("https://x/missing") is None
    assert b.calls["page"] == 2
    p = c.stats()["page"]
    assert (p["hits"], p["misses"]) == (2, 2)


def test_lru_is_bounded_and_evicts_least_recently_used():
    b = CountingBackend()
    c = CachedSearch(b, max_entries=2)
    c.web_search("a", k=1)
    c.web_search("b", k=1)
    c.web_search("a", k=1)  # a is now most recent
    c.web_search("c", k=1)  # evicts b
    assert b.calls["web"] == 3
    c.web_search("a", k=1)
    assert b.calls["web"] == 3
    c.web_search("b", k=1)
    assert b.calls["web"] == 4
    s = c.stats()["web"]
    assert s["size"] == 2 and s["evictions"] == 2
    z = CachedSearch(CountingBackend(), max_entries=0)  # a zero bound caches nothing but still works
    z.web_search("a", k=1), z.web_search("a", k=1)
    assert z.backend.calls["web"] == 2


def test_exceptions_and_junk_are_not_cached():
    f = Flaky()
    c = CachedSearch(f)
    with pytest.raises(RuntimeError):
        c.web_search("q")
    f.fail = False
    assert c.web_search("q")[0]["page_url"] == "u"
    assert c.web_search("q")[0]["page_url"] == "u"
    assert f.calls["web"] == 2

    class Junk(NoPages):
        def web_search(self, query, k=5):
            return None

    j = CachedSearch(Junk())
    assert j.web_search("q") is None and j.web_search("q") is None
    assert j.stats()["web"]["size"] == 0
    assert j.web_search(None) is None  # an unhashable/odd query passes straight through
    assert j.stats()["web"]["uncacheable"] == 1


def test_thread_safety_under_concurrent_use():
    b = CountingBackend()
    c = CachedSearch(b, max_entries=8)
    errors = []

    def worker(i):
        try:
            for j in range(200):
                q = f"q{(i + j) % 12}"
                r = c.web_search(q, k=2)
                assert r[0]["page_name"] == f"{q} 0"
                r[0]["page_name"] = "mutated"
                assert c.get_page(f"https://x/{j % 5}") == f"content of https://x/{j % 5}"
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    s = c.stats()
    assert s["web"]["hits"] + s["web"]["misses"] == 8 * 200
    assert s["web"]["size"] <= 8 and s["page"]["size"] == 5
    assert s["total"]["hits"] + s["total"]["misses"] == 8 * 200 * 2


def test_identical_to_the_uncached_demo_index():
    from glasses_rag.crag_mm.demo import make_demo_search

    base = make_demo_search()
    c = CachedSearch(base)
    assert c.name == f"cached({base.name})"
    img = Image.open(base.root / base.kg[0]["image_file"]).convert("RGB")
    for _ in range(2):
        got = c.image_search(img, k=3)
        assert got == base.image_search(img, k=3)
        for r in got:
            ImageSearchResult.model_validate(r)
    for q in ["falcon 9 engines", "Eileen Collins first mission", "how long do cats sleep"]:
        for _ in range(2):
            got = c.web_search(q, k=4)
            assert got == base.web_search(q, k=4)
            for r in got:
                WebSearchResult.model_validate(r)
                assert c.get_page(r["page_url"]) == base.get_page(r["page_url"])
    s = c.stats()
    assert s["image"]["hits"] == 1 and s["web"]["hits"] == 3 and s["page"]["hits"] > 0


def test_cached_backend_through_the_web_search_tool():
    from glasses_rag.crag_mm.demo import make_demo_search
    from glasses_rag.models.resources import Resources
    from tools import default_registry
    from tools.base import ToolContext

    reg = default_registry()
    base = make_demo_search()
    t = reg.get("web_search")
    outs = []
    for search in (base, CachedSearch(base), CachedSearch(base)):
        ctx = ToolContext(task=2, question="q", resources=Resources(search))
        outs.append(t.run(ctx, t.args_model(query="zephyr lemon price", k=3)))
    assert outs[0].update["evidence"] == outs[1].update["evidence"] == outs[2].update["evidence"]
    assert all(h.content for h in outs[1].update["evidence"])  # level-2 pages flowed through get_page
    assert outs[1].method == f"cached({base.name})"
