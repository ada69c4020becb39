"""Tools: every module in this package that defines an `@tool` function is registered on import.

Adding a tool means adding one file here; nothing else changes. Tools living outside this
package are loaded with `load_tool_modules(["my_pkg.my_tools"])` (CLI: `--tools-module`).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable

from tools.base import Box, Fact, HistoryTurn, Hit, Replace, ToolContext, ToolOutput, ToolState, Verdict
from tools.registry import REGISTRY, Tool, ToolCall, ToolCallError, ToolRegistry, tool

_INTERNAL = {"base", "registry"}


def load_builtin_tools() -> ToolRegistry:
    for mod in pkgutil.iter_modules(__path__):
        if mod.name not in _INTERNAL and not mod.name.startswith("_"):
            importlib.import_module(f"{__name__}.{mod.name}")
    return REGISTRY


def load_tool_modules(modules: Iterable[str]) -> ToolRegistry:
    for m in modules:
        importlib.import_module(m)
    return REGISTRY


__all__ = [
    "Box", "Fact", "HistoryTurn", "Hit", "REGISTRY", "Replace", "Tool", "ToolCall", "ToolCallError", "ToolContext",
    "ToolOutput", "ToolRegistry", "ToolState", "Verdict", "load_builtin_tools", "load_tool_modules", "tool",
]
