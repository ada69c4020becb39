"""Load the SuperGlasses benchmark (Hugging Face `xandery/SuperGlasses`) into
`glasses_rag.retrieval.schema.Conversation`s, offline.

The dataset has two configs, each with one split `test`:
- `queries`: one row per question: `id`, `image_id` (int), `image`, `question`, `answer` (the ground truth),
  `category` (a list), `domain`, `difficulty`, `dynamism`, `image_quality`, `glasses`, `location`, `hops` (int),
  `use_image` ("Yes"/"No"), `sub_questions` (a list of dicts with `retrieval-tools`: the annotated trajectory);
- `images`: `image_id` and `image` (an Image feature: {bytes, path}), sharded as `images/test-000NN-of-00018.parquet`.

Rows are joined on `image_id`. Accepted sources (nothing is downloaded):
- a local folder holding both configs' parquet files (e.g. a `huggingface-cli download --repo-type dataset
  xandery/SuperGlasses --local-dir ...` copy), or only the queries;
- the id `xandery/SuperGlasses` (or `superglasses`), looked up in the local Hugging Face caches.
Which file belongs to which config is read from each file's columns (a file with `question` is a queries file;
one with `image_id` and `image` but no `question` is an images file), so the folder layout does not matter.

Each row becomes a one-turn conversation: session and interaction id = the row's `id`, the question, the
ground truth, and every other column kept as the turn's labels (carried into the trace's `labels`). How rows
are handled, and why:
- `use_image` "No" (the annotators say the question can be answered without the picture): run like every other
  row, with its image. The abstract counts all 2,422 image-question pairs, so no row is left out; the label is
  kept, so accuracy can be sliced by it. (The paper's exact treatment could not be read offline; see
  docs/superglasses.md.) `use_image_no="no-image"` runs such rows without the image, `"skip"` leaves them out (each one
  reported).
- a row whose `image_id` is in no images file and whose own `image` cell holds no picture: run without an
  image (the trace notes why); counted in `image_errors`.
- a JPEG that ends early (some SuperGlasses captures are truncated) is decoded leniently, as other SuperGlasses
  loaders do (PIL's LOAD_TRUNCATED_IMAGES), and noted in the report.
- a row without `id` gets `row-<n>`; without `question` it runs as an empty question (answered "I don't know");
  neither is dropped. Skipped rows (only with `use_image_no="skip"`) are counted and listed in the report.

Images are read shard by shard, one row group at a time, in file order: the questions are yielded grouped by
where their image lies (questions without an image first), so the 8.8 GB `images` config is read once and
never held in memory. The queries are streamed: read in batches and grouped `CHUNK_ROWS` (4096) at a time, so
SuperGlasses's 2,422 rows are one group, and a million-row file starts at once in bounded memory (its images are
then read once per chunk). `limit` takes the first N rows of the queries in dataset order before that grouping.
"""

from __future__ import annotations

import io
import json
import threading
from bisect import bisect_right
from collections.abc import Iterable, Iterator
from itertools import accumulate
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from glasses_rag.crag_mm.dataset import (
    ConversationIterator,
    LoadReport,
    find_cached_dataset,
    find_files,
    missing_data_message,
)
from glasses_rag.retrieval.schema import Conversation, Turn, plain

DATASET_ID = "xandery/SuperGlasses"
ALIASES = {"superglasses", "super-glasses", DATASET_ID.lower()}
# Columns that become the turn itself; every other column is kept as a label.
TURN_COLUMNS = ("id", "question", "answer", "image")
LABEL_COLUMNS = (
    "image_id",
    "category",
    "domain",
    "difficulty",
    "dynamism",
    "image_quality",
    "glasses",
    "location",
    "hops",
    "use_image",
    "sub_questions",
)
UseImageNo = Literal["image", "no-image", "skip"]
_TRUNCATED_LOCK = threading.Lock()


class SuperGlassesLoadReport(LoadReport):
    """LoadReport plus what is particular to SuperGlasses."""

    layout: str | None = "SuperGlasses queries + images, joined on image_id"
    queries_files: list[str] = Field(default_factory=list)
    images_files: list[str] = Field(default_factory=list)
    images_joined: int = 0
    use_image_no: int = Field(0, description="Rows whose use_image is not 'Yes'.")
    truncated_images: int = 0
    extra_columns: list[str] = Field(
        default_factory=list, description="Columns not in the known layout; kept as labels."
    )
    missing_columns: list[str] = Field(default_factory=list)


# ---------------------------------------------------------------------------------------------------------------
# locating files


def _root(path_or_name: str | Path) -> Path:
    src = Path(path_or_name).expanduser()
    if src.exists():
        return src
    name = str(path_or_name)
    hub_id = DATASET_ID if name.lower() in ALIASES else name
    cached = find_cached_dataset(hub_id)
    if cached is None:
        raise FileNotFoundError(
            missing_data_message(
                hub_id, f"huggingface-cli download --repo-type dataset {hub_id} --local-dir data/superglasses"
            )
        )
    return cached


