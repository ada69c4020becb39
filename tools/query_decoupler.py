from models import nlp
from tools.base import ToolContext, ToolOutput
from tools.registry import tool

METHOD = "heuristic:rule-decoupler"
MAX_SUB_QUESTIONS = 8  # a runaway compound question must not fan out into unbounded searches


def current_entity(ctx: ToolContext, min_score: float = 0.0) -> str | None:
    """Best guess at what 'this' / 'it' means: top image-KG hit, else the previous turn's entity."""
    kg = [h for h in ctx.evidence if h.source == "image_kg" and h.entity_name and h.score >= min_score]
    if kg:
        return max(kg, key=lambda h: h.score).entity_name
    for turn in reversed(ctx.history):
        if turn.entity:
            return turn.entity
    return None


@tool(profiles={"crag-mm", "superglasses"}, tags={"decouples_query"}, writes={"sub_questions"})
def query_decoupler(ctx: ToolContext, question: str = "", entity: str = "") -> ToolOutput:
    """Rewrite the question into stand-alone sub-questions: split compound questions and replace 'this'/'it' with the entity.

    Args:
        question: the question to decouple (default: the turn's question)
        entity: the entity that 'this'/'it' refers to (default: top image-search hit or the previous turn's entity)
    """
    q = question.strip() or ctx.question
    ent = entity.strip() or current_entity(ctx)
    subs = [nlp.resolve_references(part, ent) for part in nlp.split_question(q)[:MAX_SUB_QUESTIONS]]
    kw = "; ".join(nlp.keywords(s, ent) for s in subs)
    summary = f"{len(subs)} sub-question(s): " + " | ".join(subs) + (f" (entity: {ent})" if ent else " (no entity resolved)")
    return ToolOutput(summary=summary, update={"sub_questions": subs}, keywords=kw, method=METHOD)
