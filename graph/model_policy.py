"""The model policy: any chat backend (vLLM or another OpenAI-compatible server, transformers, llama.cpp) as a
`graph.policy.Policy`, plus its self-check verifier.

It renders the prompt templates in `prompts/vlm_*.txt` (the tool list is generated from the registry's
schemas, enums and argument descriptions included), sends the image when the backend takes images, and parses
replies tolerantly into a `Decision` / `AnswerDraft`; a reply that cannot be parsed raises `PolicyReplyError`
(a `policy_error` step). Where the backend supports it, each reply is constrained to a JSON schema (for a
decision: the allowed tools' arguments), else the tools are offered natively, else JSON is asked for in the
text; every model request is reported as a `ModelCall` (tokens, latency, finish reason, raw reply, that mode)
to the event that made it.
"""

from __future__ import annotations

import json
import logging
import string
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from graph.policy import IDK, AnswerDraft, Decision, ParallelCall, PolicyReplyError, PolicyView, ToolSpec, is_abstention
from models.vlm import ModelConfig, make_backend, parse_spec
from models.vlm.base import (
    ChatBackend,
    ChatReply,
    complete_and_report,
    extract_json,
    image_to_data_url,
    parse_arguments,
)
from tools.base import Verdict

log = logging.getLogger(__name__)

PROMPTS_DIR = Path(__file__).resolve().parents[1] / "prompts"

# --------------------------------------------------------------------------------------------
# Reply -> Decision / AnswerDraft
# --------------------------------------------------------------------------------------------

_ANSWER_WORDS = {"answer", "final_answer", "finish", "final", "respond", "stop", "done"}
_CALL_WORDS = {"call_tool", "tool", "call", "use_tool", "tool_call", "function", "function_call"}


def _snippet(text: str, n: int = 200) -> str:
    t = " ".join((text or "").split())
    return t if len(t) <= n else t[: n - 3] + "..."


def decision_from_obj(obj: dict[str, Any], fallback_rationale: str = "") -> Decision:
    """Normalise the shapes models write into a Decision (no check of the tool name)."""
    obj = dict(obj)
    # hermes / OpenAI-ish shapes
    if "function" in obj and isinstance(obj["function"], dict):
        f = obj.pop("function")
        obj.setdefault("tool", f.get("name"))
        obj.setdefault("arguments", f.get("arguments"))
    if "tool_calls" in obj and isinstance(obj["tool_calls"], list) and obj["tool_calls"]:
        tc = obj["tool_calls"][0]
        if isinstance(tc, dict):
            inner = tc.get("function", tc)
            obj.setdefault("tool", inner.get("name") or inner.get("tool"))
            obj.setdefault("arguments", inner.get("arguments", inner.get("args")))
    tool = obj.get("tool") or obj.get("tool_name") or obj.get("name")
    args = obj.get("arguments", obj.get("args", obj.get("parameters", obj.get("tool_input"))))
    action = obj.get("action")
    if not isinstance(action, str) and not isinstance(tool, str):
        raise PolicyReplyError(f"the reply names neither an action nor a tool: {_snippet(json.dumps(obj, default=str))}",
                               json.dumps(obj, default=str))
    action = action.strip() if isinstance(action, str) else ""
    low = action.lower()
    if low in _ANSWER_WORDS:
        kind = "answer"
    elif low in _CALL_WORDS:
        kind = "call_tool"
    elif action:  # {"action": "web_search", ...}: the action is the tool's name
        kind, tool = "call_tool", tool or action
    else:
        kind = "call_tool" if tool else "answer"
    if kind == "call_tool" and not tool:
        kind = "answer"
    if isinstance(tool, str) and tool.strip().lower() in _ANSWER_WORDS and kind == "call_tool":
        kind, tool = "answer", None
    nr = obj.get("needs_retrieval")
    if isinstance(nr, str):
        nr = {"true": True, "yes": True, "false": False, "no": False}.get(nr.strip().lower())
    sq = obj.get("sub_question")
    data = {
        "action": kind,
        "tool": str(tool) if kind == "call_tool" else None,
        "arguments": parse_arguments(args) if kind == "call_tool" else {},
        "sub_question": str(sq) if sq not in (None, "") else None,
        "needs_retrieval": nr if isinstance(nr, bool) else None,
        "rationale": str(obj.get("rationale") or obj.get("reason") or obj.get("thought") or fallback_rationale or ""),
    }
    return Decision.model_validate(data)


