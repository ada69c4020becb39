"""The model policy: any chat backend (vLLM or another OpenAI-compatible server, transformers, llama.cpp) as a
`glasses_rag.policies.protocol.Policy`, plus its self-check verifier (glasses_rag/policies/model/verify.py).

Each request is the turn's transcript (glasses_rag/policies/model/prompts.py: the same system text, tools, photo and
question first, the finished calls and their results after, what is asked now last) constrained as strongly as the
backend allows: a JSON schema of the decision (one branch per allowed tool with that tool's argument schema, and one
branch that answers with the answer itself, so deciding to answer costs no second round trip), else the tools as
native functions plus `final_answer`, else JSON asked for in the text. Replies are read by
glasses_rag/policies/model/replies.py; every request is reported as a ModelCall (tokens, latency, finish reason, raw
reply, mode, prompt blocks).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from glasses_rag.models.vlm import ModelConfig, make_backend, parse_spec
from glasses_rag.models.vlm.base import ChatBackend, ChatReply, complete_and_report
from glasses_rag.policies.model.prompts import PROMPTS_DIR, Format, Prompts, load_prompt  # noqa: F401 - re-exported
from glasses_rag.policies.model.replies import (  # noqa: F401 - re-exported for callers and tests
    ANSWER_CHARS,
    ANSWER_SCHEMA,
    FINAL_ANSWER_TOOL,
    answer_from_text,
    answer_token_confidence,
    decision_from_obj,
    decision_from_reply,
    decision_schema,
    max_json_chars,
)
from glasses_rag.policies.model.verify import ModelVerifier, combine_verdict  # noqa: F401 - re-exported
from glasses_rag.policies.protocol import IDK, AnswerDraft, Decision, PolicyReplyError, PolicyView, ToolSpec

log = logging.getLogger(__name__)


class ModelPolicy:
    """A glasses_rag.policies.protocol.Policy over any ChatBackend.

    Backend failures and unparseable replies raise: the graph records them as `policy_error` steps (and the
    answer step as "I don't know"). `modes` are the reply constraints the policy may offer, strongest first (see
    ModelConfig.decision_mode); each request uses the strongest the backend supports at that moment (a server that
    rejected one is not offered it again)."""

    def __init__(
        self,
        backend: ChatBackend,
        name: str | None = None,
        *,
        max_tokens: int = 512,
        temperature: float = 0.0,
        native_tools: bool | None = None,
        max_evidence: int = 5,
        evidence_chars: int = 300,
        image_max_side: int = 1024,
        prompts_dir: Path | None = None,
        modes: tuple[str, ...] = ("structured", "native_tools", "json_text"),
        verify_max_tokens: int = 256,
        prompt_profile: str = "full",
        answer_confidence: str = "written",
    ):
        self.backend = backend
        self.name = name or f"vlm:{getattr(backend, 'name', type(backend).__name__)}"
        self.max_tokens = max_tokens
        self._short_caps: set[str] = set()  # schemas whose longest reply max_tokens does not cover (warned once)
        self.verify_max_tokens = min(verify_max_tokens, max_tokens)
        self.temperature = temperature
        if native_tools is False:
            modes = tuple(m for m in modes if m != "native_tools")
        elif native_tools and "native_tools" not in modes:
            modes = ("native_tools", *modes)
        self.modes = modes
        self.answer_confidence = answer_confidence
        self._no_logprobs_said = False
        self.prompts = Prompts(
            prompts_dir,
            sees_images=self.sees_images,
            image_max_side=image_max_side,
            max_hits=max_evidence,
            evidence_chars=evidence_chars,
            profile=prompt_profile,
        )

    def warm_up(self, tool_sets: Sequence[list[ToolSpec]] = ()) -> None:
        """Let an in-process backend initialise before the first turn (build_agent calls this), and compile the
        grammars of the first decision over each of `tool_sets` and of the answer (seconds each against a large
        vocabulary).

        Example:
            >>> policy.warm_up(tool_sets=[[tool_spec(t) for t in registry.for_task(2)]])  # doctest: +SKIP
        """
        warm = getattr(self.backend, "warm_up", None)
        if callable(warm):
            warm()
        prepare = getattr(self.backend, "prepare_schemas", None)
        if tool_sets and callable(prepare) and self.mode() == "structured":
            prepare([*(decision_schema(tools) for tools in tool_sets), ANSWER_SCHEMA])

    @property
    def sees_images(self) -> bool:
        return bool(getattr(self.backend, "supports_images", True))

    def mode(self) -> str:
        """The reply constraint a decision gets now: structured, native_tools or json_text."""
        b = self.backend
        if "structured" in self.modes and getattr(b, "supports_structured", False):
            return "structured"
        if "native_tools" in self.modes and getattr(b, "supports_native_tools", False):
            return "native_tools"
        return "json_text"

    def format(self) -> Format:
        return "native" if self.mode() == "native_tools" else "json"

    # ---- requests ---------------------------------------------------------------------------------------------

    def request(
        self,
        purpose: str,
        messages: list[dict],
        schema: dict | None = None,
        tools: list[dict] | None = None,
        max_tokens: int | None = None,
    ) -> ChatReply:
        """One backend request with the constraint this policy may offer, reported as a ModelCall."""
        return complete_and_report(
            self.backend,
            purpose,
            messages,
            response_schema=schema if "structured" in self.modes else None,
            tools=tools if "native_tools" in self.modes else None,
            max_tokens=self.token_cap(schema, max_tokens or self.max_tokens),
            temperature=self.temperature,
            prompt_profile=self.prompts.profile.name,
        )

    def token_cap(self, schema: dict | None, max_tokens: int) -> int:
        """The token cap of a request: `max_tokens` as configured (a hard limit the user set). Every text field of
        a reply schema is bounded (glasses_rag/policies/model/replies.py), so a grammar-constrained reply always ends
        by itself within the schema's longest reply (`max_json_chars`); a cap below that can still cut a reply,
        which then cannot be read: said once per schema, in the log."""
        if schema is not None and self.mode() == "structured":
            longest = max_json_chars(schema)
            name = schema.get("name", "?")
            if longest != float("inf") and max_tokens < longest and name not in self._short_caps:
                self._short_caps.add(name)
                log.info(
                    "max_tokens %d is below the longest %r reply its schema allows (%d tokens of plain "
                    "text): a reply that writes its fields to their bounds is cut and cannot be read",
                    max_tokens,
                    name,
                    int(longest),
                )
        return max_tokens

    def ask(
        self, purpose: str, view: PolicyView, image: Any, text: str, schema: dict | None, max_tokens: int | None = None
    ) -> ChatReply:
        """The turn's transcript with `text` asked last, constrained to `schema` (or plain JSON in the text)."""
        messages = self.prompts.ask(self.prompts.transcript(view, image, self.format()), text)
        return self.request(purpose, messages, schema=schema, max_tokens=max_tokens)

    # ---- Policy protocol ------------------------------------------------------------------------------------

    def decide(self, view: PolicyView, image: Any = None) -> Decision:
        fmt = self.format()
        reply = self._decide(view, image, fmt)
        try:
            decision = decision_from_reply(reply)
        except PolicyReplyError:
            if fmt == self.format():
                raise
            # the server refused the tools just now, and its fallback reply to a prompt written for native calls
            # could not be read: ask once more, in the shape it takes
            reply = self._decide(view, image, self.format())
            decision = decision_from_reply(reply)
        if decision.answer is not None:
            decision.answer = self.scored(decision.answer, reply)
        return answer_instead_of_a_repeat(decision, view)

    def decide_messages(self, view: PolicyView, image: Any, fmt: Format) -> list[dict]:
        """The messages of a decision request: the turn's transcript with the decide instruction last (also what
        glasses_rag.training.export renders as a training prompt, so training and inference see the same text)."""
        return self.prompts.ask(self.prompts.transcript(view, image, fmt), self.prompts.decide_text(view))

    def _decide(self, view: PolicyView, image: Any, fmt: Format) -> ChatReply:
        messages = self.decide_messages(view, image, fmt)
        if fmt == "native":
            return self.request("decide", messages, tools=[*(t.json_schema for t in view.tools), FINAL_ANSWER_TOOL])
        schema = decision_schema(callable_again(view)) if self.mode() == "structured" else None
        return self.request("decide", messages, schema=schema)

    def answer(self, view: PolicyView, image: Any = None) -> AnswerDraft:
        """A separate answer request: only when the step budget ran out or the turn was stopped."""
        text = self.prompts.render("vlm_answer", idk=IDK)
        reply = self.ask("answer", view, image, text, ANSWER_SCHEMA)
        return self.scored(answer_from_text(reply.text), reply)

    def scored(self, draft: AnswerDraft, reply: ChatReply) -> AnswerDraft:
        """`draft` with the confidence `answer_confidence` asks for: with 'tokens', the mean probability of the
        answer's tokens in `reply` (an abstention keeps its 0). An answer that a grammar stopped at its length
        bound is "I don't know": a small model repeating a token ("1000...") runs to the bound, and such a
        repetition is confident by its tokens' probabilities while being no answer."""
        if draft.answer != IDK and reply.mode == "structured" and len(draft.answer) >= ANSWER_CHARS:
            return AnswerDraft(
                answer=IDK,
                confidence=0.0,
                entity=draft.entity,
                rationale=f"the answer ran to its {ANSWER_CHARS}-character bound, cut there: {draft.answer[:40]}...",
            )
        if self.answer_confidence != "tokens" or draft.answer == IDK:
            return draft
        conf = answer_token_confidence(reply.logprobs)
        if conf is None:
            if not self._no_logprobs_said:
                self._no_logprobs_said = True
                log.warning(
                    "answer_confidence 'tokens': %s gave no token log-probabilities for an answer; its written "
                    "confidence is kept",
                    self.name,
                )
            return draft
        source = {"masked": "tokens-masked", "raw": "tokens-raw"}.get(reply.logprobs_from or "", "tokens")
        return draft.model_copy(update={"confidence": round(conf, 4), "confidence_from": source})

    def verifier(self, mode: str = "single") -> ModelVerifier:
        return ModelVerifier(self, mode)


