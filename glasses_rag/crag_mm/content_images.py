"""Images of question-set content: the recipes an entity's picture is made from (sample data of installed packages,
rendered signs), the KG reference and the egocentric-style captures made of them (glasses_rag.crag_mm.content)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from PIL import Image, ImageColor, ImageDraw, ImageFilter, ImageFont
from pydantic import BaseModel, ConfigDict, Field, PlainValidator, field_validator, model_validator


class ContentModel(BaseModel):
    """Every model of question-set content: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid")


# --------------------------------------------------------------------------------------------
# Image sources: a discriminated union on `source`; add a model with a `load()` to extend it.
# --------------------------------------------------------------------------------------------


def to_pil(a: np.ndarray) -> Image.Image:
    """An RGB image from a sample-data array (bool, gray, RGB or RGBA over white)."""
    a = np.asarray(a)
    if a.dtype == bool:
        a = np.where(a, 235, 25).astype(np.uint8)
    if a.dtype != np.uint8:
        a = np.clip(a, 0, 255).astype(np.uint8)
    if a.ndim == 2:
        return Image.fromarray(a, "L").convert("RGB")
    if a.shape[2] == 4:
        rgba = Image.fromarray(a, "RGBA")
        bg = Image.new("RGB", rgba.size, (255, 255, 255))
        bg.paste(rgba, mask=rgba.split()[3])
        return bg
    return Image.fromarray(a[:, :, :3], "RGB")


def _color(v: Any) -> str | tuple[int, int, int]:
    if isinstance(v, str):
        ImageColor.getrgb(v)  # ValueError for an unknown name
        return v
    if isinstance(v, (list, tuple)) and len(v) == 3 and all(type(c) is int and 0 <= c <= 255 for c in v):
        return tuple(v)
    raise ValueError(f"a color is a name such as 'white' or [r, g, b] with channels 0..255, not {v!r}")


Color = Annotated[Any, PlainValidator(_color)]


class SkimageImage(ContentModel):
    """A sample image bundled with scikit-image: `skimage.data.<name>()`."""

    source: Literal["skimage"]
    name: str
    item: int | None = None  # for loaders returning several images (stereo_motorcycle: left, right, disparity)

    @field_validator("name")
    @classmethod
    def _known(cls, v: str) -> str:
        import skimage.data

        if v not in skimage.data.__all__:
            raise ValueError(f"scikit-image has no sample image {v!r}")
        return v

    def load(self) -> Image.Image:
        import skimage.data

        x = getattr(skimage.data, self.name)()
        if self.item is not None:
            x = x[self.item]
        elif isinstance(x, tuple):
            raise ValueError(f"skimage.data.{self.name}() returns {len(x)} images: pick one with `item`")
        return to_pil(x)


class SklearnImage(ContentModel):
    """A sample photo bundled with scikit-learn (`sklearn.datasets.load_sample_image`)."""

    source: Literal["sklearn"]
    file: Literal["china.jpg", "flower.jpg"]

    def load(self) -> Image.Image:
        from sklearn.datasets import load_sample_image

        return to_pil(load_sample_image(self.file))


class MatplotlibImage(ContentModel):
    """A sample image shipped with matplotlib (`matplotlib.cbook.get_sample_data`), e.g. grace_hopper.jpg."""

    source: Literal["matplotlib"]
    file: str

    @field_validator("file")
    @classmethod
    def _exists(cls, v: str) -> str:
        if not Path(cls._path(v)).is_file():
            raise ValueError(f"matplotlib has no sample data file {v!r}")
        return v

    @staticmethod
    def _path(file: str) -> str:
        from matplotlib.cbook import get_sample_data

        return str(get_sample_data(file, asfileobj=False))

    def load(self) -> Image.Image:
        with Image.open(self._path(self.file)) as im:
            return im.convert("RGB")


class SignLine(ContentModel):
    text: str = Field(min_length=1)
    size: int = Field(gt=0)  # font size in pixels
    color: Color


class Stripe(ContentModel):
    box: tuple[int, int, int, int]  # x0, y0, x1, y1
    color: Color


