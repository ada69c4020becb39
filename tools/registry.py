"""The `@tool` decorator and the registry that validates model-proposed calls.

A tool is one plain function: typed keyword arguments, a docstring, and an optional first
parameter `ctx: ToolContext` that the framework fills in. The decorator builds a pydantic
model of the arguments, so a call proposed by a model is checked before anything runs.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from tools.base import ToolContext, ToolOutput

ALL_TASKS = frozenset({1, 2, 3})


class ToolCall(BaseModel):
    """A call as a policy proposes it: a name and a JSON object of arguments."""

    tool: str
    arguments: dict[str, Any] = {}


class ToolCallError(Exception):
    """A proposed call that cannot run. `kind` is one of unknown_tool, not_allowed, bad_arguments."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind
        self.message = message


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    fn: Callable[..., ToolOutput]
    args_model: type[BaseModel]
    tasks: frozenset[int] = ALL_TASKS
    wants_context: bool = True
    arg_docs: dict[str, str] = field(default_factory=dict)

    def json_schema(self) -> dict[str, Any]:
        """OpenAI-style function schema, for VLM backends that call tools natively."""
        params = self.args_model.model_json_schema()
        params.pop("title", None)
        for name, prop in params.get("properties", {}).items():
            prop.pop("title", None)
            if name in self.arg_docs:
                prop.setdefault("description", self.arg_docs[name])
        return {"type": "function", "function": {"name": self.name, "description": self.description, "parameters": params}}

    def signature_text(self) -> str:
        """One line per tool for text prompts: name(arg: type = default) - description."""
        parts = []
        for name, f in self.args_model.model_fields.items():
            ann = getattr(f.annotation, "__name__", None) or str(f.annotation).replace("typing.", "")
            default = "" if f.is_required() else f" = {f.default!r}"
            parts.append(f"{name}: {ann}{default}")
        return f"{self.name}({', '.join(parts)}) - {self.description}"

    def run(self, ctx: ToolContext, args: BaseModel) -> ToolOutput:
        kwargs = args.model_dump()
        out = self.fn(ctx, **kwargs) if self.wants_context else self.fn(**kwargs)
        if not isinstance(out, ToolOutput):
            raise TypeError(f"tool {self.name!r} returned {type(out).__name__}, expected ToolOutput")
        return out


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Summary paragraph plus Google-style `Args:` entries."""
    doc = inspect.cleandoc(doc or "")
    summary = doc.split("\n\n")[0].replace("\n", " ").strip()
    arg_docs: dict[str, str] = {}
    m = re.search(r"^Args:\s*\n(.*?)(?:\n\s*\n|\Z)", doc, flags=re.S | re.M)
    if m:
        for line in m.group(1).splitlines():
            am = re.match(r"\s*(\w+)\s*(?:\([^)]*\))?:\s*(.+)", line)
            if am:
                arg_docs[am.group(1)] = am.group(2).strip()
    return summary, arg_docs


class ToolRegistry:
    def __init__(self) -> None:
        self._tools: dict[str, Tool] = {}

    def register(self, t: Tool) -> None:
        if t.name in self._tools and self._tools[t.name].fn is not t.fn:
            raise ValueError(f"a tool named {t.name!r} is already registered")
        self._tools[t.name] = t

    def unregister(self, name: str) -> None:
        self._tools.pop(name, None)

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def names(self) -> list[str]:
        return sorted(self._tools)

    def for_task(self, task: int, only: Iterable[str] | None = None) -> list[Tool]:
        """The task's allow-list: tools declared for the task, optionally narrowed to `only`."""
        keep = set(only) if only is not None else None
        return [t for n, t in sorted(self._tools.items()) if task in t.tasks and (keep is None or n in keep)]

    def validate(self, call: ToolCall, task: int, allowed: Iterable[str] | None = None) -> tuple[Tool, BaseModel]:
        t = self._tools.get(call.tool)
        if t is None:
            raise ToolCallError("unknown_tool", f"unknown tool {call.tool!r}; known tools: {', '.join(self.names())}")
        allowed_names = {x.name for x in self.for_task(task, allowed)}
        if t.name not in allowed_names:
            raise ToolCallError("not_allowed", f"tool {t.name!r} is not allowed in task {task}")
        try:
            args = t.args_model.model_validate(call.arguments or {})
        except ValidationError as e:
            errs = "; ".join(f"{'.'.join(str(p) for p in er['loc']) or '<args>'}: {er['msg']}" for er in e.errors())
            raise ToolCallError("bad_arguments", f"bad arguments for {t.name!r}: {errs}") from None
        return t, args


REGISTRY = ToolRegistry()


def tool(fn: Callable | None = None, *, name: str | None = None, tasks: Iterable[int] = ALL_TASKS,
         registry: ToolRegistry | None = None):
    """Register a function as a tool.

    Usage::

        @tool(tasks={2, 3})
        def web_search(ctx: ToolContext, query: str, k: int = 5) -> ToolOutput:
            \"\"\"Search the web for pages about `query`.\"\"\"
    """

    def wrap(f: Callable) -> Callable:
        sig = inspect.signature(f)
        params = list(sig.parameters.values())
        wants_ctx = bool(params) and params[0].name == "ctx"
        fields: dict[str, Any] = {}
        for p in params[1:] if wants_ctx else params:
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise TypeError(f"tool {f.__name__}: *args/**kwargs are not allowed")
            if p.annotation is inspect.Parameter.empty:
                raise TypeError(f"tool {f.__name__}: argument {p.name!r} needs a type annotation")
            fields[p.name] = (p.annotation, ... if p.default is inspect.Parameter.empty else p.default)
        tool_name = name or f.__name__
        if not f.__doc__:
            raise TypeError(f"tool {tool_name}: a docstring is required (it is the model's description)")
        summary, arg_docs = _parse_docstring(f.__doc__)
        model = create_model(f"{tool_name}_args", __config__=ConfigDict(extra="forbid"), **fields)
        t = Tool(tool_name, summary, f, model, frozenset(tasks), wants_ctx, arg_docs)
        (registry or REGISTRY).register(t)
        f.__tool__ = t  # type: ignore[attr-defined]
        return f

    return wrap(fn) if fn is not None else wrap
