"""The notes under a CRAG-MM report: which scoring rules were applied and how many turns each one touched, so a
number outside [0, 1] or a judge's failure is explained where it is read (glasses_rag.crag_mm.evaluate)."""

from __future__ import annotations

from typing import Any

from glasses_rag.crag_mm.scoring import IdkRule, Judge, ScoringMode, Truncator

# The report's own types (glasses_rag.crag_mm.evaluate's ScoredTurn and Metrics), named loosely: evaluate imports this
# module, and an import back would close a cycle.
ScoredTurns = list[Any]


def report_notes(
    m: ScoringMode,
    rule: IdkRule,
    judge: Judge | None,
    judge_name: str,
    truncator: Truncator,
    turns: ScoredTurns,
    overall: Any,
    ego: Any,
) -> list[str]:
    """Every note, in the report's order: the mode, truncation and idk rule; how turns were counted; the judge."""
    return [
        f"mode {m.name}: reproduces {m.reproduces}",
        *_text_rules(m, rule, truncator),
        *_counting(m, turns, overall, ego),
        *_judging(m, judge, judge_name, turns),
    ]


def _text_rules(m: ScoringMode, rule: IdkRule, truncator: Truncator) -> list[str]:
    """How an answer's text is read: the 75-token truncation and the "I don't know" rule."""
    desc = getattr(truncator, "description", None)
    notes = [desc or f"75-token truncation: {truncator.name}"]
    if "approx" in truncator.name:
        notes.append("75-token truncation approximated without the official Llama tokenizer (whitespace-approx(75))")
    if rule == "kddcup2025":
        notes.append(
            'idk rule kddcup2025: "i don\'t know" substring of response.lower() (ASCII apostrophe only; '
            '"I do not know" and a curly apostrophe are not misses)'
        )
    else:
        notes.append(
            'idk rule crag-mm-release: "i dont know" or "i do not know" in the response lower-cased with '
            "every character outside [a-z0-9 whitespace] removed"
        )
    if rule != m.idk_rule:
        notes.append(f"idk rule {rule} overrides the mode's own rule ({m.idk_rule}): not what the official code does")
    return notes


def _counting(m: ScoringMode, turns: ScoredTurns, overall: Any, ego: Any) -> list[str]:
    """How turns were counted: exact match beside idk, the multi-turn early stop, truthfulness, the slices."""
    n_double = sum(t.is_correct and t.is_miss for t in turns)
    n_stopped = sum(t.early_stopped for t in turns)
    n_stop_flip = sum(t.early_stopped and t.is_correct for t in turns)
    notes = [
        "exact match (strip().lower() equality) and the idk test are independent flags; the judge is asked "
        f'only when neither is set: {n_double} exact-match turn(s) containing "i don\'t know" counted as '
        "BOTH correct and missing (hallucination = total - correct - missing)"
    ]
    if m.counts_after_early_stop:
        notes.append(
            f"multi-turn early stop applied BEFORE counting (all metrics): after two consecutive not-correct "
            f"turns every later turn of the conversation counts as missing ({n_stopped} turn(s) overridden, "
            f"{n_stop_flip} of them originally correct)"
        )
    else:
        notes.append(
            f"counts (accuracy, missing, hallucination, truthfulness, exact match) taken BEFORE the multi-turn "
            f"early stop; only multi_turn_score reflects it ({n_stopped} turn(s) overridden there)"
        )
    return notes + [
        "truthfulness = (2*correct + missing)/total - 1, forced to 0.0 when total <= 1 "
        f"(official `if total > 1 else 0.0`){'; applied: overall has a single turn' if overall.total == 1 else ''}",
        "multi_turn_score = unweighted mean over conversations of mean(correct) - mean(not correct and not "
        "missing), after the early stop",
        "egocentric = conversations without an image URL, scored separately with the same function "
        "(early stop inside the subset)"
        + ("" if ego is not None else "; none here (the official code would print NaN)"),
        "slices other than egocentric are not official: same formulas over each conversation's early-stopped flags",
    ]


def _judging(m: ScoringMode, judge: Judge | None, judge_name: str, turns: ScoredTurns) -> list[str]:
    """Which judge decided, and how its failures were counted."""
    if judge is None:
        notes = [
            "no judge: only exact matches are correct; every other non-idk turn is a hallucination "
            "(official --eval-model None)"
        ]
    elif "approx" in judge_name:
        notes = ["judge is the offline rule-judge (approximate): not the official LLM judge"]
    else:
        notes = [
            f"judge {judge_name}: no verdict (server failure after the retries of the shared client, a refusal, "
            f"an empty reply) counts as a hallucination, as officially; an unparseable verdict: "
            f"{m.unparseable_verdict}"
        ]
    judge_mode = getattr(getattr(judge, "mode", None), "name", None)
    if judge_mode and judge_mode != m.name:
        notes.append(f"the LLM judge uses the {judge_mode} prompt while counting follows {m.name}")
    failed = sum(t.judge_status in ("error", "no-verdict") for t in turns)
    if failed:
        notes.append(
            f"{failed} judge call(s) gave no verdict (server failure after the shared client's "
            "retries, a refusal or an empty reply): counted as hallucinations, as officially"
        )
    n_unparse = sum(t.judge_status == "unparseable" for t in turns)
    if n_unparse:
        notes.append(f"{n_unparse} unparseable judge verdict(s): {m.unparseable_verdict}")
    return notes
