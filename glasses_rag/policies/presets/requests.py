"""The requests a pipeline preset sends a served model to answer and to verify, in the shape of its paper's
prompts: the paper's roles (a verifier role for UNSW's checks, not the planner's system text and tool list), the
context as the paper lists it (CRAG-MM Appendix C.2's entity list and <DOC> blocks, UNSW eq. 7's "[Info m]" tags,
SuperLens Figures 17-18's "Evidence i with relevance score s", EURECOM Appendix D.3's image and web sections after
the entities), the question where the paper puts it (after the context in C.2), and the whole conversation so far
(C.1 step 5).

The wording lives in prompts/preset_requests_<paper>.yaml, one entry per request (`answer`, `closed_book`,
`consistency`, `cove`), each naming the paper section it follows; this module only fills it in:

    template = request_template("preset_requests_crag_mm", "answer")
    messages = paper_messages(template, view, image, image_max_side=1024)

The context items are the turn's evidence as the preset's answer context kept them (the reranker's kept list within
its token budgets: glasses_rag/policies/presets/context.py), best first.
"""

from __future__ import annotations

import string
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

from glasses_rag.policies.protocol import IDK, PolicyView
from tools.base import Hit

PROMPTS_DIR = Path(__file__).resolve().parents[3] / "prompts"
HISTORY_TURNS = 64  # earlier turns shown, at most (CRAG-MM conversations have 2-6): the whole conversation
HISTORY_CHARS = 2000  # each earlier question and answer, at most (a bound for hostile input, not a cut of C.1's)


class RequestTemplate(BaseModel):
    """One request of a paper preset: its system text and its user text, with the blocks the user text may hold
    (`${image_block}`, `${web_block}`, `${context_block}`, `${entities_block}`, `${history_block}`), each made of
    its items (`image_item`, `web_item`, `item`, `entity`, `turn`) and left out, or replaced by `no_<block>`, when
    it has none. Placeholders: $question, $draft, $closed_book, $expanded, $domain, $idk; in a block $items (and
    $names: the entity names of an image block); in an item $n, $name, $attributes, $title, $text (a page's text
    or an entity's attributes), $content (the whole item: name or title, then text), $relevance; in a turn
    $question, $answer."""

    model_config = ConfigDict(extra="forbid")

    follows: str = Field(description="The paper section (and figure or appendix) this request follows.")
    system: str
    system_multi_turn: str | None = Field(None, description="The system text when the turn has earlier turns.")
    reply: str = Field("", description="The reply format, appended to the system text (this project's JSON).")
    user: str
    image_block: str = ""
    image_item: str = ""
    web_block: str = ""
    web_item: str = ""
    context_block: str = ""
    item: str = ""
    no_context: str = ""
    entities_block: str = ""
    entity: str = ""
    history_block: str = ""
    turn: str = ""


@cache
def _request_file(path: Path) -> dict[str, RequestTemplate]:
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    return {k: RequestTemplate.model_validate(v) for k, v in data.items()}


def request_template(name: str, request: str) -> RequestTemplate:
    """The `request` entry of prompts/<name>.yaml; a one-line ValueError when the file or the entry is missing."""
    path = PROMPTS_DIR / f"{name}.yaml"
    if not path.is_file():
        raise ValueError(f"request file {path} is missing")
    found = _request_file(path)
    if request not in found:
        raise ValueError(f"{path} has no {request!r} request (it has {', '.join(found)})")
    return found[request]


def _fill(template: str, **values: Any) -> str:
    return string.Template(template).safe_substitute({k: "" if v is None else str(v) for k, v in values.items()})


