"""Numbers, units of measure and currencies in text (rule-based): `quantities(text)` finds each number with its
unit and its span. The units are data (glasses_rag/text/units.yaml); a `UnitTable` may be extended with the units a
tool's capability declares (tools.capability.AnswerUse.units), for one planner's turns only."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field

_SMALL: dict[str, float] = {
    w: i
    for i, w in enumerate(
        "zero one two three four five six seven eight nine ten eleven "
        "twelve thirteen fourteen fifteen sixteen seventeen eighteen "
        "nineteen twenty".split()
    )
}
_SMALL.update(
    {
        "thirty": 30,
        "forty": 40,
        "fifty": 50,
        "sixty": 60,
        "seventy": 70,
        "eighty": 80,
        "ninety": 90,
        "hundred": 100,
        "dozen": 12,
        "a dozen": 12,
        "half": 0.5,
        "a hundred": 100,
        "a thousand": 1000,
    }
)
_SCALE = {"hundred": 1e2, "thousand": 1e3, "million": 1e6, "billion": 1e9, "trillion": 1e12}
_WORDNUM = "|".join(sorted(_SMALL, key=len, reverse=True))
NUMBER = re.compile(
    rf"(?<![\w.,])(?:(?P<digits>\d{{1,3}}(?:,\d{{3}})+(?:\.\d+)?|\d+(?:\.\d+)?)|(?P<word>{_WORDNUM})(?:-(?P<unit_word>one|two|"
    rf"three|four|five|six|seven|eight|nine))?)(?:\s+(?P<scale>hundred|thousand|million|billion|trillion))?(?![\w])",
    re.I,
)
_QUALIFIER = re.compile(
    r"(?:about|around|approximately|approx\.|roughly|nearly|almost|over|under|more than|less than|"
    r"at least|at most|up to|some|just over|just under|circa|c\.|an estimated|estimated)\s+$",
    re.I,
)
_RANGE = re.compile(r"\s*(?:to|-|–|and|or)\s*", re.I)
MONEY = "money"


class UnitDef(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    dimension: str
    factor: float = Field(gt=0)
    aliases: tuple[str, ...] = Field(min_length=1)


class CurrencyDef(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    codes: tuple[str, ...] = ()  # upper-case codes, written before or after the amount ("EUR 5", "5 EUR")
    names: tuple[str, ...] = ()  # words written after the amount ("5 euros")


class UnitData(BaseModel):
    """glasses_rag/text/units.yaml."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    units: dict[str, UnitDef]
    currencies: dict[str, CurrencyDef]


def _alternation(names: list[str]) -> str:
    return "|".join(re.escape(a) for a in sorted(set(names), key=len, reverse=True))


@dataclass
class Quantity:
    value: float
    unit: str | None  # canonical unit, a currency symbol for money, None for a bare number
    dimension: str | None  # length, mass, ..., money, or None
    start: int  # span in the text, qualifier ("about") and unit included
    end: int
    text: str
    factor: float = 1.0  # to the dimension's base unit

    @property
    def base(self) -> float:
        return self.value * self.factor


def _value(m: re.Match) -> float:
    if m.group("digits"):
        v = float(m.group("digits").replace(",", ""))
    else:
        v = float(_SMALL[m.group("word").lower()]) + (
            float(_SMALL[m.group("unit_word").lower()]) if m.group("unit_word") else 0
        )
    if m.group("scale"):
        v *= _SCALE[m.group("scale").lower()]
    return v


def parse_number(text: str) -> float | None:
    m = NUMBER.search(text or "")
    return _value(m) if m else None


