"""The scheduler process, composed in the order of HAMi's start() (§1.5).

`SchedulerProcess` wires the pieces that the server, `--cluster-snapshot` mode and the simulator
all share: informers (pods, nodes, resourcequotas) feeding the scheduler state, the registration
loop that turns node annotations into device inventories, the node locker, the event recorder and
the extender verbs. Only the transport differs: HTTP to a kube-apiserver, or the in-memory cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from vgpu_scheduler.cluster.client import KubeClient
from vgpu_scheduler.cluster.events import EventRecorder
from vgpu_scheduler.cluster.leader import LeaderTracker
from vgpu_scheduler.cluster.lockview import describe_node_locks
from vgpu_scheduler.cluster.nodelock import NodeLocker, has_lock_annotation
from vgpu_scheduler.cluster.reflector import Reflector
from vgpu_scheduler.cluster.registration import RegistrationLoop
from vgpu_scheduler.cluster.store import Store
from vgpu_scheduler.config import DeviceConfig
from vgpu_scheduler.devices.registry import REGISTRY, build
from vgpu_scheduler.devices.spec import VendorSpec
from vgpu_scheduler.engine.explain import Explanation, explain_pod
from vgpu_scheduler.engine.state import SchedulerState
from vgpu_scheduler.scheduler.extender import EventSink, Extender, Policies
from vgpu_scheduler.scheduler.options import SchedulerOptions, vendor_flags
from vgpu_scheduler.wire import objects

log = logging.getLogger(__name__)

EVENT_QPS = 50.0
EVENT_BURST = 100
"""Our events' own client-side rate limit: kube-scheduler's client defaults (its event client has
them too). Events beyond it queue, then drop (cluster/events.py), so a burst's best-effort writes
never crowd out its binds at the API server."""

RESERVATION_SWEEP_SECONDS = 30.0
RESERVATION_MAX_AGE_SECONDS = 60.0
"""A reservation older than this whose pod is not in the informer cache is dropped."""

Obj = dict[str, Any]


@dataclass(slots=True)
class _PodHandler:
    state: SchedulerState
    extender: Extender

    def on_add(self, obj: Obj) -> None:
        self.state.on_pod(obj)

    def on_update(self, old: Obj, new: Obj) -> None:
        held = self.state.allocation(objects.uid(new)) is not None
        self.state.on_pod(new)
        if held and self.state.allocation(objects.uid(new)) is None:  # finished: devices freed
            self.extender.requeue.devices_freed()

    def on_delete(self, obj: Obj) -> None:
        held = self.state.allocation(objects.uid(obj)) is not None
        self.state.on_pod_deleted(obj)
        self.extender.on_pod_deleted(obj)
        if held:
            self.extender.requeue.devices_freed()


@dataclass(slots=True)
class _QuotaHandler:
    state: SchedulerState

    def on_add(self, obj: Obj) -> None:
        self.state.on_quota(obj)

    def on_update(self, old: Obj, new: Obj) -> None:
        self.state.on_quota(new)

    def on_delete(self, obj: Obj) -> None:
        self.state.on_quota_deleted(obj)


def label_selector(labels: dict[str, str]) -> str | None:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items())) or None


class SchedulerProcess:
    def __init__(
        self,
        opts: SchedulerOptions,
        device_config: DeviceConfig,
        client: KubeClient,
        hostname: str,
        *,
        now: Callable[[], float] = time.time,
        now_datetime: Callable[[], datetime] | None = None,
        events: EventSink | None = None,
        pod_name: str | None = None,
        pod_namespace: str | None = None,
        registry: Sequence[VendorSpec] = REGISTRY,
    ) -> None:
        """`registry`: the vendors to register (the package's; a test adds one of its own)."""
        if not hostname:
            raise ValueError("hostname is empty: the scheduler needs it as its leader identity")
        self.opts = opts
        self.device_config = device_config
        self.vendors = build(device_config, vendor_flags(opts, registry), registry=registry)
        self.client = client
        self.hostname = hostname
        self.now = now
        self._now_datetime = now_datetime or (lambda: datetime.fromtimestamp(self.now()).astimezone())
        self.state = SchedulerState(self.vendors)
        self.synced = asyncio.Event()
        self.recorder: EventRecorder | None = None
        self.events: EventSink = events if events is not None else self._event_recorder()
        self.leader = LeaderTracker(
            client,
            hostname=hostname,
            enabled=opts.leader_elect,
            lease_name=opts.leader_elect_resource_name,
            lease_namespace=opts.leader_elect_resource_namespace,
            pod_name=pod_name,
            pod_namespace=pod_namespace,
        )

        self.nodes = Reflector(
            client,
            "nodes",
            label_selector=label_selector(opts.node_label_selector),
            store=Store(mark=has_lock_annotation),
        )
        self.locker = NodeLocker(
            client,
            timeout=opts.node_lock_timeout,
            now=self._now_datetime,
            cached_node=lambda name: self.nodes.store.get(None, name),
            locked_nodes=lambda: self.nodes.store.marked,
        )
        self.pods = Reflector(client, "pods")
        self.extender = self._new_extender()
        self.pods.handler = _PodHandler(self.state, self.extender)
        self.quotas = Reflector(client, "resourcequotas", handler=_QuotaHandler(self.state))
        self.registration = self._new_registration()
        self.nodes.handler = self.registration.handler
        self.leader.add_listener(self.registration.on_leader_change)
        self._sweeper: asyncio.Task[None] | None = None

    def _event_recorder(self) -> EventRecorder:
        """Events on a rate limit of their own, as kube-scheduler's separate event client: they are
        best-effort and must never delay a bind's calls."""
        opts = self.opts
        events_client = self.client.with_own_rate_limit(
            min(opts.kube_qps, EVENT_QPS), min(opts.kube_burst, EVENT_BURST)
        )
        self.recorder = EventRecorder(events_client, opts.scheduler_name)
        return self.recorder

    def _new_extender(self) -> Extender:
        opts = self.opts
        return Extender(
            state=self.state,
            api=self.client,
            locker=self.locker,
            events=self.events,
            policies=Policies(opts.node_scheduler_policy, opts.gpu_scheduler_policy),
            synced=self.synced,
            cached_pod=lambda ns, name: self.pods.store.get(ns, name),
            cached_node=lambda name: self.nodes.store.get(None, name),
            lock_retry_timeout=opts.node_lock_retry_timeout,
            bind_timeout=opts.bind_timeout,
            lock_aware=opts.lock_aware_placement,
            requeue_nudges=opts.requeue_nudges,
            now=self.now,
            is_leader=self.leader.is_leader,
        )

    def _new_registration(self) -> RegistrationLoop:
        return RegistrationLoop(
            self.client,
            self.state,
            self.nodes.store,
            is_leader=self.leader.is_leader,
            ready=self._informers_synced,
            on_node_deleted=self.locker.forget_node,
            on_pass=self.leader.label_pods,
            now=self._now_datetime,
            synced=self.synced,
        )

    def explain(self, namespace: str, name: str) -> Explanation | None:
        """Why the cached pod is where it is or pending, over every node of the cache (None: no
        such pod). A dry run: nothing in the state or the cluster changes."""
        pod = self.pods.store.get(namespace, name)
        if pod is None:
            return None
        nodes = self.nodes.store.list()
        specs = [v.node_lock for v in self.vendors if v.node_lock is not None]
        now = self._now_datetime()
        locks = {
            objects.name(n): text
            for n in nodes
            if (text := describe_node_locks(n, now=now, timeout=self.locker.timeout, specs=specs))
        }
        return explain_pod(
            pod,
            sorted(objects.name(n) for n in nodes),
            self.state,
            default_node_policy=self.opts.node_scheduler_policy,
            default_gpu_policy=self.opts.gpu_scheduler_policy,
            now=int(self.now()),
            problems=self.registration.problems,
            locks=locks,
        )

    def _informers_synced(self) -> bool:
        return all(r.has_synced for r in self.reflectors) and self.leader.has_synced

    @property
    def reflectors(self) -> list[Reflector]:
        return [self.pods, self.nodes, self.quotas]

    async def start(self, sync_timeout: float | None = None) -> None:
        """Informers started and synced, then the first registration pass (HAMi's start order)."""
        for reflector in self.reflectors:
            reflector.start()
        self.leader.start()
        for reflector in self.reflectors:
            if not await reflector.wait_synced(sync_timeout):
                raise TimeoutError(f"informer {reflector.name} did not sync")
        if self.recorder is not None:
            self.recorder.start()
        self.registration.start()
        self._sweeper = asyncio.create_task(self._sweep_reservations(), name="reservation sweep")
        if self.leader.is_leader():
            # The first pass: filter answers only after it, like HAMi's `synced` flag.
            await asyncio.wait_for(self.synced.wait(), sync_timeout)

    def _pod_exists(self, namespace: str, name: str, uid: str) -> bool:
        pod = self.pods.store.get(namespace, name)
        return pod is not None and objects.uid(pod) == uid

    async def _sweep_reservations(self) -> None:
        while True:
            await asyncio.sleep(RESERVATION_SWEEP_SECONDS)
            self.extender.sweep_reservations(self._pod_exists, RESERVATION_MAX_AGE_SECONDS)

    async def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None
        await self.registration.stop()
        await self.leader.stop()
        if self.recorder is not None:
            await self.recorder.stop()
        for reflector in self.reflectors:
            await reflector.stop()
