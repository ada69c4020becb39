"""OCR with rapidocr (ONNX, weights bundled in the PyPI wheel), cached per image."""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict

import numpy as np
from pydantic import BaseModel


class OcrLine(BaseModel):
    text: str
    score: float
    box: list[list[float]]  # four (x, y) corners


class OcrEngine:
    name = "rapidocr"

    def __init__(self, min_score: float = 0.5, cache_size: int = 64, threads: int | None = None):
        from rapidocr import RapidOCR

        from glasses_rag.models.threads import cpu_threads

        threads = threads or cpu_threads()
        # rapidocr logs every model file it loads at INFO, and a photo without text at WARNING ("The text detection
        # result is empty", mid-progress-bar): errors only, to keep run output readable. One onnxruntime thread by
        # default: concurrent turns each get a core instead of fighting over all of them.
        self._engine = RapidOCR(
            params={
                "Global.log_level": "error",
                "EngineConfig.onnxruntime.intra_op_num_threads": threads,
                "EngineConfig.onnxruntime.inter_op_num_threads": threads,
            }
        )
        self.min_score = min_score
        self._lock = threading.Lock()  # onnxruntime sessions are shared across concurrent turns
        self._cache: OrderedDict[str, list[OcrLine]] = OrderedDict()
        self._cache_size = cache_size

    @staticmethod
    def _key(arr: np.ndarray) -> str:
        return hashlib.blake2b(arr.tobytes(), digest_size=16).hexdigest() + str(arr.shape)

    def read(self, image) -> list[OcrLine]:
        arr = np.ascontiguousarray(np.asarray(image.convert("RGB"))[:, :, ::-1])  # rapidocr expects BGR like cv2
        key = self._key(arr)
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
            res = self._engine(arr)
        lines: list[OcrLine] = []
        txts, scores, boxes = getattr(res, "txts", None), getattr(res, "scores", None), getattr(res, "boxes", None)
        if txts and scores is not None and boxes is not None:
            for text, score, box in zip(txts, scores, boxes):
                if float(score) >= self.min_score and text.strip():
                    lines.append(
                        OcrLine(text=text.strip(), score=float(score), box=np.asarray(box, dtype=float).tolist())
                    )
        with self._lock:
            self._cache[key] = lines
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return lines
