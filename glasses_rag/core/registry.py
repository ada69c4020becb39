"""Named lookups: the one registration rule of the project.

Tools, capabilities, presets, routers, policies and the rule planner's named parts (answer sources, conditions, slot
providers, query kinds) are each kept in a `Registry`: filled by explicit `add` calls in one module per family, read
by name. Nothing registers itself on import (no decorator writes to a global table), so what a family holds is
what its one module lists, and a name is looked up here, never by attribute.

Example::

    ROUTERS: Registry[Router] = Registry("router")
    ROUTERS.add("domain", Router(...))
    ROUTERS.lookup("domian")  # ValueError: unknown router 'domian' (did you mean 'domain'?); known: domain
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Generic, TypeVar

T = TypeVar("T")


def closest(name: str, known: Iterable[str]) -> str:
    """' (did you mean 'x'?)' for the closest known name, or ''."""
    found = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f" (did you mean {found[0]!r}?)" if found else ""


class Registry(Mapping[str, T], Generic[T]):
    """Items by unique name, in the order they were added; read-only as a Mapping.

    Args:
        kind: what the items are, for error messages ("tool", "answer source").
        items: (name, item) pairs to add at once.
        origin: how an item says where it comes from, added to the message when two differ under one name.

    Example::

        caps = Registry("capability", [("reads_text", READS_TEXT)])
        caps["reads_text"], "reads_text" in caps, caps.names()
    """

    def __init__(
        self, kind: str, items: Iterable[tuple[str, T]] = (), origin: Callable[[T], str] | None = None
    ) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}
        self._origin = origin
        for name, item in items:
            self.add(name, item)

    def add(self, name: str, item: T) -> T:
        """Record `item` under `name` and return it. The same object twice is one entry; two objects under one name
        are an error (ValueError)."""
        known = self._items.get(name, item)
        if known is not item:
            where = f" ({self._origin(known)} and {self._origin(item)})" if self._origin else ""
            raise ValueError(f"two {self.kind}s are named {name!r}{where}")
        self._items[name] = item
        return item

    def lookup(self, name: str) -> T:
        """The item named `name`; a one-line ValueError naming the closest known name otherwise."""
        try:
            return self._items[name]
        except KeyError:
            raise ValueError(
                f"unknown {self.kind} {name!r}{closest(name, self._items)}; known: {', '.join(self._items) or 'none'}"
            ) from None

    def names(self) -> list[str]:
        """The names, sorted."""
        return sorted(self._items)

    def __getitem__(self, name: str) -> T:
        return self._items[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {list(self._items)})"
