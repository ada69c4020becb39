"""A pipeline preset's answer context: what the model answers from, as its paper builds it.

Two rules, both from the preset's `answer.context` (glasses_rag/policies/presets/schema.py, ContextSpec):

* reranked only: when the preset's reranker ran, its kept list is the context (UNSW eq. 6-7, SuperGlasses
  Appendix D, EURECOM §3.2); each search call before it is shown by its count only ("40 results, reranked
  below"), so the model never reads the unfiltered top results beside the kept ones.
* token budgets per source (CRAG-MM Appendix C.1: image-search content up to 2K tokens, web snippets up to 8K;
  EURECOM §3.2: 5,000 tokens, web:image 3:1, chunks of at most 200 tokens): items are taken best first until a
  source's budget is spent, the last one cut at the budget. Tokens are counted with the backend's own tokenizer
  when it is local (transformers), else with a named estimate (4 characters per token).

A preset without `answer.context` keeps the model policy's default (5 items of 300 characters per call).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from glasses_rag.policies.protocol import PolicyView, StepSummary
from tools.base import Hit

CHARS_PER_TOKEN = 4
ESTIMATE = f"estimate: {CHARS_PER_TOKEN} characters per token (no local tokenizer)"
RERANKER = "reranker"


class TokenCounter:
    """Counts and cuts text in the backend's tokens: its local tokenizer (transformers backends), else the named
    estimate. `name` says which, for the trace."""

    def __init__(self, backend: Any = None):
        self.backend = backend

    def _tokenizer(self) -> Any:
        tok = getattr(self.backend, "tokenizer", None)  # loaded lazily by some backends: looked up at each use
        return tok if callable(getattr(tok, "encode", None)) and callable(getattr(tok, "decode", None)) else None

    @property
    def name(self) -> str:
        if self._tokenizer() is not None:
            return f"tokenizer of {getattr(self.backend, 'name', type(self.backend).__name__)}"
        return ESTIMATE

    def count(self, text: str) -> int:
        tok = self._tokenizer()
        if tok is None:
            return -(-len(text) // CHARS_PER_TOKEN)
        return len(tok.encode(text, add_special_tokens=False))

    def cut(self, text: str, tokens: int) -> str:
        """The longest start of `text` within `tokens` tokens."""
        if tokens <= 0:
            return ""
        tok = self._tokenizer()
        if tok is None:
            return text[: tokens * CHARS_PER_TOKEN]
        ids = tok.encode(text, add_special_tokens=False)
        return text if len(ids) <= tokens else tok.decode(ids[:tokens], skip_special_tokens=True)


class ContextReport(BaseModel):
    """What the answer context held, for the answer step's rationale."""

    reranked: bool = False
    items: int = 0
    dropped: int = 0
    tokens: dict[str, int] = {}
    counter: str = ""

    def text(self, spec: Any) -> str:
        budget = ", ".join(f"{self.tokens.get(k, 0)}/{v} {k} tokens" for k, v in _budgets(spec).items() if v)
        src = "the reranker's kept list" if self.reranked else "the search results"
        return (
            f"answer context: {self.items} item(s) from {src}"
            + (f", {self.dropped} left out" if self.dropped else "")
            + (f"; {budget} ({self.counter})" if budget else "")
        )


def source_of(hit: Hit) -> str:
    return "image" if hit.source == "image_kg" else "web"


def _budgets(spec: Any) -> dict[str, int | None]:
    return {"image": spec.image_tokens, "web": spec.web_tokens}


def _reranker_index(done: list[StepSummary]) -> int | None:
    found = [
        i
        for i, s in enumerate(done)
        if s.tool == RERANKER and not s.error and isinstance(s.update.get("evidence"), list)
    ]
    return found[-1] if found else None


def _hits(step: StepSummary) -> list[Hit]:
    value = step.update.get("evidence")
    return [h for h in value if isinstance(h, Hit)] if isinstance(value, list) else []


def cut_hit(hit: Hit, tokens: int, counter: TokenCounter) -> Hit | None:
    """The hit within `tokens` tokens of text (entity metadata attribute by attribute, page text cut at the
    budget); None when nothing of it fits."""
    if counter.count(hit.text()) <= tokens:
        return hit
    if hit.source == "image_kg":
        kept: dict[str, Any] = {}
        left = tokens - counter.count(f"{hit.entity_name}. ")
        for k, v in (hit.attributes or {}).items():
            part = f"{k}: {v}; "
            n = counter.count(part)
            if n > left:
                rest = counter.cut(str(v), left - counter.count(f"{k}: "))
                if rest:
                    kept[k] = rest
                break
            kept[k], left = v, left - n
        return hit.model_copy(update={"attributes": kept}) if left > 0 or kept else None
    body = counter.cut(hit.content or hit.snippet, tokens - counter.count(f"{hit.title or ''}. "))
    return hit.model_copy(update={"content": body, "snippet": ""}) if body else None


class Budget:
    """The tokens left per source and the items left, spent as hits are shown (best first within each call)."""

    def __init__(self, spec: Any, counter: TokenCounter):
        self.spec = spec
        self.counter = counter
        self.left = {k: v for k, v in _budgets(spec).items() if v is not None}
        self.items_left = spec.max_items
        self.report = ContextReport(counter=counter.name)

    def take(self, hit: Hit) -> Hit | None:
        if self.items_left is not None and self.items_left <= 0:
            return None
        src = source_of(hit)
        caps = [x for x in (self.left.get(src), self.spec.item_tokens) if x is not None]
        room = min(caps) if caps else None
        shown = hit if room is None else cut_hit(hit, room, self.counter)
        if shown is None:
            return None
        n = self.counter.count(shown.text())
        if src in self.left:
            self.left[src] -= n
        self.report.tokens[src] = self.report.tokens.get(src, 0) + n
        self.report.items += 1
        if self.items_left is not None:
            self.items_left -= 1
        return shown


def answer_view(view: PolicyView, spec: Any, counter: TokenCounter) -> tuple[PolicyView, ContextReport]:
    """The turn as the answer model sees it: searches before the reranker shown by count only (when the reranker
    ran and `spec.reranked_only`), every shown item within the budgets. The evidence is the shown items."""
    spec = spec.for_task(view.task) if callable(getattr(spec, "for_task", None)) else spec
    rr = _reranker_index(view.done) if spec.reranked_only else None
    budget = Budget(spec, counter)
    budget.report.reranked = rr is not None
    done, shown_all = [], []
    for i, step in enumerate(view.done):
        hits = _hits(step)
        if not hits:
            done.append(step)
            continue
        if rr is not None and i < rr:
            done.append(
                step.model_copy(
                    update={
                        "update": {**step.update, "evidence": []},
                        "summary": (
                            f"{len(hits)} result(s), passed to the reranker: its kept list below is the answer context"
                        ),
                    }
                )
            )
            continue
        shown = [s for s in (budget.take(h) for h in hits) if s is not None]
        budget.report.dropped += len(hits) - len(shown)
        shown_all += shown
        done.append(
            step.model_copy(
                update={
                    "update": {**step.update, "evidence": shown},
                    "summary": (
                        f"{len(shown)} of {len(hits)} result(s) in the answer context: "
                        + ", ".join(h.entity_name or h.title or h.url or "" for h in shown)
                    ),
                }
            )
        )
    return view.model_copy(update={"done": done, "evidence": shown_all}), budget.report


def unclipped(prompts: Any) -> Any:
    """A copy of a model policy's Prompts that shows every item whole: the budget above already bounds them."""
    import copy

    out = copy.copy(prompts)
    out.max_hits = 10_000
    out.evidence_chars = 10**7
    return out
