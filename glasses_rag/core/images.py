"""Turning a dataset row's image into what the agent sees, safely and the way the official harness does.

- `load_image(cell)`: bytes, a path or a PIL image -> an RGB image, or None with a reason. Only regular files
  are opened (a FIFO or a device would block forever), reads are bounded, and decoding is bounded: a JPEG is
  decoded at reduced scale (`draft`) when that suffices, and an image whose full decode would exceed the pixel
  cap is refused instead of filling memory (a decompression bomb). EXIF orientation is applied.
- `prepare(image, egocentric)`: the harness's own transform (the KDD Cup 2025 / CRAG-MM batch iterators
  resize egocentric frames, i.e. rows without an image_url, to 960x1280 with PIL's default resampling),
  then a bound on the longest side.
- Photos are made on first use where caches keyed on their content may never need the pixels: bytes this process
  decoded before come back as a `glasses_rag.core.deferred_image.DeferredImage` (mode and size known, the decode
  known to succeed), and the 960x1280 resize of a photo with a content key is deferred the same way. A repeated photo
  whose data URL and image search are cached then costs no decode and no resize (~15 ms of CPU); any use of
  its pixels makes them, and they are the pixels the eager path makes.

Every change is listed in an `ImageInfo` that goes into the trace.

A dataset names images by path only where it holds no bytes; such a path must stay inside the dataset's own folder
(`glasses_rag.core.paths.confine`: symlinks resolved, a relative path taken from that folder), or inside an image
root the user named (`--image-root`, or the environment variable GLASSES_IMAGE_ROOT). Anything else is refused with
the reason, which the trace keeps; the turn runs without the image. A dataset thus never reads, shows or publishes a
private file.
"""

from __future__ import annotations

import hashlib
import io
import os
import stat
import threading
import warnings
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from glasses_rag.core.hashing import known_key, remember_key
from glasses_rag.core.paths import IMAGE_ROOT_ENV, confine  # noqa: F401 - confine re-exported (the loaders use it)
from glasses_rag.core.types import ImageInfo

EGOCENTRIC_SIZE = (960, 1280)  # (width, height), as the official iterators call image.resize((960, 1280))
MAX_SIDE = 2048
MAX_FILE_BYTES = 64 * 1024 * 1024
MAX_DECODE_PIXELS = 40_000_000  # ~120 MB as RGB: anything larger is refused unless a reduced decode fits
ImagePrep = Literal["harness", "native"]


def dataset_root(source: str | Path) -> Path:
    """The folder a dataset's image paths may point into: the dataset folder (a file's own folder); for a copy in
    the Hugging Face hub cache, its whole `datasets--owner--name` folder (snapshots link into its `blobs/`)."""
    p = Path(os.path.abspath(Path(source).expanduser()))
    p = p if p.is_dir() else p.parent
    for q in (p, *p.parents):
        if q.name == "snapshots" and q.parent.name.startswith("datasets--"):
            return q.parent
    return p


def allowed_roots(source: str | Path | None, image_root: str | Path | None = None) -> list[Path]:
    """The dataset's folder (first) and the image root the user named (`image_root`, else GLASSES_IMAGE_ROOT),
    each with its symlinks resolved."""
    extra = image_root if image_root not in (None, "") else os.environ.get(IMAGE_ROOT_ENV) or None
    base = [dataset_root(source)] if source is not None else []
    return [Path(os.path.realpath(r)) for r in (*base, *([Path(extra).expanduser()] if extra else []))]


def _read_bounded(path: str | Path) -> tuple[bytes | None, str | None]:
    p = Path(path)
    try:
        st = os.stat(p)
    except OSError as e:
        return None, f"image file not found: {p} ({type(e).__name__})"
    if not stat.S_ISREG(st.st_mode):
        return None, f"image path is not a regular file: {p}"
    if st.st_size > MAX_FILE_BYTES:
        return None, f"image file too large: {st.st_size} bytes > {MAX_FILE_BYTES}"
    try:
        # O_NONBLOCK: if the path was swapped for a FIFO after the check, open() must not block
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                return None, f"image path is not a regular file: {p}"
            return f.read(MAX_FILE_BYTES + 1)[:MAX_FILE_BYTES], None
    except OSError as e:
        return None, f"image file unreadable: {p} ({type(e).__name__}: {e})"


