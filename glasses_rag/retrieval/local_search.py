"""`LocalSearchIndex`: an embedded SearchBackend over a local image KG and web corpus.

It reads a folder in the local index layout (`kg.json` + images, `web.json`; glasses_rag/crag_mm/content.py writes
one for each question set) and answers
with exactly the dicts of cragmm-search-pipeline's `UnifiedSearchPipeline`:

* image_search -> [{index, score, url, entities: [{entity_name, entity_attributes}]}]
* web_search   -> [{index, score, page_name, page_snippet, page_url}]

Scores are cosine similarities (1 - cosine distance, as the official code reports). Web pages are
split into chunks (name + snippet, then the content in sentence groups) whose ids are
`<page_url>_chunk_<i>`; results are deduplicated by page like the official `web_search`.
Embeddings are cached in `<root>/cache/` under a fingerprint of the data and the embedder name.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import re
import threading
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, ValidationError

from glasses_rag.core.files import write_atomic

log = logging.getLogger(__name__)


class KGEntity(BaseModel):
    model_config = ConfigDict(extra="allow")

    entity_name: str
    entity_attributes: dict[str, Any] | None = None


class KGRecord(BaseModel):
    """One image of kg.json."""

    model_config = ConfigDict(extra="allow")

    image_file: str
    url: str
    index: int | None = None
    entities: list[KGEntity]


class WebPage(BaseModel):
    """One page of web.json."""

    model_config = ConfigDict(extra="allow")

    page_url: str
    page_name: str = ""
    page_snippet: str = ""
    page_content: str = ""


def _records(path: Path, key: str, model: type[BaseModel]) -> list[dict[str, Any]]:
    """The entries of kg.json / web.json, each validated; a bad one is a one-line ValueError naming file and entry."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(
            f"{path} is missing (a local index folder holds kg.json, web.json and kg_images/)"
        ) from None
    except ValueError as e:
        raise ValueError(f"{path}: not valid JSON ({e})") from None
    except RecursionError:
        raise ValueError(f"{path}: nested too deeply to read") from None
    items = data.get(key) if isinstance(data, dict) else data
    if not isinstance(items, list):
        raise ValueError(f'{path}: expected a list of entries (or {{"{key}": [...]}})')
    out = []
    for i, item in enumerate(items):
        try:
            out.append(model.model_validate(item).model_dump())
        except ValidationError as e:
            err = e.errors()[0]
            where = ".".join(str(x) for x in err["loc"]) or "entry"
            raise ValueError(f"{path}: entry {i}: {where}: {err['msg']}") from None
    return out


def _valid_matrix(arr: np.ndarray, rows: int) -> bool:
    if arr.ndim != 2 or arr.shape[0] != rows or arr.dtype.kind != "f" or not np.isfinite(arr).all():
        return False
    norms = np.linalg.norm(arr, axis=1)
    return bool(rows == 0 or np.all(np.abs(norms - 1) < 1e-3))


def _embed_bulk(embedder: Any, texts: list[str]) -> np.ndarray:
    """Embed a corpus without filling the embedder's per-text cache (the matrix is kept here, and on disk)."""
    try:
        return embedder.embed(texts, cache=False)
    except TypeError:  # an embedder without a cache switch
        return embedder.embed(texts)


def _sha(*parts: Any) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p if isinstance(p, bytes) else str(p).encode())
        h.update(b"\0")
    return h.hexdigest()[:16]


def chunk_page(page: dict[str, Any], max_words: int = 60) -> list[str]:
    """Chunks of one page: title + snippet, then the content split into sentence groups."""
    name, snippet, content = page.get("page_name", ""), page.get("page_snippet", ""), page.get("page_content", "")
    chunks = [f"{name}. {snippet}".strip()]
    sentences = re.split(r"(?<=[.!?])\s+", content.strip()) if content else []
    cur: list[str] = []
    for s in sentences:
        if cur and len(" ".join(cur + [s]).split()) > max_words:
            chunks.append(f"{name}. {' '.join(cur)}")
            cur = []
        cur.append(s)
    if cur:
        chunks.append(f"{name}. {' '.join(cur)}")
    return chunks


