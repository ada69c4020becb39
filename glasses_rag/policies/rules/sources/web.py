"""The web answer source: the best web sentence that answers, and the answer span cut out of it."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from glasses_rag.core.types import Hit
from glasses_rag.policies.rules.answer_types import answer_span, matches, name_phrases
from glasses_rag.policies.rules.candidates import Candidate, Part
from glasses_rag.policies.rules.lexicon import TYPE_WORDS
from glasses_rag.policies.rules.reading import TurnReading
from glasses_rag.policies.rules.relations import relation_clash
from glasses_rag.policies.rules.spec import ExpectedAnswer
from glasses_rag.policies.rules.web_text import (
    names_another,
    page_sentences,
    page_subject,
    priced_thing,
    with_subject,
    yes_no,
)
from glasses_rag.text import nlp


@dataclass
class Ask:
    """What a web sentence must answer, worked out once per question."""

    question: str
    spec: ExpectedAnswer
    entity: str | None  # what the sentence must be about (the entity, or hop 1's answer)
    must_mention: str | None
    topic: set[str]  # stems that show a text is about it
    ent_words: set[str]
    qwords: set[str]  # what is asked, less the entity and the words that only name the answer's type
    asked: set[str]  # the same less the names in the question
    priced: set[str]  # a price question: what it prices
    names: list[str]  # the names the question itself holds
    avoid: list[str] = field(default_factory=list)


def _ask(
    turn: TurnReading,
    part: Part,
    question: str,
    spec: ExpectedAnswer,
    must_mention: str | None,
    avoid: list[str] | None,
) -> Ask:
    entity = must_mention or part.entity
    topic = (
        turn.topic_words(part.entity, turn.entity_hit if part.entity else None)
        if not must_mention
        else nlp.stems(must_mention)
    )
    ent_words = set(nlp.normalize(entity or "").split())
    qwords = (
        nlp.stems(" ".join(w for w in nlp.content_words(question) if w not in ent_words))
        - topic
        - TYPE_WORDS
        - ({nlp.stem(spec.noun or "")} if spec.kind != "text" else set())
    )
    # the words that say what is asked about, less the names in the question ("who designed Neil Armstrong's
    # spacesuit": a sentence about Neil Armstrong that says nothing of designing or spacesuits does not answer)
    name_words = {nlp.stem(w) for p in name_phrases(question) for w in re.findall(r"\b[A-Z][\w'-]*", p.text)}
    priced = (priced_thing(question) - topic - nlp.stems(entity or "")) if spec.kind == "money" else set()
    names = [p.text for p in name_phrases(question)]
    return Ask(
        question,
        spec,
        entity,
        must_mention,
        topic,
        ent_words,
        qwords,
        qwords - name_words,
        priced,
        names,
        list(avoid or []),
    )


def _page_topic(turn: TurnReading, ask: Ask, h: Hit) -> set[str] | None:
    """Stems that show a sentence of this page is about the entity; None when the page is not to be read."""
    page = f"{h.title or ''}. {h.content or h.snippet}"
    page_topic = ask.topic
    if ask.must_mention:
        if not nlp.mentions(page, ask.must_mention):
            return None
        alias = re.search(re.escape(ask.must_mention) + r"\s*\(([^()]{2,30})\)", page, re.I)
        page_topic = ask.topic | (nlp.stems(alias.group(1)) if alias else set())  # "Foo Bar Observatory (FBO)"
    if any(
        nlp.mentions(h.title or "", o) and not (ask.entity and nlp.mentions(h.title or "", ask.entity))
        for o in turn.other_names
    ):
        return None  # a page about another entity the image search also found (a look-alike)
    return page_topic


def _sentence_fits(turn: TurnReading, ask: Ask, h: Hit, sent: str, page_topic: set[str], title_topical: bool) -> bool:
    spec, entity = ask.spec, ask.entity
    if not matches(sent, spec, units=turn.units):
        return False
    if spec.counted and nlp.stem(spec.counted) not in nlp.stems(sent):
        return False  # "how many galaxies" needs a sentence about galaxies
    if ask.priced and not ask.priced <= nlp.stems(sent):
        return False  # "how much is a return ticket": a sentence about one-way tickets does not say
    if (
        spec.kind == "money"
        and not entity
        and not turn.history_entity
        and not any(nlp.mentions(f"{h.title or ''}. {sent}", n) for n in ask.names)
    ):
        return False  # a price is someone's: "how much is the shakshuka?" names no seller, a cafe's price does not say
    if entity and not (title_topical or page_topic & nlp.stems(sent)):
        return False  # not about the entity asked about
    if (
        entity
        and not ask.must_mention
        and not (nlp.mentions(sent, entity) or nlp.mentions(h.title or "", entity))
        and names_another(f"{h.title or ''}. {sent}", entity, page_topic)
    ):
        return False  # about another thing of the same kind ("Sol Bakery" for a photo of "Luna Bakery")
    return not any(nlp.mentions(sent, o) and not nlp.mentions(sent, entity or "") for o in turn.other_names)


def _sentences(turn: TurnReading, ask: Ask) -> list[tuple[str, Hit]]:
    """The web sentences that may answer: factual, of the expected type, about the entity (its name or class in
    the sentence or the page title) and not about a look-alike."""
    out: list[tuple[str, Hit]] = []
    for h in turn.web_hits:
        page_topic = _page_topic(turn, ask, h)
        if page_topic is None:
            continue
        subject = page_subject(h)
        title_topical = bool(page_topic & nlp.stems(h.title or "")) or bool(
            ask.must_mention and subject and nlp.mentions(subject, ask.must_mention)
        )  # the page opens with it
        for sent in page_sentences(h):
            sent = with_subject(sent, subject)
            if _sentence_fits(turn, ask, h, sent, page_topic, title_topical):
                out.append((sent, h))
    return out


def _span(turn: TurnReading, ask: Ask, sent: str) -> str | None:
    spec = ask.spec
    if spec.kind == "yes_no":
        return yes_no(sent, ask.qwords, ask.ent_words)
    known = (
        [str(v) for v in (turn.entity_hit.attributes or {}).values()]
        if (spec.other and turn.entity_hit is not None)
        else []
    )
    return answer_span(sent, spec, ask.question, avoid=[ask.entity or "", *ask.avoid, *known], units=turn.units)


def _score(turn: TurnReading, ask: Ask, sent: str, text: str, sim: float) -> float | None:
    """The sentence's score as an answer, None when it does not answer what is asked."""
    spec, qwords = ask.spec, ask.qwords
    swords = nlp.stems(sent)
    noun_typed = bool(spec.noun and spec.kind != "text" and nlp.stem(spec.noun) in nlp.stems(text))
    if qwords and not (ask.asked or qwords) & swords and not noun_typed:
        return None  # about the entity, but not about what is asked ("which lake": a lake's name will do)
    typed = spec.kind != "text" or bool(spec.noun and nlp.stem(spec.noun) in nlp.stems(sent if spec.other else text))
    if not typed and (not qwords or len(qwords & swords) < turn.c.min_free_text_coverage * len(qwords)):
        return None  # a free-text answer has no type to check: the sentence must cover what is asked
    if not typed and relation_clash(sent, ask.question):
        return None  # "what is it made of?": a sentence saying where it is made in does not say
    return (
        sim
        + 0.05 * len(qwords & swords) / max(1, len(qwords))
        + (0.05 if ask.entity and nlp.mentions(sent, ask.entity) else 0.0)
        + (0.1 if spec.noun and spec.kind != "text" and nlp.stem(spec.noun) in swords else 0.0)
    )  # "which county"


