"""One turn scored in the official order (see the package docstring): truncate, then the exact-match and
"I don't know" flags, then the judge only when neither is set."""

from __future__ import annotations

import logging
from typing import Any

from pydantic import BaseModel

from glasses_rag.crag_mm.scoring.flags import flags_label, is_exact_match, is_idk
from glasses_rag.crag_mm.scoring.modes import DEFAULT_MODE, IdkRule, JudgeStatus, ScoringMode, TurnResult, get_mode
from glasses_rag.crag_mm.scoring.truncation import Truncator, default_truncator
from glasses_rag.crag_mm.scoring.verdict import Judge, JudgeVerdict

log = logging.getLogger(__name__)


class TurnScore(BaseModel):
    result: TurnResult  # correct if is_correct, else missing if is_miss, else incorrect
    response: str  # the truncated response that was scored
    truncated: bool
    is_exact_match: bool
    is_miss: bool
    is_correct: bool
    judge: str | None = None  # judge name when a judge was asked, "exact-match"/"idk" otherwise
    judge_status: JudgeStatus | None = None  # set when a judge was asked
    reason: str = ""


def score_turn(
    query: str,
    response: str | None,
    ground_truth: str,
    judge: Judge | None = None,
    truncator: Truncator | None = None,
    idk_rule: IdkRule | None = None,
    mode: str | ScoringMode = DEFAULT_MODE,
) -> TurnScore:
    """Score one turn in the official order: truncate -> exact-match and IDK flags (independent) ->
    judge only when neither is set.  See the module docstring.  ``idk_rule`` defaults to the mode's.

    Without a judge, a non-exact, non-IDK response is ``incorrect`` (the official behaviour when
    semantic evaluation is disabled)."""
    m = get_mode(mode)
    rule = idk_rule or m.idk_rule
    truncator = truncator or default_truncator()
    response = "" if response is None else response
    cut = truncator.truncate(response)
    truncated = cut != response
    exact = is_exact_match(cut, ground_truth)
    miss = is_idk(cut, rule)
    base = dict(response=cut, truncated=truncated, is_exact_match=exact, is_miss=miss)
    if exact:
        reason = "exact match"
        if miss:
            reason += ' that also contains "i don\'t know": counted as correct AND missing'
        return TurnScore(result="correct", is_correct=True, judge="exact-match", reason=reason, **base)
    if miss:
        return TurnScore(result="missing", is_correct=False, judge="idk", reason=f"i don't know ({rule} rule)", **base)
    if judge is None:
        return TurnScore(
            result="incorrect", is_correct=False, judge=None, reason="no judge: not an exact match", **base
        )
    try:
        verdict = judge.judge(query, ground_truth, cut)
    except Exception as exc:  # a judge must never crash the run
        log.warning("judge %s raised, counting as a hallucination: %s", getattr(judge, "name", judge), exc)
        verdict = JudgeVerdict(correct=None, status="error", reason=f"judge-error: {type(exc).__name__}: {exc}")
    correct = verdict.correct is True
    return TurnScore(
        result=flags_label(correct, False),
        is_correct=correct,
        judge=getattr(judge, "name", type(judge).__name__),
        judge_status=verdict.status,
        reason=verdict.reason,
        **base,
    )


def score_trace(
    trace: Any, judge: Judge | None = None, truncator: Truncator | None = None, mode: str | ScoringMode = DEFAULT_MODE
) -> Any:
    """Score a finished turn trace in place (``score``, ``judge``) with :func:`score_turn`; returns the trace, so
    it serves as ``run_task``'s ``scorer``."""
    s = score_turn(trace.question, trace.answer, trace.ground_truth, judge=judge, truncator=truncator, mode=mode)
    trace.score, trace.judge = s.result, s.judge
    return trace
