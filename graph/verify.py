"""Self-check verifiers, injected into the graph's `self_check` node (they are not tools a policy can plan).

A `Verifier` judges a draft answer against the evidence the turn gathered. The model policy brings its own
(graph/model_policy.py: one verification round trip by default, dual path + chain-of-verification as an
option); without a model the node uses `EvidenceSupportVerifier`, a named heuristic.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from graph.policy import AnswerDraft
from models import nlp
from tools.base import Verdict


@runtime_checkable
class Verifier(Protocol):
    name: str

    def verify(self, question: str, draft: AnswerDraft, evidence: list[str], image: Any = None) -> Verdict: ...


def lexical_support(answer: str, evidence_texts: list[str]) -> tuple[float, int]:
    """Share of the answer's content words found in the best single evidence text, and that text's index."""
    ans = set(nlp.content_words(answer)) or set(nlp.words(answer))
    if not ans or not evidence_texts:
        return 0.0, -1
    best, best_i = 0.0, -1
    for i, t in enumerate(evidence_texts):
        have = set(nlp.normalize(t).split())
        s = len(ans & have) / len(ans)
        if s > best:
            best, best_i = s, i
    return best, best_i


class EvidenceSupportVerifier:
    """heuristic:evidence-support: the answer's words must appear in one evidence item; the confidence is the
    policy's draft confidence scaled by that support. A draft that repeats text addressed to the agent (a
    prompt injection) is never supported."""

    name = "heuristic:evidence-support"
    blocking = False  # word overlap only: runs in the graph's thread

    def verify(self, question: str, draft: AnswerDraft, evidence: list[str], image: Any = None) -> Verdict:
        if nlp.INJECTION.search(draft.answer):
            return Verdict(supported=False, confidence=0.0, method=self.name,
                           reason="the draft repeats text addressed to the agent (a prompt injection), not a fact")
        support, i = lexical_support(draft.answer, evidence)
        conf = draft.confidence * support
        where = f"evidence #{i}" if i >= 0 else "no evidence"
        return Verdict(supported=support >= 0.5, confidence=round(conf, 4), method=self.name,
                       reason=f"{support:.0%} of the answer's words found in {where}")
