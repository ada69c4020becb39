"""Runs a CRAG-MM task over a dataset: conversations concurrently, turns in order, traces written as they finish.

Resumable: a turn whose trace already exists in the run folder (same run id) is not redone; its
answer feeds the conversation history exactly as if it had just been produced.
"""

from __future__ import annotations

import json
import logging
import threading
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, as_completed, wait
from pathlib import Path
from typing import Any, Callable, Iterable

from crag.schema import Conversation
from graph.agent import Agent, TurnInput
from tools.base import HistoryTurn
from traces.schema import TurnTrace
from traces.store import TraceStore, write_json_atomic

log = logging.getLogger(__name__)

MAX_IMAGE_SIDE = 2048


def usable_image(image: Any, missing: str = "no image given") -> tuple[Any, str | None]:
    """RGB, bounded size; a broken image becomes None with a note (the turn then runs without it)."""
    if image is None:
        return None, missing
    try:
        img = image
        img.load()
        if img.width < 2 or img.height < 2:
            return None, f"image too small ({img.width}x{img.height})"
        if img.mode != "RGB":
            img = img.convert("RGB")
        if max(img.size) > MAX_IMAGE_SIDE:
            img = img.copy()
            img.thumbnail((MAX_IMAGE_SIDE, MAX_IMAGE_SIDE))
            return img, f"image downscaled to {img.width}x{img.height}"
        return img, None
    except Exception as e:  # noqa: BLE001 - corrupt bytes, truncated files, decompression bombs
        return None, f"image could not be decoded: {type(e).__name__}: {e}"[:300]


def prepare_image(conv: Conversation) -> tuple[Any, str | None]:
    """The conversation's image made usable, or None with the loader's or our reason."""
    return usable_image(conv.image, conv.image_error or "no image in this row")


def run_conversation(agent: Agent, conv: Conversation, task: int, store: TraceStore,
                     scorer: Callable[[TurnTrace], TurnTrace] | None = None,
                     stop: threading.Event | None = None) -> tuple[list[TurnTrace], int]:
    """All turns of one conversation, in order; returns the traces and how many were resumed from disk.
    When `stop` is set (Ctrl-C), no further turn is started."""
    image, note = prepare_image(conv)
    history: list[HistoryTurn] = []
    traces: list[TurnTrace] = []
    resumed = 0
    for i, turn in enumerate(conv.turns):
        if stop is not None and stop.is_set():
            break
        trace = store.read(conv.session_id, i)
        if trace is not None and trace.interaction_id == turn.interaction_id and trace.task == task:
            resumed += 1
        else:
            gt = conv.answers[i] if i < len(conv.answers) else None
            inp = TurnInput(task=task, session_id=conv.session_id, interaction_id=turn.interaction_id, turn_index=i,
                            question=turn.query, image=image, image_note=note, history=list(history),
                            labels={"domain": turn.domain, "query_category": turn.query_category,
                                    "dynamism": turn.dynamism, "image_quality": turn.image_quality})
            trace = agent.run_turn(inp)
            trace.ground_truth = gt
            trace.egocentric = conv.egocentric
            if scorer is not None and gt is not None:
                trace = scorer(trace)
            store.write(trace)
        traces.append(trace)
        history.append(HistoryTurn(question=turn.query, answer=trace.answer, entity=trace.entity))
    return traces, resumed


def run_task(agent: Agent, conversations: Iterable[Conversation], task: int, store: TraceStore,
             scorer: Callable[[TurnTrace], TurnTrace] | None = None, concurrency: int = 1,
             progress: Callable[[int], None] | None = None) -> tuple[list[TurnTrace], int, int]:
    """Runs every conversation; returns (traces in input order, turns resumed from disk, conversations failed).

    One conversation failing never loses the others' finished traces. Conversations are consumed
    lazily, at most `2 * concurrency` in flight, so a whole dataset never sits decoded in memory.
    """
    order: list[str] = []
    results: dict[str, list[TurnTrace]] = {}
    counts = {"resumed": 0, "failed": 0}
    stop = threading.Event()
    workers = max(1, concurrency)

    def collect(fut, c: Conversation) -> None:
        try:
            traces, r = fut.result()
            results[c.session_id] = traces
            counts["resumed"] += r
        except Exception as e:  # noqa: BLE001
            counts["failed"] += 1
            log.error("conversation %s failed: %s", c.session_id, e)
        if progress:
            progress(len(c.turns))

    seen: dict[str, int] = {}
    with ThreadPoolExecutor(max_workers=workers) as pool:
        pending: dict[Any, Conversation] = {}
        try:
            for c in conversations:
                if c.session_id in seen:  # a dataset with a repeated id: keep both conversations apart
                    seen[c.session_id] += 1
                    new_id = f"{c.session_id}~{seen[c.session_id]}"
                    log.warning("session id %r repeats; running this conversation as %r", c.session_id, new_id)
                    c = c.model_copy(update={"session_id": new_id})
                seen.setdefault(c.session_id, 1)
                order.append(c.session_id)
                pending[pool.submit(run_conversation, agent, c, task, store, scorer, stop)] = c
                if len(pending) >= 2 * workers:
                    done, _ = wait(pending, return_when=FIRST_COMPLETED)
                    for fut in done:
                        collect(fut, pending.pop(fut))
            for fut in as_completed(list(pending)):
                collect(fut, pending.pop(fut))
        except BaseException:
            # Ctrl-C: queued conversations are cancelled and running ones stop after their current turn
            # (whose trace is written whole); without this the pool would still run every queued one.
            stop.set()
            for f in pending:
                f.cancel()
            raise
    return [t for sid in order for t in results.get(sid, [])], counts["resumed"], counts["failed"]


def write_run_manifest(store: TraceStore, data: dict[str, Any]) -> Path:
    p = store.dir / "run.json"
    write_json_atomic(p, json.dumps(data, indent=2, default=str))
    return p
