"""Answer sources from the text read in the photo: what it says, a line of the expected type, a name a page
confirms."""

from __future__ import annotations

import re

from glasses_rag.policies.rules.answer_types import answer_span, matches
from glasses_rag.policies.rules.candidates import Candidate, Part
from glasses_rag.policies.rules.config import OCR_CONFIDENCE, OCR_NAME_CONFIDENCE
from glasses_rag.policies.rules.reading import TurnReading
from glasses_rag.text import nlp

# questions asking what the text in the photo says (not "what language is it written for")
SAYS = re.compile(
    r"\bwhat (?:does|do|did) (?:it|this|that|these|those|the [a-z]+) (?:say|read)\b|\bwhat(?:'s| is| are| was)"
    r" (?:written|printed|displayed)\b|\b(?:read|transcribe) (?:the|this|it|that|me)\b|\bwhat (?:text|words|"
    r"letters)\b|\bwhat (?:does|do) (?:the )?(?:text|sign|label|words?|letters|writing) (?:say|read)\b",
    re.I,
)


def label_like(line: str) -> bool:
    """A line that reads as a label or a title, not a piece of running text (OCR of a page): it does not open in
    lower case, end with a comma or hold a sentence break."""
    s = line.strip()
    return bool(s) and not s[0].islower() and not s.endswith((",", ";")) and not re.search(r"[.!?]\s+\S", s)


def _data_lines(turn: TurnReading) -> list[str]:
    return [ln.strip() for ln in (turn.v.ocr_text or "").splitlines() if ln.strip() and not nlp.is_instruction(ln)]


def ocr_name(turn: TurnReading, part: Part) -> Candidate | None:
    """A name read in the photo, when image search found nothing confident, and only when a page names it too:
    text in a photo alone does not say what the thing is (and OCR misreads). The longest run of opening lines that
    a page names wins ("GULL POINT" + "LIGHTHOUSE")."""
    if turn.hit is not None and turn.image_conf > 0:
        return None
    lines = turn.ocr_lines()[:3]
    for n in range(len(lines), 0, -1):
        title = " ".join(lines[:n])
        page = next(
            (h for h in turn.web_hits if nlp.mentions(f"{h.title or ''}. {h.content or h.snippet}", title)), None
        )
        if page is not None:
            return Candidate(title, OCR_NAME_CONFIDENCE, f"name read in the photo, also named by {page.url}")
    return None


def ocr_text(turn: TurnReading, part: Part) -> Candidate | None:
    """What the text in the photo says, for a question that asks just that."""
    if not (turn.use_image and turn.v.ocr_text and SAYS.search(part.original)):
        return None
    data = _data_lines(turn)
    if len(re.sub(r"[^A-Za-z0-9]", "", "".join(data))) < 3:
        return None  # a stray letter is not a reading
    return Candidate(" ".join(" ".join(data).split())[:300], 0.7, "text read in the photo")


def ocr_typed(turn: TurnReading, part: Part) -> Candidate | None:
    """A line read in the photo holding an answer of the expected type ("ROUTE 42", "EST. 1987")."""
    if not (turn.use_image and turn.v.ocr_text):
        return None
    lines = _data_lines(turn)
    spec = part.spec
    if spec.noun and spec.kind in ("text", "name", "place"):
        hits = [
            ln
            for ln in lines
            if nlp.stem(spec.noun) in nlp.stems(ln) and len(nlp.content_words(ln)) >= 2 and label_like(ln)
        ]
        if len(hits) == 1:
            return Candidate(hits[0], OCR_CONFIDENCE, f"line read in the photo naming the {spec.noun}")
    if spec.kind in ("text", "name", "yes_no", "place", "person"):
        return None  # a name alone cannot be told from the other lines of a sign or a cover
    found = [
        s
        for s in (
            answer_span(ln, spec, part.resolved, units=turn.units)
            for ln in lines
            if matches(ln, spec, units=turn.units)
        )
        if s
    ]
    if len(set(found)) == 1:
        return Candidate(found[0], OCR_CONFIDENCE, f"{spec.kind} read in the photo")
    return None
