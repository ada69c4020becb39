"""Expected answer types (rule-based, no model): what kind of answer a question wants, and whether a text can hold one.

`expected_answer(question)` says what kind of answer a question wants (person, place, year, date, time, weekday,
number, quantity with a dimension, money in a currency, duration, yes/no, name, free text), from its wh-word and its
head noun; `matches(text, spec)` tells whether a text can hold such an answer. The rule-based planner enforces the
type on every source (glasses_rag/policies/rules/answer_check.py). Quantities live in glasses_rag/text/units.py, dates
in dates.py, names in names.py, answer spans in spans.py (re-exported here).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from glasses_rag.policies.rules.dates import DAY_OF_MONTH, FREQUENCY, MONTH, SEASON, TEMPORAL, TIME, WEEKDAY, YEAR
from glasses_rag.policies.rules.lexicon import ORG_NOUNS, PERSON_NOUNS, PLACE_NOUNS, WORDS
from glasses_rag.policies.rules.names import NamePhrase, name_phrases
from glasses_rag.policies.rules.spans import answer_span
from glasses_rag.policies.rules.spec import AnswerKind, ExpectedAnswer
from glasses_rag.text.units import (
    DEFAULT,
    NUMBER,
    Quantity,
    UnitTable,
    parse_number,
    quantities,
    unit_dimension,
    unit_of,
)

__all__ = [
    "AnswerKind",
    "ExpectedAnswer",
    "NamePhrase",
    "Quantity",
    "YEAR",
    "answer_span",
    "expected_answer",
    "head_noun",
    "matches",
    "name_phrases",
    "parse_number",
    "quantities",
    "unit_dimension",
    "unit_of",
]

_DIMENSION_OF = [
    ("length", r"tall|high|long|far|deep|wide|thick|big around|distant|away|in diameter|wingspan"),
    ("mass", r"heavy|much does \w+(?: \w+){0,3} weigh|much do \w+(?: \w+){0,3} weigh|weigh"),
    ("speed", r"fast|quickly"),
    ("temperature", r"hot|cold|warm"),
    ("age", r"old"),
    ("area", r"big|large"),
]
_YES_NO_START = re.compile(
    r"^\s*(?:is|are|was|were|do|does|did|can|could|will|would|should|has|have|had|may|must|isn't|"
    r"aren't|doesn't|don't|didn't|won't|can't)\b",
    re.I,
)
_WH_OR_VERB = re.compile(
    r"^(?:what|which|who|whom|whose|where|when|why|how|in|on|at|from|for|to|by|of|with|tell|"
    r"name|list|give|show|describe|identify)\b"
)
_OTHER = re.compile(r"\b(other|else|another|besides|apart from|except)\b", re.I)
_NP_STOP = frozenset(WORDS.noun_phrase_stop)
_NP_VERBS = frozenset(WORDS.noun_phrase_verbs)
_GENERIC_HEADS = frozenset(WORDS.generic_heads)
_COLLECTIVE = frozenset(WORDS.collective_nouns)


def _head_start(toks: list[str]) -> int | None:
    """Where the noun phrase after "what"/"which" starts; None when the question names none ("what is this")."""
    i = 0
    if toks and toks[0] in ("is", "are", "was", "were"):  # "what is the N of ..."
        i = 1
        if i < len(toks) and toks[i] in ("the", "a", "an", "its", "their", "his", "her"):
            i += 1
        else:
            return None  # "what is this", "what is it made of"
    while i < len(toks) and toks[i] in ("other", "another"):
        i += 1  # "what other flavor ..." -> flavor
    if i + 1 < len(toks) and toks[i] in _GENERIC_HEADS and toks[i + 1] == "of":
        i += 2  # "what kind of flower" -> flower
    return i


def head_noun(question: str) -> str | None:
    """The noun the answer is an instance of: "which coat pattern does ..." -> pattern, "what is the height of
    ..." -> height, "in which plant family ..." -> family; None when the question names none ("what is this")."""
    q = " ".join((question or "").lower().replace("’", "'").split()).strip(" ?.!")
    m = re.match(r"^(?:(?:in|on|at|from|for|to|by|of|with|into|under|during) )?(?:what|which)\s+(.*)$", q)
    if not m:
        return None
    toks = re.findall(r"[a-z0-9][a-z0-9'-]*", m.group(1))
    i = _head_start(toks)
    if i is None:
        return None
    np_: list[str] = []
    while i < len(toks) and len(np_) < 3 and toks[i] not in _NP_STOP:
        w = toks[i]
        if np_ and (w in _NP_VERBS or re.search(r"[a-z]{3,}(?<!e)ed$", w)):
            break  # "which cafe served ...": the verb ends the phrase
        if np_ and re.search(r"[^su]s$", w) and i + 1 < len(toks) and toks[i + 1] in _NP_STOP:
            break  # "which route stops here", "what bus route serves this"
        np_.append(w)
        i += 1
    if i < len(toks) and toks[i] == "of" and np_ and np_[-1] in _COLLECTIVE:
        return None  # "what is a group of these animals called": the answer is not a group's name
    if len(np_) >= 2 and np_[-1] in ("gain", "range", "limit", "level", "drop", "loss"):
        np_.pop()  # "elevation gain", "price range": the measured thing says the type
    head = np_[-1] if np_ else None
    return None if head in _GENERIC_HEADS or (head and head.endswith("'s")) else head


