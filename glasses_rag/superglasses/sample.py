"""An offline SuperGlasses sample in the exact shape of `xandery/SuperGlasses` (both configs as parquet): four
questions over three photos, to try a SuperGlasses run, its report, logs and viewer page without the Hub.

    python -m glasses_rag.superglasses.sample data/superglasses-sample     # writes it (also done on first use)
    python -m graph.run --benchmark superglasses --data sample      # runs it (built under data/superglasses-sample)

The questions: a one-hop image search, a two-hop image + text search, one needing no retrieval (`use_image` "No"),
and one whose photo is in no images file (to show how a missing image is reported). The photos are flat colours:
the sample exercises the pipeline, not an agent's accuracy (offline, the open-web tools have no key: see the run
header). The tests build the same data with the same functions.
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

from PIL import Image

SAMPLE_NAMES = ("sample", "superglasses-sample")


def jpeg(color=(200, 30, 30), size=(64, 48)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format="JPEG")
    return buf.getvalue()


def sub_q(text: str, tools: Any) -> dict[str, str]:
    """One `sub_questions` item; `retrieval-tools` is stored as text in the parquet (dicts and lists as JSON)."""
    return {"sub_question": text, "retrieval-tools": tools if isinstance(tools, str) else json.dumps(tools)}


def query_row(i: int, image_id: int | None, question: str, answer: str, subs: list[dict], **labels: Any) -> dict:
    row = {
        "id": f"sg-{i:04d}",
        "image_id": image_id,
        "image": f"{image_id}.jpg",
        "question": question,
        "answer": answer,
        "category": ["Entity Recognition"],
        "domain": "Vehicle",
        "difficulty": "Easy",
        "dynamism": "Static",
        "image_quality": "Normal",
        "glasses": "Ray-Ban Meta",
        "location": "Outdoor",
        "hops": len(subs),
        "use_image": "Yes",
        "sub_questions": subs,
    }
    row.update(labels)
    return row


def write_superglasses(root: Path, rows: list[dict], images: dict[int, bytes], shards: int = 2) -> Path:
    """`root/queries/test-00000-of-00001.parquet` and `root/images/test-000NN-of-0000S.parquet`, written by
    `datasets` with the dataset's features (Image() cells as {bytes, path} structs)."""
    from datasets import Dataset, Features, Sequence, Value
    from datasets import Image as HFImage

    (root / "queries").mkdir(parents=True, exist_ok=True)
    (root / "images").mkdir(parents=True, exist_ok=True)
    qfeat = Features(
        {
            "id": Value("string"),
            "image_id": Value("int64"),
            "image": Value("string"),
            "question": Value("string"),
            "answer": Value("string"),
            "category": Sequence(Value("string")),
            "domain": Value("string"),
            "difficulty": Value("string"),
            "dynamism": Value("string"),
            "image_quality": Value("string"),
            "glasses": Value("string"),
            "location": Value("string"),
            "hops": Value("int64"),
            "use_image": Value("string"),
            "sub_questions": [{"sub_question": Value("string"), "retrieval-tools": Value("string")}],
        }
    )
    cols = {k: [r.get(k) for r in rows] for k in qfeat}
    _parquet(Dataset.from_dict(cols, features=qfeat), root / "queries" / "test-00000-of-00001.parquet")
    ids = sorted(images)
    ifeat = Features({"image_id": Value("int64"), "image": HFImage()})
    for s in range(shards):
        part = ids[s::shards]
        part_rows = {"image_id": part, "image": [{"bytes": images[i], "path": f"{i}.jpg"} for i in part]}
        name = f"test-{s:05d}-of-{shards:05d}.parquet"
        _parquet(Dataset.from_dict(part_rows, features=ifeat), root / "images" / name)
    return root


def _parquet(ds: Any, path: Path) -> None:
    """`ds` as parquet at `path`, written beside it and renamed (never through a link planted there)."""
    from glasses_rag.core.files import write_atomic

    buf = io.BytesIO()
    ds.to_parquet(buf)
    write_atomic(path, buf.getvalue(), sync=False)


def sample_dataset(root: Path) -> Path:
    """Four questions over three images: one-hop image search, two-hop image + text, no retrieval (use_image
    "No"), and a question whose image_id is in no images file."""
    rows = [
        query_row(
            0,
            1,
            "What is this rocket?",
            "Falcon 9",
            [sub_q("What is the rocket?", {"Image Search": {"url": "https://example.org/f9"}})],
            difficulty="Easy",
        ),
        query_row(
            1,
            1,
            "Who makes this rocket?",
            "SpaceX",
            [
                sub_q("What is the rocket?", ["Image Search"]),
                sub_q("Who makes Falcon 9?", {"tool": "Text Search", "keywords": "Falcon 9 manufacturer"}),
            ],
            difficulty="Hard",
            category=["Entity Recognition", "Reasoning"],
        ),
        query_row(
            2,
            2,
            "What colour is the sky?",
            "blue",
            [sub_q("What colour is the sky?", "none")],
            use_image="No",
            domain="Nature",
            glasses="Xiaomi",
        ),
        query_row(
            3,
            99,
            "When was this tower built?",
            "1889",
            [sub_q("When was the Eiffel Tower built?", '{"Text Search": "Eiffel Tower built year"}')],
            domain="Landmark",
            glasses="RayNeo",
        ),
    ]
    return write_superglasses(root, rows, {1: jpeg((200, 30, 30)), 2: jpeg((30, 30, 200)), 3: jpeg((0, 200, 0))})


def ensure_sample(root: Path) -> Path:
    """The sample under `root`, written on first use (never overwritten once complete)."""
    from glasses_rag.crag_mm.builds import quiet_datasets

    if not (root / "queries" / "test-00000-of-00001.parquet").exists():
        with quiet_datasets():
            sample_dataset(root)
    return root


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    root = Path(args[0] if args else "data/superglasses-sample")
    print(sample_dataset(root))
    return 0


if __name__ == "__main__":
    sys.exit(main())
