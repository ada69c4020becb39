"""Training examples rendered from a turn's trace: the options of an export, one example per decision step (the
prompt the model policy renders from the view it had, the decision as the completion), per run. The command line,
counterfactual abstentions, self-check examples and SuperGlasses annotations are glasses_rag/training/export.py.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, Field

from glasses_rag.policies.model.policy import FINAL_ANSWER_TOOL, Format, ModelPolicy
from glasses_rag.policies.model.replies import ANSWER_CHARS, FINAL_ANSWER, NAME_CHARS, SENTENCE_CHARS
from glasses_rag.policies.protocol import IDK, PolicyView, StepSummary, ToolSpec
from glasses_rag.superglasses.logs import NOT_DISPATCHED
from glasses_rag.training.photos import sent_photos
from graph.state import policy_view, tool_spec
from tools import default_registry
from tools.base import HistoryTurn, ToolState, apply_update, field_adapter
from tools.registry import ToolProfile
from traces.schema import AnswerEvent, ToolCallEvent, TurnTrace

ExportMode = Literal["structured", "native"]
Wrong = Literal["idk", "drop", "keep"]
Counterfactual = Literal["swap", "empty", "no-web"]
# What each counterfactual does to an answered turn; the turn ends right after the changed call, and the evidence
# shown then does not support the teacher's answer, so the decision to learn is "I don't know":
COUNTERFACTUALS: dict[Counterfactual, str] = {
    "swap": "the image search's results replaced by those of another turn picturing another entity (one whose "
    "results do not contain the teacher's answer)",
    "empty": "the image search found nothing",
    "no-web": "the web search found nothing",
}
SUPERGLASSES_TASK = 2  # SuperGlasses questions are single-turn with web search allowed
NO_IMAGE = object()  # stands for "the turn had a photo" when the model is text-only (the prompt only says so)


class ExportOptions(BaseModel):
    """How examples are rendered and labelled; the policy options must match the ones the model will run with."""

    mode: ExportMode = Field(
        "structured",
        description="structured: JSON decisions (the grammar-constrained mode); native: assistant tool calls.",
    )
    wrong: Wrong = Field("idk", description='A turn judged wrong: relabelled "I don\'t know", dropped, or kept.')
    keep_all: bool = Field(False, description="Ignore the scores: every turn as the teacher answered it.")
    abstentions: bool = Field(True, description="Keep the teacher's \"I don't know\" turns as abstention examples.")
    tools: list[str] | None = Field(None, description="The tools the model is offered (default: the task's).")
    profile: str | ToolProfile = Field(
        "crag-mm",
        description="The tools' benchmark profile: a built-in benchmark's by name (graph.config.ToolsConfig.profile), "
        "or a ToolProfile.",
    )
    sees_images: bool = Field(False, description="The model sees the photo (a VLM); False: text-only prompts.")
    budget_s: float | None = Field(None, description="The budget the prompt states (default: the trace's).")
    policy: dict[str, Any] = Field(
        default_factory=dict,
        description="ModelPolicy options (max_evidence, "
        "evidence_chars, prompts_dir, ...), as the evaluated model policy gets them.",
    )
    # off by default: neither 1.0 nor 0.25 helped on the validation split (docs/training.md, Measured)
    counterfactual: float = Field(
        0.0,
        ge=0,
        description="Counterfactual abstention examples per answered turn: "
        "the turn with the evidence it answered from withheld or replaced (see "
        'counterfactual_kinds), the target "I don\'t know"; 0: none.',
    )
    counterfactual_kinds: list[Counterfactual] = Field(
        default_factory=lambda: list[Counterfactual](COUNTERFACTUALS),
        description="Which counterfactuals to make (see COUNTERFACTUALS).",
    )
    self_check: bool = Field(
        False,
        description="Self-check examples: the verification request the model policy "
        "sends for a draft (glasses_rag.policies.model.verify), a supported draft -> supported, an "
        "unsupported one (a counterfactual's, a turn judged wrong) -> not supported.",
    )


class Example(BaseModel):
    """One decision step in TRL's conversational prompt-completion format, plus where it came from."""

    prompt: list[dict[str, Any]]
    completion: list[dict[str, Any]]
    images: list[str] | None = None
    tools: list[dict[str, Any]] | None = None
    meta: dict[str, Any] = Field(default_factory=dict)

    def line(self) -> str:
        return json.dumps(self.model_dump(mode="json", exclude_none=True), ensure_ascii=False)


