"""Question-set content as data, and the generator that turns it into a CRAG-MM-style dataset folder.

A content folder (the demo's is `glasses_rag/crag_mm/bundled/demo/`) holds four YAML files:

* `content.yaml`: name, version, random seed, site URL, session id prefix (a folder written before it was renamed
  still has a `benchmark.yaml`: read, with a deprecation warning);
* `entities.yaml`: the image-KG entities (image recipe, attributes, web pages about them), distractors too;
* `pages.yaml`: web pages about no entity (general knowledge, distractors, prompt-injection pages);
* `questions.yaml`: `single_turn` questions and `multi_turn` conversations, every field explicit (a set for tasks
  1-2 may have no conversation, one for task 3 no single-turn question).

A folder can extend a sibling one, or a bundled one by name from anywhere (`extends: demo` in its content.yaml):
it inherits the base's content.yaml keys it does not set (it must set its own `name` and `session_prefix`, so
that session ids never collide), and each of entities.yaml, pages.yaml and questions.yaml it does not have, e.g. a
paraphrase set that brings only its own questions.yaml. Bases may extend others; cycles are errors.

`load_content(folder)` validates them with the pydantic models below (unknown keys are errors; every
error names the file and the entry). `ensure_dataset(content, paths)` renders the images and writes,
unless an up-to-date copy is there:

* `single_turn/validation.parquet`, `multi_turn/validation.parquet`: rows in the real CRAG-MM v0.1.2
  layout (dict-of-lists `turns`/`answers`, ClassLabel-coded labels with the real label names and order),
  readable with `glasses_rag.crag_mm.dataset.load_conversations`. Egocentric rows have a null `image_url` (the official
  harness's rule); normal rows carry their URL and keep their image bytes (there is no network);
* `kg.json` + `kg_images/`: the image KG, one entity per reference image;
* `web.json`: the web corpus (page_url, page_name, page_snippet, page_content, about, prompt_injection);
* `questions.json`: per-interaction metadata (entity, kind, needs_web, needs_ocr, ...);
* `manifest.json`: name, version and content fingerprint; the folder is rebuilt when they change.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

import numpy as np
from PIL import Image, ImageColor, ImageDraw, ImageFilter, ImageFont
from pydantic import BaseModel, ConfigDict, Field, PlainValidator, ValidationError, field_validator, model_validator

from glasses_rag.text.nlp import IDK  # the benchmark's no-answer ground truth is the agent's abstention text

# Bump when rendering or the written layout changes: it is part of the fingerprint, so folders rebuild.
GENERATOR_VERSION = "2"

# Label names and their order, as in the real dataset's features (crag-mm-2025 dataset card,
# `dataset_info.features` of crag-mm-multi-turn-public): the parquet stores their indices.
Domain = Literal[
    "animal",
    "other",
    "shopping",
    "book",
    "general object recognition",
    "local",
    "vehicle",
    "plants and gardening",
    "style and fashion",
    "food",
    "text understanding",
    "sports and games",
    "math and science",
]
QueryCategory = Literal["reasoning", "simple-knowledge", "comparison", "simple-recognition", "multi-hop", "aggregation"]
Dynamism = Literal["fast-changing", "static", "slow-changing", "real-time"]
ImageQuality = Literal["rotated", "truncated", "occluded", "low light", "blurred", "normal"]
DOMAINS: list[str] = list(get_args(Domain))
QUERY_CATEGORIES: list[str] = list(get_args(QueryCategory))
DYNAMISM: list[str] = list(get_args(Dynamism))
IMAGE_QUALITY: list[str] = list(get_args(ImageQuality))

# What a question tests (questions.json `kind`; not a CRAG-MM label): recognition, kg (answer in the
# image KG), web (needs web search), ocr (text in the image), general (no image needed), ...
QuestionKind = Literal[
    "recognition", "kg", "web", "ocr", "multi-hop", "comparison", "aggregation", "no-answer", "general"
]


Slug = Annotated[str, Field(pattern=r"^[a-z0-9]+(-[a-z0-9]+)*$")]  # file names and URL paths


class ContentError(ValueError):
    """Invalid benchmark content; the message names the file and the entry."""


class _Model(BaseModel):
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


class SkimageImage(_Model):
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


class SklearnImage(_Model):
    """A sample photo bundled with scikit-learn (`sklearn.datasets.load_sample_image`)."""

    source: Literal["sklearn"]
    file: Literal["china.jpg", "flower.jpg"]

    def load(self) -> Image.Image:
        from sklearn.datasets import load_sample_image

        return to_pil(load_sample_image(self.file))


class MatplotlibImage(_Model):
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


class SignLine(_Model):
    text: str = Field(min_length=1)
    size: int = Field(gt=0)  # font size in pixels
    color: Color


class Stripe(_Model):
    box: tuple[int, int, int, int]  # x0, y0, x1, y1
    color: Color


class SignImage(_Model):
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


class SampleArrayImage(_Model):
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
# Content models
# --------------------------------------------------------------------------------------------


class ContentPage(_Model):
    slug: Slug  # page_url = <site>/wiki/<slug>
    title: str
    snippet: str
    content: str
    injection: bool = False  # carries prompt-injection text (web.json `prompt_injection`)


class Entity(_Model):
    slug: Slug  # kg_images/<slug>.png
    name: str
    domain: Domain
    image: ImageSource
    attrs: dict[str, str]
    pages: list[ContentPage] = []  # web pages about this entity (web.json `about` = name)
    distractor: bool = False  # in the KG to be confused with others; never asked about
    mostly_text: bool = False  # a sign or label: blurred captures stay legible


class ContentTurn(_Model):
    query: str = Field(min_length=1)
    answer: str = Field(min_length=1)  # IDK when nothing answers it
    domain: Domain
    query_category: QueryCategory
    dynamism: Dynamism
    kind: QuestionKind
    needs_web: bool
    needs_ocr: bool

    @model_validator(mode="after")
    def _no_answer(self) -> ContentTurn:
        if (self.answer == IDK) != (self.kind == "no-answer"):
            raise ValueError(f"kind 'no-answer' goes with the answer {IDK!r}, and only with it")
        return self


class _Image(_Model):
    """The picture a row asks about: a capture of `entity`'s image with one quality issue."""

    entity: Slug
    image_quality: ImageQuality
    # Required, null for an egocentric capture: the official harness calls a row egocentric only
    # when image_url is None. A URL marks a normal (web) image; its bytes are embedded too.
    image_url: Annotated[str, Field(pattern=r"^https?://\S+$")] | None


