"""The model's self-check of a draft answer (the graph's `self_check` node calls it as its verifier).

`single` (default): one chain-of-verification request, sent as the turn's own transcript plus the draft and a
short instruction, so a server with a prefix cache computes only that instruction. `dual-cove` (after the UNSW
report's dual-path generation and chain-of-verification, 003 §3): a closed-book answer (image and the model's
own knowledge, no retrieved context) runs concurrently with the chain of verification, then a consistency
judgement compares the closed-book answer with the draft.
"""

from __future__ import annotations

from typing import Any, Protocol

from pydantic import BaseModel, Field

from glasses_rag.core.calls import run_many
from glasses_rag.core.types import Verdict
from glasses_rag.models.vlm.base import extract_json
from glasses_rag.policies.model.prompts import clip, load_prompt
from glasses_rag.policies.model.replies import (
    ANSWER_SCHEMA,
    CONSISTENCY_SCHEMA,
    COVE_SCHEMA,
    answer_from_text,
    confidence,
    snippet,
)
from glasses_rag.policies.protocol import IDK, AnswerDraft, PolicyReplyError, PolicyView, is_abstention
from glasses_rag.policies.self_check import own_claims


class AsksModel(Protocol):
    """What a verifier needs of the model policy (glasses_rag.policies.model.policy.ModelPolicy)."""

    prompts: Any
    verify_max_tokens: int

    def format(self) -> Any: ...

    def ask(
        self, purpose: str, view: PolicyView, image: Any, text: str, schema: dict | None, max_tokens: int | None = None
    ) -> Any: ...

    def request(
        self,
        purpose: str,
        messages: list[dict],
        schema: dict | None = None,
        tools: list[dict] | None = None,
        max_tokens: int | None = None,
    ) -> Any: ...


class ConsistencyJudgement(BaseModel):
    consistent: bool = False
    closed_book_knows: bool = True
    reason: str = ""


class VerificationQA(BaseModel):
    question: str = ""
    answer: str = ""
    supported: bool = False


class CoVeResult(BaseModel):
    verifications: list[VerificationQA] = Field(default_factory=list)
    supported: bool = False
    confidence: float = Field(0.0, ge=0.0, le=1.0)
    reason: str = ""


def _as_bool(v: Any) -> bool:
    if isinstance(v, str):
        return v.strip().lower() in ("true", "yes", "1", "supported", "consistent")
    return bool(v)


def cove_from_text(text: str) -> CoVeResult:
    obj = extract_json(text)
    if obj is None:
        raise PolicyReplyError(f"no JSON verification in the reply: {snippet(text) or '<empty>'}", text)
    qas = [
        VerificationQA(
            question=str(q.get("question", "")),
            answer=str(q.get("answer", "")),
            supported=_as_bool(q.get("supported", False)),
        )
        for q in obj.get("verifications") or obj.get("verification") or obj.get("questions") or []
        if isinstance(q, dict)
    ]
    return CoVeResult(
        verifications=qas,
        supported=_as_bool(obj.get("supported", False)),
        confidence=confidence(obj.get("confidence", 0.0)),
        reason=str(obj.get("reason", "")),
    )


def _view_without_steps(question: str, evidence: list[str]) -> PolicyView:
    """A turn seen only through its question and evidence texts (a verifier called outside the graph)."""
    from glasses_rag.policies.protocol import StepSummary

    done = [StepSummary(tool="evidence", summary=clip(t, 400)) for t in evidence[:8]]
    return PolicyView(
        task=0, question=question, has_image=False, tools=[], done=done, remaining_steps=0, remaining_s=0.0
    )


