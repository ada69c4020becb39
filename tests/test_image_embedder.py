"""Image embedders: the weight-free heuristic and CLIP from a tiny local random model (no downloads)."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image, ImageFilter

from glasses_rag.models.image_embedder import ClipImageEmbedder, HeuristicImageEmbedder, make_image_embedder


def _photo(seed=0):
    import skimage.data as d

    return Image.fromarray(d.chelsea() if seed == 0 else d.coffee())


def test_heuristic_shapes_and_norm():
    emb = HeuristicImageEmbedder()
    assert emb.name == "heuristic:color-texture"
    out = emb.embed([_photo(0), _photo(1), Image.new("RGB", (5, 5), (10, 10, 10))])
    assert out.shape == (3, emb.dim) and out.dtype == np.float32
    assert np.allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)
    assert emb.embed([]).shape == (0, emb.dim)


def test_heuristic_robust_to_degradations():
    emb = HeuristicImageEmbedder()
    cat, coffee = _photo(0), _photo(1)
    dark = Image.fromarray((np.asarray(cat).astype(np.float32) * 0.25).astype(np.uint8))
    variants = [
        cat.rotate(90, expand=True),
        cat.filter(ImageFilter.GaussianBlur(3)),
        dark,
        cat.crop((0, 0, int(cat.width * 0.7), int(cat.height * 0.8))),
    ]
    ref = emb.embed([cat, coffee])
    for v in variants:
        q = emb.embed([v])[0]
        assert q @ ref[0] > q @ ref[1]


def test_make_image_embedder_default():
    assert isinstance(make_image_embedder(None), HeuristicImageEmbedder)


@pytest.fixture(scope="module")
def tiny_clip(tmp_path_factory):
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel

    path = tmp_path_factory.mktemp("tiny-clip")
    cfg = CLIPConfig(
        text_config={
            "vocab_size": 99,
            "hidden_size": 16,
            "intermediate_size": 32,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "max_position_embeddings": 16,
        },
        vision_config={
            "image_size": 32,
            "patch_size": 8,
            "hidden_size": 16,
            "intermediate_size": 32,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
        },
        projection_dim=8,
    )
    import torch

    torch.manual_seed(0)
    CLIPModel(cfg).save_pretrained(path)
    CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}).save_pretrained(path)
    return path


def test_clip_embedder_from_local_folder(tiny_clip):
    emb = make_image_embedder(tiny_clip)
    assert isinstance(emb, ClipImageEmbedder) and emb.name == f"clip:{tiny_clip}"
    out = emb.embed([_photo(0), _photo(1), _photo(0)])
    assert out.shape == (3, 8) and out.dtype == np.float32
    assert np.allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)
    assert np.allclose(out[0], out[2], atol=1e-5)


def test_clip_embedder_in_local_index(tiny_clip, tmp_path):
    from glasses_rag.crag_mm.demo import ensure_demo
    from glasses_rag.retrieval.local_search import LocalSearchIndex
    from glasses_rag.retrieval.schema import ImageSearchResult

    root = ensure_demo().root
    idx = LocalSearchIndex(root, image_embedder=ClipImageEmbedder(tiny_clip), cache=False)
    assert idx.name.startswith("local-demo[clip:")
    res = idx.image_search(Image.open(root / "kg_images" / "moon.png"), k=3)
    assert len(res) == 3 and all(ImageSearchResult.model_validate(r) for r in res)
    assert res[0]["entities"][0]["entity_name"] == "Moon"  # identical image -> cosine 1
