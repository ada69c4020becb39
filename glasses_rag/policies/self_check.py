"""Self-check verifiers, injected into the graph's `self_check` node (they are not tools a policy can plan).

A `Verifier` judges a draft answer against the evidence the turn gathered. The model policy brings its own
(glasses_rag/policies/model/policy.py: one verification round trip by default, dual path + chain-of-verification as an
option); without a model the node uses `EvidenceSupportVerifier`, a named heuristic.
"""

from __future__ import annotations

import re
from typing import Any, Protocol, runtime_checkable

from glasses_rag.policies.protocol import AnswerDraft
from glasses_rag.text import nlp
from tools.base import Verdict


@runtime_checkable
class Verifier(Protocol):
    name: str

    def verify(
        self, question: str, draft: AnswerDraft, evidence: list[str], image: Any = None, view: Any = None
    ) -> Verdict:
        """`view` is the turn as the policy saw it (glasses_rag.policies.protocol.PolicyView), for verifiers that reuse
        the turn's transcript; others read `evidence`."""
        ...


def data_text(text: str) -> str:
    """Evidence text with every instruction-shaped sentence or KG attribute removed: what may support an answer."""
    pieces = [p for p in re.split(r"\s*;\s*", text or "") if p.strip()]
    return " ".join(s for p in pieces for s in nlp.sentences(p, min_chars=1) if not nlp.is_instruction(s))


# Words the rule-based planner adds around an answer ("yes, ...", "before (1956 vs 1990)"): not claims to find.
SCAFFOLD = frozenset({"yes", "no", "before", "after", "vs"})


def lexical_support(answer: str, evidence_texts: list[str]) -> tuple[float, int]:
    """Share of the answer's content words found in the best single evidence text, and that text's index."""
    toks = nlp.normalize(answer).split()
    ans = {nlp.stem(w) for w in toks if w not in nlp.STOPWORDS and w not in SCAFFOLD} or {nlp.stem(w) for w in toks}
    if not ans or not evidence_texts:
        return 0.0, -1
    best, best_i = 0.0, -1
    seen: set[str] = set()
    for i, t in enumerate(evidence_texts):
        have = {nlp.stem(w) for w in nlp.normalize(t).split()}
        seen |= have & ans
        s = len(ans & have) / len(ans)
        if s > best:
            best, best_i = s, i
    if (" vs " in answer or "; " in answer) and len(seen) / len(ans) > best:
        best = len(seen) / len(ans)  # a comparison or a compound answer draws on several sources
    return best, best_i


class EvidenceSupportVerifier:
    """heuristic:evidence-support: the answer's words must appear in one evidence item, counting only the parts of
    the evidence that state facts (sentences that give instructions or address the assistant never support an
    answer); the confidence is the policy's draft confidence scaled by that support. A draft that is itself an
    instruction is never supported."""

    name = "heuristic:evidence-support"
    blocking = False  # word overlap only: runs in the graph's thread

    def verify(
        self, question: str, draft: AnswerDraft, evidence: list[str], image: Any = None, view: Any = None
    ) -> Verdict:
        if nlp.has_instruction(draft.answer):
            return Verdict(
                supported=False,
                confidence=0.0,
                method=self.name,
                reason="the draft repeats text addressed to the agent (a prompt injection), not a fact",
            )
        facts = [data_text(t) for t in evidence]
        support, i = lexical_support(draft.answer, facts)
        conf = draft.confidence * support
        where = f"evidence #{i}" if i >= 0 else "no evidence"
        missing = numbers(draft.answer) - set().union(*(numbers(t) for t in facts)) if facts else numbers(draft.answer)
        if missing:
            return Verdict(
                supported=False,
                confidence=0.0,
                method=self.name,
                reason=f"the number(s) {', '.join(sorted(missing))} appear in no factual evidence",
            )
        return Verdict(
            supported=support >= 0.5,
            confidence=round(conf, 4),
            method=self.name,
            reason=f"{support:.0%} of the answer's words found in the factual text of {where}",
        )


def numbers(text: str) -> set[str]:
    """The numbers a text states ("1,200" and "1200" alike): an answer's numbers must all be found in the evidence."""
    return {m.replace(",", "") for m in re.findall(r"\d[\d,]*(?:\.\d+)?", text or "")}
