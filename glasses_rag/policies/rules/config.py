"""The rule-based planner's thresholds (each a CLI option, see graph.run) and the fixed confidences of answers that
come without a similarity score."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field


class RulePlannerConfig(BaseModel):
    """Thresholds of the rule-based planner. Defaults were chosen on the demo benchmark only (see
    benchmarks/generalization.py --sweep) and are reported on data the planner was not written against."""

    min_image_score: float | None = Field(
        None,
        description="Image-match floor: an image-KG match under this "
        "similarity is not trusted (None: the image embedder's own floor, "
        "0.88 for the heuristic colour-texture embedder, 0.7 for CLIP; 0.6 "
        "without one).",
    )
    min_image_margin: float = Field(
        0.0, ge=0, le=1, description="Top-1 minus top-2 image score (different entities) needed to trust a match."
    )
    image_tie_margin: float = Field(
        0.01,
        ge=0,
        le=1,
        description="Image matches of other entities this close to "
        "the top one are look-alikes: the photo's text is read to tell them apart, and "
        "without it an answer must hold for all of them.",
    )
    min_attr_sim: float = Field(
        0.27, ge=0, le=1, description="Question vs KG attribute-name similarity needed when they share a word stem."
    )
    min_attr_sim_shared: float = Field(
        0.15,
        ge=0,
        le=1,
        description="... when the attribute name shares a word "
        "(or synonym) with what is asked, less the words naming the answer's type.",
    )
    min_attr_sim_no_overlap: float = Field(
        0.65, ge=0, le=1, description="... when they share none (nor a synonym, glasses_rag/text/synonyms.yaml)."
    )
    min_web_sim: float = Field(
        0.45, ge=0, le=1, description="Question vs web sentence similarity needed to answer from the web."
    )
    min_free_text_coverage: float = Field(
        0.6,
        ge=0,
        le=1,
        description="Share of the question's words a web "
        "sentence must hold to give an answer that has no type to check.",
    )
    max_answer_words: int = Field(40, ge=3, description="Longer free-text answers are cut (75 tokens are judged).")
    max_parts: int = Field(4, ge=1, description="A question asking more things gets only the first ones answered.")
    plan_table: Path | None = Field(
        None, description="Plan table file (default: glasses_rag/policies/rules/planner_table.yaml)."
    )


# confidence of answers that do not come with a similarity score
OCR_CONFIDENCE = 0.6  # text read in the photo that has the expected type
OCR_NAME_CONFIDENCE = 0.4  # a name read in the photo when image search found nothing confident
HISTORY_ENTITY_CONFIDENCE = 0.7  # the entity a previous turn was about
WEB_QUANTITY_CONFIDENCE = 0.6  # a quantity to convert, from a web sentence naming the entity
