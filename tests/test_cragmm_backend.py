"""Round trip through the REAL cragmm_search.UnifiedSearchPipeline on a tiny index in the official layout.

Models are tiny, randomly initialised and saved to tmp_path: nothing is downloaded.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

pytest.importorskip("cragmm_search")
pytest.importorskip("chromadb")

from glasses_rag.retrieval.cragmm_backend import CragMMSearch, build_cragmm_index, offline_snapshot_download  # noqa: E402
from glasses_rag.retrieval.schema import ImageSearchResult, SearchBackend, WebSearchResult  # noqa: E402


def _bytes_to_unicode() -> list[str]:
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for c in cs]


def _tiny_clip(path):
    import torch
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPProcessor, CLIPTokenizer

    chars = _bytes_to_unicode()
    vocab = {}
    for c in chars:
        vocab[c] = len(vocab)
    for c in chars:
        vocab[c + "</w>"] = len(vocab)
    for s in ("<|startoftext|>", "<|endoftext|>"):
        vocab[s] = len(vocab)
    tokdir = path / "tok_src"
    tokdir.mkdir()
    (tokdir / "vocab.json").write_text(json.dumps(vocab))
    (tokdir / "merges.txt").write_text("#version: 0.2\n")
    tokenizer = CLIPTokenizer(str(tokdir / "vocab.json"), str(tokdir / "merges.txt"))
    image_processor = CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
    processor = CLIPProcessor(image_processor=image_processor, tokenizer=tokenizer)
    cfg = CLIPConfig(
        text_config=dict(
            vocab_size=len(vocab),
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            max_position_embeddings=32,
        ),
        vision_config=dict(
            image_size=32,
            patch_size=8,
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
        ),
        projection_dim=16,
    )
    torch.manual_seed(0)
    model = CLIPModel(cfg)
    out = path / "clip"
    model.save_pretrained(out)
    processor.save_pretrained(out)
    return out


def _tiny_bert(path):
    import torch
    from transformers import BertConfig, BertModel, BertTokenizer

    words = "eiffel tower paris france louvre museum golden gate bridge san francisco height meters tall art".split()
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words
    src = path / "bert_src"
    src.mkdir()
    (src / "vocab.txt").write_text("\n".join(vocab) + "\n")
    tok = BertTokenizer(str(src / "vocab.txt"))
    torch.manual_seed(0)
    model = BertModel(
        BertConfig(
            vocab_size=len(vocab),
            hidden_size=16,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=32,
            max_position_embeddings=512,
        )
    )
    out = path / "bert"
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def _images():
    rng = np.random.default_rng(0)
    imgs = [Image.fromarray(rng.integers(0, 255, (40, 40, 3), dtype=np.uint8)) for _ in range(3)]
    imgs.append(Image.new("RGB", (40, 40), (250, 10, 10)))
    return imgs


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cragmm")
    clip = _tiny_clip(tmp)
    bert = _tiny_bert(tmp)
    imgs = _images()
    image_items = [
        {
            "image": imgs[0],
            "image_url": "https://example.org/eiffel.jpg",
            "entities": [{"entity_name": "Eiffel Tower", "entity_attributes": {"height": "330 m", "city": "Paris"}}],
        },
        {
            "image": imgs[1],
            "image_url": "https://example.org/louvre.jpg",
            "entities": ["Louvre"],
            "info": {"Louvre": {"type": "museum"}},
        },
        {
            "image": imgs[2],
            "image_url": "https://example.org/ggb.jpg",
            "entities": [
                {"entity_name": "Golden Gate Bridge", "entity_attributes": {"city": "San Francisco"}},
                {"entity_name": "San Francisco Bay", "entity_attributes": {}},
            ],
        },
        {"image": imgs[3], "image_url": "https://example.org/red.jpg", "entities": ["Red square"]},
    ]
    web_items = [
        {
            "page_url": "https://example.org/eiffel",
            "page_name": "Eiffel Tower",
            "page_snippet": "tower in paris france",
            "page_text": "eiffel tower height meters tall " * 200,
        },
        {"page_url": "https://example.org/louvre", "page_name": "Louvre", "page_snippet": "art museum paris"},
        {"page_url": "https://example.org/ggb", "page_name": "Golden Gate", "page_snippet": "bridge san francisco"},
    ]
    paths = build_cragmm_index(tmp / "index", image_items, web_items, clip, bert)
    search = CragMMSearch(paths["image_index"], clip, web_index_dir=paths["web_index"], text_model_dir=bert)
    return search, imgs, paths, clip, bert


def test_official_layout(built):
    import chromadb

    _, _, paths, _, _ = built
    col = chromadb.PersistentClient(path=str(paths["image_index"])).get_collection("image_embeddings")
    got = col.get(include=["metadatas"])
    assert got["ids"] == ["0", "1", "2", "3"]
    meta = got["metadatas"][2]
    assert json.loads(meta["entities"]) == ["Golden Gate Bridge", "San Francisco Bay"]
    assert json.loads(meta["info"])["Golden Gate Bridge"] == {"city": "San Francisco"}
    assert json.loads(got["metadatas"][1]["entities"]) == "Louvre"
    wcol = chromadb.PersistentClient(path=str(paths["web_index"])).get_collection("web_search_embeddings")
    wids = wcol.get()["ids"]
    assert "https://example.org/eiffel_chunk_0" in wids and "https://example.org/eiffel_chunk_1" in wids
    assert set(wcol.get(include=["metadatas"])["metadatas"][0]) == {"page_name", "page_snippet", "page_url"}


def test_image_round_trip_top1(built):
    search, imgs, _, _, _ = built
    assert isinstance(search, SearchBackend)
    urls = [
        "https://example.org/eiffel.jpg",
        "https://example.org/louvre.jpg",
        "https://example.org/ggb.jpg",
        "https://example.org/red.jpg",
    ]
    for img, url in zip(imgs, urls):
        res = search.image_search(img, k=3)
        assert len(res) == 3
        for r in res:
            ImageSearchResult.model_validate(r)
        assert res[0]["url"] == url
        assert res[0]["score"] == pytest.approx(1.0, abs=1e-3)
    res = search.image_search(imgs[0], k=1)
    assert res[0]["index"] == 0
    assert res[0]["entities"] == [
        {"entity_name": "Eiffel Tower", "entity_attributes": {"height": "330 m", "city": "Paris"}}
    ]
    ggb = search.image_search(imgs[2], k=1)[0]
    assert [e["entity_name"] for e in ggb["entities"]] == ["Golden Gate Bridge", "San Francisco Bay"]


def test_web_search_format(built):
    search, _, _, _, _ = built
    res = search.web_search("eiffel tower height", k=3)
    assert 1 <= len(res) <= 3
    for r in res:
        WebSearchResult.model_validate(r)
        assert r["page_url"].startswith("https://example.org/")
        assert isinstance(r["index"], str) and "_chunk_" in r["index"]
    # deduplicated by page, best first
    assert len({r["page_url"] for r in res}) == len(res)
    assert [r["score"] for r in res] == sorted((r["score"] for r in res), reverse=True)


def test_offline_only(tmp_path, built):
    _, _, _, clip, _ = built
    with pytest.raises(FileNotFoundError):
        CragMMSearch(tmp_path / "missing", clip)
    import huggingface_hub

    original = huggingface_hub.snapshot_download
    with offline_snapshot_download():
        with pytest.raises(FileNotFoundError):
            huggingface_hub.snapshot_download(repo_id="crag-mm-2025/image-search-index-validation")
        assert huggingface_hub.snapshot_download(repo_id=str(tmp_path)) == str(tmp_path)
    assert huggingface_hub.snapshot_download is original


def test_image_search_rejects_text(built):
    search, _, _, _, _ = built
    with pytest.raises(ValueError):
        search.image_search("what is this?")


def test_cli_runs_a_task_on_the_official_pipeline(built, tmp_path, capsys):
    from glasses_rag.frontends.run import main
    from traces.schema import TurnTrace

    _, _, paths, clip, bert = built
    rc = main(
        [
            "--task",
            "2",
            "--limit",
            "2",
            "--search",
            "cragmm",
            "--cragmm-image-index",
            str(paths["image_index"]),
            "--cragmm-clip",
            str(clip),
            "--cragmm-web-index",
            str(paths["web_index"]),
            "--cragmm-text-model",
            str(bert),
            "--out",
            str(tmp_path),
            "--run-id",
            "official",
            "--no-progress",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0 and "search: cached(cragmm)" in out
    traces = [TurnTrace.model_validate_json(p.read_text()) for p in (tmp_path / "official").glob("*__*.json")]
    assert len(traces) == 2
    hits = [r for t in traces for s in t.tool_calls() if s.tool == "image_search" for r in s.results]
    assert hits and {h.entity_name for h in hits} <= {
        "Eiffel Tower",
        "Louvre",
        "Golden Gate Bridge",
        "San Francisco Bay",
        "Red square",
    }
