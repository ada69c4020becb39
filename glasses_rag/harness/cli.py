"""Command-line options generated from the configuration models, so that they cannot drift from them.

An option is a row of data: its flag, the field it sets (a path through `AgentConfig`, `ModelConfig` or the run's
own `RunOptions`), its group and how it is written on the command line. Its help is the field's description, its
default the field's default (printed once), its choices the field's `Literal` values; what is given is validated
by the field's own type and bounds, and a bad value is a one-line usage error. Options not given stay unset, so no
option means the library's default.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, get_args, get_origin

from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo

OptionKind = Literal["value", "flag", "negate", "list", "append"]


@dataclass(frozen=True)
class Option:
    flag: str
    path: str  # "<root>.<field>[.<field>...]", root one of the models given to `add_options`
    group: str
    # flag: --x sets True; negate: --no-x sets False; list: comma-separated; append: repeatable
    kind: OptionKind = "value"
    dest: str | None = None  # the argparse attribute (default: the flag's name)
    help: str | None = None  # the command line's wording where the field's description does not fit a flag
    metavar: str | None = None
    aliases: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.dest or self.flag.lstrip("-").replace("-", "_")


def field_at(roots: dict[str, type[BaseModel]], path: str) -> FieldInfo:
    """The pydantic field a dotted path names, through nested models."""
    root, *names = path.split(".")
    model: Any = roots[root]
    info: FieldInfo | None = None
    for name in names:
        if info is not None:
            model = _model_of(info.annotation)
        info = model.model_fields[name]
    assert info is not None, path
    return info


def _model_of(annotation: Any) -> type[BaseModel]:
    for t in (annotation, *get_args(annotation)):
        if isinstance(t, type) and issubclass(t, BaseModel):
            return t
    raise TypeError(f"{annotation} is not a model")


def _choices(annotation: Any) -> list[Any] | None:
    for t in (annotation, *get_args(annotation)):
        if get_origin(t) is Literal:
            return list(get_args(t))
    return None


def _default_text(info: FieldInfo) -> str:
    if info.default_factory is not None or info.default is None:
        return ""
    value = info.default
    if isinstance(value, bool):
        return ""
    if isinstance(value, Path) and value.is_absolute():
        try:
            value = value.relative_to(Path.cwd())
        except ValueError:
            pass
    return f" (default: {value})"


def _help(opt: Option, info: FieldInfo) -> str:
    text = (opt.help or info.description or "").strip()  # a --no-x flag does the opposite of the field's text
    if opt.kind in ("value", "list", "append"):
        text += _default_text(info)
    return text.replace("%", "%%")


def add_options(
    parser: argparse.ArgumentParser,
    options: list[Option],
    roots: dict[str, type[BaseModel]],
    choices: Mapping[str, list[Any]] | None = None,
) -> None:
    """The options as argparse arguments in their groups; `choices` (option name -> values) lists the values of
    an option whose field is open (a registry's names), where a `Literal` field lists its own."""
    groups: dict[str, Any] = {}
    for opt in options:
        info = field_at(roots, opt.path)
        group = groups.get(opt.group) or groups.setdefault(opt.group, parser.add_argument_group(opt.group))
        kw: dict[str, Any] = dict(dest=opt.name, default=None, help=_help(opt, info))
        flags = (*opt.aliases, opt.flag)
        if opt.kind == "flag":
            group.add_argument(*flags, action="store_const", const=True, **kw)
        elif opt.kind == "negate":
            group.add_argument(*flags, action="store_const", const=False, **kw)
        elif opt.kind == "append":
            group.add_argument(*flags, action="append", metavar=opt.metavar, **kw)
        else:
            listed = (choices or {}).get(opt.name) or _choices(info.annotation)
            if listed and all(isinstance(c, int) for c in listed):
                kw["type"] = int
            group.add_argument(*flags, choices=listed, metavar=opt.metavar, **kw)


def convert(
    parser: argparse.ArgumentParser, args: argparse.Namespace, options: list[Option], roots: dict[str, type[BaseModel]]
) -> argparse.Namespace:
    """Each given option's text validated by its field (type, bounds), in place; a bad one is a usage error."""
    for opt in options:
        raw = getattr(args, opt.name)
        if raw is None or opt.kind in ("flag", "negate"):
            continue
        if opt.kind == "list":
            raw = [x.strip() for x in raw.split(",") if x.strip()]
        info = field_at(roots, opt.path)
        try:
            adapter: TypeAdapter[Any] = TypeAdapter(Annotated[info.annotation, info])  # type: ignore[arg-type]
            setattr(args, opt.name, adapter.validate_python(raw))
        except ValidationError as e:
            err = e.errors()[0]
            parser.error(f"argument {opt.flag}: {err['msg']} (got {raw!r})")
    return args


def nested(args: argparse.Namespace, options: list[Option], root: str) -> dict[str, Any]:
    """The given options under `root` as the nested dict of its model (unset ones left out)."""
    out: dict[str, Any] = {}
    for opt in options:
        value = getattr(args, opt.name, None)
        head, *names = opt.path.split(".")
        if head != root or value is None or not names:
            continue
        node = out
        for name in names[:-1]:
            node = node.setdefault(name, {})
        node[names[-1]] = value
    return out
