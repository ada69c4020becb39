"""`PipelinePolicy`: a glasses_rag.policies.protocol.Policy that follows a preset's steps in their fixed, conditional
order.

At the turn's first decision the preset's routers decide (once: the result is kept for the turn); every decision
then walks the steps in order, skips those whose conditions do not hold or whose tool the run does not allow, takes
as done the calls the trace already holds, and returns the next step's call(s) (with the steps marked
`with_previous` in the same round). When no step is left it answers: with the model (the retrieved evidence in its
prompt) or, offline, with the named stand-in answer step. The graph, the tools, the self-check and the traces are
the ones every policy uses.
"""

from __future__ import annotations

import threading
import weakref
from collections import Counter, OrderedDict
from collections.abc import Sequence
from typing import Any

from glasses_rag.policies.presets.context import ContextReport, TokenCounter, answer_view
from glasses_rag.policies.presets.routers import ROUTERS, Route, run_router
from glasses_rag.policies.presets.schema import Condition, Preset, Step
from glasses_rag.policies.protocol import IDK, AnswerDraft, Decision, ParallelCall, PolicyView, ToolSpec
from glasses_rag.text import nlp
from tools.base import Hit


class TurnRoutes:
    """The routing of each turn in flight, so the routers run once per turn (a policy serves many turns at once).

    A turn is recognised by its question, history and image object; the image is held weakly and compared by
    identity, so a new image that happens to reuse a dead one's id is another turn."""

    def __init__(self, size: int = 512):
        self.size = size
        self._lock = threading.Lock()
        self._routes: OrderedDict[tuple, tuple[Route, Any]] = OrderedDict()

    @staticmethod
    def _key(view: PolicyView, image: Any) -> tuple:
        return (
            view.task,
            view.question,
            tuple((h.question, h.answer) for h in view.history),
            None if image is None else id(image),
        )

    def peek(self, view: PolicyView, image: Any) -> Route | None:
        with self._lock:
            found = self._routes.get(self._key(view, image))
        if found is None:
            return None
        route, ref = found
        return route if (ref is None and image is None) or (ref is not None and ref() is image) else None

    def put(self, view: PolicyView, image: Any, route: Route) -> None:
        ref = None if image is None else weakref.ref(image)
        with self._lock:
            self._routes[self._key(view, image)] = (route, ref)
            while len(self._routes) > self.size:
                self._routes.popitem(last=False)


def holds(cond: Condition, view: PolicyView, route: Route) -> bool:
    if cond == "has_image":
        return view.has_image
    if cond == "retrieve":
        return route.retrieve
    if cond == "image_branch":
        return route.image_search
    if cond == "text_branch":
        return route.text_search
    if cond == "evidence":
        return bool(view.evidence)
    return any(h.source == "web" for h in view.evidence)  # web_evidence


def _entity(view: PolicyView) -> str:
    kg = [h for h in view.evidence if h.source == "image_kg" and h.entity_name]
    if kg:
        return max(kg, key=lambda h: h.score).entity_name or ""
    return next((h.entity for h in reversed(view.history) if h.entity), "") or ""


def fill_slot(value: Any, view: PolicyView, route: Route, sub_question: str | None) -> Any:
    """A step argument with its $slot replaced by this turn's value."""
    if value == "$question":
        return view.question
    if value == "$sub_question":
        return sub_question
    if value == "$object":
        return route.object or nlp.pointed_phrase(view.question) or "the main object"
    if value == "$expanded":
        return " ".join(x for x in (view.question, route.summary or route.expanded) if x)
    if value == "$entity":
        return _entity(view)
    return value