class SignImage(ContentModel):
    """A flat rendered sign, label or cover: text lines centred vertically, optional border and stripes."""

    source: Literal["sign"]
    size: tuple[Annotated[int, Field(gt=0)], Annotated[int, Field(gt=0)]]  # width, height
    background: Color
    lines: list[SignLine] = Field(min_length=1)
    border: Color | None = None
    stripes: list[Stripe] = []

    def load(self) -> Image.Image:
        w, h = self.size
        im = Image.new("RGB", (w, h), self.background)
        d = ImageDraw.Draw(im)
        for s in self.stripes:
            d.rectangle(s.box, fill=s.color)
        if self.border is not None:
            d.rectangle((8, 8, w - 9, h - 9), outline=self.border, width=10)
        heights = []
        for ln in self.lines:
            x0, y0, x1, y1 = d.textbbox((0, 0), ln.text, font=ImageFont.load_default(size=ln.size))
            heights.append(y1 - y0)
        gap = 22
        y = (h - (sum(heights) + gap * (len(self.lines) - 1))) // 2
        for ln, th in zip(self.lines, heights):
            f = ImageFont.load_default(size=ln.size)
            x0, y0, x1, y1 = d.textbbox((0, 0), ln.text, font=f)
            d.text(((w - (x1 - x0)) // 2 - x0, y - y0), ln.text, font=f, fill=ln.color)
            y += th + gap
        return im


# --------------------------------------------------------------------------------------------
# Sample arrays: numeric sample data that `to_pil` cannot show as it is
# --------------------------------------------------------------------------------------------


class SampleArrayImage(ContentModel):
    """A numeric sample array shown as a picture: min-max scaled to 0..255, gray or through a matplotlib colormap.

    For offline sample data that is not an 8-bit picture: float images in [0, 1] from scikit-image
    (`shepp_logan_phantom`), and matplotlib's sample arrays, an `.npz` archive (`npz_key` picks the array,
    e.g. `jacksboro_fault_dem.npz` / `elevation`) or a raw little-endian uint16 file (`raw_shape`, e.g.
    `s1045.ima.gz`, 256 x 256, read as matplotlib's own MRI example reads it).
    """

    source: Literal["sample-array"]
    package: Literal["skimage", "matplotlib"]
    name: str  # a skimage.data loader, or a file in matplotlib's sample data
    npz_key: str | None = None
    raw_shape: tuple[Annotated[int, Field(gt=0)], Annotated[int, Field(gt=0)]] | None = None  # rows, columns
    cmap: str | None = None  # a matplotlib colormap name; gray when absent

    @model_validator(mode="after")
    def _check(self) -> SampleArrayImage:
        if self.package == "skimage":
            import skimage.data

            if self.name not in skimage.data.__all__:
                raise ValueError(f"scikit-image has no sample image {self.name!r}")
            if self.npz_key is not None or self.raw_shape is not None:
                raise ValueError("npz_key and raw_shape are for matplotlib sample files")
        else:
            if not Path(MatplotlibImage._path(self.name)).is_file():
                raise ValueError(f"matplotlib has no sample data file {self.name!r}")
            if self.name.endswith(".npz") != (self.npz_key is not None):
                raise ValueError("an .npz file needs npz_key (the array to show), and only an .npz file takes it")
            if not self.name.endswith(".npz") and self.raw_shape is None:
                raise ValueError(f"{self.name!r} is read as raw uint16 data: give its raw_shape")
        if self.cmap is not None:
            from matplotlib import colormaps

            if self.cmap not in colormaps:
                raise ValueError(f"matplotlib has no colormap {self.cmap!r}")
        return self

    def _array(self) -> np.ndarray:
        if self.package == "skimage":
            import skimage.data

            return np.asarray(getattr(skimage.data, self.name)())
        from matplotlib.cbook import get_sample_data

        if self.npz_key is not None:
            with np.load(MatplotlibImage._path(self.name)) as z:
                return np.asarray(z[self.npz_key])
        with get_sample_data(self.name) as f:  # type: ignore[union-attr]  # a file object; .gz files come decompressed
            return np.frombuffer(f.read(), dtype="<u2").reshape(self.raw_shape)

    def load(self) -> Image.Image:
        a = self._array().astype(np.float64)
        if a.ndim != 2:
            raise ValueError(f"{self.name}: expected a 2-D array, got shape {a.shape}")
        lo, hi = float(a.min()), float(a.max())
        a = (a - lo) / (hi - lo) if hi > lo else np.zeros_like(a)
        if self.cmap is None:
            return Image.fromarray((a * 255).round().astype(np.uint8)).convert("RGB")
        from matplotlib import colormaps

        return Image.fromarray((colormaps[self.cmap](a)[:, :, :3] * 255).round().astype(np.uint8))


ImageSource = Annotated[
    SkimageImage | SklearnImage | MatplotlibImage | SignImage | SampleArrayImage, Field(discriminator="source")
]


# --------------------------------------------------------------------------------------------
# Degradations (egocentric-style query images)
# --------------------------------------------------------------------------------------------


def _fit(im: Image.Image, max_side: int) -> Image.Image:
    w, h = im.size
    s = max_side / max(w, h)
    if s < 1:
        im = im.resize((max(1, round(w * s)), max(1, round(h * s))), Image.Resampling.BICUBIC)
    return im


def reference_image(im: Image.Image) -> Image.Image:
    """KG reference: the clean original, trimmed by 3% on each side and at most 512 px."""
    w, h = im.size
    dx, dy = int(w * 0.03), int(h * 0.03)
    return _fit(im.crop((dx, dy, w - dx, h - dy)), 512)


def degrade(im: Image.Image, quality: str, rng: np.random.Generator, text: bool = False) -> Image.Image:
    """An egocentric-looking capture of `im` with one quality issue (the CRAG-MM image_quality label)."""
    im = _fit(im.convert("RGB"), 640)
    w, h = im.size
    # a slightly off-centre, slightly zoomed capture for every image
    z = rng.uniform(0.0, 0.04)
    ox, oy = rng.uniform(0, z) * w, rng.uniform(0, z) * h
    im = im.crop((int(ox), int(oy), int(w - (z * w - ox)), int(h - (z * h - oy))))
    w, h = im.size
    if quality == "low light":
        a = np.asarray(im).astype(np.float32) / 255.0
        a = (a**1.3) * rng.uniform(0.22, 0.32)
        a = a + rng.normal(0, 0.012, a.shape)
        im = Image.fromarray((np.clip(a, 0, 1) * 255).astype(np.uint8))
    elif quality == "blurred":
        r = (1.6 if text else 3.0) * max(w, h) / 640
        im = im.filter(ImageFilter.GaussianBlur(radius=r))
    elif quality == "truncated":
        fx, fy = rng.uniform(0.62, 0.75), rng.uniform(0.7, 0.85)
        cw, ch = int(w * fx), int(h * fy)
        x0 = int(rng.integers(0, w - cw + 1)) if rng.random() < 0.5 else w - cw
        y0 = int(rng.integers(0, h - ch + 1))
        im = im.crop((x0, y0, x0 + cw, y0 + ch))
    elif quality == "occluded":
        ow, oh = int(w * rng.uniform(0.3, 0.4)), int(h * rng.uniform(0.35, 0.5))
        x0 = int(rng.integers(0, w - ow + 1))
        y0 = h - oh if rng.random() < 0.6 else int(rng.integers(0, h - oh + 1))  # a hand from below, or a blob
        d = ImageDraw.Draw(im)
        color = tuple(int(c) for c in rng.choice([(196, 150, 120), (60, 60, 64), (225, 190, 160)]))
        d.ellipse((x0, y0, x0 + ow, y0 + oh + oh // 2), fill=color)
    elif quality == "rotated":
        im = im.rotate(90 if rng.random() < 0.5 else 270, expand=True)
    return im


def jpeg_bytes(im: Image.Image, quality: int = 90) -> bytes:
    buf = io.BytesIO()
    im.convert("RGB").save(buf, format="JPEG", quality=quality)
    return buf.getvalue()
