"""Per-container device requests of a pod (§5.1, NVIDIA `GenerateResourceRequests`).

Containers are plain Kubernetes JSON dicts. Quantities go through `quantity_as_int64` (Go's
`Quantity.AsInt64` on the API server's canonical text); a resource is looked up in `limits`
first and, only when the name is absent there, in `requests` — presence decides, not validity,
so an unparsable limit is not rescued by a valid request (as in HAMi).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from vgpu_scheduler.config import NvidiaConfig
from vgpu_scheduler.model import NVIDIA, PERCENTAGE_UNSET, ContainerDeviceRequest, ContainerRequests
from vgpu_scheduler.wire import objects
from vgpu_scheduler.wire.objects import init_container_count as init_container_count
from vgpu_scheduler.wire.quantity import quantity_as_int64

INT32_MAX = 2**31 - 1

_MISSING = object()


def _int32(value: int) -> int:
    """Go's `int32(x)` conversion of an int64: keep the low 32 bits, two's complement."""
    return (value + 2**31) % 2**32 - 2**31


def _lookup(resources: Mapping[str, Any], name: str) -> object:
    """`limits[name]`, else `requests[name]`, else _MISSING."""
    if not name:
        return _MISSING
    for section in ("limits", "requests"):
        values = resources.get(section)
        if isinstance(values, Mapping) and name in values:
            return values[name]
    return _MISSING


def _as_int(value: object) -> int | None:
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        return quantity_as_int64(value)
    return None


def container_requests(container: Mapping[str, Any], cfg: NvidiaConfig) -> ContainerDeviceRequest | None:
    """The NVIDIA request of one container, or None when it asks for nothing (or asks invalidly).

    A request with Nums <= 0 is returned as is; `pod_requests` drops it (HAMi keeps only Nums > 0).
    """
    resources = container.get("resources")
    if not isinstance(resources, Mapping):
        return None
    count = _as_int(_lookup(resources, cfg.resource_count_name))
    if count is None:
        return None

    memory = 0
    raw_mem = _lookup(resources, cfg.resource_memory_name)
    if raw_mem is not _MISSING:
        mem = _as_int(raw_mem)
        factor = max(cfg.memory_factor, 1)
        # HAMi rejects the whole container rather than silently under-allocating (e.g. "16Gi").
        if mem is None or mem < 0 or mem > INT32_MAX // factor:
            return None
        memory = mem * factor

    percentage = PERCENTAGE_UNSET
    raw_pct = _lookup(resources, cfg.resource_memory_percentage_name)
    if raw_pct is not _MISSING:
        pct = _as_int(raw_pct)
        if pct is not None:
            pct = min(pct, 100)
            # 0 or less would mean "no limit" to HAMi-core, so it counts as unset.
            percentage = pct if pct > 0 else PERCENTAGE_UNSET

    if percentage == PERCENTAGE_UNSET and memory == 0:
        if cfg.default_memory != 0:
            memory = cfg.default_memory
        else:
            percentage = 100

    cores = cfg.default_cores
    raw_cores = _lookup(resources, cfg.resource_core_name)
    if raw_cores is not _MISSING:
        parsed = _as_int(raw_cores)
        if parsed is not None:
            cores = _int32(parsed)

    return ContainerDeviceRequest(
        nums=_int32(count),
        type=NVIDIA,
        memreq=_int32(memory),
        mem_percentage_req=percentage,
        coresreq=cores,
    )


def pod_requests(pod: Mapping[str, Any], cfg: NvidiaConfig) -> list[ContainerRequests]:
    """One entry per container, init containers first; vendor key -> request, Nums > 0 only."""
    out: list[ContainerRequests] = []
    for container in (*objects.init_containers(pod), *objects.containers(pod)):
        req = container_requests(container, cfg)
        out.append({NVIDIA: req} if req is not None and req.nums > 0 else {})
    return out


def pod_has_device_requests(reqs: Sequence[ContainerRequests]) -> bool:
    """True when some container asks for some vendor's devices (else Filter echoes the nodes)."""
    return any(reqs)
