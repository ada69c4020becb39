"""The messages a model policy sends: one transcript per turn that only grows.

Every request of a turn starts with the same messages: the system text (role, the allowed tools with their full
signatures, the reply format), then the photo with the task, the earlier turns and the question. Each finished
tool call follows as the model's call and its result. What changes from request to request (the budget left, what
is asked now: decide, answer, verify) comes last, in the final message. So each request's prompt begins with the
previous one's (less its final instruction), which a server's prefix cache (vLLM's automatic prefix caching,
llama.cpp's prompt cache) reuses instead of computing again. Each ModelCall records its prompt's block hashes
(glasses_rag.models.vlm.base.prompt_blocks), from which benchmarks.latency measures how much of it was reused.
"""

from __future__ import annotations

import json
import string
from functools import cache
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from glasses_rag.core.types import Box, Fact, Hit
from glasses_rag.models.vlm.base import image_to_data_url
from glasses_rag.policies.protocol import IDK, PolicyView, StepSummary

# package data (prompts/ is a package of text files): found wherever the project is installed
PROMPTS_DIR: Traversable = files("prompts")
Format = Literal["json", "native"]
TEMPLATES = (
    "vlm_system",
    "vlm_format_json",
    "vlm_format_native",
    "vlm_turn",
    "vlm_observation",
    "vlm_decide",
    "vlm_answer",
    "vlm_closed_book",
    "vlm_cove",
    "vlm_selfcheck_consistency",
)


class PromptProfile(BaseModel):
    """How the model policy writes its prompts (prompts/profiles.yaml): which template files, how much of each tool
    and each result it shows."""

    model_config = ConfigDict(extra="forbid")

    name: str
    description: str
    templates: dict[str, str] = Field(
        default_factory=dict,
        description="A template name -> the file (under prompts/, without .txt) that renders it instead.",
    )
    tool_arguments: bool = Field(
        True,
        description="Each tool with its whole signature and one line per documented "
        "argument; false: its required arguments and the first sentence of its description.",
    )
    max_hits: int | None = Field(None, ge=1, description="Search results shown per call (None: the policy's).")
    evidence_chars: int | None = Field(None, ge=20, description="Characters per result (None: the policy's).")


def _profiles(path: Path | Traversable) -> dict[str, PromptProfile]:
    return _parsed_profiles(path.read_text(encoding="utf-8"))


@cache
def _parsed_profiles(text: str) -> dict[str, PromptProfile]:
    data = yaml.safe_load(text) or {}
    return {name: PromptProfile(name=name, **spec) for name, spec in data.items()}


def prompt_profile(name: str, prompts_dir: Path | Traversable | None = None) -> PromptProfile:
    """The profile `name` of prompts/profiles.yaml (or of `prompts_dir`'s, when it has one)."""
    path = (prompts_dir or PROMPTS_DIR) / "profiles.yaml"
    profiles = _profiles(path if path.is_file() else PROMPTS_DIR / "profiles.yaml")
    if name not in profiles:
        raise ValueError(f"unknown prompt profile {name!r}: one of {', '.join(profiles)}")
    return profiles[name]


def load_prompt(name: str, prompts_dir: Path | Traversable | None = None) -> string.Template:
    """A template from prompts/<name>.txt, with `$placeholders` (string.Template)."""
    p = (prompts_dir or PROMPTS_DIR) / f"{name}.txt"
    if not p.is_file():
        raise FileNotFoundError(f"prompt template {p} is missing")
    return string.Template(p.read_text(encoding="utf-8"))


def clip(text: Any, n: int) -> str:
    text = " ".join(str(text or "")[: 8 * n + 256].split())  # cut before splitting: a 100 MB text costs nothing
    return text if len(text) <= n else text[: max(0, n - 3)] + "..."


def tools_text(view: PolicyView, arguments: bool = True) -> str:
    """Each allowed tool as generated from its registry schema: signature (types, enums, bounds, defaults) and one
    line per documented argument; with `arguments` False, its required arguments and its description's first
    sentence."""
    if not arguments:
        return (
            "\n".join(
                f"- {short_signature(t.name, t.json_schema)} - {first_sentence(t.description)}" for t in view.tools
            )
            or "(no tools)"
        )
    lines = []
    for t in view.tools:
        lines.append(f"- {t.signature}")
        props = t.json_schema.get("function", {}).get("parameters", {}).get("properties", {})
        lines += [f"    {k}: {v['description']}" for k, v in props.items() if v.get("description")]
    return "\n".join(lines) or "(no tools)"


HISTORY_TURNS = 16  # earlier turns a prompt shows, the latest ones (each cut to HISTORY_CHARS for Q and for A)
HISTORY_CHARS = 200


def short_signature(name: str, json_schema: dict) -> str:
    """name(required: type, ...): what a call must say; the optional arguments keep their defaults."""
    params = json_schema.get("function", {}).get("parameters", {})
    props = params.get("properties", {})
    args = [f"{k}: {props.get(k, {}).get('type', 'any')}" for k in params.get("required", [])]
    return f"{name}({', '.join(args)})"


def first_sentence(text: str) -> str:
    head, dot, _ = " ".join(text.split()).partition(". ")
    return head + ("." if dot else "")


def history_text(view: PolicyView) -> str:
    """The conversation so far, bounded: its last HISTORY_TURNS turns (the number of those left out said first),
    so a prompt stays the same size however long the conversation runs."""
    shown = view.history[-HISTORY_TURNS:]
    first = len(view.history) - len(shown)
    lines = [f"({first} earlier turn(s) not shown)"] if first else []
    for i, h in enumerate(shown, first + 1):
        ent = f" [entity: {clip(h.entity, HISTORY_CHARS)}]" if h.entity else ""
        lines.append(f"{i}. Q: {clip(h.question, HISTORY_CHARS)} A: {clip(h.answer, HISTORY_CHARS)}{ent}")
    return "\n".join(lines) or "(none)"


