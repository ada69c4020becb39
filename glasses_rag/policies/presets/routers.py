"""The routing steps of the pipeline presets: decisions the policy makes itself (not tools), once per turn.

Each router has a model form (a prompt in prompts/preset_*.txt, the configured model, a JSON schema) and a named
offline stand-in. A model reply that cannot be used falls back to the stand-in, and the rationale says so. The
model requests are reported to the graph event that made them (the first tool call of the turn, or its answer
decision), so they show in the trace with their tokens like every other model call.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable
from dataclasses import dataclass
from importlib.resources import files
from typing import Any

from pydantic import BaseModel, Field

from glasses_rag.core.calls import CallTimeout, Cancelled
from glasses_rag.core.registry import Registry
from glasses_rag.policies.protocol import AnswerDraft, PolicyView
from glasses_rag.policies.rules.questions import classify
from glasses_rag.text import nlp

PROMPTS_DIR = files("prompts")  # package data: the prompts wherever the project is installed
_REAL_TIME = re.compile(
    r"\b(today|tonight|tomorrow|yesterday|now|right now|currently|current|latest|newest|recent|"
    r"recently|this (?:week|month|year|season)|open (?:now|today)|price|cost|weather|score)\b",
    re.I,
)
_READS_TEXT = re.compile(
    r"\bwhat (?:does|do|did) [\w' ]{0,40}\b(?:say|read)\b|\bwhat(?:'s| is| are) (?:written|printed)\b|"
    r"^\s*(?:read|transcribe)\b",
    re.I,
)


class Route(BaseModel):
    """What the turn's routing decided (defaults: retrieve with every branch, as a preset without routers does)."""

    retrieve: bool = True
    image_search: bool = True
    text_search: bool = True
    real_time: bool = False
    object: str | None = None
    summary: str = ""
    expanded: str = ""
    domain: str = ""
    entities: list[str] = Field(default_factory=list, description="Entities the routing extracted (EURECOM §2.2).")
    direct: AnswerDraft | None = Field(None, description="The demand-adaptive answerer's own answer (no retrieval).")
    notes: list[str] = Field(default_factory=list, description="Who decided what, for the trace's rationale.")


@dataclass(frozen=True)
class Router:
    name: str
    prompt: str  # prompts/<prompt>.txt
    schema: dict[str, Any]
    parse: Callable[[dict[str, Any], PolicyView], dict[str, Any]]
    stand_in: str
    heuristic: Callable[[PolicyView], dict[str, Any]]
    max_tokens: int = 200
    sees_image: bool = True  # False: a text-only router (UNSW §3.1: a 1B text model classifies the question)
    prelude: str | None = None  # a router asked first; its fields fill this router's prompt (Fig. 14 before 15)


def _history(view: PolicyView) -> str:
    return (
        "\n".join(
            f"Q: {h.question} A: {h.answer}" + (f" [entity: {h.entity}]" if h.entity else "") for h in view.history[-4:]
        )
        or "(none)"
    )


def _image_note(view: PolicyView, sees: bool) -> str:
    if not view.has_image:
        return "No image is available."
    return "An image from the user's smart glasses is attached." if sees else "The photo is not shown to you."


def ask_model(
    backend: Any, router: Router, view: PolicyView, image: Any, known: dict[str, Any] | None = None
) -> dict[str, Any]:
    """One model request with the router's prompt and schema (`known`: what a prelude router decided, for the
    prompt's placeholders); the parsed route fields."""
    from glasses_rag.models.vlm.base import complete_and_report, extract_json, image_to_data_url

    sees = router.sees_image and image is not None and bool(getattr(backend, "supports_images", False))
    fill = {k: v for k, v in (known or {}).items() if isinstance(v, str)}
    text = string.Template((PROMPTS_DIR / f"{router.prompt}.txt").read_text(encoding="utf-8")).safe_substitute(
        question=view.question,
        history=_history(view),
        image_note=_image_note(view, sees),
        **fill,
        domain_guideline=domain_guideline(fill.get("domain", "")),
    )
    content: Any = text
    if sees:
        content = [
            {"type": "image_url", "image_url": {"url": image_to_data_url(image)}},
            {"type": "text", "text": text},
        ]
    reply = complete_and_report(
        backend,
        router.name,
        [{"role": "user", "content": content}],
        response_schema={"name": router.name.replace("-", "_"), "schema": router.schema},
        max_tokens=router.max_tokens,
    )
    obj = extract_json(reply.text)
    if not obj:
        raise ValueError(f"no JSON in the reply: {reply.text[:200]!r}")
    return router.parse(obj, view)