def decision_from_reply(reply: ChatReply) -> Decision:
    """Native tool calls first, else JSON in the text; anything else is a PolicyReplyError."""
    if reply.tool_calls:
        tc = reply.tool_calls[0]
        if tc.name.strip().lower() in _ANSWER_WORDS:
            return Decision(action="answer", rationale=_snippet(reply.text) or "model chose to answer")
        # several native calls in one reply are independent by construction: run them together
        more = [ParallelCall(tool=c.name, arguments=c.arguments) for c in reply.tool_calls[1:]
                if c.name.strip().lower() not in _ANSWER_WORDS]
        return Decision(action="call_tool", tool=tc.name, arguments=tc.arguments, parallel=more, rationale=_snippet(reply.text))
    obj = extract_json(reply.text)
    if obj is None:
        raise PolicyReplyError(f"no JSON decision in the reply: {_snippet(reply.text) or '<empty>'}", reply.text)
    try:
        return decision_from_obj(obj)
    except ValidationError as e:
        raise PolicyReplyError(f"invalid decision ({e.error_count()} errors): {_snippet(reply.text)}", reply.text) from None


def _confidence(v: Any) -> float:
    try:
        if isinstance(v, str):
            v = v.strip()
            pct = v.endswith("%")
            c = float(v.rstrip("%").strip()) / (100.0 if pct else 1.0)
        else:
            c = float(v)
    except (TypeError, ValueError):
        return 0.0
    if c > 1.0:
        c = c / 100.0 if c <= 100.0 else 1.0
    return max(0.0, min(1.0, c))


def answer_from_text(text: str) -> AnswerDraft:
    obj = extract_json(text)
    if not obj:
        raise PolicyReplyError(f"no JSON answer in the reply: {_snippet(text) or '<empty>'}", text)
    keys = [k for k in ("answer", "final_answer", "response") if k in obj]
    if not keys:
        raise PolicyReplyError(f"the reply has no answer field: {_snippet(text)}", text)
    ans = obj[keys[0]]
    if isinstance(ans, (list, tuple)):
        ans = ", ".join(str(a) for a in ans)
    ans = "" if ans is None else str(ans).strip()
    conf = _confidence(obj.get("confidence", 0.0))
    ent = obj.get("entity")
    rationale = str(obj.get("rationale") or obj.get("reason") or "")
    if is_abstention(ans):
        return AnswerDraft(answer=IDK, confidence=0.0, rationale=rationale, entity=str(ent) if ent else None)
    return AnswerDraft(answer=ans, confidence=conf, rationale=rationale, entity=str(ent) if ent else None)


# --------------------------------------------------------------------------------------------
# Reply schemas (structured output: vLLM guided decoding, llama.cpp grammars)
# --------------------------------------------------------------------------------------------


def _inline_refs(node: Any, defs: dict[str, Any]) -> Any:
    """A schema with its `$ref`s to `$defs` replaced by the definitions (tool schemas are not recursive), so that
    each tool's arguments stand alone inside the decision schema."""
    if isinstance(node, dict):
        if "$ref" in node and isinstance(node["$ref"], str):
            target = defs.get(node["$ref"].rsplit("/", 1)[-1], {})
            return _inline_refs({**target, **{k: v for k, v in node.items() if k != "$ref"}}, defs)
        return {k: _inline_refs(v, defs) for k, v in node.items() if k != "$defs"}
    if isinstance(node, list):
        return [_inline_refs(v, defs) for v in node]
    return node


_TEXT = {"type": "string"}
_FLAG = {"type": "boolean"}


_SCHEMAS: dict[tuple, dict[str, Any]] = {}


def decision_schema(tools: list[ToolSpec]) -> dict[str, Any]:
    """The JSON schema of a next-step decision: a call of one of `tools` with arguments valid for it, or answer.
    Built once per set of tools (a turn asks for it at every step)."""
    key = tuple((t.name, id(t.json_schema)) for t in tools)
    cached = _SCHEMAS.get(key)
    if cached is None:
        cached = _SCHEMAS[key] = _decision_schema(tools)
    return cached


