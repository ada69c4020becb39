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


def own_claims(draft: AnswerDraft, view: Any) -> dict[str, list[str]]:
    """Tool -> the texts of its facts that cannot support `draft`: the draft was taken from that tool's fact (its
    value or text is the answer), and the tool did not compute it from a number found elsewhere in the turn. A tool
    does not vouch for its own answer (a caption, a recognizer's guess); a conversion of a quantity the turn found
    is a derivation, checked through that quantity. Empty without a view (nothing says who wrote what)."""
    facts = list(getattr(view, "facts", None) or [])
    answer = nlp.normalize(draft.answer)
    producers = {f.source for f in facts if answer and answer in (nlp.normalize(f.value or ""), nlp.normalize(f.text))}
    out: dict[str, list[str]] = {}
    for tool in sorted(producers):
        elsewhere = _turn_texts(view, exclude=tool)
        calls = [s.arguments for s in getattr(view, "done", []) if s.tool == tool]
        derived = any(_values(str(v)) & elsewhere for args in calls for v in args.values())
        if not derived:
            out[tool] = [f.text for f in facts if f.source == tool]
    return out


def _turn_texts(view: Any, exclude: str) -> set[float]:
    """The numbers the turn holds outside `exclude`'s facts: the question, earlier turns, evidence, OCR, facts."""
    texts = [view.question, *(f"{h.question} {h.answer}" for h in view.history), view.ocr_text or ""]
    texts += [h.text() for h in view.evidence] + [f.text for f in view.facts if f.source != exclude]
    return set().union(*(_values(t) for t in texts))


def _values(text: str) -> set[float]:
    """The numbers of a text as values: "31" and "31.0" alike, "1,200" is 1200."""
    return {float(n) for n in numbers(text)}


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
        claims = own_claims(draft, view)
        left_out = {t for texts in claims.values() for t in texts}
        facts = [data_text(t) for t in evidence if t not in left_out]
        note = (
            f" ({', '.join(claims)}'s own output left out: a tool does not vouch for its own answer)" if claims else ""
        )
        support, i = lexical_support(draft.answer, facts)
        conf = draft.confidence * support
        where = f"evidence #{i}" if i >= 0 else "no evidence"
        missing = numbers(draft.answer) - set().union(*(numbers(t) for t in facts)) if facts else numbers(draft.answer)
        if missing:
            return Verdict(
                supported=False,
                confidence=0.0,
                method=self.name,
                reason=f"the number(s) {', '.join(sorted(missing))} appear in no factual evidence{note}",
            )
        return Verdict(
            supported=support >= 0.5,
            confidence=round(conf, 4),
            method=self.name,
            reason=f"{support:.0%} of the answer's words found in the factual text of {where}{note}",
        )


def numbers(text: str) -> set[str]:
    """The numbers a text states ("1,200" and "1200" alike): an answer's numbers must all be found in the evidence."""
    return {m.replace(",", "") for m in re.findall(r"\d[\d,]*(?:\.\d+)?", text or "")}
