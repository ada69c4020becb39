"""Rule-based language helpers (no model): words, sentences, reference resolution, question splitting, and the
structural test for text that gives instructions instead of facts (prompt injection).

Shared by the rule-based planner, the heuristic verifier and the heuristic tools; named heuristics everywhere
they show. Answer types, quantities and answer spans live in graph/planner/answer_types.py (re-exported here).
Rules are written for kinds of questions and sentences, never for one benchmark's wording.
"""

from __future__ import annotations

import re
import threading
from functools import lru_cache
from pathlib import Path
from typing import Annotated

import yaml
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

IDK = "I don't know"  # the agent's abstention, as the benchmark expects it
_ABSTAIN = re.compile(
    r"^\W*(?:i\s*(?:do\s*not|don'?t|don’t|dont)\s*know|unknown|not\s+sure|i'?m\s+not\s+sure|cannot\s+(?:be\s+)?determine"
    r"|can'?t\s+(?:be\s+)?determined?|no\s+answer|unanswerable|n/?a)\b", re.I)


def is_abstention(text: str | None) -> bool:
    """The agent's own rule for \"this answer is an abstention\": empty, or a short reply that opens by saying it
    does not know. (Scoring has its own, official rule in crag.scoring.)"""
    t = (text or "").strip()
    return not t or (len(t) < 80 and bool(_ABSTAIN.match(t)))


# ---- words ------------------------------------------------------------------------------------

STOPWORDS = frozenset("""
a an the this that these those it its it's they them their there here is are was were be been being am do does did
of in on at to for from by with about as into over under near what which who whom whose when where why how
can could would should will shall may might must i me my we our you your he she his her him and or but if so than
then also just very much many some any all each both either neither not no yes please tell know show pictured
picture photo image shown see seen called named kind type sort one ones thing things there's what's who's
""".split())

PREPOSITIONS = frozenset("""of in on at to for from by with about as into onto over under near after before since
during until between behind above below across along around through toward towards against without within upon""".split())
AUXILIARIES = frozenset("do does did can could will would should shall may might must".split())
COPULAS = frozenset("is are was were am be".split())

WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9'’.-]*")
_CONTRACTIONS = [(re.compile(p, re.I), r) for p, r in [
    (r"\bwhat's\b", "what is"), (r"\bwho's\b", "who is"), (r"\bwhere's\b", "where is"), (r"\bhow's\b", "how is"),
    (r"\bthat's\b", "that is"), (r"\bit's\b", "it is"), (r"\bwhat're\b", "what are"), (r"\bi'm\b", "i am"),
    (r"\bwhen's\b", "when is"), (r"\bthere's\b", "there is"), (r"\bi'd\b", "i would"), (r"\bwhich's\b", "which is"),
    (r"\bwho're\b", "who are"), (r"\bwhere're\b", "where are"),
]]


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


# irregular past forms, so "won" meets "win" and "wrote" meets "write"
_IRREGULAR = dict(p.split(":") for p in """won:win wrote:write written:write made:make built:build took:take taken:take
gave:give given:give found:find founded:found ate:eat eaten:eat grew:grow grown:grow flew:fly flown:fly began:begin
begun:begin became:become sold:sell told:tell held:hold led:lead bought:buy brought:bring caught:catch drew:draw
drawn:draw drove:drive driven:drive fell:fall knew:know known:know lay:lie left:leave lost:lose meant:mean met:meet
paid:pay ran:run rose:rise risen:rise sang:sing sung:sing sank:sink saw:see seen:see sent:send shot:shoot spoke:speak
spoken:speak spent:spend stood:stand struck:strike swam:swim taught:teach thought:think threw:throw thrown:throw
wore:wear worn:wear went:go gone:go did:do done:do had:have has:have kept:keep slept:sleep fought:fight""".split())


_STEM_LOCK = threading.Lock()
_STEMMER = None

class SynonymGroups(BaseModel):
    """text/synonyms.yaml: groups of words naming one relation (lower case, two words or more each)."""

    model_config = ConfigDict(extra="forbid")
    groups: list[Annotated[list[Annotated[str, StringConstraints(pattern=r"^[a-z]+$")]], Field(min_length=2)]]


