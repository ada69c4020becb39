"""The canonical form of a question (rule-based): one question, many surfaces.

Politeness and embedding ("could you tell me what ..."), imperatives ("name this bird"), egocentric phrasing ("what am
I looking at", "the trail I'm on"), embedded word order ("how tall this tower is"), the question word left in place
("this book won what prize?", "written by whom?"), a noun phrase asked as a question ("tell me the length of this
trail"). `canonical` rewrites these shapes into the plain direct question every other rule reads; it changes word
order and function words only, never content words.
"""

from __future__ import annotations

import re

from glasses_rag.policies.rules.lexicon import PEOPLE, PERSON_NOUNS
from glasses_rag.text import nlp

_WH = r"(?:what|which|who|whom|whose|where|when|why|how)"
_OPENER = re.compile(
    r"^(?:(?:hey|hi|hello|ok|okay|so|and|also|um|uh|well|now|then|please|excuse me|quick question|one more thing|"
    r"one more question|just curious|out of curiosity)\b[,!.:]?\s+"
    r"|(?:can|could|would|will) you (?:please |kindly )?(?:tell me|say|let me know|figure out|find out|check|explain"
    r"|remind me)\b[,:]?\s*"
    r"|(?:can|could|would|will) you (?:please |kindly )?(?=(?:identify|name|recogni[sz]e|describe)\b)"
    r"|(?:do|does) (?:you|anyone|anybody) (?:happen to )?know\b[,:]?\s*|any idea\b[,:]?\s*"
    r"|i (?:want|would like|need|wanna) to (?:know|find out)\b[,:]?\s*"
    r"|i (?:wonder|am wondering|am curious)\b(?: about)?[,:]?\s*"
    r"|(?:please )?(?:tell|show|give) me\b[,:]?\s*|let me know\b[,:]?\s*|i need to know\b[,:]?\s*)",
    re.I,
)
_TRAILING = re.compile(r"(?:[,\s]+(?:please|thanks|thank you|right now|for me))+$", re.I)
_PERSON_NP = re.compile(rf"\b(?:{PEOPLE})\b", re.I)
_PERSON_ROLE = re.compile(PERSON_NOUNS + "|" + PEOPLE + "|owner|operator|builder|maker|designer|founder")
_DET_START = re.compile(r"^(?:the|this|that|these|those|its|his|her|their|my)\b", re.I)
_SUBJECT = r"(?:(?:the|this|that|these|those|my|his|her|its|their|a|an)\b(?: [\w'-]+){0,6}?|it|he|she|they|this|that)"
_COPULA = r"(?:is|are|was|were)"
_EGO = (
    r"(?:am i|are we|i am|we are)(?: currently| now| standing)? (?:looking at|seeing|viewing|watching|holding|facing|"
    r"pointing (?:at|to)|standing (?:in front of|next to|near|at|on|in)|in front of|on|in|at|"
    r"visiting|reading|drinking|eating)"
)
_EGO_WH = re.compile(
    rf"^({_WH})((?: (?!(?:is|are|was|were)\b)[a-z-]+){{0,3}}?) {_EGO}(?: (?:right )?(?:now|here))?$", re.I
)
_EGO_NP = re.compile(
    rf"\bthe ((?:[a-z-]+ ){{0,2}}[a-z-]+) (?:that |which )?{_EGO}\b(?: (?:right )?(?:now|here))?", re.I
)
_IN_PHOTO_NP = re.compile(
    r"\bthe ((?:[a-z-]+ ){0,2}[a-z-]+) (?:(?:in|on|from) (?:this|the|my) (?:photo|picture|image|pic|shot|"
    r"frame|snapshot|scene|view)|(?:shown|pictured|depicted|visible|seen)(?: here)?|in front of (?:me|us)|"
    r"over there|right here)\b",
    re.I,
)
_IN_SITU = re.compile(
    rf"^(?!{_WH}\b|(?:is|are|was|were|do|does|did|can|could|will|would|has|have|had|should)\b)(.+?),? "
    rf"((?:(?:by|from|for|with|to|in|on|at|of|into|under|near) )?(?:whom|who|what|where|when|which|how many|"
    rf"how much)(?: [a-z-]+){{0,3}})$",
    re.I,
)
_TOPIC = re.compile(rf"^((?:the|this|that|these|those) [^,]{{1,40}}),\s*({_WH}\b.+)$", re.I)
_PHOTO_WORDS = {"photo", "picture", "image", "pic", "shot", "snapshot", "photograph", "frame", "scene", "view"}
_NUMBER_OF = re.compile(
    r"^(?:what|which) (?:is|are|was|were) (?:the )?(?:total |approximate |exact |overall |rough )?(?:number|count|"
    r"amount) of ([a-z-]+)\b",
    re.I,
)


def _lower_lead(chunk: str) -> str:
    """ "This book" -> "this book" when a chunk moves inside a sentence (names keep their case)."""
    w = chunk.split(" ", 1)
    return " ".join([w[0].lower()] + w[1:]) if w and w[0].lower() in nlp.FUNCTION_WORDS else chunk


def _invert_embedded(q: str) -> str:
    """ "how tall this tower is" -> "how tall is this tower"; "where these coins were found" -> "where were ..."."""
    m = re.match(
        rf"^((?:(?:by|from|for|with|to|in|on|at|of) )?{_WH}(?: (?!(?:the|this|that|these|those|it|he|she|they|my|his|"
        rf"her|its|their|a|an|of|in|on|at|for|from|to|with|by)\b)[a-z-]+){{0,2}}) ({_SUBJECT}) ({_COPULA})\b(.*)$",
        q,
        re.I,
    )
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
    return (
        bool(
            re.search(
                rf"\b(?:{_COPULA}|do|does|did|has|have|had|can|could|will|would|{_WH[3:-1]})\b|[a-z]{{3,}}ed\b", q, re.I
            )
        )
        or any(w in nlp.PHRASE_VERBS for w in toks)
        or any(
            re.search(r"[^su]s$", w) and nxt in ("this", "that", "these", "those", "the", "it")
            for w, nxt in zip(toks, toks[1:])
        )
    )


