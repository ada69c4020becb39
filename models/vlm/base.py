"""Chat backends and the VLM policy.

`ChatBackend` is the one thing a model server or local model must provide:
`complete(messages, tools, max_tokens, temperature) -> ChatReply`, with OpenAI-format
messages (images as `image_url` parts holding data URLs). `VLMPolicy` turns any backend into
a `graph.policy.Policy`: it renders the prompt templates in `prompts/vlm_*.txt`, sends the
image, the tools (natively when the backend supports it, and always as text), history,
steps done and evidence, and parses the reply tolerantly into a `Decision` / `AnswerDraft`.
`VLMPolicy.verify` is the model-based self-check (dual path + chain-of-verification).
"""

from __future__ import annotations

import ast
import base64
import io
import json
import logging
import re
import string
from pathlib import Path
from typing import Any, Iterable, Protocol, runtime_checkable

from pydantic import BaseModel, Field, ValidationError

from graph.policy import IDK, AnswerDraft, Decision, ParallelCall, PolicyView
from tools.base import Verdict

log = logging.getLogger(__name__)

PROMPTS_DIR = Path(__file__).resolve().parents[2] / "prompts"


# --------------------------------------------------------------------------------------------
# Backend protocol and reply types
# --------------------------------------------------------------------------------------------


class ChatToolCall(BaseModel):
    """A tool call as a chat model returned it (OpenAI `function.name` / parsed `arguments`)."""

    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    id: str | None = None


class Usage(BaseModel):
    input_tokens: int = 0
    output_tokens: int = 0


class ChatReply(BaseModel):
    text: str = ""
    tool_calls: list[ChatToolCall] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    latency_ms: float = 0.0
    finish_reason: str | None = None
    model: str | None = None


class BackendError(RuntimeError):
    """A backend could not produce a reply (server down, request rejected, model failed)."""


@runtime_checkable
class ChatBackend(Protocol):
    """`supports_native_tools`: whether `tools=` (OpenAI function specs) is honoured natively;
    `supports_images`: whether image_url parts reach the model (text-only backends drop them)."""

    name: str
    supports_native_tools: bool
    supports_images: bool

    def complete(self, messages: list[dict], tools: list[dict] | None = None, max_tokens: int = 512,
                 temperature: float = 0.0) -> ChatReply: ...


def image_to_data_url(image: Any, max_side: int = 1024, quality: int = 90) -> str:
    """A PIL image (or a path / raw bytes) as a `data:image/jpeg;base64,...` URL, longest side <= max_side."""
    from PIL import Image

    if isinstance(image, (str, Path)):
        image = Image.open(image)
    elif isinstance(image, (bytes, bytearray)):
        image = Image.open(io.BytesIO(image))
    img = image
    if img.mode not in ("RGB", "L"):
        img = img.convert("RGB")
    w, h = img.size
    if max_side and max(w, h) > max_side:
        s = max_side / float(max(w, h))
        img = img.resize((max(1, round(w * s)), max(1, round(h * s))))
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=quality)
    return "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def data_url_to_image(url: str):
    """The inverse of image_to_data_url (for local backends)."""
    from PIL import Image

    payload = url.split(",", 1)[1] if url.startswith("data:") else url
    return Image.open(io.BytesIO(base64.b64decode(payload))).convert("RGB")