def web_answer(
    turn: TurnReading,
    part: Part,
    question: str | None = None,
    spec: ExpectedAnswer | None = None,
    must_mention: str | None = None,
    avoid: list[str] | None = None,
) -> Candidate | None:
    """The best web sentence that answers `question` (default: the part's), and the answer span in it."""
    ask = _ask(turn, part, question or part.resolved, spec or part.spec, must_mention, avoid)
    cands = _sentences(turn, ask)
    if not cands:
        return None
    sims = turn.p.embedder.similarity(ask.question, [s for s, _ in cands])
    best: tuple[float, Candidate] | None = None
    for (sent, h), sim in zip(cands, sims):
        if not nlp.stems(sent) - ask.qwords - ask.topic:
            continue  # only repeats the question
        text = _span(turn, ask, sent)
        score = _score(turn, ask, sent, text, float(sim)) if text else None
        if text and score is not None and (best is None or score > best[0]):
            best = (score, Candidate(turn.short(text), 0.0, f"web sentence from {h.url} (match {score:.2f})", sent))
    if best is None or best[0] < turn.c.min_web_sim:
        return None
    score, cand = best
    cand.confidence = min(1.0, score) * ((0.6 + 0.4 * turn.entity_conf) if turn.depends_on_image(part) else 1.0)
    return cand


def web_span(turn: TurnReading, part: Part) -> Candidate | None:
    """The web sentence that answers the part (see web_answer)."""
    return web_answer(turn, part)
