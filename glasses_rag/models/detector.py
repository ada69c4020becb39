"""Open-vocabulary object detection for the crop tool, plus named heuristic fallbacks.

Real detectors are loaded only from a LOCAL folder (never downloaded):

* `ZeroShotDetector` - GroundingDINO, OWLv2 or OWL-ViT through transformers' `AutoProcessor` +
  `AutoModelForZeroShotObjectDetection`; `.name` is "grounding-dino:<folder>", "owlv2:<folder>" or
  "owlvit:<folder>".

Heuristics, used when no detector folder is configured, say so in their `method`:

* `ocr_box_crop`   -> "heuristic:ocr-box"       (box around OCR text quadrilaterals)
* `saliency_crop`  -> "heuristic:saliency-crop" (spectral-residual + colour-contrast saliency)

Every function returns `glasses_rag.core.types.Box` objects in pixel coordinates of the ORIGINAL image,
clipped to it and never empty (x1 > x0, y1 > y0).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from glasses_rag.core.types import Box

log = logging.getLogger(__name__)

OCR_BOX_METHOD = "heuristic:ocr-box"
SALIENCY_METHOD = "heuristic:saliency-crop"

__all__ = [
    "Detector",
    "ZeroShotDetector",
    "make_detector",
    "ocr_box_crop",
    "saliency_crop",
    "nms",
    "OCR_BOX_METHOD",
    "SALIENCY_METHOD",
]


class Detector(Protocol):
    name: str

    def detect(self, image: Any, labels: list[str], threshold: float = 0.2, top_k: int = 5) -> list[Box]: ...


# ----------------------------------------------------------------------------------------------
# small geometry helpers


def _clip_box(x0: float, y0: float, x1: float, y1: float, w: int, h: int) -> tuple[int, int, int, int] | None:
    """Round outwards, clip to the image; None when nothing (< 1 px) is left."""
    x0, x1 = sorted((float(x0), float(x1)))
    y0, y1 = sorted((float(y0), float(y1)))
    if not all(np.isfinite(v) for v in (x0, y0, x1, y1)):
        return None
    ix0 = int(max(0, min(w, np.floor(x0))))
    iy0 = int(max(0, min(h, np.floor(y0))))
    ix1 = int(max(0, min(w, np.ceil(x1))))
    iy1 = int(max(0, min(h, np.ceil(y1))))
    if ix1 - ix0 < 1 or iy1 - iy0 < 1:
        return None
    return ix0, iy0, ix1, iy1


def _iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of one box `a` (4,) against boxes `b` (n, 4)."""
    ix0 = np.maximum(a[0], b[:, 0])
    iy0 = np.maximum(a[1], b[:, 1])
    ix1 = np.minimum(a[2], b[:, 2])
    iy1 = np.minimum(a[3], b[:, 3])
    inter = np.clip(ix1 - ix0, 0, None) * np.clip(iy1 - iy0, 0, None)
    area_a = max(0.0, float(a[2] - a[0])) * max(0.0, float(a[3] - a[1]))
    area_b = np.clip(b[:, 2] - b[:, 0], 0, None) * np.clip(b[:, 3] - b[:, 1], 0, None)
    return inter / np.maximum(area_a + area_b - inter, 1e-9)


def nms(boxes: list[Box], iou_threshold: float = 0.5, per_label: bool = True) -> list[Box]:
    """Greedy non-maximum suppression (no torchvision); returns boxes sorted by score, descending."""
    order = sorted(boxes, key=lambda b: b.score, reverse=True)
    kept: list[Box] = []
    for b in order:
        cand = [k for k in kept if (not per_label or k.label == b.label)]
        if cand:
            arr = np.array([[k.x0, k.y0, k.x1, k.y1] for k in cand], dtype=np.float64)
            if np.any(_iou(np.array([b.x0, b.y0, b.x1, b.y1], dtype=np.float64), arr) > iou_threshold):
                continue
        kept.append(b)
    return kept


def _to_pil_rgb(image: Any):
    from PIL import Image

    if isinstance(image, np.ndarray):
        arr = image
        if arr.dtype != np.uint8:
            arr = np.clip(arr * (255.0 if arr.max() <= 1.0 else 1.0), 0, 255).astype(np.uint8)
        image = Image.fromarray(arr)
    return image.convert("RGB") if image.mode != "RGB" else image


