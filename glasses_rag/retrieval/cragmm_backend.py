"""The official CRAG-MM search (`cragmm_search.search.UnifiedSearchPipeline`) over LOCAL folders.

The package loads its indexes with ``huggingface_hub.snapshot_download(repo_id=...)`` and its models
with ``from_pretrained(name)``.  :class:`CragMMSearch` passes local folders as those names and, while
the pipeline is built, replaces ``snapshot_download`` (in ``cragmm_search.image_search_mock_api.image_kg``
and in ``huggingface_hub``, which ``web_search.index_web_data`` imports at call time) by a function
that returns the folder itself when given an existing directory.  Nothing is downloaded: a repo id
that is not a local folder raises.

Index layout (the official one, what :func:`build_cragmm_index` writes):

* image index folder: ChromaDB persistent dir, collection ``image_embeddings`` (cosine), ids
  ``"0".."n-1"``, metadatas ``image_url``, ``entities`` (JSON: a name or a list of names) and ``info``
  (JSON: {entity_name: attributes}); embeddings = L2-normalised CLIP image features;
* web index folder: ChromaDB persistent dir, collection ``web_search_embeddings`` (cosine), ids
  ``"<page_url>_chunk_<i>"`` (chunk 0 = "page_name page_snippet", then 512-word chunks of the page
  text), metadatas ``page_name``, ``page_snippet``, ``page_url``; embeddings = mean-pooled,
  L2-normalised text-model features.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from glasses_rag.retrieval.schema import plain

log = logging.getLogger(__name__)

IMAGE_COLLECTION = "image_embeddings"
WEB_COLLECTION = "web_search_embeddings"
WEB_CHUNK_WORDS = 512
WEB_MAX_CHUNKS = 50

_PATCH_LOCK = threading.Lock()


@contextlib.contextmanager
def offline_snapshot_download() -> Iterator[None]:
    """Make ``snapshot_download(repo_id=<existing folder>)`` return the folder, inside cragmm_search."""
    import huggingface_hub
    from cragmm_search.image_search_mock_api import image_kg

    def _local_only(repo_id: str, *args: Any, **kwargs: Any) -> str:
        if repo_id and os.path.isdir(repo_id):
            return str(repo_id)
        raise FileNotFoundError(
            f"CragMMSearch is offline-only: {repo_id!r} is not a local index folder "
            "(download the index yourself and pass its path)"
        )

    with _PATCH_LOCK:
        saved = (huggingface_hub.snapshot_download, image_kg.snapshot_download)
        huggingface_hub.snapshot_download = _local_only
        image_kg.snapshot_download = _local_only
        try:
            yield
        finally:
            huggingface_hub.snapshot_download, image_kg.snapshot_download = saved


def _require_dir(path: str | Path | None, what: str) -> str:
    if path is None or not Path(path).is_dir():
        raise FileNotFoundError(f"{what} folder not found: {path}")
    return str(Path(path).resolve())


class CragMMSearch:
    """glasses_rag.retrieval.schema.SearchBackend backed by the real ``UnifiedSearchPipeline`` on local folders.

    Args:
        image_index_dir: ChromaDB folder with collection ``image_embeddings``.
        clip_model_dir: local CLIP model folder (config + weights + processor files), e.g. a copy of
            ``openai/clip-vit-large-patch14-336`` (the model the validation index was built with).
        web_index_dir: optional ChromaDB folder with collection ``web_search_embeddings``.
        text_model_dir: local text-embedding model folder (needed with ``web_index_dir``), e.g. a copy
            of ``sentence-transformers/all-MiniLM-L6-v2`` or ``BAAI/bge-large-en-v1.5`` -- whichever
            built the web index.
    """

    name = "cragmm"

    def __init__(
        self,
        image_index_dir: str | Path,
        clip_model_dir: str | Path,
        web_index_dir: str | Path | None = None,
        text_model_dir: str | Path | None = None,
        name: str = "cragmm",
    ):
        from cragmm_search.search import UnifiedSearchPipeline

        self.name = name
        image_index = _require_dir(image_index_dir, "image index")
        clip = _require_dir(clip_model_dir, "CLIP model")
        web_index = text_model = None
        if web_index_dir is not None:
            web_index = _require_dir(web_index_dir, "web index")
            text_model = _require_dir(text_model_dir, "text model")
        with offline_snapshot_download():
            self.pipeline = UnifiedSearchPipeline(
                image_model_name=clip,
                image_hf_dataset_id=image_index,
                text_model_name=text_model,
                web_hf_dataset_id=web_index,
            )
        self.has_web = web_index is not None

    # -- image ---------------------------------------------------------------------------------
    def image_search(self, image: Any, k: int = 5) -> list[dict[str, Any]]:
        """``image``: PIL image, path of an image file, or a CLIP embedding (numpy array)."""
        import numpy as np
        from PIL import Image

        if isinstance(image, (str, Path)):
            if not Path(image).is_file():
                raise ValueError(f"image_search needs an image, not text: {str(image)[:80]!r}")
            image = Image.open(image)
        if isinstance(image, Image.Image):
            image = image.convert("RGB")
        elif not isinstance(image, np.ndarray):
            raise ValueError(f"unsupported image type {type(image).__name__}")
        raw = self.pipeline(image, k=k)
        return [
            {
                "index": int(r["index"]),
                "score": float(r["score"]),
                "url": r["url"],
                "entities": [
                    {"entity_name": e["entity_name"], "entity_attributes": plain(e.get("entity_attributes"))}
                    for e in r["entities"]
                ],
            }
            for r in raw
        ]

    # -- web -----------------------------------------------------------------------------------
    def web_search(self, query: str, k: int = 5) -> list[dict[str, Any]]:
        if not self.has_web:
            log.warning("CragMMSearch built without a web index: web_search returns []")
            return []
        from cragmm_search.search import InputType

        # Go through the pipeline's own _forward/postprocess: its preprocess would take a query that
        # happens to be an existing file name or an http URL for an image.
        out = self.pipeline._forward({InputType.TEXT_QUERY: query}, k=k)
        raw = self.pipeline.postprocess(out)
        return [
            {
                "index": r["index"],
                "score": float(r["score"]),
                "page_name": r.get("page_name") or "",
                "page_snippet": r.get("page_snippet") or "",
                "page_url": r.get("page_url") or "",
            }
            for r in raw
        ]


# --------------------------------------------------------------------------------------------------
# Index building (official layout)
# --------------------------------------------------------------------------------------------------


def _load_image(x: Any):
    from PIL import Image

    if isinstance(x, Image.Image):
        return x.convert("RGB")
    return Image.open(x).convert("RGB")


def _entities_and_info(item: dict[str, Any]) -> tuple[list[str] | str, dict[str, Any]]:
    """Accept entities as names or as {entity_name, entity_attributes} dicts (the search result form)."""
    info: dict[str, Any] = dict(item.get("info") or {})
    names: list[str] = []
    ents = item.get("entities") or []
    if isinstance(ents, str):
        ents = [ents]
    for e in ents:
        if isinstance(e, dict):
            names.append(e["entity_name"])
            info.setdefault(e["entity_name"], e.get("entity_attributes") or {})
        else:
            names.append(str(e))
            info.setdefault(str(e), {})
    return names, info


def _web_fields(item: dict[str, Any]) -> list[str]:
    fields = [f"{item.get('page_name', '')} {item.get('page_snippet', '')}".strip()]
    words = (item.get("page_text") or "").split()
    fields += [" ".join(words[i : i + WEB_CHUNK_WORDS]) for i in range(0, len(words), WEB_CHUNK_WORDS)]
    return fields[:WEB_MAX_CHUNKS]


def _fresh_collection(folder: Path, name: str):
    """An empty cosine collection `name` in a persistent ChromaDB folder (an old one is replaced)."""
    import chromadb

    client = chromadb.PersistentClient(path=str(folder))
    with contextlib.suppress(Exception):
        client.delete_collection(name)
    return client.create_collection(name=name, metadata={"hnsw:space": "cosine"})


def _add_batched(col, ids: list[str], embs: list, metas: list, batch: int = 5000) -> None:
    # ChromaDB rejects very large single adds
    for i in range(0, len(ids), batch):
        col.add(embeddings=embs[i : i + batch], metadatas=metas[i : i + batch], ids=ids[i : i + batch])


def build_cragmm_index(
    out_dir: str | Path,
    image_items: Iterable[dict[str, Any]],
    web_items: Iterable[dict[str, Any]] | None,
    clip_path: str | Path,
    text_model_path: str | Path | None = None,
    batch_size: int = 32,
) -> dict[str, Path]:
    """Write ``out_dir/image_index`` (and ``out_dir/web_index`` when ``web_items``) in the official
    layout, embedding with the SAME feature functions the search package queries with.

    image item: ``{"image": PIL.Image | path, "image_url": str, "entities": [name | {entity_name,
    entity_attributes}], "info": {entity_name: attributes} (optional)}``.
    web item: ``{"page_url", "page_name", "page_snippet", "page_text" (optional)}``.
    Returns ``{"image_index": path, "web_index": path | absent}``.
    """
    import torch

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    device = torch.device("cpu")
    paths = {"image_index": _write_image_index(out / "image_index", image_items, clip_path, device)}
    web_items = list(web_items or [])
    if web_items:
        if text_model_path is None:
            raise ValueError("web_items given without text_model_path")
        paths["web_index"] = _write_web_index(out / "web_index", web_items, text_model_path, device, batch_size)
    return paths


def _write_image_index(folder: Path, items: Iterable[dict[str, Any]], clip_path: str | Path, device: Any) -> Path:
    """The image collection: one CLIP image embedding per item, with its URL, entity names and their info."""
    from cragmm_search.image_search_mock_api.image_search import extract_features as image_features
    from transformers import CLIPModel, CLIPProcessor

    clip = CLIPModel.from_pretrained(str(clip_path)).to(device).eval()
    processor = CLIPProcessor.from_pretrained(str(clip_path))
    col = _fresh_collection(folder, IMAGE_COLLECTION)
    embs, metas = [], []
    for item in items:
        emb = image_features(clip, processor, _load_image(item["image"]), device=device)[0]
        names, info = _entities_and_info(item)
        embs.append(emb.astype("float32").tolist())
        metas.append(
            {
                "image_url": item.get("image_url") or "",
                "entities": json.dumps(names[0] if len(names) == 1 else names),
                "info": json.dumps(info),
            }
        )
    _add_batched(col, [str(j) for j in range(len(embs))], embs, metas)
    return folder


def _write_web_index(
    folder: Path, items: list[dict[str, Any]], text_model_path: str | Path, device: Any, batch_size: int
) -> Path:
    """The web collection: each page (the first of a URL) as chunks (`_web_fields`), one text embedding each."""
    from cragmm_search.web_search_mock_api.api.web_search import extract_features as text_features
    from transformers import AutoModel, AutoTokenizer

    model = AutoModel.from_pretrained(str(text_model_path)).to(device).eval()
    tok = AutoTokenizer.from_pretrained(str(text_model_path))
    col = _fresh_collection(folder, WEB_COLLECTION)
    seen: set[str] = set()
    ids, embs, metas = [], [], []
    for item in items:
        url = item["page_url"]
        if url in seen:
            continue
        seen.add(url)
        fields = _web_fields(item)
        meta = {"page_name": item.get("page_name", ""), "page_snippet": item.get("page_snippet", ""), "page_url": url}
        for start in range(0, len(fields), batch_size):
            feats = text_features(model, tok, fields[start : start + batch_size], device=device)
            for j, f in enumerate(feats):
                ids.append(f"{url}_chunk_{start + j}")
                embs.append(f.astype("float32").tolist())
                metas.append(meta)
    _add_batched(col, ids, embs, metas)
    return folder