class ModelVerifier:
    def __init__(self, policy: AsksModel, mode: str = "single"):
        if mode not in ("single", "dual-cove"):
            raise ValueError(f"unknown self-check mode {mode!r}: use 'single' or 'dual-cove'")
        self.policy = policy
        self.mode = mode
        self.name = "vlm-cove" if mode == "single" else "vlm-dual-path+cove"

    def chain_of_verification(self, view: PolicyView, draft: str, image: Any = None) -> CoVeResult:
        p = self.policy
        text = self.cove_text(view, draft)
        return cove_from_text(p.ask("cove", view, image, text, COVE_SCHEMA, max_tokens=p.verify_max_tokens).text)

    def cove_text(self, view: PolicyView, draft: str) -> str:
        """The verification instruction; when the draft repeats a tool's own claim (`own_claims`: a caption, a
        recognizer's guess), it says that result does not count as support: a tool does not vouch for itself."""
        text = self.policy.prompts.render("vlm_cove", draft=draft)
        claims = own_claims(AnswerDraft(answer=draft, confidence=0.0), view)
        if claims:
            text += "\n" + load_prompt("vlm_cove_own_output").safe_substitute(tools=", ".join(claims)).strip()
        return text

    def cove_messages(self, view: PolicyView, draft: str, image: Any = None) -> list[dict]:
        """The messages of the chain-of-verification request (what `chain_of_verification` sends through
        `ask`; training.export renders its self-check examples with it)."""
        p = self.policy
        return p.prompts.ask(p.prompts.transcript(view, image, p.format()), self.cove_text(view, draft))

    def closed_book_answer(self, view: PolicyView, image: Any = None) -> AnswerDraft:
        p = self.policy
        bare = view.model_copy(update={"done": []})
        text = p.prompts.render("vlm_closed_book", idk=IDK)
        return answer_from_text(p.ask("closed_book", bare, image, text, ANSWER_SCHEMA).text)

    def consistency(self, question: str, draft: str, closed: AnswerDraft) -> ConsistencyJudgement:
        if is_abstention(closed.answer):
            return ConsistencyJudgement(consistent=False, closed_book_knows=False, reason="closed-book path abstained")
        p = self.policy
        t = p.prompts.render("vlm_selfcheck_consistency", question=question, draft=draft, closed_book=closed.answer)
        obj = extract_json(
            p.request("consistency", [{"role": "user", "content": t}], CONSISTENCY_SCHEMA, max_tokens=200).text
        )
        if not obj:  # no judgement: the dual path is neutral
            return ConsistencyJudgement(consistent=False, closed_book_knows=False, reason="unparseable judgement")
        return ConsistencyJudgement(
            consistent=_as_bool(obj.get("consistent", False)), reason=str(obj.get("reason", ""))
        )

    def verify(
        self, question: str, draft: AnswerDraft, evidence: list[str], image: Any = None, view: PolicyView | None = None
    ) -> Verdict:
        if is_abstention(draft.answer):
            return Verdict(
                supported=False, confidence=0.0, reason="draft is an abstention; nothing to verify", method=self.name
            )
        view = view or _view_without_steps(question, evidence)
        if self.mode == "single":
            cove = self.chain_of_verification(view, draft.answer, image)
            conf = cove.confidence if cove.supported else min(cove.confidence, 0.3)
            return Verdict(
                supported=cove.supported and conf >= 0.5,
                confidence=conf,
                method=self.name,
                reason=f"cove: {'supported' if cove.supported else 'unsupported'}, {clip(cove.reason, 200)}",
            )
        closed, cove, cons = self.dual_path(question, view, draft.answer, image)
        return combine_verdict(cons, cove, closed.answer, self.name)

    def dual_path(
        self, question: str, view: PolicyView, draft: str, image: Any = None
    ) -> tuple[AnswerDraft, CoVeResult, ConsistencyJudgement]:
        """The closed-book answer and the chain of verification (run together), then their consistency judgement.
        A failed verification raises; a failed closed-book path counts as "I don't know" (neutral)."""
        (ok_c, closed), (ok_v, cove) = run_many(
            [lambda: self.closed_book_answer(view, image), lambda: self.chain_of_verification(view, draft, image)],
            timeout_s=3600,
        )
        if not ok_v:
            raise cove
        if not ok_c:
            closed = AnswerDraft(answer=IDK, confidence=0.0, rationale=f"closed-book path failed: {closed}")
        return closed, cove, self.consistency(question, draft, closed)


def combine_verdict(cons: ConsistencyJudgement, cove: CoVeResult, closed_answer: str, method: str) -> Verdict:
    """CoVe decides support; the dual path moves the confidence (an abstaining closed-book path is neutral)."""
    dual = 0.5 if not cons.closed_book_knows else (1.0 if cons.consistent else 0.0)
    qa_rate = (
        (sum(q.supported for q in cove.verifications) / len(cove.verifications))
        if cove.verifications
        else cove.confidence
    )
    conf = round(0.5 * cove.confidence + 0.2 * qa_rate + 0.3 * dual, 3)
    if not cove.supported:
        conf = min(conf, 0.3)
    n_ok = sum(q.supported for q in cove.verifications)
    path = "consistent" if cons.consistent else ("abstained" if not cons.closed_book_knows else "inconsistent")
    reason = (
        f"cove: {'supported' if cove.supported else 'unsupported'} ({n_ok}/{len(cove.verifications)} checks), "
        f"{clip(cove.reason, 200)}; dual path: closed-book said {clip(closed_answer, 80)!r}, {path}"
        f"{': ' + clip(cons.reason, 150) if cons.reason else ''}"
    )
    return Verdict(
        supported=cove.supported and conf >= 0.5, confidence=max(0.0, min(1.0, conf)), reason=reason, method=method
    )
