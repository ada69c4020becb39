"""Imports flow one way: shared types <- models <- tools and data <- the agent <- front ends.

Checked on the source (every import statement, also those inside functions), so a lazy import that goes the wrong
way fails here too."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("tools", "traces", "models", "crag", "graph", "benchmarks")

# (layer, modules): a module may import modules of its own layer or a lower one; nothing imports a front end.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("types", ("tools", "tools.base", "tools.registry", "traces", "traces.schema")),
    ("models", ("models",)),
    ("library", ("tools.", "crag", "traces.store", "traces.superglasses", "traces.compare")),
    ("agent", ("graph", "traces.viewer")),
    ("front ends", ("graph.run", "crag.starter_kit", "benchmarks")),
]


def layer_of(module: str) -> int:
    best, best_len = -1, -1
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            hit = module == p or (module.startswith(p) if p.endswith(".") else module.startswith(p + "."))
            if hit and len(p) > best_len:
                best, best_len = i, len(p)
    return best


def modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for f in (ROOT / pkg).rglob("*.py"):
            rel = f.relative_to(ROOT).with_suffix("")
            parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
            out[".".join(parts)] = f
    return out


def imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return {m for m in found if m.split(".")[0] in PACKAGES}


def test_every_module_has_a_layer():
    assert all(layer_of(m) >= 0 for m in modules()), [m for m in modules() if layer_of(m) < 0]


def test_imports_flow_one_way():
    known = modules()
    bad = []
    for mod, path in sorted(known.items()):
        mine = layer_of(mod)
        for target in imports(path):
            # "from tools.base import Hit" names the module tools.base and the attribute tools.base.Hit
            while target not in known and "." in target:
                target = target.rsplit(".", 1)[0]
            theirs = layer_of(target)
            if target == mod or theirs < 0:
                continue
            if theirs > mine or (LAYERS[theirs][0] == "front ends" and not mod.startswith("benchmarks")):
                bad.append(f"{mod} ({LAYERS[mine][0]}) imports {target} ({LAYERS[theirs][0]})")
    assert not bad, "\n".join(bad)
