"""A preset's policy and self-check from the configuration, with every offline stand-in named."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from glasses_rag.policies.presets.routers import ROUTERS
from glasses_rag.policies.presets.schema import Preset

RULE_ANSWER = "stand-in rule-based-planner (heuristic) answer step"


def _is_model(config: Any) -> bool:
    return config.policy != "rule"


def stand_ins(preset: Preset) -> list[str]:
    """What runs instead of a model when none is configured."""
    out = []
    if preset.policy == "model-loop":
        out.append("rule-based-planner (heuristic) picks the tools")
    if preset.policy == "pipeline":
        out.append(f"answer={RULE_ANSWER}")
        out += [f"{s.route}={ROUTERS[s.route].stand_in}" for s in preset.active_steps() if s.route]
    mode = preset.verification_mode()
    if mode in ("model-single", "model-dual-cove", "unsw-algorithm-1"):
        out.append("self-check=heuristic:evidence-support")
    return out


def policy_name(preset: Preset, inner: str, model: bool) -> str:
    removed = f"; without {', '.join(preset.disabled)}" if preset.disabled else ""
    if model or preset.policy == "rule":
        return f"preset:{preset.name} ({preset.policy}: {inner}{removed})"
    return f"preset:{preset.name} ({preset.policy}{removed}; offline stand-ins: {'; '.join(stand_ins(preset))})"


def make_preset_policy(preset: Preset, config: Any, resources: Any, default: Callable[[Any, Any], Any]) -> Any:
    """The rule planner, the model loop or a PipelinePolicy, named with the preset and its stand-ins."""
    model = _is_model(config)
    if preset.policy == "rule" or not model:
        inner = default(config.model_copy(update={"policy": "rule"}), resources)
    else:
        inner = default(config, resources)
    inner_name = getattr(inner, "name", type(inner).__name__)
    if preset.policy == "rule" and model:
        inner_name += ", the configured model is not used by this preset"
    name = policy_name(preset, inner_name, model)
    if preset.policy != "pipeline":
        inner.name = name  # the model loop or the planner itself, renamed for the header and the traces
        return inner
    from glasses_rag.policies.presets.pipeline import PipelinePolicy

    answer_method = f"model answer ({inner_name})" if model else RULE_ANSWER
    answerer = inner
    if model and preset.answer is not None and preset.answer.context is not None:
        import copy

        from glasses_rag.policies.presets.context import unclipped

        answerer = copy.copy(inner)  # its own Prompts: every item whole, the preset's budget bounds the context
        answerer.prompts = unclipped(inner.prompts)
    policy = PipelinePolicy(
        preset,
        answerer,
        backend=getattr(inner, "backend", None) if model else None,
        name=name,
        answer_method=answer_method,
    )
    if any(RERANKER in s.tools for s in preset.active_steps()):
        policy.warm.append(lambda: warm_reranker(resources))
    return policy


RERANKER = "reranker"


def warm_reranker(resources: Any) -> None:
    """Load the reranker's model (and score one pair) before the first turn: loaded inside a turn, it spent the
    turn's time budget (EURECOM's reranker timed out in every turn under the default 10 s)."""
    from tools.reranker import load_reranker

    model = load_reranker(resources)
    if model is not None:
        model.score("warm-up", ["warm-up"])


def make_preset_verifier(preset: Preset, config: Any, policy: Any, resources: Any) -> Any:
    """The preset's self-check; a model self-check without a model is the named evidence-support stand-in."""
    from glasses_rag.policies.presets.verifiers import (
        UNSW_REQUESTS,
        ContextVerifier,
        IdkVariantVerifier,
        StandInVerifier,
        UnswVerifier,
    )
    from glasses_rag.policies.self_check import EvidenceSupportVerifier

    mode = preset.verification_mode()
    model_policy = getattr(policy, "answerer", policy) if _is_model(config) else None
    thresholds = preset.verification.thresholds
    if mode == "none":
        return None
    if mode == "evidence-support":
        return EvidenceSupportVerifier()
    if mode == "idk-variants":
        return IdkVariantVerifier(
            resources.text_embedder,
            thresholds.get("similarity", 0.7),
            calibrate=bool(thresholds.get("calibrate_on_table_1", 0)),
        )
    unsw = mode == "unsw-algorithm-1"
    if model_policy is None or not callable(getattr(model_policy, "verifier", None)):
        return StandInVerifier(
            preset.verification.module if unsw else "the model's chain-of-verification", abstain_on_failure=unsw
        )
    if unsw:
        check: Any = UnswVerifier(
            model_policy,
            thresholds.get("tau_low", 0.9),
            thresholds.get("tau_high", 1.0),
            preset.verification.prompt or UNSW_REQUESTS,
        )
    else:
        check = model_policy.verifier("single" if mode == "model-single" else "dual-cove")
    context = getattr(policy, "answer_context", None)
    return ContextVerifier(check, context) if callable(context) else check


def describe(preset: Preset) -> str:
    """The preset as text: what it does, what it follows, its steps and its offline stand-ins."""
    lines = [f"{preset.name}: {preset.title}", f"  paper: {preset.paper}", f"  {preset.summary}"]
    for s in preset.steps:
        what = f"route {s.route}" if s.route else " | ".join(s.tools)
        when = f" when {', '.join(s.when)}" if s.when else ""
        lines.append(f"  - {s.id}: {what}{when}  [{s.follows}]")
    if preset.answer is not None:
        lines.append(f"  - answer  [{preset.answer.follows}]")
        lines += request_lines(preset.answer.prompt, ("answer",))
    lines.append(f"  - self-check: {preset.verification.mode}  [{preset.verification.follows}]")
    lines += request_lines(preset.verification.prompt, ("closed_book", "consistency", "cove"))
    lines.append(f"  offline stand-ins: {'; '.join(stand_ins(preset)) or 'none'}")
    return "\n".join(lines)


def request_lines(prompt: str | None, requests: tuple[str, ...]) -> list[str]:
    """With a model, the requests a step sends (prompts/<prompt>.yaml) and what each follows, or how it departs."""
    from glasses_rag.policies.presets.requests import request_template

    if not prompt:
        return []
    return [
        f"      with a model, {request} request (prompts/{prompt}.yaml): {request_template(prompt, request).follows}"
        for request in requests
    ]
