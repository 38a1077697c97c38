"""The extender verbs, filter (§5) and bind (§6), over the shared scheduler state: a thin façade.

`Extender` wires the rooms together and keeps the one API the server, the simulator and the
process composition call; each room can be read alone:

* scheduler/filter.py: the filter verb (decision, reservation, FilteringSucceed/Failed events);
* scheduler/bind.py: the bind verb (node locks, pod patch, Binding, release on failure);
* scheduler/pending.py: reservations waiting for their bind, the busy-node test, the sweep;
* scheduler/failures.py: the no-fit reason and event texts; scheduler/stats.py: the metrics;
* scheduler/locks.py: which node locks a bind takes; scheduler/settings.py: the shared tunables;
  scheduler/ports.py: the event sink and the API calls a bind makes.

Two deliberate differences from HAMi, both invisible on the wire:

* Filter writes nothing to the API. It reserves the chosen devices in the ledger and answers; the
  §4.1 annotations are written at bind, in the same patch as `bind-phase: allocating`. The device
  plugin reads them only after the Binding exists, and kube-scheduler's serial scheduling cycle
  no longer waits for a patch round trip per pod.
* Lock-aware placement: among the nodes that fit, one whose node lock is held (or about to be
  taken by a bind in flight) is ranked after every free one, so a burst spreads over nodes
  instead of queueing on one node's lock. Bind then waits on contention only for PodGroup
  members, as HAMi does, and never longer than `--bind-timeout`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, TypeVar, cast, overload

from vgpu_scheduler.cluster.nodelock import NodeLocker
from vgpu_scheduler.engine.podinfo import pod_key
from vgpu_scheduler.engine.requests import PodRequestsMemo
from vgpu_scheduler.engine.state import SchedulerState
from vgpu_scheduler.scheduler.bind import Binder
from vgpu_scheduler.scheduler.failures import (
    NODE_UNREGISTERED_REASON,
    OTHER_REASON,
    failed_by_type,
    failed_type_counts,
    filtering_failed_messages,
    main_reason,
    reason_types,
)
from vgpu_scheduler.scheduler.filter import EVALUATE_ALL_LIMIT, Filter, FilterAnswer, encode_no_fit
from vgpu_scheduler.scheduler.locks import is_pod_group_member, locking_request, pod_node_locks
from vgpu_scheduler.scheduler.pending import Reservations
from vgpu_scheduler.scheduler.ports import BindApi, EventSink
from vgpu_scheduler.scheduler.requeue import RequeueNudger
from vgpu_scheduler.scheduler.settings import ExtenderSettings, Policies
from vgpu_scheduler.scheduler.stats import BIND_OUTCOMES, FILTER_OUTCOMES, LOCK_OUTCOMES, ExtenderStats

# Re-exported: server/, simulate/, process.py and tests import these names from here.
__all__ = [
    "BIND_OUTCOMES",
    "EVALUATE_ALL_LIMIT",
    "FILTER_OUTCOMES",
    "LOCK_OUTCOMES",
    "NODE_UNREGISTERED_REASON",
    "OTHER_REASON",
    "BindApi",
    "EventSink",
    "Extender",
    "ExtenderStats",
    "FilterAnswer",
    "Policies",
    "_locking_request",
    "encode_no_fit",
    "failed_by_type",
    "failed_type_counts",
    "filtering_failed_messages",
    "is_pod_group_member",
    "main_reason",
    "pod_node_locks",
    "reason_types",
]

_locking_request = locking_request  # the name the vendor tests import

T = TypeVar("T")


class _Setting(Generic[T]):
    """An `Extender` attribute kept in its `settings`, which every room reads at each use: so
    `extender.now = ...` (a test's clock) reaches the filter, the bind and the reservations."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, extender: None, owner: type) -> _Setting[T]: ...

    @overload
    def __get__(self, extender: Extender, owner: type | None = None) -> T: ...

    def __get__(self, extender: Extender | None, owner: type | None = None) -> T | _Setting[T]:
        if extender is None:  # on the class itself (help(), introspection)
            return self
        return cast(T, getattr(extender.settings, self.name))

    def __set__(self, extender: Extender, value: T) -> None:
        setattr(extender.settings, self.name, value)


class Extender:
    """The filter and bind verbs, with the pod lifecycle hooks and the reservation sweep."""

    policies = _Setting[Policies]()
    lock_retry_timeout = _Setting[float]()
    bind_timeout = _Setting[float]()
    lock_aware = _Setting[bool]()
    pod_wait = _Setting[float]()
    sync_wait = _Setting[float]()
    now = _Setting[Callable[[], float]]()

    def __init__(
        self,
        *,
        state: SchedulerState,
        api: BindApi,
        locker: NodeLocker,
        events: EventSink,
        policies: Policies,
        synced: asyncio.Event,
        cached_pod: Callable[[str, str], dict[str, Any] | None],
        cached_node: Callable[[str], dict[str, Any] | None],
        lock_retry_timeout: float = 28.0,
        bind_timeout: float = 20.0,
        lock_aware: bool = True,
        requeue_nudges: bool = True,
        pod_wait: float = 1.0,
        sync_wait: float = 30.0,
        now: Callable[[], float] = time.time,
        is_leader: Callable[[], bool] = lambda: True,
    ) -> None:
        """`is_leader`: with --leader-elect, whether this replica holds the Lease now; a deposed
        replica (paused past its lease, say) writes nothing for a bind and nudges no pod."""
        self.settings = ExtenderSettings(
            policies=policies,
            lock_retry_timeout=lock_retry_timeout,
            bind_timeout=bind_timeout,
            lock_aware=lock_aware,
            pod_wait=pod_wait,
            sync_wait=sync_wait,
            now=now,
            is_leader=is_leader,
        )
        self.state = state
        self.requests_of = PodRequestsMemo(state.vendors)
        self.api = api
        self.locker = locker
        self.events = events
        self.synced = synced
        self.cached_pod = cached_pod
        self.cached_node = cached_node
        self.requeue = RequeueNudger(
            api, now=now, cached_pod=cached_pod, enabled=requeue_nudges, is_leader=is_leader
        )
        self.stats = ExtenderStats()
        self.reservations = Reservations(
            state=state, locker=locker, cached_pod=cached_pod, settings=self.settings
        )
        self._filter = self._filter_room()
        self._binder = self._bind_room()

    def _filter_room(self) -> Filter:
        return Filter(
            state=self.state,
            requests_of=self.requests_of,
            reservations=self.reservations,
            locker=self.locker,
            events=self.events,
            requeue=self.requeue,
            stats=self.stats,
            settings=self.settings,
            synced=self.synced,
            cached_pod=self.cached_pod,
        )

    def _bind_room(self) -> Binder:
        return Binder(
            state=self.state,
            requests_of=self.requests_of,
            reservations=self.reservations,
            api=self.api,
            locker=self.locker,
            events=self.events,
            stats=self.stats,
            settings=self.settings,
            cached_pod=self.cached_pod,
            cached_node=self.cached_node,
        )

    # -- the verbs --------------------------------------------------------------------------------

    async def filter(self, body: bytes) -> bytes:
        """The filter verb: an ExtenderArgs body in, an ExtenderFilterResult body out."""
        return await self._filter.filter(body)

    async def filter_pod(self, pod: dict[str, Any], node_names: Sequence[str] | None) -> FilterAnswer:
        """The filter verb in process, on arguments already decoded (see `Filter.filter_pod`)."""
        return await self._filter.filter_pod(pod, node_names)

    async def bind(self, body: bytes) -> bytes:
        """The bind verb: a BindingArgs body in, an ExtenderBindingResult body out."""
        return await self._binder.bind(body)

    # -- pod lifecycle hooks (called by the pod informer handler) ---------------------------------

    def on_pod_deleted(self, pod: Mapping[str, Any]) -> None:
        uid, _, _ = pod_key(pod)
        self.reservations.pop(uid)
        self.requeue.forget(uid)
        self.reservations.note_deleted(uid)

    def sweep_reservations(self, pod_exists: Callable[[str, str, str], bool], max_age: float) -> int:
        """Drop reservations older than `max_age` seconds whose pod is gone from the informer
        (see `Reservations.sweep`)."""
        return self.reservations.sweep(pod_exists, max_age)
