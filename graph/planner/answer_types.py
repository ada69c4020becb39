"""Expected answer types, quantities with units, and answer spans (rule-based, no model).

`expected_answer(question)` says what kind of answer a question wants (person, place, year, date, time, weekday,
number, quantity with a dimension, money, duration, yes/no, name, free text); `matches(text, spec)` tells whether a
text can hold such an answer; `answer_span(sentence, spec, ...)` cuts the short answer out of a sentence. The
rule-based planner enforces the type on every source (KG attribute, web sentence, OCR text, tool facts).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel

AnswerKind = Literal["person", "place", "year", "date", "time", "weekday", "number", "quantity", "money", "duration",
                     "yes_no", "name", "text"]


class AnswerSpec(BaseModel):
    kind: AnswerKind = "text"
    dimension: str | None = None  # for quantities: length, mass, speed, temperature, volume, area, age, energy
    counted: str | None = None  # "how many <noun>": the noun a number must count
    noun: str | None = None  # "which <noun>": the class the answer belongs to
    other: bool = False  # "what other / else": the entity's own known values are not the answer


# ---- numbers and units ---------------------------------------------------------------------------

_SMALL: dict[str, float] = {w: i for i, w in enumerate("zero one two three four five six seven eight nine ten eleven twelve thirteen "
                                     "fourteen fifteen sixteen seventeen eighteen nineteen twenty".split())}
_SMALL.update({"thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90,
               "hundred": 100, "dozen": 12, "a dozen": 12, "half": 0.5, "a hundred": 100, "a thousand": 1000})
_SCALE = {"hundred": 1e2, "thousand": 1e3, "million": 1e6, "billion": 1e9, "trillion": 1e12}
_WORDNUM = "|".join(sorted(_SMALL, key=len, reverse=True))
NUMBER = re.compile(
    rf"(?<![\w.,])(?:(?P<digits>\d{{1,3}}(?:,\d{{3}})+(?:\.\d+)?|\d+(?:\.\d+)?)|(?P<word>{_WORDNUM})(?:-(?P<unit_word>one|two|"
    rf"three|four|five|six|seven|eight|nine))?)(?:\s+(?P<scale>hundred|thousand|million|billion|trillion))?(?![\w])",
    re.I)
_QUALIFIER = re.compile(r"(?:about|around|approximately|approx\.|roughly|nearly|almost|over|under|more than|less than|"
                        r"at least|at most|up to|some|just over|just under|circa|c\.|an estimated|estimated)\s+$", re.I)

# canonical unit -> (dimension, factor to the dimension's base unit, aliases)
UNITS: dict[str, tuple[str, float, tuple[str, ...]]] = {
    "m": ("length", 1.0, ("meters", "meter", "metres", "metre", "m")),
    "km": ("length", 1000.0, ("kilometers", "kilometer", "kilometres", "kilometre", "km")),
    "cm": ("length", 0.01, ("centimeters", "centimeter", "centimetres", "centimetre", "cm")),
    "mm": ("length", 0.001, ("millimeters", "millimeter", "millimetres", "millimetre", "mm")),
    "ft": ("length", 0.3048, ("feet", "foot", "ft")),
    "in": ("length", 0.0254, ("inches", "inch")),
    "mi": ("length", 1609.344, ("miles", "mile", "mi")),
    "yd": ("length", 0.9144, ("yards", "yard", "yd")),
    "hand": ("length", 0.1016, ("hands", "hand")),
    "ly": ("length", 9.4607e15, ("light-years", "light years", "light-year", "light year")),
    "kg": ("mass", 1.0, ("kilograms", "kilogram", "kilos", "kilo", "kg")),
    "g": ("mass", 0.001, ("grams", "gram", "g")),
    "mg": ("mass", 1e-6, ("milligrams", "milligram", "mg")),
    "t": ("mass", 1000.0, ("metric tons", "tonnes", "tonne", "tons", "ton")),
    "lb": ("mass", 0.45359237, ("pounds", "pound", "lbs", "lb")),
    "oz": ("mass", 0.0283495, ("ounces", "ounce", "oz")),
    "l": ("volume", 1.0, ("liters", "liter", "litres", "litre", "l")),
    "ml": ("volume", 0.001, ("milliliters", "milliliter", "millilitres", "millilitre", "ml")),
    "gal": ("volume", 3.78541, ("gallons", "gallon", "gal")),
    "km/h": ("speed", 1 / 3.6, ("kilometers per hour", "kilometres per hour", "km/h", "kph", "km per hour")),
    "mph": ("speed", 0.44704, ("miles per hour", "mph")),
    "m/s": ("speed", 1.0, ("meters per second", "metres per second", "m/s")),
    "kn": ("speed", 0.514444, ("knots", "knot")),
    "C": ("temperature", 1.0, ("degrees celsius", "degrees c", "°c", "celsius")),
    "F": ("temperature", 1.0, ("degrees fahrenheit", "degrees f", "°f", "fahrenheit")),
    "km2": ("area", 1e6, ("square kilometers", "square kilometres", "sq km", "km2", "km²")),
    "m2": ("area", 1.0, ("square meters", "square metres", "sq m", "m2", "m²")),
    "mi2": ("area", 2.58999e6, ("square miles", "sq mi")),
    "acre": ("area", 4046.86, ("acres", "acre")),
    "ha": ("area", 1e4, ("hectares", "hectare", "ha")),
    "s": ("time", 1.0, ("seconds", "second", "secs", "sec")),
    "min": ("time", 60.0, ("minutes", "minute", "mins", "min")),
    "h": ("time", 3600.0, ("hours", "hour", "hrs", "hr")),
    "day": ("time", 86400.0, ("days", "day")),
    "week": ("time", 604800.0, ("weeks", "week")),
    "month": ("time", 2.63e6, ("months", "month")),
    "year": ("time", 3.156e7, ("years", "year", "yrs")),
    "kcal": ("energy", 1.0, ("kilocalories", "kcal", "calories", "calorie", "cal")),
    "%": ("ratio", 1.0, ("percent", "per cent", "%")),
}
_ALIAS = {a: u for u, (_, _, aliases) in UNITS.items() for a in aliases}
_UNIT_RE = re.compile(r"\s*(?:-\s*)?(" + "|".join(re.escape(a) for a in sorted(_ALIAS, key=len, reverse=True))
                      + r")(?![\w²])", re.I)
_RANGE = re.compile(r"\s*(?:to|-|–|and|or)\s*", re.I)
_CURRENCY_BEFORE = re.compile(r"[$€£¥]\s*$")
_CURRENCY_AFTER = re.compile(r"\s*(?:dollars?|euros?|cents?|usd|eur|gbp|yen|us dollars)\b", re.I)


def unit_of(name: str) -> str | None:
    """Canonical unit for a unit name ("metres" -> "m"), or None."""
    return _ALIAS.get((name or "").strip().lower())


def unit_dimension(unit: str | None) -> str | None:
    return UNITS[unit][0] if unit in UNITS else None


def to_base(value: float, unit: str) -> float:
    return value * UNITS[unit][1]


def parse_number(text: str) -> float | None:
    m = NUMBER.search(text or "")
    return _value(m) if m else None


def _value(m: re.Match) -> float:
    if m.group("digits"):
        v = float(m.group("digits").replace(",", ""))
    else:
        v = float(_SMALL[m.group("word").lower()]) + (float(_SMALL[m.group("unit_word").lower()]) if m.group("unit_word") else 0)
    if m.group("scale"):
        v *= _SCALE[m.group("scale").lower()]
    return v


@dataclass
class Quantity:
    value: float
    unit: str | None  # canonical unit, "$"-style currency for money, None for a bare number
    dimension: str | None  # length, mass, ..., money, or None
    start: int  # span in the text, qualifier ("about") and unit included
    end: int
    text: str

    @property
    def base(self) -> float:
        return to_base(self.value, self.unit) if self.unit in UNITS else self.value


def quantities(text: str) -> list[Quantity]:
    """Numbers in `text` with their unit (when one follows) and their span, ranges ("12 to 16 hours") as one."""
    out: list[Quantity] = []
    t = text or ""
    covered = 0
    for m in NUMBER.finditer(t):
        if m.start() < covered:
            continue  # the second number of a range already taken
        if m.group("word") and m.group("word").lower() in ("one", "half") and not _UNIT_RE.match(t[m.end():]):
            continue  # "one of the ...": a pronoun, not a count
        start, end = m.start(), m.end()
        value = _value(m)
        rng = _RANGE.match(t[end:])
        if rng:
            m2 = NUMBER.match(t[end + rng.end():])
            if m2 and m2.group("digits") and m.group("digits"):
                end = end + rng.end() + m2.end()
        unit = dim = None
        um = _UNIT_RE.match(t[end:])
        cur_before, cur_after = _CURRENCY_BEFORE.search(t[:start]), _CURRENCY_AFTER.match(t[end:])
        if cur_before:
            start = cur_before.start()
            unit, dim = "$", "money"
        elif cur_after:
            end += cur_after.end()
            unit, dim = "$", "money"
        elif um:
            unit = _ALIAS[um.group(1).lower()]
            dim = UNITS[unit][0]
            end += um.end()
        q = _QUALIFIER.search(t[:start])
        if q:
            start = q.start()
        out.append(Quantity(value, unit, dim, start, end, t[start:end].strip()))
        covered = end
    return out


# ---- dates and names -----------------------------------------------------------------------------

YEAR = re.compile(r"(?<![\d,.$])\b(?:(?:AD|A\.D\.|BC|BCE|CE)\s*\d{1,4}|\d{1,4}\s*(?:AD|A\.D\.|BC|BCE|CE)\b|1[0-9]{3}|20[0-9]{2})"
                  r"(?![\d,]\d|\.\d|\s*(?:" + "|".join(re.escape(a) for a in sorted(_ALIAS, key=len, reverse=True)
                                                          if len(a) > 2) + r")\b)", re.I)
_MONTHS = ("january february march april (?-i:May) june july august september october november december "
           "jan feb mar apr jun jul aug sep sept oct nov dec").split()  # "may" is a month only when capitalised
_MONTH_ALT = "|".join(_MONTHS[:12]) + r"|(?:" + "|".join(_MONTHS[12:]) + r")\.?"
MONTH = re.compile(r"\b(?:" + _MONTH_ALT + r")(?!\w)", re.I)
WEEKDAY = re.compile(r"\b(monday|tuesday|wednesday|thursday|friday|saturday|sunday)s?\b", re.I)
SEASON = re.compile(r"\b(spring|summer|autumn|fall|winter|century|decade|ago|frost|dawn|dusk|sunrise|sunset|"
                    r"morning|evening|night|noon|midnight)\b", re.I)
TIME = re.compile(r"\b\d{1,2}(?::\d{2})?\s*(?:a\.?m\.?|p\.?m\.?)(?!\w)|\b\d{1,2}:\d{2}\b|\bnoon\b|\bmidnight\b|\b\d{1,2} o'clock\b",
                  re.I)
_TEMPORAL = re.compile(r"\b(after|before|during|until|since|between|every|each|daily|weekly|monthly|yearly|annually|"
                       r"hourly|once|twice)\b", re.I)
_FREQUENCY = re.compile(r"\bevery\b|\b(daily|weekly|monthly|yearly|annually|hourly|nightly)\b|\b(once|twice|\w+ times)\s+"
                        r"(?:a|an|per|each)\b", re.I)

# a token of a proper name: capitalised, all caps, or letters mixed with digits ("STS-93", "L1", "FHL2")
_NAME_TOKEN = re.compile(r"(?:[A-Z][\w'’&.-]*|\d+(?!st\b|nd\b|rd\b|th\b|s\b)[A-Za-z][\w-]*|[A-Za-z]+-?\d[\w-]*)")
_NAME_LINK = {"of", "the", "de", "du", "da", "la", "le", "von", "van", "der", "del", "y", "&", "upon", "for"}
_TOKEN = re.compile(r"[A-Za-z0-9][\w'’&.-]*|[,()]")
_SENTENCE_OPENERS = {"the", "a", "an", "it", "its", "in", "on", "at", "this", "that", "these", "those", "there", "he",
                     "she", "they", "we", "you", "i", "his", "her", "their", "our", "after", "before", "during",
                     "when", "while", "since", "as", "for", "from", "by", "with", "if", "some", "many", "most", "all",
                     "each", "every", "one", "over", "today", "however", "although", "today's", "what", "which",
                     "who", "where", "why", "how", "yes", "no", "both", "also", "once", "visitors", "local", "buses"}


@dataclass
class NamePhrase:
    text: str
    start: int
    end: int
    after: str  # the lower-cased word just before the phrase ("in", "by", ...)


def name_phrases(sentence: str) -> list[NamePhrase]:
    """Proper-name phrases: runs of capitalised / alphanumeric tokens, joined by 'of', 'the', 'de', commas between
    capitalised places ("Montreal, Quebec, Canada"), plus a trailing common head noun ("... Lagrange point,")."""
    toks = list(_TOKEN.finditer(sentence or ""))
    out: list[NamePhrase] = []
    i = 0
    while i < len(toks):
        t = toks[i]
        if not _NAME_TOKEN.fullmatch(t.group(0).rstrip(".")):
            i += 1
            continue
        j = i
        while j + 1 < len(toks):
            nxt = toks[j + 1].group(0)
            if _NAME_TOKEN.fullmatch(nxt.rstrip(".")) or re.fullmatch(r"\d{1,3}", nxt.rstrip(".")):
                j += 1  # "Falcon 9", "Apollo 11", "Route 42": a number continues a name
            elif (nxt.lower() in _NAME_LINK or nxt == ",") and j + 2 < len(toks) and _NAME_TOKEN.fullmatch(
                    toks[j + 2].group(0).rstrip(".")) and (nxt != "," or _is_place_list(toks, j + 2)):
                j += 2
            else:
                break
        # sentence-initial function words are not names ("The", "It", "In")
        while i <= j and toks[i].start() == _first_word_start(sentence) and toks[i].group(0).lower() in _SENTENCE_OPENERS:
            i += 1
        while i <= j and (toks[i].group(0) in _NAME_LINK | {","} or (
                toks[i].group(0).lower() in _NAME_LINK and toks[i].start() == _first_word_start(sentence))):
            i += 1  # a name does not open with "of"/"the" (a capitalised "Of" inside a sentence is part of one)
        if i <= j:
            end = toks[j].end()
            # a lower-case head noun that closes the name ("the Sun-Earth L1 Lagrange point,")
            if j + 1 < len(toks) and re.fullmatch(r"[a-z]{3,}\.?", toks[j + 1].group(0)) and (
                    j + 2 >= len(toks) or toks[j + 2].group(0) in (",", ")")) and toks[j + 1].group(0) not in _NAME_LINK:
                end = toks[j + 1].end() - toks[j + 1].group(0).endswith(".")
            before = [w.lower().strip(",") for w in sentence[: toks[i].start()].split()]
            while before and before[-1] in ("the", "a", "an"):
                before.pop()
            text = sentence[toks[i].start():end].rstrip(".,")
            if not (MONTH.match(text) or WEEKDAY.match(text)):  # dates are not names
                out.append(NamePhrase(text, toks[i].start(), end, before[-1] if before else ""))
        i = j + 1
    return out


def _first_word_start(sentence: str) -> int:
    m = re.search(r"[A-Za-z0-9]", sentence or "")
    return m.start() if m else 0


def _is_place_list(toks: list[re.Match], k: int) -> bool:
    """"Montreal, Quebec, Canada": a comma-joined run of single capitalised words that ends the clause."""
    t = toks[k].group(0)
    return bool(re.fullmatch(r"[A-Z][a-z]+\.?", t)) and (k + 1 >= len(toks) or toks[k + 1].group(0) in (",", ")")
                                                       or not _NAME_TOKEN.fullmatch(toks[k + 1].group(0)))


# ---- what a question wants ------------------------------------------------------------------------

_DIMENSION_OF = [
    ("length", r"tall|high|long|far|deep|wide|thick|big around|distant|away|in diameter|wingspan"),
    ("mass", r"heavy|much does \w+(?: \w+){0,3} weigh|much do \w+(?: \w+){0,3} weigh|weigh"),
    ("speed", r"fast|quickly"),
    ("temperature", r"hot|cold|warm"),
    ("age", r"old"),
    ("area", r"big|large"),
]
_PLACE_NOUNS = ("city|country|town|state|province|continent|island|lake|river|mountain|street|region|park|county|village|"
                "ocean|sea|neighbou?rhood|district|capital|nation|place|location|area|valley|bay|coast|desert|forest|"
                "planet|harbou?r|port|square|campus")
PERSON_NOUNS = _PERSON_NOUNS = ("person|people|man|woman|author|writer|poet|novelist|artist|painter|sculptor|architect|composer|"
                 "singer|musician|scientist|inventor|designer|founder|owner|president|king|queen|emperor|player|actor|"
                 "actress|director|astronaut|explorer|chef|engineer|leader|ruler|saint|pope|captain|pilot|commander|"
                 "manager|coach|creator|discoverer|photographer|mayor|monarch")
_ORG_NOUNS = ("company|brand|manufacturer|maker|firm|publisher|team|agency|organi[sz]ation|band|airline|club|studio|"
              "label|university|school|college|museum|restaurant|cafe|bakery|shop|store|church|temple|group|network")
_YES_NO_START = re.compile(r"^\s*(?:is|are|was|were|do|does|did|can|could|will|would|should|has|have|had|may|must|isn't|"
                           r"aren't|doesn't|don't|didn't|won't|can't)\b", re.I)
_OTHER = re.compile(r"\b(other|else|another|besides|apart from|except)\b", re.I)
# Words that end the noun phrase after "what"/"which" (the head noun is its last word).
_NP_STOP = frozenset("""is are was were am be been do does did can could will would should shall may might must has have had
the a an this that these those it its they them their he she his her him i you we my your our of in on at to for from by
with about as into onto over under near after before since during until between behind above below across along around
through toward towards against without within upon and or but if than then so not no else""".split())
_NP_VERBS = frozenset("""made built cost costs served serves serve make makes mean means belong belongs use uses used live
lives grow grows need needs run runs stand stands stop stops sit sits hold holds contain contains produce produces come comes
go goes open opens close closes show shows say says called named known located found founded won win wins""".split())
_GENERIC_HEADS = frozenset("kind type sort variety thing things one ones".split())
_COLLECTIVE = frozenset("group pair set piece part member herd flock pack collection".split())
# What a head noun says about the answer: "what is the height of ..." wants a length, "which year" a year.
_HEAD_KIND: dict[str, tuple[str, str | None]] = {
    **{w: ("quantity", "length") for w in "height length distance depth width diameter altitude elevation wingspan "
       "circumference radius span".split()},
    **{w: ("quantity", "mass") for w in "weight mass".split()},
    "speed": ("quantity", "speed"), "temperature": ("quantity", "temperature"), "area": ("quantity", "area"),
    **{w: ("money", None) for w in "price cost fare fee admission revenue salary toll rent".split()},
    **{w: ("number", None) for w in "number count total population amount".split()},
    "year": ("year", None), "date": ("date", None), "day": ("weekday", None), "time": ("time", None),
    **{w: ("duration", None) for w in "duration period lifespan".split()},
}


def head_noun(question: str) -> str | None:
    """The noun the answer is an instance of: "which coat pattern does ..." -> pattern, "what is the height of
    ..." -> height, "in which plant family ..." -> family; None when the question names none ("what is this")."""
    q = " ".join((question or "").lower().replace("’", "'").split()).strip(" ?.!")
    m = re.match(r"^(?:(?:in|on|at|from|for|to|by|of|with|into|under|during) )?(?:what|which)\s+(.*)$", q)
    if not m:
        return None
    toks = re.findall(r"[a-z0-9][a-z0-9'-]*", m.group(1))
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