def classify_files(root: Path) -> tuple[list[Path], list[Path]]:
    """(queries files, images files) under `root` (or `root` itself when it is a parquet file), by their columns."""
    import pyarrow.parquet as pq

    files = [root] if root.is_file() else find_files(root, "*.parquet")
    queries, images = [], []
    for f in files:
        names = set(pq.read_schema(f).names)
        if "question" in names:
            queries.append(f)
        elif {"image_id", "image"} <= names:
            images.append(f)
    if not queries:
        raise FileNotFoundError(f"no SuperGlasses queries parquet (a file with a 'question' column) under {root}")
    return sorted(queries), sorted(images)


def looks_like_superglasses(path: str | Path) -> bool:
    """True when a local path holds SuperGlasses queries (a parquet with `question` and `sub_questions` columns):
    the CRAG-MM loader would skip every such row as malformed."""
    import pyarrow.parquet as pq

    src = Path(path).expanduser()
    if not src.exists():
        return False
    if src.is_dir():
        files = find_files(src, "*.parquet", limit=50)
    else:
        files = [src] if src.suffix == ".parquet" else []
    try:
        return any({"question", "sub_questions"} <= set(pq.read_schema(f).names) for f in files)
    except Exception:  # noqa: BLE001 - unreadable files are the CRAG loader's to report
        return False


# ---------------------------------------------------------------------------------------------------------------
# reading images one row group at a time


class _RowGroups:
    """Reads one column of parquet files a row group at a time, keeping only the last row group read."""

    def __init__(self, column: str):
        self.column = column
        self._key: tuple[str, int] | None = None
        self._values: list[Any] = []

    def get(self, file: Path, group: int, offset: int) -> Any:
        import pyarrow.parquet as pq

        if self._key != (str(file), group):
            table = pq.ParquetFile(file).read_row_group(group, columns=[self.column])
            self._values = table.column(self.column).to_pylist()
            self._key = (str(file), group)
        return self._values[offset]


def _locations(files: list[Path], key_column: str) -> dict[Any, tuple[Path, int, int]]:
    """key -> (file, row group, offset in the row group), reading only the key column; the first occurrence wins."""
    import pyarrow.parquet as pq

    out: dict[Any, tuple[Path, int, int]] = {}
    for f in files:
        pf = pq.ParquetFile(f)
        for g in range(pf.num_row_groups):
            keys = pf.read_row_group(g, columns=[key_column]).column(key_column).to_pylist()
            for i, k in enumerate(keys):
                k = _int_or_none(k)
                if k is not None and k not in out:
                    out[k] = (f, g, i)
    return out


def _int_or_none(v: Any) -> int | None:
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def _image_cell(value: Any, roots: list[Path]) -> tuple[Any, str | None]:
    """An `image` cell as something glasses_rag.core.images.load_image reads ({bytes, path} dicts, bytes, or an
    existing path inside the dataset's folder or the user's image root: glasses_rag.core.images.confine), and why not
    when it cannot be: (None, None) when it holds no picture, (None, why) when its path is refused."""
    from glasses_rag.core.images import confine

    if isinstance(value, dict):
        data, path = value.get("bytes"), value.get("path")
        if data:
            return {"bytes": data, "path": path}, None
        value = path
    if isinstance(value, (bytes, bytearray)) and value:
        return {"bytes": bytes(value), "path": None}, None
    if isinstance(value, str) and value.strip():
        real, why = confine(value, roots)
        if real is None:
            return None, why
        return (real, None) if Path(real).is_file() else (None, None)
    return None, None


def _lenient_if_truncated(cell: Any) -> tuple[Any, bool]:
    """A JPEG without an end-of-image marker near its end is decoded here with PIL's truncated-image
    tolerance (the runner's strict decoder would refuse it); anything else is passed on undecoded."""
    data = cell.get("bytes") if isinstance(cell, dict) else None
    # 0xFF 0xD9 cannot occur inside entropy-coded data (0xFF is always stuffed), so an end marker near the end
    # means the file is whole, even with a few bytes of trailing metadata after it
    if not data or data[:2] != b"\xff\xd8" or b"\xff\xd9" in data[-1024:]:
        return cell, False
    from PIL import Image, ImageFile

    with _TRUNCATED_LOCK:  # a process-wide PIL switch: on only for this decode
        old = ImageFile.LOAD_TRUNCATED_IMAGES
        ImageFile.LOAD_TRUNCATED_IMAGES = True
        try:
            im = Image.open(io.BytesIO(data))
            im.load()
        except Exception:  # noqa: BLE001 - beyond repair: let the runner report it as corrupt
            return cell, False
        finally:
            ImageFile.LOAD_TRUNCATED_IMAGES = old
    return im, True


