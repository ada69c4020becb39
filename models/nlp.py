"""Rule-based language helpers (no model): words, answer types, reference resolution, sentence splitting, prompt-injection cues.

Shared by the rule-based planner, the heuristic verifier and the heuristic tools; named heuristics everywhere they show."""

from __future__ import annotations

import re

IDK = "I don't know"  # the agent's abstention, as the benchmark expects it
_ABSTAIN = re.compile(
    r"^\W*(?:i\s*(?:do\s*not|don'?t|don’t|dont)\s*know|unknown|not\s+sure|i'?m\s+not\s+sure|cannot\s+(?:be\s+)?determine"
    r"|can'?t\s+(?:be\s+)?determined?|no\s+answer|unanswerable|n/?a)\b", re.I)


def is_abstention(text: str | None) -> bool:
    """The agent's own rule for \"this answer is an abstention\": empty, or a short reply that opens by saying it
    does not know. (Scoring has its own, official rule in crag.scoring.)"""
    t = (text or "").strip()
    return not t or (len(t) < 80 and bool(_ABSTAIN.match(t)))

STOPWORDS = frozenset("""
a an the this that these those it its it's they them their there here is are was were be been being am do does did
of in on at to for from by with about as into over under near what which who whom whose when where why how
can could would should will shall may might must i me my we our you your he she his her him and or but if so than
then also just very much many some any all each both either neither not no yes please tell know show pictured
picture photo image shown see seen called named kind type sort one ones thing things there's what's who's
""".split())

DEICTIC = re.compile(r"\b(this|that|these|those|here|pictured|shown|in (?:the|this) (?:image|photo|picture))\b", re.I)
PRONOUN = re.compile(r"\b(it|its|it's|they|them|their|he|she|his|her)\b", re.I)
TEXT_CUES = re.compile(r"\b(say|says|written|read|text|sign|label|title|brand|logo|name on|word|words|number|route|menu|price|author|book|cover)\b", re.I)
SPLIT_AND = re.compile(r"\s*(?:,?\s+and\s+(?=(?:(?:in|on|at|for|from|since|by)\s+)?(?:what|who|when|where|which|how|why|is|are|was|were|does|did|do|can)\b)|;|\?\s+(?=\S))\s*", re.I)
WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9'.-]*")


def words(text: str) -> list[str]:
    return [w.strip(".'").lower() for w in WORD.findall(text or "") if w.strip(".'")]


def content_words(text: str) -> list[str]:
    return [w for w in words(text) if w not in STOPWORDS and len(w) > 1]


def refers_to_image(question: str) -> bool:
    return bool(DEICTIC.search(question))


def has_pronoun(question: str) -> bool:
    return bool(PRONOUN.search(question))


def asks_about_text(question: str) -> bool:
    return bool(TEXT_CUES.search(question))


NOUN_PHRASE_STOP = STOPWORDS | {"has", "have", "had", "come", "comes", "made", "built", "called", "cost", "costs", "say", "says",
                        "mean", "means", "belong", "belongs", "use", "used", "live", "lives", "grow", "grows", "make", "weigh"}


def resolve_references(question: str, entity: str | None) -> str:
    """Replace 'this X' / 'it' / 'its' with the entity name, so the question stands alone for search."""
    if not entity:
        return question
    # 'this'/'these' first: 'that' is as often a relative pronoun ("the cafe that served this drink")
    m = re.search(r"\b(this|these)\b", question, flags=re.I) or re.search(r"\b(that|those)\b", question, flags=re.I)
    q = question
    if m:
        rest = question[m.end():]
        # swallow the noun phrase after the determiner: up to three words that are not verbs/stopwords
        n = 0
        for w in re.finditer(r"\s+([A-Za-z-]+)", rest):
            if w.start() != n or w.group(1).lower() in NOUN_PHRASE_STOP or len(w.group(1)) < 2:
                break
            n = w.end()
            if n and rest[:n].count(" ") >= 3:
                break
        q = question[: m.start()] + entity + rest[n:]
    q = re.sub(r"\bits\b", f"{entity}'s", q, flags=re.I)
    q = re.sub(r"\b(it|they|them)\b", entity, q, flags=re.I)
    return re.sub(r"\s+", " ", q).strip()


def split_question(question: str) -> list[str]:
    """Split a compound question into parts that each ask one thing."""
    parts = [p.strip(" ,?") for p in SPLIT_AND.split(question) if p and p.strip(" ,?")]
    return [p + "?" for p in parts] if len(parts) > 1 else [question]


def sentences(text: str) -> list[str]:
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+(?=[A-Z0-9\"'])", text or "") if len(s.strip()) > 3]


def normalize(text: str) -> str:
    t = re.sub(r"[^a-z0-9 ]+", " ", (text or "").lower())
    t = re.sub(r"\b(a|an|the)\b", " ", t)
    return re.sub(r"\s+", " ", t).strip()


