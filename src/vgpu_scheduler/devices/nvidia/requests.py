"""NVIDIA `GenerateResourceRequests`: what one container asks of NVIDIA (§5.1)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vgpu_scheduler.config import NvidiaConfig
from vgpu_scheduler.devices import resources as res
from vgpu_scheduler.model import NVIDIA, PERCENTAGE_UNSET, ContainerDeviceRequest


def nvidia_request(container: Mapping[str, Any], cfg: NvidiaConfig) -> ContainerDeviceRequest | None:
    """The NVIDIA request of one container, or None when it asks for nothing (or asks invalidly).

    A request with Nums <= 0 is returned as is; the engine keeps only Nums > 0 (as HAMi).
    """
    resources = res.resources_of(container)
    if resources is None:
        return None
    count = res.as_int(res.lookup(resources, cfg.resource_count_name))
    if count is None:
        return None

    memory = 0
    raw_mem = res.lookup(resources, cfg.resource_memory_name)
    if raw_mem is not res.MISSING:
        mem = res.as_int(raw_mem)
        factor = max(cfg.memory_factor, 1)
        # HAMi rejects the whole container rather than silently under-allocating (e.g. "16Gi").
        if mem is None or mem < 0 or mem > res.INT32_MAX // factor:
            return None
        memory = mem * factor

    percentage = PERCENTAGE_UNSET
    raw_pct = res.lookup(resources, cfg.resource_memory_percentage_name)
    if raw_pct is not res.MISSING:
        pct = res.as_int(raw_pct)
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
    raw_cores = res.lookup(resources, cfg.resource_core_name)
    if raw_cores is not res.MISSING:
        parsed = res.as_int(raw_cores)
        if parsed is not None:
            cores = res.int32(parsed)

    return ContainerDeviceRequest(
        nums=res.int32(count),
        type=NVIDIA,
        memreq=res.int32(memory),
        mem_percentage_req=percentage,
        coresreq=cores,
    )
