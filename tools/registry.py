"""The `@tool` decorator and the registry that validates model-proposed calls.

A tool is one plain function: typed keyword arguments, a docstring, and an optional first parameter
`ctx: ToolContext` that the framework fills in. The decorator builds a pydantic model of the arguments
(so a call proposed by a model is checked before anything runs) and the JSON schema models see.
It also records what the tool adds to the agent state (`writes`, checked against `ToolState`) and its
capability `tags`, through which the default planner chooses tools without knowing their names.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, field_validator

from glasses_rag.core.registry import Registry, closest
from tools.base import WRITABLE_FIELDS, ToolContext, ToolOutput, check_update
from tools.capability import Capability, SearchKind, resolve, search_kind

ALL_TASKS = frozenset({1, 2, 3})
# What a tool reaches outside the turn, that a benchmark's rules may forbid (`@tool(reaches=...)`): the run's search
# backend (a benchmark's own search API or index, `ctx.resources.search`) or the live web. A tool that reaches
# neither (it works on the photo, the question or what was found) is offered by every benchmark.
SEARCH_BACKEND = "search_backend"
OPEN_WEB = "open_web"
REACHES = frozenset({SEARCH_BACKEND, OPEN_WEB})

CallErrorKind = Literal["unknown_tool", "not_allowed", "bad_arguments"]


class ToolProfile(BaseModel):
    """The tools a benchmark's runs offer: those whose `reaches` it allows (a benchmark's `tools`; its name is
    what `graph.config.ToolsConfig.profile` says). CRAG-MM allows its search API and never the open web;
    SuperGlasses the open web and no local index; a profile that allows nothing offers the tools that only work on
    the turn itself.

    Example:
        >>> ToolProfile(name="offline", allows=frozenset()).allows
        frozenset()
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1, description="What the agent's configuration calls it (ToolsConfig.profile).")
    allows: frozenset[str] = Field(description=f"What the offered tools may reach: a subset of {sorted(REACHES)}.")

    @field_validator("allows")
    @classmethod
    def _known(cls, allows: frozenset[str]) -> frozenset[str]:
        if not allows <= REACHES:
            raise ValueError(f"unknown reach {sorted(allows - REACHES)}: one of {sorted(REACHES)}")
        return allows

    def offers(self, t: Tool) -> bool:
        return t.reaches <= self.allows


class ToolCall(BaseModel):
    """A call as a policy proposes it: a name and a JSON object of arguments."""

    tool: str
    arguments: dict[str, Any] = {}


class ToolCallError(Exception):
    """A proposed call that cannot run."""

    def __init__(self, kind: CallErrorKind, message: str):
        super().__init__(message)
        self.kind: CallErrorKind = kind
        self.message = message


def _type_text(schema: dict[str, Any], defs: dict[str, Any]) -> str:
    """A JSON-schema type as short text for prompts: enums as "a" | "b", optionals as X | null."""
    if "$ref" in schema:
        schema = defs.get(schema["$ref"].rsplit("/", 1)[-1], {})
    if "enum" in schema:
        return " | ".join(json.dumps(v) for v in schema["enum"])
    if "const" in schema:
        return json.dumps(schema["const"])
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return " | ".join(_type_text(s, defs) for s in schema[key])
    t = schema.get("type", "any")
    if t == "array":
        return f"list[{_type_text(schema.get('items', {}), defs)}]"
    bounds = [
        f"{op} {schema[k]}"
        for k, op in (("minimum", ">="), ("exclusiveMinimum", ">"), ("maximum", "<="), ("exclusiveMaximum", "<"))
        if k in schema
    ]
    return f"{t} ({', '.join(bounds)})" if bounds else str(t)


