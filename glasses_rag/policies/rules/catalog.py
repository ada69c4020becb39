"""The rule planner's named parts, listed by explicit calls: the one module that fills its `Catalog`.

A part is a plain function in the module of its concern (conditions.py, slots.py, sources/); it is known to the
planner only once listed here. A new condition, slot, query kind or answer source is one function there plus one
line here; the plan table (planner_table.yaml) can then name it.

Example::

    cat = planner_catalog()
    cat.conditions["has_image"](turn, None), cat.sources.names()
"""

from __future__ import annotations

from functools import cache

from glasses_rag.policies.rules import conditions as c
from glasses_rag.policies.rules import slots as s
from glasses_rag.policies.rules.named_parts import Catalog
from glasses_rag.policies.rules.sources import comparison, facts, identity, kg, multihop, ocr, quantities, web

CONDITIONS = (
    ("has_image", c.has_image),
    ("asks_text", c.asks_text),
    ("names_object", c.names_object),
    ("several_parts", c.several_parts),
    ("entity_unsure", c.entity_unsure),
    ("entity_ambiguous", c.entity_ambiguous),
    ("entity_known", c.entity_known),
    ("kg_lacks_answer", c.kg_lacks_answer),
    ("ocr_lacks_answer", c.ocr_lacks_answer),
    ("web_lacks_answer", c.web_lacks_answer),
    ("pages_unread", c.pages_unread),
    ("many_web_hits", c.many_web_hits),
    ("no_image_evidence", c.no_image_evidence),
    ("bridge_known", c.bridge_known),
    ("bridge_unknown", c.bridge_unknown),
    ("side_missing", c.side_missing),
    ("ocr_name_unchecked", c.ocr_name_unchecked),
    ("quantity_known", c.quantity_known),
    ("quantity_unknown", c.quantity_unknown),
)
SLOTS = (
    ("target", s.target),
    ("question", s.question),
    ("entity", s.entity),
    ("value", s.value),
    ("from_unit", s.from_unit),
    ("to_unit", s.to_unit),
    ("query", s.query_slot),
)
QUERIES = (
    ("part", s.part_query),
    ("hop1", s.hop1_query),
    ("hop2", s.hop2_query),
    ("sides", s.sides_query),
    ("ocr_name", s.ocr_name_query),
    ("quantity", s.quantity_query),
)
SOURCES = (
    ("converted_fact", facts.converted_fact),
    ("facts", facts.facts),
    ("entity_name", identity.entity_name),
    ("kg_attribute", kg.kg_attribute),
    ("class_attribute", kg.class_attribute),
    ("bridge_hop", multihop.bridge_hop),
    ("ocr_name", ocr.ocr_name),
    ("ocr_text", ocr.ocr_text),
    ("ocr_typed", ocr.ocr_typed),
    ("count", quantities.count),
    ("web_span", web.web_span),
)


@cache
def planner_catalog() -> Catalog:
    """The planner's parts, built once on first use (not on import).

    Example::

        "kg_attribute" in planner_catalog().sources  # True
    """
    cat = Catalog()
    for name, condition in CONDITIONS:
        cat.conditions.add(name, condition)
    for name, slot in SLOTS:
        cat.slots.add(name, slot)
    for name, query in QUERIES:
        cat.queries.add(name, query)
    for name, source in SOURCES:
        cat.source(name, source)
    # its answer is one of the sides, yes/no or before/after, with both values: not the answer-type check's to judge
    cat.source("compare", comparison.compare, checked=False)
    cat.source("bridge", multihop.bridge, final=False, checked=False)  # hop 1: an entity to ask about, not an answer
    return cat