def keywords(question: str, entity: str | None = None, limit: int = 8) -> str:
    """Search keywords: the entity name plus the question's content words."""
    extra = [w for w in content_words(question) if not entity or w not in normalize(entity).split()]
    return " ".join(([entity] if entity else []) + extra[:limit]).strip()


# ---- expected answer types -------------------------------------------------------------------
# (type, question pattern); first match wins. Used to reject answers of the wrong kind.
_TYPE_RULES: list[tuple[str, re.Pattern]] = [
    ("duration", re.compile(r"\bhow long (?:does|did|do|will|would)\b|\bhow often\b", re.I)),
    ("money", re.compile(r"\bhow much\b.*\b(cost|costs|price|pay|fare)\b|\b(price|fare|cost) of\b|\bhow much is (?:a|the|one)\b.*\b(fare|ticket|bottle)\b", re.I)),
    ("year", re.compile(r"\b(what|which) year\b|\bin what year\b|\bwhen (?:was|were|did|is)\b.*\b(born|built|founded|established|published|launched|opened|released|made|created|discovered|start|begin|first)\b", re.I)),
    ("number", re.compile(r"\bhow (?:many|tall|high|long|far|big|large|heavy|old|deep|wide|much)\b", re.I)),
    ("weekday", re.compile(r"\b(which|what) day\b", re.I)),
    ("place", re.compile(r"^\s*where\b|\b(?:which|what) (?:city|country|town|state|province|continent|island|lake|river|mountain|street|region)\b", re.I)),
    ("person", re.compile(r"^\s*(?:who|whom)\b(?!\s+(?:is|are)\s+(?:this|that|these|those)\b)|\bwhich (?:person|author|artist|architect|company|brand)\b", re.I)),
]
_WEEKDAYS = re.compile(r"\b(monday|tuesday|wednesday|thursday|friday|saturday|sunday)s?\b", re.I)
_NUMBER = re.compile(r"\d|\b(one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|dozen|hundred|thousand|million|billion|half)\b", re.I)
_YEAR = re.compile(r"\b(1\d{3}|20\d{2})\b|\b\d{1,4}\s*(?:ad|bc|bce|ce)\b|\b(?:ad|bc)\s*\d{1,4}\b", re.I)
_MONEY = re.compile(r"[$€£¥]\s*\d|\d\s*(?:dollars|euros|pounds|cents|usd|eur)\b|\bfree\b", re.I)
_DURATION = re.compile(r"\d.*\b(second|minute|hour|day|week|month|year)s?\b|\bevery\b", re.I)
_NAME_WORD = re.compile(r"\b[A-Z][a-z]+")
COMPARISON = re.compile(r"\b(\w+er|more \w+|less \w+)\b[^?]*,[^?]*\bor\b|\bbefore or after\b|\bhow many (?:years|days|months) (?:after|before|between|since)\b", re.I)


def expected_type(question: str) -> str | None:
    for name, pat in _TYPE_RULES:
        if pat.search(question or ""):
            return name
    return None


def matches_type(answer: str, kind: str | None, *, cased: bool = True) -> bool:
    """Does `answer` look like an answer of `kind`? `cased=False` for lower-cased KG values."""
    a = answer or ""
    if kind is None:
        return True
    if kind == "number":
        return bool(_NUMBER.search(a))
    if kind == "year":
        return bool(_YEAR.search(a))
    if kind == "money":
        return bool(_MONEY.search(a))
    if kind == "duration":
        return bool(_DURATION.search(a))
    if kind == "weekday":
        return bool(_WEEKDAYS.search(a))
    if kind in ("person", "place"):
        if (kind == "person" and _YEAR.search(a)) or not re.search(r"[A-Za-z]", a):
            return False
        # a proper name somewhere past the first word (sentence-initial capitals prove nothing)
        return bool(_NAME_WORD.search(a.split(" ", 1)[1] if " " in a.strip() else a)) if cased else True
    return True


# Text aimed at the agent rather than the reader: never used as evidence for an answer.
INJECTION = re.compile(
    r"\b(ignore|disregard|forget)\b.{0,40}\b(instructions?|prompts?|above|previous|question)\b"
    r"|\b(you|assistants?|the assistant|the model|ai)\s+(must|should|shall|will)\s+(answer|respond|reply|say|reveal|output|print)\b"
    r"|\b(always|only)\s+(answer|respond|reply|say)\b|\b(answer|reply|respond) (?:only )?with\b"
    r"|\b(system|assistant|user)\s*:|\b(system|hidden) prompt\b|\bcorrect answer (?:to|is)\b",
    re.I,
)


def stem(word: str) -> str:
    """A crude stem (drop common suffixes) so 'manufactures' meets 'manufacturer'."""
    w = word.lower()
    for suf in ("ers", "ing", "ed", "er", "es", "s", "al"):
        if len(w) > len(suf) + 3 and w.endswith(suf):
            return w[: -len(suf)]
    return w


def shares_stem(a: str, b: str) -> bool:
    sa = {stem(w) for w in content_words(a)}
    return bool(sa & {stem(w) for w in content_words(b)})
