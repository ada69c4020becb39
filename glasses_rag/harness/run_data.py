"""The conversations a run answers: its benchmark's data (`Benchmark.prepare`, then `Benchmark.load`), prepared here,
before any agent is built (building an agent never writes data)."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from glasses_rag.evaluation import DataRequest, PreparedData
from glasses_rag.harness.benchmarks import benchmark_of, benchmark_registry, other_benchmark_for

log = logging.getLogger(__name__)

# Turns run per conversation. CRAG-MM's have 2 to 6, SuperGlasses' one; every trace holds the turns before it, so a
# 100k-turn row would write traces that grow each turn (382 MB in 90 s): the turns past this are not run, and the
# load report says so.
MAX_TURNS = 64


def data_request(args: argparse.Namespace) -> DataRequest:
    """The run's data options as its benchmark reads them."""
    return DataRequest(
        data=args.data,
        task=args.task,
        split=args.split,
        limit=args.limit,
        image_root=args.image_root,
        demo_dir=getattr(args, "demo_dir", None),
    )


def prepare_data(args: argparse.Namespace) -> PreparedData:
    """The run's data, prepared once (built on first use) by its benchmark: where its conversations are, and the
    local index they come with. A run with the local backend that names no index (--index-dir) searches the data's
    own, named in its configuration (`args.index_dir`: run.json shows it), else the benchmark's default index (the
    CRAG-MM demo's), handed to `build_agent` as its default (`args.default_index`; the configuration names none, as
    it never did)."""
    spec = benchmark_of(args)
    key = (spec.name, args.data, args.task, getattr(args, "demo_dir", None))
    cached = getattr(args, "prepared_data", None)
    if cached is not None and cached[0] == key:
        return cached[1]
    if args.data is None:
        raise ValueError(spec.data_help)
    other = other_benchmark_for(args.data, spec, benchmark_registry(getattr(args, "benchmark_module", None) or []))
    if other is not None:
        raise ValueError(f"{args.data} holds {other.title} questions: run it with --benchmark {other.name}")
    request = data_request(args)
    prepared = spec.prepare(request)
    args.default_index = None
    if args.index_dir is None and args.search in (None, "local"):
        if prepared.index_dir is not None:
            args.index_dir = prepared.index_dir
        elif spec.default_index is not None:
            args.default_index = spec.default_index(request)
    args.prepared_data = (key, prepared)
    return prepared


def load_data(args: argparse.Namespace) -> tuple[str, Any]:
    """(the source, its conversations, streamed: a dataset is never held decoded in memory)."""
    prepared = prepare_data(args)
    return prepared.source, BoundedConversations(benchmark_of(args).load(prepared.source, data_request(args)))


class BoundedConversations:
    """A benchmark's conversations, each cut to its first `max_turns` turns (noted in the loader's report, when it
    has one); the loader's other attributes (`report`, `rows`) read through."""

    def __init__(self, loaded: Any, max_turns: int = MAX_TURNS):
        self._loaded = loaded
        self._iter = iter(loaded)
        self.max_turns = max_turns

    def __iter__(self) -> BoundedConversations:
        return self

    def __next__(self) -> Any:
        conv = next(self._iter)
        if len(conv.turns) <= self.max_turns:
            return conv
        note = f"{conv.session_id}: {len(conv.turns)} turns, only the first {self.max_turns} are run"
        report = getattr(self._loaded, "report", None)
        if report is not None and isinstance(getattr(report, "messages", None), list):
            report.messages.append(note)
        log.warning("%s", note)
        cut = {"turns": conv.turns[: self.max_turns], "answers": list(conv.answers)[: self.max_turns]}
        return conv.model_copy(update=cut)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("_loaded", "_iter"):
            raise AttributeError(name)
        return getattr(self._loaded, name)
