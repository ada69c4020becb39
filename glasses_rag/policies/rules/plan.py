"""Running the plan table: the calls of the first due step (and the steps marked `with_previous` after it), each
tool of the step's capability called with the values its slots offer."""

from __future__ import annotations

import itertools
from typing import Any

from glasses_rag.policies.protocol import ParallelCall, ToolSpec
from glasses_rag.policies.rules.candidates import Offer, Part
from glasses_rag.policies.rules.plan_table import PlanStep
from glasses_rag.policies.rules.reading import TurnReading
from tools.capability import BUILTIN


def fill(spec: ToolSpec, offer: dict[str, Any]) -> dict[str, Any] | None:
    """The arguments the planner gives this tool: each offered slot (that has a value) under the argument name the
    tool maps it to; None when a required argument stays empty (the planner refuses such tools when it is built
    (capabilities.check_inputs), so only a tool spec built by hand gets here)."""
    args = {spec.inputs[s]: v for s, v in offer.items() if s in spec.inputs and v is not None}
    required = set(spec.json_schema["function"]["parameters"].get("required", []))
    return args if required <= args.keys() else None


def combine(slot_offers: dict[str, list[Offer]]) -> list[tuple[dict[str, Any], str | None]]:
    """Every combination of the slots' values (usually one), with the first sub-question any of them names."""
    names = list(slot_offers)
    out = []
    for combo in itertools.product(*(slot_offers[n] for n in names)):
        sub = next((o.sub_question for o in combo if o.sub_question), None)
        out.append(({n: o.value for n, o in zip(names, combo)}, sub))
    return out


def step_offers(turn: TurnReading, step: PlanStep, part: Part | None) -> list[tuple[dict[str, Any], str | None]]:
    """(slot values on offer, sub-question) for one step; several for a query per compared side."""
    return combine({s: turn.catalog.slots[s](turn, part, step.query) for s in BUILTIN[step.uses].inputs})


def calls_for(
    turn: TurnReading, tools: list[ToolSpec], offers: list[tuple[dict[str, Any], str | None]]
) -> list[ParallelCall]:
    """A call per tool and offer, unless the same call already ran."""
    out: list[ParallelCall] = []
    for offer, sub in offers:
        for spec in tools:
            args = fill(spec, offer)
            if args is not None and not turn.ran_call(spec.name, args):
                out.append(ParallelCall(tool=spec.name, arguments=args, sub_question=sub))
    return out


def due(turn: TurnReading, steps: list[PlanStep], part: Part | None) -> tuple[list[ParallelCall], str]:
    """The calls of the first due step, plus those of the steps right after it marked with_previous."""
    calls: list[ParallelCall] = []
    why: list[str] = []
    for step in steps:
        if calls and not step.with_previous:
            break
        if not all(turn.catalog.conditions[c](turn, part) for c in step.when):
            continue
        new = calls_for(turn, turn.v.tools_with(step.uses), step_offers(turn, step, part))
        if new:
            calls += new
            why.append(
                f"{part.qtype if part else 'compound'}: {step.uses}"
                + (f" ({', '.join(step.when)})" if step.when else "")
            )
    return calls, "; ".join(why)