COMPARISON = re.compile(r"\b(\w+er|more \w+|less \w+)\b[^?]*,[^?]*\bor\b|\bbefore or after\b|\bhow many (?:years|days|months)"
                        r" (?:after|before|between|since)\b|\b(\w+er|more \w+|less \w+) than\b", re.I)


def expected_answer(question: str) -> AnswerSpec:
    """What kind of answer the question wants; the first rule that fits wins."""
    q = " ".join((question or "").lower().replace("’", "'").split())
    q = re.sub(r"\b(what|who|where|when|how)'s\b", r"\1 is", q)
    other = bool(_OTHER.search(q))
    if _YES_NO_START.search(q) and not re.search(r"\bor\b", q):
        return AnswerSpec(kind="yes_no")
    noun = head_noun(q)
    if noun in _HEAD_KIND:  # "what is the height of ...", "which year ...", "what is the price of ..."
        kind, dim = _HEAD_KIND[noun]
        return AnswerSpec(kind=kind, dimension=dim, other=other)  # type: ignore[arg-type]
    if re.search(r"^(?:what|how much) (?:does|do|did|will|would) .*\b(?:cost|costs|charge)$", q.strip(" ?.!")):
        return AnswerSpec(kind="money", other=other)  # "what does a bottle of this cost?"
    if re.search(r"\bhow much\b.*\b(cost|costs|price|pay|charge|charges|fare|worth|spend|ticket|admission|fee)\b|\b(price|fare"
                 r"|cost|fee|admission)\b.*\b(of|for|is|does)\b|\bhow much (?:is|are|was|were) (?:a|an|the|one)\b", q):
        return AnswerSpec(kind="money", other=other)
    if re.search(r"\bhow often\b|\bhow frequently\b", q):
        return AnswerSpec(kind="duration", dimension="frequency", other=other)
    if re.search(r"\bhow long (?:does|did|do|will|would|can|could|to|has|have|had|is the (?:wait|trip|flight|ride|drive|"
                 r"journey|walk|hike|tour|film|movie|show|season)|does it take|will it take)\b|\bhow many (?:hours|minutes|"
                 r"days|weeks|months|seconds)\b.*\b(take|last|live|sleep)", q):
        return AnswerSpec(kind="duration", other=other)
    m = re.search(r"\bhow many ([a-z-]+)", q)
    if m:
        return AnswerSpec(kind="number", counted=m.group(1), other=other)
    if re.search(r"\b(?:what|which) year\b|\bin what year\b|\bwhat century\b", q):
        return AnswerSpec(kind="year", other=other)
    if re.search(r"\bwhat time\b|\bat what time\b|\b(?:when|what time) does (?:it|the|this)\b.*\b(open|close|leave|depart|"
                 r"arrive|start|end|run)\b", q):
        return AnswerSpec(kind="time", other=other)
    if re.search(r"\b(?:which|what) day\b", q):
        return AnswerSpec(kind="weekday", other=other)
    if re.search(r"^\s*when\b|\bwhat date\b|\bon what date\b|\bin which month\b|\bwhat month\b", q):
        return AnswerSpec(kind="date", other=other)
    if re.search(r"\bhow much\b", q) and re.search(r"\bweigh", q):
        return AnswerSpec(kind="quantity", dimension="mass", other=other)
    # "how tall ..." opens the question (an embedded "... to measure how tall it is" does not say what is asked)
    m = re.search(r"^(?:[a-z]+ ){0,2}?how (tall|high|long|far|deep|wide|thick|heavy|fast|quickly|hot|cold|warm|old|big|large)\b", q)
    if m:
        dim = next(d for d, pat in _DIMENSION_OF if re.fullmatch(pat, m.group(1)))
        return AnswerSpec(kind="quantity", dimension=dim, other=other)
    m = re.search(r"\bhow much ([a-z-]+) (?:does|do|did|is|are|was|were|has|have|had|can|will|would)\b", q)
    if m and m.group(1) not in ("is", "are", "was", "were", "does", "do", "did", "money"):
        return AnswerSpec(kind="number", counted=m.group(1), other=other)  # "how much fat does it have": fat
    if re.search(r"\bhow much\b", q):
        return AnswerSpec(kind="number", other=other)
    if noun and re.fullmatch(_PERSON_NOUNS, noun):
        return AnswerSpec(kind="person", other=other)
    if noun and re.fullmatch(_PLACE_NOUNS, noun):
        return AnswerSpec(kind="place", noun=noun, other=other)
    if noun and re.fullmatch(_ORG_NOUNS, noun):  # "which coffee shop ...": the name of one
        return AnswerSpec(kind="name", noun=noun, other=other)
    if re.search(r"^\s*where\b|\bwhere (?:is|are|was|were|does|do|did|can)\b|\b(?:which|what|in which|in what) (?:(?:is|was|"
                 r"are) the )?(?:" + _PLACE_NOUNS + r")\b", q):
        place = re.search(r"\b(" + _PLACE_NOUNS + r")\b", q)
        return AnswerSpec(kind="place", noun=place.group(1) if place else None, other=other)
    if re.search(r"^\s*(?:who|whom|whose)\b|\bby whom\b|\b(?:which|what) (?:" + _PERSON_NOUNS + r")\b", q):
        return AnswerSpec(kind="person", other=other)
    if re.search(r"\b(?:which|what) (?:" + _ORG_NOUNS + r")\b", q) or re.search(r"\bwhat is the name\b", q):
        org = re.search(r"\b(" + _ORG_NOUNS + r")\b", q)
        return AnswerSpec(kind="name", noun=org.group(1) if org else None, other=other)
    return AnswerSpec(kind="text", noun=noun, other=other)


