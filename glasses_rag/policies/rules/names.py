"""Proper names in a sentence (rule-based): runs of capitalised or alphanumeric tokens."""

from __future__ import annotations

import re
from dataclasses import dataclass

from glasses_rag.policies.rules.dates import MONTH, WEEKDAY

# a token of a proper name: capitalised, all caps, or letters mixed with digits ("STS-93", "L1", "FHL2")
_NAME_TOKEN = re.compile(r"(?:[A-Z][\w'’&.-]*|\d+(?!st\b|nd\b|rd\b|th\b|s\b)[A-Za-z][\w-]*|[A-Za-z]+-?\d[\w-]*)")
_NAME_LINK = {"of", "the", "de", "du", "da", "la", "le", "von", "van", "der", "del", "y", "&", "upon", "for"}
_TOKEN = re.compile(r"[A-Za-z0-9][\w'’&.-]*|[,()]")
_SENTENCE_OPENERS = {
    "the",
    "a",
    "an",
    "it",
    "its",
    "in",
    "on",
    "at",
    "this",
    "that",
    "these",
    "those",
    "there",
    "he",
    "she",
    "they",
    "we",
    "you",
    "i",
    "his",
    "her",
    "their",
    "our",
    "after",
    "before",
    "during",
    "when",
    "while",
    "since",
    "as",
    "for",
    "from",
    "by",
    "with",
    "if",
    "some",
    "many",
    "most",
    "all",
    "each",
    "every",
    "one",
    "over",
    "today",
    "however",
    "although",
    "today's",
    "what",
    "which",
    "who",
    "where",
    "why",
    "how",
    "yes",
    "no",
    "both",
    "also",
    "once",
    "visitors",
    "local",
    "buses",
}


@dataclass
class NamePhrase:
    text: str
    start: int
    end: int
    after: str  # the lower-cased word just before the phrase ("in", "by", ...)


def _is_name_token(tok: str) -> bool:
    return bool(_NAME_TOKEN.fullmatch(tok.rstrip(".")))


def _run_end(toks: list[re.Match], i: int) -> int:
    """Index of the last token of the name run that starts at token i."""
    j = i
    while j + 1 < len(toks):
        nxt = toks[j + 1].group(0)
        if _is_name_token(nxt) or re.fullmatch(r"\d{1,3}", nxt.rstrip(".")):
            j += 1  # "Falcon 9", "Apollo 11", "Route 42": a number continues a name
        elif (
            (nxt.lower() in _NAME_LINK or nxt == ",")
            and j + 2 < len(toks)
            and _is_name_token(toks[j + 2].group(0))
            and (nxt != "," or _is_place_list(toks, j + 2))
        ):
            j += 2
        else:
            break
    return j


def _run_start(toks: list[re.Match], i: int, j: int, first: int) -> int:
    """The run's first token once sentence-initial function words ("The", "It", "In") and a leading link word are
    dropped (a capitalised "Of" inside a sentence is part of a name)."""
    while i <= j and toks[i].start() == first and toks[i].group(0).lower() in _SENTENCE_OPENERS:
        i += 1
    while i <= j and (
        toks[i].group(0) in _NAME_LINK | {","} or (toks[i].group(0).lower() in _NAME_LINK and toks[i].start() == first)
    ):
        i += 1
    return i


def _phrase(sentence: str, toks: list[re.Match], i: int, j: int) -> NamePhrase | None:
    end = toks[j].end()
    # a lower-case head noun that closes the name ("the Sun-Earth L1 Lagrange point,")
    if (
        j + 1 < len(toks)
        and re.fullmatch(r"[a-z]{3,}\.?", toks[j + 1].group(0))
        and (j + 2 >= len(toks) or toks[j + 2].group(0) in (",", ")"))
        and toks[j + 1].group(0) not in _NAME_LINK
    ):
        end = toks[j + 1].end() - toks[j + 1].group(0).endswith(".")
    before = [w.lower().strip(",") for w in sentence[: toks[i].start()].split()]
    while before and before[-1] in ("the", "a", "an"):
        before.pop()
    text = sentence[toks[i].start() : end].rstrip(".,")
    if MONTH.match(text) or WEEKDAY.match(text):
        return None  # dates are not names
    return NamePhrase(text, toks[i].start(), end, before[-1] if before else "")


def name_phrases(sentence: str) -> list[NamePhrase]:
    """Proper-name phrases: runs of capitalised / alphanumeric tokens, joined by 'of', 'the', 'de', commas between
    capitalised places ("Montreal, Quebec, Canada"), plus a trailing common head noun ("... Lagrange point,")."""
    toks = list(_TOKEN.finditer(sentence or ""))
    first = _first_word_start(sentence)
    out: list[NamePhrase] = []
    i = 0
    while i < len(toks):
        if not _is_name_token(toks[i].group(0)):
            i += 1
            continue
        j = _run_end(toks, i)
        start = _run_start(toks, i, j, first)
        phrase = _phrase(sentence, toks, start, j) if start <= j else None
        if phrase is not None:
            out.append(phrase)
        i = j + 1
    return out


def _first_word_start(sentence: str) -> int:
    m = re.search(r"[A-Za-z0-9]", sentence or "")
    return m.start() if m else 0


def _is_place_list(toks: list[re.Match], k: int) -> bool:
    """ "Montreal, Quebec, Canada": a comma-joined run of single capitalised words that ends the clause."""
    t = toks[k].group(0)
    return bool(re.fullmatch(r"[A-Z][a-z]+\.?", t)) and (
        k + 1 >= len(toks) or toks[k + 1].group(0) in (",", ")") or not _NAME_TOKEN.fullmatch(toks[k + 1].group(0))
    )
