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

    from glasses_rag.frontends.starter_kit import GlassesRAGAgent as UserAgent

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
import os
import re
import sys
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from glasses_rag.retrieval.search import NullSearch, OfficialPipelineSearch, as_search_backend, pipeline_has_web
from glasses_rag.text.nlp import IDK

log = logging.getLogger(__name__)

MIN_BATCH_SIZE, MAX_BATCH_SIZE = 1, 16


def _import_base_agent() -> type:
    """The official BaseAgent when this runs inside a starter-kit checkout, else a local stand-in."""
    for mod in ("agents.base_agent", "example_agents.base_agent"):
        try:
            module = __import__(mod, fromlist=["BaseAgent"])
            return module.BaseAgent
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
        return " ".join(
            str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type", "text") == "text"
        )
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


def harness_task() -> int | None:
    """The task the official harness is running, when it can be told: `GLASSES_TASK`, else the harness's own
    `--dataset-type multi-turn` option (local_evaluation.py) -> 3. None: inferred per turn."""
    env = os.environ.get("GLASSES_TASK")
    if env:
        return int(env)
    argv = sys.argv[1:]
    for i, a in enumerate(argv):
        if a.startswith("--dataset-type="):
            value = a.split("=", 1)[1]
        elif a == "--dataset-type" and i + 1 < len(argv):
            value = argv[i + 1]
        else:
            continue
        if value == "multi-turn":
            return 3
    return None


def agent_config(
    config: Any = None,
    *,
    policy: Any = None,
    budget_s: float | None = None,
    max_steps: int | None = None,
    abstain_below: float | None = None,
    allowed_tools: list[str] | None = None,
    **paths: Any,
) -> Any:
    """The adapter's keyword arguments as an AgentConfig (a given config, a JSON file of one, a CLI run's run.json, or
    the defaults the CLI uses), with the keywords that were given applied on top."""
    from graph.config import AgentConfig

    if isinstance(config, (str, Path)):
        import json

        raw = json.loads(Path(config).read_text(encoding="utf-8"))
        if isinstance(raw, dict) and "run_fingerprint" in raw:  # a CLI run's run.json: its agent configuration
            raw = raw.get("config")
        cfg = AgentConfig.model_validate(raw)
    else:
        cfg = config if isinstance(config, AgentConfig) else AgentConfig()
    data = cfg.model_dump()
    if isinstance(policy, (str, Path)):
        data["policy"] = str(policy)
    if budget_s is not None:
        data["budget"]["budget_s"] = float(budget_s)
    if max_steps is not None:
        data["budget"]["max_steps"] = max_steps
    if abstain_below is not None:
        data["abstain_below"] = abstain_below
    if allowed_tools is not None:
        data["tools"]["allowed"] = allowed_tools
    for k, v in paths.items():
        if v is not None:
            data["models"][k] = v
    return AgentConfig.model_validate(data)


def trace_store(trace_dir: str | Path | None, run_id: str) -> Any:
    """Where the adapter writes its turns' traces (a TraceStore), or None when not asked to."""
    if trace_dir is None:
        return None
    from traces.store import TraceStore

    return TraceStore(Path(trace_dir), run_id)


