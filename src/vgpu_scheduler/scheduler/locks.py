"""Which node locks a bind takes, and who may wait on one.

One concern: reading a pod's requests and labels for the §6.1 lock rules, shared by the filter
(lock-aware placement) and the bind (which locks it takes, and whether it waits on contention).
Nothing here takes or releases a lock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from vgpu_scheduler.devices.protocol import NodeLockSpec, Vendors
from vgpu_scheduler.engine.requests import pod_requests
from vgpu_scheduler.model import ContainerRequests
from vgpu_scheduler.wire import keys, objects


def pod_node_locks(
    pod: Mapping[str, Any], vendors: Vendors, requests: Sequence[ContainerRequests] | None = None
) -> list[NodeLockSpec]:
    """The node locks a bind of `pod` takes, one per distinct key, sorted by key. HAMi locks the
    node for a vendor only when a regular (non-init) container requests it and the vendor locks
    (§6.1); vendors naming one key share that lock (`hami.io/mutex.lock`: one lock, re-entered)."""
    n_init = objects.init_container_count(pod)
    found: dict[str, NodeLockSpec] = {}
    if requests is None:
        requests = pod_requests(pod, vendors)
    for creq in requests[n_init:]:
        for key in creq:
            vendor = vendors.get(key)
            if vendor is not None and vendor.node_lock is not None:
                found.setdefault(vendor.node_lock.key, vendor.node_lock)
    return [found[key] for key in sorted(found)]


def locking_request(pod: Mapping[str, Any], vendors: Vendors) -> bool:
    """Does a bind of `pod` take any node lock?"""
    return bool(pod_node_locks(pod, vendors))


def takes_shared_lock(
    requests: Sequence[ContainerRequests], pod: Mapping[str, Any], vendors: Vendors
) -> bool:
    """Does a bind of `pod` (asking `requests`) take the shared owner-format lock
    (`hami.io/mutex.lock`), the one lock-aware placement watches?"""
    return any(spec.names_holder for spec in pod_node_locks(pod, vendors, requests))


def is_pod_group_member(pod: Mapping[str, Any]) -> bool:
    """HAMi's PodGroup test: label scheduling.x-k8s.io/pod-group or spec.schedulingGroup.podGroupName."""
    meta = pod.get("metadata")
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    if isinstance(labels, Mapping) and labels.get(keys.POD_GROUP_LABEL):
        return True
    spec = pod.get("spec")
    group = spec.get("schedulingGroup") if isinstance(spec, Mapping) else None
    return isinstance(group, Mapping) and bool(group.get("podGroupName"))
