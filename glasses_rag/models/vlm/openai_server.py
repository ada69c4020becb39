"""A ChatBackend over any OpenAI-compatible /chat/completions server (vLLM, llama.cpp server, SGLang, ...).

What vLLM does with each request field, and so what this backend sends, is written up in docs/vllm.md.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from glasses_rag.models.openai_client import BackendError, OpenAIClient, RequestCancelled, StreamedError, reasoning_of
from glasses_rag.models.vlm.base import (
    ChatReply,
    ChatToolCall,
    DecisionMode,
    ReplyCancelled,
    SampledTokens,
    TokenLogprob,
    Usage,
    load_chat_template,
    parse_arguments,
    system_into_user,
    text_only_messages,
)
from glasses_rag.models.vlm.tool_parsers import tool_calls_from_text

log = logging.getLogger(__name__)

# Words in a 400/422 that say the server does not take a request field (as opposed to a bad prompt).
_REJECTS = {
    "structured": ("response_format", "json_schema", "json_object", "guided", "grammar", "structured"),
    "native_tools": ("tool",),
    "stream": ("stream",),
    # vLLM >= 0.11 without --trust-request-chat-template: "Chat template is passed with request, but
    # --trust-request-chat-template is not set. Refused request with untrusted chat template."
    "chat_template": ("trust-request-chat-template", "untrusted chat template"),
}


def token_logprobs(logprobs: Any) -> list[TokenLogprob] | None:
    """OpenAI's `choices[0].logprobs.content` (token, logprob per written token) as TokenLogprobs; None when the
    server sent none or anything malformed (a partial list would misplace the answer's tokens)."""
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    if not isinstance(content, list) or not content:
        return None
    out = []
    for c in content:
        token, lp = (c.get("token"), c.get("logprob")) if isinstance(c, dict) else (None, None)
        if not isinstance(token, str) or not isinstance(lp, (int, float)) or isinstance(lp, bool) or lp != lp:
            return None
        out.append(TokenLogprob(token=token, logprob=min(0.0, max(float(lp), -1e4))))  # vLLM: -9999.0 for -inf
    return out


def token_record(data: dict, choice: dict) -> SampledTokens | None:
    """The reply's token record from a server that returns token ids (vLLM's `return_token_ids`: the response's
    `prompt_token_ids`, the choice's `token_ids`) with one log-probability per written id (`logprobs`, vLLM's raw
    ones by default); None when any of them is missing or malformed."""
    prompt, ids = data.get("prompt_token_ids"), choice.get("token_ids")
    lps = token_logprobs(choice.get("logprobs"))
    if not (isinstance(prompt, list) and isinstance(ids, list) and _ids(prompt) and _ids(ids)):
        return None
    if lps is None or len(lps) != len(ids):
        return None
    return SampledTokens(prompt_ids=prompt, completion_ids=ids, logprobs=[t.logprob for t in lps], logprob_source="raw")


def _ids(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(type(v) is int and v >= 0 for v in value)


def _rejected(e: BackendError, feature: str) -> bool:
    msg = str(e).lower()
    # llama-server without --jinja answers tools with 500 "tools param requires --jinja flag"
    statuses = (400, 422, 500) if feature == "native_tools" else (400, 422)
    return e.status in statuses and any(w in msg for w in _REJECTS[feature])


class OpenAICompatibleBackend:
    """POST {base_url}/chat/completions, streamed, with the strongest constraint the server takes.

    A decision is constrained by `response_format` (the JSON schema of the allowed tools: vLLM's guided
    decoding, llama-cpp-python's grammar) when the policy offers a schema; a server that rejects it (400/422)
    is asked with native `tools` (`tool_choice`, "auto" by default), and one that rejects those (vLLM started
    without `--enable-auto-tool-choice --tool-call-parser ...`) with neither: the prompt asks for JSON either
    way. What a server rejected is remembered, so later requests go straight to what works; `ChatReply.mode`
    says which was used ('json_object' when the schema rode in a json_object response_format that the server
    does not enforce). The same goes for streaming, and for a per-request `chat_template` that the server
    refuses. A streamed reply to a request with tools that vLLM's parser held back (or an SSE error event in
    its place, vLLM 0.10.2 with `tool_choice: "required"`) is asked again unstreamed at once, each request for
    itself, and requests with tools are not streamed afterwards. Every request carries explicit sampling values
    (`sampling`), so a server's generation_config.json
    fills none of them. Tool calls that a server left in the text are parsed (glasses_rag/models/vlm/tool_parsers.py).
    Retries (tenacity) on connection errors, timeouts, 5xx and 429 are the client's. Cancelling the caller's
    scope closes the connection (see glasses_rag/models/openai_client.py). `model=None` asks the server's /models for
    the first model it serves.
    """

    def __init__(
        self,
        base_url: str | Sequence[str],
        model: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 120.0,
        max_retries: int = 3,
        retry_wait_s: float = 0.5,
        native_tools: bool = True,
        response_format: str = "json_schema",
        stream: bool = True,
        pool_size: int = 16,
        text_only: bool = False,
        chat_template: str | None = None,
        system_role: bool = True,
        extra_body: dict[str, Any] | None = None,
        sampling: dict[str, Any] | None = None,
        tool_choice: str = "auto",
        json_object_enforced: bool = False,
        max_outstanding: int = 64,
        adapter: str | None = None,
    ):
        if response_format not in ("json_schema", "json_object"):
            raise ValueError(f"response_format must be json_schema or json_object, not {response_format!r}")
        if tool_choice not in ("auto", "required"):
            raise ValueError(f"tool_choice must be auto or required, not {tool_choice!r}")
        self.client = OpenAIClient(
            base_url,
            api_key,
            timeout_s=timeout_s,
            max_retries=max_retries,
            retry_wait_s=retry_wait_s,
            pool_size=pool_size,
            max_outstanding=max_outstanding,
        )
        self.base_url = self.client.base_url
        self.timeout_s = timeout_s
        self.supports_native_tools = native_tools
        self.supports_structured = True
        self.supports_images = not text_only
        self.text_only = text_only
        self.system_role = system_role
        self.stream = stream
        self.stream_tools = True  # off once a streamed reply to a request with tools lost the model's text
        self.response_format = response_format
        self.json_object_enforced = json_object_enforced
        self.tool_choice = tool_choice
        self.sampling = dict(sampling or {})
        self.extra_body = dict(extra_body or {})
        if chat_template:
            self.extra_body["chat_template"] = load_chat_template(chat_template)  # vLLM's per-request field
        self._warned: set[str] = set()
        self.model = model or self._first_model()
        self.adapter = adapter
        self.served = adapter or self.model  # what each request asks for: vLLM routes a LoRA module by its name
        self.name = f"openai:{self.model}" + (f"+{adapter}" if adapter else "")
        if adapter:
            self._check_adapter(adapter)

    def close(self) -> None:
        self.client.close()

    def _first_model(self) -> str:
        ids = self.client.models()
        if not ids:
            raise BackendError(f"{self.base_url}/models lists no model; give one as openai:<base_url>#<model>")
        return ids[0]

    def _check_adapter(self, adapter: str) -> None:
        """Fail at once, with the server command, when the server does not serve the LoRA module `adapter` (vLLM
        answers 404 to every request that names it); warn when it is the adapter of another base model."""
        try:
            cards = self.client.request("GET", "/models").get("data", [])
        except BackendError as e:  # a server not up yet: its first request says so
            log.warning("could not list %s/models to check the adapter %r: %s", self.base_url, adapter, e)
            return
        found = next((c for c in cards if isinstance(c, dict) and c.get("id") == adapter), None)
        if found is None:
            served = ", ".join(str(c.get("id")) for c in cards if isinstance(c, dict)) or "nothing"
            raise BackendError(
                f"{self.base_url} does not serve the adapter {adapter!r} (it serves: {served}); start "
                f"vLLM with --enable-lora --lora-modules {adapter}=<adapter folder> (docs/vllm.md)",
                status=404,
            )
        parent = found.get("parent")
        if parent and self.model != adapter and parent != self.model:
            log.warning("the adapter %r is served on top of %r, not %r", adapter, parent, self.model)

    def _warn_once(self, what: str, message: str, *args: Any) -> None:
        if what not in self._warned:
            self._warned.add(what)
            log.warning(message, *args)

    def _format(self, schema: dict) -> tuple[dict, DecisionMode]:
        if self.response_format == "json_object":
            if self.json_object_enforced:  # llama-cpp-python's server builds a grammar from the schema
                return {"type": "json_object", "schema": schema["schema"]}, "structured"
            self._warn_once(
                "json_object",
                "%s: response_format json_object carries the JSON schema in 'schema', "
                "which vLLM and SGLang ignore (they only make the reply some JSON object); the trace "
                "records such calls as mode 'json_object'. llama-cpp-python's server does enforce it: "
                "set json_object_enforced: true in the model config for such a server, or use "
                "response_format json_schema with vLLM.",
                self.base_url,
            )
            return {"type": "json_object", "schema": schema["schema"]}, "json_object"
        name = schema.get("name", "reply")
        return {"type": "json_schema", "json_schema": {"name": name, "schema": schema["schema"]}}, "structured"

    def _payload(
        self,
        messages: list[dict],
        tools: list[dict] | None,
        max_tokens: int,
        temperature: float,
        response_schema: dict | None,
    ) -> tuple[dict[str, Any], DecisionMode | None]:
        payload: dict[str, Any] = {
            "model": self.served,
            "messages": messages,
            **self.sampling,
            "max_tokens": max_tokens,
            "temperature": temperature,
            **self.extra_body,
        }
        mode: DecisionMode | None = None
        if response_schema and self.supports_structured:
            payload["response_format"], mode = self._format(response_schema)
        elif tools and self.supports_native_tools:
            payload["tools"] = tools
            payload["tool_choice"] = self.tool_choice
            mode = "native_tools"
        return payload, mode

    # ---- ChatBackend ------------------------------------------------------------------------

    def complete(
        self,
        messages: list[dict],
        tools: list[dict] | None = None,
        max_tokens: int = 512,
        temperature: float = 0.0,
        response_schema: dict | None = None,
    ) -> ChatReply:
        if not self.system_role:
            messages = system_into_user(messages)
        if self.text_only:
            messages = text_only_messages(messages)
        t0 = time.perf_counter()
        unstreamed = False  # this request is asked again without streaming
        while True:
            payload, mode = self._payload(messages, tools, max_tokens, temperature, response_schema)
            stream = self.stream and not unstreamed and (mode != "native_tools" or self.stream_tools)
            meta: dict[str, Any] = {}
            data = self._ask(payload, stream, mode, meta, t0)
            if data is None:  # a fallback was learnt or the stream failed: ask again
                unstreamed = unstreamed or meta.get("stream_failed", False)
                continue
            reply = parse_reply(data, (time.perf_counter() - t0) * 1000.0)
            reply.mode, reply.replica = mode, meta.get("replica")
            if mode == "native_tools":
                reply = with_text_tool_calls(reply)
                problem = (_held_back(reply) or _arguments_lost(reply, tools or [])) if stream else None
                if problem is not None:  # this very request is asked again unstreamed: no decision is lost
                    self._stop_streaming_tools(problem, reply.replica)
                    unstreamed = True
                    continue
            return reply

    def _ask(
        self, payload: dict[str, Any], stream: bool, mode: DecisionMode | None, meta: dict[str, Any], t0: float
    ) -> dict | None:
        """The server's reply to one request; None when it should be asked again (see `complete`)."""
        try:
            return self.client.chat(payload, stream=stream, meta=meta)
        except RequestCancelled as e:
            partial = parse_reply(e.partial, (time.perf_counter() - t0) * 1000.0) if e.partial else None
            if partial is not None:
                partial.mode, partial.finish_reason, partial.replica = mode, "cancelled", meta.get("replica")
            raise ReplyCancelled(str(e), partial) from None
        except StreamedError as e:
            if not stream:
                raise
            if mode == "native_tools":  # vLLM 0.10.2 with tool_choice "required" (vLLM issue #24509)
                self._stop_streaming_tools(
                    f"The server streamed an error instead of the reply: {e}.", meta.get("replica")
                )
            meta["stream_failed"] = True
            return None
        except BackendError as e:
            if not self._fall_back(e, payload, mode):
                raise
            return None

    def _stop_streaming_tools(self, problem: str, replica: str | None) -> None:
        self.stream_tools = False
        self._warn_once(
            "stream_tools",
            "%s: %s Requests with tools are no longer streamed here (unstreamed, the "
            "server returns the reply whole); this one is asked again.",
            replica or self.base_url,
            problem,
        )

    def _fall_back(self, e: BackendError, payload: dict[str, Any], mode: DecisionMode | None) -> bool:
        """Whether the rejection `e` names a request feature this server lacks; if so it is left out from now on
        (and the request is sent again)."""
        if "chat_template" in payload and _rejected(e, "chat_template"):
            self.extra_body.pop("chat_template", None)  # (a concurrent request may have dropped it already)
            self._warn_once(
                "chat_template",
                "%s refused the per-request chat_template (vLLM 0.11+ takes one only "
                "when started with --trust-request-chat-template). Start vLLM with that flag, or drop "
                "chat_template from the model config (give it to vLLM as --chat-template instead); "
                "continuing without it, so the server's own template renders the prompts: %s",
                self.base_url,
                e,
            )
        elif mode in ("structured", "json_object") and _rejected(e, "structured"):
            log.warning(
                "%s rejected response_format %s; trying native tools / JSON in text: %s",
                self.base_url,
                self.response_format,
                e,
            )
            self.supports_structured = False
        elif mode == "native_tools" and self.stream_tools and "cannot use tools with stream" in str(e).lower():
            log.warning("%s does not stream replies with tools; asking for them whole: %s", self.base_url, e)
            self.stream_tools = False
        elif mode == "native_tools" and _rejected(e, "native_tools"):
            log.warning("%s rejected native tools; falling back to JSON in text: %s", self.base_url, e)
            self.supports_native_tools = False
        elif self.stream and _rejected(e, "stream"):
            log.warning("%s rejected streaming; asking without it: %s", self.base_url, e)
            self.stream = False
        else:
            return False
        return True


def parse_reply(data: dict, latency_ms: float = 0.0) -> ChatReply:
    """The reply's first choice as a ChatReply; fields of the wrong type (a hostile server) count as absent."""
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise BackendError(f"reply has no choices: {str(data)[:300]}")
    msg = _dict(choices[0].get("message"))
    content = msg.get("content")
    if isinstance(content, list):  # some servers return content parts
        content = "".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    calls = []
    raw_calls = msg.get("tool_calls")
    for tc in raw_calls if isinstance(raw_calls, list) else []:
        fn = _dict(_dict(tc).get("function"))
        ident = _dict(tc).get("id")
        if isinstance(fn.get("name"), str) and fn["name"]:
            calls.append(
                ChatToolCall(
                    name=fn["name"],
                    arguments=parse_arguments(fn.get("arguments")),
                    id=ident if isinstance(ident, str) else None,
                )
            )
    u = _dict(data.get("usage"))
    finish, model = choices[0].get("finish_reason"), data.get("model")
    logprobs = token_logprobs(choices[0].get("logprobs"))
    usage = Usage(
        input_tokens=_count(u.get("prompt_tokens")),
        output_tokens=_count(u.get("completion_tokens")),
        cached_tokens=_cached(u),
    )
    return ChatReply(
        text=content if isinstance(content, str) else "",
        tool_calls=calls,
        reasoning=reasoning_of(msg),
        usage=usage,
        latency_ms=latency_ms,
        finish_reason=finish if isinstance(finish, str) else None,
        model=model if isinstance(model, str) else None,
        logprobs=logprobs,
        logprobs_from="raw" if logprobs else None,  # vLLM's default --logprobs-mode raw_logprobs
        sampled=token_record(data, choices[0]),
    )


def _dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def with_text_tool_calls(reply: ChatReply) -> ChatReply:
    """`reply` with the tool calls written in its text (hermes, llama3_json, pythonic) as `tool_calls`, when
    the server returned none (its parser failed, or it has none)."""
    if reply.tool_calls or not reply.text:
        return reply
    calls, rest = tool_calls_from_text(reply.text)
    return reply.model_copy(update={"tool_calls": calls, "text": rest}) if calls else reply


def _held_back(reply: ChatReply) -> str | None:
    if reply.tool_calls or reply.text.strip() or reply.reasoning.strip():
        return None  # (a reasoning model's tokens went to its reasoning: nothing was held back)
    tokens = reply.usage.output_tokens
    if tokens is not None and tokens <= 1:
        return None  # nothing was generated: an empty reply, not a swallowed one
    generated = "?" if tokens is None else str(tokens)
    return (
        f"Streamed reply to a request with tools arrived empty (finish {reply.finish_reason!r}, {generated} "
        "tokens generated): vLLM's tool-call parser most likely held it back. It withholds streamed text that "
        "starts like a call ({, <tool_call>, [) until a function name appears, and never sends text that names "
        'none, e.g. a bare {"action": ...} object.'
    )


def _arguments_lost(reply: ChatReply, tools: list[dict]) -> str | None:
    for call in reply.tool_calls:
        required = _required_arguments(tools, call.name)
        if not call.arguments and required:
            return (
                f"The streamed call {call.name}() arrived without its required arguments "
                f"({', '.join(required)}): vLLM's hermes parser streams only an 'arguments' key, so a call "
                "written with 'parameters' loses them."
            )
    return None


def _required_arguments(tools: list[dict], name: str) -> list[str]:
    for t in tools:
        fn = t.get("function") if isinstance(t, dict) else None
        if isinstance(fn, dict) and fn.get("name") == name:
            required = (fn.get("parameters") or {}).get("required") or []
            return [str(r) for r in required] if isinstance(required, list) else []
    return []


def _cached(usage: dict) -> int | None:
    """OpenAI's usage.prompt_tokens_details.cached_tokens (vLLM sends it with --enable-prompt-tokens-details)."""
    details = usage.get("prompt_tokens_details")
    return _count(details.get("cached_tokens")) if isinstance(details, dict) else None


def _count(v: Any) -> int | None:
    """A token count from a server's usage object; None when it sent none (or junk)."""
    try:
        return int(v) if v is not None else None
    except (TypeError, ValueError):
        return None