class GlassesRAGAgent(BaseAgent):  # type: ignore[misc,valid-type]  # the kit's class when installed
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
        config: an AgentConfig, a JSON file of one, or a CLI run's run.json (the exact agent of that run).
        max_steps, abstain_below, allowed_tools: AgentConfig fields, applied on top of `config`.
        detector, clip, reranker, text_embedder: optional local model folders (glasses_rag.models.resources.ModelPaths).
    """

    def __init__(
        self,
        search_pipeline: Any = None,
        task: int | None = None,
        policy: Any = None,
        budget_s: float = 10.0,
        *,
        config: Any = None,
        batch_size: int = 8,
        max_workers: int | None = None,
        grace_s: float = 2.0,
        trace_dir: str | Path | None = None,
        run_id: str | None = None,
        max_steps: int | None = None,
        abstain_below: float | None = None,
        allowed_tools: list[str] | None = None,
        detector: str | Path | None = None,
        clip: str | Path | None = None,
        reranker: str | Path | None = None,
        text_embedder: str | Path | None = None,
        max_conversations: int = 20000,
        **kwargs: Any,
    ):
        try:
            super().__init__(search_pipeline)
        except TypeError:  # the newer kit's BaseAgent(**kwargs)
            super().__init__()
        self.search_pipeline = search_pipeline
        task = task if task is not None else harness_task()
        if task is not None and task not in (1, 2, 3):
            raise ValueError(f"task must be 1, 2, 3 or None, not {task!r}")
        self.task = task
        self.batch_size = int(min(MAX_BATCH_SIZE, max(MIN_BATCH_SIZE, batch_size)))
        self.max_workers = max(1, max_workers or self.batch_size)
        self.grace_s = float(grace_s)
        self.config = agent_config(
            config,
            policy=policy,
            budget_s=budget_s,
            max_steps=max_steps,
            abstain_below=abstain_below,
            allowed_tools=allowed_tools,
            detector=detector,
            clip=clip,
            reranker=reranker,
            text_embedder=text_embedder,
        )
        self.budget_s = self.config.budget.budget_s
        self.run_id = run_id or f"starter-kit-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:4]}"
        self.agent = self._build(search_pipeline, policy, task)
        self.search = self.agent.resources.search
        self.web_enabled = pipeline_has_web(self.search) if task is None else task >= 2
        self.policy = self.agent.policy
        self.store = trace_store(trace_dir, self.run_id)
        self._convs: OrderedDict[str, _Conversation] = OrderedDict()
        self._max_conversations = max_conversations
        self._lock = threading.Lock()
        self.last_inputs: list[Any] = []  # the TurnInputs of the latest batch (None where building one failed)
        self.last_traces: list[Any] = []  # the TurnTraces of the latest batch (None where the item failed)

    def _build(self, search_pipeline: Any, policy: Any, task: int | None) -> Any:
        """The same wiring as the CLI: one build_agent, one configuration (search cache, warm-up, thresholds)."""
        from glasses_rag.harness.benchmarks import tool_profile_named
        from graph.build import build_agent

        return build_agent(
            self.config,
            search=search_pipeline if search_pipeline is not None else NullSearch(),
            policy=policy if policy is not None and not isinstance(policy, (str, Path)) else None,
            run_id=self.run_id,
            task=task,  # its grammars prepared at warm-up (every task's when the turns infer it)
            tool_profile=tool_profile_named(self.config.tools.profile),  # a run.json's, e.g. SuperGlasses'
        )

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

    def build_turn(
        self,
        query: str,
        image: Any,
        messages: Sequence[dict],
        session_id: str | None = None,
        interaction_id: str | None = None,
        domain: str | None = None,
    ):
        """The TurnInput for one item, with history rebuilt from the messages and remembered entities."""
        from glasses_rag.core.images import load_image, prepare
        from graph.agent import TurnInput
        from tools.base import HistoryTurn

        key = conversation_key(image, query, messages or [])
        conv = self._conversation(session_id or key)
        if session_id:
            conv.session_id = session_id
        history: list[HistoryTurn] = []
        for i, (q, a) in enumerate(history_pairs(messages or [])):
            rec = conv.turns.get(i)
            ours = rec is not None and _norm(rec.question) == _norm(q) and answers_match(rec.answer, a)
            history.append(HistoryTurn(question=q, answer=a, entity=rec.entity if rec is not None and ours else None))
        # the harness already resized egocentric frames to 960x1280; other images are only bounded, as in the CLI
        img, info = prepare(*load_image(image), egocentric=None)
        idx = len(history)
        return conv, TurnInput(
            task=self.task_for(history),
            session_id=conv.session_id,
            interaction_id=interaction_id or f"{conv.session_id}-t{idx}",
            turn_index=idx,
            question=str(query or ""),
            image=img,
            image_info=info,
            history=history,
            labels={"domain": domain} if domain else {},
        )

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

    def batch_generate_response(
        self, queries: list[str], images: list[Any], message_histories: list[list[dict]], **kwargs: Any
    ) -> list[str]:
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
                    conv, inp = self.build_turn(
                        queries[i],
                        images[i],
                        histories[i],
                        session_id=sids[i],
                        interaction_id=iids[i],
                        domain=domains[i] if i < len(domains) else None,
                    )
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

__all__ = [
    "GlassesRAGAgent",
    "UserAgent",
    "OfficialPipelineSearch",
    "NullSearch",
    "as_search_backend",
    "pipeline_has_web",
    "conversation_key",
    "history_pairs",
    "answers_match",
    "agent_config",
    "harness_task",
    "OFFICIAL_BASE_AGENT",
    "IDK",
]
