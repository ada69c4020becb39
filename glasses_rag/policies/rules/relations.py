"""Relations named by a verb and its preposition: "made of" (a material) is not "made in" (a place) nor "made by" (a
maker), whatever words they share."""

from __future__ import annotations

from glasses_rag.text import nlp
from glasses_rag.text.words import IRREGULAR_PAST


def _is_verb(w: str) -> bool:
    """A verb form that takes a preposition ("made", "built", "located"): a known one or a past form."""
    return w in nlp.PHRASE_VERBS or w in IRREGULAR_PAST or (len(w) > 4 and w.endswith("ed"))


def _verb_preps(text: str) -> set[tuple[str, str]]:
    ws = nlp.words(text)
    return {(nlp.stem(w), nxt) for w, nxt in zip(ws, ws[1:]) if nxt in nlp.PREPOSITIONS and _is_verb(w)}


def relation_clash(text: str, question: str) -> bool:
    """`text` names a verb of the question with another preposition, and never with the question's own ("made in"
    for "what is it made of?")."""
    asked = _verb_preps(question)
    if not asked:
        return False
    said = _verb_preps(text)
    verbs = {v for v, _ in asked}
    return any(v in verbs for v, _ in said) and not (said & asked)