class Prompts:
    """Renders a turn's transcript from a PolicyView. `image_note` says whether the model sees the photo."""

    def __init__(
        self,
        prompts_dir: Path | None = None,
        *,
        sees_images: bool = True,
        image_max_side: int = 1024,
        max_hits: int = 5,
        evidence_chars: int = 300,
        profile: str = "full",
    ):
        self.profile = prompt_profile(profile, prompts_dir)
        self.templates = {n: load_prompt(self.profile.templates.get(n, n), prompts_dir) for n in TEMPLATES}
        self.sees_images = sees_images
        self.image_max_side = image_max_side
        self.max_hits = self.profile.max_hits or max_hits
        self.evidence_chars = self.profile.evidence_chars or evidence_chars

    def render(self, name: str, **kw: Any) -> str:
        return self.templates[name].safe_substitute(**{k: ("" if v is None else v) for k, v in kw.items()})

    def image_note(self, image: Any) -> str:
        if image is None:
            return "No image is available for this turn."
        if not self.sees_images:
            return (
                "The user's glasses took a photo, but you cannot see it (text-only model): learn what it shows "
                "from the tools (image search, OCR) and their results."
            )
        return "An image from the user's smart glasses is attached."

    # ---- the stable prefix ----------------------------------------------------------------------------------

    def system(self, view: PolicyView, fmt: Format) -> dict:
        reply_format = self.render(f"vlm_format_{fmt}", idk=IDK)
        tools = tools_text(view, self.profile.tool_arguments)
        return {"role": "system", "content": self.render("vlm_system", tools=tools, reply_format=reply_format)}

    def turn(self, view: PolicyView, image: Any) -> dict:
        text = self.render(
            "vlm_turn",
            image_note=self.image_note(image),
            task=view.task,
            history=history_text(view),
            question=view.question,
        )
        if image is not None and self.sees_images:
            url = image_to_data_url(image, self.image_max_side)
            return {
                "role": "user",
                "content": [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": text}],
            }
        return {"role": "user", "content": text}

    def transcript(self, view: PolicyView, image: Any, fmt: Format) -> list[dict]:
        """System text, the turn, then each finished call and its result: the prefix every request shares."""
        messages = [self.system(view, fmt), self.turn(view, image)]
        for i, step in enumerate(view.done):
            messages += self._step(i, step, fmt)
        return messages

    def _step(self, i: int, step: StepSummary, fmt: Format) -> list[dict]:
        result = self.render(
            "vlm_observation",
            call=f"{step.tool}({clip(json.dumps(step.arguments, default=str), 200)})",
            result=self.result_text(step),
        )
        if fmt == "native":
            call_id = f"call_{i}"
            call = {
                "id": call_id,
                "type": "function",
                "function": {"name": step.tool, "arguments": json.dumps(step.arguments, default=str)},
            }
            return [
                {"role": "assistant", "content": "", "tool_calls": [call]},
                {"role": "tool", "tool_call_id": call_id, "content": result},
            ]
        call_json = json.dumps({"action": "call_tool", "tool": step.tool, "arguments": step.arguments}, default=str)
        return [{"role": "assistant", "content": call_json}, {"role": "user", "content": result}]

    # ---- results ----------------------------------------------------------------------------------------------

    def result_text(self, step: StepSummary) -> str:
        if step.error:
            return f"ERROR: {clip(step.error, 300)}"
        lines = [line for field, value in step.update.items() for line in self._field_lines(field, value)]
        if not any(isinstance(h, Hit) for h in step.update.get("evidence") or []):
            lines.insert(0, clip(step.summary, 300) or "(done)")  # hits list what a search summary would repeat
        return "\n".join(lines)

    def _field_lines(self, field: str, value: Any) -> list[str]:
        if field == "evidence" and isinstance(value, list):
            hits = [h for h in value if isinstance(h, Hit)]
            out = [
                f"[{i}] ({h.source} {h.score:.2f}, {h.url or h.entity_name or h.source}) "
                f"{clip(h.text(), self.evidence_chars)}"
                for i, h in enumerate(hits[: self.max_hits], 1)
            ]
            return out + ([f"... {len(hits) - self.max_hits} more not shown"] if len(hits) > self.max_hits else [])
        if isinstance(value, Box):
            return [f"Region of interest: ({value.x0},{value.y0})-({value.x1},{value.y1}) {value.label}".rstrip()]
        if field == "ocr_text" and value:
            return [f"Text read in the image: {clip(value, 600)}"]
        if field == "sub_questions" and value:
            return ["Sub-questions: " + " | ".join(str(s) for s in value)]
        if field == "facts" and isinstance(value, list):
            return [f"Fact from {f.source}: {clip(f.text, 300)}" for f in value if isinstance(f, Fact)]
        return []

    # ---- the final message --------------------------------------------------------------------------------------

    def ask(self, messages: list[dict], text: str) -> list[dict]:
        """The transcript with what is asked now as its last user text (joined to a trailing user or tool result,
        so roles keep alternating for chat templates that insist on it)."""
        last = messages[-1]
        if last["role"] == "user":
            content = last["content"]
            if isinstance(content, list):
                merged: Any = [*content, {"type": "text", "text": text}]
            else:
                merged = f"{content}\n\n{text}"
            return [*messages[:-1], {**last, "content": merged}]
        return [*messages, {"role": "user", "content": text}]

    def decide_text(self, view: PolicyView) -> str:
        return self.render("vlm_decide", remaining_steps=view.remaining_steps, remaining_s=f"{view.remaining_s:.0f}")