def message_text(content: Any) -> str:
    """The text of an OpenAI message content (a string or a list of parts); images dropped."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "\n".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")


def text_only_messages(messages: list[dict]) -> list[dict]:
    """Messages with string contents only, for text-only models."""
    return [{"role": m.get("role", "user"), "content": message_text(m.get("content"))} for m in messages]


# --------------------------------------------------------------------------------------------
# Tolerant JSON extraction
# --------------------------------------------------------------------------------------------

_FENCE = re.compile(r"```(?:json|JSON|javascript|python)?\s*(.*?)```", re.S)
_TRAILING_COMMA = re.compile(r",\s*([}\]])")


def _balanced_objects(text: str) -> Iterable[str]:
    yield from _balanced_scan(text, quotes=True)
    yield from _balanced_scan(text, quotes=False)


def _balanced_scan(text: str, quotes: bool) -> Iterable[str]:
    """Every balanced {...} substring, in order of its opening brace (strings in ' or " respected).
    An object left open at the end of the text is yielded closed (a truncated reply)."""
    n = len(text)
    start = text.find("{")
    while start != -1:
        depth, quote, esc, i = 0, None, False, start
        stack: list[str] = []
        end = -1
        while i < n:
            c = text[i]
            if quote:
                if esc:
                    esc = False
                elif c == "\\":
                    esc = True
                elif c == quote and not (c == "'" and _mid_word(text, i)):
                    quote = None
            elif quotes and c in "\"'":
                # an apostrophe inside a word (don't) is not a quote
                if c == "'" and _mid_word(text, i):
                    pass
                else:
                    quote = c
            elif c in "{[":
                stack.append("}" if c == "{" else "]")
                depth += 1
            elif c in "}]":
                if stack and stack[-1] == c:
                    stack.pop()
                depth -= 1
                if not stack:
                    end = i
                    break
            i += 1
        if end != -1:
            yield text[start:end + 1]
        elif stack and quote is None:
            yield text[start:] + "".join(reversed(stack))
        start = text.find("{", start + 1)


def _mid_word(text: str, i: int) -> bool:
    """An apostrophe inside a word (don't, O'Brien), not a quote."""
    return 0 < i < len(text) - 1 and text[i - 1].isalnum() and text[i + 1].isalnum()


def _single_to_double(s: str) -> str:
    """Rewrite '...' strings as JSON "..." strings (apostrophes inside words kept)."""
    out, quote, esc = [], None, False
    for i, c in enumerate(s):
        if quote is None:
            if c in "\"'":
                quote = c
                out.append('"')
            else:
                out.append(c)
        elif esc:
            esc = False
            out.append("'" if c == "'" else "\\" + c)
        elif c == "\\":
            esc = True
        elif c == quote and not (c == "'" and _mid_word(s, i)):
            quote = None
            out.append('"')
        elif c == '"':
            out.append('\\"')
        else:
            out.append(c)
    return "".join(out)


def _loads_lenient(s: str) -> Any:
    try:
        return json.loads(s)
    except (json.JSONDecodeError, ValueError):
        pass
    fixed = _TRAILING_COMMA.sub(r"\1", s)
    try:
        return json.loads(fixed)
    except (json.JSONDecodeError, ValueError):
        pass
    # Python-literal style: single quotes, True/False/None (json's true/false/null mapped first)
    py = re.sub(r"\btrue\b", "True", fixed)
    py = re.sub(r"\bfalse\b", "False", py)
    py = re.sub(r"\bnull\b", "None", py)
    try:
        return ast.literal_eval(py)
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        pass
    try:
        return json.loads(_TRAILING_COMMA.sub(r"\1", _single_to_double(s)))
    except (json.JSONDecodeError, ValueError):
        pass
    # unquoted keys: {action: "answer"}
    quoted = re.sub(r"([{,]\s*)([A-Za-z_][A-Za-z0-9_]*)\s*:", r'\1"\2":', fixed)
    try:
        return json.loads(quoted)
    except (json.JSONDecodeError, ValueError):
        return None


def extract_json(text: str | None) -> dict[str, Any] | None:
    """The first non-empty JSON object in a model reply, tolerant of junk.

    Handles code fences, leading/trailing prose, single quotes, Python literals, trailing
    commas, unquoted keys and a truncated final object. Returns None when nothing parses.
    """
    if not text:
        return None
    candidates: list[str] = [m.group(1) for m in _FENCE.finditer(text)] + [text]
    for chunk in candidates:
        for obj in _balanced_objects(chunk):
            val = _loads_lenient(obj)
            if isinstance(val, dict) and val:
                return val
    return None


def parse_arguments(raw: Any) -> dict[str, Any]:
    """Tool-call arguments given as a dict or a (possibly sloppy) JSON string."""
    if raw is None or raw == "":
        return {}
    if isinstance(raw, dict):
        return raw
    if isinstance(raw, str):
        val = _loads_lenient(raw.strip())
        if isinstance(val, dict):
            return val
        return extract_json(raw) or {}
    return {}


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
    """Native tool calls first, else JSON in the text, else an 'answer' decision saying why."""
    if reply.tool_calls:
        tc = reply.tool_calls[0]
        if tc.name.strip().lower() in _ANSWER_WORDS:
            return Decision(action="answer", rationale=_snippet(reply.text) or "model chose to answer")
        # several native calls in one reply are independent by construction: run them together
        more = [ParallelCall(tool=c.name, arguments=c.arguments) for c in reply.tool_calls[1:]
                if c.name.strip().lower() not in _ANSWER_WORDS]
        return Decision(action="call_tool", tool=tc.name, arguments=tc.arguments, parallel=more, rationale=_snippet(reply.text))
    obj = extract_json(reply.text)
    if obj is not None:
        try:
            return decision_from_obj(obj)
        except ValidationError as e:
            return Decision(action="answer", rationale=f"unparseable model reply ({e.error_count()} errors): {_snippet(reply.text)}")
    return Decision(action="answer", rationale=f"unparseable model reply: {_snippet(reply.text) or '<empty>'}")


_IDK_RE = re.compile(r"\b(i\s*(do\s*not|don'?t|dont)\s*know|unknown|not\s+sure|cannot\s+(be\s+)?determine|can'?t\s+determine|no\s+answer)\b", re.I)


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


def is_idk(answer: str) -> bool:
    a = (answer or "").strip()
    return not a or bool(_IDK_RE.search(a)) and len(a) < 80


def answer_from_text(text: str) -> AnswerDraft:
    obj = extract_json(text)
    if not obj:
        return AnswerDraft(answer=IDK, confidence=0.0, rationale=f"unparseable model reply: {_snippet(text) or '<empty>'}")
    ans = obj.get("answer", obj.get("final_answer", obj.get("response")))
    if isinstance(ans, (list, tuple)):
        ans = ", ".join(str(a) for a in ans)
    ans = "" if ans is None else str(ans).strip()
    conf = _confidence(obj.get("confidence", 0.0))
    ent = obj.get("entity")
    rationale = str(obj.get("rationale") or obj.get("reason") or "")
    if is_idk(ans):
        return AnswerDraft(answer=IDK, confidence=0.0, rationale=rationale, entity=str(ent) if ent else None)
    return AnswerDraft(answer=ans, confidence=conf, rationale=rationale, entity=str(ent) if ent else None)


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


class VLMPolicy:
    """A graph.policy.Policy over any ChatBackend.

    Every call is recorded in `self.calls` (kind, usage, latency, reply text excerpt);
    `self.usage` keeps the running token totals. Backend failures never escape `decide` /
    `answer` / `verify` unless `raise_errors=True`: decide turns them into an answer decision,
    answer into "I don't know", verify into an unsupported verdict.
    """

    def __init__(self, backend: ChatBackend, name: str | None = None, *, max_tokens: int = 512,
                 temperature: float = 0.0, native_tools: bool | None = None, max_evidence: int = 8,
                 evidence_chars: int = 400, image_max_side: int = 1024, prompts_dir: Path | None = None,
                 raise_errors: bool = False):
        self.backend = backend
        self.name = name or f"vlm:{getattr(backend, 'name', type(backend).__name__)}"
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.native_tools = getattr(backend, "supports_native_tools", False) if native_tools is None else native_tools
        self.max_evidence = max_evidence
        self.evidence_chars = evidence_chars
        self.image_max_side = image_max_side
        self.raise_errors = raise_errors
        self.prompts_dir = prompts_dir
        self.templates = {n: load_prompt(n, prompts_dir) for n in
                          ("vlm_system", "vlm_decide", "vlm_answer", "vlm_selfcheck_consistency", "vlm_cove")}
        self.calls: list[dict[str, Any]] = []
        self.usage = Usage()

    # ---- prompt pieces ------------------------------------------------------------------

    def _render(self, name: str, **kw: Any) -> str:
        return self.templates[name].safe_substitute(**{k: ("" if v is None else v) for k, v in kw.items()})

    @staticmethod
    def _tools_text(view: PolicyView) -> str:
        return "\n".join(f"- {t.signature}" for t in view.tools) or "(no tools)"

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
        return "\n".join(parts) or "(none)"

    def _user(self, text: str, image: Any) -> dict:
        if image is not None and getattr(self.backend, "supports_images", True):
            url = image_to_data_url(image, self.image_max_side)
            return {"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": text}]}
        return {"role": "user", "content": text}

    def _messages(self, user_text: str, image: Any) -> list[dict]:
        return [{"role": "system", "content": self._render("vlm_system")}, self._user(user_text, image)]

    def _common(self, view: PolicyView, image: Any) -> dict[str, Any]:
        return dict(
            task=view.task, question=view.question, history=self._history_text(view),
            image_note="An image from the user's smart glasses is attached." if image is not None else "No image is available for this turn.",
            done=self._done_text(view), evidence=self._evidence_text(view), observations=self._observations(view),
            remaining_steps=view.remaining_steps, remaining_s=f"{view.remaining_s:.0f}",
        )

    def _complete(self, kind: str, messages: list[dict], tools: list[dict] | None = None,
                  max_tokens: int | None = None) -> ChatReply:
        reply = self.backend.complete(messages, tools=tools, max_tokens=max_tokens or self.max_tokens,
                                      temperature=self.temperature)
        self.usage.input_tokens += reply.usage.input_tokens
        self.usage.output_tokens += reply.usage.output_tokens
        self.calls.append({"kind": kind, "input_tokens": reply.usage.input_tokens, "output_tokens": reply.usage.output_tokens,
                           "latency_ms": round(reply.latency_ms, 1), "tool_calls": [t.model_dump() for t in reply.tool_calls],
                           "text": _snippet(reply.text, 500)})
        return reply

    # ---- Policy protocol ------------------------------------------------------------------

    def decide(self, view: PolicyView, image: Any = None) -> Decision:
        text = self._render("vlm_decide", tools=self._tools_text(view), **self._common(view, image))
        native = [t.json_schema for t in view.tools] if (self.native_tools and view.tools) else None
        try:
            reply = self._complete("decide", self._messages(text, image), tools=native)
        except Exception as e:  # noqa: BLE001 - a broken backend must not crash the agent
            if self.raise_errors:
                raise
            log.warning("VLM decide failed: %s", e)
            return Decision(action="answer", rationale=f"backend error: {_clip(str(e), 300)}")
        return decision_from_reply(reply)

    def answer(self, view: PolicyView, image: Any = None) -> AnswerDraft:
        text = self._render("vlm_answer", idk=IDK, **self._common(view, image))
        try:
            reply = self._complete("answer", self._messages(text, image))
        except Exception as e:  # noqa: BLE001
            if self.raise_errors:
                raise
            log.warning("VLM answer failed: %s", e)
            return AnswerDraft(answer=IDK, confidence=0.0, rationale=f"backend error: {_clip(str(e), 300)}")
        return answer_from_text(reply.text)

    # ---- self-check ------------------------------------------------------------------------

    def closed_book_answer(self, question: str, image: Any = None) -> AnswerDraft:
        """The model's answer from the image and its own knowledge only (no retrieved context)."""
        text = self._render("vlm_answer", idk=IDK, task=0, question=question, history="(none)",
                            image_note="An image from the user's smart glasses is attached." if image is not None else "No image is available.",
                            done="(none: answer from your own knowledge)", evidence="(none)", observations="(none)",
                            remaining_steps=0, remaining_s="0")
        return answer_from_text(self._complete("closed_book", self._messages(text, image)).text)

    def verify(self, question: str, draft_answer: str, evidence_texts: list[str] | None = None, image: Any = None) -> Verdict:
        """Dual path (closed-book answer vs draft, judged by the model) + chain-of-verification."""
        method = "vlm-dual-path+cove"
        if is_idk(draft_answer):
            return Verdict(supported=False, confidence=0.0, reason="draft is an abstention; nothing to verify", method=method)
        ev = [(_clip(t, self.evidence_chars)) for t in (evidence_texts or [])[: self.max_evidence]]
        ev_text = "\n".join(f"[{i}] {t}" for i, t in enumerate(ev, 1)) or "(none)"
        try:
            # (a) dual path
            closed = self.closed_book_answer(question, image)
            if is_idk(closed.answer):
                cons = ConsistencyJudgement(consistent=False, closed_book_knows=False, reason="closed-book path abstained")
            else:
                t = self._render("vlm_selfcheck_consistency", question=question, draft=draft_answer, closed_book=closed.answer)
                obj = extract_json(self._complete("consistency", self._messages(t, None), max_tokens=200).text) or {}
                cons = ConsistencyJudgement(consistent=_as_bool(obj.get("consistent", False)),
                                            reason=str(obj.get("reason", "") or ("unparseable judgement" if not obj else "")))
            # (b) chain of verification
            t = self._render("vlm_cove", question=question, draft=draft_answer, evidence=ev_text)
            obj = extract_json(self._complete("cove", self._messages(t, image)).text)
            if obj is None:
                cove = CoVeResult(reason="unparseable verification reply")
            else:
                qas = []
                for q in obj.get("verifications") or obj.get("verification") or obj.get("questions") or []:
                    if isinstance(q, dict):
                        qas.append(VerificationQA(question=str(q.get("question", "")), answer=str(q.get("answer", "")),
                                                  supported=_as_bool(q.get("supported", False))))
                cove = CoVeResult(verifications=qas, supported=_as_bool(obj.get("supported", False)),
                                  confidence=_confidence(obj.get("confidence", 0.0)), reason=str(obj.get("reason", "")))
        except Exception as e:  # noqa: BLE001
            if self.raise_errors:
                raise
            return Verdict(supported=False, confidence=0.0, reason=f"self-check failed: {_clip(str(e), 300)}", method=method)
        return combine_verdict(cons, cove, closed.answer, method)


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