def _decision_schema(tools: list[ToolSpec]) -> dict[str, Any]:
    options = []
    for t in tools:
        params = t.json_schema["function"]["parameters"]
        options.append({"type": "object", "additionalProperties": False,
                        "required": ["action", "tool", "arguments", "rationale"],
                        "properties": {"action": {"const": "call_tool"}, "tool": {"const": t.name},
                                       "arguments": _inline_refs(params, params.get("$defs", {})),
                                       "rationale": _TEXT, "sub_question": _TEXT, "needs_retrieval": _FLAG}})
    options.append({"type": "object", "additionalProperties": False, "required": ["action", "rationale"],
                    "properties": {"action": {"const": "answer"}, "rationale": _TEXT, "needs_retrieval": _FLAG}})
    return {"name": "next_step", "schema": {"anyOf": options}}


ANSWER_SCHEMA = {"name": "answer", "schema": {
    "type": "object", "additionalProperties": False, "required": ["answer", "confidence", "entity", "rationale"],
    "properties": {"answer": _TEXT, "confidence": {"type": "number", "minimum": 0, "maximum": 1},
                   "entity": {"anyOf": [_TEXT, {"type": "null"}]}, "rationale": _TEXT}}}
COVE_SCHEMA = {"name": "verification", "schema": {
    "type": "object", "additionalProperties": False, "required": ["verifications", "supported", "confidence", "reason"],
    "properties": {"verifications": {"type": "array", "maxItems": 3, "items": {
        "type": "object", "additionalProperties": False, "required": ["question", "answer", "supported"],
        "properties": {"question": _TEXT, "answer": _TEXT, "supported": _FLAG}}},
        "supported": _FLAG, "confidence": {"type": "number", "minimum": 0, "maximum": 1}, "reason": _TEXT}}}
CONSISTENCY_SCHEMA = {"name": "consistency", "schema": {
    "type": "object", "additionalProperties": False, "required": ["consistent", "reason"],
    "properties": {"consistent": _FLAG, "reason": _TEXT}}}


# --------------------------------------------------------------------------------------------
# Self-check structures
# --------------------------------------------------------------------------------------------


class ConsistencyJudgement(BaseModel):
    consistent: bool = False
    closed_book_knows: bool = True
    reason: str = ""


class VerificationQA(BaseModel):
    question: str = ""
    answer: str = ""
    supported: bool = False


class CoVeResult(BaseModel):
    verifications: list[VerificationQA] = Field(default_factory=list)
    supported: bool = False
    confidence: float = Field(0.0, ge=0.0, le=1.0)
    reason: str = ""


def _as_bool(v: Any) -> bool:
    if isinstance(v, str):
        return v.strip().lower() in ("true", "yes", "1", "supported", "consistent")
    return bool(v)


# --------------------------------------------------------------------------------------------
# Prompt templates
# --------------------------------------------------------------------------------------------


def load_prompt(name: str, prompts_dir: Path | None = None) -> string.Template:
    """A template from prompts/<name>.txt, with `$placeholders` (string.Template)."""
    p = (prompts_dir or PROMPTS_DIR) / f"{name}.txt"
    if not p.is_file():
        raise FileNotFoundError(f"prompt template {p} is missing")
    return string.Template(p.read_text(encoding="utf-8"))


def _clip(text: str, n: int) -> str:
    text = " ".join(str(text or "").split())
    return text if len(text) <= n else text[: max(0, n - 3)] + "..."


# --------------------------------------------------------------------------------------------
# The policy
# --------------------------------------------------------------------------------------------