# ---------------------------------------------------------------------------------------------------------------
# rows -> conversations


def _text(v: Any) -> str | None:
    if v is None:
        return None
    if isinstance(v, (list, tuple)):
        return "|".join(str(x) for x in v if x is not None) or None
    s = str(v).strip()
    return s or None


def row_labels(row: dict[str, Any]) -> dict[str, Any]:
    """Every column of a queries row except id/question/answer/image, as JSON-able values (`category` as a list)."""
    labels = {k: plain(v) for k, v in row.items() if k not in TURN_COLUMNS}
    cat = labels.get("category")
    if isinstance(cat, str):  # a single category written as a string
        labels["category"] = [cat]
    if "image_id" in labels:
        labels["image_id"] = _int_or_none(labels["image_id"]) if labels["image_id"] is not None else None
    if "hops" in labels and labels["hops"] is not None:
        labels["hops"] = _int_or_none(labels["hops"])
    if isinstance(labels.get("sub_questions"), str):  # some exports store the list as JSON text
        try:
            labels["sub_questions"] = json.loads(labels["sub_questions"])
        except (json.JSONDecodeError, RecursionError):  # kept as the text it is
            pass
    return labels


def use_image_yes(labels: dict[str, Any]) -> bool:
    v = labels.get("use_image")
    return v is None or str(v).strip().lower() in ("yes", "y", "true", "1")


def row_to_conversation(row: dict[str, Any], n: int, report: SuperGlassesLoadReport) -> Conversation:
    """A queries row (without its image) as a one-turn conversation with all its labels."""
    sid = _text(row.get("id"))
    if sid is None:
        sid = f"row-{n}"
        report.messages.append(f"row {n}: no id; named {sid}")
    labels = row_labels(row)
    labels["sg_id"] = sid
    q = row.get("question")
    if not isinstance(q, str) or not q.strip():
        report.bad_turns += 1
        report.messages.append(f'row {n} ({sid}): no question; it is answered "I don\'t know"')
        q = ""
    answer = row.get("answer")
    answers = [] if answer is None else [str(answer)]
    if answer is None:
        report.messages.append(f"row {n} ({sid}): no answer; the turn runs but is not scored")
    turn = Turn(
        interaction_id=sid,
        query=q,
        domain=_text(labels.get("domain")),
        query_category=_text(labels.get("category")),
        dynamism=_text(labels.get("dynamism")),
        image_quality=_text(labels.get("image_quality")),
        labels=labels,
    )
    return Conversation(session_id=sid, turns=[turn], answers=answers, egocentric=True)


# (row number, the row without its image, where its own `image` cell is: (file, row group, offset) or None)
_QueryRow = tuple[int, dict[str, Any], tuple[Path, int, int] | None]


def load_superglasses(
    path_or_name: str | Path,
    limit: int | None = None,
    use_image_no: UseImageNo = "image",
    report: SuperGlassesLoadReport | None = None,
    image_root: str | Path | None = None,
) -> ConversationIterator:
    """Iterate SuperGlasses rows as Conversations (see the module docstring). Files are located and the queries
    read eagerly, so a missing dataset raises FileNotFoundError here; images are read while iterating. An image
    given as a path is read only inside the dataset's folder or `image_root` (default: GLASSES_IMAGE_ROOT).

    Example: `for conv in load_superglasses("data/superglasses", limit=20): ...`"""
    from glasses_rag.core.images import allowed_roots

    report = report if report is not None else SuperGlassesLoadReport()
    root = _root(path_or_name)
    report.source = str(path_or_name)
    report.split = "test"
    qfiles, ifiles = classify_files(root)
    report.queries_files = [str(f) for f in qfiles]
    report.images_files = [str(f) for f in ifiles]
    total = _check_columns(qfiles, report)
    chunks = _read_queries(qfiles, limit)
    images = _Images(_locations(ifiles, "image_id"), allowed_roots(root, image_root))
    rows = total if limit is None else min(limit, total)
    return ConversationIterator(_conversations(chunks, images, use_image_no, report), report, rows=rows)


CHUNK_ROWS = 4096  # queries rows held at once (the 2,422 of SuperGlasses are one chunk); see _read_queries


def _check_columns(qfiles: list[Path], report: SuperGlassesLoadReport) -> int:
    """Every queries file's columns reported (missing, extra) from its schema; the number of rows in all."""
    import pyarrow.parquet as pq

    total = 0
    for f in qfiles:
        pf = pq.ParquetFile(f)
        names = pf.schema_arrow.names
        report.missing_columns = sorted(
            {c for c in (*TURN_COLUMNS, *LABEL_COLUMNS) if c not in names} | set(report.missing_columns)
        )
        report.extra_columns = sorted(
            {c for c in names if c not in TURN_COLUMNS + LABEL_COLUMNS} | set(report.extra_columns)
        )
        total += pf.metadata.num_rows
    return total


