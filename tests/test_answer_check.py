"""Answer-type enforcement: an answer whose type does not fit what the question asks is never returned, whichever
source offers it (KG attribute, web sentence, text in the photo, a tool's fact). Content written for these tests."""

from __future__ import annotations

import pytest
from PIL import Image

from glasses_rag.policies.protocol import IDK
from glasses_rag.policies.rules.answer_check import Context, is_own_name, refuse
from glasses_rag.policies.rules.answer_types import expected_answer
from glasses_rag.policies.rules.candidates import Part
from glasses_rag.policies.rules.canonical import canonical
from glasses_rag.policies.rules.relations import relation_clash
from glasses_rag.policies.rules.sources.ocr import label_like
from glasses_rag.text.units import DEFAULT
from graph.agent import TurnInput
from graph.build import build_agent
from graph.config import AgentConfig
from tools.base import HistoryTurn, Hit


def part(question: str, qtype: str = "attribute") -> Part:
    return Part(question, question, qtype, expected_answer(question), None)  # type: ignore[arg-type]


def refused(
    text: str, question: str, entity: str | None = None, qtype: str = "attribute", attributes: dict | None = None
) -> str | None:
    hit = Hit(source="image_kg", score=0.9, entity_name=entity, attributes=attributes) if attributes else None
    return refuse(text, part(question, qtype), Context(entity=entity, entity_hit=hit, units=DEFAULT))


# ---- the check, rule by rule -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text,question",
    [
        ("20", "what does this animal feed on?"),  # a food is asked, not a number
        ("1.5 kg", "what does this animal eat?"),
        ("1887", "who designed this building?"),  # a person is asked
        ("12", "where does this bird nest?"),  # a place is asked
        ("$1.49", "how much does it cost in euros?"),  # the price in another currency
        ("31 meters", "how heavy is it?"),  # another dimension
        ("M", "what kind of markings does this cat have?"),  # a lone letter
        ("1791", "on what date was it first lit?"),  # a year where a calendar day is asked
    ],
)
def test_answers_of_the_wrong_type_are_refused(text, question):
    assert refused(text, question) is not None


@pytest.mark.parametrize(
    "text,question",
    [
        ("rodents and rabbits", "what does this animal feed on?"),
        ("€1.37", "how much does it cost in euros?"),
        ("M", "what size is this jumper?"),
        ("January 10, 1791", "on what date was it first lit?"),
        ("route 42", "which route stops here?"),
        ("42", "what does the sign say?"),
    ],
)
def test_answers_of_the_right_type_pass(text, question):
    qtype = "text_in_image" if "sign" in question else "attribute"
    assert refused(text, question, qtype=qtype) is None


def test_the_pictured_things_own_name_does_not_answer_another_question():
    assert refused("Corran Hall", "who designed this building?", entity="Corran Hall") is not None
    assert refused("corran hall", "what is this building used for?", entity="Corran Hall") is not None
    logo = {"project": "matplotlib", "category": "software logo"}  # "logo" is its class, "matplotlib" its own name
    assert refused("matplotlib", "who started the project behind this logo?", "Matplotlib logo", attributes=logo)
    # ... but it answers what the thing is called, and a part of it can answer about its class
    assert refused("Corran Hall", "what is this building called?", entity="Corran Hall") is None
    assert refused("Corran Hall", "which building is this?", entity="Corran Hall", qtype="recognition") is None
    assert refused("lemon", "what flavor is this drink?", entity="Zephyr Lemon Sparkling Water") is None
    assert not is_own_name("Hollowmere", "Hollowmere Clock Museum", None)  # the town it is named after


def test_a_money_question_in_a_currency_and_a_date_to_the_day():
    assert expected_answer("how much is it in euros?").unit == "€"
    assert expected_answer("how many yen does a ticket cost?").unit == "¥"
    assert expected_answer("how much is it?").kind == "money"  # its price, not a count
    assert expected_answer("on what date did it open?").dimension == "day"
    assert expected_answer("when did it open?").dimension is None  # a year will do


def test_relations_with_another_preposition_and_labels_read_in_the_photo():
    assert relation_clash("made in", "what is this jumper made of?")
    assert not relation_clash("made in", "where is this jumper made?")
    assert not relation_clash("fibre", "what is this jumper made of?")
    assert relation_clash("The drink is made in Kessington.", "what is it made from?")
    assert not relation_clash("It is made from oats, made in Kessington.", "what is it made from?")
    assert not relation_clash("distance from earth", "what is the distance between this and earth?")  # not a verb
    assert label_like("ROUTE 42 HARBOR LINE") and label_like("Region-based segmentation")
    assert not label_like("ambiguously as either object or background. Here,")


def test_an_egocentric_clause_after_a_copula_reads_as_pointing():
    assert canonical("Who's the person I'm looking at?") == "who is this person?"


# ---- end to end: the wrong-typed answer is refused and the right one found -------------------------------------

KG = {
    "Red Fox": {"category": "animal", "species": "red fox", "feeding times": "2"},
    "Corran Hall": {"category": "building", "building": "corran hall", "opened": "1891"},
}
PAGES = {
    "Red Fox": ("Red fox", "The red fox feeds on rodents, rabbits and birds. Red foxes hunt mostly at dusk."),
    "Corran Hall": ("Corran Hall", "Corran Hall was designed by Ada Lin and opened in 1891 as a concert hall."),
}


class OneEntity:
    """An image KG whose top match is `name`, and a web page about it."""

    name_ = "one-entity"

    def __init__(self, name: str):
        self.entity = name
        self.name = f"one-entity:{name}"

    def image_search(self, image, k=5):
        return [
            {
                "index": 0,
                "score": 0.97,
                "url": "https://kg.test/0",
                "entities": [{"entity_name": self.entity, "entity_attributes": KG[self.entity]}],
            }
        ]

    def web_search(self, query, k=5):
        title, text = PAGES[self.entity]
        return [{"index": 0, "score": 0.8, "page_name": title, "page_url": "https://web.test/0", "page_snippet": text}]

    def get_page(self, url):
        return PAGES[self.entity][1]


def ask(question: str, entity: str, task: int = 2, history=()):
    agent = build_agent(AgentConfig(warm_up=False), search=OneEntity(entity), task=task)
    hist = [HistoryTurn(question=q, answer=a, entity=entity) for q, a in history]
    return agent.run_turn(
        TurnInput(
            task=task,
            session_id="c",
            interaction_id="c-0",
            question=question,
            image=Image.new("RGB", (64, 64), (90, 60, 30)),
            history=hist,
        )
    )


def test_a_feeding_question_gets_a_food_not_the_number_of_feeding_times():
    tr = ask("what does this animal feed on?", "Red Fox")
    assert tr.answer != "2" and "rodents" in tr.answer
    assert ask("what does this animal feed on?", "Red Fox", task=1).answer == IDK  # no web: the KG has no food


def test_who_designed_a_building_gets_a_person_not_the_buildings_name():
    assert ask("who designed this building?", "Corran Hall").answer == "Ada Lin"
    assert ask("who designed this building?", "Corran Hall", task=1).answer == IDK


def test_that_one_refers_to_what_the_conversation_just_named():
    tr = ask(
        "when did that one open?",
        "Corran Hall",
        task=3,
        history=[("what is this building?", "Corran Hall"), ("what is the hall next door called?", IDK)],
    )
    assert tr.answer == IDK  # the hall next door, unknown: not Corran Hall's 1891
