"""Rule-based language helpers (no model), one import for callers: `from glasses_rag.text import nlp`.

The helpers live by concern: glasses_rag/text/words.py (tokens, stems, synonyms, name mentions; word lists in
glasses_rag/text/words.yaml), glasses_rag/text/sentences.py (sentences, clauses), glasses_rag/text/references.py
("this"/"it", reference resolution, compound questions), glasses_rag/text/injection.py (text that gives instructions
instead of facts), glasses_rag/text/abstention.py (the agent's "I don't know"). Shared by the rule-based planner, the
heuristic verifier and the heuristic tools; named heuristics everywhere they show. Rules are written for kinds of
questions and sentences, never for one benchmark's wording.
"""

from __future__ import annotations

from glasses_rag.text.abstention import IDK, is_abstention
from glasses_rag.text.injection import data_sentences, has_instruction, is_instruction, is_instruction_attribute
from glasses_rag.text.references import (
    DEICTIC,
    FUNCTION_WORDS,
    NOUN_PHRASE_STOP,
    PERSON_PRONOUN,
    PRONOUN,
    TEXT_CUES,
    asks_about_text,
    has_pronoun,
    pointed_phrase,
    refers_to_image,
    resolve_references,
    split_question,
)
from glasses_rag.text.sentences import clauses, sentences
from glasses_rag.text.words import (
    AUXILIARIES,
    COPULAS,
    PHOTO_NOUNS,
    PHRASE_VERBS,
    PREPOSITIONS,
    STOPWORDS,
    SynonymGroups,
    _synonym_groups,
    content_words,
    expand_contractions,
    keywords,
    mentions,
    normalize,
    shares_stem,
    stem,
    stems,
    words,
)

__all__ = [
    "IDK",
    "is_abstention",
    "STOPWORDS",
    "PREPOSITIONS",
    "AUXILIARIES",
    "COPULAS",
    "PHRASE_VERBS",
    "PHOTO_NOUNS",
    "FUNCTION_WORDS",
    "NOUN_PHRASE_STOP",
    "SynonymGroups",
    "_synonym_groups",
    "words",
    "content_words",
    "normalize",
    "stem",
    "stems",
    "shares_stem",
    "mentions",
    "keywords",
    "expand_contractions",
    "sentences",
    "clauses",
    "refers_to_image",
    "has_pronoun",
    "asks_about_text",
    "split_question",
    "resolve_references",
    "pointed_phrase",
    "is_instruction",
    "has_instruction",
    "data_sentences",
    "is_instruction_attribute",
    "PERSON_PRONOUN",
    "DEICTIC",
    "PRONOUN",
    "TEXT_CUES",
]