class UnitTable:
    """The units and currencies one planner reads. Built-in: `DEFAULT`; `extended(...)` adds a capability's."""

    def __init__(self, data: UnitData):
        self.data = data
        self.alias = {a.lower(): u for u, d in data.units.items() for a in d.aliases}
        self.currency_alias = {n.lower(): c for c, d in data.currencies.items() for n in (*d.codes, *d.names, c)}
        self._unit_re = re.compile(r"\s*(?:-\s*)?(" + _alternation(list(self.alias)) + r")(?![\w²])", re.I)
        after = [n for d in data.currencies.values() for n in (*d.codes, *d.names)]
        self._currency_after = re.compile(r"\s*(" + _alternation(after) + r")\b", re.I)
        symbols = [c for c in data.currencies if not c.isalnum()]
        codes = [c for d in data.currencies.values() for c in d.codes]
        self._currency_before = re.compile(
            r"(?:(" + _alternation(symbols) + r")|\b(" + _alternation(codes) + r")\s)\s*$"
        )

    @cached_property
    def year_exclusion(self) -> str:
        """Unit names after which a four-digit number is a measure, not a year ("1500 metres")."""
        return _alternation([a for a in self.alias if len(a) > 2])

    def unit_of(self, name: str | None) -> str | None:
        """Canonical unit for a unit name ("metres" -> "m"), or None."""
        return self.alias.get((name or "").strip().lower())

    def currency_of(self, name: str | None) -> str | None:
        """Canonical currency for a currency name, code or symbol ("euros" -> "€"), or None."""
        return self.currency_alias.get((name or "").strip().lower())

    def dimension(self, unit: str | None) -> str | None:
        if unit in self.data.units:
            return self.data.units[unit].dimension
        return MONEY if unit in self.data.currencies else None

    def currency_names(self) -> list[str]:
        return sorted(self.currency_alias, key=len, reverse=True)

    def _unit_after(self, t: str, start: int, end: int) -> tuple[int, int, str | None, str | None, float]:
        cur_before, cur_after = self._currency_before.search(t[:start]), self._currency_after.match(t[end:])
        if cur_before:
            sym = cur_before.group(1) or cur_before.group(2)
            return cur_before.start(), end, self.currency_of(sym), MONEY, 1.0
        if cur_after:
            return start, end + cur_after.end(), self.currency_of(cur_after.group(1)), MONEY, 1.0
        um = self._unit_re.match(t[end:])
        if um:
            unit = self.alias[um.group(1).lower()]
            d = self.data.units[unit]
            return start, end + um.end(), unit, d.dimension, d.factor
        return start, end, None, None, 1.0

    def quantities(self, text: str) -> list[Quantity]:
        """Numbers in `text` with their unit (when one follows) and their span, ranges ("12 to 16 hours") as one."""
        out: list[Quantity] = []
        t = text or ""
        covered = 0
        for m in NUMBER.finditer(t):
            if m.start() < covered:
                continue  # the second number of a range already taken
            if m.group("word") and m.group("word").lower() in ("one", "half") and not self._unit_re.match(t[m.end() :]):
                continue  # "one of the ...": a pronoun, not a count
            start, end = m.start(), m.end()
            rng = _RANGE.match(t[end:])
            if rng:
                m2 = NUMBER.match(t[end + rng.end() :])
                if m2 and m2.group("digits") and m.group("digits"):
                    end = end + rng.end() + m2.end()
            start, end, unit, dim, factor = self._unit_after(t, start, end)
            q = _QUALIFIER.search(t[:start])
            if q:
                start = q.start()
            out.append(Quantity(_value(m), unit, dim, start, end, t[start:end].strip(), factor))
            covered = end
        return out

    def extended(self, kind: str, names: tuple[str, ...]) -> UnitTable:
        return _extended(self, kind, tuple(names))


@lru_cache(maxsize=64)
def _extended(table: UnitTable, kind: str, names: tuple[str, ...]) -> UnitTable:
    """`table` plus one unit written as `names` (its canonical name first): a currency for kind "money", else a unit
    of its own dimension. Names the table knows already join the known unit."""
    if not names:
        return table
    data = table.data
    if kind == MONEY:
        known = next((table.currency_of(n) for n in names if table.currency_of(n)), None)
        key = known or names[0]
        old = data.currencies.get(key, CurrencyDef())
        codes = tuple(dict.fromkeys((*old.codes, *(n for n in names if re.fullmatch(r"[A-Z]{3}", n)))))
        words = tuple(
            dict.fromkeys(
                (
                    *old.names,
                    *(
                        n
                        for n in names
                        if not re.fullmatch(r"[A-Z]{3}", n) and n != key and any(ch.isalnum() for ch in n)
                    ),
                )
            )
        )
        currencies = {**data.currencies, key: CurrencyDef(codes=codes, names=words)}
        return UnitTable(UnitData(units=data.units, currencies=currencies))
    known = next((table.unit_of(n) for n in names if table.unit_of(n)), None)
    key = known or names[0]
    old_unit = data.units.get(key, UnitDef(dimension=key, factor=1.0, aliases=(key,)))
    unit = old_unit.model_copy(update={"aliases": tuple(dict.fromkeys((*old_unit.aliases, *names)))})
    return UnitTable(UnitData(units={**data.units, key: unit}, currencies=data.currencies))


UNITS_FILE = Path(__file__).with_name("units.yaml")


def load_units(path: Path = UNITS_FILE) -> UnitTable:
    return UnitTable(UnitData.model_validate(yaml.safe_load(path.read_text(encoding="utf-8"))))


DEFAULT = load_units()


def quantities(text: str, units: UnitTable = DEFAULT) -> list[Quantity]:
    return units.quantities(text)


def unit_of(name: str | None, units: UnitTable = DEFAULT) -> str | None:
    return units.unit_of(name)


def unit_dimension(unit: str | None, units: UnitTable = DEFAULT) -> str | None:
    return units.dimension(unit) if unit in units.data.units else None


def to_base(value: float, unit: str, units: UnitTable = DEFAULT) -> float:
    return value * units.data.units[unit].factor
