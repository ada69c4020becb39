"""The conversations a run answers: a CRAG-MM dataset, a benchmark content folder built once, or SuperGlasses."""

from __future__ import annotations

import argparse
from typing import Any

TASK_DATA = {1: "single_turn", 2: "single_turn", 3: "multi_turn"}


def load_data(args: argparse.Namespace):
    from glasses_rag.crag_mm.dataset import load_conversations

    if args.benchmark == "superglasses":
        from glasses_rag.superglasses.loader import load_superglasses
        from glasses_rag.superglasses.sample import SAMPLE_NAMES, ensure_sample

        if args.data == "demo":
            raise ValueError(
                "--benchmark superglasses needs --data: 'sample' (the offline sample, built on first "
                "use), a local copy of xandery/SuperGlasses (folder of its parquet files) or the dataset "
                "id when it is in the Hugging Face cache"
            )
        if args.data in SAMPLE_NAMES:
            from glasses_rag.crag_mm.demo import demo_paths

            args.data = str(ensure_sample(demo_paths(args.demo_dir).root.parent / "superglasses-sample"))
        return args.data, load_superglasses(args.data, limit=args.limit, image_root=args.image_root)
    from glasses_rag.superglasses.loader import looks_like_superglasses

    built = build_content(args)
    if built is not None:
        source = getattr(built, TASK_DATA[args.task])
    elif looks_like_superglasses(args.data):
        raise ValueError(f"{args.data} holds SuperGlasses questions: run it with --benchmark superglasses")
    else:
        source = args.data
    return source, load_conversations(source, split=args.split, limit=args.limit, image_root=args.image_root)


def build_content(args: argparse.Namespace) -> Any:
    """`--data` naming a benchmark content folder (bundled: demo, demo-paraphrase, heldout; or a folder with a
    benchmark.yaml): build its dataset and index once (data/<name>/ beside the demo), and search that index
    unless --index-dir says otherwise. None for any other --data."""
    from glasses_rag.crag_mm.content import dataset_paths, ensure_dataset, find_content, load_content
    from glasses_rag.crag_mm.demo import demo_paths, ensure_demo

    if args.benchmark != "crag-mm":
        return None
    if getattr(args, "built_content", None) is not None:
        return args.built_content
    if args.data == "demo":  # the search backend defaults to the demo's index already
        built = ensure_demo(args.demo_dir)
    else:
        folder = find_content(args.data)
        if folder is None:
            return None
        built = ensure_dataset(load_content(folder), dataset_paths(demo_paths(args.demo_dir).root.parent / folder.name))
        if args.index_dir is None and args.search in (None, "local"):
            args.index_dir = built.root
    args.built_content = built
    return built
