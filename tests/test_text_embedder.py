"""The numpy MiniLM matches transformers' own BertModel on the bundled all-MiniLM-L6-v2, and its cache is bounded."""

from __future__ import annotations

import math

import numpy as np

from glasses_rag.models.text_embedder import (
    BertNumpyEmbedder,
    TorchTextEmbedder,
    _erf,
    bundled_minilm_path,
    get_text_embedder,
)

TEXTS = [
    "The Falcon 9 is built by SpaceX.",
    "what rocket is this?",
    "Le café est fermé le lundi.",
    "St. Mary's Church bell, cast in the 1820s!",
    "",
    "word " * 400,
]  # empty and over-long inputs too


def test_numpy_bert_matches_transformers():
    ours = BertNumpyEmbedder().embed(TEXTS)
    ref = TorchTextEmbedder(bundled_minilm_path()).embed(TEXTS)
    assert ours.shape == ref.shape == (len(TEXTS), 384)
    assert np.abs(ours - ref).max() < 1e-5
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)


def test_default_embedder_is_the_numpy_one_and_erf_is_exact_enough():
    assert isinstance(get_text_embedder(), BertNumpyEmbedder)
    xs = np.linspace(-6, 6, 2001, dtype=np.float32)
    assert max(abs(float(a) - math.erf(float(x))) for a, x in zip(_erf(xs), xs)) < 2e-7


def test_cache_is_bounded():
    e = BertNumpyEmbedder()
    e.cache_size = 8
    e.embed([f"sentence number {i}" for i in range(20)])
    assert len(e._cache) == 8
    e.embed(["not kept"], cache=False)
    assert "not kept" not in e._cache
