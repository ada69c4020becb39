"""What a question points at: "this"/"it" and the noun phrase after them, reference resolution to an entity, and
compound questions split into parts."""

from __future__ import annotations

import re

from glasses_rag.text.words import (
    AUXILIARIES,
    COPULAS,
    PHOTO_NOUNS,
    PHRASE_VERBS,
    PREPOSITIONS,
    STOPWORDS,
    expand_contractions,
    words,
)

DEICTIC = re.compile(
    r"\b(this|that|these|those|here|pictured|shown|in (?:the|this|my) (?:image|photo|picture|view)"
    r"|(?:am|i'?m) (?:i )?(?:looking at|seeing|holding))\b",
    re.I,
)
PRONOUN = re.compile(r"\b(it|its|it's|they|them|their|he|she|his|her|him|hers)\b", re.I)
PERSON_PRONOUN = re.compile(r"\b(he|she|his|her|him|hers)\b", re.I)
TEXT_CUES = re.compile(
    r"\b(say|says|said|written|write|read|reads|text|sign|label|title|brand|logo|name on|word|words"
    r"|number on|route|menu|price|author|book|cover|letters|printed|poster|plate|banner)\b",
    re.I,
)
SPLIT_AND = re.compile(
    r"\s*(?:,?\s+and\s+(?=(?:(?:in|on|at|for|from|since|by)\s+)?(?:what|who|when|where|which|how|why|is|are"
    r"|was|were|does|did|do|can)\b)|;|\?\s+(?=\S))\s*",
    re.I,
)
FUNCTION_WORDS = (STOPWORDS | PREPOSITIONS) - PHOTO_NOUNS
NOUN_PHRASE_STOP = FUNCTION_WORDS | PHRASE_VERBS
_DET = re.compile(r"\b(this|these|that|those)\b", re.I)
_RELATIVE_THAT = re.compile(
    r"\b(?:the|a|an)\s+[a-z-]+(?:\s+[a-z-]+)?\s+$", re.I
)  # "the cafe that ...": relative pronoun
_ADJECTIVE_END = re.compile(r"(?:ous|ful|ive|able|ible|al|ic|ant|ent|ary|ar|less|ish)$")


def refers_to_image(question: str) -> bool:
    return bool(DEICTIC.search(question or ""))


def has_pronoun(question: str) -> bool:
    return bool(PRONOUN.search(question or ""))


def asks_about_text(question: str) -> bool:
    return bool(TEXT_CUES.search(question or ""))


def split_question(question: str) -> list[str]:
    """Split a compound question into parts that each ask one thing."""
    parts = [p.strip(" ,?") for p in SPLIT_AND.split(question) if p and p.strip(" ,?")]
    return [p + "?" for p in parts] if len(parts) > 1 else [question]


def _ends_phrase(w: str, taken: int, plural: bool) -> bool:
    """A verb after the noun phrase: a known one, or (after a first noun) an "-ed" form or a singular verb in -s."""
    return w in PHRASE_VERBS or bool(
        taken and (re.search(r"[a-z]{3,}(?<!e)ed$", w) or (not plural and len(w) > 3 and re.search(r"[^su]s$", w)))
    )


def _noun_phrase_end(question: str, det_end: int, plural: bool, needs_verb: bool) -> int:
    """End offset of the noun phrase after a determiner: up to three words that are not verbs or function words.
    `needs_verb`: a do-support or yes/no question ("what does this beetle eat", "is this plant toxic to cats"): when
    no known verb closed the phrase, its last word is the verb or predicate, and stays."""
    taken: list[re.Match] = []
    pos = 0
    closed_by_verb = False
    for t in re.finditer(r"\s+([A-Za-z][A-Za-z-]*)", question[det_end:]):
        w = t.group(1).lower()
        if t.start() != pos or len(taken) >= 3:
            break
        if _ends_phrase(w, len(taken), plural):
            closed_by_verb = True  # "this rocket launched ...", "this tower stands in ...": a verb follows
            break
        if w in FUNCTION_WORDS or len(w) < 2:
            break
        taken.append(t)
        pos = t.end()
    rest = question[det_end + (taken[-1].end() if taken else 0) :]
    if needs_verb and not closed_by_verb and taken and (len(taken) >= 2 or not re.search(r"[A-Za-z]", rest)):
        taken = taken[:-1]
    elif (
        len(taken) >= 2
        and re.fullmatch(r"\s+(?:for|of|about|with|from|in|on|at|to)\W*", rest)
        and _ADJECTIVE_END.search(taken[-1].group(1).lower())
    ):
        taken = taken[:-1]  # "what is this place famous for": the adjective is the predicate
    return det_end + (taken[-1].end() if taken else 0)


def _needs_verb(before: list[str]) -> bool:
    return bool(before) and (before[-1] in AUXILIARIES or (before[0] in COPULAS | AUXILIARIES and len(before) == 1))


def pointed_phrase(question: str) -> str:
    """The noun phrase after "this"/"these" ("what does this little beetle eat" -> "little beetle"), or ""."""
    q = expand_contractions(question)
    m = _DET.search(q)
    if not m:
        return ""
    needs_verb = _needs_verb(words(q[: m.start()]))
    return q[m.end() : _noun_phrase_end(q, m.end(), m.group(1).lower() in ("these", "those"), needs_verb)].strip()


def _pointing_word(q: str) -> re.Match | None:
    """The determiner that points at the entity: the first "this"/"these", else the first "that"/"those" that is
    not a relative pronoun ("the cafe that served this drink")."""
    m = None
    for cand in _DET.finditer(q):
        if cand.group(1).lower() == "that" and _RELATIVE_THAT.search(q[: cand.start()]):
            continue
        if cand.group(1).lower() in ("this", "these") or m is None:
            m = cand
            if cand.group(1).lower() in ("this", "these"):
                break
    return m


def _replace_entity(q: str, entity: str) -> str:
    m = _pointing_word(q)
    if m is not None:
        end = _noun_phrase_end(q, m.end(), m.group(1).lower() in ("these", "those"), _needs_verb(words(q[: m.start()])))
        q = q[: m.start()] + entity + q[end:]
    q = re.sub(r"\bits\b", f"{entity}'s", q, flags=re.I)
    q = re.sub(r"\b(it|they|them)\b", entity, q, flags=re.I)
    return re.sub(r"\btheir\b", f"{entity}'s", q, flags=re.I)


def resolve_references(
    question: str, entity: str | None, person: str | None = None, entity_is_person: bool | None = None
) -> str:
    """Replace 'this X' / 'it' / 'its' with the entity name, so the question stands alone for search.

    Entity-aware: the noun phrase after 'this' is swallowed only up to its verb ("what does this beetle eat" keeps
    "eat"); 'he'/'she' go to `person` (someone an earlier answer named) when given, else to the entity unless it is
    known not to be a person; 'that' after "the <noun>" is a relative pronoun and stays."""
    if not entity and not person:
        return question
    q = expand_contractions(question)
    if entity:
        q = _replace_entity(q, entity)
    who = person or (entity if entity_is_person is not False else None)
    if who:
        q = re.sub(r"\b(his|her|hers)\b(?=\s+[a-z])", f"{who}'s", q, flags=re.I)
        q = re.sub(r"\b(he|she|him|her|hers)\b", who, q, flags=re.I)
    return re.sub(r"\s+", " ", q).strip()
