"""Capabilities: a kind of work tools do, declared once as an object.

A capability says what a planner passes to a tool that has it (`inputs`: planner slots, which a tool receives under
the argument names it maps them to) and what the tool's output means for answering (`answer`: the facts it writes
answer questions of some type, with units the answer-type check must accept). The built-in capabilities below are
those the rule planner's plan table (glasses_rag/policies/rules/planner_table.yaml) names. A tool file may declare a new
one next to its tool, with the hooks the planner needs to use it without a plan-table row: `due` (when to call it, given
the planner's reading of the turn) and `slots` (how to compute its inputs). `search` names the SuperGlasses hop kind
("image" -> "Image Search", "text" -> "Text Search") that a trace export gives its calls.

    CONVERTS_CURRENCY = Capability(
        name="converts_currency", description="converts a price into another currency (writes facts)",
        inputs=("amount", "from_currency", "to_currency"),
        slots={"amount": price_amount, "from_currency": price_currency, "to_currency": asked_currency},
        due=lambda r: asked_currency(r) is not None and r.answer_of("money") is not None,
        answer=AnswerUse(kind="money", units=("EUR", "euro", "euros", "€"), first=True))

    @tool(tags={CONVERTS_CURRENCY}, writes={"facts"})
    def currency_convert(amount: float, from_currency: str, to_currency: str) -> ToolOutput: ...
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from glasses_rag.core.registry import Registry
from glasses_rag.core.types import Fact, Hit

SearchKind = Literal["image", "text"]
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


class Reading(Protocol):
    """What a planner knows about the turn when it asks a capability's hooks (the rule planner provides it)."""

    question: str  # the question part, in plain direct form, "this"/"it" not yet resolved
    resolved: str  # the same with "this"/"it" replaced by the entity
    question_type: str  # recognition, attribute, text_in_image, web_fact, follow_up, comparison, ...
    entity: str | None  # what the question is about, when known
    has_image: bool
    ocr_text: str | None
    evidence: list[Hit]
    facts: list[Fact]

    def answer_of(self, kind: str) -> str | None:
        """The planner's best answer of this answer type (money, quantity, year, person, place, ...) for the
        question from what was gathered so far, or None."""
        ...

    def ran(self, capability: str) -> bool:
        """Whether a tool with this capability already ran this turn."""
        ...


@dataclass(frozen=True)
class AnswerUse:
    """What a capability's output means for answering: the facts its tools write (glasses_rag.core.types.Fact, `value`
    first) answer questions of `kind` (None: whatever type the question expects). `units` are units such answers may
    carry that the answer-type check must accept (a new currency, say). `first`: tried before the question type's
    own answer sources (a conversion answers the question asked), else after them (a fallback such as a caption).
    `question_types`: the question types it may answer (empty: any)."""

    kind: str | None = None
    units: tuple[str, ...] = ()
    first: bool = True
    question_types: tuple[str, ...] = ()


