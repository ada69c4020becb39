from tools import _text
from tools.base import ToolContext, ToolOutput, Verdict
from tools.registry import tool

METHOD = "heuristic:evidence-support"


def lexical_support(answer: str, evidence_texts: list[str]) -> tuple[float, int]:
    """Share of the answer's content words found in the best single evidence text, and that text's index."""
    ans = set(_text.content_words(answer)) or set(_text.words(answer))
    if not ans or not evidence_texts:
        return 0.0, -1
    best, best_i = 0.0, -1
    for i, t in enumerate(evidence_texts):
        have = set(_text.normalize(t).split())
        s = len(ans & have) / len(ans)
        if s > best:
            best, best_i = s, i
    return best, best_i


@tool
def self_check(ctx: ToolContext, answer: str = "") -> ToolOutput:
    """Check that the draft answer is supported by the retrieved evidence and score confidence; unsupported answers become "I don't know".

    With a VLM policy that can verify, this runs dual-path answering plus chain-of-verification;
    otherwise a named heuristic: the answer's words must appear in one evidence item, and the
    confidence is the policy's draft confidence scaled by that support.

    Args:
        answer: the answer to check (default: the current draft answer)
    """
    draft = answer.strip() or (ctx.draft_answer or "")
    if not draft:
        raise ValueError("no draft answer to check")
    texts = [h.text() for h in ctx.evidence] + ([ctx.ocr_text] if ctx.ocr_text else [])
    policy = getattr(ctx.resources, "policy", None)
    verify = getattr(policy, "verify", None)
    if callable(verify):
        verdict = verify(ctx.question, draft, texts, ctx.image)
        return ToolOutput(summary=f"{'supported' if verdict.supported else 'unsupported'} ({verdict.confidence:.2f}): {verdict.reason}",
                          verdict=verdict, method=verdict.method or "vlm-verify")
    if _text.INJECTION.search(draft):
        verdict = Verdict(supported=False, confidence=0.0, reason="the draft repeats text addressed to the agent "
                          "(a prompt injection), not a fact", method=METHOD)
        return ToolOutput(summary=f"unsupported: {verdict.reason}", verdict=verdict, method=METHOD)
    support, i = lexical_support(draft, texts)
    conf = (ctx.draft_confidence if ctx.draft_confidence is not None else 0.5) * support
    where = f"evidence #{i}" if i >= 0 else "no evidence"
    verdict = Verdict(supported=support >= 0.5, confidence=round(conf, 4),
                      reason=f"{support:.0%} of the answer's words found in {where}", method=METHOD)
    return ToolOutput(summary=f"{'supported' if verdict.supported else 'unsupported'}: {verdict.reason}; confidence {conf:.2f}",
                      verdict=verdict, method=METHOD)
