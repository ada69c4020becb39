"""Global image embeddings for the embedded image index.

* `HeuristicImageEmbedder` ("heuristic:color-texture"): numpy-only, no weights. Illumination is
  normalised first (percentile stretch + gamma to a fixed median), then it concatenates, each block
  Hellinger-mapped and L2-normalised: a hue x saturation x value colour histogram, a grey-level
  histogram, rotation-invariant LBP histograms at two radii, a gradient-magnitude histogram and the
  |DFT| of the gradient-orientation histogram (invariant to any in-plane rotation). All blocks are
  global, so 90-degree rotations, mild crops and small occluders change them little.
* `ClipImageEmbedder(path)` ("clip:<path>"): `get_image_features` of a local transformers CLIP folder.

Both expose `.name`, `.dim` and `.embed(images) -> np.ndarray` of L2-normalised float32 rows.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np

_EPS = 1e-8


def _as_rgb_array(image: Any, max_side: int) -> np.ndarray:
    from PIL import Image

    if isinstance(image, (str, Path)):
        image = Image.open(image)
    if isinstance(image, np.ndarray):
        image = Image.fromarray(image.astype(np.uint8) if image.dtype != np.uint8 else image)
    im = image if image.mode == "RGB" else image.convert("RGB")  # convert() would copy an RGB photo
    w, h = im.size
    s = max_side / max(w, h)
    if s < 1:
        im = im.resize((max(8, round(w * s)), max(8, round(h * s))), Image.Resampling.BILINEAR, reducing_gap=2.0)
    return np.asarray(im, dtype=np.float32) / 255.0


def _normalise_illumination(a: np.ndarray) -> np.ndarray:
    y = a @ np.array([0.299, 0.587, 0.114], dtype=np.float32)
    lo, hi = np.percentile(y, 1), np.percentile(y, 99)
    a = np.clip((a - lo) / max(hi - lo, 1e-3), 0, 1)
    med = float(np.median(a @ np.array([0.299, 0.587, 0.114], dtype=np.float32)))
    med = min(max(med, 0.02), 0.98)
    gamma = np.log(0.45) / np.log(med)
    gamma = float(np.clip(gamma, 0.3, 3.0))
    return np.power(a, gamma, dtype=np.float32)


def _hsv(a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r, g, b = a[..., 0], a[..., 1], a[..., 2]
    mx, mn = a.max(-1), a.min(-1)
    d = mx - mn
    s = d / (mx + _EPS)
    h = np.zeros_like(mx)
    m = d > _EPS
    rc, gc, bc = (mx - r) / (d + _EPS), (mx - g) / (d + _EPS), (mx - b) / (d + _EPS)
    h = np.where(r == mx, bc - gc, np.where(g == mx, 2.0 + rc - bc, 4.0 + gc - rc))
    h = np.where(m, (h / 6.0) % 1.0, 0.0)
    return h, s, mx


def _block(x: np.ndarray, w: float) -> np.ndarray:
    x = np.sqrt(np.maximum(x, 0).astype(np.float64))
    n = np.linalg.norm(x)
    return (w * x / n if n > 0 else x).astype(np.float32)


def _lbp_riu2(y: np.ndarray, r: int) -> np.ndarray:
    """Rotation-invariant uniform LBP (P=8) histogram, 10 bins."""
    H, W = y.shape
    if H <= 2 * r + 1 or W <= 2 * r + 1:
        return np.zeros(10, np.float32)
    c = y[r : H - r, r : W - r]
    offs = [(-r, 0), (-r, r), (0, r), (r, r), (r, 0), (r, -r), (0, -r), (-r, -r)]
    bits = np.stack([(y[r + dy : H - r + dy, r + dx : W - r + dx] >= c + 0.02) for dy, dx in offs]).astype(np.int8)
    trans = np.abs(np.diff(np.concatenate([bits, bits[:1]]), axis=0)).sum(0)
    ones = bits.sum(0)
    code = np.where(trans <= 2, ones, 9)
    return np.bincount(code.ravel(), minlength=10).astype(np.float32)


def _box_down(y: np.ndarray) -> np.ndarray:
    H, W = (y.shape[0] // 2) * 2, (y.shape[1] // 2) * 2
    y = y[:H, :W]
    return 0.25 * (y[0::2, 0::2] + y[1::2, 0::2] + y[0::2, 1::2] + y[1::2, 1::2])


class HeuristicImageEmbedder:
    """Weight-free colour + texture descriptor (see module docstring)."""

    name = "heuristic:color-texture"
    # Cosine under which a match is rarely the same entity. Global colour/texture descriptors put
    # unrelated photos at 0.8-0.97, so the floor is high; measured on the demo benchmark.
    match_floor = 0.88

    def __init__(self, max_side: int = 160):
        self.max_side = max_side
        self.dim = len(self._describe(np.full((16, 16, 3), 0.5, np.float32)))

    def _describe(self, a: np.ndarray) -> np.ndarray:
        a = _normalise_illumination(a)
        h, s, v = _hsv(a)
        # colour: 18 hue x 2 sat x 2 val bins for chromatic pixels, 8 value bins for grey pixels
        chrom = s >= 0.2
        hb = np.minimum((h * 18).astype(int), 17)
        sb = (s >= 0.55).astype(int)
        vb = (v >= 0.55).astype(int)
        cidx = hb * 4 + sb * 2 + vb
        col = np.bincount(cidx[chrom], weights=s[chrom], minlength=72)
        col = col + 0.5 * (np.roll(col, 4) + np.roll(col, -4))  # hue neighbours (circular)
        grey = np.bincount(np.minimum((v[~chrom] * 8).astype(int), 7), minlength=8).astype(np.float64)
        colour = np.concatenate([col, grey * 0.5])
        y = a @ np.array([0.299, 0.587, 0.114], dtype=np.float32)
        levels = np.bincount(np.minimum((y * 16).astype(int), 15).ravel(), minlength=16)
        frac = np.array([chrom.mean(), 1 - chrom.mean()])
        # texture at two scales
        lbp = np.concatenate([_lbp_riu2(y, 1), _lbp_riu2(_box_down(y), 1)])
        gy, gx = np.gradient(y)
        mag = np.hypot(gx, gy)
        mh = np.histogram(np.log1p(mag * 20), bins=10, range=(0, np.log1p(20.0)))[0].astype(np.float64)
        ang = (np.arctan2(gy, gx) % np.pi) / np.pi
        oh = np.bincount(np.minimum((ang * 16).astype(int), 15).ravel(), weights=mag.ravel(), minlength=16)
        orient = np.abs(np.fft.rfft(oh / (oh.sum() + _EPS)))[1:7]
        return np.concatenate(
            [
                _block(colour, 1.0),
                _block(levels, 0.6),
                _block(frac, 0.3),
                _block(lbp, 0.5),
                _block(mh, 0.35),
                (0.35 * orient / (np.linalg.norm(orient) + _EPS)).astype(np.float32)
                if orient.any()
                else np.zeros(6, np.float32),
            ]
        ).astype(np.float32)

    def embed(self, images: list[Any]) -> np.ndarray:
        if not images:
            return np.zeros((0, self.dim), np.float32)
        out = np.stack([self._describe(_as_rgb_array(im, self.max_side)) for im in images])
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), _EPS)


class ClipImageEmbedder:
    """CLIP image features from a local folder (never downloads)."""

    # CLIP image-image cosine: the same object is typically above ~0.75, unrelated photos ~0.3-0.6.
    match_floor = 0.7

    def __init__(self, path: str | Path, device: str = "cpu", batch_size: int = 16):
        import torch
        from transformers import CLIPImageProcessor, CLIPModel

        from glasses_rag.models.threads import set_torch_threads

        set_torch_threads()  # one thread per call unless configured otherwise (glasses_rag.models.resources)

        self.path = str(path)
        self.name = f"clip:{self.path}"
        self._torch = torch
        self.model = CLIPModel.from_pretrained(self.path, local_files_only=True).to(device).eval()
        try:
            from transformers import CLIPProcessor

            self.processor: Any = CLIPProcessor.from_pretrained(self.path, local_files_only=True)
        except Exception:  # a folder with only the image processor (no tokenizer) is enough
            self.processor = CLIPImageProcessor.from_pretrained(self.path, local_files_only=True)
        self.device = device
        self.batch_size = batch_size
        self._lock = threading.Lock()

    @property
    def dim(self) -> int:
        return int(self.model.config.projection_dim)

    def embed(self, images: list[Any]) -> np.ndarray:
        from PIL import Image

        if not images:
            return np.zeros((0, self.dim), np.float32)
        ims = [Image.open(i).convert("RGB") if isinstance(i, (str, Path)) else i.convert("RGB") for i in images]
        outs = []
        for k in range(0, len(ims), self.batch_size):
            with self._lock, self._torch.inference_mode():
                inputs = self.processor(images=ims[k : k + self.batch_size], return_tensors="pt")
                pix = inputs["pixel_values"].to(self.device)
                f = self.model.get_image_features(pixel_values=pix)
                f = self._torch.nn.functional.normalize(f, dim=-1)
            outs.append(f.cpu().numpy().astype(np.float32))
        return np.concatenate(outs)


def make_image_embedder(clip_path: Path | str | None = None, device: str = "cpu"):
    """CLIP when a local folder is given, else the heuristic descriptor."""
    if clip_path:
        return ClipImageEmbedder(clip_path, device=device)
    return HeuristicImageEmbedder()