# ---- expected_answer: rules tried in order, the first that fits wins ------------------------------------
Rule = Callable[[str, "str | None"], "ExpectedAnswer | None"]  # (question, head noun) -> spec


def _leading_noun(q: str) -> str | None:
    """The head of a question asked as a bare noun phrase ("distance from Earth to this?", "year this shop was
    established?"): its first word, when it is a noun that says the answer's type."""
    m = re.match(r"^(?:the |its |their )?([a-z]+)\b", q)
    return m.group(1) if m and not _WH_OR_VERB.match(q) else None


def _by_head_noun(q: str, noun: str | None) -> ExpectedAnswer | None:
    noun = noun or _leading_noun(q)
    if noun in WORDS.head_kind:  # "what is the height of ...", "which year ...", "what is the price of ..."
        kind, dim = WORDS.head_kind[noun]
        return ExpectedAnswer(kind=kind, dimension=dim)  # type: ignore[arg-type]
    return None


def _money(q: str, noun: str | None) -> ExpectedAnswer | None:
    if re.search(r"^(?:what|how much) (?:does|do|did|will|would) .*\b(?:cost|costs|charge)$", q.strip(" ?.!")):
        return ExpectedAnswer(kind="money")  # "what does a bottle of this cost?"
    if re.search(r"^how much (?:is|are|was|were) (?:it|this|that|these|those|they)(?: one| ones)?$", q.strip(" ?.!")):
        return ExpectedAnswer(kind="money")  # "how much is it?": its price
    if re.search(
        r"\bhow much\b.*\b(cost|costs|price|pay|charge|charges|fare|worth|spend|ticket|admission|fee)\b|\b(price|fare"
        r"|cost|fee|admission)\b.*\b(of|for|is|does)\b|\bhow much (?:is|are|was|were) (?:a|an|the|one)\b",
        q,
    ):
        return ExpectedAnswer(kind="money")
    return None


def _duration(q: str, noun: str | None) -> ExpectedAnswer | None:
    if re.search(r"\bhow often\b|\bhow frequently\b", q):
        return ExpectedAnswer(kind="duration", dimension="frequency")
    if re.search(
        r"\bhow long (?:does|did|do|will|would|can|could|to|has|have|had|is the (?:wait|trip|flight|ride|drive|"
        r"journey|walk|hike|tour|film|movie|show|season)|does it take|will it take)\b|\bhow many (?:hours|minutes|"
        r"days|weeks|months|seconds)\b.*\b(take|last|live|sleep)",
        q,
    ):
        return ExpectedAnswer(kind="duration")
    return None


def _count(q: str, noun: str | None) -> ExpectedAnswer | None:
    m = re.search(r"\bhow many ([a-z-]+)", q)
    return ExpectedAnswer(kind="number", counted=m.group(1)) if m else None


