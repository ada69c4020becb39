"""The confidence under which a model says "I don't know", chosen on turns the training never saw.

CRAG-MM scores a right answer 1, "I don't know" 0 and a wrong answer -1 (paper §4), so an answer is worth giving
only when it is more likely right than wrong. A small fine-tuned model answers almost everything, and the
confidence it writes is the one it was trained to write (1.0), so it cannot tell the two apart. Its own likelihood
of the words it wrote can: run it with `answer_confidence: tokens` (each answer's confidence is then the geometric
mean probability of its tokens, `glasses_rag.policies.model.replies.answer_token_confidence`) and
`--abstain-below 0` on held-out turns, then keep the threshold under which answering would have lost points
there. The winning CRAG-MM systems gate answers on a confidence in the same way, with thresholds set by hand
(UNSW report §3.4: 0.9 and 1.0 on their verifier's score); here the threshold is chosen on data.

    python -m graph.run --task 2 --model-config tuned.json --answer-confidence tokens --abstain-below 0 \\
        --self-check off --run-id calib --data <held-out rows>
    python -m glasses_rag.training.calibrate --run traces/runs/calib      # prints the threshold

`benchmarks.distill --calibrate folds` does this for every model on cross-fitted folds of the training conversations
(each fold run by the model's recipe trained without it).

A threshold holds for the probabilities it was chosen on, so for one backend: in-process decoding reads the
grammar-masked distribution (`confidence_from: tokens-masked`), a server the model's raw one (`tokens-raw`, vLLM's
default logprobs), and the same answer is more probable under the mask. The threshold says which it was chosen on
(`Threshold.probabilities`), and a run that mixes them is refused: calibrate each backend on its own run.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from pydantic import BaseModel

from glasses_rag.policies.protocol import IDK


def turn_value(is_correct: bool, is_miss: bool) -> int:
    """A turn's share of the official truthfulness (accuracy minus hallucination, hallucination being what is
    neither correct nor missing): 1 right, 0 "I don't know", -1 wrong, and 2 for "I don't know" where that is the
    ground truth (correct and missing at once, docs/scoring.md)."""
    return 2 * is_correct + is_miss - 1


class CalibrationPoint(BaseModel):
    """One held-out turn: the confidence of its answer (None: the model itself said "I don't know") and the
    turn's score with that answer given and with "I don't know" instead."""

    turn: str
    confidence: float | None
    answered: int
    abstained: int


class Threshold(BaseModel):
    """The chosen threshold and what it did on the calibration turns."""

    abstain_below: float
    turns: int
    answered: int  # turns with an answer (not the model's own "I don't know")
    kept: int  # answers at or above the threshold
    truthfulness: float  # on the calibration turns, with the threshold
    truthfulness_without: float  # the same turns, every answer kept
    probabilities: str | None = None  # what the confidences were: tokens-masked, tokens-raw, tokens, written
    supported: bool = True  # some calibration answer was kept (else the threshold keeps only certain answers)


def probabilities_of(traces: list[Any]) -> str:
    """What the answers' confidences of a run are (`confidence_from` of its answer events: tokens-masked, tokens-raw,
    tokens, or written when none says); a run mixing kinds of token probabilities raises ValueError."""
    kinds = {
        getattr(s, "confidence_from", None) or "written"
        for t in traces
        for s in t.steps
        if getattr(s, "node", None) == "answer" and getattr(s, "confidence", None) is not None
    }
    tokens = sorted(k for k in kinds if k.startswith("tokens"))
    if len(tokens) > 1:
        raise ValueError(
            f"the run's answer confidences come from different probabilities ({', '.join(tokens)}): a threshold "
            "chosen on one does not hold for the other; calibrate each backend on its own run"
        )
    return tokens[0] if tokens else "written"


def _draft(trace: Any) -> tuple[str, float | None]:
    """The turn's answer before any self-check or threshold, and its confidence."""
    for step in reversed(trace.steps):
        if getattr(step, "node", None) == "answer":
            return step.answer, step.confidence
    return trace.answer or IDK, None


def _odd(confidence: float | None) -> bool:
    """A confidence that is not a number in [0, 1] (NaN compares false with everything)."""
    return confidence is not None and not 0.0 <= confidence <= 1.0


