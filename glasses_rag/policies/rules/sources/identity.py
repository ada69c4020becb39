"""The recognised entity's own name as an answer (recognition questions)."""

from __future__ import annotations

from glasses_rag.policies.rules.candidates import Candidate, Part
from glasses_rag.policies.rules.config import HISTORY_ENTITY_CONFIDENCE
from glasses_rag.policies.rules.reading import TurnReading


def entity_name(turn: TurnReading, part: Part) -> Candidate | None:
    """The entity the image search recognised with confidence, or (without the photo) the one named earlier."""
    if turn.hit is not None and turn.image_conf > 0:
        return Candidate(
            turn.hit.entity_name or "",
            turn.image_conf,
            f"recognised {turn.hit.entity_name} (image score {turn.hit.score:.2f})",
        )
    if turn.entity and not turn.use_image:
        return Candidate(turn.entity, HISTORY_ENTITY_CONFIDENCE * 0.8, f"the entity named earlier: {turn.entity}")
    return None


def class_or_name(turn: TurnReading, part: Part) -> Candidate | None:
    """What a recognition question gets from the KG: the class attribute it names, else the entity's name."""
    return turn.source("class_attribute", part) or (
        turn.source("entity_name", part) if part.qtype == "recognition" else None
    )