def _clean_labels(labels: Sequence[str]) -> list[str]:
    out = []
    for label in labels:
        t = " ".join(str(label).replace(".", " ").split()).strip()
        if t and t not in out:
            out.append(t)
    return out


# ----------------------------------------------------------------------------------------------
# transformers zero-shot detectors


class ZeroShotDetector:
    """GroundingDINO / OWLv2 / OWL-ViT from a local transformers folder.

    `detect(image, labels)` returns at most `top_k` boxes, score-sorted, each with `score >= threshold`,
    `label` one of the given labels (as given), `method == self.name`.
    """

    def __init__(self, path: str | Path, device: str = "cpu", nms_iou: float = 0.5):
        import torch
        from transformers import AutoModelForZeroShotObjectDetection, AutoProcessor

        from glasses_rag.models.threads import set_torch_threads

        set_torch_threads()  # one thread per call unless configured otherwise (glasses_rag.models.resources)

        self.path = Path(path)
        self.device = device
        self.nms_iou = nms_iou
        self._torch = torch
        self.processor = AutoProcessor.from_pretrained(str(self.path), local_files_only=True)
        self.model = AutoModelForZeroShotObjectDetection.from_pretrained(str(self.path), local_files_only=True)
        self.model = self.model.to(device).eval()
        self.model_type = str(self.model.config.model_type)
        if self.model_type == "grounding-dino":
            prefix = "grounding-dino"
        elif self.model_type in ("owlv2", "owlvit"):
            prefix = self.model_type
        else:
            prefix = self.model_type
            log.warning("ZeroShotDetector: untested model_type %r, treating it like OWL", self.model_type)
        self.name = f"{prefix}:{self.path.name}"
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"ZeroShotDetector({self.name!r})"

    @property
    def is_grounding_dino(self) -> bool:
        return self.model_type == "grounding-dino"

    def detect(self, image: Any, labels: list[str], threshold: float = 0.2, top_k: int = 5) -> list[Box]:
        labels_in = [str(x) for x in labels]
        clean = _clean_labels(labels_in)
        if image is None or not clean or top_k <= 0:
            return []
        # map cleaned label back to the caller's spelling
        back = {}
        for raw in labels_in:
            c = _clean_labels([raw])
            if c and c[0] not in back:
                back[c[0]] = raw
        image = _to_pil_rgb(image)
        w, h = image.size
        with self._lock, self._torch.inference_mode():
            if self.is_grounding_dino:
                raw_boxes = self._detect_gdino(image, clean, threshold)
            else:
                raw_boxes = self._detect_owl(image, clean, threshold)
        boxes = []
        for (x0, y0, x1, y1), score, label in raw_boxes:
            if not np.isfinite(score) or score < threshold:
                continue
            clipped = _clip_box(x0, y0, x1, y1, w, h)
            if clipped is None:
                continue
            boxes.append(
                Box(
                    x0=clipped[0],
                    y0=clipped[1],
                    x1=clipped[2],
                    y1=clipped[3],
                    label=back.get(label, label),
                    score=float(score),
                    method=self.name,
                )
            )
        return nms(boxes, self.nms_iou, per_label=True)[:top_k]

    # -- OWLv2 / OWL-ViT ----------------------------------------------------------------------
    def _detect_owl(self, image, labels: list[str], threshold: float):
        inputs = self.processor(text=[labels], images=image, return_tensors="pt", truncation=True)
        inputs = {k: v.to(self.device) for k, v in inputs.items()}
        outputs = self.model(**inputs)
        w, h = image.size
        # target_sizes is (height, width). For OWLv2 the processor pads the image to a square
        # (bottom/right) before resizing, and its post-processing scales by max(h, w): boxes are in
        # original-image pixels, those reaching into the padding are clipped by the caller.
        res = self.processor.post_process_grounded_object_detection(
            outputs=outputs, threshold=threshold, target_sizes=[(h, w)], text_labels=[labels]
        )[0]
        out = []
        for box, score, li in zip(
            res["boxes"].float().cpu().numpy(), res["scores"].float().cpu().numpy(), res["labels"].cpu().numpy()
        ):
            out.append((tuple(box.tolist()), float(score), labels[int(li)]))
        return out

    # -- GroundingDINO ------------------------------------------------------------------------
    def _label_spans(self, input_ids: list[int], labels: list[str]) -> list[list[int]]:
        """Token positions of each label inside the "a cat. a dog." prompt (empty when truncated away)."""
        tok = self.processor.tokenizer
        spans: list[list[int]] = []
        start = 1  # after [CLS]
        for label in labels:
            ids = tok(label, add_special_tokens=False)["input_ids"]
            found: list[int] = []
            n = len(ids)
            if n:
                for i in range(start, len(input_ids) - n + 1):
                    if input_ids[i : i + n] == ids:
                        found = list(range(i, i + n))
                        start = i + n
                        break
            spans.append(found)
        return spans

    def _detect_gdino(self, image, labels: list[str], threshold: float):
        torch = self._torch
        prompt = ". ".join(x.lower() for x in labels) + "."
        max_len = int(getattr(self.model.config, "max_text_len", 256) or 256)
        inputs = self.processor(images=image, text=prompt, return_tensors="pt", truncation=True, max_length=max_len)
        inputs = {k: v.to(self.device) for k, v in inputs.items()}
        outputs = self.model(**inputs)
        w, h = image.size
        input_ids = inputs["input_ids"]
        # threshold=-1 keeps every query so rows stay aligned with outputs.logits; we score and
        # threshold per label below (the processor's own score is max over ALL prompt tokens,
        # including "." and [SEP], and its text labels are decoded sub-phrases, not our labels).
        res = self.processor.post_process_grounded_object_detection(
            outputs, input_ids=input_ids, threshold=-1.0, text_threshold=0.25, target_sizes=[(h, w)]
        )[0]
        probs = torch.sigmoid(outputs.logits[0].float()).cpu().numpy()  # (num_queries, max_text_len)
        boxes = res["boxes"].float().cpu().numpy()
        decoded = list(res.get("text_labels") or [])
        spans = self._label_spans(input_ids[0].tolist(), labels)
        out = []
        for q in range(probs.shape[0]):
            best, best_label = -1.0, None
            for label, span in zip(labels, spans):
                span = [i for i in span if i < probs.shape[1]]
                if span:
                    s = float(probs[q, span].max())
                    if s > best:
                        best, best_label = s, label
            if best_label is None:  # no span found (odd tokenizer): fall back to the processor's view
                best = float(probs[q].max())
                txt = decoded[q] if q < len(decoded) else ""
                best_label = next((lab for lab in labels if lab.lower() in str(txt).lower()), labels[0])
            if best >= threshold:
                out.append((tuple(boxes[q].tolist()), best, best_label))
        return out


