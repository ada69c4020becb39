"""Which entity the turn is about: the image-KG match (with the photo's text as a tie-breaker), its look-alikes, the
entity an earlier turn named, and someone an earlier answer named (for "he"/"she")."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from glasses_rag.core.types import HistoryTurn, Hit
from glasses_rag.policies.rules.answer_types import expected_answer
from glasses_rag.policies.rules.canonical import canonical
from glasses_rag.policies.rules.config import RulePlannerConfig
from glasses_rag.policies.rules.lexicon import CLASS_KEYS, GENERIC_KINDS, PERSON_KEYS
from glasses_rag.policies.rules.recognition import class_noun
from glasses_rag.text import nlp


@dataclass
class ImageMatch:
    hit: Hit | None = None
    confidence: float = 0.0  # 0: no match trusted
    rivals: list[Hit] = field(default_factory=list)  # look-alikes: other entities whose score ties with the top's


def asked_kind(question: str) -> str | None:
    """The stem of the kind of thing the question says is pictured ("this lighthouse", "which bird")."""
    words = nlp.pointed_phrase(question).split() or [class_noun(question) or ""]
    w = words[-1].lower()
    return nlp.stem(w) if w and w not in GENERIC_KINDS and w not in nlp.FUNCTION_WORDS else None


def kind_words(h: Hit) -> set[str]:
    """Stems that say what the entity is: its name and its class attributes (species, category, ...)."""
    return nlp.stems(h.entity_name or "") | {
        s for k, v in (h.attributes or {}).items() if str(k).lower() in CLASS_KEYS for s in nlp.stems(str(v))
    }


def _glued_name_words(kg_hits: list[Hit], compact: str) -> set[str]:
    """Stems of the matches' name words found in OCR text with its spaces lost ("HARWICKFERRY")."""
    return {
        nlp.stem(w) for h in kg_hits for w in nlp.content_words(h.entity_name or "") if len(w) >= 4 and w in compact
    }


def named_in_photo(kg_hits: list[Hit], ocr: str, floor: float) -> Hit | None:
    """The image match whose name the text in the photo shows best (its words read, those on the first line count
    extra), when one stands out; None when the text names none of them or several equally."""
    lines = [ln for ln in ocr.splitlines() if ln.strip()]
    first_compact = re.sub(r"[^a-z0-9]", "", lines[0].lower()) if lines else ""
    first = (nlp.stems(lines[0]) if lines else set()) | _glued_name_words(kg_hits, first_compact)
    have = nlp.stems(ocr) | _glued_name_words(kg_hits, re.sub(r"[^a-z0-9]", "", ocr.lower()))
    scored: dict[str, tuple[float, Hit]] = {}
    for h in kg_hits:
        if h.score < floor - 0.1 or not h.entity_name or h.entity_name in scored:
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


def _rivals(kg_hits: list[Hit], top: Hit, floor: float, tie_margin: float) -> list[Hit]:
    seen: set[str] = {top.entity_name or ""}
    out = []
    for h in kg_hits:
        if h.entity_name not in seen and h.score >= floor and abs(top.score - h.score) <= tie_margin:
            seen.add(h.entity_name or "")
            out.append(h)
    return out


def image_entity(kg_hits: list[Hit], ocr: str, question: str, config: RulePlannerConfig, floor: float) -> ImageMatch:
    """Top image-KG entity and a 0..1 confidence from its score and its margin over the runner-up; a candidate whose
    name is read in the photo wins over a top match whose name is not (signs, labels, covers). Other entities whose
    score ties with the top's (`image_tie_margin`) and that the text in the photo does not tell apart are the
    rivals: answers must then hold for all of them (look-alike signs, covers, labels)."""
    if not kg_hits:
        return ImageMatch()
    top = kg_hits[0]
    read = named_in_photo(kg_hits, ocr, floor) if ocr else None
    if read is not None and (read.entity_name != top.entity_name or top.score < floor):
        return ImageMatch(read, 0.6)  # the photo's text names it: image and text agree (a label, a sign, a cover)
    noun = asked_kind(question)
    if read is None and noun and noun not in kind_words(top):
        # "which lighthouse is this?": a runner-up that is a lighthouse beats a top match that is not
        fits = [h for h in kg_hits[1:] if h.score >= floor and noun in kind_words(h)]
        if fits:
            top = fits[0]
    second = next((h.score for h in kg_hits if h.entity_name != top.entity_name and h.score <= top.score), 0.0)
    if top.score < floor or top.score - second < config.min_image_margin:
        return ImageMatch(top, 0.0)
    rivals = _rivals(kg_hits, top, floor, config.image_tie_margin) if read is None else []
    margin = min(0.2, (top.score - second) * 2)
    return ImageMatch(top, min(1.0, 0.5 + (top.score - floor) / max(1e-6, 1 - floor) * 0.3 + margin), rivals)


def entity_is_person(hit: Hit | None) -> bool | None:
    if hit is not None and hit.attributes:
        return bool(PERSON_KEYS & {str(k).lower() for k in hit.attributes})
    return None


def history_person(history: list[HistoryTurn]) -> str | None:
    """Someone an earlier answer named ("who was the first to walk on it?" -> he/she in the next turn)."""
    for h in reversed(history):
        if (
            expected_answer(canonical(h.question)).kind == "person"
            and not nlp.is_abstention(h.answer)
            and len(h.answer.split()) <= 6
        ):
            return h.answer.strip(" .")
    return None
