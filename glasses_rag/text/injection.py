"""Instructions in retrieved text (prompt injection): recognised by their shape, never answer sources.

Retrieved text is data. A sentence that gives orders or addresses the reader/assistant is never an answer
source, whatever its words: it is recognised by its shape (a role prefix, an imperative opening, a second-person
or assistant-addressed directive, talk about the conversation itself, a quoted reply to give).
"""

from __future__ import annotations

import re

from glasses_rag.text.sentences import sentences

_ROLE = r"(?:system|assistant|user|human|ai|bot|model|developer|admin|administrator|operator|instructions?|prompt)"
_ROLE_PREFIX = re.compile(
    rf"(?:^|[\s.!?])[\[<(|#*]*\s*{_ROLE}\s*(?:message|prompt|note|override)?\s*[\]>)|]*\s*[:>]\s", re.I
)
_ROLE_TAG = re.compile(
    r"<\|?\s*/?\s*(?:system|assistant|user|im_start|im_end|endoftext)\s*\|?>|\[/?INST\]|###\s*"
    r"(?:system|instruction|response)",
    re.I,
)
_AGENT_NOUN = (
    r"(?:you|ye|u|assistants?|the assistant|ai|a\.i\.|ais|chat ?bots?|bots?|(?:large )?language models?|llms?"
    r"|models?|agents?|gpts?|readers?|anyone|whoever|any(?:one|body)|systems?)"
)
_DIRECTIVE = (
    r"(?:must|should|shall|need to|needs to|have to|has to|(?:are|is) (?:required|instructed|asked|told|expected"
    r"|supposed|to)|will now|ought to|may only|can only|are only allowed|is only allowed|had better|always|never)"
)
_ADDRESSED = re.compile(rf"\b{_AGENT_NOUN}\b(?:\s+\w+){{0,8}}?\s+{_DIRECTIVE}\b", re.I)
# an order after a fronted clause ("When asked about X, always say ..."), or talk about answering questions
_CLAUSE_IMPERATIVE = re.compile(
    r"[,;:(\[–—-]\s*(?:(?:please|always|never|only|just|then|simply|instead)\s+)*(?:say|answer|reply|respond|tell|output|"
    r"print|write|claim|state|repeat|ignore|disregard|forget|pretend|insist)\b"
    r"|\b(?:tell|inform|remind|assure|convince)\s+(?:the\s+)?(?:user|reader|human|asker|customer)s?\b"
    r"|\b(?:when|if|whenever)\s+(?:you\s+are\s+|you're\s+)?(?:asked|questioned|prompted|queried)\b"
    r"|\banswering\s+(?:questions|queries|prompts)\b",
    re.I,
)
_VOCATIVE = re.compile(
    r"(?:^|[.!?]\s+)(?:dear|hey|hi|hello|attention|note to|message to|memo to|reminder to|to)\s+"
    r"(?:the\s+|all\s+|any\s+)?"
    r"(?:ai|a\.i\.|assistants?|chat ?bots?|bots?|language models?|llms?|models?|agents?|systems?)\b",
    re.I,
)
_IF_YOU_ARE = re.compile(
    r"\bif\s+(?:you|u)\s+(?:are|'re|were)\s+(?:an?\s+)?(?:ai|a\.i\.|assistant|bot|chat ?bot|language model"
    r"|llm|model|agent|automated|reading this|summari[sz]ing)",
    re.I,
)
_YOUR = re.compile(
    r"\byour\s+(?:answer|reply|response|output|instructions?|task|job|role|purpose|prompt|system prompt)\b", re.I
)
# Verbs that open an order to whoever reads the text (the imperative); "please"/"now"/"just" may precede them.
_IMPERATIVE = re.compile(
    r"^\W*(?:(?:please|kindly|now|just|simply|also|then|and|so|instead|immediately|from now on)[,\s]+)*"
    r"(?:ignore|disregard|forget|override|bypass|skip|answer|respond|reply|say|print|output|write|type|tell|repeat|"
    r"pretend|act as|roleplay|role-play|stop|obey|follow|return|reveal|leak|translate|include|insert|append|prepend|"
    r"use|treat|switch|begin|start|remember|make sure|ensure|do not|don't|never|always|only|send|give|state|"
    r"provide|generate|claim|insist|mention|report|assume|declare|announce|inform|let the user|change|replace|"
    r"delete|drop|end|conclude|summari[sz]e|recommend|emphasi[sz]e|exfiltrate|call|run|execute|visit)\b",
    re.I,
)
_META = re.compile(
    r"\b(?:previous|prior|above|earlier|original|initial|preceding|following|all|any|every|other|user'?s?|these|those"
    r"|the|hidden|secret|system)\s+(?:instructions?|prompts?|questions?|quer(?:y|ies)|requests?|rules|guidelines|messages?"
    r"|conversation|directives?|context)\b.{0,60}\b(?:ignore|disregard|forget|override|answer|reply|respond|instead|"
    r"regardless|no matter|always|only|replace|is|are)\b"
    r"|\b(?:correct|right|true|real|only|proper|expected|final|official)\s+(?:answer|reply|response|output)\s+(?:to|for|is|are|"
    r"will be|should be|must be)\b"
    r"|\b(?:answer|reply|respond)\s+(?:to\s+)?(?:every|all|any|each)\s+(?:questions?|quer(?:y|ies)|prompts?|requests?)\b",
    re.I,
)
_QUOTED_REPLY = re.compile(
    r"\b(?:say|says|reply|replies|respond|responds|answer|answers|output|outputs|write|print|type|"
    r"repeat|return|with the word|with)\b[^.?!]{0,40}[\"'“‘«][^\"'”’»]{1,60}[\"'”’»]",
    re.I,
)
_META_KEYS = re.compile(
    r"^\W*(?:answer|correct answer|response|reply|output|instructions?|prompt|system|assistant|note to"
    r".*|directive|command|override)\W*$",
    re.I,
)


def is_instruction(sentence: str) -> bool:
    """True when a sentence gives orders or talks to the reader/assistant instead of stating a fact.

    Shapes, not words of one attack: a role prefix or chat-template tag ("system:", "<|assistant|>"), an imperative
    opening, a directive aimed at "you"/an assistant/a model, a vocative ("note to AI"), talk about the conversation
    itself ("previous instructions", "the correct answer to"), or a quoted reply to give."""
    s = " ".join((sentence or "").split())
    if not s:
        return False
    if _ROLE_PREFIX.search(" " + s) or _ROLE_TAG.search(s) or _VOCATIVE.search(s) or _IF_YOU_ARE.search(s):
        return True
    if (
        _IMPERATIVE.search(s)
        or _ADDRESSED.search(s)
        or _YOUR.search(s)
        or _META.search(s)
        or _CLAUSE_IMPERATIVE.search(s)
    ):
        return True
    return bool(_QUOTED_REPLY.search(s)) and bool(
        re.search(r"\b(?:you|assistant|ai|model|bot|user|question|query)\b", s, re.I)
    )


def has_instruction(text: str) -> bool:
    """Any sentence of `text` is an instruction (see is_instruction)."""
    return any(is_instruction(s) for s in sentences(text, min_chars=1))


def data_sentences(text: str) -> list[str]:
    """The sentences of retrieved text that state something (instructions dropped): what answers may come from."""
    return [s for s in sentences(text) if not is_instruction(s)]


def is_instruction_attribute(key: str, value: str) -> bool:
    """A KG attribute that carries instructions instead of a property (a key such as 'answer' or 'note to AI', or a
    value shaped like an instruction)."""
    return bool(_META_KEYS.match(str(key))) or has_instruction(str(value))