class LocalSearchIndex:
    """SearchBackend over a local index folder (image KG + web pages), embedded in the process. Constructing it
    reads the folder and never builds one: prepare the data first (the CRAG-MM demo's: glasses_rag.crag_mm.demo).

    Args:
        root: the index folder (kg.json, web.json, kg_images/).
        image_embedder: embeds photos and KG images (default: the heuristic embedder).
        text_embedder: embeds page chunks and queries (default: loaded from `text_embedder_path` on first use).
        cache: keep embedding matrices under `root/cache/`.
        text_embedder_path: the text-embedding model folder.

    Example::

        index = LocalSearchIndex(ensure_demo().root)  # glasses_rag.crag_mm.demo builds data/demo/ once
        index.web_search("eiffel tower height", k=3)
    """

    def __init__(
        self,
        root: str | Path,
        image_embedder=None,
        text_embedder=None,
        cache: bool = True,
        text_embedder_path: str | Path | None = None,
    ):
        if not Path(root).is_dir():
            raise FileNotFoundError(
                f"local search index folder {root} does not exist: prepare the data first (a benchmark's comes "
                f"with its data; the demo's: python -m glasses_rag.crag_mm.demo), or give the folder of an index "
                f"(--index-dir)"
            )
        self.root = Path(root)
        self.cache_dir = self.root / "cache"
        self.use_cache = cache
        self.kg = _records(self.root / "kg.json", "images", KGRecord)
        self.pages = _records(self.root / "web.json", "pages", WebPage)
        self._page_by_url = {p["page_url"]: p for p in self.pages}
        self._entity_attrs: dict[str, dict] = {}
        for rec in self.kg:
            for e in rec.get("entities", []):
                self._entity_attrs.setdefault(e["entity_name"], e.get("entity_attributes"))
        if image_embedder is None:
            from glasses_rag.models.image_embedder import HeuristicImageEmbedder

            image_embedder = HeuristicImageEmbedder()
        self.image_embedder = image_embedder
        # the similarity under which an image match should not be trusted, for policies to read
        self.image_score_floor: float | None = getattr(image_embedder, "match_floor", None)
        self._text_embedder = text_embedder
        self._text_embedder_path = str(text_embedder_path) if text_embedder_path else None
        self._lock = threading.Lock()
        self._img_matrix: np.ndarray | None = None
        self._chunk_ids: list[str] = []
        self._chunk_urls: list[str] = []
        self._chunk_texts: list[str] = []
        for p in self.pages:
            for i, c in enumerate(chunk_page(p)):
                self._chunk_ids.append(f"{p['page_url']}_chunk_{i}")
                self._chunk_urls.append(p["page_url"])
                self._chunk_texts.append(c)
        self._text_matrix: np.ndarray | None = None

    # -- naming -------------------------------------------------------------------------------

    @property
    def text_embedder(self):
        if self._text_embedder is None:
            from glasses_rag.models.text_embedder import get_text_embedder

            self._text_embedder = get_text_embedder(self._text_embedder_path)
        return self._text_embedder

    @property
    def name(self) -> str:
        img = getattr(self.image_embedder, "name", type(self.image_embedder).__name__)
        if self._text_embedder is not None:
            txt = getattr(self._text_embedder, "name", "text")
        else:
            txt = f"text-embedder:{self._text_embedder_path}" if self._text_embedder_path else "minilm"
        if txt.startswith("minilm"):
            txt = "minilm"
        return f"local-{self.root.name}[{img} + {txt}]"

    # -- embedding caches ---------------------------------------------------------------------

    def _cached(self, kind: str, key: str, rows: int, compute) -> np.ndarray:
        """An embedding matrix from the disk cache when it is valid (rows x dim, finite, unit-norm rows),
        else computed and the cache rewritten atomically: a damaged or foreign cache is repaired, never trusted."""
        path = self.cache_dir / f"{kind}-{key}.npy"
        if self.use_cache and path.exists():
            try:
                arr = np.load(path, allow_pickle=False)
                if _valid_matrix(arr, rows):
                    return arr
                log.warning("embedding cache %s has the wrong shape or values %s; rebuilding it", path, arr.shape)
            except (OSError, ValueError) as e:
                log.warning("embedding cache %s unreadable (%s); rebuilding it", path, e)
        arr = np.asarray(compute(), dtype=np.float32)
        if self.use_cache:
            try:
                buf = io.BytesIO()
                np.save(buf, arr)
                write_atomic(path, buf.getvalue())
            except OSError as e:
                log.warning("could not write embedding cache %s: %s", path, e)
        return arr

    def _image_paths(self) -> list[Path]:
        return [self.root / rec["image_file"] for rec in self.kg]

    def image_matrix(self) -> np.ndarray:
        with self._lock:
            if self._img_matrix is None:
                paths = self._image_paths()
                key = _sha(self.image_embedder.name, *[(p.name, p.read_bytes()) for p in paths])

                def compute():
                    from PIL import Image

                    return self.image_embedder.embed([Image.open(p) for p in paths])

                self._img_matrix = self._cached("img", key, len(paths), compute)
            return self._img_matrix

    def text_matrix(self) -> np.ndarray:
        with self._lock:
            if self._text_matrix is None:
                emb = self.text_embedder
                key = _sha(getattr(emb, "name", "text"), *self._chunk_texts)
                self._text_matrix = self._cached(
                    "web", key, len(self._chunk_texts), lambda: _embed_bulk(emb, self._chunk_texts)
                )
            return self._text_matrix

    # -- SearchBackend ------------------------------------------------------------------------

    def image_search(self, image: Any, k: int = 5) -> list[dict[str, Any]]:
        """Top-k KG images by cosine similarity. `image`: PIL image, path, or a precomputed embedding."""
        if isinstance(image, np.ndarray) and image.ndim == 1:
            q = image.astype(np.float32)
        else:
            q = self.image_embedder.embed([image])[0]
        q = q / max(float(np.linalg.norm(q)), 1e-8)
        sims = self.image_matrix() @ q
        order = np.argsort(-sims, kind="stable")[: max(0, k)]
        out = []
        for i in order:
            rec = self.kg[int(i)]
            out.append(
                {
                    "index": int(rec.get("index", i)),
                    "score": float(np.clip(sims[i], -1.0, 1.0)),
                    "url": rec["url"],
                    "entities": [
                        {"entity_name": e["entity_name"], "entity_attributes": e.get("entity_attributes")}
                        for e in rec.get("entities", [])
                    ],
                }
            )
        return out

    def web_search(self, query: str, k: int = 5) -> list[dict[str, Any]]:
        """Top-k pages by the best chunk's cosine similarity, one result per page_url."""
        if not query or not query.strip() or k <= 0:
            return []
        q = self.text_embedder.embed([query])[0]
        sims = self.text_matrix() @ q
        best: dict[str, tuple[str, float]] = {}
        for i in np.argsort(-sims, kind="stable"):
            url = self._chunk_urls[int(i)]
            if url not in best:
                best[url] = (self._chunk_ids[int(i)], float(sims[i]))
                if len(best) >= k:
                    break
        out = []
        for url, (cid, score) in sorted(best.items(), key=lambda kv: -kv[1][1]):
            p = self._page_by_url[url]
            out.append(
                {
                    "index": cid,
                    "score": score,
                    "page_name": p["page_name"],
                    "page_snippet": p["page_snippet"],
                    "page_url": url,
                }
            )
        return out

    # -- extras -------------------------------------------------------------------------------

    def get_page(self, url: str) -> str | None:
        """Full page content for a page_url from web_search (None when unknown)."""
        p = self._page_by_url.get(url)
        return None if p is None else p.get("page_content", "")

    def get_entity(self, entity_name: str) -> dict | None:
        """KG attributes of an entity by exact name."""
        return self._entity_attrs.get(entity_name)

    def warm_up(self) -> LocalSearchIndex:
        self.image_matrix()
        self.text_matrix()
        return self
