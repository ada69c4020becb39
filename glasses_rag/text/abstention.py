"""The agent's abstention text and its own rule for recognising one (scoring has its own, in
glasses_rag.crag_mm.scoring)."""

from __future__ import annotations

import re

IDK = "I don't know"  # the agent's abstention, as the benchmark expects it
_ABSTAIN = re.compile(
    r"^\W*(?:i\s*(?:do\s*not|don'?t|don’t|dont)\s*know|unknown|not\s+sure|i'?m\s+not\s+sure|cannot\s+(?:be\s+)?determine"
    r"|can'?t\s+(?:be\s+)?determined?|no\s+answer|unanswerable|n/?a)\b",
    re.I,
)


def is_abstention(text: str | None) -> bool:
    """Empty, or a short reply that opens by saying it does not know."""
    t = (text or "").strip()
    return not t or (len(t) < 80 and bool(_ABSTAIN.match(t)))