class _Renderer:
    """A backend that is never called: it only tells the model policy what the model supports, so the policy
    renders its prompts exactly as it would for that model."""

    def __init__(self, sees_images: bool, mode: ExportMode):
        self.name = "training-export"
        self.supports_images = sees_images
        self.supports_structured = mode == "structured"
        self.supports_native_tools = mode == "native"


def policy_for(opts: ExportOptions) -> ModelPolicy:
    modes = ("structured", "json_text") if opts.mode == "structured" else ("native_tools", "json_text")
    return ModelPolicy(_Renderer(opts.sees_images, opts.mode), modes=modes, **opts.policy)  # type: ignore[arg-type]


def task_tools(task: int, opts: ExportOptions) -> list[ToolSpec]:
    return [tool_spec(t) for t in default_registry().for_task(task, opts.tools, tool_profile(opts.profile))]


def tool_profile(profile: str | ToolProfile) -> ToolProfile:
    """A built-in benchmark's tool profile by its name (a ToolProfile as it is)."""
    from glasses_rag.crag_mm.spec import BENCHMARK as CRAG_MM
    from glasses_rag.superglasses.spec import BENCHMARK as SUPERGLASSES

    if isinstance(profile, ToolProfile):
        return profile
    known = {b.tools.name: b.tools for b in (CRAG_MM, SUPERGLASSES)}
    if profile not in known:
        raise ValueError(f"unknown tool profile {profile!r}: one of {', '.join(known)}, or a ToolProfile")
    return known[profile]


# ---- completions ------------------------------------------------------------------------------------------------


def _ordered(arguments: dict[str, Any], spec: ToolSpec | None) -> dict[str, Any]:
    """Arguments in the order of the tool's schema (the grammar writes properties in that order)."""
    props = list((spec.json_schema.get("function", {}).get("parameters", {}).get("properties") or {}) if spec else [])
    return {
        **{k: arguments[k] for k in props if k in arguments},
        **{k: v for k, v in arguments.items() if k not in props},
    }


def fit_text(text: str | None, n: int) -> str | None:
    """A text cut to its field's bound in the reply schema (the grammar would not let the model write more)."""
    return text if text is None or len(text) <= n else text[:n]


def call_completion(tool: str, arguments: dict[str, Any], spec: ToolSpec | None, mode: ExportMode) -> dict[str, Any]:
    args = {k: fit_text(v, SENTENCE_CHARS) if isinstance(v, str) else v for k, v in _ordered(arguments, spec).items()}
    if mode == "native":
        return {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"type": "function", "function": {"name": tool, "arguments": json.dumps(args, ensure_ascii=False)}}
            ],
        }
    obj = {"action": "call_tool", "tool": tool, "arguments": args, "rationale": ""}
    return {"role": "assistant", "content": json.dumps(obj, ensure_ascii=False)}


def answer_completion(answer: str, confidence: float, entity: str | None, mode: ExportMode) -> dict[str, Any]:
    fields = {
        "answer": fit_text(answer, ANSWER_CHARS),
        "confidence": round(float(confidence), 2),
        "entity": fit_text(entity, NAME_CHARS),
        "rationale": "",
    }
    if mode == "native":
        return {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "type": "function",
                    "function": {"name": FINAL_ANSWER, "arguments": json.dumps(fields, ensure_ascii=False)},
                }
            ],
        }
    return {"role": "assistant", "content": json.dumps({"action": "answer", **fields}, ensure_ascii=False)}


# ---- from a trace -------------------------------------------------------------------------------------------


def dispatched(trace: TurnTrace) -> list[ToolCallEvent]:
    return [ev for ev in trace.tool_calls() if ev.error is None or ev.error.kind not in NOT_DISPATCHED]


def summary_of(ev: ToolCallEvent) -> StepSummary:
    """A traced call as the policy saw it in `view.done`: its update typed again (Hit, Box, Fact)."""
    update = {}
    for name, value in ev.update.items():
        try:
            update[name] = field_adapter(name).validate_python(value)
        except (KeyError, ValueError):  # a field this code does not know: shown as the summary only
            continue
    error = f"{ev.error.kind}: {ev.error.message}" if ev.error else None
    return StepSummary(
        tool=ev.tool,
        arguments=dict(ev.arguments),
        summary=ev.summary or "",
        error=error,
        update=update,
        parallel_with=ev.parallel_with,
        replaced=[name for name in ev.replaced if name in update],
    )


