"""Google Lens searches a public image URL: `publish_image` writes the image as JPEG to GLASSES_IMAGE_DIR (a folder
the operator serves at GLASSES_IMAGE_BASE_URL) and returns its URL; `prune_images` keeps that folder bounded.

Only files this module wrote (`<32 hex digits>.jpg`) are ever deleted: those older than `max_age_s`, then the
oldest until the folder's total is at most `max_bytes`. The image just published is never deleted (the search
that needs it follows at once). Pruning runs at most once a minute per folder.
"""

from __future__ import annotations

import hashlib
import io
import logging
import re
import threading
import time
from pathlib import Path
from typing import Any

from core.files import write_atomic

log = logging.getLogger(__name__)
OURS = re.compile(r"^[0-9a-f]{32}\.jpg$")
PRUNE_EVERY_S = 60.0
_LAST_PRUNE: dict[Path, float] = {}
_LOCK = threading.Lock()


def publish_image(image: Any, folder: Path, base_url: str, max_age_s: float, max_bytes: int) -> str:
    """The public URL of `image` (a PIL image), written to `folder` under a name made from its JPEG bytes."""
    buf = io.BytesIO()
    image.convert("RGB").save(buf, format="JPEG", quality=90)
    data = buf.getvalue()
    name = hashlib.sha256(data).hexdigest()[:32] + ".jpg"
    folder = Path(folder).expanduser()
    path = folder / name
    if path.exists():
        path.touch()  # in use again: pruned last
    else:
        write_atomic(path, data)
    with _LOCK:
        due = time.monotonic() - _LAST_PRUNE.get(folder, -PRUNE_EVERY_S) >= PRUNE_EVERY_S
        if due:
            _LAST_PRUNE[folder] = time.monotonic()
    if due:
        prune_images(folder, max_age_s, max_bytes, keep=name)
    return f"{base_url.rstrip('/')}/{name}"


def prune_images(folder: Path, max_age_s: float, max_bytes: int, keep: str | None = None) -> list[Path]:
    """Delete this module's images older than `max_age_s`, then the oldest beyond `max_bytes` in total; the
    deleted paths."""
    files = []
    for p in Path(folder).iterdir():
        if OURS.match(p.name) and p.name != keep:
            try:
                st = p.stat()
            except FileNotFoundError:
                continue
            files.append((st.st_mtime, st.st_size, p))
    kept_path = Path(folder) / keep if keep else None
    total = sum(size for _, size, _ in files) + (kept_path.stat().st_size if kept_path and kept_path.exists() else 0)
    now = time.time()
    deleted = []
    for mtime, size, p in sorted(files):
        if now - mtime > max_age_s or total > max_bytes:
            p.unlink(missing_ok=True)
            deleted.append(p)
            total -= size
    if deleted:
        log.info("pruned %d published image(s) from %s", len(deleted), folder)
    return deleted
