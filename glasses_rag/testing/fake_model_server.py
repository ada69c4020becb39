"""A scripted OpenAI-compatible HTTP server on 127.0.0.1, for tests, benchmarks and offline demos.

    with FakeOpenAIServer() as srv:
        srv.push(FakeOpenAIServer.tool_call_reply("web_search", {"query": "x"}))
        srv.push(FakeOpenAIServer.text_reply('{"answer": "Paris", "confidence": 0.9}'))
        policy = make_policy(f"openai:{srv.base_url}#fake")

Each /chat/completions request pops the next scripted reply: a dict (sent as 200 JSON, or as SSE chunks when
the request streams), `("status", code, body)`, `("hang", seconds)` (a generation that never ends in time) or
`("generate", reply_or_text, seconds)` (a generation taking `seconds`, streamed piece by piece). With the script
empty it asks `responder(body)` when one is given, else answers an empty text reply. `route(marker, reply)`
answers any request whose body contains `marker` with `reply` instead (for requests that run concurrently, whose
arrival order is not fixed). Every request body is kept in `requests`, its timing in `timeline` (unless
`record=False`, as the server run as its own process is).

Like a real server, it counts live generations (`live`, `max_live`) and notices a client that goes away: a
streamed reply fails to write or the socket reads EOF between pieces, a non-streamed one polls its socket while
it "generates". Such a generation stops and is counted in `aborted`; `wait_idle()` waits until none is live.
`delay_s` makes every reply a generation of that length (a fake model of fixed latency). What it accepts can be
narrowed to imitate servers: `response_formats` (vLLM takes json_schema and json_object, llama-cpp-python's
server json_object only, and answers 422 otherwise), `tools` (a vLLM started without a tool-call parser answers
400), `tools_error` (another answer to tools: llama-server without --jinja answers 500 "tools param requires
--jinja flag"), `stream`, `reject_fields` (OpenAI's API answers 400 "Unrecognized request argument supplied:
top_k"), `owned_by` (what /models says owns the model: "vllm", "llamacpp" for llama-server, "me" for
llama-cpp-python's server). Every request's headers are kept in `headers`.
`vllm=VllmBehaviour(...)` (glasses_rag/testing/vllm_emulation.py) makes it behave as vLLM does: a scripted text reply is
what the model generated and goes through the chosen tool-call parser (streamed: with its hold-back), a
per-request chat_template is refused unless trusted, LoRA modules are routed by the request's `model` (an unknown
name: 404; `/models` lists them with their parent), vLLM's runtime `/v1/load_lora_adapter` and
`/v1/unload_lora_adapter` answer as its own do (`VllmBehaviour(runtime_lora_updating=True)`), and `effective[i]`
holds the sampling values vLLM would run request i with
(its generation_config filling what the request left out). Sockets use TCP_NODELAY.

`python -m glasses_rag.testing.fake_model_server --delay 0.3 --responder path/to/file.py:function` serves in its own
process (for benchmarks: no GIL shared with the client) and prints its base URL.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import select
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from glasses_rag.testing.vllm_emulation import VllmBehaviour


class _FakeModelHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    fake: FakeOpenAIServer
    request_queue_size = 512  # many clients connect at once in benchmarks

    def handle_error(self, request, client_address) -> None:
        if isinstance(sys.exc_info()[1], OSError):  # a client that went away: expected, not worth a traceback
            return
        super().handle_error(request, client_address)


class FakeOpenAIServer:
    def __init__(
        self,
        models: tuple[str, ...] = ("fake-vlm",),
        *,
        delay_s: float = 0.0,
        responder: Callable[[dict], Any] | None = None,
        response_formats: Iterable[str] = ("json_schema", "json_object"),
        tools: bool = True,
        stream: bool = True,
        port: int = 0,
        vllm: VllmBehaviour | None = None,
        reject_fields: Iterable[str] = (),
        tools_error: tuple[int, Any] | None = None,
        owned_by: str | None = None,
        record: bool = True,
    ):
        self.record = record  # keep every request body (tests read them); a long-lived server process does not
        self.script: deque[Any] = deque()
        self.routes: list[tuple[str, Any]] = []
        self.requests: list[dict] = []
        self.timeline: list[dict] = []
        self.models = models
        self.delay_s = delay_s
        self.responder = responder
        self.response_formats = set(response_formats)
        self.accept_tools = tools
        self.accept_stream = stream
        self.vllm = vllm
        self.reject_fields = tuple(reject_fields)
        self.tools_error = tools_error
        self.owned_by = owned_by
        self.headers: list[dict[str, str]] = []
        self.effective: list[dict] = []  # with `vllm`: the sampling values each accepted request ran with
        self.live = 0
        self.max_live = 0
        self.aborted = 0
        self.completed = 0
        self._conns: set[socket.socket] = set()
        self._lock = threading.Condition()
        self.httpd = _FakeModelHTTPServer(("127.0.0.1", port), _Handler)
        self.httpd.fake = self
        self.port = self.httpd.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)

    # ---- scripting -------------------------------------------------------------------------------------------

    def _next(self, body: dict) -> Any:
        with self._lock:
            raw = json.dumps(body) if self.routes else ""
            routed = next((i for i, (marker, _) in enumerate(self.routes) if marker in raw), None)
            if routed is not None:
                return self.routes.pop(routed)[1]
            if self.script:
                return self.script.popleft()
        if self.responder is not None:
            return self.responder(body)
        return FakeOpenAIServer.text_reply("")

    def _reject(self, body: dict) -> tuple[int, Any] | None:
        rf = body.get("response_format")
        if (
            isinstance(rf, dict)
            and rf.get("type") not in ("text", None)
            and rf.get("type") not in self.response_formats
        ):
            return 422, {
                "detail": [
                    {
                        "type": "literal_error",
                        "loc": ["body", "response_format", "type"],
                        "msg": f"Input should be one of {sorted(self.response_formats) or ['text']}",
                    }
                ]
            }
        if body.get("tools") and self.tools_error is not None:
            return self.tools_error
        if body.get("tools") and not self.accept_tools:
            return 400, {
                "object": "error",
                "message": '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set',
                "code": 400,
            }
        if body.get("stream") and not self.accept_stream:
            return 400, {"error": "stream is not supported by this server"}
        unknown = [k for k in self.reject_fields if k in body]
        if unknown:
            return 400, {
                "error": {
                    "message": f"Unrecognized request argument supplied: {unknown[0]}",
                    "type": "invalid_request_error",
                    "param": None,
                    "code": None,
                }
            }
        return self.vllm.reject(body, self.models) if self.vllm is not None else None

    def start(self) -> FakeOpenAIServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and drop open keep-alive connections, as a server that goes down does."""
        self.httpd.shutdown()
        self.httpd.server_close()
        with self._lock:
            conns, self._conns = list(self._conns), set()
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def push(self, *items: Any) -> None:
        with self._lock:
            self.script.extend(items)

    def route(self, marker: str, reply: Any) -> None:
        """Answer the first request whose JSON body contains `marker` with `reply` (used once)."""
        with self._lock:
            self.routes.append((marker, reply))

    def reset(self) -> None:
        with self._lock:
            self.script.clear()
            self.routes.clear()
            self.requests.clear()
            self.timeline.clear()
            self.headers.clear()
            self.effective.clear()
            self.max_live = self.live
            self.aborted = self.completed = 0

    def wait_idle(self, timeout_s: float = 5.0) -> bool:
        """Wait until no generation is live (a closed connection is noticed within ~10 ms); False on timeout."""
        with self._lock:
            return self._lock.wait_for(lambda: self.live == 0, timeout=timeout_s)

    # ---- replies ---------------------------------------------------------------------------------------------

    @staticmethod
    def text_reply(text: str, prompt_tokens: int = 10, completion_tokens: int = 5) -> dict:
        return {
            "id": "cmpl-1",
            "object": "chat.completion",
            "model": "fake-vlm",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens},
        }

    @staticmethod
    def tool_call_reply(name: str, arguments: dict | str, content: str | None = None) -> dict:
        args = arguments if isinstance(arguments, str) else json.dumps(arguments)
        return {
            "id": "cmpl-2",
            "object": "chat.completion",
            "model": "fake-vlm",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "tool_calls",
                    "message": {
                        "role": "assistant",
                        "content": content,
                        "tool_calls": [
                            {"id": "call_1", "type": "function", "function": {"name": name, "arguments": args}}
                        ],
                    },
                }
            ],
            "usage": {"prompt_tokens": 12, "completion_tokens": 7},
        }

    @staticmethod
    def sse_chunks(reply: dict, include_usage: bool = True, piece: int = 8) -> list[dict]:
        """A chat completion as the chunks a server streams: role, text pieces, tool-call deltas, finish, usage."""
        choice = reply["choices"][0]
        msg = choice.get("message") or {}
        base = {"id": reply.get("id", "cmpl"), "object": "chat.completion.chunk", "model": reply.get("model")}

        def chunk(delta: dict, finish: str | None = None) -> dict:
            return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

        out = [chunk({"role": "assistant"})]
        thought = msg.get("reasoning_content") or ""
        out += [chunk({"reasoning_content": thought[i : i + piece]}) for i in range(0, len(thought), piece)]
        text = msg.get("content") or ""
        tokens = ((choice.get("logprobs") or {}).get("content")) or []
        if tokens:  # one chunk per token, with its log-probability, as vLLM streams them
            out += [chunk({"content": t["token"]}) for t in tokens]
            ids = choice.get("token_ids") or []  # vLLM's return_token_ids: each chunk's ids
            for k, (c, t) in enumerate(zip(out[-len(tokens) :], tokens)):
                c["choices"][0]["logprobs"] = {"content": [t]}
                if k < len(ids):
                    c["choices"][0]["token_ids"] = [ids[k]]
        if "prompt_token_ids" in reply:  # vLLM sends the prompt's ids in the first chunk only
            out[0]["prompt_token_ids"] = reply["prompt_token_ids"]
        else:
            out += [chunk({"content": text[i : i + piece]}) for i in range(0, len(text), piece)]
        for k, tc in enumerate(msg.get("tool_calls") or []):
            fn = tc.get("function") or {}
            out.append(
                chunk(
                    {
                        "tool_calls": [
                            {
                                "index": k,
                                "id": tc.get("id"),
                                "type": "function",
                                "function": {"name": fn.get("name"), "arguments": ""},
                            }
                        ]
                    }
                )
            )
            args = fn.get("arguments") or ""
            out += [
                chunk({"tool_calls": [{"index": k, "function": {"arguments": args[i : i + piece]}}]})
                for i in range(0, len(args), piece)
            ]
        out.append(chunk({}, choice.get("finish_reason") or "stop"))
        if include_usage and reply.get("usage"):
            out.append({**base, "choices": [], "usage": reply["usage"]})
        return out


