"""Question-set content as data, and the generator that turns it into a CRAG-MM-style dataset folder.

A content folder (the demo's is `glasses_rag/crag_mm/bundled/demo/`) holds four YAML files:

* `content.yaml`: name, version, random seed, site URL, session id prefix (a folder written before it was renamed
  still has a `benchmark.yaml`: read, with a deprecation warning);
* `entities.yaml`: the image-KG entities (image recipe, attributes, web pages about them), distractors too;
* `pages.yaml`: web pages about no entity (general knowledge, distractors, prompt-injection pages);
* `questions.yaml`: `single_turn` questions and `multi_turn` conversations, every field explicit (a set for tasks
  1-2 may have no conversation, one for task 3 no single-turn question).

A folder can extend a sibling one, or a bundled one by name from anywhere (`extends: demo` in its content.yaml):
it inherits the base's content.yaml keys it does not set (it must set its own `name` and `session_prefix`, so
that session ids never collide), and each of entities.yaml, pages.yaml and questions.yaml it does not have, e.g. a
paraphrase set that brings only its own questions.yaml. Bases may extend others; cycles are errors.

`load_content(folder)` validates them with the pydantic models below (unknown keys are errors; every
error names the file and the entry; the image recipes are in content_images.py).
`glasses_rag.crag_mm.builds.ensure_dataset(content, paths)` renders the images and writes, unless an up-to-date copy
is there:

* `single_turn/validation.parquet`, `multi_turn/validation.parquet`: rows in the real CRAG-MM v0.1.2
  layout (dict-of-lists `turns`/`answers`, ClassLabel-coded labels with the real label names and order),
  readable with `glasses_rag.crag_mm.dataset.load_conversations`. Egocentric rows have a null `image_url` (the official
  harness's rule); normal rows carry their URL and keep their image bytes (there is no network);
* `kg.json` + `kg_images/`: the image KG, one entity per reference image;
* `web.json`: the web corpus (page_url, page_name, page_snippet, page_content, about, prompt_injection);
* `questions.json`: per-interaction metadata (entity, kind, needs_web, needs_ocr, ...);
* `manifest.json`: name, version and content fingerprint; the folder is rebuilt when they change.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

from pydantic import Field, ValidationError, model_validator

from glasses_rag.crag_mm.content_images import ContentModel, ImageSource
from glasses_rag.text.nlp import IDK  # the benchmark's no-answer ground truth is the agent's abstention text

# Bump when rendering or the written layout changes: it is part of the fingerprint, so folders rebuild.
GENERATOR_VERSION = "2"

# Label names and their order, as in the real dataset's features (crag-mm-2025 dataset card,
# `dataset_info.features` of crag-mm-multi-turn-public): the parquet stores their indices.
Domain = Literal[
    "animal",
    "other",
    "shopping",
    "book",
    "general object recognition",
    "local",
    "vehicle",
    "plants and gardening",
    "style and fashion",
    "food",
    "text understanding",
    "sports and games",
    "math and science",
]
QueryCategory = Literal["reasoning", "simple-knowledge", "comparison", "simple-recognition", "multi-hop", "aggregation"]
Dynamism = Literal["fast-changing", "static", "slow-changing", "real-time"]
ImageQuality = Literal["rotated", "truncated", "occluded", "low light", "blurred", "normal"]
DOMAINS: list[str] = list(get_args(Domain))
QUERY_CATEGORIES: list[str] = list(get_args(QueryCategory))
DYNAMISM: list[str] = list(get_args(Dynamism))
IMAGE_QUALITY: list[str] = list(get_args(ImageQuality))

# What a question tests (questions.json `kind`; not a CRAG-MM label): recognition, kg (answer in the
# image KG), web (needs web search), ocr (text in the image), general (no image needed), ...
QuestionKind = Literal[
    "recognition", "kg", "web", "ocr", "multi-hop", "comparison", "aggregation", "no-answer", "general"
]


Slug = Annotated[str, Field(pattern=r"^[a-z0-9]+(-[a-z0-9]+)*$")]  # file names and URL paths


class ContentError(ValueError):
    """Invalid benchmark content; the message names the file and the entry."""


# --------------------------------------------------------------------------------------------
# Content models
# --------------------------------------------------------------------------------------------


class ContentPage(ContentModel):
    slug: Slug  # page_url = <site>/wiki/<slug>
    title: str
    snippet: str
    content: str
    injection: bool = False  # carries prompt-injection text (web.json `prompt_injection`)


class Entity(ContentModel):
    slug: Slug  # kg_images/<slug>.png
    name: str
    domain: Domain
    image: ImageSource
    attrs: dict[str, str]
    pages: list[ContentPage] = []  # web pages about this entity (web.json `about` = name)
    distractor: bool = False  # in the KG to be confused with others; never asked about
    mostly_text: bool = False  # a sign or label: blurred captures stay legible


class ContentTurn(ContentModel):
    query: str = Field(min_length=1)
    answer: str = Field(min_length=1)  # IDK when nothing answers it
    domain: Domain
    query_category: QueryCategory
    dynamism: Dynamism
    kind: QuestionKind
    needs_web: bool
    needs_ocr: bool

    @model_validator(mode="after")
    def _no_answer(self) -> ContentTurn:
        if (self.answer == IDK) != (self.kind == "no-answer"):
            raise ValueError(f"kind 'no-answer' goes with the answer {IDK!r}, and only with it")
        return self


class PicturedRow(ContentModel):
    """The picture a row asks about: a capture of `entity`'s image with one quality issue."""

    entity: Slug
    image_quality: ImageQuality
    # Required, null for an egocentric capture: the official harness calls a row egocentric only
    # when image_url is None. A URL marks a normal (web) image; its bytes are embedded too.
    image_url: Annotated[str, Field(pattern=r"^https?://\S+$")] | None


