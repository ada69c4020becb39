"""The paraphrase set (glasses_rag/crag_mm/bundled/demo-paraphrase) is the demo said in other words: same rows,
turns, answers, labels and images; every query reworded beyond case and punctuation."""

from __future__ import annotations

import re

import pytest

from glasses_rag.crag_mm.builds import dataset_paths, ensure_dataset
from glasses_rag.crag_mm.content import load_content
from glasses_rag.crag_mm.dataset import load_conversations
from glasses_rag.crag_mm.demo import DEMO_CONTENT, ensure_demo, load_question_meta

PARAPHRASE_CONTENT = DEMO_CONTENT.parent / "demo-paraphrase"

# Words that carry no content of their own: a paraphrase must change more than these.
FUNCTION_WORDS = {
    "a",
    "an",
    "the",
    "this",
    "that",
    "these",
    "those",
    "it",
    "its",
    "he",
    "she",
    "her",
    "his",
    "they",
    "them",
    "their",
    "i",
    "me",
    "my",
    "you",
    "your",
    "we",
    "our",
    "one",
    "is",
    "are",
    "was",
    "were",
    "be",
    "been",
    "am",
    "do",
    "does",
    "did",
    "has",
    "have",
    "had",
    "can",
    "could",
    "would",
    "should",
    "will",
    "s",
    "m",
    "re",  # the tails of it's, i'm, they're
    "of",
    "in",
    "on",
    "at",
    "to",
    "for",
    "from",
    "by",
    "with",
    "about",
    "into",
    "as",
    "and",
    "or",
    "but",
    "so",
    "than",
    "if",
    "what",
    "which",
    "who",
    "whom",
    "whose",
    "how",
    "when",
    "where",
    "why",
    "there",
    "here",
}


def words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def reworded(old: str, new: str) -> bool:
    """At least two content words changed (a substitution counts once), or the shared words in another order."""
    a, b = words(old), words(new)
    if a == b:
        return False  # only case or punctuation differs
    ca, cb = set(a) - FUNCTION_WORDS, set(b) - FUNCTION_WORDS
    if max(len(ca - cb), len(cb - ca)) >= 2:
        return True
    shared = set(a) & set(b)
    return [w for w in a if w in shared] != [w for w in b if w in shared]


def test_reworded_rule():
    assert not reworded("what rocket is this?", "What rocket is this")
    assert not reworded("what rocket is this?", "which rocket is this?")  # a function word only
    assert not reworded("who wrote this book?", "who wrote this novel?")  # one content word
    assert reworded("who wrote this book?", "who is the author of this novel?")
    assert reworded("how tall is this tower?", "this tower is how tall?")  # word order


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    content = load_content(PARAPHRASE_CONTENT)
    para = ensure_dataset(content, dataset_paths(tmp_path_factory.mktemp("paraphrase") / "out"))
    return ensure_demo(), para


@pytest.mark.parametrize("part", ["single_turn", "multi_turn"])
def test_same_rows_turns_answers_labels_and_images(built, part):
    demo_paths, para_paths = built
    demo = list(load_conversations(getattr(demo_paths, part)))
    para = list(load_conversations(getattr(para_paths, part)))
    assert len(para) == len(demo) > 0
    demo_meta, para_meta = load_question_meta(demo_paths), load_question_meta(para_paths)
    for d, p in zip(demo, para):
        assert p.session_id != d.session_id and p.session_id.startswith("demo-para-")
        assert len(p.turns) == len(d.turns) and p.answers == d.answers
        assert (p.egocentric, p.image_url) == (d.egocentric, d.image_url)
        assert p.image == d.image  # same seed, same rows: the same rendered capture
        for dt, pt in zip(d.turns, p.turns):
            assert (pt.domain, pt.query_category, pt.dynamism, pt.image_quality) == (
                dt.domain,
                dt.query_category,
                dt.dynamism,
                dt.image_quality,
            )
            dm, pm = demo_meta[dt.interaction_id], para_meta[pt.interaction_id]
            for key in ("entity_slug", "kind", "needs_web", "needs_ocr", "no_answer", "answer"):
                assert pm[key] == dm[key], (pt.interaction_id, key)


def test_every_query_is_reworded(built):
    demo_paths, para_paths = built
    pairs = [
        (dt.query, pt.query)
        for part in ("single_turn", "multi_turn")
        for d, p in zip(load_conversations(getattr(demo_paths, part)), load_conversations(getattr(para_paths, part)))
        for dt, pt in zip(d.turns, p.turns)
    ]
    assert len(pairs) == 85
    same = [(old, new) for old, new in pairs if not reworded(old, new)]
    assert not same, same


def test_the_kg_and_web_corpus_are_the_demos(built):
    demo_paths, para_paths = built
    for rel in ("kg.json", "web.json"):
        assert (para_paths.root / rel).read_bytes() == (demo_paths.root / rel).read_bytes()
