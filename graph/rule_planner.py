"""The embedded default policy: a rule-based planner (a heuristic, named as such everywhere).

It needs no GPU and no VLM weights. It decides from question patterns (does the question point
at the image? ask about text? have several parts?), from OCR text and from retrieval scores,
and composes answers from image-KG attributes, OCR text and web sentences ranked with MiniLM.
It abstains when the evidence is weak: a wrong answer costs more than "I don't know".
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel

from graph.policy import IDK, AnswerDraft, Decision, ParallelCall, PolicyView, ToolSpec
from models import nlp as _text
from tools.base import Hit

RECOGNITION = re.compile(
    r"^\s*(?:what|which|who)(?:'s|\s+is|\s+are|\s+was)?\s+(?:the\s+(?:name|title|kind|type|species|breed|model)\s+of\s+)?"
    r"(?:this|that|these|those|it)\b(?:\s+\w+){0,2}\s*\??\s*$"
    r"|^\s*(?:what|which)\s+(?:kind of |type of |sort of )?\w+(?:\s+\w+)?\s+(?:is|are)\s+(?:this|that|these|those|it)\s*\??\s*$"
    r"|\bwhat (?:is|'s) (?:this|that) called\b|\bidentify\b",
    re.I,
)
HOW_MANY = re.compile(r"\bhow many (\w+)", re.I)
OTHER = re.compile(r"\b(other|else|another|besides)\b", re.I)


class RulePlannerConfig(BaseModel):
    min_image_score: float | None = None  # similarity under which an image-KG match is not trusted (None: the search backend's floor, else 0.6)
    min_image_margin: float = 0.0  # top-1 minus top-2 score needed (different entities)
    min_attr_sim: float = 0.35  # question vs attribute-name similarity when they share a word stem
    min_attr_sim_no_overlap: float = 0.5  # ... when they share none
    min_web_sim: float = 0.45  # question vs sentence similarity to answer from the web
    max_answer_words: int = 40
    max_parts: int = 4  # a question asking more than this many things gets only the first ones answered


class RuleBasedPlanner:
    """Policy protocol implementation. `embedder` is a models.text_embedder.TextEmbedder (or a factory)."""

    name = "rule-based-planner (heuristic)"
    blocking = False  # local rules and a small embedder: runs in the graph's thread

    def __init__(self, embedder: Any, config: RulePlannerConfig | None = None):
        self._embedder = embedder
        self.config = config or RulePlannerConfig()

    @property
    def embedder(self):
        if callable(self._embedder) and not hasattr(self._embedder, "similarity"):
            self._embedder = self._embedder()
        return self._embedder

    # ---- reading the view -------------------------------------------------------------------
    def _needs_image(self, v: PolicyView) -> bool:
        if not v.has_image:
            return False
        q = v.question
        # a follow-up's "it" is most often the pictured entity, so the image stays in play
        return not v.history or _text.refers_to_image(q) or _text.has_pronoun(q)

    def _kg(self, v: PolicyView) -> tuple[Hit | None, float]:
        """Top image-KG entity and a 0..1 confidence from its score and its margin over the runner-up."""
        kg = sorted([h for h in v.evidence if h.source == "image_kg" and h.entity_name], key=lambda h: h.score, reverse=True)
        if not kg:
            return None, 0.0
        top = kg[0]
        second = next((h.score for h in kg[1:] if h.entity_name != top.entity_name), 0.0)
        c = self.config
        floor = 0.6 if c.min_image_score is None else c.min_image_score
        if top.score < floor or top.score - second < c.min_image_margin:
            return top, 0.0
        conf = min(1.0, 0.5 + (top.score - floor) / max(1e-6, 1 - floor) * 0.3 + min(0.2, (top.score - second) * 2))
        return top, conf

    def _entity(self, v: PolicyView, use_image: bool) -> tuple[str | None, float, Hit | None]:
        top, conf = self._kg(v) if use_image else (None, 0.0)
        if top is not None and conf > 0:
            return top.entity_name, conf, top
        if v.history and (_text.has_pronoun(v.question) or not use_image):
            for t in reversed(v.history):
                if t.entity:
                    return t.entity, 0.7, None
        if use_image and v.ocr_text:
            first = v.ocr_text.splitlines()[0].strip()
            if first:
                return first, 0.4, None
        return None, 0.0, None

    def _targets(self, v: PolicyView, entity: str | None) -> list[tuple[str, str]]:
        """(original part, stand-alone part) per thing asked: 'this'/'it' resolved to the entity."""
        parts = _text.split_question(v.question)[: self.config.max_parts]
        subs = v.sub_questions[: self.config.max_parts]
        if subs and len(subs) == len(parts):
            return list(zip(parts, subs))
        if subs:
            return [(q, q) for q in subs]
        return [(p, _text.resolve_references(p, entity)) for p in parts]

    def _attr_answer(self, question: str, hit: Hit | None) -> tuple[str, float] | None:
        """The KG attribute the question asks for: a name that shares a stem with the question or is
        very similar to it, whose value has the expected answer type."""
        if hit is None or not hit.attributes or OTHER.search(question):
            return None  # "what other flavor..." asks for something the entity's own record does not hold
        kind = _text.expected_type(question)
        counted = HOW_MANY.search(question)
        keys = [str(k) for k, val in hit.attributes.items()
                if _text.matches_type(str(val), kind, cased=False) and not _text.INJECTION.search(f"{k} {val}")]
        if counted:
            keys = [k for k in keys if _text.shares_stem(counted.group(1), k)]
        if not keys:
            return None
        ent_words = set(_text.normalize(hit.entity_name or "").split())
        q = " ".join(w for w in _text.words(question) if w not in ent_words) or question
        sims = self.embedder.similarity(q, keys)
        best: tuple[str, float] | None = None
        for k, sim in zip(keys, sims):
            overlap = _text.shares_stem(q, k)
            need = self.config.min_attr_sim if overlap else self.config.min_attr_sim_no_overlap
            score = float(sim) + (0.2 if overlap else 0.0)
            if sim >= need and (best is None or score > best[1]):
                best = (k, score)
        if best is None:
            return None
        return str(hit.attributes[best[0]]), min(1.0, best[1])

    def _web_answer(self, question: str, hits: list[Hit], entity: str | None) -> tuple[str, float, Hit] | None:
        """The web sentence that best answers: similar to the question, of the expected answer type,
        adding words the question does not have, and not an instruction aimed at the agent."""
        kind = _text.expected_type(question)
        counted = HOW_MANY.search(question)
        cands: list[tuple[str, Hit]] = []
        for h in hits:
            if h.source != "web":
                continue
            for sent in _text.sentences(h.content or h.snippet):
                if _text.INJECTION.search(sent) or not _text.matches_type(sent, kind):
                    continue
                if counted and not _text.shares_stem(counted.group(1), sent):
                    continue  # "how many galaxies" needs a sentence about galaxies
                cands.append((sent, h))
        if not cands:
            return None
        sims = self.embedder.similarity(question, [c for c, _ in cands])
        ent_words = set(_text.normalize(entity or "").split())
        qwords = {_text.stem(w) for w in _text.content_words(question) if w not in ent_words}
        best = None
        for (sent, h), sim in zip(cands, sims):
            swords = {_text.stem(w) for w in _text.content_words(sent)}
            if not swords - qwords - {_text.stem(w) for w in ent_words}:
                continue  # only repeats the question
            if qwords and not qwords & swords:
                continue  # about the entity, but not about what is asked
            boost = 0.05 * bool(qwords & swords) + (0.05 if entity and _text.normalize(entity) in _text.normalize(sent) else 0.0)
            score = float(sim) + boost
            if best is None or score > best[1]:
                best = (sent, score, h)
        if best is None or best[1] < self.config.min_web_sim:
            return None
        text = " ".join(best[0].split()[: self.config.max_answer_words])
        return text, min(1.0, best[1]), best[2]

    # ---- choosing tools by capability ------------------------------------------------------
    @staticmethod
    def _fill(spec: ToolSpec, offer: dict[str, Any]) -> dict[str, Any] | None:
        """The arguments the planner can give this tool: offered values for the parameters it has; None when a
        required parameter is not on offer (the planner cannot call it; a model policy still can)."""
        params = spec.json_schema["function"]["parameters"]
        props, required = params.get("properties", {}), set(params.get("required", []))
        if not required <= offer.keys():
            return None
        return {k: v for k, v in offer.items() if k in props}

    def _calls(self, v: PolicyView, tag: str, offer: dict[str, Any] | None = None, sub: str | None = None,
               fresh: bool = True) -> list[ParallelCall]:
        """One call per allowed tool with `tag` (each not yet run when `fresh`), arguments filled from `offer`."""
        out = []
        for spec in v.tools_with(tag):
            args = self._fill(spec, offer or {})
            if args is not None and not (fresh and v.ran(spec.name)):
                out.append(ParallelCall(tool=spec.name, arguments=args, sub_question=sub))
        return out

    @staticmethod
    def _ran(v: PolicyView, tag: str) -> int:
        names = {t.name for t in v.tools_with(tag)}
        return sum(1 for s in v.done if s.tool in names)

    @staticmethod
    def _decision(calls: list[ParallelCall], why: str, retrieval: bool = True, sub: str | None = None) -> Decision:
        first, rest = calls[0], calls[1:]
        return Decision(action="call_tool", tool=first.tool, arguments=first.arguments, parallel=rest, rationale=why,
                        sub_question=sub or first.sub_question, needs_retrieval=retrieval)

    # ---- the protocol -----------------------------------------------------------------------
    def decide(self, view: PolicyView, image: Any = None) -> Decision:
        v = view
        use_image = self._needs_image(v)
        q = v.question

        ocr = self._calls(v, "reads_text") if use_image and _text.asks_about_text(q) else []
        finders = self._calls(v, "finds_entity", sub=f"What is {self._target_phrase(q)}?") if use_image else []
        if finders and not self._ran(v, "finds_entity"):
            crop = self._calls(v, "locates_object", {"target": self._target_phrase(q)})
            if crop and _text.refers_to_image(q) and not RECOGNITION.search(q):
                return self._decision(crop[:1] + ocr, "focus on the object the question points at", retrieval=False)
            calls = finders + ocr  # OCR is independent of search: run alongside
            known = next((t.entity for t in reversed(v.history) if t.entity), None)
            if known and not RECOGNITION.search(q):
                # a follow-up about an entity named earlier: search the web for it while the image is searched
                sub = _text.resolve_references(q, known)
                calls += self._calls(v, "searches_web", {"query": _text.keywords(sub, known)}, sub=sub)
            return self._decision(calls, "identify the pictured entity")
        if ocr:
            return self._decision(ocr, "the question asks about text in the photo", retrieval=False)
        entity, _, top = self._entity(v, use_image)
        if use_image and entity is None:
            readers = self._calls(v, "reads_text")
            if readers:
                return self._decision(readers, "image search found no confident match; read any text instead", retrieval=False)
        parts = _text.split_question(q)[: self.config.max_parts]
        decouple = self._calls(v, "decouples_query", {"question": q, "entity": entity or ""})
        if len(parts) > 1 and decouple and not self._ran(v, "decouples_query"):
            return self._decision(decouple[:1], "the question has several parts", retrieval=False)
        targets = self._targets(v, entity)
        searchers = v.tools_with("searches_web")
        if searchers:
            rounds = self._ran(v, "searches_web") // len(searchers)  # each round asks every web-search tool
            open_targets = [t for o, t in targets if not self._answer_from_kg(o, t, top if use_image else None)]
            todo = open_targets[rounds:]
            if todo and v.remaining_steps > len(searchers):
                calls = [c for t in todo for c in self._calls(v, "searches_web", {"query": _text.keywords(t, entity)},
                                                              sub=t, fresh=False)]
                if calls:
                    return self._decision(calls, "the image KG does not hold this fact", sub=todo[0])
            webs = [h for h in v.evidence if h.source == "web"]
            rerank = self._calls(v, "reranks", {"query": " ".join(t for _, t in targets)})
            if len(webs) >= 3 and rerank and v.remaining_steps > 0:
                return self._decision(rerank[:1], "keep only the pages that answer the question", retrieval=False)
        return Decision(action="answer", rationale="enough evidence gathered or nothing left to try",
                        needs_retrieval=bool(v.done))

    def _answer_from_kg(self, original: str, target: str, top: Hit | None) -> bool:
        return top is not None and (bool(RECOGNITION.search(original)) or self._attr_answer(target, top) is not None)

    @staticmethod
    def _target_phrase(q: str) -> str:
        m = re.search(r"\b(?:this|that|these|those)\s+((?:[A-Za-z-]+\s*){1,3})", q, re.I)
        if m:
            words = [w for w in m.group(1).split() if w.lower() not in _text.NOUN_PHRASE_STOP]
            if words:
                return "the " + " ".join(words[:3])
        return "the main object"

    def answer(self, view: PolicyView, image: Any = None) -> AnswerDraft:
        v = view
        use_image = self._needs_image(v)
        entity, ent_conf, top = self._entity(v, use_image)
        q = v.question
        if _text.COMPARISON.search(q):
            return AnswerDraft(answer=IDK, confidence=0.0, entity=entity,
                               rationale="comparisons and date arithmetic are beyond the rule-based planner")
        if use_image and _text.asks_about_text(q) and v.ocr_text and re.search(r"\b(say|says|written|read|text)\b", q, re.I):
            return AnswerDraft(answer=" ".join(v.ocr_text.split())[:300], confidence=0.7, rationale="OCR text", entity=entity)
        answers: list[str] = []
        confs: list[float] = []
        notes: list[str] = []
        for original, t in self._targets(v, entity):
            if top is not None and ent_conf > 0 and RECOGNITION.search(original):
                answers.append(top.entity_name or "")
                confs.append(ent_conf)
                notes.append(f"recognised {top.entity_name} (image score {top.score:.2f})")
                continue
            kg = self._attr_answer(t, top) if ent_conf > 0 else None
            if kg is not None:
                answers.append(kg[0])
                confs.append(ent_conf * min(1.0, 0.6 + kg[1]))
                notes.append(f"KG attribute of {entity} (match {kg[1]:.2f})")
                continue
            web = self._web_answer(t, v.evidence, entity)
            if web is not None:
                answers.append(web[0])
                confs.append(web[1] * (0.6 + 0.4 * (ent_conf if use_image else 1.0)))
                notes.append(f"web sentence from {web[2].url} (match {web[1]:.2f})")
                continue
            return AnswerDraft(answer=IDK, confidence=0.0, rationale=f"no evidence answers: {t}", entity=entity)
        if not answers:
            return AnswerDraft(answer=IDK, confidence=0.0, rationale="nothing to answer from", entity=entity)
        return AnswerDraft(answer="; ".join(answers), confidence=round(min(confs), 4), rationale="; ".join(notes),
                           entity=entity if top is None else top.entity_name)