def make_detector(path: str | Path | None, device: str = "cpu") -> ZeroShotDetector | None:
    """The real detector for a local folder, or None (no path, missing folder, or it fails to load).

    Callers then fall back to `ocr_box_crop` / `saliency_crop`.
    """
    if not path:
        return None
    p = Path(path)
    if not p.exists():
        log.warning("detector folder %s does not exist; using heuristics", p)
        return None
    try:
        return ZeroShotDetector(p, device=device)
    except Exception as e:  # a broken folder must not break the agent
        log.warning("could not load detector from %s (%s: %s); using heuristics", p, type(e).__name__, e)
        return None


# ----------------------------------------------------------------------------------------------
# heuristics


def _image_size(image: Any) -> tuple[int, int]:
    if isinstance(image, np.ndarray):
        return int(image.shape[1]), int(image.shape[0])
    return int(image.size[0]), int(image.size[1])


def _pad_box(
    x0: float, y0: float, x1: float, y1: float, w: int, h: int, pad: float, min_frac: float = 0.05, min_px: int = 8
):
    """Pad by `pad` x box size on each side, grow to a minimum size, clip; never degenerate."""
    bw, bh = x1 - x0, y1 - y0
    x0, x1 = x0 - pad * bw, x1 + pad * bw
    y0, y1 = y0 - pad * bh, y1 + pad * bh
    min_w = min(w, max(min_px, min_frac * w))
    min_h = min(h, max(min_px, min_frac * h))
    if x1 - x0 < min_w:
        c = (x0 + x1) / 2
        x0, x1 = c - min_w / 2, c + min_w / 2
    if y1 - y0 < min_h:
        c = (y0 + y1) / 2
        y0, y1 = c - min_h / 2, c + min_h / 2
    # shift back inside before clipping so the minimum size survives at borders
    if x0 < 0:
        x1, x0 = x1 - x0, 0
    if x1 > w:
        x0, x1 = x0 - (x1 - w), w
    if y0 < 0:
        y1, y0 = y1 - y0, 0
    if y1 > h:
        y0, y1 = y0 - (y1 - h), h
    clipped = _clip_box(x0, y0, x1, y1, w, h)
    return clipped if clipped is not None else (0, 0, max(1, w), max(1, h))


