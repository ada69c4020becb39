"""Question shapes (rule-based): comparisons ("which is taller, this or X?"), multi-hop questions ("the cafe that
served this drink") and unit conversions ("how many feet is that?") taken apart. Rules describe sentence shapes,
not the wording of any benchmark's questions."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel

from glasses_rag.policies.rules.lexicon import WORDS
from glasses_rag.text import nlp
from glasses_rag.text.units import unit_of

# ---- comparison ----------------------------------------------------------------------------------


class Comparison(BaseModel):
    """A comparison of two things along one dimension; `sides` are the phrases compared, as asked."""

    relation: Literal["more", "less", "before_after", "first"]
    dimension: str  # length, mass, speed, temperature, year, number
    word: str  # the comparative as asked ("taller", "before or after")
    sides: list[str]
    events: list[str] = []  # before/after: the verb of each side ("born", "launched")
    yes_no: bool = False  # "is A taller than B?": answer yes/no


_MORE = {w: dim for dim, ws in WORDS.comparatives_more.items() for w in ws}
_LESS = {w: dim for dim, ws in WORDS.comparatives_less.items() for w in ws}
_COMPARATIVE = "|".join(sorted(list(_MORE) + list(_LESS), key=len, reverse=True))


def parse_comparison(question: str) -> Comparison | None:
    q = " ".join(nlp.expand_contractions(question).lower().strip(" ?.!").split())
    m = re.search(
        r"\b(?:was|were|is|are|did) (.+?) (born|built|founded|launched|made|released|published|created|"
        r"opened|established|completed|discovered|invented|formed|written|first \w+|\w+ed) before or after "
        r"(.+?)(?: (?:was|were|is|are|had been|did)(?: first)? (\w+))?$",
        q,
    )
    if m:
        side_b, event_b = m.group(3), m.group(4)
        if event_b is None:  # "... before or after the station opened": the last word is the other event
            last = re.search(r"^(.+) (\w+(?:ed|en)|born|built|made|began|began|won|ran|sank|rose)$", side_b)
            side_b, event_b = (last.group(1), last.group(2)) if last else (side_b, m.group(2))
        return Comparison(
            relation="before_after",
            dimension="year",
            word="before or after",
            sides=[m.group(1), side_b],
            events=[m.group(2), event_b],
        )
    m = re.search(
        r"\b(?:which|what|who) (?:came|was|were|happened|is|one (?:came|was)) (?:first|earlier|older)[,:]? "
        r"(?:the )?(.+?),? or (.+)$",
        q,
    )
    if m:
        return Comparison(relation="first", dimension="year", word="first", sides=[m.group(1), m.group(2)])
    m = re.search(
        rf"\b(?:which|what|who)(?: one)? (?:is|was|are|were|stands|runs|weighs)(?: the)? ({_COMPARATIVE}|more \w+"
        rf"|less \w+)[,:]? (?:the )?(.+?),? or (?:the )?(.+)$",
        q,
    )
    if m:
        return _comparison(m.group(1), [m.group(2), m.group(3)], yes_no=False)
    m = re.search(rf"^(?:is|was|are|were) (.+?) ({_COMPARATIVE}) than (.+)$", q)
    if m:
        return _comparison(m.group(2), [m.group(1), m.group(3)], yes_no=True)
    return None


def _comparison(word: str, sides: list[str], yes_no: bool) -> Comparison | None:
    w = word.split()[-1] if word.startswith(("more ", "less ")) else word
    dim = _MORE.get(w) or _LESS.get(w)
    if dim is None:
        return None
    less = w in _LESS
    if dim.startswith("year"):
        # older = the earlier year: "more" on the year axis means the smaller year
        less = dim == "year_old"
        dim = "year"
    return Comparison(relation="less" if less else "more", dimension=dim, word=word, sides=sides, yes_no=yes_no)


# ---- multi-hop: "the <noun> that <clause about this>" ---------------------------------------------


class Bridge(BaseModel):
    """A multi-hop question: find the bridge entity (`noun` described by `clause`), then ask `hop2` about it."""

    noun: str  # head noun of the bridge ("cafe")
    clause: str  # what singles it out ("served this drink")
    hop1: str  # a question whose answer is the bridge ("which cafe served this drink?")
    hop2: str  # the question with the bridge phrase as "{bridge}"


_REF = r"(?:this|these|that|those|it|its|he|she|they|his|her|their)"
_AUX = r"(?:is|are|was|were|has|have|had|did|does|do|will|would|can|could)"
_REL = re.compile(
    r"\bthe ((?:[a-z0-9-]+ ){0,2}[a-z-]+) (that|which|who|where|whose|when|in which|on which|from which) "
)
_REDUCED = re.compile(rf"\bthe ((?:[a-z0-9-]+ ){{0,2}}[a-z-]+) (?={_REF}\b)")
# a participle clause: "the ship named after her", "the satellite launched by this rocket in 2015"
_PARTICIPLE = re.compile(
    rf"\bthe ((?:[a-z0-9-]+ ){{0,2}}[a-z-]+) (?=(?:[a-z]{{3,}}ed|built|made|named|known|found|given|taken|"
    rf"written|drawn|grown|held|run|sold|worn|shown|seen|won|led|kept|paid|sent|flown|chosen|driven|"
    rf"begun|bought|brought|caught|thrown) (?:by|after|for|in|on|from|at|with|of|to|near|into|about) "
    rf"(?:[a-z-]+ ){{0,2}}{_REF}\b)"
)


def parse_bridge(question: str) -> Bridge | None:
    """`the <noun> (that|which|where ...)? <clause mentioning this/it>` -> hop 1 and hop 2 questions."""
    q = " ".join(nlp.expand_contractions(question).lower().strip(" ?").split())
    for pat in (_REL, _REDUCED, _PARTICIPLE):
        for m in pat.finditer(q):
            noun_words = m.group(1).split()
            if noun_words[-1] in nlp.STOPWORDS | nlp.PREPOSITIONS or noun_words[0] in (
                "first",
                "last",
                "only",
                "same",
                "one",
            ):
                continue  # "the first person to ...": not a bridge; "the project behind this logo": not a clause
            end = _clause_end(q, m.end())
            if end is None:
                continue
            clause = q[m.end() : end].strip()
            if not re.search(rf"\b{_REF}\b", clause) or not nlp.content_words(clause):
                continue
            noun = noun_words[-1]
            if pat is _PARTICIPLE:  # "which ship was named after her?"
                clause_q = f"{'were' if noun.endswith('s') and not noun.endswith('ss') else 'was'} {clause}"
            else:
                clause_q = clause
            hop1 = f"which {m.group(1)} {clause_q}?"
            hop2 = (q[: m.start()] + "{bridge}" + q[end:]).strip() + "?"
            return Bridge(noun=noun, clause=clause, hop1=hop1, hop2=hop2)
    return None


def _clause_end(q: str, start: int) -> int | None:
    """End of a relative clause that starts at `start`: through the referring phrase, its verb group, a dated
    phrase ("in 1999") and a stranded preposition ("the palace this tower stands in")."""
    toks = [(m.group(0), m.start(), m.end()) for m in re.finditer(r"[a-z0-9'-]+", q[start:])]
    toks = [(w, s + start, e + start) for w, s, e in toks]
    i = next((k for k, (w, _, _) in enumerate(toks) if re.fullmatch(_REF, w)), None)
    if i is None or i > 4:
        return None
    # the referring phrase: "this" + up to three noun-phrase words, or a bare pronoun
    j = i
    if toks[i][0] in ("this", "these", "that", "those", "its", "his", "her", "their"):
        while (
            j + 1 < len(toks)
            and j - i < 3
            and toks[j + 1][0] not in nlp.NOUN_PHRASE_STOP
            and not re.search(r"[a-z]{3,}(?<!e)ed$", toks[j + 1][0])
            and not (j > i and re.search(r"[^su]s$", toks[j + 1][0]))
        ):
            j += 1
    if i > 0:  # the reference was the object ("that served this drink"): the clause ends with it
        end = j
    else:  # the reference is the subject: its verb group follows ("she commanded", "these coins were found")
        end = j
        if end + 1 < len(toks) and re.fullmatch(_AUX, toks[end + 1][0]):
            end += 1
        if end + 1 < len(toks) and toks[end + 1][0] not in nlp.STOPWORDS:
            end += 1
    # "in 1999", "in february 2015": a dated phrase belongs to the clause
    if (
        end + 2 < len(toks)
        and toks[end + 1][0] in ("in", "on", "during", "since")
        and (
            re.fullmatch(r"\d{3,4}", toks[end + 2][0])
            or (end + 3 < len(toks) and re.fullmatch(r"\d{3,4}", toks[end + 3][0]))
        )
    ):
        end += 2 if re.fullmatch(r"\d{3,4}", toks[end + 2][0]) else 3
    # a stranded preposition: "stands in" followed by the main clause's verb
    if (
        end + 2 < len(toks)
        and toks[end + 1][0] in nlp.PREPOSITIONS
        and toks[end + 2][0] not in nlp.STOPWORDS | {"a", "an", "the"}
        and not re.fullmatch(r"\d+", toks[end + 2][0])
    ):
        end += 1
    return toks[end][2]


# ---- unit conversion ------------------------------------------------------------------------------

_UNIT_WORDS = r"[a-z]+(?: [a-z]+)?(?:/[a-z]+)?"
_CONVERT = [
    re.compile(
        rf"\bhow many ({_UNIT_WORDS}?)(?: tall| long| high| wide| deep| heavy| far| away| across)? (?:is|are|was|were|"
        rf"would be|would that be) (?:that|it|this|they|those|these)\b"
    ),
    re.compile(
        rf"\bhow many ({_UNIT_WORDS}?) (?:does|do|did) (?:that|it|this|they|those|these)"
        rf"(?: [a-z]+)? (?:weigh|measure)\b"
    ),
    re.compile(
        rf"\b(?:what|how much|how far|how long|how tall|how heavy) (?:is|are|was|would) "
        rf"(?:that|it|this|they|those|these)"
        rf"(?: be)? in ({_UNIT_WORDS})\s*\??$"
    ),
    re.compile(rf"\bconvert (?:that|it|this|the [a-z]+) (?:to|into) ({_UNIT_WORDS})\s*\??$"),
    re.compile(
        rf"\bhow (?:tall|high|long|far|deep|wide|heavy|big|fast) (?:is|are|was|were) (?:that|it|this|they|these|those)"
        rf"(?: [a-z]+){{0,2}} in ({_UNIT_WORDS})\s*\??$"
    ),
]


def conversion_target(question: str) -> str | None:
    """The canonical unit a conversion question asks for ("how many feet is that?" -> "ft"), else None."""
    q = " ".join(nlp.expand_contractions(question).lower().split())
    for pat in _CONVERT:
        m = pat.search(q)
        unit = m and (unit_of(m.group(1).strip()) or unit_of(m.group(1).split()[0]))
        if unit:
            return unit
    return None