@dataclass(frozen=True, eq=False)  # identity equality: tools are compared and cached by object
class Tool:
    name: str
    description: str
    fn: Callable[..., ToolOutput]
    args_model: type[BaseModel]
    tasks: frozenset[int] = ALL_TASKS
    tags: frozenset[str] = frozenset()
    writes: frozenset[str] = frozenset()
    wants_context: bool = True
    arg_docs: dict[str, str] = field(default_factory=dict)
    blocking: bool = True  # False: quick local work, run in the graph's thread (no hand-off to a worker)
    reaches: frozenset[str] = frozenset()  # SEARCH_BACKEND, OPEN_WEB: what a benchmark's ToolProfile must allow
    capabilities: tuple[Capability, ...] = ()
    inputs: dict[str, str] = field(default_factory=dict)  # planner slot -> this tool's argument name
    requires: Callable[[], str | None] | None = None  # None when the tool can run here, else what it lacks
    schema: dict[str, Any] = field(init=False, repr=False, compare=False)
    signature: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Built once: policies read them every step of every turn.
        object.__setattr__(self, "schema", self._json_schema())
        object.__setattr__(self, "signature", self._signature_text())

    def _json_schema(self) -> dict[str, Any]:
        params = self.args_model.model_json_schema()
        params.pop("title", None)
        for name, prop in params.get("properties", {}).items():
            prop.pop("title", None)
            if name in self.arg_docs:
                prop.setdefault("description", self.arg_docs[name])
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": params},
        }

    def json_schema(self) -> dict[str, Any]:
        """OpenAI-style function schema, for model policies (native tool calls and structured output)."""
        return self.schema

    def _signature_text(self) -> str:
        params = self.schema["function"]["parameters"]
        defs = params.get("$defs", {})
        required = set(params.get("required", []))
        parts = []
        for name, prop in params.get("properties", {}).items():
            text = f"{name}: {_type_text(prop, defs)}"
            if name not in required:
                text += f" = {json.dumps(prop.get('default'))}"
            parts.append(text)
        return f"{self.name}({', '.join(parts)}) - {self.description}"

    @property
    def search(self) -> SearchKind | None:
        """The SuperGlasses hop kind of its calls ("image", "text"), from its capabilities."""
        return search_kind(self.capabilities)

    def has(self, capability: str) -> bool:
        return any(c.name == capability for c in self.capabilities)

    def signature_text(self) -> str:
        """One line for text prompts: name(arg: type = default) - description (enums and bounds included)."""
        return self.signature

    def arg_help(self) -> str:
        """The documented arguments, one per line, for text prompts."""
        return "\n".join(f"    {k}: {v}" for k, v in self.arg_docs.items())

    def run(self, ctx: ToolContext, args: BaseModel) -> ToolOutput:
        kwargs = args.model_dump()
        out = self.fn(ctx, **kwargs) if self.wants_context else self.fn(**kwargs)
        if not isinstance(out, ToolOutput):
            raise TypeError(f"tool {self.name!r} returned {type(out).__name__}, expected ToolOutput")
        if out.update:
            try:
                out.update = check_update(out.update, self.writes)
            except ValueError as e:
                raise ToolUpdateError(f"tool {self.name!r}: {e}") from None
        return out


