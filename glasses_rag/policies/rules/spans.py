"""Answer spans (rule-based): the short answer inside a sentence for a question of some kind ("nine Merlin engines",
"Montreal, Quebec, Canada"), never the whole sentence when a span can be cut."""

from __future__ import annotations

import re

from glasses_rag.policies.rules.dates import (
    DAY_OF_MONTH,
    FREQUENCY,
    FULL_DATE,
    MONTH,
    SEASON,
    TEMPORAL,
    TIME,
    WEEKDAY,
    YEAR,
)
from glasses_rag.policies.rules.names import NamePhrase, name_phrases
from glasses_rag.policies.rules.spec import ExpectedAnswer
from glasses_rag.text.sentences import clauses
from glasses_rag.text.units import DEFAULT, Quantity, UnitTable
from glasses_rag.text.words import content_words, normalize, stem, words

# words before a name that say it is where something is ("in Bergen", "overlooks Kunming Lake", "native to Mexico")
_LOCATIVE = frozenset(
    """in at from near on to into onto overlooks overlooking across of towards toward outside inside around
throughout within via between beside along""".split()
)
_ASKS_NAME = re.compile(r"\b(?:called|named)\s*\??$", re.I)
_PLACE_NAME = re.compile(
    r"\b(?:City|Town|Village|County|State|Province|Island|Islands|Lake|River|Mountain|Mount|Bay|Park|Street|"
    r"Road|Avenue|Square|Harbou?r|Port|Valley|Coast|Desert|Forest|Sea|Ocean|Point|Hill|Peninsula|Republic|"
    r"Kingdom|Beach|Falls|Canyon|District|Airport|Station)\b"
)


class _Context:
    """What a span is cut for: the sentence, the question's words (less the names to avoid) and where they stand."""

    def __init__(self, sentence: str, spec: ExpectedAnswer, question: str, avoid: list[str] | None, units: UnitTable):
        self.sentence, self.spec, self.units = sentence, spec, units
        self.avoid = [normalize(a) for a in (avoid or []) if a]
        avoided = {
            w for a in self.avoid for w in a.split()
        }  # the entity's own name says nothing of where the answer is
        cw = content_words(question)
        self.qwords = {w for w in cw if w not in avoided} | {stem(w) for w in cw if w not in avoided}
        self.qstems = {stem(w) for w in cw} | ({stem(spec.noun)} if spec.noun else set())
        self.anchors = [
            m.start()
            for m in re.finditer(r"[A-Za-z0-9][\w-]*", sentence)
            if m.group(0).lower() in self.qwords or stem(m.group(0)) in self.qwords
        ]

    def near(self, pos: int) -> float:
        return min((abs(pos - a) for a in self.anchors), default=200)

    def nearest(self, matches: list[re.Match]) -> re.Match | None:
        return min(matches, key=lambda x: self.near(x.start())) if matches else None


# ---- numbers ------------------------------------------------------------------------------------------


def _typed_quantities(c: _Context) -> list[Quantity]:
    spec, qs = c.spec, c.units.quantities(c.sentence)
    if spec.kind == "money":
        return [q for q in qs if q.dimension == "money"]
    if spec.kind == "quantity" and spec.dimension == "age":
        return [q for q in qs if q.unit == "year"]
    if spec.kind == "quantity" and spec.dimension not in (None, "area"):
        return [q for q in qs if q.dimension == spec.dimension]
    if spec.kind == "duration":
        return [q for q in qs if q.dimension == "time"]
    # a count (or a quantity of any dimension): a year counts nothing, unless years are counted
    return [q for q in qs if not YEAR.fullmatch(q.text.strip()) or spec.counted in ("years",)]


def _counted_span(c: _Context, qs: list[Quantity]) -> str | None:
    """The number must count the noun asked about: "nine Merlin engines", "41 meters"."""
    counted = c.spec.counted or ""
    unit = c.units.unit_of(counted)
    for q in qs:
        if unit and q.unit == unit:
            return q.text
        m = re.match(
            r"((?:\s+[\w-]+){0,3}?\s+)(" + re.escape(stem(counted)) + r"\w*)", c.sentence[q.end : q.end + 60], re.I
        )
        if m:
            return c.sentence[q.start : q.end + m.end()].strip()
    return None


