"""Recognition questions (rule-based): does a question ask what or who the pictured thing is, however it is phrased,
and which class it names ("what breed is this dog" -> breed)."""

from __future__ import annotations

import re

from glasses_rag.policies.rules.lexicon import PEOPLE, WORDS
from glasses_rag.text import nlp

_POLITE = re.compile(
    r"^\s*(?:(?:hey|hi|hello|ok|okay|so|please|excuse me|quick question)[,!.\s]+)*"
    r"(?:(?:can|could|would|will) you (?:please )?(?=identify|recognize|recognise|name)"
    r"|(?:can|could|would|will) you (?:please )?(?:tell me|say|let me know|figure out)"
    r"|(?:do|does) (?:you|anyone) know|tell me|i (?:want|would like|'d like) to know|i wonder|i am wondering"
    r"|i'm wondering|any idea|help me (?:identify|figure out)|please (?:tell me|identify|name))\s*[,:]?\s*",
    re.I,
)
_LOCATIVE = re.compile(
    r"\s*\b(?:in|on|from|within) (?:the|this|my|that) (?:photo|picture|image|pic|shot|frame|view|snapshot|scene)\b"
    r"|\s*\b(?:that |which )?(?:i am|i'm|am i|we are|are we) (?:currently |now )?(?:looking at|seeing|holding|"
    r"pointing at|facing|viewing|standing (?:in front of|next to|near))\b|\s*\bright now\b|\s*\bin front of (?:me|us)\b"
    r"|\s*\b(?:pictured|shown|depicted|visible|seen|photographed)(?: here)?\b|\s*\bhere\b|\s*\bover there\b",
    re.I,
)
_CLASS = frozenset(WORDS.recognition_classes)
# nouns that ask for a property, not for what the thing is ("what color is it")
_PROPERTY_NOUNS = frozenset(WORDS.property_nouns)
_DEIXIS = {"this", "that", "these", "those", "it", "they", "he", "she"}
_SPECIAL = [
    re.compile(rf"^who (?:is|are|was) (?:the|this|that|these) (?:[a-z-]+ )?(?:{PEOPLE})$"),
    re.compile(
        r"^(?:what|which) (?:is|are) (?:the )?(?:name|names|identity|title) of (?:the|this|that|these|those|it)"
        r"(?: [a-z-]+){0,3}$"
    ),
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
    if (
        poss
        and poss.group(1).split()[-1] not in ("name", "names", "identity")
        or (poss and len(poss.group(1).split()) > 1)
    ):
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
    head, tail = toks[1:k], toks[k + 2 :]
    return (
        toks[0] in ("what", "which")
        and all(w not in nlp.FUNCTION_WORDS for w in head)
        and not set(head) & _PROPERTY_NOUNS
        and len(tail) <= 3
        and all(_np_word(w) for w in tail)
    )


def class_noun(question: str) -> str | None:
    """The class a recognition question names ("what breed is this dog" -> breed, "which bird is this" -> bird)."""
    q = _bare(question)
    m = re.match(r"^(?:what|which) (?:(" + "|".join(sorted(_CLASS)) + r") of )?([a-z-]+)", q)
    if not m:
        return None
    if m.group(1):
        return m.group(1)
    return m.group(2) if _np_word(m.group(2)) and m.group(2) not in _DEIXIS else None
