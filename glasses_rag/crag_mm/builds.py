"""Builds of question-set content: the CRAG-MM-style dataset folder `ensure_dataset` writes from a `Content`
(glasses_rag.crag_mm.content's docstring gives the layout), and what a build may replace."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from glasses_rag.crag_mm.content import (
    DOMAINS,
    DYNAMISM,
    FILES,
    IMAGE_QUALITY,
    QUERY_CATEGORIES,
    Content,
    ContentError,
    ContentTurn,
    Entity,
    PicturedRow,
)
from glasses_rag.crag_mm.content_images import degrade, jpeg_bytes, reference_image
from glasses_rag.text.nlp import IDK  # the benchmark's no-answer ground truth is the agent's abstention text

# --------------------------------------------------------------------------------------------
# Writing a dataset folder
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DatasetPaths:
    root: Path
    single_turn: Path  # folder with validation.parquet
    multi_turn: Path
    kg_json: Path
    web_json: Path
    kg_images: Path
    questions_json: Path
    manifest: Path
    cache: Path  # embedding caches of glasses_rag.retrieval.local_search


def dataset_paths(root: str | Path) -> DatasetPaths:
    root = Path(root)
    return DatasetPaths(
        root=root,
        single_turn=root / "single_turn",
        multi_turn=root / "multi_turn",
        kg_json=root / "kg.json",
        web_json=root / "web.json",
        kg_images=root / "kg_images",
        questions_json=root / "questions.json",
        manifest=root / "manifest.json",
        cache=root / "cache",
    )


def question_set_root(spec: str | Path) -> Path | None:
    """The root of a built question set (the layout above: kg.json beside single_turn/ and multi_turn/) that `spec`
    names, as its root or as one of its two dataset folders; None for anything else (a dataset of one's own).
    Example: `question_set_root("data/heldout/single_turn")` -> Path("data/heldout")."""
    p = Path(spec)
    root = p.parent if p.name in ("single_turn", "multi_turn") else p
    parts = (dataset_paths(root).single_turn, dataset_paths(root).multi_turn)
    return root if (root / "kg.json").is_file() and any(x.is_dir() for x in parts) else None


def _features():
    from datasets import ClassLabel, Features, Sequence, Value
    from datasets import Image as HFImage

    return Features(
        {
            "session_id": Value("string"),
            "image": HFImage(),
            "image_url": Value("string"),
            "turns": Sequence(
                {
                    "interaction_id": Value("string"),
                    "domain": ClassLabel(names=DOMAINS),
                    "query_category": ClassLabel(names=QUERY_CATEGORIES),
                    "dynamism": ClassLabel(names=DYNAMISM),
                    "query": Value("string"),
                    "image_quality": ClassLabel(names=IMAGE_QUALITY),
                }
            ),
            "answers": Sequence({"interaction_id": Value("string"), "ans_full": Value("string")}),
        }
    )


@contextmanager
def quiet_datasets() -> Iterator[None]:
    """No `datasets` progress bars ("Creating parquet from Arrow format") inside; the library's setting is restored
    after (it is process-wide: a caller's own choice is kept)."""
    import datasets

    was_disabled = datasets.are_progress_bars_disabled()
    datasets.disable_progress_bars()
    try:
        yield
    finally:
        if not was_disabled:
            datasets.enable_progress_bars()


def _write_parquet(rows: list[dict], folder: Path) -> None:
    """The rows as folder/validation.parquet; no rows, no folder (a set without conversations has no multi_turn/)."""
    from datasets import Dataset

    if not rows:
        return
    folder.mkdir(parents=True, exist_ok=True)
    with quiet_datasets():
        Dataset.from_list(rows, features=_features()).to_parquet(str(folder / "validation.parquet"))


def _render(e: Entity) -> Image.Image:
    try:
        return e.image.load()
    except Exception as x:  # a missing sample file, a download-only skimage image, ...
        raise ContentError(f"{FILES['entities']}: entity {e.slug!r}: cannot render its image: {x}") from x


def _write(c: Content, p: DatasetPaths) -> None:
    """Every file of the build into `p` (an empty folder): KG images and kg.json, web.json, the two parquet datasets,
    questions.json."""
    info = c.info
    originals, kg = _write_kg(c, p)
    about = [(pg, e.name) for e in c.entities for pg in e.pages] + [(pg, None) for pg in c.pages]
    web = [
        {
            "page_url": f"{info.site}/wiki/{pg.slug}",
            "page_name": pg.title,
            "page_snippet": pg.snippet,
            "page_content": pg.content,
            "about": name,
            "prompt_injection": pg.injection,
        }
        for pg, name in about
    ]
    rows = _Rows(c, originals)
    prefix = info.session_prefix
    single = [rows.row(f"{prefix}-st-{n:03d}", q, [q]) for n, q in enumerate(c.single_turn)]
    multi = [rows.row(f"{prefix}-mt-{n:03d}", m, m.turns) for n, m in enumerate(c.multi_turn)]
    _write_parquet(single, p.single_turn)
    _write_parquet(multi, p.multi_turn)
    p.kg_json.write_text(json.dumps({"version": info.version, "images": kg}, indent=1))
    p.web_json.write_text(json.dumps({"version": info.version, "pages": web}, indent=1))
    p.questions_json.write_text(json.dumps(rows.meta, indent=1))


def _write_kg(c: Content, p: DatasetPaths) -> tuple[dict[str, Image.Image], list[dict[str, Any]]]:
    """Each entity's picture rendered (slug -> image) and its KG reference image written, with kg.json's entries."""
    p.kg_images.mkdir(parents=True, exist_ok=True)
    originals: dict[str, Image.Image] = {}
    kg = []
    for i, e in enumerate(c.entities):
        originals[e.slug] = im = _render(e)
        fname = f"{e.slug}.png"
        reference_image(im).save(p.kg_images / fname, format="PNG", optimize=False)
        kg.append(
            {
                "index": i,
                "image_file": f"kg_images/{fname}",
                "url": f"{c.info.site}/images/{fname}",
                "entities": [{"entity_name": e.name, "entity_attributes": e.attrs}],
                "domain": e.domain,
                "slug": e.slug,
                "distractor": e.distractor,
            }
        )
    return originals, kg


class _Rows:
    """Dataset rows in the real CRAG-MM layout, each with a fresh capture of its entity's picture; the captures'
    randomness is one stream drawn row by row (single-turn rows, then multi-turn), and `meta` collects
    questions.json's entries."""

    def __init__(self, c: Content, originals: dict[str, Image.Image]):
        self.by_slug = {e.slug: e for e in c.entities}
        self.originals = originals
        self.rng = np.random.default_rng(c.info.seed)
        self.meta: dict[str, dict] = {}

    def row(self, session_id: str, pic: PicturedRow, turns: list[ContentTurn]) -> dict:
        e = self.by_slug[pic.entity]
        im = degrade(self.originals[e.slug], pic.image_quality, self.rng, text=e.mostly_text)
        t: dict[str, list] = {
            k: [] for k in ("interaction_id", "domain", "query_category", "dynamism", "query", "image_quality")
        }
        a: dict[str, list] = {"interaction_id": [], "ans_full": []}
        for j, turn in enumerate(turns):
            iid = f"{session_id}-t{j}"
            t["interaction_id"].append(iid)
            t["domain"].append(DOMAINS.index(turn.domain))
            t["query_category"].append(QUERY_CATEGORIES.index(turn.query_category))
            t["dynamism"].append(DYNAMISM.index(turn.dynamism))
            t["query"].append(turn.query)
            t["image_quality"].append(IMAGE_QUALITY.index(pic.image_quality))
            a["interaction_id"].append(iid)
            a["ans_full"].append(turn.answer)
            self.meta[iid] = self._meta(session_id, j, e, pic, turn)
        return {
            "session_id": session_id,
            "image": {"bytes": jpeg_bytes(im), "path": None},
            "image_url": pic.image_url,
            "turns": t,
            "answers": a,
        }

    @staticmethod
    def _meta(session_id: str, j: int, e: Entity, pic: PicturedRow, turn: ContentTurn) -> dict[str, Any]:
        return {
            "session_id": session_id,
            "turn": j,
            "entity": e.name,
            "entity_slug": e.slug,
            "kind": turn.kind,
            "needs_web": turn.needs_web,
            "needs_ocr": turn.needs_ocr,
            "no_answer": turn.answer == IDK,
            "image_quality": pic.image_quality,
            "query": turn.query,
            "answer": turn.answer,
        }


def _manifest_ok(p: DatasetPaths, c: Content, fp: str) -> bool:
    try:
        m = json.loads(p.manifest.read_text())
    except (OSError, ValueError):
        return False
    if m.get("fingerprint") != fp or m.get("version") != c.info.version:
        return False
    need = [
        *([p.single_turn / "validation.parquet"] if c.single_turn else []),
        *([p.multi_turn / "validation.parquet"] if c.multi_turn else []),
        p.kg_json,
        p.web_json,
        p.questions_json,
    ]
    return all(x.exists() for x in need)


BUILT_BY = "glasses_rag.crag_mm.content"  # in every manifest.json a build writes: what may be deleted to rebuild
_LEGACY_MANIFEST = {"name", "version", "fingerprint", "n_single_turn", "n_multi_turn", "n_kg_images"}


def is_build(folder: Path) -> bool:
    """Does `folder` hold a build of this module's (its manifest.json says so, or has exactly the keys one written
    before `built_by` had)? Only such a folder is ever deleted to make room for a new build."""
    from glasses_rag.core.files import read_bounded

    try:
        m = json.loads(read_bounded(Path(folder) / "manifest.json", 1 << 16))
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(m, dict) and (m.get("built_by") == BUILT_BY or set(m) == _LEGACY_MANIFEST)


def content_build(folder: str | Path, data_dir: str | Path) -> DatasetPaths:
    """Where the dataset of the content folder `folder` is built: `data_dir/<the folder's real name>` (`--data .`
    from inside a content folder names it by its real name, never `data_dir` itself).

    Example: `content_build("bundled/heldout", "data").root` -> data/heldout."""
    from glasses_rag.core.paths import folder_name

    return dataset_paths(Path(data_dir) / folder_name(Path(folder).resolve().name, "a content folder's name"))


def ensure_dataset(c: Content, p: DatasetPaths, force: bool = False) -> DatasetPaths:
    """Write the dataset for `c` at `p.root` unless an up-to-date copy is there (built aside, then swapped in). The
    folder replaced must be a build of ours directly inside its parent (glasses_rag.core.paths.remove_build):
    `p.root` naming '.', '..', a link or a folder of the user's is refused before anything is built or deleted."""
    from filelock import FileLock

    from glasses_rag.core.paths import check_removable, named_folder, remove_build

    root = named_folder(p.root, "a question set's dataset folder")
    p = dataset_paths(root) if root != p.root else p
    fp = c.fingerprint()
    if not force and _manifest_ok(p, c, fp):
        return p
    root.parent.mkdir(parents=True, exist_ok=True)
    # one builder at a time (two runs, or parallel test workers, asking for the same dataset): the others wait
    # and then find it built
    with FileLock(str(root.parent / f".{root.name}.build.lock")):
        if not force and _manifest_ok(p, c, fp):
            return p
        check_removable(root, root.parent, is_build, "question set's dataset")  # refused before any build
        tmp = Path(tempfile.mkdtemp(prefix=f".{root.name}-build-", dir=root.parent))
        try:
            _build_into(c, fp, tmp)
            remove_build(root, root.parent, is_build, "question set's dataset")
            os.replace(tmp, root)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return p


def _build_into(c: Content, fp: str, folder: Path) -> None:
    tp = dataset_paths(folder)
    _write(c, tp)
    manifest = {
        "name": c.info.name,
        "version": c.info.version,
        "fingerprint": fp,
        "n_single_turn": len(c.single_turn),
        "n_multi_turn": len(c.multi_turn),
        "n_kg_images": len(c.entities),
        "built_by": BUILT_BY,
    }
    tp.manifest.write_text(json.dumps(manifest, indent=1))
