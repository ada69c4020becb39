"""The benchmarks a run can evaluate, by name: one `Registry` of `glasses_rag.evaluation.Benchmark`s.

Each benchmark package is one line of `benchmark_registry` (the import of its `BENCHMARK`); a module of your own is
added for one run with `python -m graph.run --benchmark-module MODULE` (its `BENCHMARK`, or the list its
`benchmarks()` returns), without editing this package. Like every registry of the project
([one registration rule](../../docs/architecture.md)), it is filled by explicit adds here, from the modules named:
nothing registers itself on import. The registry sits above the benchmark packages it lists and below its readers
(the harness, the command line, the viewer and the run diff).

Example::

    from glasses_rag.harness.benchmarks import benchmark_registry

    registry = benchmark_registry(["my_package.my_benchmark"])
    registry.lookup("crag-mm").tasks  # {1: 'single-turn, image-KG search only', ...}
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from glasses_rag.core.registry import Registry
from glasses_rag.evaluation import Benchmark
from tools.registry import ToolProfile

DEFAULT = "crag-mm"


def benchmarks_in(module: str) -> list[Benchmark]:
    """The benchmarks a module defines: its `BENCHMARK` and what its `benchmarks()` returns."""
    mod = importlib.import_module(module)
    found: list[Any] = []
    if getattr(mod, "BENCHMARK", None) is not None:
        found.append(mod.BENCHMARK)
    listed = getattr(mod, "benchmarks", None)
    if callable(listed):
        found += list(listed())
    if not found:
        raise ValueError(f"benchmark module {module} defines neither BENCHMARK (a Benchmark) nor benchmarks()")
    try:
        return [b if isinstance(b, Benchmark) else Benchmark.model_validate(b) for b in found]
    except ValidationError as e:
        raise ValueError(f"benchmark module {module}: not a Benchmark: {e.errors()[0]['msg']}") from None


def benchmark_registry(modules: Iterable[str] = ()) -> Registry[Benchmark]:
    """The benchmark packages of the project (one line each), then those of `modules` (import paths), by name; two
    under one name are an error."""
    from glasses_rag.crag_mm.spec import BENCHMARK as CRAG_MM  # the default
    from glasses_rag.superglasses.spec import BENCHMARK as SUPERGLASSES

    found = [CRAG_MM, SUPERGLASSES, *(b for m in modules for b in benchmarks_in(m))]
    return Registry("benchmark", [(b.name, b) for b in found], origin=lambda b: b.title)


def benchmark_of(args: argparse.Namespace) -> Benchmark:
    """The benchmark a run's options name (`--benchmark`, among the built-in ones and `--benchmark-module`'s)."""
    modules = getattr(args, "benchmark_module", None) or []
    return benchmark_registry(modules).lookup(getattr(args, "benchmark", None) or DEFAULT)


def tool_profile_named(name: str, modules: Iterable[str] = ()) -> ToolProfile:
    """The tool profile of the benchmark whose agents' configuration names it `name` (ToolsConfig.profile)."""
    found = [b.tools for b in benchmark_registry(modules).values() if b.tools.name == name]
    if not found:
        raise ValueError(f"no benchmark has the tool profile {name!r} (--benchmark-module MODULE adds yours)")
    return found[0]


def benchmark_for_run(run: Mapping[str, Any], run_dir: Path, registry: Registry[Benchmark]) -> Benchmark | None:
    """The benchmark a run folder was made by: run.json's "benchmark" (None when not in `registry`); a run.json
    that names none is the benchmark whose own report file is there, else the default."""
    name = run.get("benchmark")
    if isinstance(name, str):
        return registry.get(name)
    own = [b for b in registry.values() if b.viewer.file != "report.json" and (run_dir / b.viewer.file).is_file()]
    return own[0] if own else registry.get(DEFAULT)


def other_benchmark_for(data: str, spec: Benchmark, registry: Registry[Benchmark]) -> Benchmark | None:
    """Another benchmark whose layout `data` is in, when `spec` does not read it (a run pointed at the wrong one)."""
    if spec.recognizes is not None and spec.recognizes(data):
        return None
    return next((b for b in registry.values() if b is not spec and b.recognizes and b.recognizes(data)), None)
