"""Tools: one file per tool, each an `@tool` function. Nothing registers itself on import: an agent is given its
tools explicitly, as a `ToolRegistry` that `graph.build.build_agent` builds from the configuration (the built-in
tools of this package, plus `ToolsConfig.modules`, CLI `--tools-module`).

Adding a tool means adding one file here (or a module of your own); nothing else changes.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable
from functools import cache
from types import ModuleType

from tools.base import Box, Fact, HistoryTurn, Hit, Replace, ToolContext, ToolOutput, ToolState, Verdict
from tools.capability import AnswerUse, Capability, Reading
from tools.registry import (
    OPEN_WEB,
    SEARCH_BACKEND,
    Tool,
    ToolCall,
    ToolCallError,
    ToolProfile,
    ToolRegistry,
    tool,
    tool_of,
)

_INTERNAL = {"base", "registry", "capability"}


def tools_in(module: ModuleType) -> list[Tool]:
    """The tools an imported module defines (or imports), in name order."""
    found = {id(t): t for v in vars(module).values() if isinstance(t := getattr(v, "__tool__", None), Tool)}
    return sorted(found.values(), key=lambda t: t.name)


@cache
def builtin_tools() -> tuple[Tool, ...]:
    """Every tool of this package."""
    out: list[Tool] = []
    for mod in pkgutil.iter_modules(__path__):
        if mod.name not in _INTERNAL and not mod.name.startswith("_"):
            out += tools_in(importlib.import_module(f"{__name__}.{mod.name}"))
    return tuple(out)


def tools_from_modules(modules: Iterable[str]) -> list[Tool]:
    """The tools of modules named by import path (e.g. `my_package.my_tools`)."""
    out: list[Tool] = []
    for m in modules:
        out += tools_in(importlib.import_module(m))
    return out


def default_registry(modules: Iterable[str] = ()) -> ToolRegistry:
    """A new registry of the built-in tools plus those of `modules`."""
    return ToolRegistry([*builtin_tools(), *tools_from_modules(modules)])


__all__ = [
    "AnswerUse",
    "Box",
    "Capability",
    "Fact",
    "HistoryTurn",
    "Hit",
    "OPEN_WEB",
    "Reading",
    "Replace",
    "SEARCH_BACKEND",
    "Tool",
    "ToolCall",
    "ToolCallError",
    "ToolContext",
    "ToolOutput",
    "ToolProfile",
    "ToolRegistry",
    "ToolState",
    "Verdict",
    "builtin_tools",
    "default_registry",
    "tool",
    "tool_of",
    "tools_from_modules",
    "tools_in",
]
