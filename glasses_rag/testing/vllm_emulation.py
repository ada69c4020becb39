"""How a vLLM server treats a chat request, emulated for the fake model server
(glasses_rag/testing/fake_model_server.py).

Written from a reading of vLLM 0.10.2's and 0.33.0's `vllm/entrypoints/openai` (protocol, serving_chat /
chat_completion, tool parsers, stream processor) and `ModelConfig.get_diff_sampling_param`; no vLLM code is
used. The behaviours, switchable per test with `VllmBehaviour`:

- Tool-call parsers (`--enable-auto-tool-choice --tool-call-parser hermes | llama3_json | pythonic`): the
  scripted reply's text is what the model generated; non-streamed, a parser that extracts calls returns them
  as `tool_calls` (finish "tool_calls"), and any text it cannot extract comes back whole as `content`.
  Streamed, the parser HOLDS BACK text that starts like a call (hermes: from `<tool_call>`; llama3_json: a
  reply starting with `{` or `<|python_tag|>`; pythonic: starting with `[`) and emits deltas only once a
  function name appears: a call without a name is never sent, so the stream arrives empty with finish "stop"
  (0.10.2's llama3_json says "tool_calls" there, with no call). Names come whole in one delta, arguments in
  pieces; hermes streams only an "arguments" key (a call written with "parameters" loses its arguments), and
  pythonic's first delta carries the name and the first arguments together.
- `tool_choice: "required"`: guided decoding makes the model write `[{"name": ..., "parameters": {...}}]`,
  returned as tool calls whatever the parser. Streamed on 0.10.2 it fails (vLLM issue #24509): the stream
  generator adds each delta to `previous_texts` twice (once in the "required" branch, once more below it), the
  doubled text breaks the parse, and the exception becomes an SSE `error` event after HTTP 200 and the role
  chunk (`create_streaming_error_response`), then `[DONE]`.
- A per-request `chat_template` is refused with 400 unless the server trusts it (0.11 and later).
- Sampling fields a request leaves out are filled from the model's generation_config.json
  (`--generation-config auto`); `effective_sampling` says what the engine would use.
- LoRA routing (`--enable-lora --lora-modules name=path`, from `serving_models.py` and
  `serving_engine._check_model` of 0.10.2): with `lora_modules` (or `check_model`), a request's `model` must be a
  served base name or a LoRA module name (empty: the base), else 404 with vLLM's error body ("The model `x` does
  not exist.", type NotFoundError); the reply's `model` is the name asked for (the LoRA's when one is); `/v1/models`
  lists the base models, then each LoRA module with `root` (its path) and `parent` (the base model).
- Runtime LoRA (vLLM 0.33.0's `vllm/entrypoints/serve/lora/api_router.py`, `.../lora/protocol.py` and
  `vllm/entrypoints/openai/models/serving.py`): with `runtime_lora_updating` (the server's environment has
  VLLM_ALLOW_RUNTIME_LORA_UPDATING=True) `POST /v1/load_lora_adapter` with `{"lora_name", "lora_path",
  "load_inplace", "is_3d_lora_weight"}` adds a LoRA module (200, the text "Success: LoRA adapter 'x' added
  successfully."), refused with 400 InvalidUserInput when a name or the path is missing, when the name is a base
  model's, or when it is loaded already and `load_inplace` is false; a path with no adapter is vLLM's
  LoRAAdapterNotFoundError (404 "Loading lora x failed: No adapter found for p"); a body that is not
  application/json is refused (400). `POST /v1/unload_lora_adapter` with `{"lora_name"}` removes it (404 when it
  is not loaded). Without the setting vLLM registers neither route: FastAPI's 404 `{"detail": "Not Found"}`.
"""

from __future__ import annotations

import ast
import json
import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from glasses_rag.models.vlm.vllm_lora import LoadLoRAAdapterRequest, UnloadLoRAAdapterRequest

TRUST_TEMPLATE_ERROR = (
    "Chat template is passed with request, but --trust-request-chat-template is not set. "
    "Refused request with untrusted chat template."
)
# vLLM 0.10.2's error event for a streamed "required" reply (an illustrative text: the real one is whatever the
# doubled text makes the parse raise)
REQUIRED_STREAM_ERROR = "Expecting ',' delimiter: line 1 column 3 (char 2)"
AUTO_TOOLS_ERROR = '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
# vLLM's own defaults for what a request leaves out (ChatCompletionRequest._DEFAULT_SAMPLING_PARAMS)
NEUTRAL = {
    "repetition_penalty": 1.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "temperature": 1.0,
    "top_p": 1.0,
    "top_k": 0,
    "min_p": 0.0,
}
FILLED_BY_0_10 = ("repetition_penalty", "temperature", "top_p", "top_k", "min_p")  # 0.10: penalties default 0.0