def _frequency_span(c: _Context) -> str | None:
    m = FREQUENCY.search(c.sentence)
    if not m:
        return None
    trailing = re.match(r"(?:(?!\sand\s)[^,;.]){0,30}", c.sentence[m.end() :])
    return (c.sentence[m.start() : m.end()] + (trailing.group(0) if trailing else "")).strip()


def _number_span(c: _Context) -> str | None:
    if c.spec.kind == "duration" and c.spec.dimension == "frequency":
        return _frequency_span(c)
    qs = _typed_quantities(c)
    if not qs:
        return None
    if c.spec.counted:
        return _counted_span(c, qs)
    q = min(qs, key=lambda q: c.near(q.start))
    text = q.text
    if c.spec.kind == "number" and q.unit is None:
        nxt = re.match(r"\s+([a-z][\w-]*)", c.sentence[q.end :])
        if nxt and nxt.group(1) not in ("and", "or", "to", "of", "in", "on", "at", "is", "was"):
            text = f"{text} {nxt.group(1)}"
    return text.strip()


# ---- dates ----------------------------------------------------------------------------------------------


def _date_span(c: _Context) -> str | None:
    m = FULL_DATE.search(c.sentence)
    if m:
        return m.group(0)
    if c.spec.dimension == "day":  # "on what date": a calendar day
        best = c.nearest(list(DAY_OF_MONTH.finditer(c.sentence)))
        return best.group(0) if best else None
    for pat in (TIME, YEAR, MONTH, WEEKDAY):
        best = c.nearest(list(pat.finditer(c.sentence)))
        if best:
            return best.group(0)
    m = re.search(r"\b(?:after|before|during|until|since|in|every)\s+(?:the\s+)?[^,;.]{2,40}", c.sentence, re.I)
    return m.group(0).strip() if m and (SEASON.search(m.group(0)) or TEMPORAL.match(m.group(0))) else None


def _calendar_span(c: _Context) -> str | None:
    k = c.spec.kind
    if k == "date":
        return _date_span(c)
    pattern = {"year": YEAR, "time": TIME, "weekday": WEEKDAY}[k]
    best = c.nearest(list(pattern.finditer(c.sentence)))
    if best is None:
        return None
    return best.group(1) if k == "weekday" else best.group(0)


# ---- lists, names, free text -------------------------------------------------------------------------------


def _other_items_span(c: _Context) -> str | None:
    """ "what other flavor ...": the items a list names, less the ones already known."""
    m = re.search(r"\b(?:include|includes|including|are|come in|comes in|such as)\s+([^.;]+)", c.sentence, re.I)
    if not m:
        return None
    known = {w for a in c.avoid for w in a.split()}
    items = [i.strip() for i in re.split(r",\s*(?:and\s+|or\s+)?|\s+(?:and|or)\s+", m.group(1)) if i.strip()]
    rest = [i for i in items if not set(normalize(i).split()) <= known]
    return ", ".join(rest) if 1 <= len(rest) < len(items) else None


def _noun_inside(name: str, noun: str) -> bool:
    """The asked class noun stands inside the name, neither first nor last: it qualifies another head noun."""
    ws = [stem(w) for w in words(name)]
    return stem(noun) in ws[1:-1] and stem(noun) not in (ws[0], ws[-1])


