"""The text-extraction worker process: `python -m glasses_rag.web.extract_worker` (started by glasses_rag.web.extraction, never by hand).

Reads length-prefixed JSON jobs `{"body", "url", "chunk_words", "timeout_s"}` on stdin and answers each with
`{"title", "text", "chunks"}` or `{"error"}` on the stdout it was started with (anything a library prints goes to
stderr instead). It ends at EOF (its parent went away). Its own limits back up the parent's, which kills it at the
deadline: an alarm per job (`timeout_s` + 1 s) and an address-space cap (MEMORY_ENV, in MB; default 2048).
"""

from __future__ import annotations

import json
import os
import resource
import signal
import struct
import sys
from typing import Any, BinaryIO

HEADER = struct.Struct(">I")
MEMORY_ENV = "GLASSES_WEB_EXTRACT_MEMORY_MB"


def read_frame(stream: BinaryIO) -> bytes | None:
    head = stream.read(HEADER.size)
    if len(head) < HEADER.size:
        return None
    (n,) = HEADER.unpack(head)
    data = stream.read(n)
    return data if len(data) == n else None


def write_frame(stream: BinaryIO, data: bytes) -> None:
    stream.write(HEADER.pack(len(data)) + data)
    stream.flush()


def _alarm(signum: int, frame: Any) -> None:
    raise TimeoutError("text extraction ran past its time limit")


def run_job(job: dict[str, Any]) -> dict[str, Any]:
    from glasses_rag.web.page_text import page_text

    signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, float(job.get("timeout_s", 10)) + 1.0)
    try:
        return page_text(job["body"], job.get("url"), int(job.get("chunk_words", 120)))
    except (Exception, RecursionError) as e:  # noqa: BLE001 - any failure is this page's error, not the worker's
        return {"error": f"{type(e).__name__}: {e}"[:500]}
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def main() -> int:
    limit = int(float(os.environ.get(MEMORY_ENV, "2048")) * 2**20)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # a library's print() must not corrupt a reply
    import trafilatura  # noqa: F401

    import glasses_rag.web.page_text  # noqa: F401 - imported (and trafilatura with it) before the first job arrives

    jobs = sys.stdin.buffer
    while (frame := read_frame(jobs)) is not None:
        try:
            reply = run_job(json.loads(frame))
        except (ValueError, KeyError) as e:
            reply = {"error": f"bad job: {e}"[:300]}
        write_frame(replies, json.dumps(reply).encode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