def error_body(message: str, code: int = 400, kind: str = "BadRequestError") -> dict:
    """vLLM's ErrorResponse (0.10+), as a body or as a streamed error event."""
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


ADAPTER_FILES = ("adapter_model.safetensors", "adapter_model.bin", "adapter_model.pt")


@dataclass
class VllmBehaviour:
    tool_parser: Literal["hermes", "llama3_json", "pythonic"] | None = "hermes"
    version: Literal["0.10", "0.11+"] = "0.11+"
    trust_request_chat_template: bool = False
    generation_config: dict[str, Any] = field(default_factory=dict)
    piece: int = 3  # characters per streamed "token"
    lora_modules: dict[str, str] = field(default_factory=dict)  # --lora-modules name=path
    check_model: bool = False  # refuse unknown model names even without LoRA modules
    runtime_lora_updating: bool = False  # VLLM_ALLOW_RUNTIME_LORA_UPDATING=True: the load/unload routes exist

    # ---- models and LoRA routing -----------------------------------------------------------------------------

    def model_cards(self, bases: tuple[str, ...]) -> list[dict]:
        """/v1/models as vLLM lists it: the base model(s), then the LoRA modules with their parent."""

        def card(name: str, root: str, parent: str | None) -> dict:
            return {
                "id": name,
                "object": "model",
                "created": 0,
                "owned_by": "vllm",
                "root": root,
                "parent": parent,
                "max_model_len": 8192 if parent is None else None,
                "permission": [],
            }

        return [card(b, b, None) for b in bases] + [
            card(n, path, bases[0] if bases else None) for n, path in self.lora_modules.items()
        ]

    def served_as(self, body: dict, bases: tuple[str, ...]) -> str | None:
        """The name a request is served under (a base or a LoRA module), or None when vLLM would answer 404."""
        model = body.get("model")
        if not model:
            return bases[0] if bases else None
        if model in bases or model in self.lora_modules or not (self.lora_modules or self.check_model):
            return model
        return None

    def lora_admin(self, route: str, body: Any, content_type: str, bases: tuple[str, ...]) -> tuple[int, Any]:
        """The answer to POST /v1/load_lora_adapter or /v1/unload_lora_adapter (`route`: load or unload)."""
        if not self.runtime_lora_updating:
            return 404, {"detail": "Not Found"}
        if content_type.split(";", 1)[0].strip().lower() != "application/json":
            return 400, error_body("Unsupported Media Type: Only 'application/json' is allowed")
        try:
            if route == "unload":
                return self._unload(UnloadLoRAAdapterRequest.model_validate(body))
            return self._load(LoadLoRAAdapterRequest.model_validate(body), bases)
        except ValidationError as e:
            return 400, error_body(str(e))

    def _load(self, req: LoadLoRAAdapterRequest, bases: tuple[str, ...]) -> tuple[int, Any]:
        if not req.lora_name or not req.lora_path:
            return 400, error_body("Both 'lora_name' and 'lora_path' must be provided.", 400, "InvalidUserInput")
        if req.lora_name in bases:
            msg = f"The lora adapter '{req.lora_name}' conflicts with a served base model."
            return 400, error_body(msg, 400, "InvalidUserInput")
        if not req.load_inplace and req.lora_name in self.lora_modules:
            msg = (
                f"The lora adapter '{req.lora_name}' has already been loaded. If you want to load the adapter in "
                "place, set 'load_inplace' to True."
            )
            return 400, error_body(msg, 400, "InvalidUserInput")
        folder = Path(req.lora_path)
        if not (folder / "adapter_config.json").is_file() or not any((folder / f).is_file() for f in ADAPTER_FILES):
            msg = f"Loading lora {req.lora_name} failed: No adapter found for {req.lora_path}"
            return 404, error_body(msg, 404, "NotFoundError")
        self.lora_modules[req.lora_name] = req.lora_path
        return 200, f"Success: LoRA adapter '{req.lora_name}' added successfully."

    def _unload(self, req: UnloadLoRAAdapterRequest) -> tuple[int, Any]:
        if not req.lora_name:
            msg = "'lora_name' needs to be provided to unload a LoRA adapter."
            return 400, error_body(msg, 400, "InvalidUserInput")
        if req.lora_name not in self.lora_modules:
            msg = f"The lora adapter '{req.lora_name}' cannot be found."
            return 404, error_body(msg, 404, "NotFoundError")
        del self.lora_modules[req.lora_name]
        return 200, f"Success: LoRA adapter '{req.lora_name}' removed successfully."

    def unknown_model(self, body: dict) -> tuple[int, dict]:
        return 404, error_body(f"The model `{body.get('model')}` does not exist.", 404, "NotFoundError")

    # ---- request checks ------------------------------------------------------------------------------------

    def reject(self, body: dict, bases: tuple[str, ...] = ()) -> tuple[int, dict] | None:
        if self.served_as(body, bases) is None:  # vLLM checks the model first
            return self.unknown_model(body)
        kwargs = body.get("chat_template_kwargs") or {}
        if (
            self.version != "0.10"
            and not self.trust_request_chat_template
            and (body.get("chat_template") is not None or kwargs.get("chat_template") is not None)
        ):
            return 400, error_body(TRUST_TEMPLATE_ERROR)
        if body.get("tools") and _tool_choice(body) == "auto" and self.tool_parser is None:
            return 400, error_body(AUTO_TOOLS_ERROR)
        return None

    def effective_sampling(self, body: dict) -> dict[str, Any]:
        """The sampling values the engine would run `body` with."""
        gen = self.generation_config
        filled = FILLED_BY_0_10 if self.version == "0.10" else tuple(NEUTRAL)
        out = {
            k: body[k] if body.get(k) is not None else (gen.get(k, v) if k in filled else v) for k, v in NEUTRAL.items()
        }
        if out["top_k"] == -1:
            out["top_k"] = 0
        if out["temperature"] < 1e-5:  # greedy: vLLM resets these three, not the penalties
            out.update(top_p=1.0, top_k=0, min_p=0.0)
        asked = body.get("max_completion_tokens") or body.get("max_tokens")
        cap = gen.get("max_new_tokens")
        if self.version == "0.10":  # 0.10 takes the smallest of the two
            out["max_tokens"] = min(v for v in (asked, cap, 10**9) if v is not None)
        else:
            out["max_tokens"] = asked if asked is not None else cap
        return out

    # ---- replies ---------------------------------------------------------------------------------------------

    def parses(self, body: dict, reply: dict) -> bool:
        """Whether the reply's text goes through a tool-call parser: tools offered, the model wrote text."""
        msg = (reply.get("choices") or [{}])[0].get("message") or {}
        return (
            bool(body.get("tools"))
            and _tool_choice(body) != "none"
            and not msg.get("tool_calls")
            and isinstance(msg.get("content"), str)
        )

    def complete(self, body: dict, reply: dict) -> dict:
        """The non-streamed reply: what the parser extracts as calls, else the whole text as content."""
        text = reply["choices"][0]["message"]["content"]
        calls, content = self._extract(body, text)
        msg: dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            msg["tool_calls"] = [
                {
                    "id": _call_id(),
                    "type": "function",
                    "function": {"name": n, "arguments": json.dumps(a, ensure_ascii=False)},
                }
                for n, a in calls
            ]
        finish = "tool_calls" if calls else reply["choices"][0].get("finish_reason") or "stop"
        return {**reply, "choices": [{"index": 0, "message": msg, "finish_reason": finish}]}

    def _extract(self, body: dict, text: str) -> tuple[list[tuple[str, Any]], str | None]:
        if _tool_choice(body) == "required":
            return _required_calls(text), ""
        try:
            if self.tool_parser == "hermes" and "<tool_call>" in text:
                blocks = re.findall(r"<tool_call>(.*?)</tool_call>|<tool_call>(.*)", text, re.S)
                objs = [json.loads(a or b) for a, b in blocks]
                calls = [(o["name"], o["arguments"]) for o in objs]
                return calls, text[: text.find("<tool_call>")] or None
            if self.tool_parser == "llama3_json" and "{" in text:
                calls = _json_calls(text, strict=True)
                return (calls, None) if calls else ([], text)
            if self.tool_parser == "pythonic":
                calls = _pythonic_calls(text)
                return (calls, None) if calls else ([], text)
        except (ValueError, KeyError, TypeError, SyntaxError):
            pass
        return [], text

    def stream(self, body: dict, reply: dict, include_usage: bool) -> list[dict]:
        """The SSE chunks vLLM would send for the reply's text, parsed by the tool parser as it streams."""
        text = reply["choices"][0]["message"]["content"]
        content, calls, held = self._stream_parts(body, text)
        base = {"id": reply.get("id", "chatcmpl-x"), "object": "chat.completion.chunk", "model": reply.get("model")}

        def chunk(delta: dict, finish: str | None = None) -> dict:
            return {**base, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}

        out: list[dict] = [chunk({"role": "assistant", "content": ""})]
        if self.version == "0.10" and _tool_choice(body) == "required":
            return [*out, error_body(REQUIRED_STREAM_ERROR)]
        out += [chunk({"content": content[i : i + self.piece]}) for i in range(0, len(content), self.piece)]
        for k, (name, args) in enumerate(calls):
            first: dict[str, Any] = {"index": k, "id": _call_id(), "type": "function", "function": {"name": name}}
            if self.tool_parser == "pythonic" and _tool_choice(body) != "required":
                first["function"]["arguments"], args = args[: self.piece], args[self.piece :]
            out.append(chunk({"tool_calls": [first]}))
            out += [
                chunk({"tool_calls": [{"index": k, "function": {"arguments": args[i : i + self.piece]}}]})
                for i in range(0, len(args), self.piece)
            ]
        engine_finish = reply["choices"][0].get("finish_reason") or "stop"
        if calls and engine_finish == "stop":
            finish = "tool_calls"
        elif held and self.version == "0.10" and self.tool_parser == "llama3_json":
            finish = "tool_calls"  # 0.10.2 looks at the parser's parsed objects, named or not
        else:
            finish = engine_finish
        out.append(chunk({}, finish))
        if include_usage and reply.get("usage"):
            out.append({**base, "choices": [], "usage": reply["usage"]})
        return out

    def _stream_parts(self, body: dict, text: str) -> tuple[str, list[tuple[str, str]], bool]:
        """(content streamed, calls streamed as (name, arguments text), whether text was held back)."""
        if _tool_choice(body) == "required":
            return "", [(n, json.dumps(a)) for n, a in _required_calls(text)], False
        if self.tool_parser == "hermes" and "<tool_call>" in text:
            head, _, rest = text.partition("<tool_call>")
            return head, _hermes_streamed("<tool_call>" + rest), True
        if self.tool_parser == "llama3_json" and text.startswith(("{", "<|python_tag|>")):
            calls = [(n, json.dumps(a, ensure_ascii=False)) for n, a in _json_calls(text, strict=False)]
            return "", calls, True
        if self.tool_parser == "pythonic" and text.startswith("["):
            try:
                calls = [(n, json.dumps(a, ensure_ascii=False)) for n, a in _pythonic_calls(text)]
            except (ValueError, SyntaxError, TypeError):
                calls = []
            return "", calls, True
        return text, [], False