def ocr_box_crop(
    image: Any,
    ocr_boxes: Sequence[Sequence[Sequence[float]]] | np.ndarray | None,
    pad: float = 0.05,
    min_rel_height: float = 0.0,
    label: str = "text",
) -> Box | None:
    """Box around the OCR text region(s): the union of the text quadrilaterals, padded, clipped.

    `ocr_boxes` is what RapidOCR returns in `.boxes`: a list (or (n, 4, 2) array) of polygons of
    [x, y] points in original-image pixels. `min_rel_height` drops lines whose height is below that
    fraction of the tallest line (small print / noise). Returns None when there is no usable box.
    Score: fraction of the crop covered by text boxes (0..1); method "heuristic:ocr-box".
    """
    if image is None or ocr_boxes is None or len(ocr_boxes) == 0:
        return None
    w, h = _image_size(image)
    rects = []
    for poly in ocr_boxes:
        pts = np.asarray(poly, dtype=np.float64).reshape(-1, 2)
        if pts.size == 0 or not np.all(np.isfinite(pts)):
            continue
        x0, y0 = pts.min(0)
        x1, y1 = pts.max(0)
        if x1 - x0 <= 0 or y1 - y0 <= 0:
            continue
        rects.append((x0, y0, x1, y1))
    if not rects:
        return None
    r = np.array(rects)
    heights = r[:, 3] - r[:, 1]
    if min_rel_height > 0:
        r = r[heights >= min_rel_height * heights.max()]
    x0, y0 = r[:, 0].min(), r[:, 1].min()
    x1, y1 = r[:, 2].max(), r[:, 3].max()
    c = _pad_box(x0, y0, x1, y1, w, h, pad)
    crop_area = max(1, (c[2] - c[0]) * (c[3] - c[1]))
    text_area = float(((r[:, 2] - r[:, 0]) * (r[:, 3] - r[:, 1])).sum())
    score = float(min(1.0, text_area / crop_area))
    return Box(x0=c[0], y0=c[1], x1=c[2], y1=c[3], label=label, score=round(score, 4), method=OCR_BOX_METHOD)


def _saliency_parts(image: Any, size: int = 128) -> tuple[np.ndarray, np.ndarray, bool]:
    """(raw saliency in [0, 1], centre prior, flat) at a working resolution (longest side `size`)."""
    from scipy.ndimage import uniform_filter
    from skimage.color import rgb2lab
    from skimage.filters import gaussian
    from skimage.transform import resize

    arr = np.asarray(_to_pil_rgb(image), dtype=np.float64) / 255.0
    h, w = arr.shape[:2]
    scale = size / max(h, w)
    sh, sw = max(8, int(round(h * scale))), max(8, int(round(w * scale)))
    small = resize(arr, (sh, sw), anti_aliasing=True)

    # 1) spectral residual on luminance (Hou & Zhang 2007)
    gray = small @ np.array([0.299, 0.587, 0.114])
    f = np.fft.fft2(gray - gray.mean())
    log_amp = np.log(np.abs(f) + 1e-9)
    residual = log_amp - uniform_filter(log_amp, size=3, mode="wrap")
    sr = np.abs(np.fft.ifft2(np.exp(residual + 1j * np.angle(f)))) ** 2
    sr = _normalise(gaussian(sr, sigma=max(1.0, 0.03 * max(sh, sw))))

    # 2) colour contrast: Lab distance from the border colour (a background estimate)
    lab = rgb2lab(gaussian(small, sigma=1.0, channel_axis=-1))
    bw = max(1, int(0.08 * min(sh, sw)))
    border = np.concatenate(
        [lab[:bw].reshape(-1, 3), lab[-bw:].reshape(-1, 3), lab[:, :bw].reshape(-1, 3), lab[:, -bw:].reshape(-1, 3)]
    )
    cc_raw = np.linalg.norm(lab - np.median(border, axis=0), axis=-1)
    cc = _normalise(gaussian(cc_raw, sigma=max(1.0, 0.02 * max(sh, sw))))

    # flat: hardly any luminance texture and no colour difference from the border worth a crop
    flat = bool(gray.std() < 0.01 and np.percentile(cc_raw, 99) < 5.0)

    # 3) weak centre prior (smart-glasses photos are usually aimed at the object)
    yy, xx = np.mgrid[0:sh, 0:sw]
    cy, cx = (sh - 1) / 2, (sw - 1) / 2
    prior = np.exp(-(((yy - cy) / (0.6 * sh)) ** 2 + ((xx - cx) / (0.6 * sw)) ** 2))
    return _normalise(0.4 * sr + 0.6 * cc), prior, flat