def _cell_parts(cell: Any) -> tuple[bytes | None, Any]:
    """(bytes, path) of a dataset image cell: an Image() dict, raw bytes, or a path."""
    if isinstance(cell, dict):
        return cell.get("bytes"), cell.get("path")
    if isinstance(cell, (bytes, bytearray, memoryview)):
        return bytes(cell), None
    return None, cell if isinstance(cell, (str, Path)) else None


def deferred_image(mode: str, size: tuple[int, int], make: Callable[[], Any]) -> Any:
    """A PIL image of this mode and size whose pixels are `make()`'s, made on first use
    (glasses_rag.core.deferred_image)."""
    from glasses_rag.core.deferred_image import DeferredImage

    return DeferredImage(mode, size, make)


class _DecodedSources:
    """What decoding a photo's bytes gave (sizes and transforms), by the bytes' SHA-256 and the size bound: a photo
    seen before is returned deferred (`DeferredImage`), its decode known to succeed. Bounded; a few hundred bytes
    an entry."""

    def __init__(self, max_items: int = 4096):
        self._lock = threading.Lock()
        self._seen: OrderedDict[tuple[str, int], ImageInfo] = OrderedDict()
        self._max = max_items

    def get(self, key: tuple[str, int]) -> ImageInfo | None:
        with self._lock:
            hit = self._seen.get(key)
            if hit is not None:
                self._seen.move_to_end(key)
            return hit

    def put(self, key: tuple[str, int], info: ImageInfo) -> None:
        with self._lock:
            self._seen[key] = info
            self._seen.move_to_end(key)
            while len(self._seen) > self._max:
                self._seen.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._seen.clear()


DECODED_SOURCES = _DecodedSources()


def load_image(cell: Any, max_side: int = MAX_SIDE) -> tuple[Any, ImageInfo]:
    """An RGB PIL image (or None) and what was done to it. Never raises for bad input. Bytes decoded before in
    this process are returned as a `DeferredImage` (decoded again only if its pixels are used)."""
    from PIL import Image

    info = ImageInfo()
    if cell is None:
        info.note = "no image given"
        return None, info
    if isinstance(cell, Image.Image):
        return _decode(cell, info, max_side)
    try:
        data, path = _cell_parts(cell)
        err = None
        if not data and path:
            data, err = _read_bounded(path)
        if not data:
            info.note = err or "no image given"
            return None, info
        info.source = str(path) if path else None
        # the source bytes' hash is both the trace's record and the photo's cache key (no pixel hashing)
        source_key = info.sha256 = hashlib.sha256(data).hexdigest()
    except Exception as e:  # noqa: BLE001 - a cell of the wrong type, as _decode's own failures
        info.note = f"corrupt image: could not be decoded: {type(e).__name__}: {e}"[:300]
        return None, info
    seen = DECODED_SOURCES.get((source_key, max_side))
    if seen is not None and seen.size is not None:  # (only decodes that succeeded are kept: size is set)
        info = info.model_copy(
            update={"original_size": seen.original_size, "size": seen.size, "transforms": list(seen.transforms)}
        )
        im = deferred_image("RGB", seen.size, lambda: _decode_bytes(data, max_side))
    else:
        im, info = _decode(data, info, max_side)
        if im is None:
            return None, info
        DECODED_SOURCES.put((source_key, max_side), info.model_copy(update={"transforms": list(info.transforms)}))
    remember_key(im, "decoded", source_key, max_side)  # its pixels are a function of the bytes
    return im, info


