"""Cambricon MLU (HAMi `pkg/device/cambricon`): dynamic sMLU slices read from node capacity.

Section `cambricon` (`resourceCountName`, `resourceMemoryName`, `resourceCoreName`); the
`--cambricon-mlu-name/-memory/-cores` flags are overwritten by the section, empty when it is
missing (HAMi assigns the config values unconditionally). No inventory annotation and no
handshake: the node's capacity of the core resource says how many MLUs it has (100 vcores per
MLU) and the memory resource their memory in 256 MiB units; CheckHealth is always healthy.

A request's memory is in 256 MiB units (the memory factor, also applied to quota limits); cores
default to 100. Fit is the common ladder without type annotations (HAMi declares
`cambricon.com/use-mlutype` but never reads it) and with the uuid annotations
`cambricon.com/{use,nouse}-gpuuuid`, plus the ResourceQuota check. Allocations go under
`hami.io/cambricon-mlu-devices-{to-allocate,allocated}`, with the device plugin's
`CAMBRICON_DSMLU_PROFILE` (`<index>_<cores>_<memory / 256>` of the first allocated device) and
`CAMBRICON_DSMLU_ASSIGNED: "false"`.

The node lock is Cambricon's own `cambricon.com/dsmlu.lock`: a bare RFC 3339 time naming no
holder, taken over once older than two minutes, removed by the Cambricon device plugin after it
allocated the pod. The shared `hami.io/mutex.lock` is not taken for MLUs (HAMi's LockNode for
Cambricon only writes its own annotation).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, tzinfo
from typing import Any

from vgpu_scheduler.config import DeviceConfig
from vgpu_scheduler.devices import resources as res
from vgpu_scheduler.devices.base import GenericVendor
from vgpu_scheduler.devices.protocol import Health, NodeLockSpec, Obj, Vendor, VendorFlags
from vgpu_scheduler.devices.resources import trunc_div
from vgpu_scheduler.devices.sections import Section
from vgpu_scheduler.devices.spec import RESOURCE_NAME_KEYS, VendorFlag, VendorSpec
from vgpu_scheduler.model import ContainerDeviceRequest, DeviceInfo, PodSingleDevice
from vgpu_scheduler.wire.inventory import InventoryError

MLU = "MLU"
TO_ALLOCATE = "hami.io/cambricon-mlu-devices-to-allocate"
ALLOCATED = "hami.io/cambricon-mlu-devices-allocated"
USE_UUID = "cambricon.com/use-gpuuuid"
NOUSE_UUID = "cambricon.com/nouse-gpuuuid"
LOCK = "cambricon.com/dsmlu.lock"
PROFILE = "CAMBRICON_DSMLU_PROFILE"
ASSIGNED = "CAMBRICON_DSMLU_ASSIGNED"
MEMORY_UNIT = 256
"""MiB per unit of the memory resource (HAMi's MemoryFactor for Cambricon)."""
CORES_PER_MLU = 100
LOCK_EXPIRY_SECONDS = 120.0

DSMLU_LOCK = NodeLockSpec(
    LOCK,
    names_holder=False,
    expiry_seconds=LOCK_EXPIRY_SECONDS,
    busy_message="node {node} has been locked within 2 minutes",
)
"""HAMi's `setNodeLock`/`LockNode`: RFC 3339 time, no owner, stolen after 2 minutes."""


class CambriconVendor(GenericVendor):
    key = MLU
    allocation_keys = (TO_ALLOCATE, ALLOCATED)
    handshake_key = None
    register_key = None
    use_uuid_key = USE_UUID
    nouse_uuid_key = NOUSE_UUID
    default_cores = 100
    checks_quota = True
    node_lock = DSMLU_LOCK

    # -- requests ---------------------------------------------------------------------------------

    def request(self, container: Obj) -> ContainerDeviceRequest | None:
        """HAMi's GenerateResourceRequests for MLUs: count and cores wrap to int32 (no range
        check); memory must be an integer in [0, MaxInt32/256], else the whole request drops."""
        resources = res.resources_of(container)
        if resources is None:
            return None
        count = res.as_int(res.lookup(resources, self.names.count))
        if count is None:
            return None
        nums = res.int32(count)
        if nums <= 0:
            return None
        memory = 0
        raw = res.lookup(resources, self.names.memory)
        if raw is not res.MISSING:
            units = res.as_int(raw)
            if units is None or units < 0 or units > res.INT32_MAX // MEMORY_UNIT:
                return None
            memory = units * MEMORY_UNIT
        cores = self.default_cores
        raw = res.lookup(resources, self.names.cores)
        if raw is not res.MISSING:
            parsed = res.as_int(raw)
            if parsed is not None:
                cores = res.int32(parsed)
        return ContainerDeviceRequest(
            nums=nums, type=MLU, memreq=memory, mem_percentage_req=100 if memory == 0 else 0, coresreq=cores,
        )

    # -- registration -------------------------------------------------------------------------------

    def node_devices(self, node: Obj) -> list[DeviceInfo]:
        """One MLU per 100 vcores of capacity (the last one may be partial), each with an equal
        share of the capacity's memory units × 256 × 100 / vcores."""
        capacity = _capacity(node)
        cores_name = self.names.cores
        cards = res.as_int(capacity.get(cores_name, 0)) if cores_name else 0
        if cards is None or cards == 0:
            raise InventoryError(f"device not found {cores_name}")
        memory = res.as_int(capacity.get(self.names.memory, 0)) if self.names.memory else 0
        devmem = res.int32(trunc_div((memory or 0) * MEMORY_UNIT * 100, cards))
        name = str((node.get("metadata") or {}).get("name") or "")
        out: list[DeviceInfo] = []
        i = 0
        while i * CORES_PER_MLU < cards:
            out.append(DeviceInfo(
                id=f"{name}-cambricon-mlu-{i}", index=i, count=100, devmem=devmem, devcore=100, type=MLU,
                numa=0, health=True, device_vendor=MLU,
            ))
            i += 1
        return out

    def check_health(self, node: Obj, now: datetime, tz: tzinfo | None) -> Health:
        return Health(healthy=True, need_update=True)

    # -- annotations --------------------------------------------------------------------------------

    def extra_annotations(
        self, per_container: PodSingleDevice, *, node: str, now: int, pod: Obj | None
    ) -> dict[str, str]:
        out = {ASSIGNED: "false"}
        first = next((ctr[0] for ctr in per_container if ctr), None)
        if first is not None:  # the first container holding an MLU names the profile
            out[PROFILE] = f"{first.idx}_{first.usedcores}_{trunc_div(first.usedmem, MEMORY_UNIT)}"
        return out


def _capacity(node: Obj) -> dict[str, Any]:
    status = node.get("status")
    capacity = status.get("capacity") if isinstance(status, dict) else None
    return capacity if isinstance(capacity, dict) else {}


def vendors(config: DeviceConfig, flags: VendorFlags) -> Sequence[Vendor]:
    names = Section(config.other_vendors.get("cambricon")).resource_names(memory_factor=MEMORY_UNIT)
    return [CambriconVendor(names)]


SPEC = VendorSpec(
    "cambricon",
    __name__,
    flags=(
        VendorFlag("cambricon-mlu-cores", "cambricon.com/mlu.smlu.vcore", "cambricon mlu core resource"),
        VendorFlag("cambricon-mlu-memory", "cambricon.com/mlu.smlu.vmemory", "cambricon mlu memory resource"),
        VendorFlag("cambricon-mlu-name", "cambricon.com/mlu", "cambricon mlu resource count"),
    ),
    keys=dict.fromkeys(RESOURCE_NAME_KEYS),
)