class ToolUpdateError(ValueError):
    """A tool returned an update outside its declared `writes` or of the wrong type (a `bad_update` step)."""


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
    """The tools of one agent, passed explicitly (`build_agent` builds it from the configuration): names are
    unique (a `glasses_rag.core.registry.Registry` of tools), and the capability objects its tools carry are the ones
    planners see.

    Args:
        tools: @tool functions' `Tool`s (tool_of(fn)); two different tools under one name are a ValueError.
        unavailable: tool name -> what it lacks here; such a tool is kept (a call to it is `not_allowed`, with the
            reason) but never offered.

    Example::

        registry = ToolRegistry([tool_of(web_search), tool_of(ocr)])
        registry.for_task(2)  # the tools a task-2 turn offers
    """

    def __init__(self, tools: Iterable[Tool] = (), unavailable: dict[str, str] | None = None) -> None:
        self._tools: Registry[Tool] = Registry("tool", origin=lambda t: t.fn.__module__)
        self._by_task: dict[tuple[int, tuple[str, ...] | None, ToolProfile | None], list[Tool]] = {}
        # tools kept (a call to one is `not_allowed`, with the reason) but never offered: they lack something here
        self.unavailable: dict[str, str] = dict(unavailable or {})
        for t in tools:
            self.add(t)

    def add(self, t: Tool) -> None:
        self._tools.add(t.name, t)
        self._by_task.clear()

    def register(self, fn: Callable) -> Callable:
        """Add an @tool function; returns it, so it can decorate one: `@registry.register` above `@tool(...)`."""
        self.add(tool_of(fn))
        return fn

    def offering_available(self, profile: ToolProfile | None = None) -> ToolRegistry:
        """A registry that does not offer the tools (of `profile`, when given) whose prerequisites are missing here
        (`requires`)."""
        missing = {n: why for n, why in self.missing().items() if profile is None or profile.offers(self._tools[n])}
        return ToolRegistry(self, unavailable={**self.unavailable, **missing})

    def missing(self) -> dict[str, str]:
        """Tools whose prerequisites are not met here (a key, a setting), with what each lacks."""
        out = {}
        for t in self:
            reason = t.requires() if t.requires is not None else None
            if reason:
                out[t.name] = reason
        return out

    def without(self, names: Iterable[str]) -> ToolRegistry:
        """A new registry without these tools (ablations, tests)."""
        drop = set(names)
        return ToolRegistry((t for n, t in self._tools.items() if n not in drop), unavailable=self.unavailable)

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def names(self) -> list[str]:
        return sorted(self._tools)

    def __iter__(self):
        return iter(self._tools[n] for n in sorted(self._tools))

    def __len__(self) -> int:
        return len(self._tools)

    def capabilities(self) -> dict[str, Capability]:
        """Every capability object the tools carry, by name."""
        return {c.name: c for t in self for c in t.capabilities}

    def for_task(self, task: int, only: Iterable[str] | None = None, profile: ToolProfile | None = None) -> list[Tool]:
        """The task's allow-list: tools declared for the task that the benchmark's profile offers (every one
        without a profile), optionally narrowed to `only` (cached)."""
        key = (task, None if only is None else tuple(sorted(set(only))), profile)
        found = self._by_task.get(key)
        if found is None:
            keep = set(only) if only is not None else None
            found = [
                t
                for n, t in sorted(self._tools.items())
                if task in t.tasks
                and (profile is None or profile.offers(t))
                and (keep is None or n in keep)
                and n not in self.unavailable
            ]
            self._by_task[key] = found
        return found

    def check_names(self, names: Iterable[str], task: int | None = None, profile: ToolProfile | None = None) -> None:
        """Each of `names` is a tool offered here (in `task` and under `profile`, when given), else a one-line
        ValueError naming the closest offered tool: a misspelled or forbidden name would otherwise narrow the
        allow-list to nothing, silently.

        Example:
            registry.check_names(["image_serch"], 1)  # ValueError: unknown tool 'image_serch' (did you mean ...
        """
        tasks = [task] if task is not None else sorted(ALL_TASKS)
        offered = sorted({t.name for k in tasks for t in self.for_task(k, None, profile)})
        where = f"task {task}" if task is not None else "any task"
        if profile is not None:
            where += f" of {profile.name}"
        listed = f"{where} offers: {', '.join(offered) or 'no tool'}"
        for name in names:
            t = self._tools.get(name)
            if t is None:
                raise ValueError(f"unknown tool {name!r}{closest(name, offered or self.names())}; {listed}")
            if name in self.unavailable:
                raise ValueError(f"tool {name!r} is not offered here: {self.unavailable[name]}")
            if name not in offered:
                why = f"it reaches {', '.join(sorted(t.reaches))}" if task is None or task in t.tasks else ""
                why = why or f"it is a tool of task(s) {', '.join(map(str, sorted(t.tasks)))}"
                raise ValueError(f"tool {name!r} is not allowed in {where} ({why}); {listed}")

    def with_tag(
        self, tag: str, task: int, only: Iterable[str] | None = None, profile: ToolProfile | None = None
    ) -> list[Tool]:
        return [t for t in self.for_task(task, only, profile) if tag in t.tags]

    def validate(
        self, call: ToolCall, task: int, allowed: Iterable[str] | None = None, profile: ToolProfile | None = None
    ) -> tuple[Tool, BaseModel]:
        t = self._tools.get(call.tool)
        if t is None:
            raise ToolCallError("unknown_tool", f"unknown tool {call.tool!r}; known tools: {', '.join(self.names())}")
        if call.tool in self.unavailable:
            raise ToolCallError("not_allowed", f"tool {t.name!r} is not offered here: {self.unavailable[t.name]}")
        if t not in self.for_task(task, allowed, profile):
            where = f"task {task}"
            if profile is not None and not profile.offers(t):
                where += (
                    f" of the {profile.name!r} profile (it reaches {', '.join(sorted(t.reaches - profile.allows))})"
                )
            raise ToolCallError("not_allowed", f"tool {t.name!r} is not allowed in {where}")
        try:
            args = t.args_model.model_validate(call.arguments or {})
        except ValidationError as e:
            errs = "; ".join(f"{'.'.join(str(p) for p in er['loc']) or '<args>'}: {er['msg']}" for er in e.errors())
            raise ToolCallError("bad_arguments", f"bad arguments for {t.name!r}: {errs}") from None
        return t, args