class ModelPolicy:
    """A graph.policy.Policy over any ChatBackend.

    Backend failures and unparseable replies raise: the graph records them as `policy_error` steps (and the
    answer step as "I don't know"). Each request is reported as a ModelCall to the graph event that made it.
    `modes` are the reply constraints the policy may offer, strongest first (see ModelConfig.decision_mode);
    the backend uses the strongest it supports.
    """

    def __init__(self, backend: ChatBackend, name: str | None = None, *, max_tokens: int = 512,
                 temperature: float = 0.0, native_tools: bool | None = None, max_evidence: int = 8,
                 evidence_chars: int = 400, image_max_side: int = 1024, prompts_dir: Path | None = None,
                 modes: tuple[str, ...] = ("structured", "native_tools", "json_text")):
        self.backend = backend
        self.name = name or f"vlm:{getattr(backend, 'name', type(backend).__name__)}"
        self.max_tokens = max_tokens
        self.temperature = temperature
        if native_tools is False:
            modes = tuple(m for m in modes if m != "native_tools")
        elif native_tools and "native_tools" not in modes:
            modes = ("native_tools", *modes)
        self.modes = modes
        self.max_evidence = max_evidence
        self.evidence_chars = evidence_chars
        self.image_max_side = image_max_side
        self.prompts_dir = prompts_dir
        self.templates = {n: load_prompt(n, prompts_dir) for n in
                          ("vlm_system", "vlm_decide", "vlm_answer", "vlm_selfcheck_consistency", "vlm_cove")}

    def warm_up(self) -> None:
        """Let an in-process backend initialise before the first turn (build_agent calls this)."""
        warm = getattr(self.backend, "warm_up", None)
        if callable(warm):
            warm()

    @property
    def sees_images(self) -> bool:
        return bool(getattr(self.backend, "supports_images", True))

    # ---- prompt pieces ------------------------------------------------------------------

    def _render(self, name: str, **kw: Any) -> str:
        return self.templates[name].safe_substitute(**{k: ("" if v is None else v) for k, v in kw.items()})

    @staticmethod
    def _tools_text(view: PolicyView) -> str:
        """Each allowed tool as generated from its registry schema: signature (types, enums, bounds, defaults)
        and one line per documented argument."""
        lines = []
        for t in view.tools:
            lines.append(f"- {t.signature}")
            props = t.json_schema.get("function", {}).get("parameters", {}).get("properties", {})
            lines += [f"    {k}: {v['description']}" for k, v in props.items() if v.get("description")]
        return "\n".join(lines) or "(no tools)"

    @staticmethod
    def _history_text(view: PolicyView) -> str:
        if not view.history:
            return "(none)"
        lines = []
        for i, h in enumerate(view.history, 1):
            ent = f" [entity: {h.entity}]" if h.entity else ""
            lines.append(f"{i}. Q: {_clip(h.question, 200)} A: {_clip(h.answer, 200)}{ent}")
        return "\n".join(lines)

    @staticmethod
    def _done_text(view: PolicyView) -> str:
        if not view.done:
            return "(none yet)"
        lines = []
        for i, s in enumerate(view.done, 1):
            args = json.dumps(s.arguments, ensure_ascii=False, default=str)
            res = f"ERROR: {_clip(s.error, 200)}" if s.error else _clip(s.summary, 300)
            lines.append(f"{i}. {s.tool}({_clip(args, 200)}) -> {res}")
        return "\n".join(lines)

    def _evidence_text(self, view: PolicyView) -> str:
        if not view.evidence:
            return "(none)"
        lines = []
        for i, h in enumerate(view.evidence[: self.max_evidence], 1):
            src = h.url or h.entity_name or h.source
            lines.append(f"[{i}] ({h.source}, {src}) {_clip(h.text(), self.evidence_chars)}")
        if len(view.evidence) > self.max_evidence:
            lines.append(f"... {len(view.evidence) - self.max_evidence} more not shown")
        return "\n".join(lines)

    def _observations(self, view: PolicyView) -> str:
        parts = []
        if view.crop is not None:
            c = view.crop
            parts.append(f"Detected region of interest: ({c.x0},{c.y0})-({c.x1},{c.y1}) {c.label}".rstrip())
        if view.ocr_text:
            parts.append(f"Text read in the image (OCR): {_clip(view.ocr_text, 600)}")
        if view.sub_questions:
            parts.append("Sub-questions: " + " | ".join(view.sub_questions))
        for f in view.facts:
            parts.append(f"Fact from {f.source}: {_clip(f.text, 300)}")
        return "\n".join(parts) or "(none)"

    def _user(self, text: str, image: Any) -> dict:
        if image is not None and self.sees_images:
            url = image_to_data_url(image, self.image_max_side)
            return {"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": text}]}
        return {"role": "user", "content": text}

    def _messages(self, user_text: str, image: Any) -> list[dict]:
        return [{"role": "system", "content": self._render("vlm_system")}, self._user(user_text, image)]

    def image_note(self, image: Any) -> str:
        if image is None:
            return "No image is available for this turn."
        if not self.sees_images:
            return ("The user's glasses took a photo, but you cannot see it (text-only model): learn what it shows "
                    "from the tools (image search, OCR) and the evidence.")
        return "An image from the user's smart glasses is attached."

    def _common(self, view: PolicyView, image: Any) -> dict[str, Any]:
        return dict(
            task=view.task, question=view.question, history=self._history_text(view), image_note=self.image_note(image),
            done=self._done_text(view), evidence=self._evidence_text(view), observations=self._observations(view),
            remaining_steps=view.remaining_steps, remaining_s=f"{view.remaining_s:.0f}",
        )

    def _complete(self, purpose: str, messages: list[dict], schema: dict | None = None,
                  tools: list[dict] | None = None, max_tokens: int | None = None) -> ChatReply:
        """One backend request with the constraints this policy may offer, reported as a ModelCall."""
        return complete_and_report(
            self.backend, purpose, messages,
            response_schema=schema if "structured" in self.modes else None,
            tools=tools if "native_tools" in self.modes else None,
            max_tokens=max_tokens or self.max_tokens, temperature=self.temperature)

    # ---- Policy protocol ------------------------------------------------------------------

    def decide(self, view: PolicyView, image: Any = None) -> Decision:
        text = self._render("vlm_decide", tools=self._tools_text(view), **self._common(view, image))
        tools = [t.json_schema for t in view.tools] or None
        schema = decision_schema(view.tools) if view.tools else None
        return decision_from_reply(self._complete("decide", self._messages(text, image), schema=schema, tools=tools))

    def answer(self, view: PolicyView, image: Any = None) -> AnswerDraft:
        text = self._render("vlm_answer", idk=IDK, **self._common(view, image))
        return answer_from_text(self._complete("answer", self._messages(text, image), schema=ANSWER_SCHEMA).text)

    # ---- self-check ------------------------------------------------------------------------

    def verifier(self, mode: str = "single") -> ModelVerifier:
        return ModelVerifier(self, mode)

    def closed_book_answer(self, question: str, image: Any = None) -> AnswerDraft:
        """The model's answer from the image and its own knowledge only (no retrieved context)."""
        text = self._render("vlm_answer", idk=IDK, task=0, question=question, history="(none)",
                            image_note=self.image_note(image), done="(none: answer from your own knowledge)",
                            evidence="(none)", observations="(none)", remaining_steps=0, remaining_s="0")
        return answer_from_text(self._complete("closed_book", self._messages(text, image), schema=ANSWER_SCHEMA).text)

    def chain_of_verification(self, question: str, draft: str, evidence: list[str], image: Any = None) -> CoVeResult:
        ev = [(_clip(t, self.evidence_chars)) for t in evidence[: self.max_evidence]]
        ev_text = "\n".join(f"[{i}] {t}" for i, t in enumerate(ev, 1)) or "(none)"
        t = self._render("vlm_cove", question=question, draft=draft, evidence=ev_text, image_note=self.image_note(image))
        text = self._complete("cove", self._messages(t, image), schema=COVE_SCHEMA).text
        obj = extract_json(text)
        if obj is None:
            raise PolicyReplyError(f"no JSON verification in the reply: {_snippet(text) or '<empty>'}", text)
        qas = [VerificationQA(question=str(q.get("question", "")), answer=str(q.get("answer", "")),
                              supported=_as_bool(q.get("supported", False)))
               for q in obj.get("verifications") or obj.get("verification") or obj.get("questions") or []
               if isinstance(q, dict)]
        return CoVeResult(verifications=qas, supported=_as_bool(obj.get("supported", False)),
                          confidence=_confidence(obj.get("confidence", 0.0)), reason=str(obj.get("reason", "")))

    def consistency(self, question: str, draft: str, closed: AnswerDraft) -> ConsistencyJudgement:
        if is_abstention(closed.answer):
            return ConsistencyJudgement(consistent=False, closed_book_knows=False, reason="closed-book path abstained")
        t = self._render("vlm_selfcheck_consistency", question=question, draft=draft, closed_book=closed.answer)
        obj = extract_json(self._complete("consistency", self._messages(t, None), schema=CONSISTENCY_SCHEMA,
                                          max_tokens=200).text)
        if not obj:  # no judgement: the dual path is neutral
            return ConsistencyJudgement(consistent=False, closed_book_knows=False, reason="unparseable judgement")
        return ConsistencyJudgement(consistent=_as_bool(obj.get("consistent", False)), reason=str(obj.get("reason", "")))