def _tool_choice(body: dict) -> Any:
    return body.get("tool_choice", "auto" if body.get("tools") else "none")


def _call_id() -> str:
    return f"chatcmpl-tool-{uuid.uuid4().hex[:16]}"


def _required_calls(text: str) -> list[tuple[str, Any]]:
    return [(c["name"], c.get("parameters") or {}) for c in json.loads(text)]


def _json_calls(text: str, strict: bool) -> list[tuple[str, Any]]:
    """llama3_json: JSON objects (after an optional <|python_tag|>, separated by ';'). `strict` (non-streamed):
    every object must name a function and carry arguments/parameters, else none count; streamed: the named
    ones are sent, and the first unnamed one stops the stream's calls."""
    body = text.replace("<|python_tag|>", "", 1)
    dec = json.JSONDecoder()
    calls: list[tuple[str, Any]] = []
    i = body.find("{")
    while i != -1:
        try:
            obj, end = dec.raw_decode(body, i)
        except ValueError:
            if strict:
                raise
            break
        if not isinstance(obj, dict) or "name" not in obj:
            if strict:
                raise KeyError("name")
            break
        calls.append((obj["name"], obj["arguments"] if "arguments" in obj else obj["parameters"]))
        i = body.find("{", end)
    return calls


def _hermes_streamed(text: str) -> list[tuple[str, str]]:
    """hermes, streamed (0.11+): each block's name found by pattern, then the raw text after '"arguments":'
    (less the block's closing brace); a block without a name stops the calls."""
    calls = []
    for block in re.findall(r"<tool_call>(.*?)(?:</tool_call>|$)", text, re.S):
        name = re.search(r'"name"\s*:\s*"([^"]+)"', block)
        if not name:
            break
        args = re.search(r'"arguments"\s*:\s*', block)
        raw = block[args.end() :].rstrip() if args else ""
        calls.append((name.group(1), raw[:-1].rstrip() if raw.endswith("}") else raw))
    return calls


def _pythonic_calls(text: str) -> list[tuple[str, Any]]:
    if not text.startswith("["):  # vLLM matches its pattern at the very start, then parses the text as it is
        raise ValueError("not a pythonic tool call list")
    tree = ast.parse(text, mode="eval").body
    if not isinstance(tree, ast.List) or not all(
        isinstance(e, ast.Call) and isinstance(e.func, ast.Name) for e in tree.elts
    ):
        raise ValueError("not a list of calls")
    return [
        (e.func.id, {k.arg: ast.literal_eval(k.value) for k in e.keywords})  # type: ignore[attr-defined]
        for e in tree.elts
    ]
