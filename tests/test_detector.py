"""glasses_rag.models.detector: real transformers code paths with tiny random models, and the heuristics on real
images."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from glasses_rag.models.detector import (
    OCR_BOX_METHOD,
    SALIENCY_METHOD,
    ZeroShotDetector,
    make_detector,
    nms,
    ocr_box_crop,
    saliency_crop,
)
from tools.base import Box

LABELS = ["a cat", "a dog", "red car"]


def _inside(b: Box, w: int, h: int) -> bool:
    return 0 <= b.x0 < b.x1 <= w and 0 <= b.y0 < b.y1 <= h


def _noise_image(w: int = 80, h: int = 50, seed: int = 0) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray((rng.random((h, w, 3)) * 255).astype(np.uint8))


# ------------------------------------------------------------------------------------------
# tiny models, built once per module


@pytest.fixture(scope="module")
def owlv2_dir(tmp_path_factory) -> Path:
    import torch
    from transformers import CLIPTokenizer, Owlv2Config, Owlv2ForObjectDetection, Owlv2ImageProcessor, Owlv2Processor
    from transformers.models.clip.tokenization_clip import bytes_to_unicode

    d = tmp_path_factory.mktemp("owlv2")
    chars = list(bytes_to_unicode().values())
    vocab: dict[str, int] = {}
    for c in chars:
        vocab[c] = len(vocab)
    for c in chars:
        vocab[c + "</w>"] = len(vocab)
    for m in ["ca", "cat</w>", "do", "dog</w>"]:
        vocab[m] = len(vocab)
    vocab["<|startoftext|>"] = len(vocab)
    vocab["<|endoftext|>"] = len(vocab)
    (d / "vocab.json").write_text(json.dumps(vocab))
    (d / "merges.txt").write_text("#version: 0.2\nc a\nca t</w>\nd o\ndo g</w>\n")
    tok = CLIPTokenizer(str(d / "vocab.json"), str(d / "merges.txt"), model_max_length=16)
    cfg = Owlv2Config(
        text_config=dict(
            vocab_size=len(vocab),
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            max_position_embeddings=16,
            bos_token_id=vocab["<|startoftext|>"],
            eos_token_id=vocab["<|endoftext|>"],
            pad_token_id=0,
        ),
        vision_config=dict(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            image_size=64,
            patch_size=16,
        ),
        projection_dim=32,
    )
    torch.manual_seed(0)
    model = Owlv2ForObjectDetection(cfg).eval()
    proc = Owlv2Processor(image_processor=Owlv2ImageProcessor(size={"height": 64, "width": 64}), tokenizer=tok)
    out = d / "tiny-owlv2"
    model.save_pretrained(out)
    proc.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def gdino_dir(tmp_path_factory) -> Path:
    import torch
    from transformers import (
        BertConfig,
        BertTokenizerFast,
        GroundingDinoConfig,
        GroundingDinoForObjectDetection,
        GroundingDinoImageProcessor,
        GroundingDinoProcessor,
        SwinConfig,
    )

    d = tmp_path_factory.mktemp("gdino")
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", "a", "cat", "dog", "red", "car", "the"]
    words += list("bdefghijklmnopqrstuvwxyz") + ["##" + c for c in "abcdefghijklmnopqrstuvwxyz"]
    (d / "vocab.txt").write_text("\n".join(dict.fromkeys(words)) + "\n")
    tok = BertTokenizerFast(str(d / "vocab.txt"))
    cfg = GroundingDinoConfig(
        backbone_config=SwinConfig(
            image_size=64,
            patch_size=4,
            embed_dim=8,
            depths=[1, 1],
            num_heads=[1, 1],
            window_size=4,
            out_features=["stage1", "stage2"],
        ),
        text_config=BertConfig(
            vocab_size=len(tok),
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=32,
            max_position_embeddings=64,
        ),
        use_timm_backbone=False,
        use_pretrained_backbone=False,
        d_model=32,  # GroupNorm(32, d_model) needs a multiple of 32
        encoder_layers=1,
        decoder_layers=2,  # >= 2 required
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=32,
        decoder_ffn_dim=32,
        num_queries=12,
        num_feature_levels=2,
        encoder_n_points=2,
        decoder_n_points=2,
        max_text_len=32,
    )
    torch.manual_seed(0)
    model = GroundingDinoForObjectDetection(cfg).eval()
    proc = GroundingDinoProcessor(
        image_processor=GroundingDinoImageProcessor(size={"shortest_edge": 64, "longest_edge": 96}), tokenizer=tok
    )
    out = d / "tiny-gdino"
    model.save_pretrained(out)
    proc.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def owlv2(owlv2_dir) -> ZeroShotDetector:
    return ZeroShotDetector(owlv2_dir)


@pytest.fixture(scope="module")
def gdino(gdino_dir) -> ZeroShotDetector:
    return ZeroShotDetector(gdino_dir)


# ------------------------------------------------------------------------------------------
# zero-shot detectors


@pytest.mark.parametrize("which", ["owlv2", "gdino"])
def test_zero_shot_detector_boxes(which, request):
    det: ZeroShotDetector = request.getfixturevalue(which)
    expected = "owlv2:tiny-owlv2" if which == "owlv2" else "grounding-dino:tiny-gdino"
    assert det.name == expected
    img = _noise_image(80, 50)
    boxes = det.detect(img, LABELS, threshold=0.0, top_k=5)
    assert isinstance(boxes, list) and 1 <= len(boxes) <= 5
    for b in boxes:
        assert isinstance(b, Box)
        assert _inside(b, 80, 50), b
        assert b.label in LABELS
        assert b.method == expected
        assert 0.0 <= b.score <= 1.0
    assert [b.score for b in boxes] == sorted((b.score for b in boxes), reverse=True)


@pytest.mark.parametrize("which", ["owlv2", "gdino"])
def test_zero_shot_detector_threshold_and_top_k(which, request):
    det: ZeroShotDetector = request.getfixturevalue(which)
    img = _noise_image(64, 96, seed=1)  # portrait: OWLv2 pads to a square
    all_boxes = det.detect(img, LABELS, threshold=0.0, top_k=100)
    assert all_boxes
    scores = sorted(b.score for b in all_boxes)
    t = scores[len(scores) // 2]
    above = det.detect(img, LABELS, threshold=t, top_k=100)
    assert above and all(b.score >= t for b in above)
    assert len(above) <= len(all_boxes)
    assert len(det.detect(img, LABELS, threshold=0.0, top_k=1)) == 1
    assert det.detect(img, LABELS, threshold=1.01) == []
    assert det.detect(img, [], threshold=0.0) == []
    assert det.detect(None, LABELS) == []
    for b in all_boxes:
        assert _inside(b, 64, 96)


@pytest.mark.parametrize("which", ["owlv2", "gdino"])
def test_zero_shot_detector_long_and_odd_labels(which, request):
    det: ZeroShotDetector = request.getfixturevalue(which)
    labels = ["Red car.", "cat " * 60, "  a dog  ", "a dog"]
    boxes = det.detect(_noise_image(), labels, threshold=0.0, top_k=10)
    assert boxes and all(b.label in labels for b in boxes)


def test_gdino_label_spans(gdino):
    tok = gdino.processor.tokenizer
    ids = tok("a cat. a dog. red car.")["input_ids"]
    spans = gdino._label_spans(ids, LABELS)
    assert [[ids[i] for i in s] for s in spans] == [tok(x, add_special_tokens=False)["input_ids"] for x in LABELS]


def test_detector_accepts_numpy_and_grey(owlv2):
    arr = (np.random.default_rng(2).random((40, 60)) * 255).astype(np.uint8)
    boxes = owlv2.detect(arr, ["a cat"], threshold=0.0, top_k=3)
    assert boxes and all(_inside(b, 60, 40) for b in boxes)


def test_make_detector(owlv2_dir, tmp_path):
    assert make_detector(None) is None
    assert make_detector(tmp_path / "missing") is None
    (tmp_path / "broken").mkdir()
    assert make_detector(tmp_path / "broken") is None
    det = make_detector(owlv2_dir)
    assert isinstance(det, ZeroShotDetector) and det.name == "owlv2:tiny-owlv2"


def test_nms():
    a = Box(x0=0, y0=0, x1=10, y1=10, label="x", score=0.9)
    b = Box(x0=1, y0=1, x1=10, y1=10, label="x", score=0.8)
    c = Box(x0=1, y0=1, x1=10, y1=10, label="y", score=0.7)
    d = Box(x0=20, y0=20, x1=30, y1=30, label="x", score=0.95)
    assert nms([a, b, c, d]) == [d, a, c]
    assert nms([a, b, c, d], per_label=False) == [d, a]


# ------------------------------------------------------------------------------------------
# heuristics on real images


def test_ocr_box_crop_on_page():
    from rapidocr import RapidOCR
    from skimage import data

    page = data.page()
    h, w = page.shape
    boxes = RapidOCR()(np.stack([page] * 3, axis=-1)).boxes
    assert boxes is not None and len(boxes) > 0
    b = ocr_box_crop(Image.fromarray(page), boxes)
    assert b is not None and b.method == OCR_BOX_METHOD and b.label == "text"
    assert _inside(b, w, h) and 0 < b.score <= 1
    pts = np.asarray(boxes).reshape(-1, 2)
    # every text box is inside the crop
    assert b.x0 <= pts[:, 0].min() + 1 and b.y0 <= pts[:, 1].min() + 1
    assert b.x1 >= pts[:, 0].max() - 1 and b.y1 >= pts[:, 1].max() - 1


def test_ocr_box_crop_small_and_empty():
    img = Image.new("RGB", (200, 100))
    assert ocr_box_crop(img, []) is None
    assert ocr_box_crop(img, None) is None
    b = ocr_box_crop(img, [[[50, 40], [60, 40], [60, 45], [50, 45]]])
    assert b is not None and _inside(b, 200, 100)
    assert b.x0 <= 50 and b.x1 >= 60 and b.y0 <= 40 and b.y1 >= 45
    assert b.x1 - b.x0 >= 10 and b.y1 - b.y0 >= 8  # grown to the minimum size
    # a box at the border stays inside the image
    b = ocr_box_crop(img, np.array([[[190, 95], [205, 95], [205, 104], [190, 104]]], dtype=np.float32))
    assert b is not None and _inside(b, 200, 100)
    # min_rel_height drops the small line
    big = [[10, 10], [100, 10], [100, 40], [10, 40]]
    small = [[150, 80], [190, 80], [190, 84], [150, 84]]
    assert ocr_box_crop(img, [big, small], min_rel_height=0.5).x1 < 150


@pytest.mark.parametrize("name", ["coffee", "rocket"])
def test_saliency_crop_real_images(name):
    from skimage import data

    arr = getattr(data, name)()
    h, w = arr.shape[:2]
    b = saliency_crop(Image.fromarray(arr))
    assert b.method == SALIENCY_METHOD
    assert _inside(b, w, h)
    assert b.x1 - b.x0 >= 0.05 * w and b.y1 - b.y0 >= 0.05 * h  # not degenerate
    assert b.area() < 0.9 * w * h  # smaller than the image
    assert b.score >= 0.5


def test_saliency_crop_finds_an_object():
    arr = np.full((120, 200, 3), 200, dtype=np.uint8)
    arr[40:80, 120:170] = (200, 30, 30)
    b = saliency_crop(Image.fromarray(arr))
    assert b.x0 <= 120 and b.x1 >= 170 and b.y0 <= 40 and b.y1 >= 80
    assert b.area() < 0.4 * 200 * 120


@pytest.mark.parametrize(
    "img",
    [Image.new("RGB", (200, 100), (120, 120, 120)), _noise_image(200, 100, seed=3), Image.new("RGB", (3, 3))],
    ids=["flat", "noise", "tiny"],
)
def test_saliency_crop_falls_back_to_whole_image(img):
    b = saliency_crop(img)
    w, h = img.size
    assert (b.x0, b.y0, b.x1, b.y1) == (0, 0, w, h)
    assert b.score < 0.1 and b.method == SALIENCY_METHOD
