"""Drop-in adapter for the official CRAG-MM (KDD Cup 2025) starter kit: `GlassesRAGAgent`.

The starter kit's evaluator (``local_evaluation.py``) builds ``UserAgent(search_pipeline=...)``, asks
``agent.get_batch_size()`` (clipped to 1..16) and then, batch by batch, calls

    agent.batch_generate_response(queries, images, message_histories) -> list[str]

where a batch holds at most ONE turn of each conversation (turn N+1 of a conversation only comes in a
later batch than turn N), and ``message_histories[i]`` is that conversation so far as
``[{"role": "user", "content": q1}, {"role": "assistant", "content": a1}, ...]`` with the agent's OWN
earlier responses (after the evaluator's 75-token truncation), not the ground truth. The later
facebookresearch/CRAG-MM release calls the same method with extra keyword arguments
(``rag_context_list=``, ``domains=``); they are accepted here.

In a starter-kit checkout, point ``agents/user_config.py`` at this class, e.g.::

    from crag.starter_kit import GlassesRAGAgent as UserAgent

`search_pipeline` may be the official ``UnifiedSearchPipeline`` (or any callable with its calling
convention: ``pipe(image, k=5)`` / ``pipe(text, k=5)`` returning the official result dicts), any of
this repo's SearchBackends (``LocalSearchIndex``, ``CragMMSearch``), or None (no retrieval).

Whether web search is allowed follows the official convention: an official pipeline has web search
iff it was built with a web index (its boolean ``web_search`` attribute); Task 1 runs suppress it.
``task=`` forces it: 1 = image search only, 2/3 = image + web. When not forced, a turn with history
runs as task 3 (multi-turn) and one without as task 2 (or 1 without web).
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
import time
import uuid
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

log = logging.getLogger(__name__)

IDK = "I don't know"
MIN_BATCH_SIZE, MAX_BATCH_SIZE = 1, 16


def _import_base_agent() -> type:
    """The official BaseAgent when this runs inside a starter-kit checkout, else a local stand-in."""
    for mod in ("agents.base_agent", "example_agents.base_agent"):
        try:
            module = __import__(mod, fromlist=["BaseAgent"])
            return getattr(module, "BaseAgent")
        except Exception:  # noqa: BLE001 - absent, or present but failing to import: use the stand-in
            continue

    class BaseAgent:  # same interface as the official class
        def __init__(self, search_pipeline: Any = None, **kwargs: Any):
            self.search_pipeline = search_pipeline

        def get_batch_size(self) -> int:
            raise NotImplementedError

        def batch_generate_response(self, queries, images, message_histories, **kwargs) -> list[str]:
            raise NotImplementedError

    BaseAgent.__module__, BaseAgent.__qualname__ = __name__, "BaseAgent"
    return BaseAgent


BaseAgent = _import_base_agent()
OFFICIAL_BASE_AGENT = BaseAgent.__module__ != __name__


# --------------------------------------------------------------------------------------------
# Search: the official pipeline (or any callable like it) as a SearchBackend
# --------------------------------------------------------------------------------------------


def _plain(v: Any) -> Any:
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if hasattr(v, "item") and callable(v.item):
        try:
            return v.item()
        except Exception:  # noqa: BLE001
            return v
    return v


class OfficialPipelineSearch:
    """crag.schema.SearchBackend over a callable with the official calling convention.

    ``pipeline(image, k=k)`` -> ``[{index, score, url, entities: [{entity_name, entity_attributes}]}]``;
    ``pipeline(text, k=k)``  -> ``[{index, score, page_name, page_snippet, page_url}]``.
    For a real ``UnifiedSearchPipeline`` text goes through its ``_forward``/``postprocess``, because its
    ``preprocess`` treats a query that is an existing file name or starts with "http" as an image.
    Calls are serialised by default (one shared model on one device); ``serialize=False`` lifts that.
    """

    def __init__(self, pipeline: Any, web_enabled: bool | None = None, name: str | None = None, serialize: bool = True):
        if not callable(pipeline):
            raise TypeError(f"search pipeline {type(pipeline).__name__} is not callable")
        self.pipeline = pipeline
        self.has_web = pipeline_has_web(pipeline) if web_enabled is None else bool(web_enabled)
        self.name = name or f"official:{type(pipeline).__name__}" + ("" if self.has_web else "[image only]")
        self._lock = threading.Lock() if serialize else None

    def _call(self, fn):
        if self._lock is None:
            return fn()
        with self._lock:
            return fn()

    def image_search(self, image: Any, k: int = 5) -> list[dict[str, Any]]:
        raw = self._call(lambda: self.pipeline(image, k=k)) or []
        return [{"index": _plain(r.get("index")), "score": float(r.get("score", 0.0)), "url": r.get("url") or "",
                 "entities": [{"entity_name": e.get("entity_name"), "entity_attributes": _plain(e.get("entity_attributes"))}
                              for e in (r.get("entities") or []) if isinstance(e, dict)]}
                for r in raw if isinstance(r, dict)]

    def web_search(self, query: str, k: int = 5) -> list[dict[str, Any]]:
        if not self.has_web:
            return []
        forward, post = getattr(self.pipeline, "_forward", None), getattr(self.pipeline, "postprocess", None)
        text_type = None
        if callable(forward) and callable(post):
            try:
                from cragmm_search.search import InputType

                text_type = InputType.TEXT_QUERY
            except Exception:  # noqa: BLE001
                text_type = None
        if text_type is not None:
            raw = self._call(lambda: post(forward({text_type: query}, k=k)))
        else:
            raw = self._call(lambda: self.pipeline(query, k=k))
        return [{"index": _plain(r.get("index")), "score": float(r.get("score", 0.0)), "page_name": r.get("page_name") or "",
                 "page_snippet": r.get("page_snippet") or "", "page_url": r.get("page_url") or ""}
                for r in (raw or []) if isinstance(r, dict)]


class NullSearch:
    """No retrieval at all (search_pipeline=None): tools find nothing and the agent abstains or answers from the image."""

    name = "none"
    has_web = False

    def image_search(self, image: Any, k: int = 5) -> list[dict[str, Any]]:
        return []

    def web_search(self, query: str, k: int = 5) -> list[dict[str, Any]]:
        return []


def is_search_backend(x: Any) -> bool:
    return callable(getattr(x, "image_search", None)) and callable(getattr(x, "web_search", None))


def pipeline_has_web(x: Any) -> bool:
    """Official rule: web search exists iff the pipeline was built with a web index."""
    flag = getattr(x, "web_search", None)
    if isinstance(flag, bool):  # UnifiedSearchPipeline.web_search is a bool, not a method
        return flag
    for attr in ("has_web", "web_enabled"):
        v = getattr(x, attr, None)
        if isinstance(v, bool):
            return v
    inner = getattr(x, "pipeline", None)  # e.g. CragMMSearch wraps one
    if inner is not None and inner is not x and isinstance(getattr(inner, "web_search", None), bool):
        return inner.web_search
    return True  # our own backends (LocalSearchIndex) always hold a web corpus


def as_search_backend(search_pipeline: Any) -> Any:
    if search_pipeline is None:
        return NullSearch()
    if is_search_backend(search_pipeline):
        return search_pipeline
    return OfficialPipelineSearch(search_pipeline)


# --------------------------------------------------------------------------------------------
# Conversation state
# --------------------------------------------------------------------------------------------


def _norm(text: Any) -> str:
    return re.sub(r"[^0-9a-z]+", "", str(text or "").lower())


def answers_match(ours: str, shown: str, prefix: int = 48) -> bool:
    """Is `shown` (what the harness put in the history) our answer, maybe cut to 75 tokens and re-decoded?"""
    a, b = _norm(ours), _norm(shown)
    if not a or not b:
        return a == b
    n = min(prefix, len(a), len(b))
    return a[:n] == b[:n]


def image_fingerprint(image: Any) -> str:
    if image is None:
        return "noimage"
    try:
        h = hashlib.blake2b(digest_size=12)
        h.update(f"{getattr(image, 'mode', '')}{getattr(image, 'size', '')}".encode())
        h.update(image.tobytes())
        return h.hexdigest()
    except Exception:  # noqa: BLE001 - unreadable image: fall back to object identity
        return f"id{id(image)}"


def conversation_key(image: Any, query: str, history: Sequence[dict]) -> str:
    """Stable across the turns of one conversation: its image's content and its first question."""
    first = next((m.get("content") for m in history if isinstance(m, dict) and m.get("role") == "user"), None)
    first = query if first is None else first
    h = hashlib.blake2b(digest_size=10)
    h.update(image_fingerprint(image).encode())
    h.update(b"\0")
    h.update(" ".join(str(first).split()).lower().encode())
    return h.hexdigest()


