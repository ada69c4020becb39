"""Google Lens searches a public image URL: `publish_image` writes the image as JPEG to GLASSES_IMAGE_DIR (a folder
the operator serves at GLASSES_IMAGE_BASE_URL) and returns its URL; `prune_images` keeps that folder bounded.

What this module wrote is listed in the folder's own manifest (`.glasses-published.json`, written atomically, under a
file lock shared by every process publishing there); pruning deletes only files named there (and named
`<32 hex digits>.jpg`): those older than `max_age_s`, then the oldest until their total is at most `max_bytes`.
A file of the same name that was already there is used as it is and never listed, so never deleted; nor is the
image just published (the search that needs it follows at once). Pruning runs at most once a minute per folder.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import re
import threading
import time
from pathlib import Path
from typing import Any

from filelock import FileLock
from pydantic import BaseModel, Field, ValidationError

from glasses_rag.core.files import write_atomic

log = logging.getLogger(__name__)
OURS = re.compile(r"^[0-9a-f]{32}\.jpg$")
MANIFEST = ".glasses-published.json"
PRUNE_EVERY_S = 60.0
_LAST_PRUNE: dict[Path, float] = {}
_LOCK = threading.Lock()


class Published(BaseModel):
    """The manifest: the names of the images this module wrote into the folder (nothing else is ever deleted)."""

    files: list[str] = Field(default_factory=list)

    def names(self) -> list[str]:
        return [n for n in dict.fromkeys(self.files) if OURS.match(n)]  # a tampered entry never names another path


def _read_manifest(folder: Path) -> Published:
    try:
        return Published.model_validate(json.loads((folder / MANIFEST).read_text(encoding="utf-8")))
    except FileNotFoundError:
        return Published()
    except (OSError, ValueError, RecursionError, ValidationError) as e:  # unreadable: nothing is known to be ours
        log.warning("Lens image manifest %s unreadable (%s); starting a new one", folder / MANIFEST, type(e).__name__)
        return Published()


def _write_manifest(folder: Path, published: Published) -> None:
    write_atomic(folder / MANIFEST, published.model_dump_json())


def _folder_lock(folder: Path) -> FileLock:
    return FileLock(str(folder / f"{MANIFEST}.lock"), timeout=30)


def publish_image(image: Any, folder: Path, base_url: str, max_age_s: float, max_bytes: int) -> str:
    """The public URL of `image` (a PIL image), written to `folder` under a name made from its JPEG bytes.

    Example: `publish_image(Image.new("RGB", (8, 8)), Path("/srv/img"), "https://img.example", 86400, 2**28)`."""
    buf = io.BytesIO()
    image.convert("RGB").save(buf, format="JPEG", quality=90)
    data = buf.getvalue()
    name = hashlib.sha256(data).hexdigest()[:32] + ".jpg"
    folder = Path(folder).expanduser()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    with _folder_lock(folder):
        if path.exists():
            path.touch()  # in use again: pruned last
        else:
            write_atomic(path, data)
            # served by the operator's web server: readable by whoever may read the folder (0755 -> 0644), not by
            # the umask of this run (a run's own outputs keep that)
            path.chmod(0o600 | (folder.stat().st_mode & 0o044))
            published = _read_manifest(folder)
            _write_manifest(folder, Published(files=[*published.names(), name]))
    with _LOCK:
        due = time.monotonic() - _LAST_PRUNE.get(folder, -PRUNE_EVERY_S) >= PRUNE_EVERY_S
        if due:
            _LAST_PRUNE[folder] = time.monotonic()
    if due:
        prune_images(folder, max_age_s, max_bytes, keep=name)
    return f"{base_url.rstrip('/')}/{name}"


def prune_images(folder: Path, max_age_s: float, max_bytes: int, keep: str | None = None) -> list[Path]:
    """Delete the manifest's images older than `max_age_s`, then its oldest beyond `max_bytes` in total; the
    deleted paths. Files the manifest does not name are never touched."""
    folder = Path(folder)
    with _folder_lock(folder):
        listed = _read_manifest(folder).names()
        files, present = [], []
        for name in listed:
            try:
                st = (folder / name).lstat()
            except FileNotFoundError:
                continue  # deleted by someone else: forgotten
            present.append(name)
            if name != keep:
                files.append((st.st_mtime, st.st_size, folder / name))
        kept_path = folder / keep if keep else None
        total = sum(size for _, size, _ in files) + (
            kept_path.stat().st_size if kept_path and kept_path.exists() else 0
        )
        now = time.time()
        deleted = []
        for mtime, size, p in sorted(files):
            if now - mtime > max_age_s or total > max_bytes:
                p.unlink(missing_ok=True)
                deleted.append(p)
                total -= size
        if deleted or len(present) != len(listed):
            gone = {p.name for p in deleted}
            _write_manifest(folder, Published(files=[n for n in present if n not in gone]))
    if deleted:
        log.info("pruned %d published image(s) from %s", len(deleted), folder)
    return deleted
