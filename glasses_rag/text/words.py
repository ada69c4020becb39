"""Words: tokens, content words, Snowball stems with irregular past forms and relation synonyms, name mentions.

The word lists are data (glasses_rag/text/words.yaml, glasses_rag/text/synonyms.yaml), validated here.
"""

from __future__ import annotations

import re
import threading
from functools import lru_cache
from pathlib import Path
from typing import Annotated

import yaml
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

_HERE = Path(__file__).parent
_Word = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z'-]*$")]


class WordLists(BaseModel):
    """glasses_rag/text/words.yaml: lower-case words, each list given as one space-separated string."""

    model_config = ConfigDict(extra="forbid")
    stopwords: frozenset[_Word]
    prepositions: frozenset[_Word]
    auxiliaries: frozenset[_Word]
    copulas: frozenset[_Word]
    phrase_verbs: frozenset[_Word]
    photo_nouns: frozenset[_Word]
    irregular_past: dict[_Word, _Word]

    @field_validator(
        "stopwords", "prepositions", "auxiliaries", "copulas", "phrase_verbs", "photo_nouns", mode="before"
    )
    @classmethod
    def _split(cls, v: object) -> object:
        return v.split() if isinstance(v, str) else v

    @field_validator("irregular_past", mode="before")
    @classmethod
    def _pairs(cls, v: object) -> object:
        if isinstance(v, str):
            pairs = [p.split(":") for p in v.split()]
            if any(len(p) != 2 for p in pairs):
                raise ValueError("irregular_past entries are written past:present")
            return dict(pairs)
        return v


class SynonymGroups(BaseModel):
    """glasses_rag/text/synonyms.yaml: groups of words naming one relation (lower case, two words or more each)."""

    model_config = ConfigDict(extra="forbid")
    groups: list[Annotated[list[Annotated[str, StringConstraints(pattern=r"^[a-z]+$")]], Field(min_length=2)]]


def load_word_lists(path: Path | None = None) -> WordLists:
    path = path or _HERE / "words.yaml"
    return WordLists.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")))


def _synonym_groups() -> list[list[str]]:
    text = (_HERE / "synonyms.yaml").read_text(encoding="utf-8")
    return SynonymGroups.model_validate(yaml.safe_load(text)).groups


_LISTS = load_word_lists()
STOPWORDS = _LISTS.stopwords
PREPOSITIONS = _LISTS.prepositions
AUXILIARIES = _LISTS.auxiliaries
COPULAS = _LISTS.copulas
PHRASE_VERBS = _LISTS.phrase_verbs
PHOTO_NOUNS = _LISTS.photo_nouns
IRREGULAR_PAST = _IRREGULAR = _LISTS.irregular_past

WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9'’.-]*")
_CONTRACTIONS = [
    (re.compile(p, re.I), r)
    for p, r in [
        (r"\bwhat's\b", "what is"),
        (r"\bwho's\b", "who is"),
        (r"\bwhere's\b", "where is"),
        (r"\bhow's\b", "how is"),
        (r"\bthat's\b", "that is"),
        (r"\bit's\b", "it is"),
        (r"\bwhat're\b", "what are"),
        (r"\bi'm\b", "i am"),
        (r"\bwhen's\b", "when is"),
        (r"\bthere's\b", "there is"),
        (r"\bi'd\b", "i would"),
        (r"\bwhich's\b", "which is"),
        (r"\bwho're\b", "who are"),
        (r"\bwhere're\b", "where are"),
    ]
]


def expand_contractions(text: str) -> str:
    t = (text or "").replace("’", "'")
    for pat, rep in _CONTRACTIONS:
        t = pat.sub(rep, t)
    return t


def words(text: str) -> list[str]:
    return [w.strip(".'’").lower() for w in WORD.findall(text or "") if w.strip(".'’")]


def content_words(text: str) -> list[str]:
    return [w for w in words(text) if w not in STOPWORDS and len(w) > 1]


def normalize(text: str) -> str:
    t = re.sub(r"[^a-z0-9 ]+", " ", (text or "").lower())
    t = re.sub(r"\b(a|an|the)\b", " ", t)
    return re.sub(r"\s+", " ", t).strip()


_STEM_LOCK = threading.Lock()
_STEMMER = None
_SYNONYM: dict[str, str] = {}


def _snowball(w: str) -> str:
    global _STEMMER
    with _STEM_LOCK:  # a Snowball stemmer object keeps state between calls
        if _STEMMER is None:
            import snowballstemmer

            _STEMMER = snowballstemmer.stemmer("english")
        return _STEMMER.stemWord(w)


@lru_cache(maxsize=65536)
def stem(word: str) -> str:
    """The Snowball (Porter 2) stem, irregular past forms first, so 'manufactures' meets 'manufacturer' and 'won'
    meets 'win'; words of one group of glasses_rag/text/synonyms.yaml share a stem ('wrote' meets 'author')."""
    w = word.lower()
    w = _IRREGULAR.get(w, w)
    if not _SYNONYM:
        for group in _synonym_groups():
            head = _snowball(_IRREGULAR.get(group[0], group[0]))
            for g in group:
                _SYNONYM.setdefault(_snowball(g), head)
                _SYNONYM.setdefault(g, head)
    if w in _SYNONYM:
        return _SYNONYM[w]
    s = _snowball(w)
    return _SYNONYM.get(s, s)


def stems(text: str) -> set[str]:
    """Stems of the content words, hyphenated words also by part ("Sun-Earth" -> sun, earth)."""
    out = set()
    for w in content_words(text):
        out.add(stem(w))
        if "-" in w:
            out |= {stem(p) for p in w.split("-") if len(p) > 1 and p not in STOPWORDS}
        if len(w) >= 5 and w.endswith(("er", "or")):  # agent nouns meet their verbs: owner/owned, maker/makes
            out |= {stem(w[:-2]), stem(w[:-1])}
    return out


def shares_stem(a: str, b: str) -> bool:
    return bool(stems(a) & stems(b))


def mentions(text: str, name: str | None) -> bool:
    """Does `text` name `name`: all of its content words, or (for long names) most of them, in order-free form?"""
    if not name:
        return False
    want = [w for w in content_words(name) if len(w) > 1] or words(name)
    if not want:
        return False
    have = set(words(text)) | stems(text)
    hit = sum(1 for w in want if w in have or stem(w) in have)
    return hit == len(want) or (len(want) >= 3 and hit >= len(want) - 1)


def keywords(question: str, entity: str | None = None, limit: int = 8) -> str:
    """Search keywords: the entity name plus the question's content words."""
    ent = set(normalize(entity or "").split())
    extra = [w for w in content_words(question) if w not in ent]
    return " ".join(([entity] if entity else []) + extra[:limit]).strip()
