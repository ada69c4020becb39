"""The embedded default policy: a rule-based planner (a heuristic, named as such everywhere).

It needs no GPU and no VLM weights. It reads the question's type (graph/planner/questions.py), looks the type up in the
plan table (graph/planner/planner_table.yaml: question type -> tool capabilities in order, and the answer sources to try),
and calls tools through their capability tags, never by name. The answer step enforces the answer type the
question expects (person, place, year, number with unit, yes/no, name; graph/planner/answer_types.py), cuts the short
answer span out of the evidence, answers comparisons and multi-hop questions only when every hop is supported,
never takes an answer from retrieved text that gives instructions (text/nlp.py:is_instruction), and abstains
when the evidence is weak: a wrong answer costs more than "I don't know".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from graph.planner.answer_types import (
    YEAR,
    AnswerSpec,
    answer_span,
    expected_answer,
    matches,
    name_phrases,
    quantities,
    unit_dimension,
)
from graph.planner.plan_table import PlanStep, load_plan_table
from graph.planner.questions import (
    Comparison,
    QuestionType,
    canonical,
    class_noun,
    classify,
    conversion_target,
    parse_bridge,
    parse_comparison,
)
from graph.policy import IDK, AnswerDraft, Decision, ParallelCall, PolicyView, ToolSpec
from text import nlp
from tools.base import Hit


class RulePlannerConfig(BaseModel):
    """Thresholds of the rule-based planner. Defaults were chosen on the demo benchmark only (see
    benchmarks/generalization.py --sweep) and are reported on data the planner was not written against."""

    min_image_score: float | None = Field(None, description="Image-match floor: an image-KG match under this "
                                          "similarity is not trusted (None: the image embedder's own floor, "
                                          "0.88 for the heuristic colour-texture embedder, 0.7 for CLIP; 0.6 "
                                          "without one).")
    min_image_margin: float = Field(0.0, ge=0, le=1, description="Top-1 minus top-2 image score (different "
                                    "entities) needed to trust a match.")
    image_tie_margin: float = Field(0.01, ge=0, le=1, description="Image matches of other entities this close to "
                                    "the top one are look-alikes: the photo's text is read to tell them apart, and "
                                    "without it an answer must hold for all of them.")
    min_attr_sim: float = Field(0.27, ge=0, le=1, description="Question vs KG attribute-name similarity needed "
                                "when they share a word stem.")
    min_attr_sim_shared: float = Field(0.15, ge=0, le=1, description="... when the attribute name shares a word "
                                       "(or synonym) with what is asked, less the words naming the answer's type.")
    min_attr_sim_no_overlap: float = Field(0.65, ge=0, le=1, description="... when they share none (nor a "
                                           "synonym, text/synonyms.yaml).")
    min_web_sim: float = Field(0.45, ge=0, le=1, description="Question vs web sentence similarity needed to "
                               "answer from the web.")
    min_free_text_coverage: float = Field(0.6, ge=0, le=1, description="Share of the question's words a web "
                                          "sentence must hold to give an answer that has no type to check.")
    max_answer_words: int = Field(40, ge=3, description="Longer free-text answers are cut (75 tokens are judged).")
    max_parts: int = Field(4, ge=1, description="A question asking more things gets only the first ones answered.")
    plan_table: Path | None = Field(None, description="Plan table file (default: graph/planner/planner_table.yaml).")


# confidence of answers that do not come with a similarity score
OCR_CONFIDENCE = 0.6  # text read in the photo that has the expected type
OCR_NAME_CONFIDENCE = 0.4  # a name read in the photo when image search found nothing confident
HISTORY_ENTITY_CONFIDENCE = 0.7  # the entity a previous turn was about
WEB_QUANTITY_CONFIDENCE = 0.6  # a quantity to convert, from a web sentence naming the entity
# words that only say which type of answer is wanted
TYPE_WORDS = {nlp.stem(w) for w in """year date time day city country town place person name title number many much
long tall high far old kind type sort called other else another""".split()}
# attribute names that hold a place: a "where" question is answered only from one of these (or one that names the
# place noun asked about, or ends with a locative preposition: "found at", "native to" is in the list)
PLACE_KEYS = {nlp.stem(w) for w in """location address city town village country region state province place site origin
native birthplace home headquarters based lies park street island continent district neighborhood area venue""".split()}
PERSON_KEYS = {"born", "occupation", "nationality", "died", "birthplace", "profession", "spouse", "birth"}
GENERIC_KINDS = {"kind", "type", "sort", "name", "thing", "things", "one", "picture", "photo", "image", "object", "item",
                 "place", "building", "person", "man", "woman", "animal", "plant", "this", "that", "these", "those"}
CLASS_KEYS = ("species", "breed", "genus", "category", "type", "kind", "family", "style", "model", "make", "brand")
# questions asking what the text in the photo says (not "what language is it written for")
_SAYS = re.compile(r"\bwhat (?:does|do|did) (?:it|this|that|these|those|the [a-z]+) (?:say|read)\b|\bwhat(?:'s| is| are| was)"
                   r" (?:written|printed|displayed)\b|\b(?:read|transcribe) (?:the|this|it|that|me)\b|\bwhat (?:text|words|"
                   r"letters)\b|\bwhat (?:does|do) (?:the )?(?:text|sign|label|words?|letters|writing) (?:say|read)\b", re.I)
_NAMES_OBJECT = re.compile(r"\b(?:this|that|these|those)\s+([a-z][a-z-]+)", re.I)


@dataclass
class Part:
    original: str  # as asked
    resolved: str  # with "this"/"it" replaced by the entity
    qtype: QuestionType
    spec: AnswerSpec
    entity: str | None  # what the part is about (None for general knowledge)


@dataclass
class Candidate:
    text: str
    confidence: float
    note: str
    sentence: str | None = None  # the evidence sentence it was cut from


@dataclass
class SideValue:
    value: float  # base units (or the year)
    text: str
    confidence: float


class RuleBasedPlanner:
    """Policy protocol implementation. `embedder` is a models.text_embedder.TextEmbedder (or a factory)."""

    name = "rule-based-planner (heuristic)"
    blocking = False  # local rules and a small embedder: runs in the graph's thread

    def __init__(self, embedder: Any, config: RulePlannerConfig | None = None):
        self._embedder = embedder
        self.config = config or RulePlannerConfig()
        self.table = load_plan_table(self.config.plan_table)

    @property
    def embedder(self):
        if callable(self._embedder) and not hasattr(self._embedder, "similarity"):
            self._embedder = self._embedder()
        return self._embedder

    # ---- the protocol -----------------------------------------------------------------------
    def decide(self, view: PolicyView, image: Any = None) -> Decision:
        t = _Turn(self, view)
        if view.remaining_steps <= 0:
            return Decision(action="answer", rationale="no tool calls left", needs_retrieval=bool(view.done))
        if len(t.parts) > 1:
            calls, why = t.due(self.table.compound, None)
            if calls:
                return _decision(calls[: view.remaining_steps], why)
        batch: list[ParallelCall] = []
        reasons: list[str] = []
        for part in t.parts:
            calls, why = t.due(self.table.types[part.qtype].steps, part)
            for c in calls:
                if not any(c.tool == b.tool and c.arguments == b.arguments for b in batch):
                    batch.append(c)
            if why:
                reasons.append(why)
        if batch:
            return _decision(batch[: view.remaining_steps], "; ".join(dict.fromkeys(reasons)))
        return Decision(action="answer", rationale="the plan for this question type is complete",
                        needs_retrieval=bool(view.done))

    def answer(self, view: PolicyView, image: Any = None) -> AnswerDraft:
        t = _Turn(self, view)
        got: list[Candidate] = []
        for part in t.parts:
            cand = None
            for source in self.table.types[part.qtype].answer:
                cand = t.source(source, part)
                if cand is not None:
                    break
            if cand is not None and t.rivals and t.depends_on_image(part) and not t.holds_for_rivals(source, part, cand):
                return AnswerDraft(answer=IDK, confidence=0.0, entity=t.entity,
                                   rationale=f"{part.qtype}: the photo matches {t.entity} and "
                                             f"{', '.join(h.entity_name or '' for h in t.rivals)} equally, and the "
                                             f"answer differs between them or cannot be checked for each")
            if cand is None:
                return AnswerDraft(answer=IDK, confidence=0.0, entity=t.entity,
                                   rationale=f"{part.qtype}: no evidence of the expected type ({part.spec.kind}) "
                                             f"answers: {part.resolved}")
            got.append(cand)
        sents = {c.sentence for c in got}
        if len(got) > 1 and len(sents) == 1 and None not in sents:
            text = t.short(got[0].sentence or "")  # every part answered by one sentence: it says them together
        else:
            text = "; ".join(c.text for c in got)
        return AnswerDraft(answer=text, confidence=round(min(c.confidence for c in got), 4),
                           rationale="; ".join(c.note for c in got), entity=t.entity)


def _decision(calls: list[ParallelCall], why: str) -> Decision:
    first, rest = calls[0], calls[1:]
    return Decision(action="call_tool", tool=first.tool, arguments=first.arguments, parallel=rest, rationale=why,
                    sub_question=first.sub_question, needs_retrieval=True)


def page_sentences(h: Hit) -> list[str]:
    """The factual sentences of a web hit: its content and its snippet (a summary often says it most directly)."""
    out = nlp.data_sentences(h.content or "") if h.content else []
    return out + [s for s in nlp.data_sentences(h.snippet or "") if s not in out]


def page_subject(h: Hit) -> str | None:
    """What the page is about: the first name its first sentence opens with ("Port Aven is a town ...")."""
    lead = nlp.sentences(h.content or h.snippet or "")[:1]
    names = name_phrases(lead[0]) if lead else []
    return names[0].text if names and names[0].start <= 4 else None


def priced_thing(question: str) -> set[str]:
    """Stems of what a price question prices ("how much is a single adult fare?" -> single, adult, fare): a sentence
    must name all of it, so that the price of a one-way ticket does not answer for a return ticket."""
    q = question.lower()
    m = (re.search(r"\bhow much (?:is|are|was|were|does|do|did|would) (?:a |an |the |one )?((?:[a-z-]+ ){0,3}?[a-z-]+?)"
                   r"(?= cost| for| of| to| at| from| in| on| here|\?|$)", q)
         or re.search(r"\b(?:price|cost|fee|fare) of (?:a |an |the |one )?((?:[a-z-]+ ){0,3}?[a-z-]+?)"
                      r"(?= for| of| to| at| from| in| on| here|\?|$)", q))
    return nlp.stems(m.group(1)) if m else set()


def with_subject(sentence: str, subject: str | None) -> str:
    """"It lies in Westmark." -> "Port Aven lies in Westmark.": for comparing the sentence with the question."""
    if not subject:
        return sentence
    return re.sub(r"^(?:It|They|He|She|This|Its|Their)\b", lambda m: subject + ("'s" if m.group(0) in ("Its", "Their")
                                                                                  else ""), sentence)


def _fill(spec: ToolSpec, offer: dict[str, Any]) -> dict[str, Any] | None:
    """The arguments the planner gives this tool: each offered slot under the argument name the tool maps it to;
    None when a required argument stays empty (the registry refuses such tools at declaration, so only a tool
    spec built by hand gets here)."""
    args = {spec.inputs[slot]: v for slot, v in offer.items() if slot in spec.inputs}
    required = set(spec.json_schema["function"]["parameters"].get("required", []))
    return args if required <= args.keys() else None


class _Turn:
    """What one view says, worked out once per decide/answer call (the planner itself keeps no per-turn state)."""

    def __init__(self, planner: RuleBasedPlanner, view: PolicyView):
        self.p = planner
        self.c = planner.config
        self.v = view
        # the question in plain direct form: "could you tell me how tall this tower is" -> "how tall is this tower?"
        self.question = q = canonical(view.question)
        self.use_image = view.has_image and (not view.history or nlp.refers_to_image(q) or nlp.has_pronoun(q))
        self.kg_hits = sorted([h for h in view.evidence if h.source == "image_kg" and h.entity_name],
                              key=lambda h: h.score, reverse=True)
        self.web_hits = [h for h in view.evidence if h.source == "web"]
        self.hit, self.image_conf = self._image_entity()
        self.history_entity = next((h.entity for h in reversed(view.history) if h.entity), None)
        self.entity, self.entity_conf, self.entity_hit = self._entity()
        self.parts = self._parts()
        self._memo: dict[tuple, Any] = {}

    def memo(self, key: tuple, fn):
        if key not in self._memo:
            self._memo[key] = fn()
        return self._memo[key]

    # ---- the entity -------------------------------------------------------------------------
    @property
    def floor(self) -> float:
        return 0.6 if self.c.min_image_score is None else self.c.min_image_score

    def _image_entity(self) -> tuple[Hit | None, float]:
        """Top image-KG entity and a 0..1 confidence from its score and its margin over the runner-up; a candidate
        whose name is read in the photo wins over a top match whose name is not (signs, labels, covers). Other
        entities whose score ties with the top's (`image_tie_margin`) and that the text in the photo does not tell
        apart are kept in `rivals`: answers must then hold for all of them (look-alike signs, covers, labels)."""
        self.rivals: list[Hit] = []
        if not self.kg_hits or not self.use_image:
            return None, 0.0
        top = self.kg_hits[0]
        ocr = self.v.ocr_text or ""
        read = self.named_in_photo(ocr) if ocr else None
        if read is not None and (read.entity_name != top.entity_name or top.score < self.floor):
            return read, 0.6  # the photo's text names it: image and text agree (a label, a sign, a cover)
        noun = self.asked_kind()
        if read is None and noun and noun not in self.kind_words(top):
            # "which lighthouse is this?": a runner-up that is a lighthouse beats a top match that is not
            fits = [h for h in self.kg_hits[1:] if h.score >= self.floor and noun in self.kind_words(h)]
            if fits:
                top = fits[0]
        second = next((h.score for h in self.kg_hits if h.entity_name != top.entity_name and h.score <= top.score), 0.0)
        if top.score < self.floor or top.score - second < self.c.min_image_margin:
            return top, 0.0
        if read is None:
            seen: set[str] = {top.entity_name or ""}
            for h in self.kg_hits:
                if h.entity_name not in seen and h.score >= self.floor and abs(top.score - h.score) <= self.c.image_tie_margin:
                    seen.add(h.entity_name or "")
                    self.rivals.append(h)
        margin = min(0.2, (top.score - second) * 2)
        return top, min(1.0, 0.5 + (top.score - self.floor) / max(1e-6, 1 - self.floor) * 0.3 + margin)

    def named_in_photo(self, ocr: str) -> Hit | None:
        """The image match whose name the text in the photo shows best (its words read, those on the first line
        count extra), when one stands out; None when the text names none of them or several equally."""
        lines = [ln for ln in ocr.splitlines() if ln.strip()]
        compact = re.sub(r"[^a-z0-9]", "", ocr.lower())  # OCR glues words ("HARWICKFERRY")
        first_compact = re.sub(r"[^a-z0-9]", "", lines[0].lower()) if lines else ""
        first = nlp.stems(lines[0]) if lines else set()
        first |= {nlp.stem(w) for h in self.kg_hits for w in nlp.content_words(h.entity_name or "")
                  if len(w) >= 4 and w in first_compact}
        have = nlp.stems(ocr) | {nlp.stem(w) for h in self.kg_hits for w in nlp.content_words(h.entity_name or "")
                                 if len(w) >= 4 and w in compact}
        scored: dict[str, tuple[float, Hit]] = {}
        for h in self.kg_hits:
            if h.score < self.floor - 0.1 or not h.entity_name or h.entity_name in scored:
                continue
            want = nlp.stems(h.entity_name)
            if not want:
                continue
            cov = len(want & have) / len(want)
            scored[h.entity_name] = (cov + 0.5 * len(want & first) / len(want) if cov >= 0.5 else 0.0, h)
        ranked = sorted(scored.values(), key=lambda x: x[0], reverse=True)
        if not ranked or ranked[0][0] <= 0 or (len(ranked) > 1 and ranked[0][0] - ranked[1][0] < 0.15):
            return None
        return ranked[0][1]

    def holds_for_rivals(self, source: str, part: Part, cand: Candidate) -> bool:
        """An answer drawn from the top match's KG record that every look-alike's record gives too."""
        if source not in ("kg_attribute", "class_attribute"):
            return False
        for h in self.rivals:
            other = self.kg_attribute(part, hit=h) if source == "kg_attribute" else None
            if other is None or nlp.normalize(other.text) != nlp.normalize(cand.text):
                return False
        return True

    def asked_kind(self) -> str | None:
        """The stem of the kind of thing the question says is pictured ("this lighthouse", "which bird")."""
        q = self.question
        words = nlp.pointed_phrase(q).split() or [class_noun(q) or ""]
        w = words[-1].lower()
        return nlp.stem(w) if w and w not in GENERIC_KINDS and w not in nlp.FUNCTION_WORDS else None

    @staticmethod
    def kind_words(h: Hit) -> set[str]:
        return nlp.stems(h.entity_name or "") | {s for k, v in (h.attributes or {}).items()
                                                 if str(k).lower() in CLASS_KEYS for s in nlp.stems(str(v))}

    def _entity(self) -> tuple[str | None, float, Hit | None]:
        if self.hit is not None and self.image_conf > 0:
            return self.hit.entity_name, self.image_conf, self.hit
        q = self.question
        if self.history_entity and (nlp.has_pronoun(q) or nlp.refers_to_image(q) or not self.use_image):
            hit = next((h for h in self.kg_hits if h.entity_name == self.history_entity), None)
            return self.history_entity, HISTORY_ENTITY_CONFIDENCE, hit
        return None, 0.0, None

    @cached_property
    def entity_is_person(self) -> bool | None:
        if self.entity_hit is not None and self.entity_hit.attributes:
            return bool(PERSON_KEYS & {str(k).lower() for k in self.entity_hit.attributes})
        return None

    @cached_property
    def history_person(self) -> str | None:
        """Someone an earlier answer named ("who was the first to walk on it?" -> he/she in the next turn)."""
        for h in reversed(self.v.history):
            if expected_answer(canonical(h.question)).kind == "person" and not nlp.is_abstention(h.answer) and len(h.answer.split()) <= 6:
                return h.answer.strip(" .")
        return None

    def _parts(self) -> list[Part]:
        q = self.question
        originals = nlp.split_question(q)[: self.c.max_parts]
        subs = self.v.sub_questions[: self.c.max_parts]
        person = self.history_person if nlp.PERSON_PRONOUN.search(q) and self.history_person != self.entity else None
        parts: list[Part] = []
        for i, o in enumerate(originals):
            if subs and len(subs) == len(originals):
                r = subs[i]
            else:
                r = nlp.resolve_references(o, self.entity, person=person, entity_is_person=self.entity_is_person)
            qtype = classify(o, has_image=self.use_image, history_entity=bool(self.history_entity))
            if qtype == "follow_up" and self.entity and r == o and not nlp.has_pronoun(o):
                r = f"{o.strip().rstrip('?')} of {self.entity}?"  # "who is the owner?" -> "... of Luna Bakery?"
            if i and len(nlp.content_words(o)) < 2 and parts:
                # an elliptical part ("..., and in what year?") borrows the first part's subject and plan
                r = f"{r} {parts[0].resolved}"
                qtype = parts[0].qtype if parts[0].qtype != "recognition" else qtype
            parts.append(Part(o, r if qtype != "web_fact" else o, qtype, expected_answer(o),
                              None if qtype == "web_fact" else self.entity))
        return parts

    # ---- conditions and calls --------------------------------------------------------------------
    def ran(self, tool: str, args: dict[str, Any]) -> bool:
        return any(s.tool == tool and s.arguments == args for s in self.v.done)

    def ran_tag(self, tag: str) -> bool:
        names = {t.name for t in self.v.tools_with(tag)}
        return any(s.tool in names for s in self.v.done)

    def holds(self, cond: str, part: Part | None) -> bool:
        q = part.original if part else self.question
        if cond == "has_image":
            return self.use_image
        if cond == "asks_text":
            return nlp.asks_about_text(q)
        if cond == "names_object":
            m = _NAMES_OBJECT.search(q)
            return m is not None and m.group(1).lower() not in nlp.FUNCTION_WORDS | nlp.PHOTO_NOUNS
        if cond == "several_parts":
            return len(self.parts) > 1 and not self.v.sub_questions
        if cond == "entity_unsure":
            return self.ran_tag("finds_entity") and self.image_conf <= 0
        if cond == "entity_ambiguous":
            return bool(self.rivals) and not self.ran_tag("reads_text")
        if cond == "entity_known":
            return self.entity is not None
        if cond == "kg_lacks_answer":
            return part is not None and self.source("kg_attribute", part) is None and self.class_or_name(part) is None
        if cond == "ocr_lacks_answer":
            return part is not None and self.source("ocr_text", part) is None and self.source("ocr_typed", part) is None
        if cond == "web_lacks_answer":
            return part is not None and self.source("bridge_hop", part) is None
        if cond == "pages_unread":
            return any(not h.content for h in self.web_hits)
        if cond == "many_web_hits":
            return len(self.web_hits) >= 3 and not self.ran_tag("reranks")
        if cond == "no_image_evidence":
            return not self.kg_hits
        if cond in ("bridge_unknown", "bridge_known"):
            known = part is not None and self.source("bridge", part) is not None
            return known if cond == "bridge_known" else not known
        if cond == "side_missing":
            return part is not None and bool(self.missing_sides(part))
        if cond == "ocr_name_unchecked":
            return self.ocr_title() is not None and self.source("ocr_name", part) is None if part else False
        if cond in ("quantity_unknown", "quantity_known"):
            known = part is not None and self.quantity(part) is not None
            return known if cond == "quantity_known" else not known
        raise ValueError(f"unknown plan condition {cond!r}")

    def offers(self, step: PlanStep, part: Part | None) -> list[tuple[dict[str, Any], str | None]]:
        """(arguments on offer, sub-question) for one step; several for a query per compared side."""
        q = part.resolved if part else self.question
        if step.uses == "locates_object":
            return [({"target": self.target_phrase(part.original if part else q)}, None)]
        if step.uses == "decouples_query":
            return [({"question": self.v.question, "entity": self.entity or ""}, None)]
        if step.uses == "converts_units" and part is not None:
            qty = self.quantity(part)
            target = conversion_target(part.original)
            if qty is None or target is None:
                return []
            return [({"value": qty[0], "from_unit": qty[1], "to_unit": target}, part.resolved)]
        if step.query is None:
            return [({}, None)]
        if step.query == "part":
            return [({"query": nlp.keywords(q, part.entity if part else self.entity)}, q)]
        if step.query == "hop1" and part is not None:
            b = parse_bridge(part.original)
            hop1 = nlp.resolve_references(b.hop1, self.entity) if b and self.entity else q
            return [({"query": nlp.keywords(hop1, self.entity)}, hop1)]
        if step.query == "hop2" and part is not None:
            got = self.source("bridge", part)
            if got is None:
                return []
            hop2 = self.hop2_question(part, got.text)
            return [({"query": nlp.keywords(hop2, got.text)}, hop2)]
        if step.query == "sides" and part is not None:
            cmp = parse_comparison(part.original)
            return [({"query": self.side_query(cmp, s)}, s) for s in self.missing_sides(part)] if cmp else []
        if step.query == "ocr_name":
            title = self.ocr_title()
            return [({"query": title}, title)] if title else []
        if step.query == "quantity" and part is not None:
            target = conversion_target(part.original)
            dim = unit_dimension(target)
            words = {"length": "height length", "mass": "weight", "speed": "speed", "volume": "volume",
                     "temperature": "temperature", "area": "area"}.get(dim or "", "")
            return [({"query": f"{self.entity} {words}".strip()}, part.resolved)]
        return [({"query": nlp.keywords(q, self.entity)}, q)]

    def step_calls(self, step: PlanStep, part: Part | None) -> list[ParallelCall]:
        out: list[ParallelCall] = []
        for offer, sub in self.offers(step, part):
            for spec in self.v.tools_with(step.uses):
                args = _fill(spec, offer)
                if args is not None and not self.ran(spec.name, args):
                    out.append(ParallelCall(tool=spec.name, arguments=args, sub_question=sub))
        return out

    def due(self, steps: list[PlanStep], part: Part | None) -> tuple[list[ParallelCall], str]:
        """The calls of the first due step, plus those of the steps right after it marked with_previous."""
        calls: list[ParallelCall] = []
        why: list[str] = []
        for step in steps:
            if calls and not step.with_previous:
                break
            if not all(self.holds(c, part) for c in step.when):
                continue
            new = self.step_calls(step, part)
            if new:
                calls += new
                why.append(f"{part.qtype if part else 'compound'}: {step.uses}"
                           + (f" ({', '.join(step.when)})" if step.when else ""))
        return calls, "; ".join(why)

    @staticmethod
    def target_phrase(q: str) -> str:
        m = re.search(r"\b(?:this|that|these|those)\s+((?:[A-Za-z-]+\s*){1,3})", q, re.I)
        if m:
            kept = [w for w in m.group(1).split() if w.lower() not in nlp.NOUN_PHRASE_STOP]
            if kept:
                return "the " + " ".join(kept[:3])
        return "the main object"

    # ---- answer sources ---------------------------------------------------------------------------
    def source(self, name: str, part: Part) -> Candidate | None:
        return self.memo((name, part.original), lambda: getattr(self, name)(part))

    def short(self, text: str) -> str:
        w = text.split()
        return " ".join(w[: self.c.max_answer_words]).strip()

    def depends_on_image(self, part: Part) -> bool:
        return self.use_image and (nlp.refers_to_image(part.original) or nlp.has_pronoun(part.original))

    def entity_name(self, part: Part) -> Candidate | None:
        if self.hit is not None and self.image_conf > 0:
            return Candidate(self.hit.entity_name or "", self.image_conf,
                             f"recognised {self.hit.entity_name} (image score {self.hit.score:.2f})")
        if self.entity and not self.use_image:
            return Candidate(self.entity, HISTORY_ENTITY_CONFIDENCE * 0.8, f"the entity named earlier: {self.entity}")
        return None

    def class_or_name(self, part: Part) -> Candidate | None:
        return self.source("class_attribute", part) or (
            self.source("entity_name", part) if part.qtype == "recognition" else None)

    def class_attribute(self, part: Part) -> Candidate | None:
        """"what breed is this dog?": the KG attribute named by the class the question asks for."""
        noun = class_noun(part.original)
        hit = self.entity_hit
        if not noun or hit is None or not hit.attributes or noun in ("kind", "type", "sort", "name"):
            return None
        for k, val in hit.attributes.items():
            if nlp.stem(noun) == nlp.stem(str(k)) and not nlp.is_instruction_attribute(k, val):
                value = f"{noun} {val}" if re.fullmatch(r"[\d.,]+", str(val).strip()) else str(val)  # "pier" + "3"
                return Candidate(value, self.entity_conf, f"KG attribute '{k}' of {hit.entity_name}")
        return None

    def ocr_lines(self) -> list[str]:
        return [ln.strip() for ln in (self.v.ocr_text or "").splitlines()
                if len(re.sub(r"[^A-Za-z]", "", ln)) >= 2 and not nlp.is_instruction(ln)]

    def ocr_title(self) -> str | None:
        """The text the photo opens with (its first two lines), to search for."""
        lines = self.ocr_lines()
        return " ".join(lines[:2]) if lines else None

    def ocr_name(self, part: Part) -> Candidate | None:
        """A name read in the photo, when image search found nothing confident, and only when a page names it too:
        text in a photo alone does not say what the thing is (and OCR misreads). The longest run of opening lines
        that a page names wins ("GULL POINT" + "LIGHTHOUSE")."""
        if self.hit is not None and self.image_conf > 0:
            return None
        lines = self.ocr_lines()[:3]
        for n in range(len(lines), 0, -1):
            title = " ".join(lines[:n])
            page = next((h for h in self.web_hits
                         if nlp.mentions(f"{h.title or ''}. {h.content or h.snippet}", title)), None)
            if page is not None:
                return Candidate(title, OCR_NAME_CONFIDENCE, f"name read in the photo, also named by {page.url}")
        return None

    def ocr_text(self, part: Part) -> Candidate | None:
        if not (self.use_image and self.v.ocr_text and _SAYS.search(part.original)):
            return None
        data = [ln for ln in self.v.ocr_text.splitlines() if ln.strip() and not nlp.is_instruction(ln)]
        if len(re.sub(r"[^A-Za-z0-9]", "", "".join(data))) < 3:
            return None  # a stray letter is not a reading
        return Candidate(" ".join(" ".join(data).split())[:300], 0.7, "text read in the photo")

    def ocr_typed(self, part: Part) -> Candidate | None:
        """A line read in the photo holding an answer of the expected type ("ROUTE 42", "EST. 1987")."""
        if not (self.use_image and self.v.ocr_text):
            return None
        lines = [ln.strip() for ln in self.v.ocr_text.splitlines() if ln.strip() and not nlp.is_instruction(ln)]
        spec = part.spec
        if spec.noun and spec.kind in ("text", "name", "place"):
            hits = [ln for ln in lines if nlp.stem(spec.noun) in nlp.stems(ln) and len(nlp.content_words(ln)) >= 2]
            if len(hits) == 1:
                return Candidate(hits[0], OCR_CONFIDENCE, f"line read in the photo naming the {spec.noun}")
        if spec.kind in ("text", "name", "yes_no", "place", "person"):
            return None  # a name alone cannot be told from the other lines of a sign or a cover
        found = [s for s in (answer_span(ln, spec, part.resolved) for ln in lines if matches(ln, spec)) if s]
        if len(set(found)) == 1:
            return Candidate(found[0], OCR_CONFIDENCE, f"{spec.kind} read in the photo")
        return None

    def kg_attribute(self, part: Part, hit: Hit | None = None) -> Candidate | None:
        """The KG attribute the question asks for: a name that shares a stem with the question or is very similar
        to it, whose value has the expected answer type; never one that carries instructions."""
        hit = hit or self.entity_hit
        spec = part.spec
        if hit is None or not hit.attributes or spec.other or spec.kind == "yes_no":
            return None
        owner = re.search(r"\bthe ([a-z-]+)'s?\s+[a-z]", part.original, re.I)
        if owner and nlp.stem(owner.group(1)) not in self.topic_words(hit.entity_name, hit):
            return None  # "which prize did the author's debut win?": about the author's book, not this record
        keys = [str(k) for k, val in hit.attributes.items()
                if matches(str(val), spec, cased=False) and not nlp.is_instruction_attribute(k, val)
                and not (spec.kind == "number" and YEAR.fullmatch(str(val).strip()))]  # a year counts nothing
        if spec.counted:
            keys = [k for k in keys if nlp.shares_stem(spec.counted, k)]
        if not keys:
            return None
        ent_words = set(nlp.normalize(hit.entity_name or "").split())
        q = " ".join(w for w in nlp.words(part.resolved) if w not in ent_words) or part.resolved
        sims = self.p.embedder.similarity(q, keys)
        asked = nlp.stems(q) - TYPE_WORDS  # what is asked, less the words that only name the answer's type
        # a specific type (a year, a length, a price) that only one attribute holds is evidence in itself
        typed_single = len(keys) == 1 and spec.kind not in ("text", "name", "person", "place")
        best: tuple[str, float] | None = None
        for k, sim in zip(keys, sims):
            kstems = nlp.stems(k)
            noun_ok = bool(spec.noun) and nlp.stem(spec.noun) in kstems
            # "where ...?", "which city ...?": the attribute must name a place ("location", "found at", "city")
            place_key = spec.kind == "place" and bool(kstems & PLACE_KEYS or re.search(r"\b(?:at|in|on|from|near)$", k))
            if spec.kind == "place" and not (noun_ok or place_key):
                continue
            # a key that shares no word (or synonym) with what is asked needs a close match on its own
            shared = bool(asked & kstems)  # a word (or synonym) of what is asked: "discovered" / "found at"
            overlap = noun_ok or place_key or shared
            need = (self.c.min_attr_sim_shared if shared else self.c.min_attr_sim if overlap or typed_single
                    else self.c.min_attr_sim_no_overlap)
            score = float(sim) + (0.2 if shared else 0.0) + (0.1 if noun_ok or place_key else 0.0)
            if sim >= need and (best is None or score > best[1]):
                best = (k, score)
        if best is None:
            return None
        value = str(hit.attributes[best[0]])
        if spec.noun and re.fullmatch(r"[\d.,]+", value.strip()) and spec.kind in ("text", "name"):
            value = f"{spec.noun} {value}"  # "which route ...?" + "42" -> "route 42"
        conf = (self.entity_conf if hit is self.entity_hit else HISTORY_ENTITY_CONFIDENCE) * min(1.0, 0.6 + best[1])
        return Candidate(value, conf, f"KG attribute '{best[0]}' of {hit.entity_name} (match {best[1]:.2f})")

    def facts(self, part: Part) -> Candidate | None:
        for f in reversed(self.v.facts):
            text = f.value or f.text
            if matches(text, part.spec) and not nlp.is_instruction(f.text) and nlp.shares_stem(part.resolved, f.text):
                return Candidate(text, f.confidence * 0.8, f"fact from {f.source}")
        return None

    def converted_fact(self, part: Part) -> Candidate | None:
        names = {t.name for t in self.v.tools_with("converts_units")}
        qty = self.quantity(part)
        for f in reversed(self.v.facts):
            if f.source in names and (f.value or f.text) and not nlp.is_instruction(f.text):
                conf = min(f.confidence, qty[2] if qty else 0.5)
                return Candidate(f.value or f.text, conf, f"converted by {f.source}: {f.text}")
        return None

    # ---- the web --------------------------------------------------------------------------------------
    @cached_property
    def other_names(self) -> list[str]:
        """Other entities the image search returned: text about them is not about this entity."""
        own = set(nlp.normalize(self.entity or "").split())
        return [h.entity_name for h in self.kg_hits if h.entity_name and h.entity_name != self.entity
                and not set(nlp.normalize(h.entity_name).split()) <= own]

    def topic_words(self, entity: str | None, hit: Hit | None) -> set[str]:
        """Stems that show a text is about the entity: its name and its class ("domestic cat" for a cat's photo)."""
        words = nlp.stems(entity or "")
        for k, v in ((hit.attributes or {}).items() if hit is not None else []):
            if str(k).lower() in CLASS_KEYS and not nlp.is_instruction_attribute(k, v):
                words |= nlp.stems(str(v))
        return words

    @staticmethod
    def names_another(text: str, entity: str, topic: set[str]) -> bool:
        """`text` names something else of the entity's kind: a proper name holding a class word of the entity
        ("Sol Bakery" when the entity is "Luna Bakery")."""
        own = nlp.normalize(entity)
        cls = topic - nlp.stems(entity)
        return any((nlp.stems(p.text) & cls or nlp.stems(p.text) & nlp.stems(entity)) and nlp.normalize(p.text) not in own
                   and len(p.text.split()) >= 2 for p in name_phrases(text))

    def web_span(self, part: Part, question: str | None = None, spec: AnswerSpec | None = None,
                 must_mention: str | None = None, avoid: list[str] | None = None) -> Candidate | None:
        """The best web sentence that answers, and the answer span in it. A sentence qualifies when it states
        something (no instruction), holds an answer of the expected type, is about the entity (its name or class
        in the sentence or the page title) and shares words with what is asked."""
        question = question or part.resolved
        spec = spec or part.spec
        entity = must_mention or part.entity
        topic = (self.topic_words(part.entity, self.entity_hit if part.entity else None) if not must_mention
                 else nlp.stems(must_mention))
        ent_words = set(nlp.normalize(entity or "").split())
        # what is asked, less the entity and the words that only name the answer's type ("which city")
        qwords = (nlp.stems(" ".join(w for w in nlp.content_words(question) if w not in ent_words)) - topic - TYPE_WORDS
                  - ({nlp.stem(spec.noun or "")} if spec.kind != "text" else set()))
        # the words that say what is asked about, less the names in the question ("who designed Neil Armstrong's
        # spacesuit": a sentence about Neil Armstrong that says nothing of designing or spacesuits does not answer)
        name_words = {nlp.stem(w) for p in name_phrases(question) for w in re.findall(r"\b[A-Z][\w'-]*", p.text)}
        asked = qwords - name_words
        priced = (priced_thing(question) - topic - nlp.stems(entity or "")) if spec.kind == "money" else set()
        cands: list[tuple[str, Hit]] = []
        for h in self.web_hits:
            body = h.content or h.snippet
            page = f"{h.title or ''}. {body}"
            page_topic = topic
            if must_mention:
                if not nlp.mentions(page, must_mention):
                    continue
                alias = re.search(re.escape(must_mention) + r"\s*\(([^()]{2,30})\)", page, re.I)
                page_topic = topic | (nlp.stems(alias.group(1)) if alias else set())  # "Foo Bar Observatory (FBO)"
            if any(nlp.mentions(h.title or "", o) and not (entity and nlp.mentions(h.title or "", entity))
                   for o in self.other_names):
                continue  # a page about another entity the image search also found (a look-alike)
            subject = page_subject(h)
            title_topical = bool(page_topic & nlp.stems(h.title or "")) or bool(
                must_mention and subject and nlp.mentions(subject, must_mention))  # the page opens with it
            for sent in page_sentences(h):
                sent = with_subject(sent, subject)
                if not matches(sent, spec):
                    continue
                if spec.counted and nlp.stem(spec.counted) not in nlp.stems(sent):
                    continue  # "how many galaxies" needs a sentence about galaxies
                if priced and not priced <= nlp.stems(sent):
                    continue  # "how much is a return ticket": a sentence about one-way tickets does not say
                if entity and not (title_topical or page_topic & nlp.stems(sent)):
                    continue  # not about the entity asked about
                if entity and not must_mention and not (nlp.mentions(sent, entity) or nlp.mentions(h.title or "", entity)) \
                        and self.names_another(f"{h.title or ''}. {sent}", entity, page_topic):
                    continue  # about another thing of the same kind ("Sol Bakery" for a photo of "Luna Bakery")
                if any(nlp.mentions(sent, o) and not nlp.mentions(sent, entity or "") for o in self.other_names):
                    continue  # about a look-alike entity
                cands.append((sent, h))
        if not cands:
            return None
        sims = self.p.embedder.similarity(question, [s for s, _ in cands])
        best: tuple[float, Candidate] | None = None
        for (sent, h), sim in zip(cands, sims):
            swords = nlp.stems(sent)
            if not swords - qwords - topic:
                continue  # only repeats the question
            if spec.kind == "yes_no":
                text = self.yes_no(question, sent, qwords, ent_words)
            else:
                known = [str(v) for v in (self.entity_hit.attributes or {}).values()] if (
                    spec.other and self.entity_hit is not None) else []
                text = answer_span(sent, spec, question, avoid=[entity or "", *(avoid or []), *known])
            if not text:
                continue
            noun_typed = bool(spec.noun and spec.kind != "text" and nlp.stem(spec.noun) in nlp.stems(text))
            if qwords and not (asked or qwords) & swords and not noun_typed:
                continue  # about the entity, but not about what is asked ("which lake": a lake's name will do)
            typed = spec.kind != "text" or bool(spec.noun and nlp.stem(spec.noun) in nlp.stems(
                sent if spec.other else text))
            if not typed and (not qwords or len(qwords & swords) < self.c.min_free_text_coverage * len(qwords)):
                continue  # a free-text answer has no type to check: the sentence must cover what is asked
            score = float(sim) + 0.05 * len(qwords & swords) / max(1, len(qwords)) + (
                0.05 if entity and nlp.mentions(sent, entity) else 0.0) + (
                0.1 if spec.noun and spec.kind != "text" and nlp.stem(spec.noun) in swords else 0.0)  # "which county"
            if best is None or score > best[0]:
                best = (score, Candidate(self.short(text), 0.0, f"web sentence from {h.url} (match {score:.2f})", sent))
        if best is None or best[0] < self.c.min_web_sim:
            return None
        score, cand = best
        cand.confidence = min(1.0, score) * ((0.6 + 0.4 * self.entity_conf) if self.depends_on_image(part) else 1.0)
        return cand

    @staticmethod
    def yes_no(question: str, sentence: str, qwords: set[str], ent_words: set[str]) -> str | None:
        """yes/no only when the sentence states it: every word the question asks about is in it; "no" when it is
        negated."""
        need = qwords - {nlp.stem(w) for w in ent_words}
        if not need or not need <= nlp.stems(sentence):
            return None
        neg = re.search(r"\b(?:not|no|never|cannot|can't|isn't|aren't|wasn't|weren't|doesn't|don't|didn't|won't|"
                        r"prohibited|forbidden|banned|nor)\b", sentence, re.I)
        clause = max(nlp.clauses(sentence), key=lambda c: len(nlp.stems(c) & need), default=sentence)
        return f"{'No' if neg else 'Yes'}, {clause[0].lower() + clause[1:] if clause else ''}".strip(" ,")

    # ---- multi-hop ---------------------------------------------------------------------------------------
    def bridge(self, part: Part) -> Candidate | None:
        """Hop 1 of a multi-hop question: the entity the clause describes, from the KG record or the web."""
        b = parse_bridge(part.original)
        if b is None or self.entity is None:
            return None
        hop1 = nlp.resolve_references(b.hop1, self.entity)
        hit = self.entity_hit
        if hit is not None and hit.attributes:
            clause_words = nlp.stems(b.clause) | {nlp.stem(b.noun)}
            for k, val in hit.attributes.items():
                if nlp.is_instruction_attribute(k, val):
                    continue
                pieces = [p.strip() for p in str(val).split(",") if p.strip()]
                by_noun = [p for p in pieces if nlp.stem(b.noun) in nlp.stems(p)]
                if by_noun or nlp.stems(str(k)) & clause_words:
                    value = (by_noun or pieces or [str(val)])[0]
                    return Candidate(value, self.entity_conf, f"hop 1 from KG attribute '{k}' of {self.entity}")
        got = self.web_span(part, question=hop1, spec=AnswerSpec(kind="name", noun=b.noun))
        if got is not None:
            got.note = "hop 1: " + got.note
        return got

    def hop2_question(self, part: Part, bridge: str) -> str:
        b = parse_bridge(part.original)
        assert b is not None
        return b.hop2.format(bridge=bridge)

    def bridge_hop(self, part: Part) -> Candidate | None:
        b = parse_bridge(part.original)
        first = self.source("bridge", part)
        if b is None or first is None:
            return None
        hop2 = self.hop2_question(part, first.text)
        rest = nlp.stems(hop2) - nlp.stems(first.text) - {"name", "call", "called", "title"}
        if not rest:  # "what is the name of the street this cafe is on?": hop 1 is the answer
            return first
        second = self.web_span(part, question=hop2, spec=expected_answer(hop2), must_mention=first.text,
                               avoid=[self.entity or ""])
        if second is None:
            return None
        return Candidate(second.text, min(first.confidence, second.confidence),
                         f"{first.note}: {first.text}; hop 2: {second.note}", second.sentence)

    # ---- comparisons -------------------------------------------------------------------------------------
    def is_self(self, side: str) -> bool:
        return bool(re.search(r"\b(this|these|that|those|it|its|he|she|him|her)\b", side, re.I)) or (
            self.entity is not None and nlp.mentions(side, self.entity))

    def side_name(self, side: str) -> str:
        if self.is_self(side) and self.entity:
            return self.entity
        asked = re.search(re.escape(side.strip()), self.question, re.I)  # as written in the question
        return re.sub(r"^(?:the|a|an)\s+", "", (asked.group(0) if asked else side).strip(), flags=re.I)

    @staticmethod
    def side_query(cmp: Comparison, side: str) -> str:
        name = re.sub(r"^(?:the|a|an)\s+", "", side.strip(), flags=re.I)
        word = {"length": "height tall", "mass": "weight", "speed": "speed", "temperature": "temperature",
                "year": " ".join(cmp.events) or "year"}.get(cmp.dimension, "")
        return f"{name} {word}".strip()

    def side_value(self, cmp: Comparison, side: str, event: str | None) -> SideValue | None:
        name = self.side_name(side)
        if self.is_self(side) and self.entity_hit is not None and self.entity_hit.attributes:
            for k, val in self.entity_hit.attributes.items():
                if nlp.is_instruction_attribute(k, val):
                    continue
                v = self._measure(cmp, str(val), str(k), event)
                if v is not None:
                    return SideValue(v[0], v[1], self.entity_conf)
        if self.is_self(side) and self.entity is None:
            return None
        best: tuple[float, SideValue] | None = None
        probe = f"{name} {self.side_query(cmp, side)}"
        for h in self.web_hits:
            if not nlp.mentions(f"{h.title or ''}. {h.content or h.snippet}", name):
                continue
            sents = [s for s in page_sentences(h) if nlp.mentions(s, name)
                     or nlp.mentions(h.title or "", name)]
            for s in sents:
                v = self._measure(cmp, s, s, event)
                if v is None:
                    continue
                sim = float(self.p.embedder.similarity(probe, [s])[0])
                if sim >= self.c.min_web_sim and (best is None or sim > best[0]):
                    best = (sim, SideValue(v[0], v[1], sim))
        return best[1] if best else None

    @staticmethod
    def _measure(cmp: Comparison, text: str, context: str, event: str | None) -> tuple[float, str] | None:
        """The value of the compared dimension in `text` (context: the attribute name or the sentence)."""
        if cmp.dimension == "year":
            ev = nlp.stems(event or "")
            cues = ev or {nlp.stem(w) for w in ("year", "born", "built", "founded", "launched", "opened", "established",
                                                "published", "released", "first", "completed", "created")}
            if not (nlp.stems(context) & cues):
                return None
            m = YEAR.search(text)
            if not m:
                return None
            digits = re.search(r"\d+", m.group(0))
            if not digits:
                return None
            year = int(digits.group(0)) * (-1 if re.search(r"BC", m.group(0), re.I) else 1)
            return float(year), m.group(0)
        cue = {"length": {"height", "tall", "high", "long", "length", "metr", "meter", "stand", "tower", "rise"},
               "mass": {"weight", "weigh", "mass", "heavy"}, "speed": {"speed", "fast"},
               "temperature": {"temperatur", "hot", "cold"}}.get(cmp.dimension, set())
        if cue and not (nlp.stems(context) & {nlp.stem(c) for c in cue} or set(nlp.words(context)) & cue):
            return None
        qs = [q for q in quantities(text) if q.dimension == cmp.dimension]
        if len(qs) != 1:
            return None  # none, or several and nothing tells which
        return qs[0].base, qs[0].text

    def missing_sides(self, part: Part) -> list[str]:
        cmp = parse_comparison(part.original)
        if cmp is None:
            return []
        events: list[str | None] = list(cmp.events) or [None, None]
        return [s for s, ev in zip(cmp.sides, events) if self.side(cmp, s, ev) is None and not (
            self.is_self(s) and self.entity is None)]

    def side(self, cmp: Comparison, side: str, event: str | None) -> SideValue | None:
        return self.memo(("side", side, event), lambda: self.side_value(cmp, side, event))

    def compare(self, part: Part) -> Candidate | None:
        cmp = parse_comparison(part.original)
        if cmp is None:
            return None
        events: list[str | None] = list(cmp.events) or [None, None]
        a, b = (self.side(cmp, s, ev) for s, ev in zip(cmp.sides, events))
        if a is None or b is None:
            return None
        if a.value == b.value:
            return None
        shown = f"{a.text} vs {b.text}"
        conf = min(a.confidence, b.confidence)
        note = f"compared {self.side_name(cmp.sides[0])} ({a.text}) with {self.side_name(cmp.sides[1])} ({b.text})"
        if cmp.relation == "before_after":
            return Candidate(f"{'before' if a.value < b.value else 'after'} ({shown})", conf, note)
        first_wins = (a.value > b.value) if cmp.relation == "more" else (a.value < b.value)
        if cmp.yes_no:
            return Candidate(f"{'Yes' if first_wins else 'No'} ({shown})", conf, note)
        winner = self.side_name(cmp.sides[0] if first_wins else cmp.sides[1])
        return Candidate(f"{winner} ({shown})", conf, note)

    # ---- counts and conversions ---------------------------------------------------------------------------
    def count(self, part: Part) -> Candidate | None:
        """"how many X did it ...?" with no number stated: count the items a sentence lists after X."""
        noun = part.spec.counted
        if not noun:
            return None
        for h in self.web_hits:
            for s in page_sentences(h):
                m = re.search(rf"\b{re.escape(nlp.stem(noun))}\w*\s*(?::|were|are|include|included)\s+([^.;]+)", s, re.I)
                if m and (self.entity is None or nlp.mentions(s, self.entity) or nlp.mentions(h.title or "", self.entity)):
                    items = [i for i in re.split(r",\s*(?:and\s+)?|\s+and\s+", m.group(1)) if i.strip()]
                    if len(items) >= 2:
                        return Candidate(str(len(items)), 0.5, f"counted {len(items)} {noun} listed in {h.url}", s)
        return None

    def quantity(self, part: Part) -> tuple[float, str, float] | None:
        """(value, unit, confidence) to convert: from the previous answer, else the entity's KG record or the web."""
        target = conversion_target(part.original)
        dim = unit_dimension(target)
        if dim is None:
            return None

        def pick(text: str) -> tuple[float, str] | None:
            qs = [q for q in quantities(text) if q.dimension == dim and q.unit and q.unit != target]
            return (qs[0].value, qs[0].unit) if len(qs) == 1 and qs[0].unit else None

        for turn in reversed(self.v.history):
            got = pick(turn.answer) if not nlp.is_abstention(turn.answer) else None
            if got:
                return got[0], got[1], 0.8
        hit = self.entity_hit
        for k, val in ((hit.attributes or {}).items() if hit is not None else []):
            got = pick(str(val)) if not nlp.is_instruction_attribute(k, val) else None
            if got and nlp.shares_stem(part.original + " height length weight size", str(k)):
                return got[0], got[1], self.entity_conf
        for h in self.web_hits:
            for s in page_sentences(h):
                got = pick(s)
                if got and self.entity and nlp.mentions(s, self.entity):
                    return got[0], got[1], WEB_QUANTITY_CONFIDENCE
        return None

