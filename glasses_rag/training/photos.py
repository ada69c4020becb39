"""A training example's photo is the photo the model is sent: the export keeps the JPEG bytes of the request's data
URL (`glasses_rag.models.vlm.vision_inputs.model_photo`: the policy's `image_max_side`, quality 90) and writes them
as the example's image file, so a dynamic-resolution model (Qwen2.5-VL) gets the same pixels, and so the same number
of image tokens, at training and at inference (in-process, where the backend decodes the same bytes, and served,
where the server does).
"""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path
from typing import Any

from glasses_rag.core.files import write_atomic

DATA_URL = "data:"


def sent_photos(prompt: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """The prompt with each image part as TRL's `{"type": "image"}`, and the data URLs those parts held, in order."""
    out, urls = [], []
    for message in prompt:
        content = message.get("content")
        if not isinstance(content, list):
            out.append(message)
            continue
        parts = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "image_url":
                url = part.get("image_url")
                urls.append(str(url.get("url") if isinstance(url, dict) else url))
                parts.append({"type": "image"})
            else:
                parts.append(part)
        out.append({**message, "content": parts})
    return out, urls


def photo_file(url: str, folder: Path) -> str:
    """The data URL's bytes written once to `folder/<hash>.jpg` (content-addressed); the file's absolute path."""
    data = base64.b64decode(url.split(",", 1)[1])
    path = folder / f"{hashlib.sha256(data).hexdigest()[:24]}.jpg"
    if not path.is_file() or path.is_symlink():
        write_atomic(path, data, sync=False)  # beside it, then renamed: never through a link at either name
    return str(path.resolve())


def photo_folder(out: str | Path) -> Path:
    """Where the photos of the export `out` go: `<out without suffix>.images/` beside it."""
    p = Path(out)
    return p.with_name(p.stem + ".images")


def with_photo_files(images: list[str] | None, out: str | Path) -> list[str] | None:
    """`images` with each data URL replaced by its file in the export's photo folder (paths stay as they are)."""
    if not images:
        return images
    return [photo_file(i, photo_folder(out)) if i.startswith(DATA_URL) else i for i in images]


__all__ = ["photo_file", "photo_folder", "sent_photos", "with_photo_files"]