def _planner_inputs(
    name: str, params: list[inspect.Parameter], caps: tuple[Capability, ...], inputs: dict[str, str]
) -> dict[str, str]:
    """slot -> argument: each capability input goes to the argument `inputs` maps it to, else the argument of the
    same name. A required argument no slot reaches would make planners unable to call the tool: an error here."""
    arg_names = {p.name for p in params}
    bad = {a for a in inputs if a not in arg_names}
    if bad:
        raise TypeError(f"tool {name}: inputs names {sorted(bad)}, which are not its arguments")
    slots = {s for c in caps for s in c.inputs}
    by_slot = {slot: arg for arg, slot in inputs.items()}
    by_slot.update({a: a for a in arg_names if a in slots and a not in inputs and a not in by_slot})
    unknown = set(by_slot) - slots
    if unknown:
        raise TypeError(
            f"tool {name}: inputs map to {sorted(unknown)}, which none of its capabilities passes "
            f"(they pass: {', '.join(sorted(slots)) or 'nothing'})"
        )
    if caps:
        reached = set(by_slot.values())
        required = [p.name for p in params if p.default is inspect.Parameter.empty and p.name not in reached]
        if required:
            raise TypeError(
                f"tool {name}: required argument(s) {required} get no value from its capabilities "
                f"({', '.join(c.name for c in caps)} pass {', '.join(sorted(slots)) or 'nothing'}): give "
                f"them defaults, or map them with inputs={{argument: slot}}"
            )
    return by_slot


