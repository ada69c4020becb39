"""jina-reranker-m0 scores as the checkpoint's own code computes them (JinaVLForRanking.compute_score; vLLM's
jina_vl.py): the pair "**Document**: ... **Query**: ...", the score token (id 100) appended after truncation with
left padding, relevance = sigmoid(head(hidden state at that token) - 2.65). Checked on a tiny random Qwen2-VL with
the checkpoint's head against an independent re-implementation of that forward pass."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image


@pytest.fixture(scope="module")
def m0(tmp_path_factory):
    from glasses_rag.testing.tiny_models import save_tiny_jina_m0

    return save_tiny_jina_m0(tmp_path_factory.mktemp("m0") / "tiny-jina-m0")


def reference_scores(folder, prompts: list[str], image=None) -> np.ndarray:
    """The checkpoint's forward pass written out: the whole Qwen2-VL model with its hidden states, the head on
    the last position of left-padded rows that end in token 100, then sigmoid(logit - 2.65)."""
    import torch
    from safetensors.torch import load_file
    from transformers import AutoTokenizer, Qwen2VLForConditionalGeneration, Qwen2VLImageProcessor

    tok = AutoTokenizer.from_pretrained(folder)
    tok.padding_side = "left"
    model = Qwen2VLForConditionalGeneration.from_pretrained(folder).eval()
    w = load_file(str(folder / "model.safetensors"))
    extra = {}
    if image is not None:
        proc = Qwen2VLImageProcessor.from_pretrained(folder, min_pixels=3136, max_pixels=602112)
        extra = dict(proc(images=[image] * len(prompts), return_tensors="pt"))
        n = int(extra["image_grid_thw"][0].prod()) // 4
        prompts = [p.replace("<|image_pad|>", "<|image_pad|>" * n) for p in prompts]
    batch = tok(prompts, padding=True, return_tensors="pt")
    ones = torch.ones(len(prompts), 1, dtype=batch["attention_mask"].dtype)
    ids = torch.cat([batch["input_ids"], torch.full((len(prompts), 1), 100)], dim=1)
    mask = torch.cat([batch["attention_mask"], ones], dim=1)
    with torch.no_grad():
        h = model(input_ids=ids, attention_mask=mask, output_hidden_states=True, **extra).hidden_states[-1][:, -1]
        x = torch.relu(h @ w["score.dense.weight"].T + w["score.dense.bias"])
        logit = (x @ w["score.out_proj.weight"].T + w["score.out_proj.bias"])[:, 0]
    return torch.sigmoid(logit - 2.65).numpy()


DOCS = ["SpaceX builds the Falcon 9.", "A recipe for bread with flour and water.", "x" * 40]


def test_text_pairs_score_as_the_checkpoint_does(m0):
    from glasses_rag.models.mm_reranker import JinaM0Reranker

    r = JinaM0Reranker(m0)
    got = r.score("who makes this rocket?", DOCS)
    want = reference_scores(m0, [f"**Document**:\n{d}\n**Query**:\nwho makes this rocket?" for d in DOCS])
    assert np.allclose(got, want, atol=1e-5), (got, want)
    assert np.allclose(r.score("who makes this rocket?", DOCS[:1]), got[:1], atol=1e-5)  # padding changes nothing


def test_an_image_query_scores_as_the_checkpoint_does(m0):
    from glasses_rag.models.mm_reranker import JinaM0Reranker

    photo = Image.new("RGB", (60, 40), (200, 30, 30))
    got = JinaM0Reranker(m0).score_image(photo, DOCS)
    query = "<|vision_start|><|image_pad|><|vision_end|>"
    want = reference_scores(m0, [f"**Document**:\n{d}\n**Query**:\n{query}" for d in DOCS], photo)
    assert np.allclose(got, want, atol=1e-5), (got, want)


def test_a_long_document_is_cut_before_the_query_so_the_query_is_kept(m0):
    from glasses_rag.models.mm_reranker import JinaM0Reranker

    r = JinaM0Reranker(m0, max_length=1024)
    long = "spacex " * 400  # 2,800 byte tokens: more than the whole pair may hold
    cut = r.cut_document(long)
    assert len(r.tokenizer(cut)["input_ids"]) == 512  # max_length - 512 (compute_score's max_doc_length)
    (row,) = r._inputs([r.pair(cut, "who makes it?")], None)["input_ids"].tolist()
    assert row[-1] == 100 and r.tokenizer.decode(row[:-1]).endswith("**Query**:\nwho makes it?")
    got = r.score("who makes it?", [long])
    assert np.allclose(got, reference_scores(m0, [r.pair(cut, "who makes it?")]), atol=1e-5)
