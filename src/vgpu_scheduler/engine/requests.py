"""Per-container device requests of a pod (§5.1, HAMi `Resourcereqs`).

One entry per container, init containers first; each entry maps a vendor key to what the
container asks of that vendor (`Vendor.request`), keeping only requests with Nums > 0.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from vgpu_scheduler.devices.protocol import Vendors
from vgpu_scheduler.model import ContainerRequests
from vgpu_scheduler.wire import objects
from vgpu_scheduler.wire.objects import init_container_count as init_container_count
from vgpu_scheduler.wire.quantity import QuantityError, parse_quantity


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


def _quantity_problem(value: object) -> str:
    """Why `value` is not a Kubernetes quantity ("" when it is; null is Go's zero quantity)."""
    if value is None:
        return ""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return f"a quantity must be a string or a number, not {type(value).__name__}"
    try:
        parse_quantity(repr(value) if isinstance(value, float) else str(value))
    except QuantityError as exc:
        return str(exc)
    return ""


def invalid_quantity(pod: Mapping[str, Any], managed: frozenset[str]) -> str:
    """The first quantity of a device resource (`managed`: every vendor's names) in `pod` that does
    not parse, as one line naming the pod, the container and the quantity; "" when all parse.

    The vendors read such a value as absent (Go's AsInt64 fails), so without this check a pod with
    `nvidia.com/gpumem: 12Gx` would get a whole GPU's memory, and one with `nvidia.com/gpu: abc` no
    GPU at all. A real API server refuses these pods at creation; they come from snapshots, the
    embedded cluster, pod files and hand-made filter calls."""
    init, app = objects.init_containers(pod), objects.containers(pod)
    for kind, container in (*(("init container", c) for c in init), *(("container", c) for c in app)):
        problem = _container_problem(container, managed)
        if problem:
            where = f"pod {objects.namespace(pod)}/{objects.name(pod)}: {kind} {container.get('name', '')}"
            return f"{where}: {problem}"
    return ""


def _container_problem(container: Mapping[str, Any], managed: frozenset[str]) -> str:
    resources = container.get("resources")
    if not isinstance(resources, Mapping):
        return ""
    for section in ("limits", "requests"):
        values = resources.get(section)
        if not isinstance(values, Mapping):
            continue
        for resource, value in values.items():
            problem = _quantity_problem(value) if resource in managed else ""
            if problem:
                shown = json.dumps(value, default=str)
                return f"invalid quantity {resource}={shown} in {section}: {problem}"
    return ""


def pod_has_device_requests(reqs: Sequence[ContainerRequests]) -> bool:
    """True when some container asks for some vendor's devices (else Filter echoes the nodes)."""
    return any(reqs)


class PodRequestsMemo:
    """`pod_requests` per pod object version: a pod is filtered again on every scheduling cycle
    (kube-scheduler retries it after each cluster event), and its containers only change with its
    resourceVersion. Pods without a uid and resourceVersion (hand-built ones) are never memoised."""

    def __init__(self, vendors: Vendors, max_entries: int = 4096) -> None:
        self.vendors = vendors
        self.managed = vendors.managed_resources()
        self.max_entries = max_entries
        self._known: dict[tuple[str, str], tuple[list[ContainerRequests], str]] = {}

    def __call__(self, pod: Mapping[str, Any]) -> list[ContainerRequests]:
        return self._entry(pod)[0]

    def invalid(self, pod: Mapping[str, Any]) -> str:
        """`invalid_quantity` of the pod with every vendor's resource names."""
        return self._entry(pod)[1]

    def _entry(self, pod: Mapping[str, Any]) -> tuple[list[ContainerRequests], str]:
        meta = pod.get("metadata")
        uid = rv = None
        if isinstance(meta, Mapping):
            uid, rv = meta.get("uid"), meta.get("resourceVersion")
        if not (isinstance(uid, str) and uid and isinstance(rv, str) and rv):
            return pod_requests(pod, self.vendors), invalid_quantity(pod, self.managed)
        key = (uid, rv)
        known = self._known.get(key)
        if known is None:
            if len(self._known) >= self.max_entries:
                del self._known[next(iter(self._known))]  # the oldest: insertion order
            known = self._known[key] = (pod_requests(pod, self.vendors), invalid_quantity(pod, self.managed))
        return known
