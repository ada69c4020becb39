"""The rule-based planner's word lists, as data (glasses_rag/policies/rules/words.yaml) validated here."""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Annotated

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, StringConstraints

from glasses_rag.text.words import stem


def _split(v: object) -> object:
    return tuple(v.split()) if isinstance(v, str) else v


Word = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z'-]*$")]
Words = Annotated[tuple[Word, ...], BeforeValidator(_split)]


class PlannerWords(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    place_nouns: Words
    person_nouns: Words
    org_nouns: Words
    head_kinds: dict[str, Words]  # "kind" or "kind/dimension" -> head nouns
    noun_phrase_stop: Words
    noun_phrase_verbs: Words
    generic_heads: Words
    collective_nouns: Words
    name_nouns: Words
    people: Words
    recognition_classes: Words
    property_nouns: Words
    elliptical_nouns: Words
    comparatives_more: dict[str, Words]
    comparatives_less: dict[str, Words]
    type_words: Words
    place_keys: Words
    person_keys: Words
    generic_kinds: Words
    class_keys: Words
    single_character_nouns: Words

    @cached_property
    def head_kind(self) -> dict[str, tuple[str, str | None]]:
        """Head noun -> (answer kind, dimension)."""
        out: dict[str, tuple[str, str | None]] = {}
        for key, nouns in self.head_kinds.items():
            kind, _, dim = key.partition("/")
            out.update({n: (kind, dim or None) for n in nouns})
        return out


def alternation(words: tuple[str, ...]) -> str:
    """A regex alternation of words (longest first)."""
    return "|".join(sorted(words, key=len, reverse=True))


WORDS = PlannerWords.model_validate(yaml.safe_load(Path(__file__).with_name("words.yaml").read_text(encoding="utf-8")))
TYPE_WORDS = frozenset(stem(w) for w in WORDS.type_words)
PLACE_KEYS = frozenset(stem(w) for w in WORDS.place_keys)
PERSON_KEYS = frozenset(WORDS.person_keys)
GENERIC_KINDS = frozenset(WORDS.generic_kinds)
CLASS_KEYS = WORDS.class_keys
PLACE_NOUNS = alternation(WORDS.place_nouns)
PERSON_NOUNS = alternation(WORDS.person_nouns)
ORG_NOUNS = alternation(WORDS.org_nouns)
PEOPLE = alternation(WORDS.people)
