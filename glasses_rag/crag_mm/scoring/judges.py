"""A judge from its ``--judge`` spec: none, the rule judge or an LLM judge."""

from __future__ import annotations

from typing import Any

from glasses_rag.crag_mm.scoring.llm_judge import LLMJudge
from glasses_rag.crag_mm.scoring.modes import DEFAULT_MODE, ScoringMode
from glasses_rag.crag_mm.scoring.rule_judge import RuleJudge
from glasses_rag.crag_mm.scoring.verdict import Judge


def make_judge(
    spec: str, mode: str | ScoringMode = DEFAULT_MODE, api_key: str | None = None, **kw: Any
) -> Judge | None:
    """``"none"`` -> None (exact match only), ``"rule"`` -> :class:`RuleJudge`,
    ``"openai:<base_url>#<model>"`` -> :class:`LLMJudge` with the prompt of ``mode``."""
    if spec == "none":
        return None
    if spec == "rule":
        return RuleJudge()
    if spec.startswith("openai:"):
        base, _, model = spec[len("openai:") :].partition("#")
        if not base or not model:
            raise ValueError("judge spec must be openai:<base_url>#<model>")
        return LLMJudge(base, model, api_key, mode=mode, **kw)
    raise ValueError(f"unknown judge {spec!r} (none, rule, openai:<base_url>#<model>)")
