"""Self-checks the presets bring: UNSW's Algorithm 1 over dual-path generation and chain-of-verification, EURECOM's
"I don't know"-variant filter, and the named stand-in used when a model self-check has no model offline."""

from __future__ import annotations

from typing import Any

from glasses_rag.policies.protocol import IDK, AnswerDraft, PolicyView, is_abstention
from glasses_rag.policies.self_check import EvidenceSupportVerifier
from glasses_rag.text import nlp
from tools.base import Verdict

# The "I don't know" variants EURECOM's answer filter compares a reply with (002, Appendix A), quoted for fidelity.
IDK_VARIANTS = (
    "I don't know the answer",
    "I don't know",
    "Sorry, I don't know",
    "I don't have the correct answer",
    "I am not sure about the answer",
    "I am not able to provide",
    "There is no information available",
    "I cannot answer that",
    "I cannot provide information about individuals",
    "I cannot provide information or guidance",
    "I cannot provide information that could be used to identify the person in the image",
)


class StandInVerifier(EvidenceSupportVerifier):
    """The heuristic evidence-support self-check, named as the stand-in for the model self-check it replaces
    (`abstain_on_failure`: as the replaced check, "I don't know" when the check itself fails)."""

    def __init__(self, replaces: str, abstain_on_failure: bool = False):
        self.name = f"heuristic:evidence-support (stand-in for {replaces})"
        self.abstain_on_failure = abstain_on_failure


class ContextVerifier:
    """A model self-check that reads the turn as the answer model read it (the reranker's kept list within the
    preset's budgets: glasses_rag/policies/presets/context.py), not the raw search results."""

    blocking = True

    def __init__(self, inner: Any, context: Any):
        self.inner = inner
        self.context = context
        self.name = inner.name
        self.abstain_on_failure = bool(getattr(inner, "abstain_on_failure", False))

    def verify(
        self, question: str, draft: AnswerDraft, evidence: list[str], image: Any = None, view: PolicyView | None = None
    ) -> Verdict:
        seen = self.context(view)[0] if view is not None else None
        return self.inner.verify(question, draft, evidence, image, view=seen)


UNSW_REQUESTS = "preset_requests_unsw"  # prompts/preset_requests_unsw.yaml: closed_book, consistency, cove
UNSW_COV_SCHEMA = {
    "name": "unsw_cov",
    "schema": {
        "type": "object",
        "additionalProperties": False,
        "required": ["confidence", "reasoning", "sub_questions"],
        "properties": {
            "confidence": {"type": "number", "minimum": 0, "maximum": 1},
            "reasoning": {"type": "string"},
            "sub_questions": {
                "type": "array",
                "maxItems": 5,
                "items": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["question", "finding"],
                    "properties": {
                        "question": {"type": "string"},
                        "finding": {"type": "string", "enum": ["Supported", "Unsupported"]},
                    },
                },
            },
        },
    },
}


class UnswVerifier:
    """UNSW (003) §3.3-3.4 and Algorithm 1: the non-RAG answer (eq. 9) is generated beside the chain of
    verification (Appendix A.4), then an impartial judge sees the image, the context and both answers (Appendix
    A.3); the draft is kept only when consistent and S_CoV >= tau_low with retrieved context, or >= tau_high
    without. Each request is the paper's own (prompts/preset_requests_unsw.yaml: its system role, the reranked
    context tagged [Info m], the question, the answers), not the planner's transcript; the context is the turn as
    the answer model read it. A verification that cannot be completed (a failed or timed-out request) answers
    "I don't know" whatever the draft's own confidence: Algorithm 1 returns the answer only when it passed."""

    blocking = True
    abstain_on_failure = True  # read by the graph's self-check when verify() raises (graph/nodes.py)

    def __init__(self, policy: Any, tau_low: float = 0.9, tau_high: float = 1.0, prompt: str = UNSW_REQUESTS):
        self.policy = policy
        self.prompt = prompt
        self.tau_low = tau_low
        self.tau_high = tau_high
        self.name = f"unsw-algorithm-1 (dual path + consistency + CoV; tau_low {tau_low:g}, tau_high {tau_high:g})"

    def _ask(self, request: str, view: PolicyView, image: Any, schema: dict, max_tokens: int, **values: Any) -> Any:
        from glasses_rag.policies.presets.requests import policy_messages, request_template

        messages = policy_messages(self.policy, request_template(self.prompt, request), view, image, **values)
        return self.policy.request(request, messages, schema, max_tokens=max_tokens)

    def closed_book(self, view: PolicyView, image: Any) -> AnswerDraft:
        """a = f(q, I) (eq. 9): the image and the question, no retrieved context."""
        from glasses_rag.policies.model.replies import ANSWER_SCHEMA, answer_from_text

        bare = view.model_copy(update={"done": [], "evidence": []})
        return answer_from_text(self._ask("closed_book", bare, image, ANSWER_SCHEMA, self.policy.max_tokens).text)

    def cov(self, view: PolicyView, draft: str, image: Any) -> float:
        """S_CoV: the confidence the Appendix A.4 check gives (0.0 for a reply without one)."""
        from glasses_rag.models.vlm.base import extract_json
        from glasses_rag.policies.model.replies import confidence

        reply = self._ask("cove", view, image, UNSW_COV_SCHEMA, self.policy.verify_max_tokens, draft=draft)
        obj = extract_json(reply.text) or {}
        return confidence(obj.get("confidence", 0.0))

    def consistent(self, view: PolicyView, draft: str, closed: str, image: Any) -> bool:
        from glasses_rag.models.vlm.base import extract_json
        from glasses_rag.policies.model.replies import CONSISTENCY_SCHEMA
        from glasses_rag.policies.model.verify import _as_bool

        reply = self._ask("consistency", view, image, CONSISTENCY_SCHEMA, 200, draft=draft, closed_book=closed)
        obj = extract_json(reply.text)
        return _as_bool(obj.get("consistent", False)) if obj else False

    def verify(
        self, question: str, draft: AnswerDraft, evidence: list[str], image: Any = None, view: PolicyView | None = None
    ) -> Verdict:
        from glasses_rag.core.calls import run_many
        from glasses_rag.policies.model.verify import _view_without_steps

        if is_abstention(draft.answer):
            return Verdict(supported=False, confidence=0.0, reason="the draft abstains", method=self.name)
        turn = view or _view_without_steps(question, evidence)
        (ok_c, closed), (ok_v, s_cov) = run_many(
            [lambda: self.closed_book(turn, image), lambda: self.cov(turn, draft.answer, image)],
            timeout_s=3600,
        )
        if not ok_v:
            raise s_cov
        closed_answer = closed.answer if ok_c else IDK
        consistent = self.consistent(turn, draft.answer, closed_answer, image)
        has_context = any(s.update.get("evidence") for s in turn.done) if view is not None else bool(evidence)
        return algorithm_1(has_context, consistent, s_cov, self.tau_low, self.tau_high, closed_answer, self.name)


