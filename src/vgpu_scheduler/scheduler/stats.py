"""Statistics of the extender verbs: the counters and histograms behind /metrics.

One concern: what the filter and bind paths count. Nothing here decides or writes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from vgpu_scheduler.cluster.instruments import CounterVec, HistogramVec

FILTER_OUTCOMES = ("chosen", "nofit", "error", "contention", "no_request")
"""`outcome` of vgpu_scheduler_decisions_total and vgpu_scheduler_filter_duration_seconds."""
BIND_OUTCOMES = ("bound", "contention", "stopped", "error")
LOCK_OUTCOMES = ("acquired", "contention", "stopped", "error")


def _by_outcome(outcomes: tuple[str, ...]) -> HistogramVec:
    return HistogramVec(("outcome",), known=[(o,) for o in outcomes])


@dataclass(slots=True)
class ExtenderStats:
    filters: int = 0
    binds: int = 0
    bind_failures: int = 0
    api_calls_in_bind: int = 0
    filters_unknown_pod: int = 0
    """Filters refused because the pod is not (yet) in the informer cache: nothing reserved."""
    filters_all_busy: int = 0
    """Filters refused with lock contention: every fitting node was busy binding another pod."""
    binds_superseded: int = 0
    """Binds stopped because a newer filter decided again for the same pod."""
    binds_cancelled: int = 0
    """Binds whose HTTP caller went away (kube-scheduler's httpTimeout) before they finished."""
    binds_deadline: int = 0
    """Binds stopped at --bind-timeout."""
    binds_wrong_node: int = 0
    """Binds for a node other than the one the pod's latest filter chose: refused with no write."""
    lock_contention: int = 0
    decisions: CounterVec = field(default_factory=lambda: CounterVec(("outcome", "reason")))
    """Filter decisions by outcome (FILTER_OUTCOMES) and a bounded reason: the HAMi reason type that
    rejected the most nodes for `nofit`, a fixed word otherwise (see `_Outcome`)."""
    filter_duration: HistogramVec = field(default_factory=lambda: _by_outcome(FILTER_OUTCOMES))
    bind_duration: HistogramVec = field(default_factory=lambda: _by_outcome(BIND_OUTCOMES))
    lock_wait: HistogramVec = field(default_factory=lambda: _by_outcome(LOCK_OUTCOMES))
    """Time a bind spent taking its node lock (local queue, reads, takeover, PodGroup retries)."""