@dataclass
class _TurnRecord:
    question: str
    answer: str
    entity: str | None


@dataclass
class _Conversation:
    session_id: str
    turns: dict[int, _TurnRecord] = field(default_factory=dict)


def _content_text(content: Any) -> str:
    """Message content as text (the newer kit may pass [{'type': 'text', 'text': ...}] lists)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type", "text") == "text")
    return "" if content is None else str(content)


def history_pairs(messages: Sequence[dict]) -> list[tuple[str, str]]:
    """(question, answer) pairs from user/assistant messages; system and image-only messages are skipped."""
    pairs: list[tuple[str, str]] = []
    pending: str | None = None
    for m in messages or []:
        if not isinstance(m, dict):
            continue
        role, text = m.get("role"), _content_text(m.get("content")).strip()
        if role == "user":
            if text:
                pending = text if pending is None else f"{pending} {text}"
        elif role == "assistant":
            pairs.append((pending or "", text))
            pending = None
    return pairs


# --------------------------------------------------------------------------------------------
# The agent
# --------------------------------------------------------------------------------------------


class GlassesRAGAgent(BaseAgent):
    """This repo's LangGraph agent behind the starter kit's BaseAgent interface.

    Args:
        search_pipeline: official ``UnifiedSearchPipeline`` / a callable like it / a SearchBackend / None.
        task: 1, 2 or 3 to force the task (1 disables web search); None infers it (see module doc).
        policy: a Policy object, a spec string ('rule', 'openai:<url>#<model>', 'transformers:<dir>',
            'llamacpp:<gguf>', a .json/.toml model config) or None for the rule-based planner.
        budget_s: per-turn time budget (CRAG-MM: 10 s); an item still running at budget + grace_s
            is abandoned and answered "I don't know".
        batch_size: what get_batch_size() returns (clipped to 1..16).
        max_workers: conversations run at once inside a batch (default: the batch size).
        trace_dir: write one JSON TurnTrace per turn under ``trace_dir/<run_id>/``.
        max_steps, abstain_below, allowed_tools: AgentConfig fields.
        detector, clip, reranker, text_embedder: optional local model folders (models.resources.ModelPaths).
    """

    def __init__(self, search_pipeline: Any = None, task: int | None = None, policy: Any = None, budget_s: float = 10.0,
                 *, batch_size: int = 8, max_workers: int | None = None, grace_s: float = 2.0,
                 trace_dir: str | Path | None = None, run_id: str | None = None, max_steps: int = 8,
                 abstain_below: float = 0.35, allowed_tools: list[str] | None = None,
                 detector: str | Path | None = None, clip: str | Path | None = None,
                 reranker: str | Path | None = None, text_embedder: str | Path | None = None,
                 max_conversations: int = 20000, **kwargs: Any):
        try:
            super().__init__(search_pipeline)
        except TypeError:  # the newer kit's BaseAgent(**kwargs)
            super().__init__()
        self.search_pipeline = search_pipeline
        if task is not None and task not in (1, 2, 3):
            raise ValueError(f"task must be 1, 2, 3 or None, not {task!r}")
        from graph.agent import Agent, AgentConfig
        from models.resources import ModelPaths, Resources
        from tools import load_builtin_tools

        self.search = as_search_backend(search_pipeline)
        self.web_enabled = pipeline_has_web(self.search) if task is None else task >= 2
        self.task = task
        self.batch_size = int(min(MAX_BATCH_SIZE, max(MIN_BATCH_SIZE, batch_size)))
        self.max_workers = max(1, max_workers or self.batch_size)
        self.budget_s = float(budget_s)
        self.grace_s = float(grace_s)
        paths = ModelPaths(text_embedder=text_embedder, detector=detector, clip=clip, reranker=reranker)
        self.resources = Resources(self.search, paths)
        self.policy = self._make_policy(policy)
        self.resources.policy = self.policy
        self.run_id = run_id or f"starter-kit-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:4]}"
        self.agent = Agent(self.policy, self.resources,
                           AgentConfig(budget_s=self.budget_s, max_steps=max_steps, abstain_below=abstain_below,
                                       allowed_tools=allowed_tools),
                           registry=load_builtin_tools(), run_id=self.run_id,
                           search_name=getattr(self.search, "name", type(self.search).__name__))
        self.store = None
        if trace_dir is not None:
            from traces.store import TraceStore

            self.store = TraceStore(Path(trace_dir), self.run_id)
        self._convs: OrderedDict[str, _Conversation] = OrderedDict()
        self._max_conversations = max_conversations
        self._lock = threading.Lock()
        self.last_inputs: list[Any] = []  # the TurnInputs of the latest batch (None where building one failed)
        self.last_traces: list[Any] = []  # the TurnTraces of the latest batch (None where the item failed)

    # ---- construction helpers ----------------------------------------------------------------

    def _make_policy(self, policy: Any) -> Any:
        if policy is None or (isinstance(policy, str) and policy == "rule"):
            from graph.rule_planner import RuleBasedPlanner

            return RuleBasedPlanner(self.resources.text_embedder)
        if isinstance(policy, (str, Path)):
            from models.vlm import make_policy

            return make_policy(str(policy))
        return policy

    # ---- the official interface --------------------------------------------------------------

    def get_batch_size(self) -> int:
        return self.batch_size

    def task_for(self, history: Sequence[Any]) -> int:
        if self.task is not None:
            return self.task
        if not self.web_enabled:
            return 1
        return 3 if history else 2

    def _conversation(self, key: str) -> _Conversation:
        with self._lock:
            conv = self._convs.get(key)
            if conv is None:
                conv = self._convs[key] = _Conversation(session_id=f"sk-{key[:16]}")
                while len(self._convs) > self._max_conversations:
                    self._convs.popitem(last=False)
            else:
                self._convs.move_to_end(key)
            return conv

    def build_turn(self, query: str, image: Any, messages: Sequence[dict], session_id: str | None = None,
                   interaction_id: str | None = None, domain: str | None = None):
        """The TurnInput for one item, with history rebuilt from the messages and remembered entities."""
        from graph.agent import TurnInput
        from graph.runner import usable_image
        from tools.base import HistoryTurn

        key = conversation_key(image, query, messages or [])
        conv = self._conversation(session_id or key)
        if session_id:
            conv.session_id = session_id
        history: list[HistoryTurn] = []
        for i, (q, a) in enumerate(history_pairs(messages or [])):
            rec = conv.turns.get(i)
            ours = rec is not None and _norm(rec.question) == _norm(q) and answers_match(rec.answer, a)
            history.append(HistoryTurn(question=q, answer=a, entity=rec.entity if ours else None))
        img, note = usable_image(image)
        idx = len(history)
        return conv, TurnInput(task=self.task_for(history), session_id=conv.session_id,
                               interaction_id=interaction_id or f"{conv.session_id}-t{idx}", turn_index=idx,
                               question=str(query or ""), image=img, image_note=note, history=history,
                               labels={"domain": domain} if domain else {})

    def _one(self, conv: _Conversation, inp: Any) -> Any:
        trace = self.agent.run_turn(inp)
        answer = trace.answer if isinstance(trace.answer, str) and trace.answer.strip() else IDK
        with self._lock:
            conv.turns[inp.turn_index] = _TurnRecord(question=inp.question, answer=answer, entity=trace.entity)
            for j in [j for j in conv.turns if j > inp.turn_index]:  # a restarted conversation: drop stale later turns
                del conv.turns[j]
        if self.store is not None:
            try:
                self.store.write(trace)
            except Exception as e:  # noqa: BLE001 - a trace that cannot be written never costs the answer
                log.warning("could not write trace: %s", e)
        return trace

    def batch_generate_response(self, queries: list[str], images: list[Any], message_histories: list[list[dict]],
                                **kwargs: Any) -> list[str]:
        """One turn per conversation; conversations run concurrently; any failure -> "I don't know" for that item.

        Extra keyword arguments of the newer kit (``rag_context_list``, ``domains``) are accepted;
        ``domains`` labels the traces. ``session_ids`` / ``interaction_ids`` (not sent by the official
        harness) name the conversations explicitly instead of the image + first-question key.
        """
        n = len(queries)
        images = list(images or []) + [None] * max(0, n - len(images or []))
        histories = list(message_histories or []) + [[]] * max(0, n - len(message_histories or []))
        domains = kwargs.get("domains") or [None] * n
        sids = kwargs.get("session_ids") or [None] * n
        iids = kwargs.get("interaction_ids") or [None] * n
        answers = [IDK] * n
        inputs: list[Any] = [None] * n
        traces: list[Any] = [None] * n
        jobs: dict[Any, int] = {}
        pool = ThreadPoolExecutor(max_workers=min(self.max_workers, max(1, n)), thread_name_prefix="glasses-turn")
        try:
            for i in range(n):
                try:
                    conv, inp = self.build_turn(queries[i], images[i], histories[i], session_id=sids[i],
                                                interaction_id=iids[i], domain=domains[i] if i < len(domains) else None)
                    inputs[i] = inp
                    jobs[pool.submit(self._one, conv, inp)] = i
                except Exception as e:  # noqa: BLE001
                    log.warning("item %d could not be prepared: %s: %s", i, type(e).__name__, e)
            # Every item starts at once (max_workers >= batch), so budget + grace bounds the whole batch.
            waves = -(-len(jobs) // max(1, self.max_workers)) if jobs else 0
            done, not_done = wait(jobs, timeout=self.budget_s * max(1, waves) + self.grace_s)
            for fut in done:
                i = jobs[fut]
                try:
                    trace = fut.result()
                    traces[i] = trace
                    ans = trace.answer
                    answers[i] = ans if isinstance(ans, str) and ans.strip() else IDK
                except Exception as e:  # noqa: BLE001
                    log.warning("item %d failed: %s: %s", i, type(e).__name__, e)
            for fut in not_done:
                log.warning("item %d ran past the time budget: answered %r", jobs[fut], IDK)
                fut.cancel()
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
        self.last_inputs, self.last_traces = inputs, traces
        return answers

    # ---- conveniences ------------------------------------------------------------------------

    def generate_response(self, query: str, image: Any, message_history: list[dict] | None = None) -> str:
        return self.batch_generate_response([query], [image], [message_history or []])[0]

    def reset(self) -> None:
        """Forget every conversation (e.g. between evaluation runs)."""
        with self._lock:
            self._convs.clear()


UserAgent = GlassesRAGAgent  # the name agents/user_config.py exports in the starter kit

__all__ = ["GlassesRAGAgent", "UserAgent", "OfficialPipelineSearch", "NullSearch", "as_search_backend",
           "pipeline_has_web", "conversation_key", "history_pairs", "answers_match", "OFFICIAL_BASE_AGENT"]
