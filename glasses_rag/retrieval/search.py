"""Search backends from a configuration, and adapters for the official pipeline.

`make_search(SearchConfig, ModelPaths)` builds the backend the tools call: the embedded local index (any folder in
its layout), the official `cragmm-search-pipeline` over local ChromaDB folders, or none. Constructing a backend never
prepares data: a benchmark's data, and the index that comes with it, is prepared before (by the run harness, from
the benchmark's spec), and a missing folder is an error that says so. `as_search_backend` wraps whatever the
official harness hands the agent (a `UnifiedSearchPipeline` or any callable with its calling convention). Every
backend returns results in the official dict layout (glasses_rag.retrieval.schema).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from glasses_rag.models.resources import ModelPaths
from glasses_rag.retrieval.schema import plain


class SearchConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    backend: Literal["local", "cragmm", "none"] = Field(
        "local",
        description="'local': the embedded index (index_dir, else the "
        "index the run's data comes with); 'cragmm': the official cragmm-search-pipeline; "
        "'none': no retrieval.",
    )
    index_dir: Path | None = Field(
        None, description="Local index folder (kg.json, web.json, kg_images/); default: the one the data comes with."
    )
    cragmm_image_index: Path | None = Field(None, description="ChromaDB folder with the 'image_embeddings' collection.")
    cragmm_web_index: Path | None = Field(
        None, description="ChromaDB folder with the 'web_search_embeddings' collection."
    )
    cragmm_clip: Path | None = Field(None, description="Local CLIP folder the official image index was built with.")
    cragmm_text_model: Path | None = Field(
        None, description="Local text-embedding folder the web index was built with."
    )
    cache: bool = Field(True, description="Two-level search cache (query -> results, url -> page) in front.")
    cache_entries: int = Field(1024, ge=1)


def make_search(
    cfg: SearchConfig, models: ModelPaths | None = None, web: bool = True, index_dir: Path | None = None
) -> Any:
    """The configured backend (wrapped in the two-level cache unless `cfg.cache` is off), over data already
    prepared: a missing folder is a FileNotFoundError that says how to prepare it, never a build.

    Args:
        cfg: which backend and where its data is.
        models: model folders (CLIP, text embedder) the local index uses.
        web: False for task 1 (image search only): the official pipeline is built without its web index.
        index_dir: the local index when `cfg.index_dir` names none: the one the run's data comes with (a
            benchmark's default data, prepared by the harness).

    Example::

        backend = make_search(SearchConfig(index_dir=Path("data/heldout")))
        backend.web_search("eiffel tower height", k=3)
    """
    from glasses_rag.retrieval.cache import CachedSearch

    backend = _backend(cfg, models or ModelPaths(), web, index_dir)
    if isinstance(backend, NullSearch):  # nothing to cache (a header saying "cached(none)" misleads)
        return backend
    return CachedSearch(backend, max_entries=cfg.cache_entries) if cfg.cache else backend


def _backend(cfg: SearchConfig, models: ModelPaths, web: bool, index_dir: Path | None) -> Any:
    if cfg.backend == "none":
        return NullSearch()
    if cfg.backend == "cragmm":
        from glasses_rag.retrieval.cragmm_backend import CragMMSearch

        image_index, clip = cfg.cragmm_image_index, cfg.cragmm_clip
        if image_index is None or clip is None:
            missing = [n for n, v in (("cragmm-image-index", image_index), ("cragmm-clip", clip)) if v is None]
            raise ValueError("the cragmm search backend needs " + ", ".join("--" + m for m in missing))
        if web and cfg.cragmm_web_index is not None and cfg.cragmm_text_model is None:
            raise ValueError("--cragmm-web-index needs --cragmm-text-model (the model that built the web index)")
        return CragMMSearch(
            image_index_dir=image_index,
            clip_model_dir=clip,
            web_index_dir=cfg.cragmm_web_index if web else None,
            text_model_dir=cfg.cragmm_text_model,
        )
    from glasses_rag.models.image_embedder import make_image_embedder
    from glasses_rag.retrieval.local_search import LocalSearchIndex

    folder = cfg.index_dir or index_dir
    if folder is None:
        raise ValueError(
            "the local search backend has no index folder: give one (--index-dir, SearchConfig.index_dir), or "
            "run on a benchmark's data, which comes with its index (python -m graph.run prepares it)"
        )
    return LocalSearchIndex(
        folder, image_embedder=make_image_embedder(models.clip), text_embedder_path=models.text_embedder
    )


class OfficialPipelineSearch:
    """glasses_rag.retrieval.schema.SearchBackend over a callable with the official calling convention.

    ``pipeline(image, k=k)`` -> ``[{index, score, url, entities: [{entity_name, entity_attributes}]}]``;
    ``pipeline(text, k=k)``  -> ``[{index, score, page_name, page_snippet, page_url}]``.
    For a real ``UnifiedSearchPipeline`` text goes through its ``_forward``/``postprocess``, because its
    ``preprocess`` treats a query that is an existing file name or starts with "http" as an image.
    Calls are serialised by default (one shared model on one device); ``serialize=False`` lifts that.
    """

    def __init__(self, pipeline: Any, web_enabled: bool | None = None, name: str | None = None, serialize: bool = True):
        if not callable(pipeline):
            raise TypeError(f"search pipeline {type(pipeline).__name__} is not callable")
        self.pipeline = pipeline
        self.has_web = pipeline_has_web(pipeline) if web_enabled is None else bool(web_enabled)
        self.name = name or f"official:{type(pipeline).__name__}" + ("" if self.has_web else "[image only]")
        self._lock = threading.Lock() if serialize else None

    def _call(self, fn):
        if self._lock is None:
            return fn()
        with self._lock:
            return fn()

    def image_search(self, image: Any, k: int = 5) -> list[dict[str, Any]]:
        raw = self._call(lambda: self.pipeline(image, k=k)) or []
        return [
            {
                "index": plain(r.get("index")),
                "score": float(r.get("score", 0.0)),
                "url": r.get("url") or "",
                "entities": [
                    {"entity_name": e.get("entity_name"), "entity_attributes": plain(e.get("entity_attributes"))}
                    for e in (r.get("entities") or [])
                    if isinstance(e, dict)
                ],
            }
            for r in raw
            if isinstance(r, dict)
        ]

    def web_search(self, query: str, k: int = 5) -> list[dict[str, Any]]:
        if not self.has_web:
            return []
        forward, post = getattr(self.pipeline, "_forward", None), getattr(self.pipeline, "postprocess", None)
        text_type = None
        if callable(forward) and callable(post):
            try:
                from cragmm_search.search import InputType

                text_type = InputType.TEXT_QUERY
            except Exception:  # noqa: BLE001
                text_type = None
        if text_type is not None and callable(forward) and callable(post):
            raw = self._call(lambda: post(forward({text_type: query}, k=k)))
        else:
            raw = self._call(lambda: self.pipeline(query, k=k))
        return [
            {
                "index": plain(r.get("index")),
                "score": float(r.get("score", 0.0)),
                "page_name": r.get("page_name") or "",
                "page_snippet": r.get("page_snippet") or "",
                "page_url": r.get("page_url") or "",
            }
            for r in (raw or [])
            if isinstance(r, dict)
        ]


class NullSearch:
    """No retrieval at all: tools find nothing and the agent abstains or answers from the image."""

    name = "none"
    has_web = False

    def image_search(self, image: Any, k: int = 5) -> list[dict[str, Any]]:
        return []

    def web_search(self, query: str, k: int = 5) -> list[dict[str, Any]]:
        return []


def is_search_backend(x: Any) -> bool:
    return callable(getattr(x, "image_search", None)) and callable(getattr(x, "web_search", None))


def pipeline_has_web(x: Any) -> bool:
    """Official rule: web search exists iff the pipeline was built with a web index."""
    flag = getattr(x, "web_search", None)
    if isinstance(flag, bool):  # UnifiedSearchPipeline.web_search is a bool, not a method
        return flag
    for attr in ("has_web", "web_enabled"):
        v = getattr(x, attr, None)
        if isinstance(v, bool):
            return v
    for attr in ("pipeline", "backend"):  # CragMMSearch wraps one, CachedSearch another backend
        inner = getattr(x, attr, None)
        if inner is not None and inner is not x:
            return pipeline_has_web(inner)
    return True  # our own backends (LocalSearchIndex) always hold a web corpus


def as_search_backend(search_pipeline: Any) -> Any:
    if search_pipeline is None:
        return NullSearch()
    if is_search_backend(search_pipeline):
        return search_pipeline
    return OfficialPipelineSearch(search_pipeline)