class ModelVerifier:
    """The model's self-check. `single` (default): one chain-of-verification request, so self-check costs one
    round trip beyond the answer. `dual-cove`: dual path (closed-book answer judged against the draft) plus
    chain-of-verification; the closed-book answer and the verification run concurrently."""

    def __init__(self, policy: ModelPolicy, mode: str = "single"):
        if mode not in ("single", "dual-cove"):
            raise ValueError(f"unknown self-check mode {mode!r}: use 'single' or 'dual-cove'")
        self.policy = policy
        self.mode = mode
        self.name = "vlm-cove" if mode == "single" else "vlm-dual-path+cove"

    def verify(self, question: str, draft: AnswerDraft, evidence: list[str], image: Any = None) -> Verdict:
        p = self.policy
        if is_abstention(draft.answer):
            return Verdict(supported=False, confidence=0.0, reason="draft is an abstention; nothing to verify", method=self.name)
        if self.mode == "single":
            cove = p.chain_of_verification(question, draft.answer, evidence, image)
            conf = cove.confidence if cove.supported else min(cove.confidence, 0.3)
            return Verdict(supported=cove.supported and conf >= 0.5, confidence=conf, method=self.name,
                           reason=f"cove: {'supported' if cove.supported else 'unsupported'}, {_clip(cove.reason, 200)}")
        from core.calls import run_many

        (ok_c, closed), (ok_v, cove) = run_many([lambda: p.closed_book_answer(question, image),
                                                 lambda: p.chain_of_verification(question, draft.answer, evidence, image)],
                                                timeout_s=3600)
        if not ok_v:
            raise cove
        if not ok_c:
            closed = AnswerDraft(answer=IDK, confidence=0.0, rationale=f"closed-book path failed: {closed}")
        cons = p.consistency(question, draft.answer, closed)
        return combine_verdict(cons, cove, closed.answer, self.name)


