"""Query decoupling: split a compound question and resolve 'this' / 'it' to the entity it refers to.

With a model policy configured (`ToolContext.llm`), the policy's model rewrites the question (as SuperLens's
VLM decoupler does), seeing the photo when it can; otherwise, or when the model's reply is unusable, the named
heuristic (rule-based splitting and reference resolution) does, and the trace's `method` says which ran.
"""

from __future__ import annotations

import string
from importlib.resources import files
from typing import Any

from glasses_rag.core.calls import Cancelled
from glasses_rag.text import nlp
from tools.base import ToolContext, ToolOutput
from tools.registry import tool

METHOD = "heuristic:rule-decoupler"
MAX_SUB_QUESTIONS = 8  # a runaway compound question must not fan out into unbounded searches
PROMPT = files("prompts") / "vlm_decouple.txt"  # package data, wherever the project is installed
SCHEMA = {
    "name": "decoupled",
    "schema": {
        "type": "object",
        "additionalProperties": False,
        "required": ["sub_questions", "entity"],
        "properties": {
            "sub_questions": {
                "type": "array",
                "minItems": 1,
                "maxItems": MAX_SUB_QUESTIONS,
                "items": {"type": "string"},
            },
            "entity": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        },
    },
}


def current_entity(ctx: ToolContext, min_score: float = 0.0) -> str | None:
    """Best guess at what 'this' / 'it' means: top image-KG hit, else the previous turn's entity."""
    kg = [h for h in ctx.evidence if h.source == "image_kg" and h.entity_name and h.score >= min_score]
    if kg:
        return max(kg, key=lambda h: h.score).entity_name
    for turn in reversed(ctx.history):
        if turn.entity:
            return turn.entity
    return None


def model_decouple(llm: Any, ctx: ToolContext, question: str, entity: str | None) -> tuple[list[str], str | None]:
    """The policy's model rewrites the question; ValueError when its reply is unusable."""
    from glasses_rag.models.vlm.base import complete_and_report, extract_json, image_to_data_url

    sees = ctx.image is not None and getattr(llm, "supports_images", False)
    note = (
        "An image from the user's smart glasses is attached."
        if sees
        else "The photo is not shown to you."
        if ctx.image is not None
        else "No image is available."
    )
    history = (
        "\n".join(
            f"Q: {h.question} A: {h.answer}" + (f" [entity: {h.entity}]" if h.entity else "") for h in ctx.history[-4:]
        )
        or "(none)"
    )
    text = string.Template(PROMPT.read_text(encoding="utf-8")).safe_substitute(
        question=question, image_note=note, history=history, entity=entity or "unknown", max_sub=MAX_SUB_QUESTIONS
    )
    content: Any = text
    if sees:
        content = [
            {"type": "image_url", "image_url": {"url": image_to_data_url(ctx.image)}},
            {"type": "text", "text": text},
        ]
    reply = complete_and_report(
        llm, "decouple", [{"role": "user", "content": content}], response_schema=SCHEMA, max_tokens=256
    )
    obj = extract_json(reply.text) or {}
    subs = obj.get("sub_questions")
    if isinstance(subs, str):
        subs = [subs]
    subs = [s.strip() for s in subs or [] if isinstance(s, str) and s.strip()][:MAX_SUB_QUESTIONS]
    if not subs:
        raise ValueError(f"no sub-questions in the model's reply: {reply.text[:200]!r}")
    named = obj.get("entity")
    if isinstance(named, str) and named.strip().lower() not in ("", "null", "none", "unknown"):
        entity = named.strip()
    return subs, entity


@tool(tags={"decouples_query"}, writes={"sub_questions"})
def query_decoupler(ctx: ToolContext, question: str = "", entity: str = "") -> ToolOutput:
    """Rewrite the question into stand-alone sub-questions: split compound questions and replace 'this'/'it' with the
    entity.

    Args:
        question: the question to decouple (default: the turn's question)
        entity: the entity that 'this'/'it' refers to (default: top image-search hit or the previous turn's entity)
    """
    q = question.strip() or ctx.question
    ent = entity.strip() or current_entity(ctx)
    method, note = METHOD, ""
    subs: list[str] | None = None
    if ctx.llm is not None:
        try:
            subs, ent = model_decouple(ctx.llm, ctx, q, ent)
            method = f"model-decoupler:{getattr(ctx.llm, 'name', 'model')}"
        except Cancelled:
            raise
        except Exception as e:  # noqa: BLE001 - an unusable model reply falls back to the named heuristic
            note = f"; the model's decoupling failed ({type(e).__name__}), the heuristic was used"
    if subs is None:
        subs = [nlp.resolve_references(part, ent) for part in nlp.split_question(q)[:MAX_SUB_QUESTIONS]]
    kw = "; ".join(nlp.keywords(s, ent) for s in subs)
    summary = (
        f"{len(subs)} sub-question(s): "
        + " | ".join(subs)
        + (f" (entity: {ent})" if ent else " (no entity resolved)")
        + note
    )
    return ToolOutput(summary=summary, update={"sub_questions": subs}, keywords=kw, method=method)
