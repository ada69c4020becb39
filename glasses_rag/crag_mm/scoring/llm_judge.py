"""The LLM judge: an OpenAI-compatible server asked with the prompt and parsing of a scoring mode."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from glasses_rag.crag_mm.scoring.modes import (
    DEFAULT_MODE,
    JUDGE_SAMPLING,
    MAX_API_RETRIES,
    MAX_EVAL_TOKENS,
    PROMPTS_DIR,
    ScoringMode,
    get_mode,
)
from glasses_rag.crag_mm.scoring.verdict import JudgeVerdict
from glasses_rag.models.openai_client import BackendError, OpenAIClient

log = logging.getLogger(__name__)


class CRAGTurnEvaluationResult(BaseModel):
    """The kddcup2025 judge's structured output (same model as the starter kit)."""

    accuracy: bool


# What the OpenAI SDK sends for `beta.chat.completions.parse(response_format=CRAGTurnEvaluationResult)`.
KDDCUP2025_RESPONSE_FORMAT: dict[str, Any] = {
    "type": "json_schema",
    "json_schema": {
        "name": "CRAGTurnEvaluationResult",
        "strict": True,
        "schema": {
            "type": "object",
            "title": "CRAGTurnEvaluationResult",
            "properties": {"accuracy": {"title": "Accuracy", "type": "boolean"}},
            "required": ["accuracy"],
            "additionalProperties": False,
        },
    },
}
# The same schema in llama-cpp-python's shape (its server enforces it with a grammar; it refuses json_schema).
KDDCUP2025_JSON_OBJECT: dict[str, Any] = {
    "type": "json_object",
    "schema": KDDCUP2025_RESPONSE_FORMAT["json_schema"]["schema"],
}

_JSON_OBJECT = re.compile(r"\{[^{}]*\}")


def parse_kddcup2025_verdict(text: str | None) -> bool | None:
    """``{"accuracy": true|false}`` -> True/False; anything else -> None.

    The whole reply is validated first, exactly as the SDK's structured-output parse does
    (pydantic ``model_validate_json``, lax: ``"true"``, ``1``, ``"yes"`` are booleans too; extra keys
    are ignored).  A server that ignores ``response_format`` may wrap the object in prose or a code
    fence: then the first ``{...}`` in the text that validates is used (a leniency the official code
    does not have; it would retry and end with no verdict)."""
    if not text:
        return None
    try:
        return CRAGTurnEvaluationResult.model_validate_json(text).accuracy
    except ValidationError:
        pass
    for m in _JSON_OBJECT.finditer(text):
        try:
            return CRAGTurnEvaluationResult.model_validate_json(m.group(0)).accuracy
        except ValidationError:
            continue
    return None


def parse_crag_mm_release_verdict(text: str | None) -> bool | None:
    """Official crag-mm-release parsing: WRONG is checked first ("Result: WRONG" anywhere, or "WRONG" in
    the last line), then CORRECT the same way; anything else (or no text) is None."""
    if not isinstance(text, str):
        return None
    last = text.split("\n")[-1]
    if "Result: WRONG" in text or "WRONG" in last:
        return False
    if "Result: CORRECT" in text or "CORRECT" in last:
        return True
    return None


parse_judge_output = parse_crag_mm_release_verdict  # the former name


def load_prompts(
    mode: str | ScoringMode = DEFAULT_MODE,
    *,
    system_path: str | Path | None = None,
    user_path: str | Path | None = None,
) -> tuple[str, str]:
    """(system prompt, user template) of the mode's judge, read verbatim (no stripping)."""
    m = get_mode(mode)
    system = (Path(system_path) if system_path else PROMPTS_DIR / m.judge_system_prompt).read_text(encoding="utf-8")
    user = (Path(user_path) if user_path else PROMPTS_DIR / m.judge_user_prompt).read_text(encoding="utf-8")
    return system, user


_PLACEHOLDER = re.compile(r"\{(query|ground_truth|prediction)\}")


def render_user_prompt(template: str, query: str, ground_truth: str, prediction: str) -> str:
    """Fill ``{query}``, ``{ground_truth}``, ``{prediction}`` in one pass, like the official f-strings
    (braces inside the values are kept as they are, never substituted again)."""
    values = {"query": query, "ground_truth": ground_truth, "prediction": prediction}
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], template)