def saliency_map(image: Any, size: int = 128, centre_prior: bool = True) -> np.ndarray:
    """Saliency in [0, 1] at a working resolution (longest side `size`).

    Spectral residual on luminance plus Lab colour contrast against the border colour, optionally
    times a weak centre prior. All zeros for a flat image.
    """
    raw, prior, flat = _saliency_parts(image, size)
    if flat:
        return np.zeros_like(raw)
    return _normalise(raw * prior) if centre_prior else raw


def _normalise(a: np.ndarray) -> np.ndarray:
    a = a - a.min()
    m = a.max()
    return a / m if m > 1e-12 else np.zeros_like(a)


def saliency_crop(image: Any, pad: float = 0.1, label: str = "salient region", min_contrast: float = 1.6) -> Box:
    """Box around the most salient region; the whole image with a low score when nothing stands out.

    Never degenerate: at least 5% of each side (and 8 px), and strictly inside the image.
    Score: 0.5..1 for a found region (how strongly it stands out), 0.05 for the whole-image fallback.
    Method "heuristic:saliency-crop".
    """
    from skimage.filters import threshold_otsu
    from skimage.measure import label as cc_label
    from skimage.measure import regionprops

    w, h = _image_size(image)
    whole = Box(x0=0, y0=0, x1=max(1, w), y1=max(1, h), label=label, score=0.05, method=SALIENCY_METHOD)
    if w < 4 or h < 4:
        return whole
    raw, prior, flat = _saliency_parts(image)
    if flat:
        return whole
    sal = _normalise(raw * prior)
    sh, sw = sal.shape
    if sal.max() <= 0 or sal.std() < 1e-6:
        return whole
    try:
        t = float(threshold_otsu(sal))
    except ValueError:
        return whole
    t = max(t, float(sal.mean() + 0.5 * sal.std()))
    mask = sal > t
    if not mask.any():
        return whole
    lab = cc_label(mask, connectivity=2)
    regions = regionprops(lab, intensity_image=sal)
    # the component with the most saliency mass wins (not merely the largest)
    best = max(regions, key=lambda r: r.intensity_mean * r.area)
    # contrast on the map WITHOUT the centre prior, so the prior alone cannot make a region
    inside_mask = lab == best.label
    inside = float(raw[inside_mask].mean())
    outside = float(raw[~inside_mask].mean()) if (~inside_mask).any() else 0.0
    contrast = inside / max(outside, 1e-6)
    frac = best.area / float(sh * sw)
    if contrast < min_contrast or frac > 0.85 or best.area < 2:
        return whole
    r0, c0, r1, c1 = best.bbox
    sx, sy = w / sw, h / sh
    c = _pad_box(c0 * sx, r0 * sy, c1 * sx, r1 * sy, w, h, pad)
    if (c[2] - c[0]) * (c[3] - c[1]) >= 0.95 * w * h:
        return whole
    score = float(np.clip(0.5 + 0.5 * (1 - 1 / contrast), 0.5, 1.0))
    return Box(x0=c[0], y0=c[1], x1=c[2], y1=c[3], label=label, score=round(score, 4), method=SALIENCY_METHOD)
