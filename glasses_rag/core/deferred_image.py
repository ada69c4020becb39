"""`DeferredImage`: a PIL image whose pixels are made on first use, as PIL's own file images decode on first use.

Its mode and size are known up front. A repeated photo is served by caches keyed on its content
(glasses_rag.core.hashing.remember_key: the model's data URL, the image search), which never touch its pixels: its
decode and the harness's 960x1280 resize (~15 ms of CPU) are then not paid at all. Any use of the pixels (`load`, `im`,
`tobytes`, numpy, `crop`, `resize`, `save`, ...) or of the file metadata (`info`) makes them, once, under a lock;
`make` is the code the eager path runs, so they are the pixels an eager run would have had.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from PIL import Image


class DeferredImage(Image.Image):
    def __init__(self, mode: str, size: tuple[int, int], make: Callable[[], Image.Image]):
        super().__init__()
        self._mode, self._size = mode, (int(size[0]), int(size[1]))
        self._make: Callable[[], Image.Image] | None = make
        self._made_lock = threading.Lock()

    @property
    def materialized(self) -> bool:
        return self._im is not None

    def _materialize(self) -> None:
        with self._made_lock:
            if self._im is not None:
                return
            assert self._make is not None
            made = self._make()
            made.load()
            if made.mode != self._mode or made.size != self._size:  # never: the eager path's own code made it
                raise ValueError(f"deferred image made {made.mode} {made.size}, expected {self._mode} {self._size}")
            self._info = made.info
            self._im = made.im
            self._make = None

    def load(self) -> Any:
        if self._im is None:
            self._materialize()
        return super().load()

    @property  # type: ignore[override]
    def im(self) -> Any:
        if self._im is None:
            self._materialize()
        return Image.Image.im.fget(self)  # type: ignore[attr-defined]

    @im.setter
    def im(self, im: Any) -> None:
        self._im = im

    @property  # type: ignore[override]
    def info(self) -> dict:  # the file's metadata comes with its pixels
        if self._im is None and getattr(self, "_make", None) is not None:
            self._materialize()
        return self._info

    @info.setter
    def info(self, info: dict) -> None:
        self._info = info
