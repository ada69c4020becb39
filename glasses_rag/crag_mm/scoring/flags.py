"""The two flags the official codes set on the truncated response, independently: exact match and
"I don't know" (each mode's rule), and the per-turn label they give."""

from __future__ import annotations

import re

from glasses_rag.crag_mm.scoring.modes import IdkRule, TurnResult


def clean_text(text: str) -> str:
    """Lowercase and drop every character that is not a-z, 0-9 or whitespace (CRAG-MM release)."""
    return re.sub(r"[^a-z0-9\s]", "", text.lower())


def is_idk(response: str, rule: IdkRule = "kddcup2025") -> bool:
    """Official miss detection (on the untrimmed, truncated response).

    * ``kddcup2025`` (KDD Cup 2025 starter kit ``local_evaluation.py``): the substring
      ``"i don't know"`` (ASCII apostrophe) in ``response.lower()``.  "I don’t know" with a curly
      apostrophe or "I do not know" are NOT misses under this rule.
    * ``crag-mm-release`` (facebookresearch/CRAG-MM ``evaluation/evaluator.py``): the response is
      lower-cased and stripped of non-alphanumerics, then ``"i dont know"`` or ``"i do not know"``
      must occur in it.
    """
    if rule == "kddcup2025":
        return "i don't know" in response.lower()
    if rule != "crag-mm-release":
        raise ValueError(f"unknown IDK rule {rule!r}")
    cleaned = clean_text(response)
    return "i dont know" in cleaned or "i do not know" in cleaned


def is_exact_match(response: str, ground_truth: str) -> bool:
    return response.strip().lower() == ground_truth.strip().lower()


def flags_label(is_correct: bool, is_miss: bool) -> TurnResult:
    return "correct" if is_correct else ("missing" if is_miss else "incorrect")
