"""What one scheduled pod takes from its node, as the ledger counts it (§5.2).

A pod is counted when it carries `hami.io/vgpu-node` and is not terminal. Its allocation is read from
the `-allocated` keys (the `-to-allocate` keys are consumed by the device plugin) and **collapsed**:
init containers run one after the other and before the app containers, so per device the pod holds
at most max(init peak, app sum) — never the plain sum of every container.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from sys import intern
from typing import Any

from vgpu_scheduler.model import ContainerDevice, MigAllocation, PodDevices
from vgpu_scheduler.wire import keys, objects
from vgpu_scheduler.wire.allocation import AllocationError, decode_pod_devices
from vgpu_scheduler.wire.mig import MigAllocationError, decode_mig_allocations
from vgpu_scheduler.wire.objects import as_list, as_mapping
from vgpu_scheduler.wire.objects import init_container_count as init_container_count

# Kept under the ledger's name: callers import it from here.
pod_annotations = objects.annotations

log = logging.getLogger(__name__)

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


@dataclass(slots=True, frozen=True)
class PodAllocation:
    """The collapsed usage of one pod on one node."""

    uid: str
    namespace: str
    name: str
    node: str
    devices: PodDevices
    """Vendor key -> exactly one container entry, sorted by UUID, with `slots` set (§5.2)."""
    mig: tuple[MigAllocation, ...] = ()
    init_shrunk: bool = False
    """True once usage was reduced to the app containers (all init containers exited 0)."""
    annotations: Mapping[str, str] = field(default_factory=dict, compare=False, hash=False)
    """The pod's annotations (each device it uses lists them in `DeviceUsage.pod_infos`)."""


def pod_key(pod: Mapping[str, Any]) -> tuple[str, str, str]:
    """(uid, namespace, name) of a pod dict; missing fields are empty strings."""
    return objects.uid(pod), objects.namespace(pod), objects.name(pod)


def is_terminal(pod: Mapping[str, Any]) -> bool:
    return objects.phase(pod) in TERMINAL_PHASES


def init_containers_finished(pod: Mapping[str, Any], n_init: int | None = None) -> bool:
    """Every init container of the spec reports `terminated` with exit code 0."""
    if n_init is None:
        n_init = init_container_count(pod)
    if n_init == 0:
        return False
    statuses = as_list(objects.status(pod).get("initContainerStatuses"))
    if len(statuses) < n_init:
        return False
    for status in statuses:
        terminated = as_mapping(as_mapping(as_mapping(status).get("state")).get("terminated"))
        if not terminated or terminated.get("exitCode") != 0:
            return False
    return True


@dataclass(slots=True)
class _Acc:
    type: str
    init_seen: bool = False
    init_mem: int = 0
    init_cores: int = 0
    app_n: int = 0
    app_mem: int = 0
    app_cores: int = 0


def collapse_pod_devices(devices: PodDevices, n_init: int, app_only: bool = False) -> PodDevices:
    """Collapse per-container allocations into one entry per (vendor, uuid) (§5.2).

    Containers `[0, n_init)` are init containers. Init peak = max mem / max cores / 1 slot; app sum
    = Σ mem / Σ cores / one slot per entry; effective = max(init, app) per dimension with at least
    one slot. `app_only` (init containers all finished) keeps the app sums alone; devices used only
    by init containers then disappear. Collapsed entries carry no `idx`: it is never encoded, and a
    decoded entry's position says nothing about the device.
    """
    out: PodDevices = {}
    for vendor, containers in devices.items():
        acc: dict[str, _Acc] = {}
        for ci, container in enumerate(containers):
            is_init = ci < n_init
            for dev in container:
                a = acc.get(dev.uuid)
                if a is None:
                    a = acc[dev.uuid] = _Acc(dev.type)
                if is_init:
                    a.init_seen = True
                    a.init_mem = max(a.init_mem, dev.usedmem)
                    a.init_cores = max(a.init_cores, dev.usedcores)
                else:
                    a.app_n += 1
                    a.app_mem += dev.usedmem
                    a.app_cores += dev.usedcores
        entries: list[ContainerDevice] = []
        for uuid in sorted(acc):
            a = acc[uuid]
            if app_only:
                if a.app_n == 0:
                    continue
                entries.append(ContainerDevice(uuid, a.type, a.app_mem, a.app_cores, 0, a.app_n))
            else:
                slots = max(1 if a.init_seen else 0, a.app_n, 1)
                mem = max(a.init_mem, a.app_mem)
                cores = max(a.init_cores, a.app_cores)
                entries.append(ContainerDevice(uuid, a.type, mem, cores, 0, slots))
        if entries:
            out[vendor] = [entries]
    return out