def combine_verdict(cons: ConsistencyJudgement, cove: CoVeResult, closed_answer: str, method: str) -> Verdict:
    """CoVe decides support; the dual path moves the confidence (an abstaining closed-book path is neutral)."""
    if not cons.closed_book_knows:
        dual = 0.5
    else:
        dual = 1.0 if cons.consistent else 0.0
    qa_rate = (sum(q.supported for q in cove.verifications) / len(cove.verifications)) if cove.verifications else cove.confidence
    conf = round(0.5 * cove.confidence + 0.2 * qa_rate + 0.3 * dual, 3)
    if not cove.supported:
        conf = min(conf, 0.3)
    supported = cove.supported and conf >= 0.5
    n_ok = sum(q.supported for q in cove.verifications)
    reason = (f"cove: {'supported' if cove.supported else 'unsupported'} ({n_ok}/{len(cove.verifications)} checks), "
              f"{_clip(cove.reason, 200)}; dual path: closed-book said {_clip(closed_answer, 80)!r}, "
              f"{'consistent' if cons.consistent else ('abstained' if not cons.closed_book_knows else 'inconsistent')}"
              f"{': ' + _clip(cons.reason, 150) if cons.reason else ''}")
    return Verdict(supported=supported, confidence=max(0.0, min(1.0, conf)), reason=reason, method=method)


_POLICY_OPTS = {"max_evidence", "evidence_chars", "prompts_dir"}


def make_model_policy(spec: str | ModelConfig, **opts: Any) -> ModelPolicy:
    """A ModelPolicy from a spec string (openai:<url>#<model>, transformers:<folder>, llamacpp:<file.gguf>, a
    .json/.toml config file) or a ModelConfig. `opts` override config fields or set policy options."""
    cfg = spec if isinstance(spec, ModelConfig) else parse_spec(spec)
    overrides = {k: opts.pop(k) for k in list(opts) if k in ModelConfig.model_fields and opts[k] is not None}
    if overrides:
        cfg = ModelConfig.model_validate({**cfg.model_dump(exclude_unset=True), **overrides})
    policy_opts = {k: opts.pop(k) for k in list(opts) if k in _POLICY_OPTS}
    backend = make_backend(cfg, **opts)
    return ModelPolicy(backend, name=cfg.name, max_tokens=cfg.max_tokens, temperature=cfg.temperature,
                       image_max_side=cfg.image_max_side, modes=cfg.decision_modes(), **policy_opts)