def tool(
    fn: Callable | None = None,
    *,
    name: str | None = None,
    tasks: Iterable[int] = ALL_TASKS,
    tags: Iterable[str | Capability] = (),
    writes: Iterable[str] = (),
    reaches: Iterable[str] = (),
    blocking: bool = True,
    inputs: dict[str, str] | None = None,
    requires: Callable[[], str | None] | None = None,
):
    """Make a function a tool: `fn.__tool__` is its `Tool`, registered nowhere (an agent gets its tools explicitly:
    `ToolRegistry([...])`, built by `build_agent` from the configuration). The function takes a `ToolContext` (what it
    may read of the turn), then its own typed arguments (the JSON schema a model sees; the docstring's `Args:` lines
    describe them), and returns a `ToolOutput`; its docstring's first paragraph is the description policies read.

    Args:
        fn: the function, when used as a bare `@tool`.
        name: the tool's name (default: the function's).
        tasks: the tasks that may call it (a benchmark's task numbers: CRAG-MM's 1, 2 and 3).
        tags: capability names (the built-in ones in `tools.capability.BUILTIN`) or `Capability` objects (a new
            capability declared next to the tool), through which planners pick tools; other names are plain tags.
        writes: the `ToolState` fields the tool's `ToolOutput.update` may touch (anything else is refused).
        reaches: what it reaches beyond the turn (`SEARCH_BACKEND`, `OPEN_WEB`), which a benchmark's profile allows.
        blocking: False for quick local work that never waits on I/O or a model: it runs in the graph's own thread
            (no thread hand-off), but cannot be abandoned at the time budget like a blocking tool.
        inputs: the tool's argument names -> the planner slots of its capabilities, when they differ (`{"q": "query"}`).
        requires: returns what the tool lacks on this machine (a key, a setting) or None: an agent does not offer a
            tool that lacks something, and the run header names it with the reason.

    Example:
        >>> from tools import Fact, ToolContext, ToolOutput, ToolRegistry, tool
        >>> @tool(tasks={1, 2, 3}, writes={"facts"})
        ... def shout(ctx: ToolContext, text: str) -> ToolOutput:
        ...     '''Upper-case a text.'''
        ...     loud = text.upper()
        ...     return ToolOutput(summary=loud, update={"facts": [Fact(text=loud, source="shout")]})
        >>> shout.__tool__.signature
        'shout(text: string) - Upper-case a text.'
        >>> ToolRegistry([shout.__tool__]).names()
        ['shout']
    """

    def wrap(f: Callable) -> Callable:
        made = make_tool(
            f,
            name=name,
            tasks=tasks,
            tags=tags,
            writes=writes,
            reaches=reaches,
            blocking=blocking,
            inputs=inputs or {},
        )
        f.__tool__ = dataclasses.replace(made, requires=requires) if requires is not None else made  # type: ignore[attr-defined]
        return f

    return wrap(fn) if fn is not None else wrap


def _arguments(tool_name: str, params: list[inspect.Parameter]) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for p in params:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise TypeError(f"tool {tool_name}: *args/**kwargs are not allowed")
        if p.annotation is inspect.Parameter.empty:
            raise TypeError(f"tool {tool_name}: argument {p.name!r} needs a type annotation")
        fields[p.name] = (p.annotation, ... if p.default is inspect.Parameter.empty else p.default)
    return fields


def make_tool(
    f: Callable,
    *,
    name: str | None,
    tasks: Iterable[int],
    tags: Iterable[str | Capability],
    writes: Iterable[str],
    reaches: Iterable[str],
    blocking: bool,
    inputs: dict[str, str],
) -> Tool:
    params = list(inspect.signature(f).parameters.values())
    wants_ctx = bool(params) and params[0].name == "ctx"
    params = params[1:] if wants_ctx else params
    tool_name = name or f.__name__
    fields = _arguments(tool_name, params)
    if not f.__doc__:
        raise TypeError(f"tool {tool_name}: a docstring is required (it is the model's description)")
    bad = set(writes) - WRITABLE_FIELDS
    if bad:
        raise TypeError(
            f"tool {tool_name}: writes={sorted(bad)} are not state fields a tool may write "
            f"({', '.join(sorted(WRITABLE_FIELDS))})"
        )
    try:
        tag_names, caps = resolve(tags)
    except ValueError as e:
        raise TypeError(f"tool {tool_name}: {e}") from None
    bad_reaches = set(reaches) - REACHES
    if bad_reaches:
        raise TypeError(f"tool {tool_name}: reaches must be a subset of {sorted(REACHES)}, not {sorted(bad_reaches)}")
    slots = _planner_inputs(tool_name, params, caps, inputs)
    summary, arg_docs = _parse_docstring(f.__doc__)
    model = create_model(f"{tool_name}_args", __config__=ConfigDict(extra="forbid"), **fields)
    return Tool(
        tool_name,
        summary,
        f,
        model,
        frozenset(tasks),
        tag_names,
        frozenset(writes),
        wants_ctx,
        arg_docs,
        blocking,
        frozenset(reaches),
        caps,
        slots,
    )


def tool_of(fn: Callable) -> Tool:
    """The Tool of an @tool function (or a Tool itself)."""
    if isinstance(fn, Tool):
        return fn
    t = getattr(fn, "__tool__", None)
    if not isinstance(t, Tool):
        raise TypeError(f"{fn!r} is not an @tool function")
    return t
