"""Imports flow one way, layer by layer and file by file, with no cycle; the installed names collide with nothing.

Folders are layers, bottom to top (a module belongs to the layer of its longest matching prefix): the libraries
(`glasses_rag.core`, `.text`, `.web`, `.models`, `.retrieval`) <- the trace record (`traces`: schema and store) <- the
agent (`tools` <- `glasses_rag.policies` <- `graph`) <- the benchmarks (`glasses_rag.crag_mm`,
`glasses_rag.superglasses`) <- training (`glasses_rag.training`) <- the run harness (`glasses_rag.harness`) <- the
front ends (`glasses_rag.frontends`: the CLI, the trace viewer and run diff, the starter-kit adapter; `graph/run.py`
is the design's entry point into them) <- benchmark scripts and test doubles.
Checked on the source, every import statement included (also those inside functions), so a lazy import that goes the
wrong way, or closes a cycle, fails here. Also here: one class per name across the code, sizes of functions and classes.
"""

from __future__ import annotations

import ast
import importlib.metadata as md
import re
from functools import cache
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
FRONT_ENDS = ("graph.run", "glasses_rag.frontends")
LAYERS: list[tuple[str, ...]] = [
    ("glasses_rag", "prompts"),
    ("glasses_rag.core",),
    ("glasses_rag.text",),
    ("glasses_rag.web",),
    ("glasses_rag.models",),
    ("glasses_rag.retrieval",),
    ("traces",),
    ("tools",),
    ("glasses_rag.policies",),
    ("graph",),
    ("glasses_rag.evaluation",),
    ("glasses_rag.crag_mm",),
    ("glasses_rag.superglasses",),
    ("glasses_rag.training",),
    ("glasses_rag.harness",),
    FRONT_ENDS,
    ("benchmarks", "glasses_rag.testing"),
]
UNITS = tuple(p for layer in LAYERS for p in layer)
TOP_PACKAGES = ("glasses_rag", "tools", "traces", "graph", "prompts", "benchmarks")
# what the install puts into site-packages: the four names the design fixes and the project's one namespace
INSTALLED = {"glasses_rag", "graph", "tools", "traces", "prompts"}


def unit(module: str) -> str:
    """The layer unit a module belongs to: the longest prefix of it named in LAYERS."""
    return max((u for u in UNITS if module == u or module.startswith(u + ".")), key=len)


def layer(module: str) -> int:
    u = unit(module)
    return next(i for i, names in enumerate(LAYERS) if u in names)


@cache
def modules() -> dict[str, Path]:
    out = {}
    for pkg in TOP_PACKAGES:
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
    return {m for m in found if m.split(".")[0] in TOP_PACKAGES}


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
    assert tops <= set(TOP_PACKAGES), sorted(tops - set(TOP_PACKAGES))
    subs = {f"glasses_rag.{p.name}" for p in (ROOT / "glasses_rag").iterdir() if (p / "__init__.py").is_file()}
    assert subs <= set(UNITS), sorted(subs - set(UNITS))


def test_modules_import_only_their_own_layer_or_lower():
    bad = [
        f"{mod} imports {target}" for mod in sorted(modules()) for target in imports(mod) if layer(target) > layer(mod)
    ]
    assert not bad, "\n".join(bad)


def test_the_layer_check_places_modules_by_their_longest_prefix():
    assert unit("glasses_rag.frontends.starter_kit") == "glasses_rag.frontends"
    assert layer("glasses_rag.harness.runner") < layer("graph.run") < layer("glasses_rag.testing.fake_model_server")
    assert layer("graph.run") == layer("glasses_rag.frontends.run") > layer("graph.build")
    assert layer("traces.schema") < layer("glasses_rag.crag_mm.scoring") < layer("glasses_rag.frontends.viewer")
    assert layer("glasses_rag.policies.rules.plan") < layer("graph.build")


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


def test_no_import_cycle_between_layer_units():
    graph: dict[str, set[str]] = {}
    for mod in modules():
        graph.setdefault(unit(mod), set()).update(unit(t) for t in imports(mod))
    assert not _cycles({k: frozenset(v - {k}) for k, v in graph.items()})


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": frozenset({"b"}), "b": frozenset({"a"}), "c": frozenset()}) == [["a", "b"]]


