"""A run folder: its fingerprint, its lock, and the checks made before a run may write into it."""

from __future__ import annotations

import argparse
from typing import Any


def run_fingerprint(args: argparse.Namespace, config: Any, source: Any) -> str:
    """What must match for a run folder's finished turns to be reused: the agent, the task, the data, the scoring."""
    import hashlib

    parts = [
        config.fingerprint(),
        args.benchmark,
        args.task,
        str(source),
        args.split,
        args.image_prep,
        args.scoring_mode,
        args.judge,
        str(args.tokenizer),
    ]
    return hashlib.sha256("\0".join(map(str, parts)).encode()).hexdigest()[:16]


class RunRefused(Exception):
    """The run folder cannot be used as asked (held by another process, or made with another configuration), or a
    model server the run needs cannot be reached."""


def check_model_servers(parts: dict[str, Any]) -> None:
    """At warm-up: every HTTP model the run uses (`parts`: the option that names it -> the policy's backend, an LLM
    judge) takes a connection on at least one replica, or the run stops here with one line naming that option
    (instead of minutes of retries and a report of "I don't know"s)."""
    for option, part in parts.items():
        client = getattr(part, "client", None)
        check = getattr(client, "unreachable", None)
        if not callable(check):
            continue
        down = check()
        if down and len(down) == len(getattr(client, "replicas", down)):
            raise RunRefused(f"cannot reach the model server {'; '.join(down)} (is it running? see {option})")


MAX_RUN_JSON_BYTES = 16 << 20  # a run.json is a few KB


def check_links(run_dir: Any) -> None:
    """RunRefused when the run folder's `requests/`, its pieces file or its lock is a symbolic link: a resumed run
    appends to them, and a link would have the appends land on its target (traces/requests.py)."""
    from glasses_rag.core.paths import PathRefused, is_link
    from traces.requests import check_requests_folder

    try:
        check_requests_folder(run_dir)
        if is_link(run_dir / ".lock"):
            raise PathRefused(f"{run_dir / '.lock'} is a symbolic link: remove it, or run in another folder")
    except PathRefused as e:
        raise RunRefused(str(e)) from None


def previous_run(run_dir: Any) -> dict[str, Any]:
    """The folder's run.json as written by an earlier run ({} when it cannot be read: looked at before it is read)."""
    import json

    from glasses_rag.core.files import read_text_bounded

    try:
        old = json.loads(read_text_bounded(run_dir / "run.json", MAX_RUN_JSON_BYTES))
    except (OSError, ValueError, RecursionError):
        return {}
    return old if isinstance(old, dict) else {}


def claim_run_folder(store: Any, fingerprint: str, resume_anyway: bool) -> Any:
    """Refuse a folder with a link where the run appends, lock the run folder for this process, clear temp files a
    killed writer left, and refuse to mix traces made under another configuration (unless asked to). Returns the
    held lock."""
    from filelock import FileLock, Timeout

    check_links(store.dir)
    lock = FileLock(str(store.dir / ".lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise RunRefused(
            f"another process is running in {store.dir} (its lock is held); wait for it or use another --run-id"
        ) from None
    from traces.store import remove_stale_tmp

    remove_stale_tmp(store.dir)
    remove_stale_tmp(store.dir / "requests")
    previous = store.dir / "run.json"
    if previous.exists() and not resume_anyway:
        old = previous_run(store.dir)
        if old.get("run_fingerprint") != fingerprint:
            lock.release()
            raise RunRefused(
                f"{store.dir} holds a run made with a different configuration (policy "
                f"{old.get('policy', '?')!r}, task {old.get('task', '?')}, data {old.get('data', '?')!r}); "
                "use another --run-id, or --resume-anyway to keep its finished turns"
            )
    return lock