class LLMJudge:
    """LLM-as-a-judge over an OpenAI-compatible server, with the prompt and parsing of ``mode``.

    All HTTP goes through :class:`glasses_rag.models.openai_client.OpenAIClient` (``max_attempts`` tries in all on
    connection errors, timeouts, 429 and 5xx, exponential back-off; other 4xx fail at once).
    ``kddcup2025``: the starter kit's 3-rule system prompt, user text ``Question/Ground truth/
    Prediction``, ``response_format`` = the ``{"accuracy": bool}`` JSON schema, the API's default sampling
    sent explicitly (officially none is sent; see ``payload``); a reply that does not parse is asked again
    (``MAX_API_RETRIES`` = 3 attempts in all, as the official loop retries the parse error); a refusal
    or an empty reply is no verdict.  ``crag-mm-release``: the long "Result: CORRECT/WRONG" prompt,
    temperature 0, max_tokens 1024, WRONG checked first, an unparseable reply is not asked again.
    Any failure is a verdict of ``None`` (counted as a hallucination) with its reason; it never raises.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        *,
        mode: str | ScoringMode = DEFAULT_MODE,
        timeout_s: float = 60.0,
        max_attempts: int = MAX_API_RETRIES,
        retry_wait_s: float = 0.5,
        temperature: float | None = None,
        max_tokens: int | None = None,
        system_prompt_path: str | Path | None = None,
        user_prompt_path: str | Path | None = None,
        client: OpenAIClient | None = None,
    ):
        self.mode = get_mode(mode)
        self.model = model
        self.client = client or OpenAIClient(
            base_url, api_key, timeout_s=timeout_s, max_retries=max(0, max_attempts - 1), retry_wait_s=retry_wait_s
        )
        self.temperature = self.mode.judge_temperature if temperature is None else temperature
        self.max_tokens = self.mode.judge_max_tokens if max_tokens is None else max_tokens
        self.system_prompt, self.user_template = load_prompts(
            self.mode, system_path=system_prompt_path, user_path=user_prompt_path
        )
        self.name = f"llm-judge:{model} ({self.mode.name} prompt)"
        # How the verdict's schema is asked for: json_schema (OpenAI, vLLM, SGLang, llama-server), else
        # json_object with a schema (llama-cpp-python's server answers json_schema with 422), else not at all
        # (the prompt asks for the JSON object anyway); a rejection moves one step down for good.
        self.formats: list[dict[str, Any] | None] = [KDDCUP2025_RESPONSE_FORMAT, KDDCUP2025_JSON_OBJECT, None]

    def messages(self, query: str, ground_truth: str, response: str) -> list[dict[str, str]]:
        return [
            {"role": "system", "content": self.system_prompt},
            {"role": "user", "content": render_user_prompt(self.user_template, query, ground_truth, response)},
        ]

    def payload(self, query: str, ground_truth: str, response: str) -> dict[str, Any]:
        """Every sampling value explicit (JUDGE_SAMPLING): a vLLM-served judge would otherwise take what the
        request leaves out from the model's generation_config.json. A mode that officially sends no temperature
        gets the API default it relied on (1.0), and no max_tokens becomes MAX_EVAL_TOKENS (a cap that only a
        runaway reply reaches; a {"accuracy": bool} verdict is a few tokens)."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": self.messages(query, ground_truth, response),
            **JUDGE_SAMPLING,
        }
        if self.temperature is not None:
            body["temperature"] = self.temperature
        body["max_tokens"] = self.max_tokens if self.max_tokens is not None else MAX_EVAL_TOKENS
        if self.mode.judge_structured and self.formats[0] is not None:
            body["response_format"] = self.formats[0]
        return body

    def _chat(self, body: dict[str, Any]) -> dict:
        """The server's reply; a server that rejects the response_format (400/422 naming it) is asked with the
        next one in `formats`, as the model policy falls back from a JSON schema."""
        while True:
            try:
                return self.client.chat(body)
            except BackendError as exc:
                msg = str(exc).lower()
                if (
                    "response_format" not in body
                    or exc.status not in (400, 422)
                    or not any(w in msg for w in ("response_format", "json_schema", "json_object", "schema"))
                ):
                    raise
                rejected: dict[str, Any] = body["response_format"]
                if self.formats[0] is rejected:  # (a concurrent verdict may have moved on)
                    self.formats.pop(0)
                    log.warning(
                        "LLM judge's server rejected response_format %s; asking with %s from now on: %s",
                        rejected.get("type"),
                        (self.formats[0] or {}).get("type", "none"),
                        exc,
                    )
                body = {k: v for k, v in body.items() if k != "response_format"}
                if self.formats[0] is not None:
                    body["response_format"] = self.formats[0]

    def judge(self, query: str, ground_truth: str, response: str) -> JudgeVerdict:
        body = self.payload(query, ground_truth, response)
        attempts = max(1, self.mode.judge_attempts_on_bad_reply)
        content: str | None = None
        for _ in range(attempts):
            try:
                data = self._chat(body)
                choices = data.get("choices") or []
                choice = choices[0] if choices and isinstance(choices[0], dict) else None
                if choice is None:
                    raise BackendError(f"reply has no choices: {str(data)[:300]}")
            except BackendError as exc:  # the shared client already retried
                reason = f"judge-error: {exc}"
                log.warning("LLM judge failed, counting as a hallucination: %s", reason)
                return JudgeVerdict(correct=None, status="error", reason=reason)
            message = choice.get("message") or {}
            content = message.get("content")
            if isinstance(content, list):  # content parts
                content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
            if self.mode.judge_structured:
                if message.get("refusal") or not content:
                    # the SDK returns parsed=None (no exception, no retry): no verdict
                    why = "refusal" if message.get("refusal") else "empty reply"
                    return JudgeVerdict(
                        correct=None,
                        status="no-verdict",
                        reason=f"judge-no-verdict: {why}",
                        raw=message.get("refusal") or content,
                    )
                if choice.get("finish_reason") == "length":
                    continue  # the SDK raises LengthFinishReasonError: retried
                verdict = parse_kddcup2025_verdict(content)
            else:
                verdict = parse_crag_mm_release_verdict(content)
            if verdict is not None:
                label = (
                    f'{{"accuracy": {str(verdict).lower()}}}'
                    if self.mode.judge_structured
                    else ("Result: CORRECT" if verdict else "Result: WRONG")
                )
                return JudgeVerdict(correct=verdict, status="ok", reason=label, raw=content)
        log.warning(
            "LLM judge reply unparseable after %d attempt(s), counting as a hallucination: %r",
            attempts,
            (content or "")[:200],
        )
        return JudgeVerdict(
            correct=None, status="unparseable", reason=f"judge-unparseable after {attempts} attempt(s)", raw=content
        )
