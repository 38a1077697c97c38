"""When a pod whose filter or bind answers an error is tried again, and when a run must stop.

kube-scheduler retries such a pod on its backoff, forever. A simulation is deterministic: a retry
with nothing changed since the last one fails alike, so after `PARK_AFTER_ERRORS` failures with
nothing happening in between the pod is parked (the queue holds it) until something happens: a pod
arrives, binds or finishes, a node joins, or the clock passes a moment at which a live node lock
expires (`next_lock_deadline`). A run whose clock only ever moves from one lock deadline to the
next (a retry can take a lock anew) stops after `IDLE_DEADLINES_LIMIT` of them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from vgpu_scheduler.cluster.lockview import node_lock_deadlines
from vgpu_scheduler.devices.protocol import Vendors

PARK_AFTER_ERRORS = 3
"""Failed attempts with an error, nothing happening in between, after which a pod is parked. More
than one: an attempt that fails may itself write (a lock taken over, an annotation patched) and
the next one start from there."""
IDLE_DEADLINES_LIMIT = 100
"""Lock deadlines the clock may jump to in a row without anything binding, arriving or finishing."""

END_DONE = "done"
END_MAX_SIM_TIME = "max_sim_time"
END_NO_PROGRESS = "no_progress"


class ErrorRetries:
    """The pods whose last attempt failed with an error, and what happened since."""

    __slots__ = ("_changes", "_idle_deadlines", "_in_a_row", "errors")

    def __init__(self) -> None:
        self._changes = 0  # things that happened: what a failed retry is compared against
        self._idle_deadlines = 0  # lock deadlines passed since anything else happened
        self._in_a_row: dict[str, tuple[int, int]] = {}  # pod -> (`_changes` then, failures in a row)
        self.errors: dict[str, str] = {}
        """Pod key -> the error its last attempt failed with (only while that is its last outcome)."""

    def happened(self, *, idle: bool = False) -> None:
        """Something a failed retry could not foresee happened; `idle`: only a lock deadline passed."""
        self._changes += 1
        if not idle:
            self._idle_deadlines = 0

    def may_pass_deadline(self) -> bool:
        """May the clock jump to one more lock deadline (IDLE_DEADLINES_LIMIT)? Counts it if so."""
        if self._idle_deadlines >= IDLE_DEADLINES_LIMIT:
            return False
        self._idle_deadlines += 1
        return True

    def failed(self, key: str, error: str) -> bool:
        """The pod's attempt failed with `error`: should it be parked (else: retried on backoff)?"""
        self.errors[key] = error
        since, failures = self._in_a_row.get(key, (-1, 0))
        failures = failures + 1 if since == self._changes else 1
        self._in_a_row[key] = (self._changes, failures)
        return failures >= PARK_AFTER_ERRORS

    def forget(self, key: str) -> None:
        """The pod's last attempt ended without an error (bound, or fits nowhere)."""
        self.errors.pop(key, None)
        self._in_a_row.pop(key, None)


def next_lock_deadline(
    nodes: Iterable[Mapping[str, Any]], vendors: Vendors, *, timeout: float, now: datetime
) -> datetime | None:
    """The first moment after `now` at which a live lock on one of `nodes` expires (None: no live
    lock). `timeout`: the shared mutex's; vendor locks without holder use their own."""
    specs = [v.node_lock for v in vendors if v.node_lock is not None]
    first: datetime | None = None
    for node in nodes:
        for deadline in node_lock_deadlines(node, timeout, specs, now=now):
            if deadline > now and (first is None or deadline < first):
                first = deadline
    return first
