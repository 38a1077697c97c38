"""Per-container device requests of a pod (§5.1, HAMi `Resourcereqs`).

One entry per container, init containers first; each entry maps a vendor key to what the
container asks of that vendor (`Vendor.request`), keeping only requests with Nums > 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from vgpu_scheduler.devices.protocol import Vendors
from vgpu_scheduler.model import ContainerRequests
from vgpu_scheduler.wire import objects
from vgpu_scheduler.wire.objects import init_container_count as init_container_count


def container_requests(container: Mapping[str, Any], vendors: Vendors) -> ContainerRequests:
    """What one container asks of every registered vendor (registration order)."""
    out: ContainerRequests = {}
    for vendor in vendors:
        req = vendor.request(container)
        if req is not None and req.nums > 0:
            out[vendor.key] = req
    return out


def pod_requests(pod: Mapping[str, Any], vendors: Vendors) -> list[ContainerRequests]:
    """One entry per container, init containers first; vendor key -> request, Nums > 0 only."""
    return [container_requests(c, vendors) for c in (*objects.init_containers(pod), *objects.containers(pod))]


def pod_has_device_requests(reqs: Sequence[ContainerRequests]) -> bool:
    """True when some container asks for some vendor's devices (else Filter echoes the nodes)."""
    return any(reqs)


class PodRequestsMemo:
    """`pod_requests` per pod object version: a pod is filtered again on every scheduling cycle
    (kube-scheduler retries it after each cluster event), and its containers only change with its
    resourceVersion. Pods without a uid and resourceVersion (hand-built ones) are never memoised."""

    def __init__(self, vendors: Vendors, max_entries: int = 4096) -> None:
        self.vendors = vendors
        self.max_entries = max_entries
        self._known: dict[tuple[str, str], list[ContainerRequests]] = {}

    def __call__(self, pod: Mapping[str, Any]) -> list[ContainerRequests]:
        meta = pod.get("metadata")
        uid = rv = None
        if isinstance(meta, Mapping):
            uid, rv = meta.get("uid"), meta.get("resourceVersion")
        if not (isinstance(uid, str) and uid and isinstance(rv, str) and rv):
            return pod_requests(pod, self.vendors)
        key = (uid, rv)
        known = self._known.get(key)
        if known is None:
            if len(self._known) >= self.max_entries:
                del self._known[next(iter(self._known))]  # the oldest: insertion order
            known = self._known[key] = pod_requests(pod, self.vendors)
        return known
