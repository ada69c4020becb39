"""YAML files a user or a stranger hands over (presets, question-set content, plan tables), read as data and
bounded: safe types only (PyYAML's SafeLoader), no anchors or aliases (a 700-byte preset of nested aliases is 9^9
items once anything walks it: 4 GB), at most MAX_DEPTH levels of nesting (deeper is refused with one line, never a
RecursionError), and a file is looked at before it is read (`read_yaml`: at most `limit` bytes).

    data = read_yaml(Path("my_preset.yaml"), 1 << 20)   # YamlRefused (a ValueError) with the file and the line
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from glasses_rag.core.files import read_bounded

MAX_DEPTH = 64  # the deepest bundled file nests 6 levels


class YamlRefused(ValueError):
    """A YAML file or text that is not read: not valid YAML, an anchor or alias, too deep, too large."""


class _Guard(yaml.composer.Composer):
    """PyYAML's composer refusing anchors and aliases and nesting deeper than MAX_DEPTH, as it composes (before any
    object is built)."""

    _depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            kind = "an alias (*name)" if isinstance(event, yaml.AliasEvent) else "an anchor (&name)"
            raise yaml.composer.ComposerError(
                None, None, f"{kind}: anchors and aliases are not read (write the value out)", event.start_mark
            )
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise yaml.composer.ComposerError(None, None, f"nested more than {MAX_DEPTH} levels", event.start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


class _PyParser(yaml.reader.Reader, yaml.scanner.Scanner, yaml.parser.Parser):
    """PyYAML's own parser, where PyYAML was built without libyaml."""

    def __init__(self, stream: Any) -> None:
        yaml.reader.Reader.__init__(self, stream)
        yaml.scanner.Scanner.__init__(self)
        yaml.parser.Parser.__init__(self)


# libyaml's parser where there is one (what yaml.CSafeLoader reads with: the same data), the guarded composer on top
_PARSER_BASE: Any = yaml.cyaml.CParser if getattr(yaml, "__with_libyaml__", False) else _PyParser


class _DataLoader(_Guard, _PARSER_BASE, yaml.constructor.SafeConstructor, yaml.resolver.Resolver):
    def __init__(self, stream: Any) -> None:
        _PARSER_BASE.__init__(self, stream)
        yaml.composer.Composer.__init__(self)
        yaml.constructor.SafeConstructor.__init__(self)
        yaml.resolver.Resolver.__init__(self)


def load_yaml_text(text: str, where: str = "YAML") -> Any:
    """The data of a YAML document (see the module docstring); YamlRefused naming `where` and the line."""
    try:
        return yaml.load(text, Loader=_DataLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as e:
        text = " ".join(re.sub(r'\s*in "<unicode string>",', ",", str(e)).split())
        raise YamlRefused(f"{where}: not valid YAML: {text}") from None
    except RecursionError:
        raise YamlRefused(f"{where}: nested too deeply to read") from None


def read_yaml(path: str | Path, limit: int, where: str | None = None) -> Any:
    """The data of the YAML file `path`, read only when it is a regular file of at most `limit` bytes."""
    name = where or str(path)
    try:
        text = read_bounded(path, limit).decode("utf-8")
    except FileNotFoundError:
        raise
    except OSError as e:
        raise YamlRefused(f"{name} cannot be read: {e}") from None
    except UnicodeDecodeError as e:
        raise YamlRefused(f"{name}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    return load_yaml_text(text, name)


__all__ = ["MAX_DEPTH", "YamlRefused", "load_yaml_text", "read_yaml"]
