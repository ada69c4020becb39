"""Imports flow one way, package by package and file by file, with no cycle.

Layers, bottom to top: shared types (`core`) <- text utilities (`text`) <- outside services (`web`) <- models
(`models`) <- tools (`tools`) <- search and data (`crag`) <- traces (`traces`) <- the agent (`graph`) <- the training road (`training`) <- front
ends (`benchmarks`, the test doubles in `testing`; inside the agent package the CLI `graph.run` and the starter-kit
adapter `graph.starter_kit`, which no library module imports). Checked on the source, every import statement
included (also those inside functions), so a lazy import that goes the wrong way, or closes a cycle, fails here.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYERS: list[tuple[str, ...]] = [
    ("core",), ("text",), ("web",), ("models",), ("tools",), ("crag",), ("traces",), ("graph",), ("training",),
    ("benchmarks", "testing"),
]
PACKAGES = tuple(p for layer in LAYERS for p in layer)
FRONT_END_MODULES = ("graph.run", "graph.starter_kit")


def package_layer(package: str) -> int:
    return next(i for i, layer in enumerate(LAYERS) if package in layer)


@cache
def modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for f in (ROOT / pkg).rglob("*.py"):
            rel = f.relative_to(ROOT).with_suffix("")
            parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
            out[".".join(parts)] = f
    return out


def _named(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return {m for m in found if m.split(".")[0] in PACKAGES}


@cache
def imports(module: str) -> frozenset[str]:
    """The project modules `module` imports ("from tools.base import Hit" names tools.base, not tools.base.Hit)."""
    known = modules()
    out = set()
    for target in _named(known[module]):
        while target not in known and "." in target:
            target = target.rsplit(".", 1)[0]
        if target in known and target != module:
            out.add(target)
    return frozenset(out)


def test_every_package_has_a_layer():
    tops = {p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file()}
    assert tops <= set(PACKAGES), sorted(tops - set(PACKAGES))


def test_packages_import_only_their_own_layer_or_lower():
    bad = []
    for mod in sorted(modules()):
        mine = package_layer(mod.split(".")[0])
        for target in imports(mod):
            if package_layer(target.split(".")[0]) > mine:
                bad.append(f"{mod} imports {target}")
    assert not bad, "\n".join(bad)


def test_no_library_module_imports_a_front_end():
    bad = [f"{mod} imports {t}" for mod in sorted(modules()) if not mod.startswith(("benchmarks", "testing"))
           for t in imports(mod) if t in FRONT_END_MODULES and mod not in FRONT_END_MODULES]
    assert not bad, "\n".join(bad)


def _cycles(graph: dict[str, frozenset[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan), i.e. the import cycles."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle_between_files_lazy_imports_included():
    assert not _cycles({m: imports(m) for m in modules()})


def test_no_import_cycle_between_packages():
    graph: dict[str, set[str]] = {}
    for mod in modules():
        graph.setdefault(mod.split(".")[0], set()).update(t.split(".")[0] for t in imports(mod))
    assert not _cycles({k: frozenset(v - {k}) for k, v in graph.items()})


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": frozenset({"b"}), "b": frozenset({"a"}), "c": frozenset()}) == [["a", "b"]]


LIBRARY = ("core", "text", "web", "models", "tools", "crag", "traces", "graph")
MAX_FUNCTION_LINES, MAX_CLASS_LINES = 60, 300


def oversized(source: str, where: str) -> list[str]:
    """Functions over MAX_FUNCTION_LINES and classes over MAX_CLASS_LINES lines (decorators and docstrings count)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        limit = (MAX_FUNCTION_LINES if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                 else MAX_CLASS_LINES if isinstance(node, ast.ClassDef) else None)
        if limit is not None and (n := node.end_lineno - node.lineno + 1) > limit:  # type: ignore[operator]
            found.append(f"{where}:{node.lineno} {node.name} ({n} lines)")  # type: ignore[attr-defined]
    return found


def test_no_library_function_over_60_lines_nor_class_over_300():
    found = [hit for pkg in LIBRARY for f in sorted((ROOT / pkg).rglob("*.py"))
             for hit in oversized(f.read_text(encoding="utf-8"), str(f.relative_to(ROOT)))]
    assert not found, found


def test_the_size_check_finds_a_long_function_and_a_long_class():
    long_function = "def f():\n" + "    x = 1\n" * MAX_FUNCTION_LINES
    long_class = "class C:\n" + "    x = 1\n" * MAX_CLASS_LINES
    assert oversized(long_function, "a.py") == ["a.py:1 f (61 lines)"]
    assert oversized(long_class, "b.py") == ["b.py:1 C (301 lines)"]
    assert oversized("def g():\n" + "    x = 1\n" * (MAX_FUNCTION_LINES - 1), "c.py") == []