def expected_type(question: str) -> str | None:
    """The expected answer kind as a string, None for free text (kept for older callers)."""
    k = expected_answer(question).kind
    return None if k == "text" else k


def matches_type(answer: str, kind: str | None, *, cased: bool = True) -> bool:
    """`matches` with a kind name (kept for older callers)."""
    return matches(answer, AnswerSpec(kind=kind or "text"), cased=cased)  # type: ignore[arg-type]


def _has_name(text: str) -> bool:
    return bool(name_phrases(text))


def matches(text: str, spec: AnswerSpec | str | None, *, cased: bool = True) -> bool:
    """Can `text` hold an answer of this kind? `cased=False` for lower-cased KG values (names cannot be told by case)."""
    a = text or ""
    if isinstance(spec, str) or spec is None:
        spec = AnswerSpec(kind=spec or "text")  # type: ignore[arg-type]
    k = spec.kind
    if k in ("text", "yes_no"):
        return bool(a.strip())
    if k == "number":
        return bool(NUMBER.search(a))
    if k == "quantity":
        qs = quantities(a)
        if spec.dimension == "age":
            return any(q.unit == "year" for q in qs) or bool(YEAR.search(a))
        if spec.dimension in (None, "area"):
            return bool(qs)
        return any(q.dimension == spec.dimension for q in qs)
    if k == "money":
        return any(q.dimension == "money" for q in quantities(a)) or bool(re.search(r"\bfree\b", a, re.I))
    if k == "duration":
        if spec.dimension == "frequency":
            return bool(_FREQUENCY.search(a))
        return any(q.dimension == "time" for q in quantities(a)) or bool(_FREQUENCY.search(a))
    if k == "year":
        return bool(YEAR.search(a))
    if k == "date":
        return bool(YEAR.search(a) or MONTH.search(a) or WEEKDAY.search(a) or SEASON.search(a) or TIME.search(a)
                    or _TEMPORAL.search(a))
    if k == "time":
        return bool(TIME.search(a))
    if k == "weekday":
        return bool(WEEKDAY.search(a))
    # person, place, name: letters, not only a number or a date; a proper name when case tells
    if not re.search(r"[A-Za-z]", a) or (k == "person" and YEAR.fullmatch(a.strip())):
        return False
    if re.fullmatch(r"\W*[\d.,]+\W*", a):
        return False
    return _has_name(a) if cased else True