def _decode_bytes(data: bytes, max_side: int) -> Any:
    """The pixels `load_image` made from these bytes before (a `DeferredImage`'s `make`)."""
    im, info = _decode(data, ImageInfo(), max_side)
    if im is None:
        raise ValueError(info.note or "image could not be decoded again")
    return im


def _decode(source: Any, info: ImageInfo, max_side: int) -> tuple[Any, ImageInfo]:
    """`source` (bytes, or a PIL image handed in) decoded and bounded as `load_image` describes."""
    from PIL import Image, ImageOps

    try:
        if isinstance(source, Image.Image):
            im = source
        else:
            try:
                with warnings.catch_warnings():  # PIL's soft limit warns; our own pixel cap decides below
                    warnings.simplefilter("ignore", Image.DecompressionBombWarning)
                    im = Image.open(io.BytesIO(source))
            except Image.DecompressionBombError as e:  # over PIL's own hard limit: refused before decoding
                info.note = f"image too large to decode safely: {e}"[:300]
                return None, info
        w, h = im.size
        info.original_size = (w, h)
        if getattr(im, "_im", None) is not None:  # already decoded in memory: nothing left to bound
            pass
        elif w * h > MAX_DECODE_PIXELS and getattr(im, "format", None) == "JPEG":
            im.draft("RGB", (max_side, max_side))  # DCT-domain downscale: the full image is never decoded
            info.transforms.append(f"decoded at reduced scale {im.size[0]}x{im.size[1]}")
        if getattr(im, "_im", None) is None and im.size[0] * im.size[1] > MAX_DECODE_PIXELS:
            info.note = (
                f"image too large to decode safely ({w}x{h} = {w * h} pixels > {MAX_DECODE_PIXELS}); running without it"
            )
            return None, info
        im.load()
        orientation = im.getexif().get(0x0112)  # glasses photos often carry it
        if orientation in (2, 3, 4, 5, 6, 7, 8):
            im = ImageOps.exif_transpose(im)
            info.transforms.append(f"exif-transpose (orientation {orientation})")
        if im.width < 2 or im.height < 2:
            info.note = f"image too small ({im.width}x{im.height})"
            return None, info
        if im.mode != "RGB":
            im = im.convert("RGB")
        info.size = (im.width, im.height)
        return im, info
    except Exception as e:  # noqa: BLE001 - corrupt bytes, truncated files, unknown formats
        info.note = f"corrupt image: could not be decoded: {type(e).__name__}: {e}"[:300]
        return None, info


def prepare(
    image: Any, info: ImageInfo, egocentric: bool | None, mode: ImagePrep = "harness", max_side: int = MAX_SIDE
) -> tuple[Any, ImageInfo]:
    """The official harness's transform of egocentric frames (`mode="harness"`: from the loaded pixels, as the
    harness does), else the image bounded to `max_side`."""
    if image is None:
        return image, info
    source = image
    transforms = list(info.transforms)
    if mode == "harness" and egocentric:
        if image.size != EGOCENTRIC_SIZE:
            if known_key(source) is not None:  # content-keyed caches may never need its pixels: made on first use
                image = deferred_image(source.mode, EGOCENTRIC_SIZE, lambda: source.resize(EGOCENTRIC_SIZE))
            else:
                image = image.resize(EGOCENTRIC_SIZE)  # PIL's default resampling, as the harness
            transforms.append("resized to 960x1280 (official harness)")
    elif max(image.size) > max_side:  # rare (a photo over 2048 px): made at once
        image = image.copy()
        image.thumbnail((max_side, max_side))
        transforms.append(f"downscaled to {image.width}x{image.height}")
    key = known_key(source)
    if key is not None and image is not source:  # the caches key the photo by its source, not its 3.7 MB of pixels
        remember_key(image, "prepared", key, mode, bool(egocentric), max_side)
    return image, info.model_copy(update={"transforms": transforms, "size": (image.width, image.height)})
