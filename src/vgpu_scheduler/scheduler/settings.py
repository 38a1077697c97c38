"""The extender's tunables, shared by its filter, bind and reservation rooms.

One concern: the values the façade (`Extender`) exposes as attributes and a test or the server may
change after construction (`extender.now = ...`, `extender.pod_wait = ...`). Every room holds the
same `ExtenderSettings` object and reads it at each use, so such a change reaches all of them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(slots=True)
class Policies:
    node: str = "binpack"
    gpu: str = "spread"


@dataclass(slots=True)
class ExtenderSettings:
    policies: Policies = field(default_factory=Policies)
    lock_retry_timeout: float = 28.0
    """How long a PodGroup member's bind waits on a held node lock (HAMi's retry budget)."""
    bind_timeout: float = 20.0
    """--bind-timeout: a bind stops here; a filter's decision marks its node busy until then."""
    lock_aware: bool = True
    """Rank nodes whose lock is held, or about to be taken, after the free ones (filter)."""
    pod_wait: float = 1.0
    """How long a filter waits for the informer to deliver a pod it does not know yet."""
    sync_wait: float = 30.0
    """How long a filter waits for the caches to sync before it answers an error."""
    now: Callable[[], float] = time.time
    """Wall-clock seconds: reservation and bind-time stamps, pending-bind deadlines, decisions."""
    is_leader: Callable[[], bool] = lambda: True
    """With --leader-elect: whether this replica holds the Lease now (re-evaluated at each call).
    A bind asks it before its first write and before each next one."""