def callable_again(view: PolicyView) -> list[ToolSpec]:
    """The tools a decision schema offers: a tool without arguments that already ran could only repeat that call
    (the system text still lists every tool, so the prompt's prefix does not change)."""
    ran = {s.tool for s in view.done if not s.arguments}
    return [t for t in view.tools if t.name not in ran or _takes_arguments(t)]


def _takes_arguments(tool: ToolSpec) -> bool:
    return bool(tool.json_schema.get("function", {}).get("parameters", {}).get("properties"))


def answer_instead_of_a_repeat(decision: Decision, view: PolicyView) -> Decision:
    """A call that already ran with the same arguments would only return the same result: a model that repeats
    itself is looping, so the turn goes on to its answer step instead (no tool runs, the step budget is kept)."""
    if decision.action != "call_tool" or decision.parallel or decision.tool is None:
        return decision
    if not view.ran_call(decision.tool, decision.arguments):
        return decision
    return Decision(
        action="answer",
        rationale=f"repeated {decision.tool}({decision.arguments}), which already ran: "
        f"answering now (model's rationale: {decision.rationale})",
    )


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
    return ModelPolicy(
        backend,
        name=cfg.name,
        max_tokens=cfg.max_tokens,
        temperature=cfg.temperature,
        image_max_side=cfg.image_max_side,
        modes=cfg.decision_modes(),
        prompt_profile=cfg.prompt_profile,
        answer_confidence=cfg.answer_confidence,
        **policy_opts,
    )
