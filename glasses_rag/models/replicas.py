"""Replicas of one model behind several base URLs: which one takes a request (a conversation stays on its replica,
whose prefix cache holds its photo, unless that one is down or saturated; else the least busy), and the cool-down
of one that failed. The client (glasses_rag/models/openai_client.py) asks `pick` before a request and `release`
after it.

    pool = ReplicaPool(["http://a:8000/v1", "http://b:8000/v1"], max_outstanding=64)
    r = pool.pick("conversation-1")  # later requests of conversation-1 go to r while it is up
    pool.release(r, failed=False)
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

log = logging.getLogger(__name__)

COOLDOWN_S = (1.0, 60.0)  # first and longest time a failed replica is left out
AFFINITY_KEYS = 4096  # conversations whose replica is remembered (least recently used forgotten first)


@dataclass
class Replica:
    base_url: str
    outstanding: int = 0
    failures: int = 0
    down_until: float = 0.0
    served: int = 0

    def up(self, now: float) -> bool:
        return self.down_until <= now


class ReplicaPool:
    """The replicas and their bookkeeping, thread-safe. `max_outstanding`: requests in flight on a replica past
    which a conversation's requests go to the least busy replica instead of staying on theirs."""

    def __init__(self, base_urls: list[str], max_outstanding: int = 64):
        self.replicas = [Replica(u) for u in base_urls]
        self.max_outstanding = max(1, int(max_outstanding))
        self._lock = threading.Lock()
        self._turn = itertools.count()
        self._affinity: OrderedDict[str, Replica] = OrderedDict()

    def pick(self, key: str | None = None) -> Replica:
        """The replica for one request: the one `key` (a conversation) is on while it is up and has fewer than
        `max_outstanding` requests in flight; else the healthy replica with the fewest outstanding requests
        (ties in turn), which a new or moved key then stays on; if none is healthy, the one whose cool-down
        ends first. Counted as outstanding until `release`."""
        now = time.monotonic()
        with self._lock:
            home = self._affinity.get(key) if key is not None else None
            if home is not None and home.up(now) and home.outstanding < self.max_outstanding:
                r = home
            else:
                r = self._least_outstanding(now)
                if key is not None and (home is None or not home.up(now)):  # saturation is passing: key stays
                    self._affinity[key] = r
            if key is not None and key in self._affinity:
                self._affinity.move_to_end(key)
                while len(self._affinity) > AFFINITY_KEYS:
                    self._affinity.popitem(last=False)
            r.outstanding += 1
            return r

    def _least_outstanding(self, now: float) -> Replica:
        up = [r for r in self.replicas if r.up(now)]
        if not up:
            return min(self.replicas, key=lambda x: x.down_until)
        least = min(r.outstanding for r in up)
        ties = [r for r in up if r.outstanding == least]
        return ties[next(self._turn) % len(ties)]

    def release(self, r: Replica, failed: bool) -> None:
        """The request `pick` gave `r` is over; a failure leaves `r` out for a cool-down that doubles each time."""
        with self._lock:
            r.outstanding -= 1
            if failed:
                r.failures += 1
                cool = min(COOLDOWN_S[1], COOLDOWN_S[0] * 2 ** (r.failures - 1))
                r.down_until = time.monotonic() + cool
                if len(self.replicas) > 1:
                    log.warning("replica %s failed; left out for %.0fs", r.base_url, cool)
            else:
                r.failures = 0
                r.down_until = 0.0
                r.served += 1

    def any_up(self) -> bool:
        now = time.monotonic()
        return any(r.up(now) for r in self.replicas)