class SingleTurn(PicturedRow, ContentTurn):
    pass


class MultiTurn(PicturedRow):
    turns: list[ContentTurn] = Field(min_length=1)


class ContentInfo(ContentModel):
    name: str
    version: str  # written into kg.json and web.json
    seed: int  # of the random degradations of the query images
    site: Annotated[str, Field(pattern=r"^https?://\S+[^/]$")]  # <site>/images/<slug>.png, <site>/wiki/<slug>
    session_prefix: Slug  # session ids <prefix>-st-000, <prefix>-mt-000


class _EntitiesFile(ContentModel):
    entities: list[Entity] = Field(min_length=1)


class _PagesFile(ContentModel):
    pages: list[ContentPage]


class _QuestionsFile(ContentModel):
    # either may be left out (a set for tasks 1-2 only, or for task 3 only), not both; an empty one is not written
    # (`datasets` cannot write, nor size, an empty image table)
    single_turn: list[SingleTurn] = Field(default_factory=list)
    multi_turn: list[MultiTurn] = Field(default_factory=list)

    @model_validator(mode="after")
    def _some(self) -> _QuestionsFile:
        if not self.single_turn and not self.multi_turn:
            raise ValueError("no question: give single_turn questions (tasks 1, 2), multi_turn conversations (task 3)")
        return self


