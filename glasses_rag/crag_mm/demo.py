"""The embedded demo benchmark: a small, offline, deterministic CRAG-MM look-alike.

Its content is data, `glasses_rag/crag_mm/bundled/demo/*.yaml` (entities with image recipes, KG attributes and web
pages; pages about no entity; questions); `glasses_rag.crag_mm.content` validates and renders it. `ensure_demo()`
writes it under `data/demo/` of the working directory by default (gitignored; GLASSES_DEMO_DIR overrides) in the
layout described in `glasses_rag.crag_mm.content`: `single_turn/` and `multi_turn/validation.parquet` (real
CRAG-MM v0.1.2 layout), `kg.json` + `kg_images/`, `web.json`, `questions.json` and `manifest.json`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from glasses_rag.crag_mm.builds import DatasetPaths as DemoPaths
from glasses_rag.crag_mm.builds import dataset_paths, ensure_dataset
from glasses_rag.crag_mm.content import DOMAINS, DYNAMISM, IDK, IMAGE_QUALITY, QUERY_CATEGORIES, Content, load_content

if TYPE_CHECKING:
    from glasses_rag.retrieval.local_search import LocalSearchIndex

__all__ = [
    "DOMAINS",
    "DYNAMISM",
    "IDK",
    "IMAGE_QUALITY",
    "QUERY_CATEGORIES",
    "DEMO_CONTENT",
    "DEFAULT_ROOT",
    "DemoPaths",
    "demo_paths",
    "demo_content",
    "fingerprint",
    "ensure_demo",
    "make_demo_search",
    "load_kg",
    "load_web",
    "load_question_meta",
]

DEMO_CONTENT = Path(__file__).resolve().parent / "bundled" / "demo"
# Under the working directory (as runs are, glasses_rag.harness.run_options), never inside the installed package: from
# a checkout's root, the checkout's data/demo/ as before; GLASSES_DEMO_DIR or --demo-dir name another folder.
DEFAULT_ROOT = Path("data") / "demo"


def demo_paths(root: Path | None = None) -> DemoPaths:
    return dataset_paths(root or os.environ.get("GLASSES_DEMO_DIR") or Path.cwd() / DEFAULT_ROOT)


def demo_content() -> Content:
    return load_content(DEMO_CONTENT)


def fingerprint() -> str:
    """Content fingerprint of the demo (questions, KG, pages, images recipes, generator version)."""
    return demo_content().fingerprint()


def ensure_demo(root: Path | None = None, force: bool = False) -> DemoPaths:
    """Build the demo benchmark under `root` (default data/demo/ of the working directory) unless an up-to-date copy
    is there."""
    return ensure_dataset(demo_content(), demo_paths(root), force=force)


def make_demo_search(root: Path | None = None, clip_path: Path | None = None) -> LocalSearchIndex:
    """The demo benchmark prepared (built unless up to date), then its index constructed (heuristic or CLIP image
    embeddings + MiniLM)."""
    from glasses_rag.models.image_embedder import make_image_embedder
    from glasses_rag.retrieval.local_search import LocalSearchIndex

    paths = ensure_demo(root)
    return LocalSearchIndex(paths.root, image_embedder=make_image_embedder(clip_path))


def load_kg(p: DemoPaths) -> list[dict]:
    return json.loads(p.kg_json.read_text())["images"]


def load_web(p: DemoPaths) -> list[dict]:
    return json.loads(p.web_json.read_text())["pages"]


def load_question_meta(p: DemoPaths) -> dict[str, dict]:
    return json.loads(p.questions_json.read_text())


if __name__ == "__main__":
    import time

    t0 = time.time()
    paths = ensure_demo(force=True)
    print(f"demo built in {time.time() - t0:.1f}s at {paths.root}")