class _Handler(BaseHTTPRequestHandler):
    """One connection to a FakeOpenAIServer (`self.fake`): routes, scripted replies, streams, aborts."""

    server: _FakeModelHTTPServer

    @property
    def fake(self) -> FakeOpenAIServer:
        return self.server.fake

    protocol_version = "HTTP/1.1"  # keep-alive, as real servers

    def log_message(self, *a):  # quiet
        pass

    def setup(self):
        super().setup()
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self.fake._lock:
            self.fake._conns.add(self.request)

    def finish(self):
        with self.fake._lock:
            self.fake._conns.discard(self.request)
        super().finish()

    def _send(self, code: int, body: Any) -> None:
        raw = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        self._mark_end()
        try:
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def client_gone(self) -> bool:
        """The client closed its end (no request is pipelined while it waits, so readable means EOF)."""
        try:
            ready, _, _ = select.select([self.request], [], [], 0)
            return bool(ready) and self.request.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def do_GET(self):
        if self.path.rstrip("/").endswith("/models"):
            vllm = self.fake.vllm
            owner = {"owned_by": self.fake.owned_by} if self.fake.owned_by else {}
            cards = (
                vllm.model_cards(self.fake.models)
                if vllm
                else [{"id": m, "object": "model", **owner} for m in self.fake.models]
            )
            self._send(200, {"object": "list", "data": cards})
        else:
            self._send(404, {"error": "not found"})

    def do_POST(self):
        n = int(self.headers.get("Content-Length", 0))
        try:
            body = json.loads(self.rfile.read(n) or b"{}")
        except ValueError:
            return self._send(400, {"error": "request body is not JSON"})
        entry = {"start": time.monotonic(), "end": None, "aborted": False, "body": body}
        if self.fake.record:
            with self.fake._lock:
                self.fake.requests.append(body)
                self.fake.headers.append(dict(self.headers))
                self.fake.timeline.append(entry)
        self._entry = entry
        try:
            self._answer(body, entry)
        finally:
            self._mark_end()

    def _mark_end(self) -> None:
        """The request's end is when its last bytes are ready, stamped before they are written: a fast client
        may send its next request before this thread runs again, and that one must not seem to overlap."""
        entry = getattr(self, "_entry", None)
        if entry is not None and entry["end"] is None:
            entry["end"] = time.monotonic()
            self._generation_over(True, entry)

    def _answer(self, body: dict, entry: dict) -> None:
        route = self.path.rstrip("/").rsplit("/", 1)[-1]
        if route in ("load_lora_adapter", "unload_lora_adapter") and self.fake.vllm is not None:
            kind = route.split("_", 1)[0]
            with self.fake._lock:
                answer = self.fake.vllm.lora_admin(kind, body, self.headers.get("Content-Type", ""), self.fake.models)
            return self._send(*answer)
        if not self.path.rstrip("/").endswith("/chat/completions"):
            return self._send(404, {"error": "not found"})
        rejected = self.fake._reject(body)
        if rejected is not None:  # before the script: a rejected request uses no scripted reply
            return self._send(*rejected)
        if self.fake.vllm is not None:
            with self.fake._lock:
                self.fake.effective.append(self.fake.vllm.effective_sampling(body))
        item = self.fake._next(body)
        if self.fake.vllm is not None and isinstance(item, dict) and "model" in item:
            item = {**item, "model": self.fake.vllm.served_as(body, self.fake.models)}  # vLLM names the LoRA served
        if isinstance(item, tuple) and item[0] == "status":
            return self._send(item[1], item[2])
        if isinstance(item, tuple) and item[0] == "hang":
            return self._generate(body, entry, FakeOpenAIServer.text_reply("too late"), float(item[1]))
        if isinstance(item, tuple) and item[0] == "generate":
            reply = item[1] if isinstance(item[1], dict) else FakeOpenAIServer.text_reply(str(item[1]))
            return self._generate(body, entry, reply, float(item[2]))
        return self._generate(body, entry, item, self.fake.delay_s)

    def _generate(self, body: dict, entry: dict, reply: dict, seconds: float) -> None:
        with self.fake._lock:
            self.fake.live += 1
            self.fake.max_live = max(self.fake.max_live, self.fake.live)
        self._generating = True
        finished = False
        try:
            if body.get("stream"):
                finished = self._stream(body, reply, seconds)
            else:
                finished = self._wait(seconds)
                if finished:
                    vllm = self.fake.vllm
                    self._send(200, vllm.complete(body, reply) if vllm and vllm.parses(body, reply) else reply)
        finally:
            self._generation_over(finished, entry)
            if not finished:
                self.close_connection = True

    def _generation_over(self, finished: bool, entry: dict) -> None:
        """Count the generation out (once): completed when its last bytes are ready (`_mark_end`, before they
        are written: the client's next request must not find it still live), else aborted."""
        if not getattr(self, "_generating", False):
            return
        self._generating = False
        with self.fake._lock:
            self.fake.live -= 1
            if finished:
                self.fake.completed += 1
            else:
                self.fake.aborted += 1
                entry["aborted"] = True
            self.fake._lock.notify_all()

    def _wait(self, seconds: float) -> bool:
        """Sleep `seconds` as a generation would, waking at once if the client goes away (no polling:
        many concurrent generations must not cost the machine CPU)."""
        end = time.monotonic() + seconds
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return True
            try:
                ready, _, _ = select.select([self.request], [], [], left)
            except OSError:
                return False
            if ready and self.client_gone():
                return False
            if ready:  # unexpected bytes from the client: keep generating, but do not spin on them
                time.sleep(min(0.01, max(0.0, end - time.monotonic())))

    def _chunk(self, data: bytes) -> bool:
        try:
            self.wfile.write(b"%X\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
            return True
        except (BrokenPipeError, ConnectionResetError, OSError):
            return False

    def _stream(self, body: dict, reply: dict, seconds: float) -> bool:
        if "choices" not in reply:  # a malformed scripted reply is sent as it is
            if not self._wait(seconds):
                return False
            self._send(200, reply)
            return True
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        if self.fake.vllm is not None and self.fake.vllm.parses(body, reply):
            chunks = self.fake.vllm.stream(body, reply, include_usage)
        else:
            chunks = FakeOpenAIServer.sse_chunks(reply, include_usage=include_usage)
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
        except (BrokenPipeError, ConnectionResetError):
            return False
        # each chunk is due at a fixed time from the start, not after a pause from the previous one: late
        # wake-ups on a busy machine must not stretch every reply past `seconds`
        start, step = time.monotonic(), seconds / max(1, len(chunks))
        events = [f"data: {json.dumps(c)}\n\n".encode() for c in chunks]  # encoded before the clock runs
        for i, event in enumerate(events):
            left = start + (i + 1) * step - time.monotonic()
            if not (self._wait(left) if left > 0 else not self.client_gone()):
                return False
            if i == len(events) - 1:
                self._mark_end()
            if not self._chunk(event):
                return False
        return self._chunk(b"data: [DONE]\n\n") and self._chunk(b"")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        prog="python -m glasses_rag.testing.fake_model_server", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--delay", type=float, default=0.0, help="seconds every reply takes (a fake model's latency)")
    p.add_argument(
        "--responder",
        default=None,
        help="module:function or path/to/file.py:function answering a request body with a reply",
    )
    args = p.parse_args(argv)
    responder = None
    if args.responder:
        mod, _, fn = args.responder.rpartition(":")
        if mod.endswith(".py"):
            spec = importlib.util.spec_from_file_location(Path(mod).stem, mod)
            if spec is None or spec.loader is None:
                raise SystemExit(f"--responder: cannot load {mod}")
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        else:
            module = importlib.import_module(mod)
        responder = getattr(module, fn)
    # nobody reads a separate process's requests: keeping them would grow without bound over a long benchmark
    srv = FakeOpenAIServer(delay_s=args.delay, responder=responder, port=args.port, record=False).start()
    print(srv.base_url, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        srv.stop()


if __name__ == "__main__":
    main()