def points_from_traces(traces: list[Any], judge: Any = None, truncator: Any = None) -> list[CalibrationPoint]:
    """A point per turn with a ground truth: its answer before any threshold, and "I don't know", each scored
    with `judge` and `truncator` (the run's own, for figures that match its report). A turn whose confidence is
    not a number in [0, 1] (NaN, Infinity: a hostile or damaged trace) is left out.

    Example:
        >>> points_from_traces([])
        []
    """
    from glasses_rag.crag_mm.scoring import score_turn

    def score(trace: Any, answer: str) -> int:
        s = score_turn(trace.question, answer, trace.ground_truth, judge, truncator)
        return turn_value(s.is_correct, s.is_miss)

    out = []
    for t in traces:
        if t.ground_truth is None:
            continue
        answer, conf = _draft(t)
        if _odd(conf):  # NaN, an infinity, out of range: no threshold from it
            continue
        idk = score(t, IDK)
        if answer.strip().lower() == IDK.lower() or conf is None:
            out.append(
                CalibrationPoint(turn=t.interaction_id or t.session_id, confidence=None, answered=idk, abstained=idk)
            )
            continue
        out.append(
            CalibrationPoint(
                turn=t.interaction_id or t.session_id, confidence=conf, answered=score(t, answer), abstained=idk
            )
        )
    return out


def choose_threshold(points: list[CalibrationPoint], probabilities: str | None = None) -> Threshold:
    """The threshold that maximises truthfulness on `points`: answers are kept from the most confident down, and
    the cut goes where the total is highest (on a tie, the fewest answers kept: on unseen turns a wrong answer
    costs as much as a right one earns). The threshold is the lowest confidence a kept answer had: no threshold
    below it, which no calibration answer supports (a more confident model would carry answers through it
    that the calibration never saw kept). When no answer helps, it is 1.0: only an answer whose every token had
    probability 1 passes (`supported` False: no answer was kept).

    Example:
        >>> pts = [CalibrationPoint(turn=str(i), confidence=c, answered=a, abstained=0)
        ...        for i, (c, a) in enumerate([(0.9, 1), (0.8, 1), (0.5, -1), (0.3, -1)])]
        >>> choose_threshold(pts).abstain_below
        0.8
    """
    points = [p for p in points if not _odd(p.confidence)]  # never NaN or infinite
    answered = sorted((p for p in points if p.confidence is not None), key=lambda p: -(p.confidence or 0.0))
    confs = sorted({p.confidence for p in answered if p.confidence is not None}, reverse=True)
    base = sum(p.abstained for p in points)
    gain: dict[float, int] = {}  # what answering instead of abstaining earns, per confidence (one pass: n log n)
    for p in answered:
        gain[p.confidence or 0.0] = gain.get(p.confidence or 0.0, 0) + p.answered - p.abstained
    best_total, best_k, total = base, 0, base
    for k, c in enumerate(confs, start=1):
        total += gain[c]
        if total > best_total:
            best_total, best_k = total, k
    tau = confs[best_k - 1] if best_k else 1.0
    n = max(1, len(points))
    kept = sum(1 for p in answered if (p.confidence or 0.0) >= tau) if best_k else 0
    without = base + sum(p.answered - p.abstained for p in answered)
    return Threshold(
        abstain_below=tau,
        turns=len(points),
        answered=len(answered),
        kept=kept,
        truthfulness=best_total / n,
        truthfulness_without=without / n,
        probabilities=probabilities,
        supported=best_k > 0,
    )


PROBABILITIES = {
    "tokens-masked": "grammar-masked token probabilities (in-process)",
    "tokens-raw": "raw token probabilities (a server's logprobs)",
    "tokens": "token probabilities",
    "written": "the confidences the model wrote",
}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m glasses_rag.training.calibrate", description=__doc__.split("\n\n")[0])
    p.add_argument("--run", required=True, help="a scored run folder of the model on held-out turns")
    p.add_argument("--judge", default="rule", help="the judge for answers the run did not score (default rule)")
    return p


def main(argv: list[str] | None = None) -> int:
    from glasses_rag.crag_mm.scoring import make_judge, make_truncator
    from glasses_rag.superglasses.logs import read_run

    args = parser().parse_args(argv)
    problems: list[str] = []
    traces = read_run(args.run, problems)
    for msg in problems:
        print(f"warning: {msg}", file=sys.stderr)
    points = points_from_traces(traces, make_judge(args.judge), make_truncator(None))
    odd = sum(1 for t in traces if t.ground_truth is not None and _odd(_draft(t)[1]))
    if odd:
        print(
            f"warning: {odd} turn(s) whose confidence is not a number in [0, 1] (NaN, Infinity) left out",
            file=sys.stderr,
        )
    if not any(p.confidence is not None for p in points):
        print(f"no answer in {args.run} has a confidence: run the model with an answer confidence", file=sys.stderr)
        return 2
    try:
        kind = probabilities_of(traces)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if kind == "written":
        print("note: the run's confidences are not token confidences (answer_confidence: written)", file=sys.stderr)
    th = choose_threshold(points, kind)
    print(
        f"abstain below {th.abstain_below:.4f}: keeps {th.kept} of {th.answered} answers on {th.turns} turns; "
        f"truthfulness {th.truthfulness:+.3f} (every answer kept: {th.truthfulness_without:+.3f}); chosen on "
        f"{PROBABILITIES.get(kind, kind)}: use it with the same backend"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
