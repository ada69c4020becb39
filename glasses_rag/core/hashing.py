"""Content hashes shared by the caches (search results, the web cache, encoded photos)."""

from __future__ import annotations

import hashlib
import threading
import weakref
from collections import OrderedDict
from pathlib import Path
from typing import Any


class KnownKeys:
    """Content keys of image objects whose pixels are a known function of a cheap key (the photo's file bytes and
    the transforms applied): hashing a 960x1280 photo's 3.7 MB of pixels costs milliseconds, its 40 KB source
    bytes microseconds. Keyed by object identity while the object lives (a reused id is a miss); bounded."""

    def __init__(self, max_items: int = 1024):
        self._lock = threading.Lock()
        self._keys: OrderedDict[int, tuple[weakref.ref, str]] = OrderedDict()
        self._max = max_items

    def get(self, obj: Any) -> str | None:
        with self._lock:
            hit = self._keys.get(id(obj))
            if hit is None or hit[0]() is not obj:
                return None
            return hit[1]

    def put(self, obj: Any, key: str) -> None:
        try:
            ref = weakref.ref(obj)
        except TypeError:
            return
        with self._lock:
            self._keys[id(obj)] = (ref, key)
            self._keys.move_to_end(id(obj))
            while len(self._keys) > self._max:
                self._keys.popitem(last=False)


KNOWN_KEYS = KnownKeys()


def remember_key(image: Any, *parts: Any) -> str:
    """Registers `image`'s content key as a hash of `parts` (what its pixels are a deterministic function of) and
    returns it. The image must not be changed in place afterwards (PIL operations return new objects, which are
    not registered). Example: `remember_key(im, "decoded", source_key, max_side)`."""
    h = hashlib.blake2b(digest_size=20)
    for p in parts:
        h.update(p if isinstance(p, bytes) else str(p).encode("utf-8", "replace"))
        h.update(b"\0")
    key = "k:" + h.hexdigest()
    KNOWN_KEYS.put(image, key)
    return key


def known_key(image: Any) -> str | None:
    """The key `remember_key` registered for this very object, if any."""
    return KNOWN_KEYS.get(image)


def cache_key(image: Any) -> str | None:
    """The key an in-memory cache files an image under: the key `remember_key` registered for it (no hashing of
    its pixels), else `image_key`. Not for caches kept on disk across versions (the registered key is derived
    differently from the pixel hash); those use `image_key`."""
    known = KNOWN_KEYS.get(image)
    return known if known is not None else image_key(image)


def image_key(image: Any) -> str | None:
    """A content hash of an image (PIL image, numpy array, bytes or a file path); None when it cannot be hashed."""
    h = hashlib.blake2b(digest_size=20)
    try:
        if isinstance(image, (bytes, bytearray, memoryview)):
            h.update(b"bytes\0")
            h.update(bytes(image))
            return h.hexdigest()
        if isinstance(image, (str, Path)):
            p = Path(image)
            if not p.is_file():
                return None
            h.update(b"file\0")
            h.update(p.read_bytes())
            return h.hexdigest()
        try:
            import numpy as np

            if isinstance(image, np.ndarray):
                arr = np.ascontiguousarray(image)
                h.update(f"ndarray\0{arr.dtype.str}\0{arr.shape}\0".encode())
                h.update(arr.tobytes())
                return h.hexdigest()
        except ImportError:  # pragma: no cover - numpy is a hard dependency of the project
            pass
        tobytes = getattr(image, "tobytes", None)
        mode, size = getattr(image, "mode", None), getattr(image, "size", None)
        if callable(tobytes) and mode is not None and size is not None:  # PIL.Image.Image
            h.update(f"pil\0{mode}\0{tuple(size)}\0".encode())
            h.update(tobytes())
            return h.hexdigest()
    except Exception:  # noqa: BLE001 - an unhashable image is simply not cached
        return None
    return None