@dataclass(frozen=True, eq=False)
class Capability:
    """A kind of work tools do, declared once; tools name it in `@tool(tags={...})` and planners pick tools by it.

    Two capabilities are the same when their names are (a set of tags holds one per name).

    Args:
        name: a snake_case word, unique among capabilities (the built-in ones are in `BUILTIN`).
        description: what the work is and which state field it writes, for people and model policies.
        inputs: the planner slots passed to its tools (each under the tool's own argument name, see
            `@tool(inputs=...)`); every one needs a provider: a slot the planner fills, or a `slots` hook.
        search: the SuperGlasses hop kind of its calls ("image" or "text"), when it searches.
        due: when a planner should call it, given its `Reading` of the turn (for a capability no plan-table row
            names).
        slots: input name -> a hook computing that input from the `Reading`.
        answer: what its output means for answering (an `AnswerUse`), when its facts answer questions.

    Example:
        >>> from tools import Capability, ToolContext, ToolOutput, tool
        >>> SPELLS = Capability("spells_word", "spells the entity's name letter by letter (writes facts)",
        ...                     inputs=("word",), slots={"word": lambda r: r.entity or ""},
        ...                     due=lambda r: "spell" in r.question and r.entity is not None)
        >>> @tool(tags={SPELLS}, writes={"facts"})
        ... def spell(ctx: ToolContext, word: str) -> ToolOutput:
        ...     '''Spell a word out, letter by letter.'''
        ...     return ToolOutput(summary="-".join(word.upper()))
        >>> spell.__tool__.has("spells_word"), spell.__tool__.capabilities == (SPELLS,)
        (True, True)
        >>> Capability("Spells Word", "not a snake_case name")
        Traceback (most recent call last):
        ...
        ValueError: capability name must be a snake_case word, not 'Spells Word'
    """

    name: str
    description: str
    inputs: tuple[str, ...] = ()  # planner slots passed to its tools (under the tool's own argument names)
    search: SearchKind | None = None
    due: Callable[[Reading], bool] | None = field(default=None, compare=False)
    slots: Mapping[str, Callable[[Reading], Any]] = field(default_factory=dict, compare=False)
    answer: AnswerUse | None = None

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ValueError(f"capability name must be a snake_case word, not {self.name!r}")
        missing = set(self.slots) - set(self.inputs)
        if missing:
            raise ValueError(f"capability {self.name}: slots {sorted(missing)} are not among its inputs")

    def __hash__(self) -> int:
        return hash(self.name)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Capability) and other.name == self.name


# The capabilities the plan table names. The planner fills their inputs itself (glasses_rag/policies/rules/slots.py:
# slots by name).
FINDS_ENTITY = Capability(
    "finds_entity", "identifies the pictured entity (writes evidence: image-KG or open-web hits)", search="image"
)
LOCATES_OBJECT = Capability("locates_object", "finds the object the question points at (writes crop)", ("target",))
READS_TEXT = Capability("reads_text", "reads text in the photo (writes ocr_text)")
DECOUPLES_QUERY = Capability(
    "decouples_query",
    "splits the question into stand-alone sub-questions (writes sub_questions)",
    ("question", "entity"),
)
SEARCHES_WEB = Capability("searches_web", "searches web pages (writes evidence)", ("query",), search="text")
READS_PAGE = Capability("reads_page", "fetches and cleans the pages of the evidence (writes evidence)", ("query",))
RERANKS = Capability("reranks", "reorders and prunes the evidence (replaces evidence)", ("query",))
CONVERTS_UNITS = Capability(
    "converts_units",
    "converts a quantity to another unit (writes facts)",
    ("value", "from_unit", "to_unit"),
    answer=AnswerUse(kind="quantity"),
)

# Listed here, read by name (the project's registration rule: glasses_rag/core/registry.py).
BUILTIN: Registry[Capability] = Registry(
    "capability",
    [
        (c.name, c)
        for c in (
            FINDS_ENTITY,
            LOCATES_OBJECT,
            READS_TEXT,
            DECOUPLES_QUERY,
            SEARCHES_WEB,
            READS_PAGE,
            RERANKS,
            CONVERTS_UNITS,
        )
    ],
)


def resolve(tags: Iterable[str | Capability]) -> tuple[frozenset[str], tuple[Capability, ...]]:
    """A tool's tags as names, and the capability objects among them (a built-in name stands for its object; other
    names are plain tags that planners ignore and model policies still see)."""
    names: set[str] = set()
    caps: dict[str, Capability] = {}
    for t in tags:
        cap = t if isinstance(t, Capability) else BUILTIN.get(t)
        name = t.name if isinstance(t, Capability) else t
        if not isinstance(name, str) or not _NAME.match(name):
            raise ValueError(f"tags must be snake_case words or Capability objects, not {t!r}")
        names.add(name)
        if cap is not None:
            if name in caps and caps[name] is not cap:
                raise ValueError(f"two different capabilities are named {name!r}")
            caps[name] = cap
    return frozenset(names), tuple(caps[n] for n in sorted(caps))


def search_kind(capabilities: Iterable[Capability]) -> SearchKind | None:
    """The SuperGlasses hop kind of a tool: image search wins over text search when a tool does both."""
    kinds = {c.search for c in capabilities if c.search}
    return "image" if "image" in kinds else "text" if "text" in kinds else None