def _read_queries(qfiles: list[Path], limit: int | None, chunk: int = CHUNK_ROWS) -> Iterator[list[_QueryRow]]:
    """The first `limit` queries rows in dataset order, without their images, `chunk` rows at a time, read in
    batches: a million-row file is never held whole before the first question runs."""
    import pyarrow.parquet as pq

    n, rows = 0, []
    for f in qfiles:
        if limit is not None and n >= limit:
            break
        pf = pq.ParquetFile(f)
        names = pf.schema_arrow.names
        starts = list(accumulate((pf.metadata.row_group(g).num_rows for g in range(pf.num_row_groups)), initial=0))
        at = 0  # the row's index in this file
        for batch in pf.iter_batches(batch_size=1024, columns=[c for c in names if c != "image"]):
            for r in batch.to_pylist()[: None if limit is None else limit - n]:
                g = bisect_right(starts, at) - 1
                rows.append((n, r, (f, g, at - starts[g]) if "image" in names else None))
                n, at = n + 1, at + 1
            if len(rows) >= chunk:
                yield rows
                rows = []
            if limit is not None and n >= limit:
                break
    if rows:
        yield rows


class _Images:
    """Where the rows' pictures are read: the images config (joined on image_id), else the row's own cell."""

    def __init__(self, locations: dict[Any, tuple[Path, int, int]], roots: list[Path]):
        self.locations = locations
        self.roots = roots  # where an image path may point (glasses_rag.core.images.allowed_roots)
        self.joined, self.own = _RowGroups("image"), _RowGroups("image")

    def location(self, row: dict[str, Any]) -> tuple[Path, int, int] | None:
        return self.locations.get(_int_or_none(row.get("image_id")))

    def reading_order(self, item: _QueryRow) -> tuple:
        """Rows without a joined image first (they read no image file), then by where the image lies."""
        loc = self.location(item[1])
        if loc is None:
            return (0, "", 0, 0, item[0])
        return (1, str(loc[0]), loc[1], loc[2], item[0])

    def cell(
        self, row: dict[str, Any], own: tuple[Path, int, int] | None, report: SuperGlassesLoadReport
    ) -> tuple[Any, str | None]:
        """The row's picture (see `_image_cell`), or None and why (a refused path); raises when a shard cannot be
        read."""
        cell, why = None, None
        loc = self.location(row)
        if loc is not None:
            cell, why = _image_cell(self.joined.get(*loc), self.roots)
            report.images_joined += cell is not None
        if cell is None and own is not None:
            cell, own_why = _image_cell(self.own.get(*own), self.roots)
            why = why or own_why
        return cell, why


def _conversations(
    chunks: Iterable[list[_QueryRow]], images: _Images, use_image_no: UseImageNo, report: SuperGlassesLoadReport
) -> Iterator[Conversation]:
    for n, row, own in (item for rows in chunks for item in sorted(rows, key=images.reading_order)):
        try:
            conv = row_to_conversation(row, n, report)
        except Exception as e:  # noqa: BLE001 - one bad row never stops the run
            report.skip(f"row {n}", f"{type(e).__name__}: {e}")
            continue
        use_image = use_image_yes(conv.turns[0].labels)
        if not use_image:
            report.use_image_no += 1
            if use_image_no == "skip":
                report.skip(f"row {n} ({conv.session_id})", "use_image is 'No' and use_image_no='skip'")
                continue
        try:
            cell, conv.image_error = images.cell(row, own, report)
        except Exception as e:  # noqa: BLE001 - an unreadable shard: the row runs without its image
            cell = None
            conv.image_error = f"image unreadable: {type(e).__name__}: {e}"[:300]
        _attach_image(conv, n, row, cell, not use_image and use_image_no == "no-image", report)
        report.loaded += 1
        yield conv


def _attach_image(
    conv: Conversation, n: int, row: dict[str, Any], cell: Any, without_image: bool, report: SuperGlassesLoadReport
) -> None:
    """Gives the conversation its picture (a truncated JPEG decoded leniently), or says why it has none."""
    if without_image:
        cell = None
        conv.image_error = "use_image is 'No': run without the image (use_image_no='no-image')"
    elif cell is None and conv.image_error is None:
        conv.image_error = f"no image for image_id {row.get('image_id')!r} in the images config"
    if cell is None:
        report.image_errors += 1
        report.messages.append(f"row {n} ({conv.session_id}): {conv.image_error}")
    else:
        cell, lenient = _lenient_if_truncated(cell)
        if lenient:
            report.truncated_images += 1
            report.messages.append(f"row {n} ({conv.session_id}): truncated JPEG decoded leniently")
    conv.image = cell
