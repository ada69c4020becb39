"""Content hashes shared by the caches (search results, the web cache)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any


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