def label(trace: TurnTrace, opts: ExportOptions) -> tuple[str, str] | None:
    """(answer to teach, why) for a turn, or None when the turn is left out."""
    if trace.error or trace.ended_by == "error":
        return None
    if opts.keep_all:
        return trace.answer, "teacher"
    if trace.abstained or trace.score == "missing":
        return (IDK, "teacher-idk") if opts.abstentions else None
    if trace.score == "correct":
        return trace.answer, "correct"
    if trace.score == "incorrect" and opts.wrong != "drop":
        return (IDK, "wrong-as-idk") if opts.wrong == "idk" else (trace.answer, "wrong-kept")
    return None


def turn_view(
    trace: TurnTrace, history: list[HistoryTurn], tools: list[ToolSpec], done: list[StepSummary], opts: ExportOptions
) -> PolicyView:
    """The view the policy had before its decision number len(done), rendered as the graph renders it
    (`graph.state.policy_view`) from the same record: the state the calls done wrote (`state_after`), the budget
    as the turn started."""
    return policy_view(
        trace.task,
        trace.question,
        history,
        trace.has_image,
        tools,
        state_after(done),
        done,
        max(0, trace.max_steps - len(done)),
        opts.budget_s or trace.budget_s,
    )


def state_after(done: list[StepSummary]) -> ToolState:
    """The turn's state after the calls `done`: their recorded updates folded by the state fields' own reducers
    (tools.base.apply_update), as LangGraph folded them in the graph."""
    state = ToolState()
    for step in done:
        state = apply_update(state, step.update, step.replaced)
    return state


def examples_from_trace(
    trace: TurnTrace, history: list[HistoryTurn], policy: ModelPolicy, opts: ExportOptions, image: str | None = None
) -> list[Example]:
    """One example per decision of a kept turn: each dispatched tool call, then the answer."""
    target = label(trace, opts)
    if target is None:
        return []
    answer, why = target
    tools = task_tools(trace.task, opts)
    specs = {t.name: t for t in tools}
    calls = dispatched(trace)
    ans = next((ev for ev in reversed(trace.steps) if isinstance(ev, AnswerEvent)), None)
    idk = answer == IDK
    entity = None if idk else (trace.entity or (ans.entity if ans else None))
    conf = 0.0 if idk else (trace.confidence if trace.confidence is not None else 1.0)
    targets = [call_completion(ev.tool, ev.arguments, specs.get(ev.tool), opts.mode) for ev in calls]
    targets.append(answer_completion(answer, conf, entity, opts.mode))
    done = [summary_of(ev) for ev in calls]
    meta = {"session_id": trace.session_id, "interaction_id": trace.interaction_id, "task": trace.task, "label": why}
    return [
        render(turn_view(trace, history, tools, done[:i], opts), policy, opts, completion, image, {**meta, "step": i})
        for i, completion in enumerate(targets)
    ]


def render(
    view: PolicyView,
    policy: ModelPolicy,
    opts: ExportOptions,
    completion: dict[str, Any],
    image: str | None,
    meta: dict[str, Any],
) -> Example:
    """The policy's own decision request for `view` as an example; with an image path, TRL's vision format."""
    shown: Any = None
    if view.has_image:
        shown = photo_of(image) if opts.sees_images and image else NO_IMAGE
    fmt: Format = "native" if opts.mode == "native" else "json"
    prompt = policy.decide_messages(view, None if shown is NO_IMAGE and opts.sees_images else shown, fmt)
    images = None
    if opts.sees_images and image and view.has_image:
        prompt, images = sent_photos(prompt)  # the photo as the model is sent it (training.photos)
    tools = [*(t.json_schema for t in view.tools), FINAL_ANSWER_TOOL] if opts.mode == "native" else None
    return Example(prompt=prompt, completion=[completion], images=images, tools=tools, meta=meta)


def photo_of(path: str) -> Any:
    from PIL import Image

    with Image.open(path) as im:
        return im.convert("RGB")


def not_offered(trace: TurnTrace, opts: ExportOptions) -> set[str]:
    """The tools the turn called that its prompt would not offer (`opts.tools`, the task, the profile): a turn
    teaching them would teach calls to tools the model is told do not exist."""
    offered = {t.name for t in task_tools(trace.task, opts)}
    return {ev.tool for ev in dispatched(trace) if ev.tool not in offered}