def _strip_openers(q: str) -> tuple[str, bool]:
    """ "hey, could you tell me ...", "so do you know ..." dropped; True when the opener was an imperative."""
    imperative = False
    for _ in range(4):
        m = _OPENER.match(q)
        if not m or not m.group(0):
            break
        imperative |= bool(re.search(r"\b(?:tell|show|give|let) me\b", m.group(0), re.I))
        q = q[m.end() :].lstrip(" ,")
    return _TRAILING.sub("", q).strip(" ,"), imperative


def _front_topic(q: str, imperative: bool) -> tuple[str, bool]:
    m = _TOPIC.match(q)  # "this rocket, who makes it?" -> "who makes this rocket?"
    if m:
        q = re.sub(r"\b(it|them|they)\b", _lower_lead(m.group(1)), m.group(2), count=1, flags=re.I)
    m = re.match(r"^(?:what|how) about\s+(.+)$", q, re.I)
    if m:  # "what about its height?" -> "what is its height?"
        return m.group(1), True
    return q, imperative


def _as_question(q: str, imperative: bool) -> str:
    """Imperatives and noun phrases as direct questions."""
    if (
        _DET_START.match(q)
        and len(q.split()) <= 4
        and not re.search(rf"\b{_WH}\b", q, re.I)
        and _PERSON_ROLE.fullmatch(q.split()[-1].lower())
    ):
        q = "who is " + q  # "and the architect?" -> "who is the architect?"
    m = re.match(r"^(?:identify|recogni[sz]e|name|describe)\s+(?!all\b|every\b|three\b|two\b|some\b)(.+)$", q, re.I)
    if m:  # "name this bird" -> "what is this bird"
        return f"{'who' if _PERSON_NP.search(m.group(1)) else 'what'} is {m.group(1)}"
    if re.match(r"^about\s+", q, re.I):  # "tell me about this building"
        return "what is " + q.split(None, 1)[1]
    if _DET_START.match(q) and (imperative or not _has_verb(q)):
        return "what is " + q  # "tell me the length of this trail", "its height?": a noun phrase asked as a question
    if not _has_verb(q) and re.match(
        r"^[a-z][a-z-]*(?: [a-z][a-z-]*){0,2} (?:of|at|in|on|for|from) (?:this|that|these|those|"
        r"the|its|it)\b",
        q,
        re.I,
    ):
        w = q.split()
        if re.fullmatch(r"[A-Z][a-z-]+", w[0]) and not re.match(r"[A-Z0-9]", w[1]):
            w[0] = w[0].lower()  # capitalised only because it opens the sentence ("Bus route at this stop?")
        return "what is the " + " ".join(w)  # "bus route at this stop?", "calories in this drink?"
    return q


def _point_at_photo(q: str) -> str:
    """The question word moved to the front, and egocentric or in-photo phrases as "this X"."""
    m = _IN_SITU.match(q)
    if m and not re.search(rf"\b{_WH}\b", m.group(1), re.I):  # "this book won what prize" -> "what prize this book won"
        q = f"{m.group(2)} {_lower_lead(m.group(1))}"
    m = _EGO_WH.match(q)
    if m:  # "which trail am I on" -> "which trail is this"
        q = f"{m.group(1)}{m.group(2)} is this"
    q = _EGO_NP.sub(lambda m: f"this {m.group(1)}", q)  # "the trail I am on" -> "this trail"
    return _IN_PHOTO_NP.sub(lambda m: f"this {m.group(1)}" if m.group(1).lower() not in _PHOTO_WORDS else m.group(0), q)


def _plain_order(q: str) -> str:
    q = _invert_embedded(q)
    # "what animal could this be" -> "what animal is this": a guess asked for is still "which one is it"
    q = re.sub(
        r"^((?:what|which|who)(?: [a-z-]+){0,3}?) (?:could|might|would|may|can) "
        r"(this|that|these|those|it)((?: [a-z-]+){0,2}) be$",
        lambda m: (
            f"{m.group(1)} {'are' if m.group(2).lower() in ('these', 'those') else 'is'} {m.group(2)}{m.group(3)}"
        ),
        q,
        flags=re.I,
    )
    m = _NUMBER_OF.match(q)
    if m:  # "what is the number of engines on ..." -> "how many engines on ..."
        q = f"how many {m.group(1)}{q[m.end() :]}"
    return re.sub(
        r"\b(before|after) (.+?),? or (after|before)$",
        lambda m: (
            f"{m.group(1)} or {m.group(3)} {m.group(2)}" if m.group(1).lower() != m.group(3).lower() else m.group(0)
        ),
        q,
        flags=re.I,
    )


def canonical(question: str) -> str:
    """The question in plain direct form (see the module docstring); the question itself when no shape applies."""
    raw = " ".join((question or "").split())
    q = nlp.expand_contractions(raw).strip().rstrip(" ?.!")
    if not q:
        return raw
    q, imperative = _strip_openers(q)
    q, imperative = _front_topic(q, imperative)
    q = _plain_order(_point_at_photo(_as_question(q, imperative)))
    q = re.sub(r"\s+", " ", q).strip()
    return q + "?" if q else raw
