from typing import Annotated

from pydantic import Field

from tools.base import Replace, ToolContext, ToolOutput, finite_score
from tools.registry import tool


@tool(profiles={"crag-mm", "superglasses"}, tags={"reranks"}, writes={"evidence"})
def reranker(ctx: ToolContext, query: str = "", lam: Annotated[float, Field(ge=0, le=100, allow_inf_nan=False)] = 1.0,
             top_k: Annotated[int, Field(ge=1, le=100)] = 5) -> ToolOutput:
    """Rerank the evidence gathered so far against the question and drop weak items (dynamic threshold median - lam*MAD).

    Args:
        query: what the evidence should answer (default: the turn's question)
        lam: threshold width; larger keeps more items
        top_k: keep at most this many items
    """
    from models.reranker import filter_by_threshold, make_reranker

    if not ctx.evidence:
        return ToolOutput(summary="nothing to rerank yet", method="none")
    q = query.strip() or ctx.question
    r = ctx.resources
    model = r.get("reranker", lambda: make_reranker(r.paths.reranker, r.text_embedder()))
    scores = [finite_score(float(s)) for s in model.score(q, [h.text()[:2000] for h in ctx.evidence])]
    # with fewer than 3 items the median - lam*MAD cut says nothing: keep them all, best first
    ranked = (filter_by_threshold(ctx.evidence, scores, lam) if len(scores) >= 3
              else sorted(zip(ctx.evidence, scores), key=lambda x: x[1], reverse=True))
    kept = [h.model_copy(update={"rerank_score": s}) for h, s in ranked][: max(1, top_k)]
    cut = min(s for _, s in ranked)
    summary = f"kept {len(kept)}/{len(scores)} (threshold {cut:.3f}): " + "; ".join(
        f"{h.entity_name or h.title} ({h.rerank_score:.2f})" for h in kept)
    return ToolOutput(summary=summary, update={"evidence": Replace(kept)}, method=model.name, keywords=q)