def _doc_section(title: str) -> str:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    return text.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_the_architecture_page_shows_these_layers_and_every_package():
    rows = [line for line in _doc_section("Packages in layers").splitlines() if re.match(r"\| \d+ \|", line)]
    documented = [{u for u in re.findall(r"`([\w.]+)`", row) if u in UNITS} for row in rows]
    assert documented == [set(layer) for layer in LAYERS]
    tree = _doc_section("The tree")
    packages = {f.parent.relative_to(ROOT) for pkg in TOP_PACKAGES for f in (ROOT / pkg).rglob("__init__.py")}
    missing = sorted(str(d) for d in packages if len(d.parts) <= 3 and not re.search(rf"\b{d.name}/", tree))
    assert not missing, f"docs/architecture.md's tree lacks {missing}"


def test_the_architecture_page_draws_the_import_graph_the_code_has():
    from folder_imports import BEGIN, DOC, END, drawing

    page = DOC.read_text(encoding="utf-8")
    shown = BEGIN + page.split(BEGIN, 1)[1].split(END, 1)[0] + END
    assert shown == drawing(), "docs/architecture.md's import graph is stale: python tests/folder_imports.py --write"
    assert "; 0 run upward; 0 cycles." in shown


def test_the_drawing_counts_an_upward_arrow_and_a_cycle(monkeypatch):
    import folder_imports

    graph = {u: set() for u in folder_imports.UNITS}
    graph.update({"glasses_rag.core": {"tools"}, "tools": {"glasses_rag.core"}})  # a library importing the agent
    monkeypatch.setattr(folder_imports, "folder_graph", lambda: graph)
    assert "; 1 run upward; 1 cycles." in folder_imports.drawing()


LIBRARY = ("glasses_rag", "graph", "tools", "traces")  # glasses_rag/testing (fakes for the tests) aside
MAX_FILE_LINES, MAX_FUNCTION_LINES, MAX_CLASS_LINES = 600, 60, 300


def physical_lines(node: ast.AST) -> int:
    """The lines `node` spans in the file as `ruff format` writes it (CI checks the format), its decorators
    included."""
    first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])  # type: ignore[attr-defined]
    return node.end_lineno - first + 1  # type: ignore[attr-defined]


def oversized(source: str, where: str) -> list[str]:
    """The file over MAX_FILE_LINES, functions over MAX_FUNCTION_LINES and classes over MAX_CLASS_LINES, in
    physical lines after formatting (docstrings, comments and blank lines count)."""
    n_file = source.count("\n") + (not source.endswith("\n") and bool(source))
    found = [f"{where} ({n_file} lines)"] if n_file > MAX_FILE_LINES else []
    for node in ast.walk(ast.parse(source)):
        limit = (
            MAX_FUNCTION_LINES
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            else MAX_CLASS_LINES
            if isinstance(node, ast.ClassDef)
            else None
        )
        if limit is not None and (n := physical_lines(node)) > limit:
            found.append(f"{where}:{node.lineno} {node.name} ({n} lines)")  # type: ignore[attr-defined]
    return found


def library_files() -> list[Path]:
    return [
        f for pkg in LIBRARY for f in sorted((ROOT / pkg).rglob("*.py")) if "testing" not in f.relative_to(ROOT).parts
    ]


def test_no_library_file_over_600_lines_function_over_60_nor_class_over_300():
    found = [hit for f in library_files() for hit in oversized(f.read_text(encoding="utf-8"), str(f.relative_to(ROOT)))]
    assert not found, found


def test_the_size_check_finds_a_long_file_function_and_class():
    long_function = "def f():\n" + "    x = 1\n" * MAX_FUNCTION_LINES
    long_class = "class C:\n" + "    x = 1\n" * MAX_CLASS_LINES
    assert oversized(long_function, "a.py") == ["a.py:1 f (61 lines)"]
    assert oversized(long_class, "b.py") == ["b.py:1 C (301 lines)"]
    assert oversized("def g():\n" + "    x = 1\n" * (MAX_FUNCTION_LINES - 1), "c.py") == []
    assert oversized("x = 1\n" * (MAX_FILE_LINES + 1), "d.py") == ["d.py (601 lines)"]
    assert oversized("x = 1\n" * MAX_FILE_LINES, "e.py") == []


def test_the_size_check_counts_the_lines_a_definition_spans():
    one_line = "@d\ndef f():\n    return g(1, 2, 3)\n"
    spread = "@d(\n    1,\n)\ndef f():\n    return g(\n        1,\n        2,\n        3,\n    )\n"
    documented = 'def f():\n    """One.\n\n    Two."""\n    # why\n\n    return g(1, 2, 3)\n'
    sizes = [physical_lines(ast.parse(src).body[0]) for src in (one_line, spread, documented)]
    assert sizes == [3, 9, 7]


