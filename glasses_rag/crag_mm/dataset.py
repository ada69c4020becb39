"""Load CRAG-MM rows (real or demo) into `glasses_rag.retrieval.schema.Conversation`, offline and fault-tolerant.

Accepted sources:
* a folder of parquet or arrow files (e.g. `data/validation-*.parquet` of a dataset repo),
* a folder written by `datasets.Dataset.save_to_disk` / `DatasetDict.save_to_disk`,
* a single .parquet / .arrow file,
* a Hugging Face dataset id such as `crag-mm-2025/crag-mm-single-turn-public`, looked up only in the
  local caches (HF_DATASETS_CACHE, HF_HUB_CACHE, HF_HOME, ~/.cache/huggingface). Nothing is downloaded.

Both layouts of the real dataset are read: v0.1.1 (`turns`/`answers` are lists of dicts) and v0.1.2
(dicts of lists). ClassLabel ids are decoded with the dataset's own features.

Egocentric rule, as the official evaluators apply it: a row is egocentric when its `image_url` is None
(the glasses captures carry their bytes; the normal web images carry a URL the official iterator
downloads). Images are not decoded here: the runner decodes a conversation's image (glasses_rag.core.images, bounded
and safe) only when one of its turns is left to run.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from glasses_rag.retrieval.schema import Conversation, Turn

TURN_KEYS = ("interaction_id", "domain", "query_category", "dynamism", "query", "image_quality")
LABEL_KEYS = ("domain", "query_category", "dynamism", "image_quality")
KNOWN_NAMES = {
    "single": "crag-mm-2025/crag-mm-single-turn-public",
    "single-turn": "crag-mm-2025/crag-mm-single-turn-public",
    "multi": "crag-mm-2025/crag-mm-multi-turn-public",
    "multi-turn": "crag-mm-2025/crag-mm-multi-turn-public",
}
IMAGE_URL_ONLY = "image not embedded; only image_url is given: download it beforehand (no network at run time)"


class LoadReport(BaseModel):
    """What `load_conversations` read: counts and one message per skipped or degraded row."""

    source: str = ""
    split: str | None = None
    layout: str | None = None  # "v0.1.1 list-of-dicts" | "v0.1.2 dict-of-lists"
    loaded: int = 0
    skipped: int = 0
    image_errors: int = 0
    bad_turns: int = 0
    messages: list[str] = Field(default_factory=list)

    def skip(self, where: str, why: str) -> None:
        self.skipped += 1
        self.messages.append(f"skipped {where}: {why}")

    def summary(self) -> str:
        return (
            f"{self.source} [{self.split or 'all'}] {self.layout or '?'}: loaded {self.loaded}, "
            f"skipped {self.skipped}, image errors {self.image_errors}"
        )


# ------------------------------------------------------------------------------------------
# Locating data
# ------------------------------------------------------------------------------------------


def _cache_roots() -> list[Path]:
    roots: list[Path] = []
    for var in ("HF_DATASETS_CACHE", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(var):
            roots.append(Path(os.environ[var]))
    hf_home = Path(os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface")
    roots += [hf_home / "datasets", hf_home / "hub", hf_home]
    seen, out = set(), []
    for r in roots:
        if r not in seen and r.is_dir():
            seen.add(r)
            out.append(r)
    return out


HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


def looks_like_hub_id(name: str) -> bool:
    """`owner/name` as the Hub spells a dataset id, and not a path on this machine (an absolute, `./` or `~` path,
    or one whose first folder exists here): only then is a `huggingface-cli download` hint of any use."""
    name = KNOWN_NAMES.get(name, name)
    return bool(HUB_ID.match(name)) and not Path(name.split("/")[0]).exists()


def missing_data_message(path_or_name: str | Path, download: str) -> str:
    """Why `path_or_name` could not be read, and what to do: a download hint for a Hub id, the folder for a path."""
    name = str(path_or_name)
    if not looks_like_hub_id(name):
        return (
            f"data folder or file not found: {name!r} (see docs/data.md for the bundled question sets and how to "
            "get real data)"
        )
    where = ", ".join(str(r) for r in _cache_roots()) or "none present"
    return (
        f"{name!r} is neither a local path nor a dataset found in the Hugging Face caches ({where}). Download it "
        f"beforehand, e.g. `{download}`, and pass the folder with --data (docs/data.md)."
    )


def find_cached_dataset(name: str) -> Path | None:
    """The local folder holding `owner/name` in a Hugging Face cache, or None. Never downloads."""
    name = KNOWN_NAMES.get(name, name)
    owner, _, ds = name.partition("/")
    candidates: list[Path] = []
    for root in _cache_roots():
        # hub cache: datasets--owner--name/snapshots/<rev>/
        hub = root / f"datasets--{owner}--{ds}" / "snapshots"
        if hub.is_dir():
            candidates += sorted(hub.iterdir(), key=lambda p: p.stat().st_mtime, reverse=True)
        # datasets arrow cache: owner___name/<config>/<version>/<hash>/*.arrow
        arrow = root / f"{owner}___{ds}"
        if arrow.is_dir():
            candidates += sorted(
                {f.parent for f in find_files(arrow, "*.arrow")}, key=lambda p: p.stat().st_mtime, reverse=True
            )
    for c in candidates:
        if find_files(c, "*.parquet", limit=1) or find_files(c, "*.arrow", limit=1):
            return c
    return None


MAX_DEPTH = 5  # dataset files sit a few folders down (snapshots/<rev>/data/...): never walk a whole disk


def find_files(
    root: Path, pattern: str, max_depth: int = MAX_DEPTH, limit: int = 10_000, max_entries: int = 20_000
) -> list[Path]:
    """Files matching `pattern` at most `max_depth` folders under `root` (symlinked folders not followed), at most
    `limit` of them, looking at no more than `max_entries` entries: a dataset path like "/" ends quickly instead of
    walking the filesystem."""
    out: list[Path] = []
    level = [root]
    seen = 0
    for _ in range(max_depth + 1):
        nxt: list[Path] = []
        for d in level:
            try:
                entries = sorted(d.iterdir())
            except OSError:
                continue
            seen += len(entries)
            if seen > max_entries:
                return out
            for e in entries:
                if e.is_dir() and not e.is_symlink():
                    nxt.append(e)
                elif e.match(pattern) and e.is_file():
                    out.append(e)
                    if len(out) >= limit:
                        return out
        level = nxt[:limit]
    return out


def _split_of(path: Path, root: Path) -> str | None:
    rel = path.relative_to(root) if path.is_relative_to(root) else Path(path.name)
    stem = path.name.split(".")[0]
    # "validation-00000-of-00001", "crag-mm-single-turn-public-validation.arrow", "validation/..."
    for part in [*rel.parts[:-1], stem]:
        for token in part.replace("_", "-").split("-"):
            if token in ("validation", "train", "test", "sample"):
                if token == "test" and "public-test" in part.replace("_", "-"):
                    return "public_test"
                return token
    return None


class RowSource:
    """Rows of a dataset and its Hugging Face features (as the JSON dict `Features.to_dict()` gives), read lazily.

    Parquet files (the Hub layout) are read with pyarrow in small batches: no `datasets` import (over a second of
    start-up) and never the whole table in memory. Arrow files and `save_to_disk` folders go through `datasets`."""

    def __init__(self, features: dict[str, Any], num_rows: int, batches: Any):
        self.features = features
        self.num_rows = num_rows
        self._batches = batches  # () -> iterator of lists of row dicts
        self.root: Path | None = None  # the file or folder the rows come from (image paths must stay inside)

    def rows(self, limit: int | None = None) -> Iterator[dict[str, Any]]:
        n = 0
        for batch in self._batches():
            for row in batch:
                if limit is not None and n >= limit:
                    return
                n += 1
                yield row


def _parquet_source(files: list[Path]) -> RowSource:
    import json

    import pyarrow.parquet as pq

    meta = pq.read_schema(files[0]).metadata or {}
    info = json.loads(meta.get(b"huggingface", b"{}") or b"{}")
    features = (info.get("info") or {}).get("features") or {}
    num_rows = sum(pq.ParquetFile(f).metadata.num_rows for f in files)

    def batches() -> Iterator[list[dict[str, Any]]]:
        # one row group at a time (pyarrow's iter_batches keeps pre-buffered pages around: ~one image per row read)
        for f in files:
            pf = pq.ParquetFile(f)
            for g in range(pf.num_row_groups):
                group = pf.read_row_group(g)
                for start in range(0, group.num_rows, 16):
                    yield group.slice(start, 16).to_pylist()

    return RowSource(features, num_rows, batches)


def _datasets_source(ds: Any) -> RowSource:
    from datasets import Image as HFImage

    if isinstance(ds.features.get("image"), HFImage):
        ds = ds.cast_column("image", HFImage(decode=False))  # bytes, decoded later and safely (glasses_rag.core.images)

    def batches() -> Iterator[list[dict[str, Any]]]:
        for i in range(0, len(ds), 16):
            chunk = ds[i : i + 16]
            yield [dict(zip(chunk, values)) for values in zip(*chunk.values())]

    return RowSource(ds.features.to_dict(), len(ds), batches)


def open_dataset(path_or_name: str | Path, split: str | None = None) -> RowSource:
    """The rows of a local folder/file or of a Hub dataset found in the local caches (offline); `.root` says where
    they were found."""
    src = _locate(path_or_name)
    source = _open_located(src, split)
    source.root = src
    return source


def _locate(path_or_name: str | Path) -> Path:
    src = Path(path_or_name).expanduser()
    if not src.exists():
        cached = find_cached_dataset(str(path_or_name))
        if cached is None:
            hub_id = KNOWN_NAMES.get(str(path_or_name), str(path_or_name))
            raise FileNotFoundError(
                missing_data_message(path_or_name, f"huggingface-cli download --repo-type dataset {hub_id}")
            )
        src = cached
    return src


def _open_located(src: Path, split: str | None) -> RowSource:
    if src.is_file():
        if src.suffix == ".arrow":
            import datasets

            return _datasets_source(datasets.Dataset.from_file(str(src)))
        return _parquet_source([src])
    if (src / "dataset_dict.json").exists() or (src / "state.json").exists():
        import datasets

        d = datasets.load_from_disk(str(src))
        if isinstance(d, datasets.DatasetDict):
            keys = list(d.keys())
            pick = split or ("validation" if "validation" in keys else keys[0])
            if pick not in d:
                raise KeyError(f"split {pick!r} not in {keys}")
            return _datasets_source(d[pick])
        return _datasets_source(d)
    files = find_files(src, "*.parquet")
    kind = "parquet"
    if not files:
        files = [f for f in find_files(src, "*.arrow") if not f.name.startswith("cache-")]
        kind = "arrow"
    if not files:
        raise FileNotFoundError(f"no parquet or arrow files under {src}")
    by_split: dict[str | None, list[Path]] = {}
    for f in files:
        by_split.setdefault(_split_of(f, src), []).append(f)
    if split is not None:
        chosen = by_split.get(split)
        if not chosen:
            raise KeyError(f"split {split!r} not found under {src}; found {sorted(map(str, by_split))}")
    elif len(by_split) == 1:
        chosen = next(iter(by_split.values()))
    else:
        chosen = by_split.get("validation") or by_split[sorted(by_split, key=str)[0]]
    if kind == "parquet":
        return _parquet_source(chosen)
    import datasets

    parts = [datasets.Dataset.from_file(str(f)) for f in chosen]
    return _datasets_source(parts[0] if len(parts) == 1 else datasets.concatenate_datasets(parts))


# ------------------------------------------------------------------------------------------
# Decoding rows
# ------------------------------------------------------------------------------------------


_LIST_TYPES = ("List", "Sequence", "LargeList")


def _unwrap_list(node: Any) -> Any:
    """The item feature of a list feature: `{"feature": X, "_type": "List"}` (or Sequence), or old-style `[X]`."""
    while True:
        if isinstance(node, list) and node:
            node = node[0]
        elif isinstance(node, dict) and node.get("_type") in _LIST_TYPES and "feature" in node:
            node = node["feature"]
        else:
            return node


def turn_label_names(turns_feature: Any) -> dict[str, list[str]]:
    """ClassLabel names of the turn labels, for both layouts (v0.1.2 dict of lists, v0.1.1 list of dicts)."""
    node = _unwrap_list(turns_feature)
    names: dict[str, list[str]] = {}
    for key in LABEL_KEYS:
        f = _unwrap_list(node.get(key)) if isinstance(node, dict) else None
        if isinstance(f, dict) and f.get("_type") == "ClassLabel" and f.get("names"):
            names[key] = list(f["names"])
    return names


def _label_decoder(names: list[str] | None):
    def dec(v: Any) -> str | None:
        if v is None or isinstance(v, str):
            return v
        try:
            return names[int(v)] if names is not None and 0 <= int(v) < len(names) else str(v)
        except (ValueError, TypeError):
            return str(v)

    return dec


def _as_records(value: Any, keys: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
    """Normalise a turns/answers cell (list of dicts or dict of lists) to a list of dicts."""
    if value is None:
        return []
    if isinstance(value, dict):
        lens = {k: len(v) for k, v in value.items() if isinstance(v, (list, tuple))}
        if not lens:
            return [dict(value)]  # a single un-nested record
        if len(set(lens.values())) != 1:
            raise ValueError(f"columns of unequal length {lens}")
        n = next(iter(lens.values()))
        return [{k: (v[i] if isinstance(v, (list, tuple)) else v) for k, v in value.items()} for i in range(n)]
    if isinstance(value, (list, tuple)):
        if not all(isinstance(x, dict) for x in value):
            raise ValueError("list items are not records")
        return [dict(x) for x in value]
    raise ValueError(f"unexpected type {type(value).__name__}")


def decode_image(cell: Any):
    """(PIL image or None, reason or None) from an Image() cell (decode=False), bytes or a path; bounded and
    safe (glasses_rag.core.images.load_image): only regular files, a pixel cap, EXIF orientation applied."""
    from glasses_rag.core.images import load_image

    if cell is None or (isinstance(cell, dict) and not cell.get("bytes") and not cell.get("path")):
        return None, None
    image, info = load_image(cell)
    return image, None if image is not None else (info.note or "corrupt image")


def _has_image(cell: Any) -> bool:
    if isinstance(cell, dict):
        return bool(cell.get("bytes") or cell.get("path"))
    return cell is not None and cell != b""


def confined_cell(cell: Any, roots: list[Path]) -> tuple[Any, str | None]:
    """A row's image cell as it may be read: bytes as they are; a path only when it resolves inside `roots`
    (glasses_rag.core.images.confine), as that real path; else (None, why)."""
    from glasses_rag.core.images import confine

    path = cell.get("path") if isinstance(cell, dict) and not cell.get("bytes") else cell
    if not isinstance(path, (str, Path)):
        return cell, None
    real, why = confine(path, roots)
    return (None, why) if real is None else ({"bytes": None, "path": real}, None)


def _row_to_conversation(
    row: dict[str, Any], decoders: dict[str, Any], where: str, report: LoadReport, roots: list[Path] | None = None
):
    turns_raw = _as_records(row.get("turns"))
    answers_raw = _as_records(row.get("answers"))
    if not turns_raw:
        raise ValueError("no turns")
    if answers_raw and len(answers_raw) != len(turns_raw):
        raise ValueError(f"{len(turns_raw)} turns but {len(answers_raw)} answers")
    turns: list[Turn] = []
    for i, t in enumerate(turns_raw):
        q = t.get("query")
        if not isinstance(q, str) or not q.strip():
            # one bad turn must not drop the conversation: it runs as an empty question (answered "I don't know")
            report.messages.append(f'{where}: turn {i} has no query; it is answered "I don\'t know"')
            report.bad_turns += 1
            q = ""
        iid = t.get("interaction_id")
        turns.append(
            Turn(
                interaction_id=str(iid) if iid not in (None, "") else f"{row.get('session_id')}-{i}",
                query=q,
                **{k: decoders[k](t.get(k)) for k in LABEL_KEYS},
            )
        )
    answers = []
    if answers_raw:
        ids = [t.interaction_id for t in turns]
        if len(set(ids)) != len(ids):
            report.messages.append(
                f"{where}: interaction ids repeat ({', '.join(sorted({i for i in ids if ids.count(i) > 1}))}); "
                "ground truth is taken by position"
            )
        # ground truth by position, as the official iterator pairs turns[i] with answers[i]
        answers = ["" if a.get("ans_full") is None else str(a.get("ans_full")) for a in answers_raw]

    image_url = row.get("image_url")
    image_url = image_url if isinstance(image_url, str) and image_url else None
    cell = row.get("image")
    err = None
    if _has_image(cell):
        cell, err = confined_cell(cell, roots or [])
    else:
        cell = None
        err = IMAGE_URL_ONLY if image_url else "no image and no image_url"
    if err:
        report.image_errors += 1
        report.messages.append(f"{where}: {err}")
    return Conversation(
        session_id=str(row.get("session_id") or where),
        image=cell,  # decoded by the runner, only when a turn is left to run
        image_url=image_url,
        image_error=err,
        turns=turns,
        answers=answers,
        egocentric=row.get("image_url") is None,  # the official rule: an egocentric row has no image_url
    )


class ConversationIterator:
    """An iterator of `Conversation`s whose `.report` (a LoadReport) fills in while it is consumed."""

    def __init__(self, gen: Iterator[Conversation], report: LoadReport, rows: int | None = None):
        self._gen = gen
        self.report = report
        self.rows = rows  # rows that will be read (before malformed ones are skipped), for progress bars

    def __iter__(self) -> ConversationIterator:
        return self

    def __next__(self) -> Conversation:
        return next(self._gen)


def _iter_rows(
    source: RowSource, decoders, limit: int | None, report: LoadReport, roots: list[Path]
) -> Iterator[Conversation]:
    for i, row in enumerate(source.rows(limit)):
        where = f"row {i}"
        try:
            where = f"row {i} ({row.get('session_id')})"
            conv = _row_to_conversation(row, decoders, where, report, roots)
        except Exception as exc:
            report.skip(where, f"{type(exc).__name__}: {exc}")
            continue
        report.loaded += 1
        yield conv


def load_conversations(
    path_or_name: str | Path,
    split: str | None = None,
    limit: int | None = None,
    report: LoadReport | None = None,
    image_root: str | Path | None = None,
) -> ConversationIterator:
    """Iterate `Conversation`s; malformed rows are skipped and recorded in the returned iterator's
    `.report` (or in `report` when one is passed). Opening the source happens eagerly, so a missing
    dataset raises FileNotFoundError here; `limit` caps the number of rows read. An image given as a path is
    read only inside the dataset's folder or `image_root` (default: GLASSES_IMAGE_ROOT); see glasses_rag.core.images.

    Example: `for conv in load_conversations("data/crag-mm", split="validation", limit=10): ...`"""
    from glasses_rag.core.images import allowed_roots

    report = report if report is not None else LoadReport()
    report.source = str(path_or_name)
    report.split = split
    source = open_dataset(path_or_name, split)
    tf = source.features.get("turns")
    dict_of_lists = isinstance(tf, dict) and tf.get("_type") not in _LIST_TYPES
    report.layout = "v0.1.2 dict-of-lists" if dict_of_lists else "v0.1.1 list-of-dicts"
    names = turn_label_names(tf)
    decoders = {k: _label_decoder(names.get(k)) for k in LABEL_KEYS}
    rows = source.num_rows if limit is None else min(limit, source.num_rows)
    roots = allowed_roots(source.root, image_root)
    return ConversationIterator(_iter_rows(source, decoders, limit, report, roots), report, rows=rows)


def load_all(
    path_or_name: str | Path, split: str | None = None, limit: int | None = None
) -> tuple[list[Conversation], LoadReport]:
    """Convenience: every conversation plus the report."""
    it = load_conversations(path_or_name, split=split, limit=limit)
    return list(it), it.report