# ---- answer spans -----------------------------------------------------------------------------------

# words before a name that say it is where something is ("in Bergen", "overlooks Kunming Lake", "native to Mexico")
_LOCATIVE = frozenset("""in at from near on to into onto overlooks overlooking across of towards toward outside inside around
throughout within via between beside along""".split())
_PLACE_NAME = re.compile(r"\b(?:City|Town|Village|County|State|Province|Island|Islands|Lake|River|Mountain|Mount|Bay|Park|Street|"
                         r"Road|Avenue|Square|Harbou?r|Port|Valley|Coast|Desert|Forest|Sea|Ocean|Point|Hill|Peninsula|Republic|"
                         r"Kingdom|Beach|Falls|Canyon|District|Airport|Station)\b")


def _near(pos: int, anchors: list[int]) -> float:
    return min((abs(pos - a) for a in anchors), default=200)


def _anchors(sentence: str, question_words: set[str]) -> list[int]:
    from text.nlp import stem

    return [m.start() for m in re.finditer(r"[A-Za-z0-9][\w-]*", sentence)
            if m.group(0).lower() in question_words or stem(m.group(0)) in question_words]


def answer_span(sentence: str, spec: AnswerSpec, question: str = "", avoid: list[str] | None = None) -> str | None:
    """The short answer inside `sentence` for a question of this kind; None when the sentence holds none.

    `avoid`: names that cannot be the answer (the entity asked about, the question's own names). Free-text kinds
    fall back to the clause that best overlaps the question."""
    from text.nlp import clauses, content_words, normalize, stem, words

    avoid_norm = [normalize(a) for a in (avoid or []) if a]
    avoided = {w for a in avoid_norm for w in a.split()}  # the entity's own name says nothing about where the answer is
    qwords = {w for w in content_words(question) if w not in avoided} | {stem(w) for w in content_words(question)
                                                                          if w not in avoided}
    anchors = _anchors(sentence, qwords)
    k = spec.kind
    if k in ("number", "quantity", "money", "duration"):
        qs = quantities(sentence)
        if k == "money":
            qs = [q for q in qs if q.dimension == "money"]
        elif k == "quantity" and spec.dimension not in (None, "area", "age"):
            qs = [q for q in qs if q.dimension == spec.dimension]
        elif k == "quantity" and spec.dimension == "age":
            qs = [q for q in qs if q.unit == "year"] or []
        elif k == "duration":
            if spec.dimension == "frequency":
                m = _FREQUENCY.search(sentence)
                if m:
                    trailing = re.match(r"(?:(?!\sand\s)[^,;.]){0,30}", sentence[m.end():])
                    tail = trailing.group(0) if trailing else ""
                    return (sentence[m.start():m.end()] + tail).strip()
                return None
            qs = [q for q in qs if q.dimension == "time"]
        else:  # a count: the number closest to the counted noun, spanning to it ("nine Merlin engines")
            qs = [q for q in qs if not YEAR.fullmatch(q.text.strip()) or spec.counted in ("years",)]
        if not qs:
            return None
        if spec.counted:  # the number must count the noun asked about: "nine Merlin engines", "41 meters"
            unit = unit_of(spec.counted)
            for q in qs:
                if unit and q.unit == unit:
                    return q.text
                m = re.match(r"((?:\s+[\w-]+){0,3}?\s+)(" + re.escape(stem(spec.counted)) + r"\w*)",
                             sentence[q.end:q.end + 60], re.I)
                if m:
                    return sentence[q.start:q.end + m.end()].strip()
            return None
        q = min(qs, key=lambda q: _near(q.start, anchors))
        text = q.text
        if k == "number" and q.unit is None:
            nxt = re.match(r"\s+([a-z][\w-]*)", sentence[q.end:])
            if nxt and nxt.group(1) not in ("and", "or", "to", "of", "in", "on", "at", "is", "was"):
                text = f"{text} {nxt.group(1)}"
        return text.strip()
    if k == "year":
        ys = [m for m in YEAR.finditer(sentence)]
        if not ys:
            return None
        return min(ys, key=lambda m: _near(m.start(), anchors)).group(0)
    if k == "date":
        m = re.search(r"\b(?:" + _MONTH_ALT + r")\s+\d{1,2}(?:st|nd|rd|th)?,?\s+\d{3,4}|\b\d{1,2}\s+(?:" + _MONTH_ALT
                      + r")\s+\d{3,4}", sentence, re.I)
        if m:
            return m.group(0)
        for pat in (TIME, YEAR, MONTH, WEEKDAY):
            ms = list(pat.finditer(sentence))
            if ms:
                return min(ms, key=lambda x: _near(x.start(), anchors)).group(0)
        m = re.search(r"\b(?:after|before|during|until|since|in|every)\s+(?:the\s+)?[^,;.]{2,40}", sentence, re.I)
        return m.group(0).strip() if m and (SEASON.search(m.group(0)) or _TEMPORAL.match(m.group(0))) else None
    if k == "time":
        ms = list(TIME.finditer(sentence))
        return min(ms, key=lambda x: _near(x.start(), anchors)).group(0) if ms else None
    if k == "weekday":
        ms = list(WEEKDAY.finditer(sentence))
        return min(ms, key=lambda x: _near(x.start(), anchors)).group(1) if ms else None
    if spec.other:  # "what other flavor ...": the items a list names, less the ones already known
        m = re.search(r"\b(?:include|includes|including|are|come in|comes in|such as)\s+([^.;]+)", sentence, re.I)
        if m:
            known = {w for a in avoid_norm for w in a.split()}
            items = [i.strip() for i in re.split(r",\s*(?:and\s+|or\s+)?|\s+(?:and|or)\s+", m.group(1)) if i.strip()]
            rest = [i for i in items if not set(normalize(i).split()) <= known]
            if 1 <= len(rest) < len(items):
                return ", ".join(rest)
        return None
    qstems = {stem(w) for w in content_words(question)} | ({stem(spec.noun)} if spec.noun else set())
    if k in ("person", "place", "name") or (k == "text" and spec.noun):
        cands = []
        for p in name_phrases(sentence):
            pn = normalize(p.text)
            if not pn or any(a and (pn in a or a in pn or set(pn.split()) <= set(a.split())) for a in avoid_norm):
                continue  # the entity asked about is not the answer
            if {stem(w) for w in words(p.text)} <= qstems:
                continue  # only repeats the question (or names the kind of answer wanted)
            # the comma-delimited stretch the name sits in should be about what is asked
            lo = max(sentence.rfind(",", 0, p.start), sentence.rfind(";", 0, p.start)) + 1
            hi = min([i for i in (sentence.find(",", p.start), sentence.find(";", p.start)) if i >= 0] or [len(sentence)])
            score = float(len({stem(w) for w in content_words(sentence[lo:hi])} & qwords))
            score += 0.3 * (len(p.text.split()) - 1) - _near(p.start, anchors) / 200.0
            if k == "place":
                if p.after in _LOCATIVE or stem(spec.noun or "-") in {stem(w) for w in words(p.text)}:
                    score += 1 if p.after == "of" else 2  # "the capital of X" is weaker than "in X"
                elif not _PLACE_NAME.search(p.text):
                    continue  # a name in subject or object position is not where something is
            if k == "person" and p.after in ("by", "named", "was", "is"):
                score += 1.5
            if k == "person" and len(p.text.split()) >= 2:
                score += 0.5
            if spec.noun and (stem(spec.noun) == stem((words(p.text) or [""])[-1]) or re.search(
                    r"\b" + re.escape(spec.noun) + r"\w*\s+(?:the\s+|of\s+)?$", sentence[: p.start], re.I)):
                score += 3
            text = p.text
            if k == "person":  # "created by Larry Shepp and Benjamin F. Logan": both people
                more = re.match(r"\s*(?:,\s*|,?\s+and\s+)([A-Z][\w'.-]*(?:\s+[A-Z][\w'.-]*){0,3})", sentence[p.end:])
                if more and len(more.group(1).split()) >= 2:
                    text = sentence[p.start: p.end + more.end()]
            if k == "text" and spec.noun:  # "the 2012 Glenford Prize for crime fiction": the whole noun phrase
                left = re.search(r"(?:\b(?:the|a|an)\s+)?(?:\d{4}\s+)?$", sentence[: p.start])
                right = re.match(r"\s+(?:for|of)\s+(?:[a-z][\w-]*\s*){1,4}(?=[,.;)]|$)", sentence[p.end:])
                text = (sentence[left.start(): p.start] if left else "") + text + (right.group(0).rstrip() if right else "")
            cands.append((score, text.strip()))
        if cands:
            cands.sort(reverse=True)
            if len(cands) == 1 or cands[0][0] - cands[1][0] >= 0.5:
                return cands[0][1]
            if k in ("person", "place", "name"):
                return None  # several names and nothing tells which: the answer is not certain
        if k in ("person", "place", "name"):
            return None
    # free text: "... is called X", else the clause that best overlaps the question
    m = re.search(r"\b(?:is|are|was|were)\s+(?:called|known as|named|termed)\s+([^,;.]+)", sentence, re.I)
    if m:
        return m.group(1).strip()
    best, best_score = None, -1.0
    for c in clauses(sentence):
        cw = {stem(w) for w in content_words(c)}
        score = len(cw & qwords) - 0.01 * len(c.split())
        if score > best_score:
            best, best_score = c, score
    return best