CODE = ("glasses_rag", "graph", "tools", "traces")


def _type_names(tree: ast.Module) -> list[tuple[str, int]]:
    """Classes (private and nested ones included) and module-level type aliases (`ErrorKind = Literal[...]`: a
    CamelCase name given a type expression, not a call's result, at the top of a module) with their line."""
    found = [(n.name, n.lineno) for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
    for n in tree.body:
        if not isinstance(n, (ast.Assign, ast.AnnAssign)) or isinstance(n.value, ast.Call):
            continue  # `BaseAgent = _import_base_agent()` names a class defined above, not a second one
        targets = n.targets if isinstance(n, ast.Assign) else [n.target]
        found += [
            (t.id, n.lineno) for t in targets if isinstance(t, ast.Name) and re.fullmatch(r"_?[A-Z]\w*[a-z]\w*", t.id)
        ]
    return found


def classes_named_twice(sources: dict[str, str]) -> dict[str, list[str]]:
    """Type names (classes, type aliases) defined more than once across `sources` (where -> source): a name says one
    thing in the whole code, so a reader (or a grep) never lands on the wrong class."""
    where: dict[str, list[str]] = {}
    for path, source in sources.items():
        for name, line in _type_names(ast.parse(source)):
            where.setdefault(name, []).append(f"{path}:{line}")
    return {name: places for name, places in sorted(where.items()) if len(places) > 1}


def test_one_class_per_name():  # type aliases included
    sources = {
        str(f.relative_to(ROOT)): f.read_text(encoding="utf-8")
        for pkg in CODE
        for f in sorted((ROOT / pkg).rglob("*.py"))
    }
    assert len(sources) > 100  # the whole code is scanned
    assert not classes_named_twice(sources)


def test_the_name_check_finds_a_class_defined_twice():
    found = classes_named_twice(
        {
            "a.py": "class Turn:\n    pass\n",
            "b.py": "def f():\n    class Turn:\n        pass\n",
            "c.py": "class _Worker:\n    pass\nMode = int\nMAX_S = 1\n",
            "d.py": "Mode: TypeAlias = str\nMAX_S = 2\nTurn = make_class()\n",
        }
    )
    assert found == {"Mode": ["c.py:3", "d.py:1"], "Turn": ["a.py:1", "b.py:2"]}


def _top_level_names(dist: md.Distribution) -> set[str]:
    """The import names a distribution installs: its top_level.txt, else the first part of each file it records."""
    listed = dist.read_text("top_level.txt")
    if listed:
        return set(listed.split())
    names = set()
    for f in dist.files or []:
        first = f.parts[0]
        if first.endswith((".dist-info", ".data", ".pth")) or first in ("..", "__pycache__"):
            continue
        names.add(first[:-3] if first.endswith(".py") and len(f.parts) == 1 else first)
    return names


def _dependency_closure(root: str) -> dict[str, md.Distribution]:
    """Every installed distribution the project depends on (its extras included), transitively."""
    found: dict[str, md.Distribution] = {}
    todo = [(root, True)]
    while todo:
        name, all_extras = todo.pop()
        key = re.sub(r"[-_.]+", "-", name).lower()
        if key in found:
            continue
        try:
            found[key] = dist = md.distribution(name)
        except md.PackageNotFoundError:
            continue
        for line in dist.requires or []:
            req = Requirement(line)
            extras = [{"extra": e} for e in dist.metadata.get_all("Provides-Extra") or []] if all_extras else []
            if req.marker is None or any(req.marker.evaluate(e) for e in [{"extra": ""}, *extras]):
                todo.append((req.name, False))
    return found


def test_installed_top_level_names_collide_with_no_dependency():
    deps = _dependency_closure("glasses-rag")
    assert "glasses-rag" in deps and len(deps) > 50  # the install and its dependencies are all there
    assert _top_level_names(deps.pop("glasses-rag")) >= {"glasses_rag"}
    clashes = {
        name: sorted(_top_level_names(d) & INSTALLED) for name, d in deps.items() if _top_level_names(d) & INSTALLED
    }
    assert not clashes, clashes


def test_the_install_declares_only_the_project_names():
    import tomllib

    from setuptools import find_packages

    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    tops = {p.split(".")[0] for p in find_packages(str(ROOT), include=conf["include"])}
    assert tops == INSTALLED, tops