def pod_allocation(
    pod: Mapping[str, Any],
    node: str,
    devices: PodDevices,
    mig: Sequence[MigAllocation] = (),
    *,
    previously_shrunk: bool = False,
    key: tuple[str, str, str] | None = None,
    counted_keys: frozenset[str] | None = None,
) -> PodAllocation:
    """Build the collapsed allocation of `pod` from its per-container devices (init first).
    `counted_keys`: the annotations to keep (`Vendors.counted_pod_keys`; None keeps them all)."""
    uid, namespace, name = key if key is not None else pod_key(pod)
    n_init = init_container_count(pod)
    shrunk = previously_shrunk or init_containers_finished(pod, n_init)
    collapsed = collapse_pod_devices(devices, n_init, app_only=shrunk)
    info = counted_info(pod_annotations(pod), counted_keys)
    # Interned: a fleet has a few namespaces and nodes but one copy of each name per pod object.
    return PodAllocation(uid, intern(namespace), name, intern(node), collapsed, tuple(mig), shrunk, info)


NO_INFO: Mapping[str, str] = {}
"""Shared by every counted pod with none of the kept keys (read only: typed as a Mapping)."""


def counted_info(annotations: Mapping[str, str], keys: frozenset[str] | None) -> Mapping[str, str]:
    """What the ledger keeps of a counted pod's annotations: only the keys some vendor reads (a
    fleet of 400,000 pods would otherwise hold a copy of every pod's annotations)."""
    if keys is None:
        return annotations
    picked = {k: annotations[k] for k in keys if k in annotations} if keys else None
    return picked or NO_INFO


def pod_allocation_from_pod(
    pod: Mapping[str, Any],
    *,
    previously_shrunk: bool = False,
    allocation_keys: Mapping[str, tuple[str, str]] = keys.ALLOCATION_KEYS,
) -> PodAllocation | None:
    """The allocation a watched pod holds, or None when it holds nothing countable.

    None for pods without `hami.io/vgpu-node`, terminal pods, and pods whose `-allocated` annotation
    does not decode (logged; only that pod is affected). `previously_shrunk` carries the "init
    containers finished" state of an earlier version of the pod: once shrunk, always shrunk (§5.2).
    A MIG annotation that does not decode is logged and read as "no MIG placements", which makes any
    MIG device the pod uses fail closed (§5.2).
    """
    if is_terminal(pod):
        return None
    return allocation_from_annotations(
        pod, pod_key(pod), pod_annotations(pod), previously_shrunk, allocation_keys=allocation_keys
    )


def allocation_from_annotations(
    pod: Mapping[str, Any],
    key: tuple[str, str, str],
    annotations: Mapping[str, str],
    previously_shrunk: bool = False,
    *,
    allocation_keys: Mapping[str, tuple[str, str]] = keys.ALLOCATION_KEYS,
    counted_keys: frozenset[str] | None = None,
) -> PodAllocation | None:
    """`pod_allocation_from_pod` for a non-terminal pod whose key and annotations are at hand;
    `allocation_keys` are the registered vendors' (vendor key -> (to-allocate, allocated))."""
    node = annotations.get(keys.VGPU_NODE)
    if not node:
        return None
    _, namespace, name = key
    try:
        devices = decode_pod_devices(annotations, allocation_keys)
    except AllocationError as exc:
        log.warning("ignoring pod %s/%s: bad allocation annotation: %s", namespace, name, exc)
        return None
    mig: list[MigAllocation] = []
    raw_mig = annotations.get(keys.VGPU_MIG_ALLOCATIONS)
    if raw_mig:
        try:
            mig = decode_mig_allocations(raw_mig)
        except MigAllocationError as exc:
            log.warning("pod %s/%s: ignoring bad %s: %s", namespace, name, keys.VGPU_MIG_ALLOCATIONS, exc)
    return pod_allocation(
        pod, node, devices, mig, previously_shrunk=previously_shrunk, key=key, counted_keys=counted_keys
    )