def run_router(router: Router, backend: Any, view: PolicyView, image: Any) -> dict[str, Any]:
    """The router's decision: the model's when one is configured and its reply is usable, else the stand-in's."""
    if backend is not None:
        try:
            known = ask_model(backend, ROUTERS[router.prelude], view, image) if router.prelude else {}
            out = {**known, **ask_model(backend, router, view, image, known)}
            said = f"{router.prelude} + {router.name}" if router.prelude else router.name
            return {
                **out,
                "notes": [f"{said}: model" + (f" (domain {known['domain']})" if known.get("domain") else "")],
            }
        except (Cancelled, CallTimeout):
            raise
        except Exception as e:  # noqa: BLE001 - an unusable reply: the named stand-in decides instead
            out = router.heuristic(view)
            return {**out, "notes": [f"{router.name}: model reply unusable ({type(e).__name__}), {router.stand_in}"]}
    return {**router.heuristic(view), "notes": [f"{router.name}: {router.stand_in}"]}


# ---- boolean and text fields of model replies ------------------------------------------------------------------


def _flag(v: Any, default: bool) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, str):
        return {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}.get(
            v.strip().lower(), default
        )
    return default


def _text(v: Any, limit: int = 400) -> str:
    return " ".join(str(v).split())[:limit] if isinstance(v, (str, int, float)) else ""


def _confidence(v: Any) -> float:
    try:
        c = float(v)
    except (TypeError, ValueError):
        return 0.0
    return max(0.0, min(1.0, c / 100.0 if 1.0 < c <= 100.0 else c))


# ---- SuperLens ------------------------------------------------------------------------------------------------

_NO_KNOWLEDGE = re.compile(r"\bI have no knowledge\b|\bcannot (?:be )?determine", re.I)


def domain_guideline(domain: str) -> str:
    """Figure 15's domain reasoning guideline for the domain Figure 14's router named
    (prompts/preset_superlens_domains.yaml; '' for none)."""
    import yaml

    if not domain:
        return ""
    guides = yaml.safe_load((PROMPTS_DIR / "preset_superlens_domains.yaml").read_text(encoding="utf-8"))
    return str(guides.get(domain) or guides.get("Other") or "")


def _domain(obj: dict[str, Any], view: PolicyView) -> dict[str, Any]:
    return {"domain": _text(obj.get("domain"), 40) or "Other"}


def _superlens_demand(obj: dict[str, Any], view: PolicyView) -> dict[str, Any]:
    answer = _text(obj.get("answer"))
    retrieve = (
        _flag(obj.get("needs_retrieval"), True)
        or not answer
        or nlp.is_abstention(answer)
        or bool(_NO_KNOWLEDGE.search(answer))
    )
    if retrieve:
        return {"retrieve": True}
    rationale = f"direct answer: {_text(obj.get('reasoning'), 300)}"
    return {
        "retrieve": False,
        "direct": AnswerDraft(answer=answer, confidence=_confidence(obj.get("confidence")), rationale=rationale),
    }


def _superlens_search(obj: dict[str, Any], view: PolicyView) -> dict[str, Any]:
    image = _flag(obj.get("image_search"), False) and view.has_image
    text = _flag(obj.get("text_search"), False)
    if not image and not text:  # retrieval was asked for: search the question's text rather than nothing
        text = True
    return {"image_search": image, "text_search": text, "object": _text(obj.get("object"), 80) or None}


