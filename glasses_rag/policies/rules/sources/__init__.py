"""The planner's answer sources, each in the module of its concern and listed by name in
glasses_rag/policies/rules/catalog.py (importing a module registers nothing). The plan table names them per question
type:

- identity.py: entity_name (the recognised entity's own name)
- kg.py: kg_attribute (the KG attribute asked for), class_attribute ("what breed is this dog?")
- ocr.py: ocr_text (what the photo's text says), ocr_typed (a line of the expected type), ocr_name (a name read in
  the photo that a page confirms)
- web.py: web_span (the answer span of the best web sentence)
- comparison.py: compare; multihop.py: bridge (hop 1, not an answer), bridge_hop
- quantities.py: count; facts.py: facts, converted_fact
"""

from glasses_rag.policies.rules.sources import comparison, facts, identity, kg, multihop, ocr, quantities, web

MODULES = (comparison, facts, identity, kg, multihop, ocr, quantities, web)