def item_fields(n: int, hit: Hit) -> dict[str, Any]:
    """What an item shows: its number, names, attributes or page text, and its relevance (the reranker's score
    when it ran, else the search's)."""
    attributes = "; ".join(f"{k}: {v}" for k, v in (hit.attributes or {}).items())
    text = attributes if hit.source == "image_kg" else (hit.content or hit.snippet)
    relevance = hit.rerank_score if hit.rerank_score is not None else hit.score
    return {
        "n": n,
        "name": hit.entity_name or hit.title or "",
        "attributes": attributes,
        "title": hit.title or hit.entity_name or "",
        "text": " ".join((text or "").split()),
        "content": " ".join(hit.text().split()),
        "relevance": f"{relevance:.2f}",
        "url": hit.url or "",
    }


def _block(block: str, item: str, rows: list[dict[str, Any]], question: str, empty: str = "") -> str:
    if not rows:
        return empty
    items = "\n".join(_fill(item, **r) for r in rows)
    names = ", ".join(dict.fromkeys(r["name"] for r in rows if r.get("name")))
    return _fill(block, items=items, names=names, question=question)


def history_rows(view: PolicyView) -> list[dict[str, Any]]:
    return [
        {"n": i, "question": h.question[:HISTORY_CHARS], "answer": h.answer[:HISTORY_CHARS]}
        for i, h in enumerate(view.history[-HISTORY_TURNS:], 1)
    ]


def entity_rows(entities: list[str]) -> list[dict[str, Any]]:
    """EURECOM §2.2's entity lines ("name, type, keyword, ...") as name and keywords."""
    rows = []
    for i, e in enumerate(entities, 1):
        name, _, rest = e.partition(",")
        rows.append({"n": i, "name": name.strip(), "attributes": rest.strip(), "text": e})
    return rows


def blocks(t: RequestTemplate, view: PolicyView, entities: list[str]) -> dict[str, str]:
    """Every block of the user text, rendered from the turn (the evidence best first within each source)."""
    image = [item_fields(i, h) for i, h in enumerate((h for h in view.evidence if h.source == "image_kg"), 1)]
    web = [item_fields(i, h) for i, h in enumerate((h for h in view.evidence if h.source != "image_kg"), 1)]
    every = [item_fields(i, h) for i, h in enumerate(view.evidence, 1)]
    q = view.question
    return {
        "image_block": _block(t.image_block, t.image_item, image, q),
        "web_block": _block(t.web_block, t.web_item, web, q),
        "context_block": _block(t.context_block, t.item, every, q, t.no_context),
        "entities_block": _block(t.entities_block, t.entity, entity_rows(entities), q),
        "history_block": _block(t.history_block, t.turn, history_rows(view), q),
    }


def paper_messages(
    t: RequestTemplate,
    view: PolicyView,
    image: Any = None,
    *,
    image_max_side: int = 1024,
    sees_images: bool = True,
    entities: list[str] | None = None,
    **values: Any,
) -> list[dict[str, Any]]:
    """[system, user]: the system text (with the reply format), then the photo and the user text.

    `values` fill the other placeholders ($draft, $closed_book, $expanded, $domain)."""
    from glasses_rag.models.vlm.base import image_to_data_url

    system = t.system_multi_turn if view.history and t.system_multi_turn else t.system
    system = "\n\n".join(x for x in (system.strip(), t.reply.strip()) if x)
    text = _fill(t.user, **{"question": view.question, "idk": IDK, **blocks(t, view, entities or []), **values})
    text = text.strip()
    content: Any = text
    if image is not None and sees_images:
        url = image_to_data_url(image, image_max_side)
        content = [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": text}]
    return [{"role": "system", "content": _fill(system, idk=IDK)}, {"role": "user", "content": content}]


def policy_messages(policy: Any, t: RequestTemplate, view: PolicyView, image: Any, **values: Any) -> list[dict]:
    """paper_messages with the model policy's image size and whether its backend sees images."""
    prompts = getattr(policy, "prompts", None)
    return paper_messages(
        t,
        view,
        image,
        image_max_side=getattr(prompts, "image_max_side", 1024),
        sees_images=bool(getattr(policy, "sees_images", True)),
        **values,
    )


__all__ = ["RequestTemplate", "paper_messages", "policy_messages", "request_template"]
