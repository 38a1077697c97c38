"""Scheduling queue shaped like kube-scheduler's PriorityQueue, in simulated time.

Four places a pending pod can be:

* **activeQ** — ready to be tried; popped highest `spec.priority` first, then in arrival order.
* **backoffQ** — failed before and a cluster event made it worth retrying, but its backoff has not run
  out yet; it moves to activeQ by itself once `now` passes its expiry.
* **unschedulable** — failed and nothing has changed since: it waits for a cluster event (a pod finished
  or was deleted, a node was added). Retrying it without an event would give the same answer, because
  the simulation is deterministic, so (unlike kube-scheduler's 5-minute flush) it is never retried on a
  timer; this also lets a run end when only unschedulable pods are left.
* **parked** — failed with an error (kube-scheduler retries those on backoff, forever) and the loop
  knows that retrying cannot change the answer until something happens (see `park`). It waits like an
  unschedulable pod, and once released it resumes its backoff schedule as if it had been retried all
  along. Without it a pod that errors on every attempt would keep a simulation running forever.

Backoff per pod is `initial * 2**(attempts-1)` capped at `max` (kube-scheduler defaults 1 s and 10 s),
counted from the time of the last failure. A pod that failed while an event arrived during its own
scheduling cycle goes straight to backoffQ, as kube-scheduler does, so the event is not lost.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

DEFAULT_INITIAL_BACKOFF = 1.0
DEFAULT_MAX_BACKOFF = 10.0


class QueueError(ValueError):
    """Misuse of the queue: a pod added twice, or a pod handed back that was never popped."""


def pod_key(pod: Mapping[str, Any]) -> str:
    """`namespace/name` (namespace defaults to `default`, as for a manifest applied without one)."""
    meta = pod.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    ns = meta.get("namespace") or "default"
    return f"{ns}/{meta.get('name', '')}"


def pod_priority(pod: Mapping[str, Any]) -> int:
    """`spec.priority` as the Priority admission plugin sets it; absent or malformed counts as 0."""
    spec = pod.get("spec")
    value = spec.get("priority") if isinstance(spec, Mapping) else None
    # bool is an int in Python but never a valid priority.
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return 0


@dataclass(slots=True)
class QueuedPod:
    """A pod plus its queue bookkeeping (kube-scheduler's QueuedPodInfo)."""

    pod: dict[str, Any]
    key: str
    priority: int
    seq: int
    """Arrival order; kept across retries so equal-priority pods keep their first-come order."""
    added_at: float
    attempts: int = 0
    """Scheduling attempts so far (incremented on every pop)."""
    last_failure: float | None = None
    backoff_expiry: float = 0.0
    cycle: int = 0
    """Scheduling cycle in which the pod was last popped."""
    generation: int = 0
    """Bumped on every move so stale heap entries can be recognised and skipped."""


class SchedulingQueue:
    def __init__(
        self,
        *,
        initial_backoff: float = DEFAULT_INITIAL_BACKOFF,
        max_backoff: float = DEFAULT_MAX_BACKOFF,
    ) -> None:
        if initial_backoff <= 0 or max_backoff < initial_backoff:
            raise ValueError(
                f"backoff must satisfy 0 < initial <= max (got initial={initial_backoff}, max={max_backoff})"
            )
        self._initial = initial_backoff
        self._max = max_backoff
        self._seq = 0
        self._cycle = 0
        self._move_request_cycle = -1
        self._active: dict[str, QueuedPod] = {}
        self._active_heap: list[tuple[int, int, int, str]] = []
        self._backoff: dict[str, QueuedPod] = {}
        self._backoff_heap: list[tuple[float, int, int, str]] = []
        self._unschedulable: dict[str, QueuedPod] = {}
        self._parked: dict[str, QueuedPod] = {}

    # -- sizes -------------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._active) + len(self._backoff) + len(self._unschedulable) + len(self._parked)

    def __contains__(self, key: object) -> bool:
        return (
            key in self._active or key in self._backoff or key in self._unschedulable or key in self._parked
        )

    @property
    def active_count(self) -> int:
        return len(self._active)

    @property
    def backoff_count(self) -> int:
        return len(self._backoff)

    @property
    def unschedulable_count(self) -> int:
        return len(self._unschedulable)

    @property
    def parked_count(self) -> int:
        return len(self._parked)

    @property
    def scheduling_cycle(self) -> int:
        return self._cycle

    def pending(self) -> Iterator[QueuedPod]:
        """Every queued pod (any sub-queue), in arrival order."""
        everything = [
            *self._active.values(), *self._backoff.values(), *self._unschedulable.values(),
            *self._parked.values(),
        ]
        return iter(sorted(everything, key=lambda q: q.seq))

    # -- backoff -----------------------------------------------------------------------------------

    def backoff_duration(self, attempts: int) -> float:
        """1, 2, 4, 8, 10, 10 ... seconds for attempts 1, 2, 3 ... (with the default bounds)."""
        duration = self._initial
        for _ in range(1, max(attempts, 1)):
            duration *= 2
            if duration >= self._max:
                return self._max
        return min(duration, self._max)

    def next_backoff_expiry(self) -> float | None:
        self._drop_stale_backoff()
        return self._backoff_heap[0][0] if self._backoff_heap else None

    # -- operations --------------------------------------------------------------------------------

    def add(self, pod: dict[str, Any], now: float) -> QueuedPod:
        """A new pending pod arrives: straight into activeQ."""
        key = pod_key(pod)
        if key in self:
            raise QueueError(f"pod {key} is already queued")
        qp = QueuedPod(pod=pod, key=key, priority=pod_priority(pod), seq=self._seq, added_at=now)
        self._seq += 1
        self._push_active(qp)
        return qp

    def pop(self, now: float) -> QueuedPod | float | None:
        """The next pod to try, else the time the earliest backoff runs out, else None (nothing to do
        until a cluster event)."""
        self._flush_backoff(now)
        while self._active_heap:
            _, _, gen, key = heapq.heappop(self._active_heap)
            qp = self._active.get(key)
            if qp is None or qp.generation != gen:
                continue  # moved or deleted since this entry was pushed
            del self._active[key]
            self._cycle += 1
            qp.cycle = self._cycle
            qp.attempts += 1
            return qp
        return self.next_backoff_expiry()

    def add_unschedulable(self, qp: QueuedPod, now: float) -> None:
        """Hand back a pod that did not fit in the cycle it was popped in."""
        self._failed(qp, now)
        if self._move_request_cycle >= qp.cycle:
            # An event arrived while this pod was being scheduled: it may fit now.
            self._push_backoff_or_active(qp, now)
        else:
            qp.generation += 1
            self._unschedulable[qp.key] = qp

    def add_backoff(self, qp: QueuedPod, now: float) -> None:
        """Hand back a pod whose cycle failed with an error (a failed bind): kube-scheduler retries
        such a pod when its backoff runs out, without waiting for a cluster event."""
        self._failed(qp, now)
        self._push_backoff_or_active(qp, now)

    def park(self, qp: QueuedPod, now: float) -> None:
        """Hand back a pod whose cycle failed with an error, when the caller knows its retries
        would fail alike until something changes: it waits for `release_parked`."""
        self._failed(qp, now)
        qp.generation += 1
        self._parked[qp.key] = qp

    def release_parked(self, now: float) -> int:
        """Something changed at `now`: every parked pod resumes its backoff schedule. The retries
        it would have made until `now` (each failing alike) are counted as made, so it is next
        tried when kube-scheduler, retrying all along, would try it. Returns how many moved."""
        moved = list(self._parked.values())
        self._parked.clear()
        for qp in moved:
            self._skip_failed_retries(qp, now)
            self._push_backoff_or_active(qp, now)
        return len(moved)

    def move_all_to_active_on_event(self, now: float, event: str = "") -> int:
        """A cluster event (pod finished/deleted, node added) may have made room: every unschedulable
        pod goes to activeQ, or to backoffQ while its backoff still runs. Returns how many moved.

        `event` is informational (the loop may log it); every event moves every pod, as kube-scheduler
        did before per-plugin queueing hints.
        """
        del event
        self._move_request_cycle = self._cycle
        moved = list(self._unschedulable.values())
        self._unschedulable.clear()
        for qp in moved:
            self._push_backoff_or_active(qp, now)
        return len(moved) + self.release_parked(now)

    def delete(self, key: str) -> bool:
        """Forget a pending pod (deleted from the cluster). True if it was queued."""
        for where in (self._active, self._backoff, self._unschedulable, self._parked):
            if where.pop(key, None) is not None:
                return True  # its heap entry (if any) is now stale and will be skipped
        return False

    # -- internals ---------------------------------------------------------------------------------

    def _failed(self, qp: QueuedPod, now: float) -> None:
        """A popped pod is handed back after a failure at `now`: its backoff starts."""
        if qp.key in self:
            raise QueueError(f"pod {qp.key} is already queued")
        if qp.attempts == 0:
            raise QueueError(f"pod {qp.key} was never popped")
        qp.last_failure = now
        qp.backoff_expiry = now + self.backoff_duration(qp.attempts)

    def _skip_failed_retries(self, qp: QueuedPod, now: float) -> None:
        """Account for the retries due at or before `now` as made and failed: afterwards the pod's
        expiry is the first one of its schedule after `now`."""
        while qp.backoff_expiry <= now:
            qp.attempts += 1  # the retry at backoff_expiry
            qp.last_failure = qp.backoff_expiry
            step = self.backoff_duration(qp.attempts)
            if step >= self._max:  # from here on every step is the same: skip them at once
                skipped = int((now - qp.last_failure) // step)
                qp.attempts += skipped
                qp.last_failure += skipped * step
            qp.backoff_expiry = qp.last_failure + step

    def _push_active(self, qp: QueuedPod) -> None:
        qp.generation += 1
        self._active[qp.key] = qp
        heapq.heappush(self._active_heap, (-qp.priority, qp.seq, qp.generation, qp.key))

    def _push_backoff_or_active(self, qp: QueuedPod, now: float) -> None:
        if qp.backoff_expiry <= now:
            self._push_active(qp)
            return
        qp.generation += 1
        self._backoff[qp.key] = qp
        heapq.heappush(self._backoff_heap, (qp.backoff_expiry, qp.seq, qp.generation, qp.key))

    def _drop_stale_backoff(self) -> None:
        heap = self._backoff_heap
        while heap:
            _, _, gen, key = heap[0]
            qp = self._backoff.get(key)
            if qp is not None and qp.generation == gen:
                return
            heapq.heappop(heap)

    def _flush_backoff(self, now: float) -> None:
        heap = self._backoff_heap
        while True:
            self._drop_stale_backoff()
            if not heap or heap[0][0] > now:
                return
            _, _, _, key = heapq.heappop(heap)
            self._push_active(self._backoff.pop(key))
