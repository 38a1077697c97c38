"""Scheduler state: the device ledger and the quota manager, fed by plain watch objects.

Every counted pod is in both the ledger (per-device usage) and the quota manager (namespace usage),
with the same collapsed allocation, so they can never disagree. A filter decision is counted at once
as a *reservation* (no API call here); it is confirmed when the pod's own annotations arrive through
the watch, and dropped on `release` (patch failed), on deletion, or when the pod is filtered again.

The state also owns the caches the decision reuses across filters: per-node not-fit verdicts
(`VerdictCache`) and the node scores of fits (`engine/fitcache.py`); their entries are validated by
the ledger's node generations and the quota manager's namespace generations, so they need no other
upkeep than dropping removed nodes.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from vgpu_scheduler.devices.protocol import Vendors
from vgpu_scheduler.engine.fitcache import FitScores, fit_scores_cache
from vgpu_scheduler.engine.ledger import DeviceLedger
from vgpu_scheduler.engine.outcome import Chosen
from vgpu_scheduler.engine.placement import DemandTable
from vgpu_scheduler.engine.podinfo import (
    PodAllocation,
    allocation_from_annotations,
    counted_info,
    init_containers_finished,
    is_terminal,
    pod_allocation,
    pod_annotations,
    pod_key,
)
from vgpu_scheduler.engine.quota import QuotaManager
from vgpu_scheduler.engine.verdicts import VerdictCache
from vgpu_scheduler.model import DeviceInfo
from vgpu_scheduler.wire import keys, objects
from vgpu_scheduler.wire.objects import init_container_count

log = logging.getLogger(__name__)

DECODED_KEPT = 4096
"""Pods whose last decoded allocation `SchedulerState` keeps with its inputs (the most recent)."""


class SchedulerState:
    def __init__(self, vendors: Vendors | None = None, quota: QuotaManager | None = None) -> None:
        self.vendors = vendors if vendors is not None else Vendors(())
        """The registered vendors (requests, fits, allocation keys); none by default."""
        self.ledger = DeviceLedger(self.vendors.bound_class)
        self.quota = quota if quota is not None else QuotaManager.for_vendors(self.vendors)
        # uid -> decisions whose annotations have not been seen yet.
        self._reserved: dict[str, Reservation] = {}
        self.verdicts: VerdictCache[str] = VerdictCache()
        self.fits: FitScores = fit_scores_cache()
        self.demand = DemandTable()
        """Pod shapes recently decided with GPU policy best-fit (`engine.placement`)."""
        # uid -> (what its allocation was decoded from, that allocation), for the pods updated
        # last: a bound pod's later updates (bind phase, status) seldom change those inputs.
        self._decoded: dict[str, tuple[tuple[Any, ...], PodAllocation]] = {}

    # -- nodes -----------------------------------------------------------------------------------

    def set_node_devices(
        self,
        node_name: str,
        devices: list[DeviceInfo],
        cordoned: frozenset[str] = frozenset(),
        annotations: Mapping[str, str] | None = None,
    ) -> None:
        self.ledger.set_node_devices(node_name, devices, cordoned, annotations)

    def remove_node(self, node_name: str) -> None:
        self.ledger.remove_node(node_name)
        self.verdicts.drop_node(node_name)
        self.fits.drop_node(node_name)

    # -- pods ------------------------------------------------------------------------------------

    def on_pod(self, pod: Mapping[str, Any]) -> None:
        """A pod was added or updated (watch/list).

        A bound pod's annotations are the truth: they are counted and any reservation that says
        otherwise is discarded (a late bind of an older decision may have won). For a pod not yet
        bound, a pending reservation is the newest decision: only annotations equal to it confirm
        it; others (an earlier placement, a superseded bind's patch) are ignored until it lands.
        """
        key = pod_key(pod)
        uid, namespace, name = key
        if not uid:
            log.warning("ignoring pod %s/%s without uid", namespace, name)
            return
        if is_terminal(pod):
            self._drop(uid)
            return
        annotations = pod_annotations(pod)
        node = annotations.get(keys.VGPU_NODE)
        bound_to = objects.node_name(pod)
        reserved = self._reserved.get(uid)
        if not node:
            if bound_to and reserved is not None:
                log.warning("pod %s/%s was bound to %s without our annotations", namespace, name, bound_to)
                self._drop(uid)
            # Not ours, or our patch has not landed yet: a pending reservation stays counted.
            return
        if (
            reserved is not None
            and not bound_to
            and not reserved.confirmed_by(annotations)
            and not _newer(annotations.get(keys.VGPU_TIME, ""), reserved.time)
        ):
            return
        if reserved is not None and bound_to and not reserved.confirmed_by(annotations):
            log.warning(
                "pod %s/%s is bound to %s with another allocation than reserved on %s: the pod wins",
                namespace,
                name,
                bound_to,
                reserved.node,
            )
            self._drop(uid)
        previous = self.ledger.allocation(uid)
        shrunk = previous is not None and previous.init_shrunk
        alloc = self._allocation(pod, key, annotations, shrunk)
        if alloc is None:
            self._drop(uid)  # undecodable allocation: the pod is ignored (already logged)
            return
        self._count(alloc)
        self._reserved.pop(uid, None)

    def _allocation(
        self, pod: Mapping[str, Any], key: tuple[str, str, str], annotations: Mapping[str, str], shrunk: bool
    ) -> PodAllocation | None:
        """`allocation_from_annotations`, answered from `_decoded` when the pod's inputs to it are
        those of its last decoding (a MIG annotation, whose errors are logged, is always decoded)."""
        vendors = self.vendors
        inputs: tuple[Any, ...] | None = None
        if not annotations.get(keys.VGPU_MIG_ALLOCATIONS):
            n_init = init_container_count(pod)
            inputs = (
                key,
                shrunk or init_containers_finished(pod, n_init),
                n_init,
                annotations.get(keys.VGPU_NODE),
                [annotations.get(allocated) for _, allocated in vendors.allocation_keys.values()],
                counted_info(annotations, vendors.counted_pod_keys),
            )
            hit = self._decoded.get(key[0])
            if hit is not None and hit[0] == inputs:
                return hit[1]
        alloc = allocation_from_annotations(
            pod, key, annotations, shrunk, allocation_keys=vendors.allocation_keys,
            counted_keys=vendors.counted_pod_keys,
        )
        if inputs is not None and alloc is not None:
            decoded = self._decoded
            decoded.pop(key[0], None)
            if len(decoded) >= DECODED_KEPT:
                del decoded[next(iter(decoded))]  # the oldest: bounded, not one entry per pod
            decoded[key[0]] = (inputs, alloc)
        return alloc

    def on_pod_deleted(self, pod: Mapping[str, Any]) -> None:
        uid, _, _ = pod_key(pod)
        self._drop(uid)

    def reserve(self, pod: Mapping[str, Any], decision: Chosen) -> PodAllocation:
        """Count a filter decision now; the pod's annotations confirm it later."""
        uid, _, _ = pod_key(pod)
        self._drop(uid)
        alloc = pod_allocation(
            pod, decision.node, decision.devices, decision.mig, counted_keys=self.vendors.counted_pod_keys
        )
        self._count(alloc)
        self._reserved[uid] = Reservation(decision.node, dict(decision.annotations))
        return alloc

    def release(self, uid: str) -> None:
        """Drop a pod's allocation (reservation or confirmed), e.g. when the pod patch failed."""
        self._drop(uid)

    def forget(self, uid: str) -> None:
        """Called when a pod is filtered again: its earlier allocation must not count twice (§5.2)."""
        self._drop(uid)

    def is_reserved(self, uid: str) -> bool:
        return uid in self._reserved

    def reservations(self) -> list[tuple[str, str]]:
        """(uid, vgpu-time) of every decision whose annotations have not been seen yet."""
        return [(uid, reserved.time) for uid, reserved in self._reserved.items()]

    def reserved_node(self, uid: str) -> str | None:
        reserved = self._reserved.get(uid)
        return reserved.node if reserved is not None else None

    def allocation(self, uid: str) -> PodAllocation | None:
        return self.ledger.allocation(uid)

    def pods(self) -> Iterable[PodAllocation]:
        return self.ledger.pods()

    def _count(self, alloc: PodAllocation) -> None:
        if self.ledger.allocation(alloc.uid) == alloc:
            return  # most pod updates (status, bind phase) do not change the allocation
        old = self.ledger.upsert_pod(alloc)
        if old is not None:
            self.quota.remove_usage(old.namespace, old.devices)
        self.quota.add_usage(alloc.namespace, alloc.devices)

    def _drop(self, uid: str) -> None:
        self._reserved.pop(uid, None)
        self._decoded.pop(uid, None)
        old = self.ledger.remove_pod(uid)
        if old is not None:
            self.quota.remove_usage(old.namespace, old.devices)

    # -- quotas ----------------------------------------------------------------------------------

    def on_quota(self, obj: Mapping[str, Any]) -> None:
        self.quota.upsert_quota(obj)

    def on_quota_deleted(self, obj: Mapping[str, Any]) -> None:
        self.quota.delete_quota(obj)


@dataclass(slots=True, frozen=True)
class Reservation:
    """A filter decision counted before its annotations reach the pod."""

    node: str
    annotations: dict[str, str]
    """The §4.1 annotations the bind writes: node, time and the encoded allocation."""

    @property
    def time(self) -> str:
        return self.annotations.get(keys.VGPU_TIME, "")

    def confirmed_by(self, pod_annotations: Mapping[str, str]) -> bool:
        return all(pod_annotations.get(k) == v for k, v in self.annotations.items())


def _newer(event_time: str, reserved_time: str) -> bool:
    """True when `event_time` (hami.io/vgpu-time, unix seconds) is strictly after the reservation:
    another writer (a second replica) decided later than we did."""
    try:
        return int(event_time) > int(reserved_time)
    except ValueError:
        return False