class SingleTurn(_Image, ContentTurn):
    pass


class MultiTurn(_Image):
    turns: list[ContentTurn] = Field(min_length=1)


class ContentInfo(_Model):
    name: str
    version: str  # written into kg.json and web.json
    seed: int  # of the random degradations of the query images
    site: Annotated[str, Field(pattern=r"^https?://\S+[^/]$")]  # <site>/images/<slug>.png, <site>/wiki/<slug>
    session_prefix: Slug  # session ids <prefix>-st-000, <prefix>-mt-000


class _EntitiesFile(_Model):
    entities: list[Entity] = Field(min_length=1)


class _PagesFile(_Model):
    pages: list[ContentPage]


class _QuestionsFile(_Model):
    # either may be left out (a set for tasks 1-2 only, or for task 3 only), not both; an empty one is not written
    # (`datasets` cannot write, nor size, an empty image table)
    single_turn: list[SingleTurn] = Field(default_factory=list)
    multi_turn: list[MultiTurn] = Field(default_factory=list)

    @model_validator(mode="after")
    def _some(self) -> _QuestionsFile:
        if not self.single_turn and not self.multi_turn:
            raise ValueError("no question: give single_turn questions (tasks 1, 2), multi_turn conversations (task 3)")
        return self


class Content(_Model):
    info: ContentInfo
    entities: list[Entity]
    pages: list[ContentPage]  # about no entity
    single_turn: list[SingleTurn]
    multi_turn: list[MultiTurn]

    def fingerprint(self) -> str:
        """Hash of the content and the generator version: a built folder is stale when it changes."""
        blob = json.dumps({"generator": GENERATOR_VERSION, "content": self.model_dump(mode="json")}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


# --------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------

FILES = {"info": "content.yaml", "entities": "entities.yaml", "pages": "pages.yaml", "questions": "questions.yaml"}
OLD_INFO = "benchmark.yaml"  # the header's name before it was content.yaml ("benchmark" names the evaluated one)


def info_file(folder: Path) -> Path:
    """A content folder's header, content.yaml; a folder that still has benchmark.yaml (its old name) is read with
    a deprecation warning."""
    path = folder / FILES["info"]
    old = folder / OLD_INFO
    if not path.is_file() and old.is_file():
        warnings.warn(f"{old}: rename it {FILES['info']} (benchmark.yaml is read, for now)", FutureWarning, 2)
        return old
    return path


def has_info(folder: Path) -> bool:
    """Is `folder` a content folder (it has a content.yaml, or the old benchmark.yaml)?"""
    return (folder / FILES["info"]).is_file() or (folder / OLD_INFO).is_file()


def _entry(raw: Any, loc: tuple) -> str:
    """`single_turn[3] {entity: latte, query: '...'} > dynamism` for a pydantic error location."""
    out, node = "", raw
    for key in loc:
        if (isinstance(node, dict) and key in node) or (
            isinstance(node, list) and isinstance(key, int) and key < len(node)
        ):
            node = node[key]
        else:
            node = None  # a union tag such as 'sign' or a missing key: keep naming, stop walking
        if isinstance(key, int):
            out += f"[{key}]"
            if isinstance(node, dict):
                ids = {k: node[k] for k in ("slug", "entity", "query") if isinstance(node.get(k), str)}
                if ids:
                    out += " {" + ", ".join(f"{k}: {v!r}" for k, v in ids.items()) + "}"
        else:
            out += f" > {key}" if out else str(key)
    return out or "(top level)"


MAX_FILE_BYTES = 16 << 20  # a content file is looked at before it is read; the bundled ones are under 100 KB


def _load_yaml(path: Path) -> Any:
    """A content file's data: no anchors or aliases, bounded nesting and size (glasses_rag.core.yaml_data)."""
    from glasses_rag.core.yaml_data import read_yaml

    try:
        return read_yaml(path, MAX_FILE_BYTES)
    except FileNotFoundError:
        raise ContentError(f"{path}: no such file") from None
    except OSError as e:
        raise ContentError(f"{path}: cannot read: {e}") from None
    except ValueError as e:  # YamlRefused: not valid YAML, an alias, too deep, too large
        raise ContentError(str(e)) from None


def _validate(path: Path, raw: Any, model: type[_Model]) -> Any:
    try:
        return model.model_validate(raw)
    except ValidationError as e:
        lines = [f"  {_entry(raw, err['loc'])}: {err['msg']}" for err in e.errors()]
        raise ContentError(f"{path}: {len(lines)} error(s)\n" + "\n".join(lines)) from None


class _Extends(_Model):
    extends: Slug  # a sibling folder name, never a path


@dataclass(frozen=True)
class _Resolved:
    """A folder's content info, where each content file comes from, and the chain of bases (self first)."""

    info: ContentInfo
    files: dict[str, Path]  # entities / pages / questions -> the YAML file read
    chain: tuple[tuple[Path, ContentInfo], ...]


_INHERITED = ("entities", "pages", "questions")
# A derived folder must name these itself: two sets sharing a session prefix would collide in runs and traces.
_OWN_KEYS = ("name", "session_prefix")


def _resolve(folder: Path, seen: tuple[Path, ...] = ()) -> _Resolved:
    """Read `folder/content.yaml`; with `extends: <base>`, resolve the sibling folder <base> first.

    A derived folder's content.yaml overrides its base's keys (name and session_prefix are required,
    the others are inherited), and each of entities.yaml, pages.yaml, questions.yaml is the folder's own
    when present, else its base's."""
    path = info_file(folder)
    raw = _load_yaml(path)
    if not (isinstance(raw, dict) and "extends" in raw):
        info = _validate(path, raw, ContentInfo)
        return _Resolved(info, {k: folder / FILES[k] for k in _INHERITED}, ((folder, info),))

    base_name = _validate(path, {"extends": raw["extends"]}, _Extends).extends
    base = folder.parent / base_name
    if not base.is_dir() and has_info(BUNDLED / base_name):  # a bundled set, from a folder anywhere
        base = BUNDLED / base_name
    here = seen + (folder.resolve(),)
    if base.resolve() in here:
        names = " -> ".join([f.name for f in here] + [base_name])
        raise ContentError(f"{path}: extends {base_name!r} makes a cycle: {names}")
    if not base.is_dir():
        known = sorted(f.name for f in folder.parent.iterdir() if has_info(f) and f != folder)
        raise ContentError(
            f"{path}: extends {base_name!r}: no content folder {base} "
            f"(content folders next to it: {', '.join(known) or 'none'}; bundled: {', '.join(bundled_names())})"
        )
    if not has_info(base):
        raise ContentError(f"{path}: extends {base_name!r}, but {base / FILES['info']} does not exist")
    parent = _resolve(base, here)

    missing = [k for k in _OWN_KEYS if k not in raw]
    if missing:
        raise ContentError(
            f"{path}: a folder that extends {base_name!r} names its own {' and '.join(_OWN_KEYS)} "
            f"(missing: {', '.join(missing)})"
        )
    own = {k: v for k, v in raw.items() if k != "extends"}
    info = _validate(path, {**parent.info.model_dump(), **own}, ContentInfo)
    for anc_folder, anc in parent.chain:
        for k in _OWN_KEYS:
            if getattr(info, k) == getattr(anc, k):
                raise ContentError(
                    f"{path}: {k} {getattr(info, k)!r} is also the {k} of "
                    f"{info_file(anc_folder)}: a derived set needs its own"
                )
    files = {k: folder / FILES[k] if (folder / FILES[k]).exists() else parent.files[k] for k in _INHERITED}
    return _Resolved(info, files, ((folder, info),) + parent.chain)


def _cross_check(files: dict[str, Path], c: Content) -> list[str]:
    """What one file cannot check alone: unique slugs, questions about known, non-distractor entities."""
    errs: list[str] = []
    ents = files["entities"]
    by_slug: dict[str, Entity] = {}
    for i, e in enumerate(c.entities):
        if e.slug in by_slug:
            errs.append(f"{ents}: entities[{i}] {{slug: {e.slug!r}}}: slug used twice")
        by_slug.setdefault(e.slug, e)
    page_slugs: set[str] = set()
    pages = [
        (ents, f"entities[{i}] {{slug: {e.slug!r}}} > pages[{j}]", p)
        for i, e in enumerate(c.entities)
        for j, p in enumerate(e.pages)
    ]
    pages += [(files["pages"], f"pages[{j}]", p) for j, p in enumerate(c.pages)]
    for path, where, p in pages:
        if p.slug in page_slugs:
            errs.append(f"{path}: {where} {{slug: {p.slug!r}}}: page slug used twice (page URLs must be unique)")
        page_slugs.add(p.slug)
    qs = files["questions"]
    for part, rows in (("single_turn", c.single_turn), ("multi_turn", c.multi_turn)):
        for i, q in enumerate(rows):
            asked = by_slug.get(q.entity)
            if asked is None:
                errs.append(f"{qs}: {part}[{i}] {{entity: {q.entity!r}}}: no such entity in {ents}")
            elif asked.distractor:
                errs.append(f"{qs}: {part}[{i}] {{entity: {q.entity!r}}}: a distractor entity is never asked about")
    return errs


def load_content(folder: str | Path) -> Content:
    """Read and validate a content folder (resolving `extends`); ContentError names the file and entry of
    every problem."""
    r = _resolve(Path(folder))
    ents = _validate(r.files["entities"], _load_yaml(r.files["entities"]), _EntitiesFile)
    pages = _validate(r.files["pages"], _load_yaml(r.files["pages"]), _PagesFile)
    qs = _validate(r.files["questions"], _load_yaml(r.files["questions"]), _QuestionsFile)
    c = Content(
        info=r.info, entities=ents.entities, pages=pages.pages, single_turn=qs.single_turn, multi_turn=qs.multi_turn
    )
    errs = _cross_check(r.files, c)
    if errs:
        raise ContentError("\n".join(errs))
    return c


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


def _jpeg(im: Image.Image, quality: int = 90) -> bytes:
    buf = io.BytesIO()
    im.convert("RGB").save(buf, format="JPEG", quality=quality)
    return buf.getvalue()


# --------------------------------------------------------------------------------------------
# Writing a dataset folder
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DatasetPaths:
    root: Path
    single_turn: Path  # folder with validation.parquet
    multi_turn: Path
    kg_json: Path
    web_json: Path
    kg_images: Path
    questions_json: Path
    manifest: Path
    cache: Path  # embedding caches of glasses_rag.retrieval.local_search


def dataset_paths(root: str | Path) -> DatasetPaths:
    root = Path(root)
    return DatasetPaths(
        root=root,
        single_turn=root / "single_turn",
        multi_turn=root / "multi_turn",
        kg_json=root / "kg.json",
        web_json=root / "web.json",
        kg_images=root / "kg_images",
        questions_json=root / "questions.json",
        manifest=root / "manifest.json",
        cache=root / "cache",
    )


def question_set_root(spec: str | Path) -> Path | None:
    """The root of a built question set (the layout above: kg.json beside single_turn/ and multi_turn/) that `spec`
    names, as its root or as one of its two dataset folders; None for anything else (a dataset of one's own).
    Example: `question_set_root("data/heldout/single_turn")` -> Path("data/heldout")."""
    p = Path(spec)
    root = p.parent if p.name in ("single_turn", "multi_turn") else p
    parts = (dataset_paths(root).single_turn, dataset_paths(root).multi_turn)
    return root if (root / "kg.json").is_file() and any(x.is_dir() for x in parts) else None


def _features():
    from datasets import ClassLabel, Features, Sequence, Value
    from datasets import Image as HFImage

    return Features(
        {
            "session_id": Value("string"),
            "image": HFImage(),
            "image_url": Value("string"),
            "turns": Sequence(
                {
                    "interaction_id": Value("string"),
                    "domain": ClassLabel(names=DOMAINS),
                    "query_category": ClassLabel(names=QUERY_CATEGORIES),
                    "dynamism": ClassLabel(names=DYNAMISM),
                    "query": Value("string"),
                    "image_quality": ClassLabel(names=IMAGE_QUALITY),
                }
            ),
            "answers": Sequence({"interaction_id": Value("string"), "ans_full": Value("string")}),
        }
    )


@contextmanager
def quiet_datasets() -> Iterator[None]:
    """No `datasets` progress bars ("Creating parquet from Arrow format") inside; the library's setting is restored
    after (it is process-wide: a caller's own choice is kept)."""
    import datasets

    was_disabled = datasets.are_progress_bars_disabled()
    datasets.disable_progress_bars()
    try:
        yield
    finally:
        if not was_disabled:
            datasets.enable_progress_bars()


def _write_parquet(rows: list[dict], folder: Path) -> None:
    """The rows as folder/validation.parquet; no rows, no folder (a set without conversations has no multi_turn/)."""
    from datasets import Dataset

    if not rows:
        return
    folder.mkdir(parents=True, exist_ok=True)
    with quiet_datasets():
        Dataset.from_list(rows, features=_features()).to_parquet(str(folder / "validation.parquet"))


def _render(e: Entity) -> Image.Image:
    try:
        return e.image.load()
    except Exception as x:  # a missing sample file, a download-only skimage image, ...
        raise ContentError(f"{FILES['entities']}: entity {e.slug!r}: cannot render its image: {x}") from x


def _write(c: Content, p: DatasetPaths) -> None:
    info = c.info
    p.kg_images.mkdir(parents=True, exist_ok=True)
    originals: dict[str, Image.Image] = {}
    kg = []
    for i, e in enumerate(c.entities):
        originals[e.slug] = im = _render(e)
        fname = f"{e.slug}.png"
        reference_image(im).save(p.kg_images / fname, format="PNG", optimize=False)
        kg.append(
            {
                "index": i,
                "image_file": f"kg_images/{fname}",
                "url": f"{info.site}/images/{fname}",
                "entities": [{"entity_name": e.name, "entity_attributes": e.attrs}],
                "domain": e.domain,
                "slug": e.slug,
                "distractor": e.distractor,
            }
        )
    about = [(pg, e.name) for e in c.entities for pg in e.pages] + [(pg, None) for pg in c.pages]
    web = [
        {
            "page_url": f"{info.site}/wiki/{pg.slug}",
            "page_name": pg.title,
            "page_snippet": pg.snippet,
            "page_content": pg.content,
            "about": name,
            "prompt_injection": pg.injection,
        }
        for pg, name in about
    ]

    by_slug = {e.slug: e for e in c.entities}
    rng = np.random.default_rng(info.seed)  # one stream, drawn row by row: single-turn rows, then multi-turn
    meta: dict[str, dict] = {}

    def row(session_id: str, pic: _Image, turns: list[ContentTurn]) -> dict:
        e = by_slug[pic.entity]
        im = degrade(originals[e.slug], pic.image_quality, rng, text=e.mostly_text)
        t: dict[str, list] = {
            k: [] for k in ("interaction_id", "domain", "query_category", "dynamism", "query", "image_quality")
        }
        a: dict[str, list] = {"interaction_id": [], "ans_full": []}
        for j, turn in enumerate(turns):
            iid = f"{session_id}-t{j}"
            t["interaction_id"].append(iid)
            t["domain"].append(DOMAINS.index(turn.domain))
            t["query_category"].append(QUERY_CATEGORIES.index(turn.query_category))
            t["dynamism"].append(DYNAMISM.index(turn.dynamism))
            t["query"].append(turn.query)
            t["image_quality"].append(IMAGE_QUALITY.index(pic.image_quality))
            a["interaction_id"].append(iid)
            a["ans_full"].append(turn.answer)
            meta[iid] = {
                "session_id": session_id,
                "turn": j,
                "entity": e.name,
                "entity_slug": e.slug,
                "kind": turn.kind,
                "needs_web": turn.needs_web,
                "needs_ocr": turn.needs_ocr,
                "no_answer": turn.answer == IDK,
                "image_quality": pic.image_quality,
                "query": turn.query,
                "answer": turn.answer,
            }
        return {
            "session_id": session_id,
            "image": {"bytes": _jpeg(im), "path": None},
            "image_url": pic.image_url,
            "turns": t,
            "answers": a,
        }

    prefix = info.session_prefix
    single = [row(f"{prefix}-st-{n:03d}", q, [q]) for n, q in enumerate(c.single_turn)]
    multi = [row(f"{prefix}-mt-{n:03d}", m, m.turns) for n, m in enumerate(c.multi_turn)]
    _write_parquet(single, p.single_turn)
    _write_parquet(multi, p.multi_turn)
    p.kg_json.write_text(json.dumps({"version": info.version, "images": kg}, indent=1))
    p.web_json.write_text(json.dumps({"version": info.version, "pages": web}, indent=1))
    p.questions_json.write_text(json.dumps(meta, indent=1))


def _manifest_ok(p: DatasetPaths, c: Content, fp: str) -> bool:
    try:
        m = json.loads(p.manifest.read_text())
    except (OSError, ValueError):
        return False
    if m.get("fingerprint") != fp or m.get("version") != c.info.version:
        return False
    need = [
        *([p.single_turn / "validation.parquet"] if c.single_turn else []),
        *([p.multi_turn / "validation.parquet"] if c.multi_turn else []),
        p.kg_json,
        p.web_json,
        p.questions_json,
    ]
    return all(x.exists() for x in need)


BUILT_BY = "glasses_rag.crag_mm.content"  # in every manifest.json a build writes: what may be deleted to rebuild
_LEGACY_MANIFEST = {"name", "version", "fingerprint", "n_single_turn", "n_multi_turn", "n_kg_images"}


def is_build(folder: Path) -> bool:
    """Does `folder` hold a build of this module's (its manifest.json says so, or has exactly the keys one written
    before `built_by` had)? Only such a folder is ever deleted to make room for a new build."""
    from glasses_rag.core.files import read_bounded

    try:
        m = json.loads(read_bounded(Path(folder) / "manifest.json", 1 << 16))
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(m, dict) and (m.get("built_by") == BUILT_BY or set(m) == _LEGACY_MANIFEST)


def content_build(folder: str | Path, data_dir: str | Path) -> DatasetPaths:
    """Where the dataset of the content folder `folder` is built: `data_dir/<the folder's real name>` (`--data .`
    from inside a content folder names it by its real name, never `data_dir` itself).

    Example: `content_build("bundled/heldout", "data").root` -> data/heldout."""
    from glasses_rag.core.paths import folder_name

    return dataset_paths(Path(data_dir) / folder_name(Path(folder).resolve().name, "a content folder's name"))


def ensure_dataset(c: Content, p: DatasetPaths, force: bool = False) -> DatasetPaths:
    """Write the dataset for `c` at `p.root` unless an up-to-date copy is there (built aside, then swapped in). The
    folder replaced must be a build of ours directly inside its parent (glasses_rag.core.paths.remove_build):
    `p.root` naming '.', '..', a link or a folder of the user's is refused before anything is built or deleted."""
    from filelock import FileLock

    from glasses_rag.core.paths import check_removable, named_folder, remove_build

    root = named_folder(p.root, "a question set's dataset folder")
    p = dataset_paths(root) if root != p.root else p
    fp = c.fingerprint()
    if not force and _manifest_ok(p, c, fp):
        return p
    root.parent.mkdir(parents=True, exist_ok=True)
    # one builder at a time (two runs, or parallel test workers, asking for the same dataset): the others wait
    # and then find it built
    with FileLock(str(root.parent / f".{root.name}.build.lock")):
        if not force and _manifest_ok(p, c, fp):
            return p
        check_removable(root, root.parent, is_build, "question set's dataset")  # refused before any build
        tmp = Path(tempfile.mkdtemp(prefix=f".{root.name}-build-", dir=root.parent))
        try:
            _build_into(c, fp, tmp)
            remove_build(root, root.parent, is_build, "question set's dataset")
            os.replace(tmp, root)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return p


def _build_into(c: Content, fp: str, folder: Path) -> None:
    tp = dataset_paths(folder)
    _write(c, tp)
    manifest = {
        "name": c.info.name,
        "version": c.info.version,
        "fingerprint": fp,
        "n_single_turn": len(c.single_turn),
        "n_multi_turn": len(c.multi_turn),
        "n_kg_images": len(c.entities),
        "built_by": BUILT_BY,
    }
    tp.manifest.write_text(json.dumps(manifest, indent=1))


BUNDLED = Path(__file__).resolve().parent / "bundled"


def find_content(spec: str | Path) -> Path | None:
    """The content folder `spec` names: a bundled one by name (`demo`, `demo-paraphrase`, `heldout`, ...) or
    any folder holding a content.yaml. None when `spec` is not one (e.g. a folder of parquet files)."""
    s = str(spec)
    if s and "/" not in s and "\\" not in s and has_info(BUNDLED / s):
        return BUNDLED / s
    p = Path(s)
    return p if has_info(p) else None


def bundled_names() -> list[str]:
    return sorted(d.name for d in BUNDLED.iterdir() if has_info(d))
