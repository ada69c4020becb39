"""The embedded default policy: a rule-based planner (a heuristic, named as such everywhere).

It needs no GPU and no VLM weights. It reads the question (reading.py: its direct form, parts, types and the entity
the photo shows), looks each part's type up in the plan table (planner_table.yaml: question type -> tool capabilities
in order, and the answer sources to try), and calls tools through their capabilities, never by name; capabilities a
tool file declares are called when their `due` hook says so (capabilities.py). The answer step tries the type's
answer sources by name (sources/), enforces the answer type the question expects on every one (answer_check.py),
answers comparisons and multi-hop questions only when every hop is supported, never takes an answer from retrieved
text that gives instructions (glasses_rag/text/injection.py), and abstains when the evidence is weak: a wrong answer
costs more than "I don't know". The package layout is described in docs/planner.md.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from glasses_rag.policies.protocol import IDK, AnswerDraft, Decision, ParallelCall, PolicyView
from glasses_rag.policies.rules import capabilities
from glasses_rag.policies.rules.candidates import Candidate, Part
from glasses_rag.policies.rules.catalog import planner_catalog
from glasses_rag.policies.rules.config import RulePlannerConfig
from glasses_rag.policies.rules.plan import due
from glasses_rag.policies.rules.plan_table import load_plan_table
from glasses_rag.policies.rules.reading import TurnReading
from glasses_rag.policies.rules.sources.kg import holds_for_rivals

__all__ = ["RuleBasedPlanner", "RulePlannerConfig"]


def _decision(calls: list[ParallelCall], why: str) -> Decision:
    first, rest = calls[0], calls[1:]
    return Decision(
        action="call_tool",
        tool=first.tool,
        arguments=first.arguments,
        parallel=rest,
        rationale=why,
        sub_question=first.sub_question,
        needs_retrieval=True,
    )


def _add(batch: list[ParallelCall], calls: list[ParallelCall]) -> None:
    for c in calls:
        if not any(c.tool == b.tool and c.arguments == b.arguments for b in batch):
            batch.append(c)


class RuleBasedPlanner:
    """Policy protocol implementation.

    Args:
        embedder: a glasses_rag.models.text_embedder.TextEmbedder, or a factory called on first use.
        config: thresholds and the plan table to use (default: RulePlannerConfig()).

    Example::

        planner = RuleBasedPlanner(TextEmbedder(), RulePlannerConfig())
        planner.check_tools(registry)  # build_agent does it: a capability input nothing fills is an error
        decision = planner.decide(view)
    """

    name = "rule-based-planner (heuristic)"
    blocking = False  # local rules and a small embedder: runs in the graph's thread

    def __init__(self, embedder: Any, config: RulePlannerConfig | None = None):
        self._embedder = embedder
        self.config = config or RulePlannerConfig()
        self.catalog = planner_catalog()  # its named parts (catalog.py), read by name
        self.table = load_plan_table(self.config.plan_table)

    def check_tools(self, tools: Iterable[Any]) -> None:
        """Refuse tools this planner could never call (capabilities.check_inputs): a ValueError at build."""
        capabilities.check_inputs(tools, self.catalog)

    @property
    def embedder(self):
        if callable(self._embedder) and not hasattr(self._embedder, "similarity"):
            self._embedder = self._embedder()
        return self._embedder

    def decide(self, view: PolicyView, image: Any = None) -> Decision:
        t = TurnReading(self, view)
        if view.remaining_steps <= 0:
            return Decision(action="answer", rationale="no tool calls left", needs_retrieval=bool(view.done))
        if len(t.parts) > 1:
            calls, why = due(t, self.table.compound, None)
            if calls:
                return _decision(calls[: view.remaining_steps], why)
        batch: list[ParallelCall] = []
        reasons: list[str] = []
        for part in t.parts:
            calls, why = due(t, self.table.types[part.qtype].steps, part)
            _add(batch, calls)
            if why:
                reasons.append(why)
        calls, whys = capabilities.due_calls(t)
        _add(batch, calls)
        reasons += whys
        if batch:
            return _decision(batch[: view.remaining_steps], "; ".join(dict.fromkeys(reasons)))
        return Decision(
            action="answer", rationale="the plan for this question type is complete", needs_retrieval=bool(view.done)
        )

    def _answer_part(self, t: TurnReading, part: Part) -> tuple[Candidate | None, str | None]:
        """The first answer the part's sources give: extension capabilities marked `first`, the question type's own
        sources (plan table), then the other extension capabilities."""
        got = capabilities.answer(t, part, first=True)
        if got is not None:
            return got, None
        for name in self.table.types[part.qtype].answer:
            got = t.source(name, part)
            if got is not None:
                return got, name
        return capabilities.answer(t, part, first=False), None

    def answer(self, view: PolicyView, image: Any = None) -> AnswerDraft:
        t = TurnReading(self, view)
        got: list[Candidate] = []
        for part in t.parts:
            cand, source = self._answer_part(t, part)
            if (
                cand is not None
                and t.rivals
                and t.depends_on_image(part)
                and not (source and holds_for_rivals(t, source, part, cand))
            ):
                return AnswerDraft(
                    answer=IDK,
                    confidence=0.0,
                    entity=t.entity,
                    rationale=f"{part.qtype}: the photo matches {t.entity} and "
                    f"{', '.join(h.entity_name or '' for h in t.rivals)} equally, and the "
                    f"answer differs between them or cannot be checked for each",
                )
            if cand is None:
                refused = f"; refused: {'; '.join(t.refused)}" if t.refused else ""
                return AnswerDraft(
                    answer=IDK,
                    confidence=0.0,
                    entity=t.entity,
                    rationale=f"{part.qtype}: no evidence of the expected type ({part.spec.kind}) "
                    f"answers: {part.resolved}{refused}",
                )
            got.append(cand)
        sents = {c.sentence for c in got}
        if len(got) > 1 and len(sents) == 1 and None not in sents:
            text = t.short(got[0].sentence or "")  # every part answered by one sentence: it says them together
        else:
            text = "; ".join(c.text for c in got)
        return AnswerDraft(
            answer=text,
            confidence=round(min(c.confidence for c in got), 4),
            rationale="; ".join(c.note for c in got),
            entity=t.entity,
        )
