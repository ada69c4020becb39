"""Question shapes (rule-based, no model): which kind of question this is, and its parts.

`classify` names the question type that picks a row of the planner's plan table (graph/planner/planner_table.yaml):
recognition, attribute (of the pictured entity), web_fact, text_in_image, comparison, multi_hop, aggregation,
follow_up, conversion. `parse_comparison`, `parse_bridge` and `conversion_target` take comparisons, multi-hop
questions and unit conversions apart. Rules describe sentence shapes (a relative clause around "this", "which
is ADJ-er, A or B"), not the wording of any benchmark's questions.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel

from graph.planner.answer_types import PERSON_NOUNS, unit_of
from text import nlp

QuestionType = Literal["recognition", "attribute", "web_fact", "text_in_image", "comparison", "multi_hop",
                       "aggregation", "follow_up", "conversion"]
QUESTION_TYPES: tuple[str, ...] = QuestionType.__args__  # type: ignore[attr-defined]

# ---- canonical form ---------------------------------------------------------------------------------
# One question, many surfaces: politeness and embedding ("could you tell me what ..."), imperatives ("name this
# bird"), egocentric phrasing ("what am I looking at", "the trail I'm on"), embedded word order ("how tall this
# tower is"), the question word left in place ("this book won what prize?", "written by whom?"), a noun phrase
# asked as a question ("tell me the length of this trail"). `canonical` rewrites these shapes into the plain
# direct question every other rule reads; it changes word order and function words only, never content words.

_PEOPLE = (r"person|man|woman|guy|girl|boy|lady|gentleman|people|kid|child|figure|individual|character|player|athlete|"
           r"astronaut|actor|actress|singer|fellow")
_WH = r"(?:what|which|who|whom|whose|where|when|why|how)"
_OPENER = re.compile(
    r"^(?:(?:hey|hi|hello|ok|okay|so|and|also|um|uh|well|now|then|please|excuse me|quick question|one more thing|"
    r"one more question|just curious|out of curiosity)\b[,!.:]?\s+"
    r"|(?:can|could|would|will) you (?:please |kindly )?(?:tell me|say|let me know|figure out|find out|check|explain"
    r"|remind me)\b[,:]?\s*"
    r"|(?:can|could|would|will) you (?:please |kindly )?(?=(?:identify|name|recogni[sz]e|describe)\b)"
    r"|(?:do|does) (?:you|anyone|anybody) (?:happen to )?know\b[,:]?\s*|any idea\b[,:]?\s*"
    r"|i (?:want|would like|need|wanna) to (?:know|find out)\b[,:]?\s*|i (?:wonder|am wondering|am curious)\b(?: about)?[,:]?\s*"
    r"|(?:please )?(?:tell|show|give) me\b[,:]?\s*|let me know\b[,:]?\s*|i need to know\b[,:]?\s*)", re.I)
_TRAILING = re.compile(r"(?:[,\s]+(?:please|thanks|thank you|right now|for me))+$", re.I)
_PERSON_NP = re.compile(rf"\b(?:{_PEOPLE})\b", re.I)
_PERSON_ROLE = re.compile(PERSON_NOUNS + "|" + _PEOPLE + "|owner|operator|builder|maker|designer|founder")
_DET_START = re.compile(r"^(?:the|this|that|these|those|its|his|her|their|my)\b", re.I)
_SUBJECT = r"(?:(?:the|this|that|these|those|my|his|her|its|their|a|an)\b(?: [\w'-]+){0,6}?|it|he|she|they|this|that)"
_COPULA = r"(?:is|are|was|were)"
_EGO = (r"(?:am i|are we|i am|we are)(?: currently| now| standing)? (?:looking at|seeing|viewing|watching|holding|facing|"
        r"pointing (?:at|to)|standing (?:in front of|next to|near|at|on|in)|in front of|on|in|at|visiting|reading|drinking|eating)")
_EGO_WH = re.compile(rf"^({_WH})((?: [a-z-]+){{0,3}}?) {_EGO}(?: (?:right )?(?:now|here))?$", re.I)
_EGO_NP = re.compile(rf"\bthe ((?:[a-z-]+ ){{0,2}}[a-z-]+) (?:that |which )?{_EGO}\b(?: (?:right )?(?:now|here))?", re.I)
_IN_PHOTO_NP = re.compile(r"\bthe ((?:[a-z-]+ ){0,2}[a-z-]+) (?:(?:in|on|from) (?:this|the|my) (?:photo|picture|image|pic|shot|"
                          r"frame|snapshot|scene|view)|(?:shown|pictured|depicted|visible|seen)(?: here)?|in front of (?:me|us)|"
                          r"over there|right here)\b", re.I)
_IN_SITU = re.compile(rf"^(?!{_WH}\b|(?:is|are|was|were|do|does|did|can|could|will|would|has|have|had|should)\b)(.+?),? "
                      rf"((?:(?:by|from|for|with|to|in|on|at|of|into|under|near) )?(?:whom|who|what|where|when|which|how many|"
                      rf"how much)(?: [a-z-]+){{0,3}})$", re.I)
_TOPIC = re.compile(rf"^((?:the|this|that|these|those) [^,]{{1,40}}),\s*({_WH}\b.+)$", re.I)
_PHOTO_WORDS = {"photo", "picture", "image", "pic", "shot", "snapshot", "photograph", "frame", "scene", "view"}
_NUMBER_OF = re.compile(r"^(?:what|which) (?:is|are|was|were) (?:the )?(?:total |approximate |exact |overall |rough )?(?:number|count|"
                        r"amount) of ([a-z-]+)\b", re.I)


def _lower_lead(chunk: str) -> str:
    """"This book" -> "this book" when a chunk moves inside a sentence (names keep their case)."""
    w = chunk.split(" ", 1)
    return " ".join([w[0].lower()] + w[1:]) if w and w[0].lower() in nlp.FUNCTION_WORDS else chunk


def _invert_embedded(q: str) -> str:
    """"how tall this tower is" -> "how tall is this tower"; "where these coins were found" -> "where were ..."."""
    m = re.match(rf"^((?:(?:by|from|for|with|to|in|on|at|of) )?{_WH}(?: (?!(?:the|this|that|these|those|it|he|she|they|my|his|"
                 rf"her|its|their|a|an|of|in|on|at|for|from|to|with|by)\b)[a-z-]+){{0,2}}) ({_SUBJECT}) ({_COPULA})\b(.*)$",
                 q, re.I)
    if not m or re.match(rf"^{_COPULA}\b|^(?:do|does|did|can|could|will|would|has|have|had)\b", m.group(2), re.I):
        return q
    if re.match(r"^\s+(?:the|this|that|these|those|it|he|she|they|a|an|my|his|her|its|their)\b", m.group(4), re.I):
        return q  # "on which day of the week is this shop closed": the copula already precedes the subject
    head_words = m.group(1).split()
    if head_words[-1].lower() in nlp.COPULAS | nlp.AUXILIARIES:
        return q  # already a direct question ("what is the name ...")
    return f"{m.group(1)} {m.group(3)} {_lower_lead(m.group(2))}{m.group(4)}"


def _has_verb(q: str) -> bool:
    """A finite verb or a question word: the text is a clause, not a bare noun phrase."""
    toks = nlp.words(q)
    return bool(re.search(rf"\b(?:{_COPULA}|do|does|did|has|have|had|can|could|will|would|{_WH[3:-1]})\b|[a-z]{{3,}}ed\b", q, re.I)) or any(
        w in nlp.PHRASE_VERBS for w in toks) or any(re.search(r"[^su]s$", w) and nxt in ("this", "that", "these", "those", "the", "it")
                                                     for w, nxt in zip(toks, toks[1:]))


def canonical(question: str) -> str:
    """The question in plain direct form (see above); the question itself when no shape applies."""
    raw = " ".join((question or "").split())
    q = nlp.expand_contractions(raw).strip().rstrip(" ?.!")
    if not q:
        return raw
    imperative = False
    for _ in range(4):  # "hey, could you tell me ...", "so do you know ..."
        m = _OPENER.match(q)
        if not m or not m.group(0):
            break
        imperative |= bool(re.search(r"\b(?:tell|show|give|let) me\b", m.group(0), re.I))
        q = q[m.end():].lstrip(" ,")
    q = _TRAILING.sub("", q).strip(" ,")
    m = _TOPIC.match(q)  # "this rocket, who makes it?" -> "who makes this rocket?"
    if m:
        q = re.sub(r"\b(it|them|they)\b", _lower_lead(m.group(1)), m.group(2), count=1, flags=re.I)
    m = re.match(r"^(?:what|how) about\s+(.+)$", q, re.I)
    if m:  # "what about its height?" -> "what is its height?"
        q = m.group(1)
        imperative = True
    if (_DET_START.match(q) and len(q.split()) <= 4 and not re.search(rf"\b{_WH}\b", q, re.I)
            and _PERSON_ROLE.fullmatch(q.split()[-1].lower())):
        q = "who is " + q  # "and the architect?" -> "who is the architect?"
    m = re.match(r"^(?:identify|recogni[sz]e|name|describe)\s+(?!all\b|every\b|three\b|two\b|some\b)(.+)$", q, re.I)
    if m:  # "name this bird" -> "what is this bird"
        q = f"{'who' if _PERSON_NP.search(m.group(1)) else 'what'} is {m.group(1)}"
    elif re.match(r"^about\s+", q, re.I):  # "tell me about this building"
        q = "what is " + q.split(None, 1)[1]
    elif _DET_START.match(q) and (imperative or not _has_verb(q)):
        # "tell me the length of this trail", "its height?": a noun phrase asked as a question
        q = "what is " + q
    elif not _has_verb(q) and re.match(r"^[a-z][a-z-]*(?: [a-z][a-z-]*){0,2} (?:of|at|in|on|for|from) (?:this|that|these|those|"
                                       r"the|its|it)\b", q, re.I):
        w = q.split()
        if re.fullmatch(r"[A-Z][a-z-]+", w[0]) and not re.match(r"[A-Z0-9]", w[1]):
            w[0] = w[0].lower()  # capitalised only because it opens the sentence ("Bus route at this stop?")
        q = "what is the " + " ".join(w)  # "bus route at this stop?", "calories in this drink?"
    m = _IN_SITU.match(q)
    if m and not re.search(rf"\b{_WH}\b", m.group(1), re.I):  # "this book won what prize" -> "what prize this book won"
        q = f"{m.group(2)} {_lower_lead(m.group(1))}"
    m = _EGO_WH.match(q)
    if m:  # "which trail am I on" -> "which trail is this"
        q = f"{m.group(1)}{m.group(2)} is this"
    q = _EGO_NP.sub(lambda m: f"this {m.group(1)}", q)  # "the trail I am on" -> "this trail"
    q = _IN_PHOTO_NP.sub(lambda m: f"this {m.group(1)}" if m.group(1).lower() not in _PHOTO_WORDS else m.group(0), q)
    q = _invert_embedded(q)
    # "what animal could this be" -> "what animal is this": a guess asked for is still "which one is it"
    q = re.sub(r"^((?:what|which|who)(?: [a-z-]+){0,3}?) (?:could|might|would|may|can) (this|that|these|those|it)((?: [a-z-]+){0,2}) be$",
               lambda m: f"{m.group(1)} {'are' if m.group(2).lower() in ('these', 'those') else 'is'} {m.group(2)}{m.group(3)}",
               q, flags=re.I)
    m = _NUMBER_OF.match(q)
    if m:  # "what is the number of engines on ..." -> "how many engines on ..."
        q = f"how many {m.group(1)}{q[m.end():]}"
    q = re.sub(r"\b(before|after) (.+?),? or (after|before)$", lambda m: f"{m.group(1)} or {m.group(3)} {m.group(2)}"
               if m.group(1).lower() != m.group(3).lower() else m.group(0), q, flags=re.I)
    q = re.sub(r"\s+", " ", q).strip()
    return q + "?" if q else raw


# ---- recognition ----------------------------------------------------------------------------------

_POLITE = re.compile(
    r"^\s*(?:(?:hey|hi|hello|ok|okay|so|please|excuse me|quick question)[,!.\s]+)*"
    r"(?:(?:can|could|would|will) you (?:please )?(?=identify|recognize|recognise|name)"
    r"|(?:can|could|would|will) you (?:please )?(?:tell me|say|let me know|figure out)"
    r"|(?:do|does) (?:you|anyone) know|tell me|i (?:want|would like|'d like) to know|i wonder|i am wondering"
    r"|i'm wondering|any idea|help me (?:identify|figure out)|please (?:tell me|identify|name))\s*[,:]?\s*", re.I)
_LOCATIVE = re.compile(
    r"\s*\b(?:in|on|from|within) (?:the|this|my|that) (?:photo|picture|image|pic|shot|frame|view|snapshot|scene)\b"
    r"|\s*\b(?:that |which )?(?:i am|i'm|am i|we are|are we) (?:currently |now )?(?:looking at|seeing|holding|"
    r"pointing at|facing|viewing|standing (?:in front of|next to|near))\b|\s*\bright now\b|\s*\bin front of (?:me|us)\b"
    r"|\s*\b(?:pictured|shown|depicted|visible|seen|photographed)(?: here)?\b|\s*\bhere\b|\s*\bover there\b", re.I)
_CLASS = {"kind", "type", "sort", "breed", "species", "model", "make", "variety", "brand", "style", "genus", "class",
          "category", "manner", "name"}
# nouns that ask for a property, not for what the thing is ("what color is it")
_PROPERTY_NOUNS = {"color", "colour", "size", "shape", "year", "time", "day", "date", "price", "age", "height",
                   "weight", "material", "temperature", "number", "language", "country", "city", "flavor", "flavour"}
_DEIXIS = {"this", "that", "these", "those", "it", "they", "he", "she"}
_SPECIAL = [
    re.compile(rf"^who (?:is|are|was) (?:the|this|that|these) (?:[a-z-]+ )?(?:{_PEOPLE})$"),
    re.compile(r"^(?:what|which) (?:is|are) (?:the )?(?:name|names|identity|title) of (?:the|this|that|these|those|it)"
               r"(?: [a-z-]+){0,3}$"),
    re.compile(r"^(?:what|who) (?:is|are) (?:this|that|these|those|it)(?: [a-z-]+){0,2} called$"),
    re.compile(r"^what (?:do|would) (?:you|we|they|people) call (?:this|that|these|those|it)(?: [a-z-]+){0,2}$"),
    re.compile(r"^(?:identify|name|recognize|recognise) (?:this|that|these|those|the|it)(?: [a-z-]+){0,3}$"),
    re.compile(r"^what (?:is|are) (?:this|that|it) (?:a |an )?(?:photo|picture|image|pic|shot) of$"),
    re.compile(r"^what (?:does|do) (?:this|that|the) (?:photo|picture|image|pic|shot) show$"),
    re.compile(r"^(?:what|who)(?: is| are)?$"),
]


def _bare(question: str) -> str:
    q = nlp.expand_contractions(question).lower()
    q = _POLITE.sub("", q)
    q = _LOCATIVE.sub("", q)
    q = re.sub(r"[^a-z0-9' -]+", " ", q)
    return " ".join(q.split())


def _np_word(w: str) -> bool:
    return w not in nlp.FUNCTION_WORDS and w not in nlp.PHRASE_VERBS and not re.search(r"[a-z]{3,}(?<!e)ed$", w)


def is_recognition(question: str) -> bool:
    """Does the question ask what or who the pictured thing is (its name), however it is phrased?

    A small grammar over the question without politeness and "in this photo"/"am I looking at": WH [CLASS of]
    [noun phrase] and a copula with the pointing word in either order ("what bird is this", "what this is"), or one
    of a few fixed forms ("what is the name of ...", "identify this ...", "who is the person ...")."""
    q = _bare(question)
    if not q:
        return False
    if any(p.match(q) for p in _SPECIAL):
        return True
    toks = q.split()
    if toks[0] not in ("what", "which", "who"):
        return False
    i, n = 1, len(toks)
    if i + 1 < n and toks[i] in _CLASS and toks[i + 1] == "of":
        i += 2
    np_: list[str] = []
    while i < n and len(np_) < 3 and _np_word(toks[i]):
        np_.append(toks[i])
        i += 1
    if set(np_) & _PROPERTY_NOUNS:
        return False
    copula = deixis = False
    for _ in range(2):  # copula then pointing word, or the reverse (an embedded question)
        if i < n and toks[i] in nlp.COPULAS and not copula:
            copula, i = True, i + 1
        if i < n and toks[i] in _DEIXIS and not deixis and (copula or toks[0] != "who"):
            deixis, i = True, i + 1
            k = 0
            while i < n and k < 3 and _np_word(toks[i]):
                i, k = i + 1, k + 1
    if deixis and not copula:
        return False  # "who owns it": a verb, not "is"
    poss = re.search(r"\b(?:this|that|these|those) [a-z-]+'s? ([a-z- ]+)$", q)
    if poss and poss.group(1).split()[-1] not in ("name", "names", "identity") or (poss and len(poss.group(1).split()) > 1):
        return False  # "what is this plant's scientific name": a property of it, not which one it is
    if not (copula and deixis) and _noun_before_copula(toks):
        return True  # "which launch vehicle is this": a noun that can also be a verb ("launch") before the copula
    if not copula and len(np_) >= 2 and re.search(r"[^su]s$", np_[-1]):
        return False  # "which route stops (here)": the last word is a verb
    if i == n - 1 and np_ and copula and re.search(r"[a-z]{3,}(?:ed|ing)$", toks[i]):
        i += 1  # "which bird is perched (here)", "what animal is sleeping": still which one it is
    return i == n and bool(np_ or copula)


def _noun_before_copula(toks: list[str]) -> bool:
    """WH + one to three content words + copula + pointing word + up to three nouns, nothing else."""
    k = next((j for j, w in enumerate(toks[1:4], 1) if w in nlp.COPULAS), None)
    if k is None or k == 1 or k + 1 >= len(toks) or toks[k + 1] not in _DEIXIS - {"it", "they", "he", "she"}:
        return False
    head, tail = toks[1:k], toks[k + 2:]
    return (toks[0] in ("what", "which") and all(w not in nlp.FUNCTION_WORDS for w in head)
            and not set(head) & _PROPERTY_NOUNS and len(tail) <= 3 and all(_np_word(w) for w in tail))


def class_noun(question: str) -> str | None:
    """The class a recognition question names ("what breed is this dog" -> breed, "which bird is this" -> bird)."""
    q = _bare(question)
    m = re.match(r"^(?:what|which) (?:(" + "|".join(sorted(_CLASS)) + r") of )?([a-z-]+)", q)
    if not m:
        return None
    if m.group(1):
        return m.group(1)
    return m.group(2) if _np_word(m.group(2)) and m.group(2) not in _DEIXIS else None


# ---- comparison ----------------------------------------------------------------------------------

class Comparison(BaseModel):
    """A comparison of two things along one dimension; `sides` are the phrases compared, as asked."""

    relation: Literal["more", "less", "before_after", "first"]
    dimension: str  # length, mass, speed, temperature, year, number
    word: str  # the comparative as asked ("taller", "before or after")
    sides: list[str]
    events: list[str] = []  # before/after: the verb of each side ("born", "launched")
    yes_no: bool = False  # "is A taller than B?": answer yes/no


_MORE = {"taller": "length", "higher": "length", "longer": "length", "deeper": "length", "wider": "length",
         "bigger": "length", "larger": "length", "farther": "length", "further": "length", "heavier": "mass",
         "faster": "speed", "hotter": "temperature", "warmer": "temperature", "older": "year_old",
         "earlier": "year_old"}
_LESS = {"shorter": "length", "lower": "length", "smaller": "length", "narrower": "length", "shallower": "length",
         "closer": "length", "nearer": "length", "lighter": "mass", "slower": "speed", "colder": "temperature",
         "cooler": "temperature", "younger": "year_young", "newer": "year_young", "later": "year_young"}
_COMPARATIVE = "|".join(sorted(list(_MORE) + list(_LESS), key=len, reverse=True))


def parse_comparison(question: str) -> Comparison | None:
    q = " ".join(nlp.expand_contractions(question).lower().strip(" ?.!").split())
    m = re.search(r"\b(?:was|were|is|are|did) (.+?) (born|built|founded|launched|made|released|published|created|"
                  r"opened|established|completed|discovered|invented|formed|written|first \w+|\w+ed) before or after "
                  r"(.+?)(?: (?:was|were|is|are|had been|did)(?: first)? (\w+))?$", q)
    if m:
        side_b, event_b = m.group(3), m.group(4)
        if event_b is None:  # "... before or after the station opened": the last word is the other event
            last = re.search(r"^(.+) (\w+(?:ed|en)|born|built|made|began|began|won|ran|sank|rose)$", side_b)
            side_b, event_b = (last.group(1), last.group(2)) if last else (side_b, m.group(2))
        return Comparison(relation="before_after", dimension="year", word="before or after",
                          sides=[m.group(1), side_b], events=[m.group(2), event_b])
    m = re.search(r"\b(?:which|what|who) (?:came|was|were|happened|is|one (?:came|was)) (?:first|earlier|older)[,:]? "
                  r"(?:the )?(.+?),? or (.+)$", q)
    if m:
        return Comparison(relation="first", dimension="year", word="first", sides=[m.group(1), m.group(2)])
    m = re.search(rf"\b(?:which|what|who)(?: one)? (?:is|was|are|were|stands|runs|weighs)(?: the)? ({_COMPARATIVE}|more \w+"
                  rf"|less \w+)[,:]? (?:the )?(.+?),? or (?:the )?(.+)$", q)
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
_REL = re.compile(r"\bthe ((?:[a-z0-9-]+ ){0,2}[a-z-]+) (that|which|who|where|whose|when|in which|on which|from which) ")
_REDUCED = re.compile(rf"\bthe ((?:[a-z0-9-]+ ){{0,2}}[a-z-]+) (?={_REF}\b)")
# a participle clause: "the ship named after her", "the satellite launched by this rocket in 2015"
_PARTICIPLE = re.compile(rf"\bthe ((?:[a-z0-9-]+ ){{0,2}}[a-z-]+) (?=(?:[a-z]{{3,}}ed|built|made|named|known|found|given|taken|"
                         rf"written|drawn|grown|held|run|sold|worn|shown|seen|won|led|kept|paid|sent|flown|chosen|driven|"
                         rf"begun|bought|brought|caught|thrown) (?:by|after|for|in|on|from|at|with|of|to|near|into|about) "
                         rf"(?:[a-z-]+ ){{0,2}}{_REF}\b)")


def parse_bridge(question: str) -> Bridge | None:
    """`the <noun> (that|which|where ...)? <clause mentioning this/it>` -> hop 1 and hop 2 questions."""
    q = " ".join(nlp.expand_contractions(question).lower().strip(" ?").split())
    for pat in (_REL, _REDUCED, _PARTICIPLE):
        for m in pat.finditer(q):
            noun_words = m.group(1).split()
            if noun_words[-1] in nlp.STOPWORDS | nlp.PREPOSITIONS or noun_words[0] in ("first", "last", "only", "same", "one"):
                continue  # "the first person to ...": not a bridge; "the project behind this logo": not a clause
            end = _clause_end(q, m.end())
            if end is None:
                continue
            clause = q[m.end():end].strip()
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
        while j + 1 < len(toks) and j - i < 3 and toks[j + 1][0] not in nlp.NOUN_PHRASE_STOP and not re.search(
                r"[a-z]{3,}(?<!e)ed$", toks[j + 1][0]) and not (j > i and re.search(r"[^su]s$", toks[j + 1][0])):
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
    if end + 2 < len(toks) and toks[end + 1][0] in ("in", "on", "during", "since") and (
            re.fullmatch(r"\d{3,4}", toks[end + 2][0]) or (end + 3 < len(toks) and re.fullmatch(r"\d{3,4}", toks[end + 3][0]))):
        end += 2 if re.fullmatch(r"\d{3,4}", toks[end + 2][0]) else 3
    # a stranded preposition: "stands in" followed by the main clause's verb
    if end + 2 < len(toks) and toks[end + 1][0] in nlp.PREPOSITIONS and toks[end + 2][0] not in nlp.STOPWORDS | {
            "a", "an", "the"} and not re.fullmatch(r"\d+", toks[end + 2][0]):
        end += 1
    return toks[end][2]


# ---- unit conversion ------------------------------------------------------------------------------

_UNIT_WORDS = r"[a-z]+(?: [a-z]+)?(?:/[a-z]+)?"
_CONVERT = [
    re.compile(rf"\bhow many ({_UNIT_WORDS}?)(?: tall| long| high| wide| deep| heavy| far| away| across)? (?:is|are|was|were|"
               rf"would be|would that be) (?:that|it|this|they|those|these)\b"),
    re.compile(rf"\bhow many ({_UNIT_WORDS}?) (?:does|do|did) (?:that|it|this|they|those|these)(?: [a-z]+)? (?:weigh|measure)\b"),
    re.compile(rf"\b(?:what|how much|how far|how long|how tall|how heavy) (?:is|are|was|would) (?:that|it|this|they|those|these)"
               rf"(?: be)? in ({_UNIT_WORDS})\s*\??$"),
    re.compile(rf"\bconvert (?:that|it|this|the [a-z]+) (?:to|into) ({_UNIT_WORDS})\s*\??$"),
    re.compile(rf"\bhow (?:tall|high|long|far|deep|wide|heavy|big|fast) (?:is|are|was|were) (?:that|it|this|they|these|those)"
               rf"(?: [a-z]+){{0,2}} in ({_UNIT_WORDS})\s*\??$"),
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


# ---- the question type -----------------------------------------------------------------------------

_WH_TYPE = {"owner", "price", "address", "name", "age", "height", "cost", "fee", "phone", "number", "website",
            "origin", "history", "meaning", "population", "size", "weight"}


def is_elliptical(question: str) -> bool:
    """A later turn that names no subject ("who is the owner?", "what is the price?"): about the conversation's
    entity. One content word at most, none of them a name."""
    cw = nlp.content_words(question)
    return len(cw) <= 1 and all(w in _WH_TYPE or not w[:1].isdigit() for w in cw) and not re.search(r"\b[A-Z]", question[1:])

_AGGREGATION = re.compile(r"\bhow many\b.*\b(?:did|has|have|had)\b|\bhow many\b.*\b(?:in total|altogether|combined|so far|"
                          r"in all|overall|ever)\b|\b(?:list|name) all\b|\ball the\b.*\b(?:which|that)\b", re.I)


def classify(question: str, *, has_image: bool, history_entity: bool = False) -> QuestionType:
    """The plan-table row for a question (see graph/planner/planner_table.yaml)."""
    q = question or ""
    refers = has_image and nlp.refers_to_image(q)
    pron = nlp.has_pronoun(q)
    if conversion_target(q) and (refers or pron or history_entity):
        return "conversion"
    if parse_comparison(q) is not None:
        return "comparison"
    if has_image and is_recognition(q) and not (history_entity and not refers and not re.search(
            r"\b(this|that|these|those)\b", q, re.I)):
        return "recognition"
    if parse_bridge(q) is not None and (refers or pron or history_entity):
        return "multi_hop"
    if history_entity and not refers and (pron or is_elliptical(q)):
        return "follow_up"
    if has_image and nlp.asks_about_text(q) and (refers or not pron):
        return "text_in_image"
    if refers or (has_image and pron):
        return "aggregation" if _AGGREGATION.search(q) else "attribute"
    return "web_fact"
