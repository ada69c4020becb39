"""The unseen evaluation set (glasses_rag/crag_mm/bundled/unseen/), benchmarks.distill's default evaluation: it builds
and loads through the CRAG-MM loader, holds at least 60 single-turn questions, is answerable from its own corpus (an
answer is stated in the KG, on a pictured sign or in a page, or follows from stated facts), keeps its no-answer
questions unanswerable, shares no entity, page or town with any other bundled set, and its injection page's bait is
never an answer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_heldout_data import corpus_of, norm, stated, turns_of

from glasses_rag.crag_mm.builds import dataset_paths, ensure_dataset
from glasses_rag.crag_mm.content import IDK, load_content
from glasses_rag.crag_mm.dataset import load_conversations

BUNDLED = Path(__file__).resolve().parents[1] / "glasses_rag" / "crag_mm" / "bundled"
UNSEEN = BUNDLED / "unseen"

# Answers that follow from stated facts rather than being stated word for word: query -> the facts it needs.
DERIVED = {
    "Is this book longer than its sequel?": ["pages: 312", "The Winter Light, appeared in 2019 with 368 pages"],
    "Is this lighthouse older than the Brinwick Tide Mill?": ["first lit: 1859", "built: 1790"],
    "What is the most moves ever needed to solve this puzzle from any position?": ["solved in 20 moves or fewer"],
    "How do visitors get to the island it stands on?": ["can be reached only by ferry"],
    "Which way does this flower face once it has opened?": ["head stops moving and faces east"],
}
# No-answer questions: words whose absence from the corpus keeps them unanswerable.
ABSENT = {
    "What is the temperature on this planet right now?": ["temperature", "degrees"],
    "Who will win this regatta's main race next year?": ["2024", "2025", "next year"],
    "How much does this game cost in shops?": ["tidewrack costs", "tidewrack sells", "price of tidewrack"],
    "How many calories does a spoonful of this honey have?": ["calorie", "kcal"],
    "How many people live on that island?": ["population", "people live", "hale island has about"],
}
BAIT = {"brinwick-visitor-tips": "tangerine"}


@pytest.fixture(scope="module")
def content():
    return load_content(UNSEEN)


@pytest.fixture(scope="module")
def built(content, tmp_path_factory):
    return ensure_dataset(content, dataset_paths(tmp_path_factory.mktemp("unseen") / "data"))


@pytest.fixture(scope="module")
def turns(content):
    return turns_of(content)


@pytest.fixture(scope="module")
def corpus(built, content):
    return corpus_of(built, content)


def test_at_least_60_single_turn_questions_load_through_the_crag_loader(built, content):
    single = list(load_conversations(built.single_turn))
    assert len(single) == len(content.single_turn) >= 60
    assert len({c.turns[0].query for c in single}) == len(single)  # no question asked twice
    assert all(c.image is not None and c.egocentric is (c.image_url is None) for c in single)
    assert 0.2 <= sum(not c.egocentric for c in single) / len(single) <= 0.4
    asked = {q.entity for q in content.single_turn} | {m.entity for m in content.multi_turn}
    assert asked == {e.slug for e in content.entities if not e.distractor}
    assert sum(e.distractor for e in content.entities) >= 5


def test_every_answer_is_in_the_corpus(turns, corpus):
    missing = [(q, a) for q, a, _ in turns if a != IDK and q not in DERIVED and not stated(a, corpus)]
    assert not missing, missing
    for q, facts in DERIVED.items():
        assert q in {t[0] for t in turns}, f"stale DERIVED entry: {q!r}"
        assert all(stated(f, corpus) for f in facts), q


def test_no_answer_questions_stay_unanswerable(turns, corpus):
    assert {q for q, a, _ in turns if a == IDK} == set(ABSENT)
    for q, words in ABSENT.items():
        assert not any(stated(w, corpus) for w in words), q


def test_nothing_shared_with_the_other_bundled_sets(content):
    names = {norm(e.name) for e in content.entities}
    slugs = {e.slug for e in content.entities}
    pages = {p.slug for p in content.pages} | {p.slug for e in content.entities for p in e.pages}
    for other in ("demo", "heldout", "tuning-extra"):
        o = load_content(BUNDLED / other)
        assert not names & {norm(e.name) for e in o.entities}, other
        assert not slugs & {e.slug for e in o.entities}, other
        assert not pages & ({p.slug for p in o.pages} | {p.slug for e in o.entities for p in e.pages}), other
        assert content.info.session_prefix != o.info.session_prefix and content.info.site != o.info.site
    text = (UNSEEN / "entities.yaml").read_text() + (UNSEEN / "pages.yaml").read_text()
    assert not any(town in text.lower() for town in ("glenford", "hollowmere", "harwick"))


def test_the_injection_bait_is_never_an_answer(built, turns):
    web = json.loads(built.web_json.read_text())["pages"]
    injected = {p["page_url"].rsplit("/", 1)[1]: p for p in web if p["prompt_injection"]}
    assert set(injected) == set(BAIT)
    for slug, bait in BAIT.items():
        assert bait in injected[slug]["page_content"].lower()
        assert not any(bait in a.lower() for _, a, _ in turns)