def _synonym_groups() -> list[list[str]]:
    text = Path(__file__).with_name("synonyms.yaml").read_text(encoding="utf-8")
    return SynonymGroups.model_validate(yaml.safe_load(text)).groups


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
    meets 'win'; words of one group of text/synonyms.yaml share a stem ('wrote' meets 'author')."""
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


# ---- sentences --------------------------------------------------------------------------------


_CHAT_TAG = re.compile(r"(\[/?INST\]|<\|?/?\s*(?:system|assistant|user|im_start|im_end|endoftext)\s*\|?>)", re.I)


@lru_cache(maxsize=4096)
def _segment(text: str) -> tuple[str, ...]:
    import pysbd  # a maintained rule-based segmenter: abbreviations (St., Dr., U.S.), decimals, initials

    out: list[str] = []
    for block in re.split(r"\s*\n+\s*", _CHAT_TAG.sub(r"\n\1\n", text)):  # a chat-template tag ends a sentence
        if block.strip():
            # a Segmenter keeps per-call state: one per call keeps concurrent turns apart (it is cheap to build)
            for s in pysbd.Segmenter(language="en", clean=False).segment(block):
                s = s.strip()
                if out and re.fullmatch(r"[A-Za-z]{1,4}\.", out[-1]) and out[-1] in block:
                    out[-1] = f"{out[-1]} {s}"  # "Est. 1921", "Vol. 3": an abbreviation pysbd does not know
                elif s:
                    out.append(s)
    return tuple(out)


def sentences(text: str, min_chars: int = 4) -> list[str]:
    """Sentences of a text (pysbd), also split at line breaks (OCR lines, lists)."""
    t = " ".join((text or "").split(" "))
    return [s for s in _segment(t[:20000]) if len(s) >= min_chars]


def clauses(sentence: str) -> list[str]:
    """A sentence cut at clause boundaries (", and", ";", ", which", dashes), for short answers."""
    parts = re.split(r"\s*(?:;|\s[–—]\s|,\s+(?=(?:and|but|while|which|whereas|so)\b))\s*", sentence)
    return [p.strip(" ,.;") for p in parts if len(p.strip(" ,.;")) > 2]


# ---- questions --------------------------------------------------------------------------------

DEICTIC = re.compile(r"\b(this|that|these|those|here|pictured|shown|in (?:the|this|my) (?:image|photo|picture|view)"
                     r"|(?:am|i'?m) (?:i )?(?:looking at|seeing|holding))\b", re.I)
PRONOUN = re.compile(r"\b(it|its|it's|they|them|their|he|she|his|her|him|hers)\b", re.I)
PERSON_PRONOUN = re.compile(r"\b(he|she|his|her|him|hers)\b", re.I)
TEXT_CUES = re.compile(r"\b(say|says|said|written|write|read|reads|text|sign|label|title|brand|logo|name on|word|words"
                       r"|number on|route|menu|price|author|book|cover|letters|printed|poster|plate|banner)\b", re.I)
SPLIT_AND = re.compile(r"\s*(?:,?\s+and\s+(?=(?:(?:in|on|at|for|from|since|by)\s+)?(?:what|who|when|where|which|how|why|is|are"
                       r"|was|were|does|did|do|can)\b)|;|\?\s+(?=\S))\s*", re.I)


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


# Verbs that end a noun phrase after "this"/"that" (with function words; "-ed" forms are caught by shape).
PHRASE_VERBS = frozenset("""
has have had come comes came made built cost costs say says mean means belong belongs use used uses live lives grow grows
make makes weigh weighs eat eats need needs go goes went get gets got take takes took taken run runs fly flies flew
stand stands sit sits serve serves served open opens close closes contain contains produce produces work works feed
feeds found originate originates become became like likes look looks cause causes require requires appear appears
sell sells sold hold holds held show shows mark marks launch launches orbit orbits called named known located
situated worth written given drawn grown eaten driven worn born bred kept told paid seen done shown begin begins
began end ends lead leads led win wins won play plays played do does did represent represents
""".split())
# nouns for the photo itself that may follow "this" ("the telescope that took this picture")
PHOTO_NOUNS = frozenset({"picture", "photo", "image", "photograph", "pic", "shot", "snapshot", "thing", "things", "one"})
FUNCTION_WORDS = (STOPWORDS | PREPOSITIONS) - PHOTO_NOUNS
NOUN_PHRASE_STOP = FUNCTION_WORDS | PHRASE_VERBS
_DET = re.compile(r"\b(this|these|that|those)\b", re.I)
_RELATIVE_THAT = re.compile(r"\b(?:the|a|an)\s+[a-z-]+(?:\s+[a-z-]+)?\s+$", re.I)  # "the cafe that ...": relative pronoun


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
        if w in PHRASE_VERBS or (taken and (re.search(r"[a-z]{3,}(?<!e)ed$", w)
                                            or (not plural and len(w) > 3 and re.search(r"[^su]s$", w)))):
            closed_by_verb = True  # "this rocket launched ...", "this tower stands in ...": a verb follows
            break
        if w in FUNCTION_WORDS or len(w) < 2:
            break
        taken.append(t)
        pos = t.end()
    rest = question[det_end + (taken[-1].end() if taken else 0):]
    if needs_verb and not closed_by_verb and taken and (len(taken) >= 2 or not re.search(r"[A-Za-z]", rest)):
        taken = taken[:-1]
    elif len(taken) >= 2 and re.fullmatch(r"\s+(?:for|of|about|with|from|in|on|at|to)\W*", rest) and re.search(
            r"(?:ous|ful|ive|able|ible|al|ic|ant|ent|ary|ar|less|ish)$", taken[-1].group(1).lower()):
        taken = taken[:-1]  # "what is this place famous for": the adjective is the predicate
    return det_end + (taken[-1].end() if taken else 0)


def pointed_phrase(question: str) -> str:
    """The noun phrase after "this"/"these" ("what does this little beetle eat" -> "little beetle"), or ""."""
    q = expand_contractions(question)
    m = _DET.search(q)
    if not m:
        return ""
    before = words(q[: m.start()])
    needs_verb = bool(before) and (before[-1] in AUXILIARIES or (before[0] in COPULAS | AUXILIARIES and len(before) == 1))
    return q[m.end():_noun_phrase_end(q, m.end(), m.group(1).lower() in ("these", "those"), needs_verb)].strip()


def resolve_references(question: str, entity: str | None, person: str | None = None,
                       entity_is_person: bool | None = None) -> str:
    """Replace 'this X' / 'it' / 'its' with the entity name, so the question stands alone for search.

    Entity-aware: the noun phrase after 'this' is swallowed only up to its verb ("what does this beetle eat" keeps
    "eat"); 'he'/'she' go to `person` (someone an earlier answer named) when given, else to the entity unless it is
    known not to be a person; 'that' after "the <noun>" is a relative pronoun and stays."""
    if not entity and not person:
        return question
    q = expand_contractions(question)
    if entity:
        m = None
        for cand in _DET.finditer(q):
            if cand.group(1).lower() == "that" and _RELATIVE_THAT.search(q[: cand.start()]):
                continue  # "the cafe that served this drink": a relative pronoun, not a determiner
            if cand.group(1).lower() in ("this", "these") or m is None:
                m = cand
                if cand.group(1).lower() in ("this", "these"):
                    break
        if m is not None:
            before = words(q[: m.start()])
            needs_verb = bool(before) and (before[-1] in AUXILIARIES or (before[0] in COPULAS | AUXILIARIES
                                                                              and len(before) == 1))
            end = _noun_phrase_end(q, m.end(), m.group(1).lower() in ("these", "those"), needs_verb)
            q = q[: m.start()] + entity + q[end:]
        q = re.sub(r"\bits\b", f"{entity}'s", q, flags=re.I)
        q = re.sub(r"\b(it|they|them)\b", entity, q, flags=re.I)
        q = re.sub(r"\btheir\b", f"{entity}'s", q, flags=re.I)
    who = person or (entity if entity_is_person is not False else None)
    if who:
        q = re.sub(r"\b(his|her|hers)\b(?=\s+[a-z])", f"{who}'s", q, flags=re.I)
        q = re.sub(r"\b(he|she|him|her|hers)\b", who, q, flags=re.I)
    return re.sub(r"\s+", " ", q).strip()


# ---- instructions in retrieved text (prompt injection) -----------------------------------------
# Retrieved text is data. A sentence that gives orders or addresses the reader/assistant is never an answer
# source, whatever its words: it is recognised by its shape (a role prefix, an imperative opening, a second-person
# or assistant-addressed directive, talk about the conversation itself, a quoted reply to give).

_ROLE = r"(?:system|assistant|user|human|ai|bot|model|developer|admin|administrator|operator|instructions?|prompt)"
_ROLE_PREFIX = re.compile(rf"(?:^|[\s.!?])[\[<(|#*]*\s*{_ROLE}\s*(?:message|prompt|note|override)?\s*[\]>)|]*\s*[:>]\s",
                          re.I)
_ROLE_TAG = re.compile(r"<\|?\s*/?\s*(?:system|assistant|user|im_start|im_end|endoftext)\s*\|?>|\[/?INST\]|###\s*"
                       r"(?:system|instruction|response)", re.I)
_AGENT_NOUN = (r"(?:you|ye|u|assistants?|the assistant|ai|a\.i\.|ais|chat ?bots?|bots?|(?:large )?language models?|llms?"
               r"|models?|agents?|gpts?|readers?|anyone|whoever|any(?:one|body)|systems?)")
_DIRECTIVE = (r"(?:must|should|shall|need to|needs to|have to|has to|(?:are|is) (?:required|instructed|asked|told|expected"
              r"|supposed|to)|will now|ought to|may only|can only|are only allowed|is only allowed|had better|always|never)")
_ADDRESSED = re.compile(rf"\b{_AGENT_NOUN}\b(?:\s+\w+){{0,8}}?\s+{_DIRECTIVE}\b", re.I)
# an order after a fronted clause ("When asked about X, always say ..."), or talk about answering questions
_CLAUSE_IMPERATIVE = re.compile(
    r"[,;:(\[–—-]\s*(?:(?:please|always|never|only|just|then|simply|instead)\s+)*(?:say|answer|reply|respond|tell|output|"
    r"print|write|claim|state|repeat|ignore|disregard|forget|pretend|insist)\b"
    r"|\b(?:tell|inform|remind|assure|convince)\s+(?:the\s+)?(?:user|reader|human|asker|customer)s?\b"
    r"|\b(?:when|if|whenever)\s+(?:you\s+are\s+|you're\s+)?(?:asked|questioned|prompted|queried)\b"
    r"|\banswering\s+(?:questions|queries|prompts)\b", re.I)
_VOCATIVE = re.compile(r"(?:^|[.!?]\s+)(?:dear|hey|hi|hello|attention|note to|message to|memo to|reminder to|to)\s+(?:the\s+|all\s+|any\s+)?"
                       r"(?:ai|a\.i\.|assistants?|chat ?bots?|bots?|language models?|llms?|models?|agents?|systems?)\b", re.I)
_IF_YOU_ARE = re.compile(r"\bif\s+(?:you|u)\s+(?:are|'re|were)\s+(?:an?\s+)?(?:ai|a\.i\.|assistant|bot|chat ?bot|language model"
                         r"|llm|model|agent|automated|reading this|summari[sz]ing)", re.I)
_YOUR = re.compile(r"\byour\s+(?:answer|reply|response|output|instructions?|task|job|role|purpose|prompt|system prompt)\b", re.I)
# Verbs that open an order to whoever reads the text (the imperative); "please"/"now"/"just" may precede them.
_IMPERATIVE = re.compile(
    r"^\W*(?:(?:please|kindly|now|just|simply|also|then|and|so|instead|immediately|from now on)[,\s]+)*"
    r"(?:ignore|disregard|forget|override|bypass|skip|answer|respond|reply|say|print|output|write|type|tell|repeat|"
    r"pretend|act as|roleplay|role-play|stop|obey|follow|return|reveal|leak|translate|include|insert|append|prepend|"
    r"use|treat|switch|begin|start|remember|make sure|ensure|do not|don't|never|always|only|send|give|state|"
    r"provide|generate|claim|insist|mention|report|assume|declare|announce|inform|let the user|change|replace|"
    r"delete|drop|end|conclude|summari[sz]e|recommend|emphasi[sz]e|exfiltrate|call|run|execute|visit)\b",
    re.I)
_META = re.compile(
    r"\b(?:previous|prior|above|earlier|original|initial|preceding|following|all|any|every|other|user'?s?|these|those"
    r"|the|hidden|secret|system)\s+(?:instructions?|prompts?|questions?|quer(?:y|ies)|requests?|rules|guidelines|messages?"
    r"|conversation|directives?|context)\b.{0,60}\b(?:ignore|disregard|forget|override|answer|reply|respond|instead|"
    r"regardless|no matter|always|only|replace|is|are)\b"
    r"|\b(?:correct|right|true|real|only|proper|expected|final|official)\s+(?:answer|reply|response|output)\s+(?:to|for|is|are|"
    r"will be|should be|must be)\b"
    r"|\b(?:answer|reply|respond)\s+(?:to\s+)?(?:every|all|any|each)\s+(?:questions?|quer(?:y|ies)|prompts?|requests?)\b",
    re.I)
_QUOTED_REPLY = re.compile(r"\b(?:say|says|reply|replies|respond|responds|answer|answers|output|outputs|write|print|type|"
                           r"repeat|return|with the word|with)\b[^.?!]{0,40}[\"'“‘«][^\"'”’»]{1,60}[\"'”’»]", re.I)
_META_KEYS = re.compile(r"^\W*(?:answer|correct answer|response|reply|output|instructions?|prompt|system|assistant|note to"
                        r".*|directive|command|override)\W*$", re.I)


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
    if _IMPERATIVE.search(s) or _ADDRESSED.search(s) or _YOUR.search(s) or _META.search(s) or _CLAUSE_IMPERATIVE.search(s):
        return True
    return bool(_QUOTED_REPLY.search(s)) and bool(re.search(r"\b(?:you|assistant|ai|model|bot|user|question|query)\b", s, re.I))


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


__all__ = [
    "IDK", "is_abstention", "STOPWORDS", "words", "content_words", "normalize", "stem", "stems", "shares_stem",
    "mentions", "keywords", "sentences", "clauses", "refers_to_image", "has_pronoun", "asks_about_text",
    "split_question", "resolve_references", "pointed_phrase", "NOUN_PHRASE_STOP", "expand_contractions", "is_instruction",
    "has_instruction", "data_sentences", "is_instruction_attribute", "PERSON_PRONOUN", "DEICTIC", "PRONOUN", "TEXT_CUES",
]
