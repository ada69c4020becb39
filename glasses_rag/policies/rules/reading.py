"""The planner's reading of one turn (tools.capability.Reading): the question in direct form and its parts, the
entity the photo shows (or an earlier turn named) and its look-alikes, the evidence so far; answer sources are asked
through it by name. Worked out once per decide/answer call: the planner itself keeps no per-turn state."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from functools import cached_property
from typing import TYPE_CHECKING, Any

from glasses_rag.core.types import Fact, Hit
from glasses_rag.policies.protocol import PolicyView
from glasses_rag.policies.rules import answer_check
from glasses_rag.policies.rules.candidates import Candidate, Part
from glasses_rag.policies.rules.canonical import canonical
from glasses_rag.policies.rules.config import HISTORY_ENTITY_CONFIDENCE, RulePlannerConfig
from glasses_rag.policies.rules.entity import entity_is_person, history_person, image_entity
from glasses_rag.policies.rules.lexicon import CLASS_KEYS
from glasses_rag.policies.rules.parts import PartsContext, build_parts
from glasses_rag.policies.rules.spec import ExpectedAnswer
from glasses_rag.text import nlp
from glasses_rag.text.units import DEFAULT, UnitTable

if TYPE_CHECKING:
    from glasses_rag.policies.rules.named_parts import Catalog
    from tools.capability import Capability


def capability_units(capabilities: Iterable[Capability]) -> UnitTable:
    """The built-in units plus those the tools' capabilities declare (AnswerUse.units), for this turn only."""
    table = DEFAULT
    for cap in capabilities:
        if cap.answer is not None and cap.answer.units:
            table = table.extended(cap.answer.kind or "quantity", cap.answer.units)
    return table


# "that one", "the other one": in a later turn, the thing the conversation just named
_THAT_ONE = re.compile(r"\b(?:that|the other) one\b", re.I)