def _clamp(value: Any, prop: dict[str, Any]) -> Any:
    """Numbers kept within the tool's declared bounds (SuperGlasses' google_search takes k <= 20, web_search 50)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return value
    if "maximum" in prop:
        value = min(value, prop["maximum"])
    if "minimum" in prop:
        value = max(value, prop["minimum"])
    return value


def step_calls(step: Step, spec: ToolSpec, view: PolicyView, route: Route) -> list[ParallelCall]:
    props = spec.json_schema.get("function", {}).get("parameters", {}).get("properties", {})
    subs: list[str | None] = [None]
    if step.for_each_sub_question:  # each asked once (the decoupler may repeat one)
        asked: list[str] = view.sub_questions or [view.question]
        subs = list[str | None](dict.fromkeys(asked))[: step.max_calls]
    calls = []
    for sq in subs:
        args = {}
        for k, v in step.args.items():
            val = fill_slot(v, view, route, sq)
            if k in props and val not in (None, ""):
                args[k] = _clamp(val, props[k])
        calls.append(ParallelCall(tool=spec.name, arguments=args, sub_question=sq))
    return calls


class PipelinePolicy:
    """A preset's steps as a Policy. `answerer` writes the answer (a ModelPolicy, or the offline stand-in);
    `backend` is the configured model the routers ask (None offline: the routers' stand-ins decide)."""

    def __init__(self, preset: Preset, answerer: Any, *, backend: Any = None, name: str, answer_method: str):
        self.preset = preset
        self.answerer = answerer
        self.backend = backend  # also what build_agent hands the tools as their model (the query decoupler's)
        self.name = name
        self.answer_method = answer_method
        self.blocking = backend is not None or getattr(answerer, "blocking", True) is not False
        self.routes = TurnRoutes()
        self.tool_steps = [s for s in preset.active_steps() if s.tools]
        self.counter = TokenCounter(backend)
        self.warm: list[Any] = []  # what to load before the first turn (the reranker's model), not inside one

    def answer_context(self, view: PolicyView) -> tuple[PolicyView, ContextReport | None]:
        """The turn as the answer model reads it (glasses_rag/policies/presets/context.py); unchanged offline or without
        a context rule in the preset."""
        spec = self.preset.answer.context if self.preset.answer is not None else None
        if spec is None or self.backend is None:
            return view, None
        return answer_view(view, spec, self.counter)

    def warm_up(self, tool_sets: Sequence[list[ToolSpec]] = ()) -> None:
        """Models loaded before the first turn (`tool_sets`: what the agent offers; the pipeline's steps are
        fixed)."""
        for load in self.warm:
            load()
        warm = getattr(self.answerer, "warm_up", None)
        if callable(warm):
            warm()

    # ---- routing -------------------------------------------------------------------------------------------
    def route(self, view: PolicyView, image: Any) -> Route:
        found = self.routes.peek(view, image)
        if found is not None:
            return found
        data: dict[str, Any] = {"notes": []}
        for step in self.preset.steps:
            if step.route is None:
                continue
            if step.id in self.preset.disabled:
                data.update(step.if_removed)
                data["notes"].append(f"{step.route}: removed (ablation): {step.if_removed}")
                continue
            if not all(holds(c, view, Route.model_validate(data)) for c in step.when):
                continue
            out = run_router(ROUTERS[step.route], self.backend, view, image)
            data.update({k: v for k, v in out.items() if k != "notes"})
            data["notes"] += out["notes"]
        route = Route.model_validate(data)
        self.routes.put(view, image, route)
        return route

    # ---- the protocol ----------------------------------------------------------------------------------------
    def decide(self, view: PolicyView, image: Any = None) -> Decision:
        route = self.route(view, image)
        said = f"routing: {'; '.join(route.notes)}. " if route.notes and not view.done else ""
        calls, why = self.next_calls(view, route)
        if calls and view.remaining_steps > 0:
            calls = calls[: view.remaining_steps]
            first = calls[0]
            return Decision(
                action="call_tool",
                tool=first.tool,
                arguments=first.arguments,
                parallel=calls[1:],
                sub_question=first.sub_question,
                needs_retrieval=route.retrieve,
                rationale=f"{said}{self.preset.name}: {' + '.join(why)}",
            )
        direct = None
        if route.direct is not None and not view.done:  # the answer came with the routing: no second request
            reason = "answered directly by the demand-adaptive answerer (no retrieval needed)"
            direct = route.direct.model_copy(
                update={"rationale": f"demand-adaptive answerer: {route.direct.rationale}"}
            )
        elif not route.retrieve:
            reason = "the router needs no retrieval"
        else:
            reason = "the preset's steps are done" if self.tool_steps else "no tools: the answer comes from the image"
        return Decision(
            action="answer",
            rationale=f"{said}{self.preset.name}: {reason}",
            needs_retrieval=route.retrieve,
            answer=direct,
        )

    def next_calls(self, view: PolicyView, route: Route) -> tuple[list[ParallelCall], list[str]]:
        """The first step not yet done (and the steps running with it); the calls the trace holds count as done."""
        spent = Counter(s.tool for s in view.done)
        specs = {t.name: t for t in view.tools}
        batch: list[ParallelCall] = []
        why: list[str] = []
        for step in self.tool_steps:
            if batch and not step.with_previous:
                break
            tool = next((t for t in step.tools if t in specs), None)
            if tool is None or not all(holds(c, view, route) for c in step.when):
                continue
            calls = step_calls(step, specs[tool], view, route)
            if spent[tool] >= len(calls):
                spent[tool] -= len(calls)
                continue
            batch += calls[spent[tool] :]
            spent[tool] = 0
            why.append(f"{step.id} ({step.follows})")
        return batch, why

    def answer(self, view: PolicyView, image: Any = None) -> AnswerDraft:
        route = self.routes.peek(view, image) or Route()
        spec = self.preset.answer
        assert spec is not None  # the schema requires it of a pipeline preset
        if route.direct is not None and not view.done:
            return route.direct.model_copy(update={"rationale": f"demand-adaptive answerer: {route.direct.rationale}"})
        floor = spec.realtime_min_retrieval
        if floor is not None and route.real_time and best_score(view) < floor:
            return AnswerDraft(
                answer=IDK,
                confidence=0.0,
                rationale=f"real-time question and no evidence scores {floor:g} or more (UNSW Algorithm 1, line 1)",
            )
        if spec.min_image_score is not None:
            view = without_weak_image_hits(view, spec.min_image_score)
        view, report = self.answer_context(view)
        method = self.answer_method
        if self.backend is not None and spec.prompt:
            draft = self.paper_answer(spec.prompt, view, image, route)
            method += f" with prompts/{spec.prompt}.yaml"
        else:
            draft = self.answerer.answer(view, image)
        if not isinstance(draft, AnswerDraft):
            draft = AnswerDraft.model_validate(draft)
        said = f" [{report.text(spec.context.for_task(view.task))}]" if report is not None and spec.context else ""
        return draft.model_copy(update={"rationale": f"{method}{said}: {draft.rationale}"})

    def paper_answer(self, prompt: str, view: PolicyView, image: Any, route: Route) -> AnswerDraft:
        """The answer request in the paper's shape (prompts/<prompt>.yaml's `answer`: its system text, the context
        as the paper lists it, the question where the paper puts it), with the entities and the expanded query
        the routing made (EURECOM §2.4's pre-context; the question itself when the expansion failed, §2.2)."""
        from glasses_rag.policies.model.replies import ANSWER_SCHEMA, answer_from_text
        from glasses_rag.policies.presets.requests import policy_messages, request_template

        template = request_template(prompt, "answer")
        messages = policy_messages(
            self.answerer,
            template,
            view,
            image,
            entities=route.entities,
            expanded=route.expanded or view.question,
            domain=route.domain,
        )
        reply = self.answerer.request("answer", messages, ANSWER_SCHEMA)
        draft = answer_from_text(reply.text)
        scored = getattr(self.answerer, "scored", None)
        return scored(draft, reply) if callable(scored) else draft


def best_score(view: PolicyView) -> float:
    """The best retrieval score of the evidence (the reranker's when it ran), 0 without evidence."""
    return max((h.rerank_score if h.rerank_score is not None else h.score for h in view.evidence), default=0.0)


def without_weak_image_hits(view: PolicyView, floor: float) -> PolicyView:
    """The turn with the image-search hits under `floor` left out, from the evidence and from each call's result
    (what a model's transcript shows), as a baseline that thresholds its image-search context does."""

    def keep(hits: Any) -> Any:
        if not isinstance(hits, list):
            return hits
        return [h for h in hits if not isinstance(h, Hit) or h.source != "image_kg" or h.score >= floor]

    done = []
    for s in view.done:
        hits = s.update.get("evidence")
        kept = keep(hits)
        if isinstance(hits, list) and len(kept) < len(hits):  # the call's own listing named the dropped ones too
            s = s.model_copy(
                update={
                    "update": {**s.update, "evidence": kept},
                    "summary": (
                        f"{len(kept)} of {len(hits)} results kept (image-search similarity >= {floor:g}): "
                        + ", ".join(h.entity_name or h.title or "" for h in kept)
                    ),
                }
            )
        done.append(s)
    return view.model_copy(update={"evidence": keep(view.evidence), "done": done})