def _calendar(q: str, noun: str | None) -> ExpectedAnswer | None:
    if re.search(r"\b(?:what|which) year\b|\bin what year\b|\bwhat century\b", q):
        return ExpectedAnswer(kind="year")
    if re.search(
        r"\bwhat time\b|\bat what time\b|\b(?:when|what time) does (?:it|the|this)\b.*\b(open|close|leave|depart|"
        r"arrive|start|end|run)\b",
        q,
    ):
        return ExpectedAnswer(kind="time")
    if re.search(r"\b(?:which|what) day\b", q):
        return ExpectedAnswer(kind="weekday")
    if re.search(r"\b(?:what|which) (?:exact )?date\b", q):
        return ExpectedAnswer(kind="date", dimension="day")  # "on what date ...": a calendar day, not a year
    if re.search(r"^\s*when\b|\bin which month\b|\bwhat month\b", q):
        return ExpectedAnswer(kind="date")
    return None


def _measure(q: str, noun: str | None) -> ExpectedAnswer | None:
    if re.search(r"\bhow much\b", q) and re.search(r"\bweigh", q):
        return ExpectedAnswer(kind="quantity", dimension="mass")
    # "how tall ..." opens the question (an embedded "... to measure how tall it is" does not say what is asked)
    m = re.search(
        r"^(?:[a-z]+ ){0,2}?how (tall|high|long|far|deep|wide|thick|heavy|fast|quickly|hot|cold|warm|old|big|large)\b",
        q,
    )
    if m:
        dim = next(d for d, pat in _DIMENSION_OF if re.fullmatch(pat, m.group(1)))
        return ExpectedAnswer(kind="quantity", dimension=dim)
    m = re.search(r"\bhow much ([a-z-]+) (?:does|do|did|is|are|was|were|has|have|had|can|will|would)\b", q)
    if m and m.group(1) not in ("is", "are", "was", "were", "does", "do", "did", "money"):
        return ExpectedAnswer(kind="number", counted=m.group(1))  # "how much fat does it have": fat
    if re.search(r"\bhow much\b", q):
        return ExpectedAnswer(kind="number")
    return None


def _by_noun_class(q: str, noun: str | None) -> ExpectedAnswer | None:
    if noun and re.fullmatch(PERSON_NOUNS, noun):
        return ExpectedAnswer(kind="person")
    if noun and re.fullmatch(PLACE_NOUNS, noun):
        return ExpectedAnswer(kind="place", noun=noun)
    if noun and re.fullmatch(ORG_NOUNS, noun):  # "which coffee shop ...": the name of one
        return ExpectedAnswer(kind="name", noun=noun)
    return None


def _seller(q: str, noun: str | None) -> ExpectedAnswer | None:
    if re.search(
        r"\bwhere(?: in [a-z]+(?: [a-z]+)?)? (?:can|could|do|does|should|would|might) (?:i|we|you|one|people) "
        r"(?:buy|get|purchase|order|"
        r"rent|hire|eat|try)\b",
        q,
    ):
        return ExpectedAnswer(kind="name")  # "where can I buy one?": a seller's name, not a street
    return None


def _by_wh_word(q: str, noun: str | None) -> ExpectedAnswer | None:
    if re.search(
        r"^\s*where\b|\bwhere (?:is|are|was|were|does|do|did|can)\b|\b(?:which|what|in which|in what) (?:(?:is|was|"
        r"are) the )?(?:" + PLACE_NOUNS + r")\b",
        q,
    ):
        place = re.search(r"\b(" + PLACE_NOUNS + r")\b", q)
        return ExpectedAnswer(kind="place", noun=place.group(1) if place else None)
    if re.search(r"^\s*(?:who|whom|whose)\b|\bby whom\b|\b(?:which|what) (?:" + PERSON_NOUNS + r")\b", q):
        return ExpectedAnswer(kind="person")
    if re.search(r"\b(?:which|what) (?:" + ORG_NOUNS + r")\b", q) or re.search(r"\bwhat is the name\b", q):
        org = re.search(r"\b(" + ORG_NOUNS + r")\b", q)
        return ExpectedAnswer(kind="name", noun=org.group(1) if org else None)
    return None


