"""Reading web pages for answers (rule-based): a page's factual sentences and its subject, what a price question
prices, and whether a text names another thing of the entity's kind."""

from __future__ import annotations

import re

from glasses_rag.core.types import Hit
from glasses_rag.policies.rules.names import name_phrases
from glasses_rag.text import nlp

_NEGATION = re.compile(
    r"\b(?:not|no|never|cannot|can't|isn't|aren't|wasn't|weren't|doesn't|don't|didn't|won't|"
    r"prohibited|forbidden|banned|nor)\b",
    re.I,
)


def page_sentences(h: Hit) -> list[str]:
    """The factual sentences of a web hit: its content and its snippet (a summary often says it most directly)."""
    out = nlp.data_sentences(h.content or "") if h.content else []
    return out + [s for s in nlp.data_sentences(h.snippet or "") if s not in out]


def page_subject(h: Hit) -> str | None:
    """What the page is about: the first name its first sentence opens with ("Port Aven is a town ...")."""
    lead = nlp.sentences(h.content or h.snippet or "")[:1]
    names = name_phrases(lead[0]) if lead else []
    return names[0].text if names and names[0].start <= 4 else None


def priced_thing(question: str) -> set[str]:
    """Stems of what a price question prices ("how much is a single adult fare?" -> single, adult, fare): a sentence
    must name all of it, so that the price of a one-way ticket does not answer for a return ticket."""
    q = question.lower()
    m = re.search(
        r"\bhow much (?:is|are|was|were|does|do|did|would) (?:a |an |the |one )?((?:[a-z-]+ ){0,3}?[a-z-]+?)"
        r"(?= cost| for| of| to| at| from| in| on| here|\?|$)",
        q,
    ) or re.search(
        r"\b(?:price|cost|fee|fare) of (?:a |an |the |one )?((?:[a-z-]+ ){0,3}?[a-z-]+?)"
        r"(?= for| of| to| at| from| in| on| here|\?|$)",
        q,
    )
    return nlp.stems(m.group(1)) if m else set()


def with_subject(sentence: str, subject: str | None) -> str:
    """ "It lies in Westmark." -> "Port Aven lies in Westmark.": for comparing the sentence with the question."""
    if not subject:
        return sentence
    return re.sub(
        r"^(?:It|They|He|She|This|Its|Their)\b",
        lambda m: subject + ("'s" if m.group(0) in ("Its", "Their") else ""),
        sentence,
    )


def names_another(text: str, entity: str, topic: set[str]) -> bool:
    """`text` names something else of the entity's kind: a proper name holding a class word of the entity
    ("Sol Bakery" when the entity is "Luna Bakery")."""
    own = nlp.normalize(entity)
    cls = topic - nlp.stems(entity)
    return any(
        (nlp.stems(p.text) & cls or nlp.stems(p.text) & nlp.stems(entity))
        and nlp.normalize(p.text) not in own
        and len(p.text.split()) >= 2
        for p in name_phrases(text)
    )


def yes_no(sentence: str, qwords: set[str], ent_words: set[str]) -> str | None:
    """yes/no only when the sentence states it: every word the question asks about is in it; "no" when it is
    negated."""
    need = qwords - {nlp.stem(w) for w in ent_words}
    if not need or not need <= nlp.stems(sentence):
        return None
    clause = max(nlp.clauses(sentence), key=lambda c: len(nlp.stems(c) & need), default=sentence)
    return f"{'No' if _NEGATION.search(sentence) else 'Yes'}, {clause[0].lower() + clause[1:] if clause else ''}".strip(
        " ,"
    )