def _name_score(c: _Context, p: NamePhrase) -> float | None:
    """How well a name answers; None when it cannot (it is the entity asked about, it only repeats the question,
    or it is not where something is)."""
    k, spec, s = c.spec.kind, c.spec, c.sentence
    pn = normalize(p.text)
    if not pn or any(a and (pn in a or a in pn or set(pn.split()) <= set(a.split())) for a in c.avoid):
        return None
    if {stem(w) for w in words(p.text)} <= c.qstems:
        return None
    if spec.noun and _noun_inside(p.text, spec.noun):
        return None  # "which car": the "Classic Car Show" is a show, not a car
    # the comma-delimited stretch the name sits in should be about what is asked
    lo = max(s.rfind(",", 0, p.start), s.rfind(";", 0, p.start)) + 1
    hi = min([i for i in (s.find(",", p.start), s.find(";", p.start)) if i >= 0] or [len(s)])
    score = float(len({stem(w) for w in content_words(s[lo:hi])} & c.qwords))
    score += 0.3 * (len(p.text.split()) - 1) - c.near(p.start) / 200.0
    if k == "place":
        if p.after in _LOCATIVE or stem(spec.noun or "-") in {stem(w) for w in words(p.text)}:
            score += 1 if p.after == "of" else 2  # "the capital of X" is weaker than "in X"
        elif not _PLACE_NAME.search(p.text):
            return None  # a name in subject or object position is not where something is
    if k == "person":
        score += (1.5 if p.after in ("by", "named", "was", "is") else 0.0) + (0.5 if len(p.text.split()) >= 2 else 0.0)
    if spec.noun and (
        stem(spec.noun) == stem((words(p.text) or [""])[-1])
        or re.search(r"\b" + re.escape(spec.noun) + r"\w*\s+(?:the\s+|of\s+)?$", s[: p.start], re.I)
    ):
        score += 3
    return score


def _name_text(c: _Context, p: NamePhrase) -> str:
    s, text = c.sentence, p.text
    if c.spec.kind == "person":  # "created by Larry Shepp and Benjamin F. Logan": both people
        more = re.match(r"\s*(?:,\s*|,?\s+and\s+)([A-Z][\w'.-]*(?:\s+[A-Z][\w'.-]*){0,3})", s[p.end :])
        if more and len(more.group(1).split()) >= 2:
            text = s[p.start : p.end + more.end()]
    if c.spec.kind == "text" and c.spec.noun:  # "the 2012 Glenford Prize for crime fiction": the whole noun phrase
        left = re.search(r"(?:\b(?:the|a|an)\s+)?(?:\d{4}\s+)?$", s[: p.start])
        right = re.match(r"\s+(?:for|of)\s+(?:[a-z][\w-]*\s*){1,4}(?=[,.;)]|$)", s[p.end :])
        text = (s[left.start() : p.start] if left else "") + text + (right.group(0).rstrip() if right else "")
    return text.strip()


def _name_span(c: _Context) -> str | None:
    """The one name that answers; None when several could and nothing tells which (for a person, place or name)."""
    cands = []
    for p in name_phrases(c.sentence):
        score = _name_score(c, p)
        if score is not None:
            cands.append((score, _name_text(c, p)))
    if cands:
        cands.sort(reverse=True)
        if len(cands) == 1 or cands[0][0] - cands[1][0] >= 0.5:
            return cands[0][1]
    return None


def _called(c: _Context) -> str | None:
    """ "... is called X"."""
    m = re.search(r"\b(?:is|are|was|were)\s+(?:called|known as|named|termed)\s+([^,;.]+)", c.sentence, re.I)
    return m.group(1).strip() if m else None


def _free_text_span(c: _Context) -> str | None:
    """ "... is called X", else the clause that best overlaps the question."""
    called = _called(c)
    if called:
        return called
    best, best_score = None, -1.0
    for cl in clauses(c.sentence):
        score = len({stem(w) for w in content_words(cl)} & c.qwords) - 0.01 * len(cl.split())
        if score > best_score:
            best, best_score = cl, score
    return best


def answer_span(
    sentence: str, spec: ExpectedAnswer, question: str = "", avoid: list[str] | None = None, units: UnitTable = DEFAULT
) -> str | None:
    """The short answer inside `sentence` for a question of this kind; None when the sentence holds none.

    `avoid`: names that cannot be the answer (the entity asked about, the question's own names). Free-text kinds
    fall back to the clause that best overlaps the question."""
    c = _Context(sentence, spec, question, avoid, units)
    k = spec.kind
    if k in ("number", "quantity", "money", "duration"):
        return _number_span(c)
    if k in ("year", "date", "time", "weekday"):
        return _calendar_span(c)
    if spec.other:
        return _other_items_span(c)
    if k in ("person", "place", "name"):
        return _name_span(c)
    if k == "text" and spec.noun:
        named = _name_span(c)
        if named is not None:
            return named
        if _ASKS_NAME.search(question):  # "what is the sequel called?": a name, not a clause
            return _called(c)
    return _free_text_span(c)