class Content(ContentModel):
    info: ContentInfo
    entities: list[Entity]
    pages: list[ContentPage]  # about no entity
    single_turn: list[SingleTurn]
    multi_turn: list[MultiTurn]

    def fingerprint(self) -> str:
        """Hash of the content and the generator version: a built folder is stale when it changes."""
        blob = json.dumps({"generator": GENERATOR_VERSION, "content": self.model_dump(mode="json")}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


# --------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------

FILES = {"info": "content.yaml", "entities": "entities.yaml", "pages": "pages.yaml", "questions": "questions.yaml"}
OLD_INFO = "benchmark.yaml"  # the header's name before it was content.yaml ("benchmark" names the evaluated one)


def info_file(folder: Path) -> Path:
    """A content folder's header, content.yaml; a folder that still has benchmark.yaml (its old name) is read with
    a deprecation warning."""
    path = folder / FILES["info"]
    old = folder / OLD_INFO
    if not path.is_file() and old.is_file():
        warnings.warn(f"{old}: rename it {FILES['info']} (benchmark.yaml is read, for now)", FutureWarning, 2)
        return old
    return path


def has_info(folder: Path) -> bool:
    """Is `folder` a content folder (it has a content.yaml, or the old benchmark.yaml)?"""
    return (folder / FILES["info"]).is_file() or (folder / OLD_INFO).is_file()


def _entry(raw: Any, loc: tuple) -> str:
    """`single_turn[3] {entity: latte, query: '...'} > dynamism` for a pydantic error location."""
    out, node = "", raw
    for key in loc:
        if (isinstance(node, dict) and key in node) or (
            isinstance(node, list) and isinstance(key, int) and key < len(node)
        ):
            node = node[key]
        else:
            node = None  # a union tag such as 'sign' or a missing key: keep naming, stop walking
        if isinstance(key, int):
            out += f"[{key}]"
            if isinstance(node, dict):
                ids = {k: node[k] for k in ("slug", "entity", "query") if isinstance(node.get(k), str)}
                if ids:
                    out += " {" + ", ".join(f"{k}: {v!r}" for k, v in ids.items()) + "}"
        else:
            out += f" > {key}" if out else str(key)
    return out or "(top level)"


MAX_FILE_BYTES = 16 << 20  # a content file is looked at before it is read; the bundled ones are under 100 KB


def _load_yaml(path: Path) -> Any:
    """A content file's data: no anchors or aliases, bounded nesting and size (glasses_rag.core.yaml_data)."""
    from glasses_rag.core.yaml_data import read_yaml

    try:
        return read_yaml(path, MAX_FILE_BYTES)
    except FileNotFoundError:
        raise ContentError(f"{path}: no such file") from None
    except OSError as e:
        raise ContentError(f"{path}: cannot read: {e}") from None
    except ValueError as e:  # YamlRefused: not valid YAML, an alias, too deep, too large
        raise ContentError(str(e)) from None


def _validate(path: Path, raw: Any, model: type[ContentModel]) -> Any:
    try:
        return model.model_validate(raw)
    except ValidationError as e:
        lines = [f"  {_entry(raw, err['loc'])}: {err['msg']}" for err in e.errors()]
        raise ContentError(f"{path}: {len(lines)} error(s)\n" + "\n".join(lines)) from None


class _Extends(ContentModel):
    extends: Slug  # a sibling folder name, never a path


@dataclass(frozen=True)
class _Resolved:
    """A folder's content info, where each content file comes from, and the chain of bases (self first)."""

    info: ContentInfo
    files: dict[str, Path]  # entities / pages / questions -> the YAML file read
    chain: tuple[tuple[Path, ContentInfo], ...]


_INHERITED = ("entities", "pages", "questions")
# A derived folder must name these itself: two sets sharing a session prefix would collide in runs and traces.
_OWN_KEYS = ("name", "session_prefix")


def _resolve(folder: Path, seen: tuple[Path, ...] = ()) -> _Resolved:
    """Read `folder/content.yaml`; with `extends: <base>`, resolve the sibling folder <base> first.

    A derived folder's content.yaml overrides its base's keys (name and session_prefix are required,
    the others are inherited), and each of entities.yaml, pages.yaml, questions.yaml is the folder's own
    when present, else its base's."""
    path = info_file(folder)
    raw = _load_yaml(path)
    if not (isinstance(raw, dict) and "extends" in raw):
        info = _validate(path, raw, ContentInfo)
        return _Resolved(info, {k: folder / FILES[k] for k in _INHERITED}, ((folder, info),))

    base_name = _validate(path, {"extends": raw["extends"]}, _Extends).extends
    base = folder.parent / base_name
    if not base.is_dir() and has_info(BUNDLED / base_name):  # a bundled set, from a folder anywhere
        base = BUNDLED / base_name
    here = seen + (folder.resolve(),)
    if base.resolve() in here:
        names = " -> ".join([f.name for f in here] + [base_name])
        raise ContentError(f"{path}: extends {base_name!r} makes a cycle: {names}")
    if not base.is_dir():
        known = sorted(f.name for f in folder.parent.iterdir() if has_info(f) and f != folder)
        raise ContentError(
            f"{path}: extends {base_name!r}: no content folder {base} "
            f"(content folders next to it: {', '.join(known) or 'none'}; bundled: {', '.join(bundled_names())})"
        )
    if not has_info(base):
        raise ContentError(f"{path}: extends {base_name!r}, but {base / FILES['info']} does not exist")
    parent = _resolve(base, here)

    missing = [k for k in _OWN_KEYS if k not in raw]
    if missing:
        raise ContentError(
            f"{path}: a folder that extends {base_name!r} names its own {' and '.join(_OWN_KEYS)} "
            f"(missing: {', '.join(missing)})"
        )
    own = {k: v for k, v in raw.items() if k != "extends"}
    info = _validate(path, {**parent.info.model_dump(), **own}, ContentInfo)
    for anc_folder, anc in parent.chain:
        for k in _OWN_KEYS:
            if getattr(info, k) == getattr(anc, k):
                raise ContentError(
                    f"{path}: {k} {getattr(info, k)!r} is also the {k} of "
                    f"{info_file(anc_folder)}: a derived set needs its own"
                )
    files = {k: folder / FILES[k] if (folder / FILES[k]).exists() else parent.files[k] for k in _INHERITED}
    return _Resolved(info, files, ((folder, info),) + parent.chain)


def _cross_check(files: dict[str, Path], c: Content) -> list[str]:
    """What one file cannot check alone: unique slugs, questions about known, non-distractor entities."""
    errs: list[str] = []
    ents = files["entities"]
    by_slug: dict[str, Entity] = {}
    for i, e in enumerate(c.entities):
        if e.slug in by_slug:
            errs.append(f"{ents}: entities[{i}] {{slug: {e.slug!r}}}: slug used twice")
        by_slug.setdefault(e.slug, e)
    page_slugs: set[str] = set()
    pages = [
        (ents, f"entities[{i}] {{slug: {e.slug!r}}} > pages[{j}]", p)
        for i, e in enumerate(c.entities)
        for j, p in enumerate(e.pages)
    ]
    pages += [(files["pages"], f"pages[{j}]", p) for j, p in enumerate(c.pages)]
    for path, where, p in pages:
        if p.slug in page_slugs:
            errs.append(f"{path}: {where} {{slug: {p.slug!r}}}: page slug used twice (page URLs must be unique)")
        page_slugs.add(p.slug)
    qs = files["questions"]
    for part, rows in (("single_turn", c.single_turn), ("multi_turn", c.multi_turn)):
        for i, q in enumerate(rows):
            asked = by_slug.get(q.entity)
            if asked is None:
                errs.append(f"{qs}: {part}[{i}] {{entity: {q.entity!r}}}: no such entity in {ents}")
            elif asked.distractor:
                errs.append(f"{qs}: {part}[{i}] {{entity: {q.entity!r}}}: a distractor entity is never asked about")
    return errs


def load_content(folder: str | Path) -> Content:
    """Read and validate a content folder (resolving `extends`); ContentError names the file and entry of
    every problem."""
    r = _resolve(Path(folder))
    ents = _validate(r.files["entities"], _load_yaml(r.files["entities"]), _EntitiesFile)
    pages = _validate(r.files["pages"], _load_yaml(r.files["pages"]), _PagesFile)
    qs = _validate(r.files["questions"], _load_yaml(r.files["questions"]), _QuestionsFile)
    c = Content(
        info=r.info, entities=ents.entities, pages=pages.pages, single_turn=qs.single_turn, multi_turn=qs.multi_turn
    )
    errs = _cross_check(r.files, c)
    if errs:
        raise ContentError("\n".join(errs))
    return c


BUNDLED = Path(__file__).resolve().parent / "bundled"


def find_content(spec: str | Path) -> Path | None:
    """The content folder `spec` names: a bundled one by name (`demo`, `demo-paraphrase`, `heldout`, ...) or
    any folder holding a content.yaml. None when `spec` is not one (e.g. a folder of parquet files)."""
    s = str(spec)
    if s and "/" not in s and "\\" not in s and has_info(BUNDLED / s):
        return BUNDLED / s
    p = Path(s)
    return p if has_info(p) else None


def bundled_names() -> list[str]:
    return sorted(d.name for d in BUNDLED.iterdir() if has_info(d))