def algorithm_1(
    has_context: bool, consistent: bool, s_cov: float, tau_low: float, tau_high: float, closed_answer: str, method: str
) -> Verdict:
    """Algorithm 1's lines 2-9 (line 1, the real-time rule, runs in the answer step)."""
    need = tau_low if has_context else tau_high
    keep = consistent and s_cov >= need
    ctx = "with retrieved context" if has_context else "without context"
    reason = (
        f"{ctx}: the RAG and non-RAG answers are {'consistent' if consistent else 'not consistent'} "
        f"(non-RAG said {closed_answer[:80]!r}); CoV confidence {s_cov:.2f} "
        f"{'>=' if s_cov >= need else '<'} {need:g}"
    )
    return Verdict(supported=keep, confidence=round(s_cov, 4), reason=reason, method=method)


# EURECOM (002) Table 1, quoted for the calibration below: (generated output, the paper's max similarity to the IDK
# variants with bge-large-en-v1.5, filtered by the paper's 0.7).
TABLE_1 = (
    ("The chamomile flower is used for herbal beverage infusions.", 0.435),
    ("I’m sorry, but I don’t have enough information to answer your question.", 0.7964),
    (
        "I cannot provide an answer to this question, as it is not appropriate to provide information on how to harm "
        "oneself or others.",
        0.7997,
    ),
)


def mapped_threshold(embedder: Any, paper_threshold: float = 0.7) -> float:
    """The paper's threshold carried onto another embedder's scale: it sits at the same relative place between
    Table 1's kept answer and its "don't have enough information" answer as the paper's 0.7 sits between their
    bge-large scores (0.435, 0.7964). (Table 1's third row, a safety refusal, is not an anchor: MiniLM scores it
    0.28, under plain answers such as "Yes." at 0.32, so no MiniLM threshold filters it without filtering those.)"""
    (kept, s_kept), (idk, s_idk) = TABLE_1[0], TABLE_1[1]
    where = (paper_threshold - s_kept) / (s_idk - s_kept)
    a, b = (float(max(embedder.similarity(t, list(IDK_VARIANTS)), default=0.0)) for t in (kept, idk))
    return round(a + where * (b - a), 3)


class IdkVariantVerifier:
    """EURECOM (002) §2.5: the answer's first sentence is embedded and compared with the "I don't know" variants;
    at `threshold` similarity or more the answer becomes "I don't know". Otherwise the draft stands as written.
    With `calibrate`, the threshold is the paper's carried onto this embedder by `mapped_threshold` (the paper's
    0.7 is a point on bge-large-en-v1.5's scale, not on MiniLM's)."""

    blocking = True

    def __init__(self, embedder: Any, threshold: float = 0.7, calibrate: bool = False):
        self._embedder = embedder
        self.paper_threshold = threshold
        self.calibrate = calibrate
        self._threshold: float | None = None if calibrate else threshold
        self.name = f"idk-variant-filter (threshold {threshold:g}" + (
            ", carried onto the embedder's scale by EURECOM Table 1's examples)" if calibrate else ")"
        )

    def embedder(self) -> Any:
        e = self._embedder
        return e() if callable(e) and not hasattr(e, "similarity") else e

    @property
    def threshold(self) -> float:
        if self._threshold is None:
            self._threshold = mapped_threshold(self.embedder(), self.paper_threshold)
        return self._threshold

    def verify(
        self, question: str, draft: AnswerDraft, evidence: list[str], image: Any = None, view: PolicyView | None = None
    ) -> Verdict:
        embedder = self.embedder()
        first = next(iter(nlp.sentences(draft.answer, min_chars=1)), draft.answer)
        best = float(max(embedder.similarity(first, list(IDK_VARIANTS)), default=0.0))
        model = getattr(embedder, "name", type(embedder).__name__)
        method = f"{self.name}, {model}" + (f", threshold here {self.threshold:g}" if self.calibrate else "")
        if best >= self.threshold:
            return Verdict(
                supported=False,
                confidence=0.0,
                method=method,
                reason=f"the first sentence resembles an 'I don't know' variant ({best:.2f} >= {self.threshold:g})",
            )
        return Verdict(
            supported=True,
            confidence=draft.confidence,
            method=method,
            reason=f"not an 'I don't know' variant (best similarity {best:.2f})",
        )