RULES: list[Rule] = [
    _by_head_noun,
    _money,
    _duration,
    _count,
    _calendar,
    _measure,
    _by_noun_class,
    _seller,
    _by_wh_word,
]


def expected_answer(question: str, units: UnitTable = DEFAULT) -> ExpectedAnswer:
    """What kind of answer the question wants; the first rule that fits wins."""
    q = " ".join((question or "").lower().replace("’", "'").split())
    q = re.sub(r"\b(what|who|where|when|how)'s\b", r"\1 is", q)
    if _YES_NO_START.search(q) and not re.search(r"\bor\b", q):
        return ExpectedAnswer(kind="yes_no")
    noun = head_noun(q)
    spec = next((s for s in (rule(q, noun) for rule in RULES) if s is not None), None) or ExpectedAnswer(
        kind="text", noun=noun
    )
    if _OTHER.search(q):
        spec = spec.model_copy(update={"other": True})
    return _in_currency(spec, q, units)


def _in_currency(spec: ExpectedAnswer, q: str, units: UnitTable) -> ExpectedAnswer:
    """A price asked in a currency ("how much is it in euros?", "how many yen is it?"): the answer must be in it."""
    names = "|".join(re.escape(n) for n in units.currency_names() if any(ch.isalpha() for ch in n))
    m = re.search(rf"\b(?:in|how many) ({names})\b", q, re.I) if names else None
    if m is None or spec.kind not in ("money", "number"):
        return spec
    return ExpectedAnswer(kind="money", unit=units.currency_of(m.group(1)), other=spec.other)


# ---- matches: can a text hold an answer of this kind? ---------------------------------------------------


def _matches_measure(a: str, spec: ExpectedAnswer, units: UnitTable) -> bool:
    qs = units.quantities(a)
    k = spec.kind
    if k == "quantity" and spec.unit:  # a conversion: the unit asked for
        return any(q.unit == spec.unit for q in qs)
    if k == "quantity":
        if spec.dimension == "age":
            return any(q.unit == "year" for q in qs) or bool(YEAR.search(a))
        if spec.dimension in (None, "area"):
            return bool(qs)
        return any(q.dimension == spec.dimension for q in qs)
    if k == "money":
        return any(q.dimension == "money" and (spec.unit is None or q.unit == spec.unit) for q in qs) or bool(
            re.search(r"\bfree\b", a, re.I)
        )
    if spec.dimension == "frequency":  # duration
        return bool(FREQUENCY.search(a))
    return any(q.dimension == "time" for q in qs) or bool(FREQUENCY.search(a))


_CALENDAR: dict[str, Callable[[str], bool]] = {
    "year": lambda a: bool(YEAR.search(a)),
    "date": lambda a: bool(
        YEAR.search(a)
        or MONTH.search(a)
        or WEEKDAY.search(a)
        or SEASON.search(a)
        or TIME.search(a)
        or TEMPORAL.search(a)
    ),
    "time": lambda a: bool(TIME.search(a)),
    "weekday": lambda a: bool(WEEKDAY.search(a)),
}


def matches(text: str, spec: ExpectedAnswer | str | None, *, cased: bool = True, units: UnitTable = DEFAULT) -> bool:
    """Can `text` hold an answer of this kind? `cased=False` for lower-cased KG values (names cannot be told by
    case)."""
    a = text or ""
    if isinstance(spec, str) or spec is None:
        spec = ExpectedAnswer(kind=spec or "text")  # type: ignore[arg-type]
    k = spec.kind
    if k in ("text", "yes_no"):
        return bool(a.strip())
    if k == "number":
        return bool(NUMBER.search(a))
    if k in ("quantity", "money", "duration"):
        return _matches_measure(a, spec, units)
    if k == "date" and spec.dimension == "day":
        return bool(DAY_OF_MONTH.search(a))
    if k in _CALENDAR:
        return _CALENDAR[k](a)
    # person, place, name: letters, not only a number or a date; a proper name when case tells
    if not re.search(r"[A-Za-z]", a) or (k == "person" and YEAR.fullmatch(a.strip())):
        return False
    if re.fullmatch(r"\W*[\d.,]+\W*", a):
        return False
    return bool(name_phrases(a)) if cased else True
