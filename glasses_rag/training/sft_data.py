"""The export as a training set: TRL's columns, a vision dataset recognised over the whole file, examples measured
in the tokens the model will get (images expanded) and left out when longer than the bound.

A vision export mixes photos with examples without one (a turn without a photo, a SuperGlasses text-only hop), and
its messages mix string contents (the system text) with lists of parts (the user turn with the photo). Arrow wants
one type per column, so every content becomes a list of parts (TRL's vision collator makes that form anyway) and an
example without a photo gets an empty `images` list (TRL then sends the batch without images).

Every line is checked as it is read (glasses_rag.training.sft_checks): a bad one stops with one line naming it, a
photo path outside the export's folder is refused, and an example whose text cannot fit `max_length` is left out
before it is tokenized.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from glasses_rag.core.images import allowed_roots
from glasses_rag.training.sft_checks import (
    BadExample,
    check_row,
    confined_images,
    example_lines,
    longest_token,
    parse_line,
    text_chars,
)

COLUMNS = ("prompt", "completion", "messages", "images", "tools")
MESSAGE_COLUMNS = ("prompt", "completion", "messages")


def has_images(path: str | Path) -> bool:
    """Whether any example of the JSONL export at `path` has a photo (not only the first: a first example without
    one would otherwise load a text-only model, and TRL would refuse the vision rows). BadExample for a line that
    is not a JSON object."""
    for n, text in example_lines(path):
        if text is not None and parse_line(path, n, text).get("images"):
            return True
    return False


def read_rows(path: str | Path, vision: bool) -> list[dict[str, Any]]:
    """TRL's columns of each example, checked (BadExample names the line); for a vision dataset, contents as lists of
    parts, `images` always a list of paths inside the export's folder (or GLASSES_IMAGE_ROOT). A line too long to
    read whole is a row `{"too_long": True}`, left out by `load_examples`."""
    rows: list[dict[str, Any]] = []
    roots, shape = allowed_roots(path), None
    for n, line in example_lines(path):
        if line is None:
            rows.append({"too_long": True})
            continue
        raw = parse_line(path, n, line)
        shape = check_row(raw, f"{path} line {n}", shape)
        if vision and raw.get("images"):
            raw["images"] = confined_images(raw["images"], roots, f"{path} line {n}")
        row = {k: raw[k] for k in COLUMNS if k in raw and (k != "images" or vision)}
        if vision:
            row["images"] = list(raw.get("images") or [])
            for k in MESSAGE_COLUMNS:
                if k in row:
                    row[k] = [_as_parts(m) for m in row[k]]
        rows.append(row)
    if not rows:
        raise BadExample(f"{path}: no example in it (an empty file)")
    return rows


def _as_parts(message: dict[str, Any]) -> dict[str, Any]:
    content = message.get("content")
    if isinstance(content, str):
        content = [{"type": "text", "text": content}]
    parts = [{"type": p.get("type"), "text": p.get("text")} for p in content or [] if isinstance(p, dict)]
    return {**message, "content": parts}


def _system_into_user(row: dict[str, Any]) -> dict[str, Any]:
    from glasses_rag.models.vlm.base import system_into_user

    key = "messages" if "messages" in row else "prompt"
    return {**row, key: system_into_user(row[key])}


def load_examples(path: str | Path, max_length: int, processing: Any, vision: bool | None = None) -> tuple[Any, int]:
    """The export as a `datasets.Dataset` with TRL's columns, less the examples longer than `max_length` tokens as
    the model gets them (returned as a count); for a template that refuses a system message beside an image (Llama
    3.2 Vision's), the system text opens the first user turn, as at inference."""
    import datasets

    from glasses_rag.models.vlm.vision_inputs import refuses_system_with_images

    vision = has_images(path) if vision is None else vision
    rows = read_rows(path, vision)
    bound = max_length * longest_token(processing)  # more text than this cannot fit, however it is tokenized
    fitting = [r for r in rows if not r.get("too_long") and text_chars(r) <= bound]
    left_out, rows = len(rows) - len(fitting), fitting
    if vision and rows and refuses_system_with_images(processing):
        rows = [_system_into_user(r) for r in rows]
    ds = datasets.Dataset.from_list(rows) if rows else datasets.Dataset.from_dict({"prompt": [], "completion": []})
    if vision and rows:
        ds = ds.cast_column("images", datasets.Sequence(datasets.Image()))
    before = len(ds)
    ds = ds.filter(lambda ex: example_length(ex, processing) <= max_length)
    return ds, before - len(ds) + left_out


def example_length(example: dict[str, Any], processing: Any) -> int:
    """The tokens of `example` (prompt and completion, or messages) as the model gets them: with its photos, as
    the processor expands them (a dynamic-resolution model's image tokens count)."""
    msgs = example["messages"] if "messages" in example else [*example["prompt"], *example["completion"]]
    tok = getattr(processing, "tokenizer", processing)
    template = getattr(processing, "chat_template", None) or tok.chat_template
    text = processing.apply_chat_template(msgs, tokenize=False, chat_template=template)
    images = [im for im in example.get("images") or [] if im is not None]
    if not images:
        return len(tok(text, add_special_tokens=False)["input_ids"])
    try:
        out = processing(text=[text], images=[images], add_special_tokens=False)
    except (ValueError, TypeError, IndexError):
        out = processing(text=[text], images=images, add_special_tokens=False)
    return len(out["input_ids"][0])


__all__ = ["example_length", "has_images", "load_examples", "read_rows"]