class TurnReading:
    """One view as the planner reads it. `planner` gives the embedder, the thresholds and the plan table."""

    def __init__(self, planner: Any, view: PolicyView):
        self.p = planner
        self.catalog: Catalog = planner.catalog  # the planner's named parts (catalog.py)
        self.c: RulePlannerConfig = planner.config
        self.v = view
        self.capabilities = {c.name: c for t in view.tools for c in t.capabilities}
        self.units = capability_units(self.capabilities.values())
        # the question in plain direct form: "could you tell me how tall this tower is" -> "how tall is this tower?"
        self.question = q = canonical(view.question)
        self.use_image = view.has_image and (not view.history or nlp.refers_to_image(q) or nlp.has_pronoun(q))
        self.kg_hits = sorted(
            [h for h in view.evidence if h.source == "image_kg" and h.entity_name], key=lambda h: h.score, reverse=True
        )
        self.web_hits = [h for h in view.evidence if h.source == "web"]
        match = image_entity(self.kg_hits if self.use_image else [], view.ocr_text or "", q, self.c, self.floor)
        self.hit, self.image_conf, self.rivals = match.hit, match.confidence, match.rivals
        self.history_entity = next((h.entity for h in reversed(view.history) if h.entity), None)
        self.entity, self.entity_conf, self.entity_hit = self._entity()
        self.refused: list[str] = []  # answers the answer-type check turned down, for the rationale
        self._memo: dict[tuple, Any] = {}
        person = self.history_person if nlp.PERSON_PRONOUN.search(q) and self.history_person != self.entity else None
        self.parts = build_parts(
            q,
            view.sub_questions,
            self.c.max_parts,
            PartsContext(
                self.entity, person, self.entity_is_person, self.use_image, bool(self.history_entity), self.units
            ),
        )

    # ---- tools.capability.Reading -------------------------------------------------------------------------
    @property
    def resolved(self) -> str:
        return self.parts[0].resolved if self.parts else self.question

    @property
    def question_type(self) -> str:
        return self.parts[0].qtype if self.parts else "web_fact"

    @property
    def has_image(self) -> bool:
        return self.v.has_image

    @property
    def ocr_text(self) -> str | None:
        return self.v.ocr_text

    @property
    def evidence(self) -> list[Hit]:
        return self.v.evidence

    @property
    def facts(self) -> list[Fact]:
        return self.v.facts

    def ran(self, capability: str) -> bool:
        names = {t.name for t in self.v.tools if capability in t.tags}
        return any(s.tool in names for s in self.v.done)

    def answer_of(self, kind: str) -> str | None:
        """The best answer of this type to the question from what was gathered: the question type's own answer
        sources, asked for that type ("money" -> "$1.49" for "how much is it in euros?")."""
        for part in self.parts:
            asked = part.expecting(ExpectedAnswer(kind=kind, counted=part.spec.counted, noun=part.spec.noun))  # type: ignore[arg-type]
            for name in self.p.table.types[part.qtype].answer:
                got = self.source(name, asked)
                if got is not None:
                    return got.text
        return None

    # ---- the entity ------------------------------------------------------------------------------------------
    @property
    def floor(self) -> float:
        return 0.6 if self.c.min_image_score is None else self.c.min_image_score

    def _entity(self) -> tuple[str | None, float, Hit | None]:
        if self.v.history and _THAT_ONE.search(self.question):
            return self._referred_back()
        if self.hit is not None and self.image_conf > 0:
            return self.hit.entity_name, self.image_conf, self.hit
        q = self.question
        if self.history_entity and (nlp.has_pronoun(q) or nlp.refers_to_image(q) or not self.use_image):
            hit = next((h for h in self.kg_hits if h.entity_name == self.history_entity), None)
            return self.history_entity, HISTORY_ENTITY_CONFIDENCE, hit
        return None, 0.0, None

    def _referred_back(self) -> tuple[str | None, float, Hit | None]:
        """ "that one" in a later turn: the thing the previous answer named (an image match, when one has that name),
        not the pictured one; unknown when the previous turn was not answered."""
        last = self.v.history[-1].answer
        if nlp.is_abstention(last):
            return None, 0.0, None
        hit = next(
            (h for h in self.kg_hits if h.entity_name and nlp.normalize(h.entity_name) == nlp.normalize(last)), None
        )
        return (hit.entity_name if hit else last.strip(" .")), HISTORY_ENTITY_CONFIDENCE, hit

    @cached_property
    def entity_is_person(self) -> bool | None:
        return entity_is_person(self.entity_hit)

    @cached_property
    def history_person(self) -> str | None:
        return history_person(self.v.history)

    @cached_property
    def other_names(self) -> list[str]:
        """Other entities the image search returned: text about them is not about this entity."""
        own = set(nlp.normalize(self.entity or "").split())
        return [
            h.entity_name
            for h in self.kg_hits
            if h.entity_name and h.entity_name != self.entity and not set(nlp.normalize(h.entity_name).split()) <= own
        ]

    def topic_words(self, entity: str | None, hit: Hit | None) -> set[str]:
        """Stems that show a text is about the entity: its name and its class ("domestic cat" for a cat's photo)."""
        words = nlp.stems(entity or "")
        for k, v in (hit.attributes or {}).items() if hit is not None else []:
            if str(k).lower() in CLASS_KEYS and not nlp.is_instruction_attribute(k, v):
                words |= nlp.stems(str(v))
        return words

    def depends_on_image(self, part: Part) -> bool:
        return self.use_image and (nlp.refers_to_image(part.original) or nlp.has_pronoun(part.original))

    # ---- the photo's text --------------------------------------------------------------------------------------
    def ocr_lines(self) -> list[str]:
        return [
            ln.strip()
            for ln in (self.v.ocr_text or "").splitlines()
            if len(re.sub(r"[^A-Za-z]", "", ln)) >= 2 and not nlp.is_instruction(ln)
        ]

    def ocr_title(self) -> str | None:
        """The text the photo opens with (its first two lines), to search for."""
        lines = self.ocr_lines()
        return " ".join(lines[:2]) if lines else None

    # ---- calls and answers ----------------------------------------------------------------------------------------
    def ran_call(self, tool: str, args: dict[str, Any]) -> bool:
        return self.v.ran_call(tool, args)

    def memo(self, key: tuple, fn: Callable[[], Any]) -> Any:
        if key not in self._memo:
            self._memo[key] = fn()
        return self._memo[key]

    def source(self, name: str, part: Part) -> Candidate | None:
        """The answer source `name` (catalog.py) for this part; an answer of a type the part does not ask for
        is never returned (answer_check)."""
        return self.memo((name, part.original, part.spec), lambda: self._from_source(name, part))

    def _from_source(self, name: str, part: Part) -> Candidate | None:
        src = self.catalog.sources[name]
        got = src.fn(self, part)
        return got if got is None or not src.checked else self.checked(name, part, got)

    def checked(self, origin: str, part: Part, got: Candidate) -> Candidate | None:
        """`got` when its type fits what the part asks (answer_check), else None (the reason kept in `refused`)."""
        why = answer_check.refuse(
            got.text, part, answer_check.Context(entity=self.entity, entity_hit=self.entity_hit, units=self.units)
        )
        if why is None:
            return got
        self.refused.append(f"{origin} offered {got.text!r}: {why}")
        return None

    def short(self, text: str) -> str:
        w = text.split()
        return " ".join(w[: self.c.max_answer_words]).strip()