def search_router_stand_in(view: PolicyView) -> dict[str, Any]:
    """Image search when there is an image and the question is about something pictured; text search unless the
    question only asks what is pictured (the planner's question types, glasses_rag/policies/rules/questions.py)."""
    qtype = classify(view.question, has_image=view.has_image, history_entity=any(h.entity for h in view.history))
    image = view.has_image and qtype not in ("web_fact", "follow_up")
    return {
        "image_search": image,
        "text_search": qtype != "recognition" or not image,
        "object": nlp.pointed_phrase(view.question) or None,
    }


# ---- UNSW ------------------------------------------------------------------------------------------------------


def _unsw_route(obj: dict[str, Any], view: PolicyView) -> dict[str, Any]:
    return {"retrieve": _flag(obj.get("needs_external_info"), True), "real_time": _flag(obj.get("is_real_time"), False)}


def keyword_router_stand_in(view: PolicyView) -> dict[str, Any]:
    """Retrieval unless the question only asks what the photo's text says; real-time when it names a time-bound
    word (today, latest, price, ...)."""
    reads_only = view.has_image and bool(_READS_TEXT.search(view.question))
    return {"retrieve": not reads_only, "real_time": bool(_REAL_TIME.search(view.question))}


def _summary(obj: dict[str, Any], view: PolicyView) -> dict[str, Any]:
    return {"summary": _text(obj.get("summary"), 300)}


# ---- EURECOM ---------------------------------------------------------------------------------------------------


def _expand(obj: dict[str, Any], view: PolicyView) -> dict[str, Any]:
    expanded = _text(obj.get("expanded_query"), 400)
    raw = obj.get("entities")
    entities: list[Any] = raw[:5] if isinstance(raw, list) else []
    names = [_text(e, 80).split(",")[0].strip() for e in entities]
    object_ = next((n for n in names if n), None)
    return {
        "expanded": expanded if expanded.lower() != view.question.strip().lower() else "",
        "object": object_,
        "entities": [_text(e, 80) for e in entities if _text(e, 80)],
    }


def _nothing(view: PolicyView) -> dict[str, Any]:
    return {}


def _always_retrieve(view: PolicyView) -> dict[str, Any]:
    return {"retrieve": True}


_B = {"type": "boolean"}
_S = {"type": "string"}


def _schema(props: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "additionalProperties": False, "required": list(props), "properties": props}


# Listed here, read by name (glasses_rag/core/registry.py); schema.RouteName names those a preset step may use.
ROUTERS: Registry[Router] = Registry(
    "router",
    [
        (r.name, r)
        for r in (
            Router(
                "superlens-domain",
                "preset_superlens_domain",
                _schema({"domain": _S}),
                _domain,
                "stand-in: no domain offline",
                _nothing,
                max_tokens=40,
            ),
            Router(
                "superlens-demand",
                "preset_superlens_demand",
                _schema(
                    {
                        "reasoning": _S,
                        "answer": _S,
                        "confidence": {"type": "number", "minimum": 0, "maximum": 1},
                        "needs_retrieval": _B,
                    }
                ),
                _superlens_demand,
                "stand-in heuristic:always-retrieve (no model knowledge offline)",
                _always_retrieve,
                max_tokens=400,
                prelude="superlens-domain",
            ),
            Router(
                "superlens-search",
                "preset_superlens_search",
                _schema({"image_search": _B, "text_search": _B, "object": _S}),
                _superlens_search,
                "stand-in heuristic:question-type-router",
                search_router_stand_in,
            ),
            Router(
                "unsw-route",
                "preset_unsw_route",
                _schema({"needs_external_info": _B, "is_real_time": _B}),
                _unsw_route,
                "stand-in heuristic:keyword-router",
                keyword_router_stand_in,
                max_tokens=60,
                sees_image=False,
            ),
            Router(
                "unsw-summary",
                "preset_unsw_summary",
                _schema({"summary": _S}),
                _summary,
                "stand-in: no image summary offline (q' = q)",
                _nothing,
            ),
            Router(
                "eurecom-expand",
                "preset_eurecom_expand",
                _schema({"expanded_query": _S, "entities": {"type": "array", "maxItems": 5, "items": _S}}),
                _expand,
                "stand-in: no query expansion offline",
                _nothing,
                max_tokens=300,
            ),
        )
    ],
)
