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
import os
import re
import sys
import threading
import time
import uuid
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from models.nlp import IDK
from crag.search import NullSearch, OfficialPipelineSearch, as_search_backend, pipeline_has_web

log = logging.getLogger(__name__)

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
        def __init__(self, search_pipeline: Any = None, task: int | None = None, policy: Any = None, budget_s: float = 10.0,
                 *, config: Any = None, batch_size: int = 8, max_workers: int | None = None, grace_s: float = 2.0,
                 trace_dir: str | Path | None = None, run_id: str | None = None, max_steps: int | None = None,
                 abstain_below: float | None = None, allowed_tools: list[str] | None = None,
                 detector: str | Path | None = None, clip: str | Path | None = None,
                 reranker: str | Path | None = None, text_embedder: str | Path | None = None,
                 max_conversations: int = 20000, **kwargs: Any):
        try:
            super().__init__(search_pipeline)
        except TypeError:  # the newer kit's BaseAgent(**kwargs)
            super().__init__()
        self.search_pipeline = search_pipeline
        task = task if task is not None else harness_task()
        if task is not None and task not in (1, 2, 3):
            raise ValueError(f"task must be 1, 2, 3 or None, not {task!r}")
        from graph.build import build_agent

        self.task = task
        self.batch_size = int(min(MAX_BATCH_SIZE, max(MIN_BATCH_SIZE, batch_size)))
        self.max_workers = max(1, max_workers or self.batch_size)
        self.grace_s = float(grace_s)
        self.config = agent_config(config, policy=policy, budget_s=budget_s, max_steps=max_steps,
                                   abstain_below=abstain_below, allowed_tools=allowed_tools, detector=detector,
                                   clip=clip, reranker=reranker, text_embedder=text_embedder)
        self.budget_s = self.config.budget.budget_s
        self.run_id = run_id or f"starter-kit-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:4]}"
        # The same wiring as the CLI: one build_agent, one configuration (search cache, warm-up, thresholds).
        self.agent = build_agent(self.config, search=search_pipeline if search_pipeline is not None else NullSearch(),
                                 policy=policy if policy is not None and not isinstance(policy, (str, Path)) else None,
                                 run_id=self.run_id)
        self.search = self.agent.resources.search
        self.web_enabled = pipeline_has_web(self.search) if task is None else task >= 2
        self.policy = self.agent.policy
        self.store = None
        if trace_dir is not None:
            from traces.store import TraceStore

            self.store = TraceStore(Path(trace_dir), self.run_id)
        self._convs: OrderedDict[str, _Conversation] = OrderedDict()
        self._max_conversations = max_conversations
        self._lock = threading.Lock()
        self.last_inputs: list[Any] = []  # the TurnInputs of the latest batch (None where building one failed)
        self.last_traces: list[Any] = []  # the TurnTraces of the latest batch (None where the item failed)

    # ---- the official interface --------------------------------------------------------------

    def get_batch_size(self) -> int:
        return self.batch_size

    def task_for(self, history: Sequence[Any]) -> int:
        if self.task is not None:
            return self.task if self.web_enabled or self.task == 1 else 1
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
        from crag.images import load_image, prepare
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
            history.append(HistoryTurn(question=q, answer=a, entity=rec.entity if ours else None))
        # the harness already resized egocentric frames to 960x1280; other images are only bounded, as in the CLI
        img, info = prepare(*load_image(image), egocentric=None)
        idx = len(history)
        return conv, TurnInput(task=self.task_for(history), session_id=conv.session_id,
                               interaction_id=interaction_id or f"{conv.session_id}-t{idx}", turn_index=idx,
                               question=str(query or ""), image=img, image_info=info, history=history,
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
           "pipeline_has_web", "conversation_key", "history_pairs", "answers_match", "agent_config", "harness_task",
           "OFFICIAL_BASE_AGENT"]
