"""Enflame whole GCU (HAMi `pkg/device/enflame/gcu.go`, vendor key `GCU`).

* Inventory: node **capacity** of the count resource, one device per unit: id `<node>-GCU-<i>`,
  count 1, devmem 100, devcore 100, type `GCU`. A missing or zero capacity is the error
  `device not found <resource>`; a non-integer capacity too; a negative one gives no device.
* Health: healthy iff the capacity is > 0, always re-read; no handshake, nothing to clean up.
* Request: the count (limits, else requests, `AsInt64`, wrapped to int32) asks that many whole
  cards: memreq 100, percentage 100, cores 100. No memory/core resources.
* Fit: per device from the end: CardNotHealth, CardTypeMismatch, then any use at all is an
  ExclusiveDeviceAllocateConflict (no uuid/type annotations, no cordon, no mutex step).
* Allocation `hami.io/enflame-gcu-devices-{to-allocate,allocated}`; never locks; admission only
  recognises a count in `limits`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, tzinfo

from vgpu_scheduler.devices import resources as res
from vgpu_scheduler.devices.base import GenericVendor
from vgpu_scheduler.devices.protocol import FitResult, Health, Obj, PodFitContext, ResourceNames
from vgpu_scheduler.model import (
    ContainerDevice,
    ContainerDeviceRequest,
    ContainerDevices,
    DeviceInfo,
    DeviceUsage,
)
from vgpu_scheduler.wire import objects
from vgpu_scheduler.wire import reasons as R
from vgpu_scheduler.wire.inventory import InventoryError

GCU = "GCU"
TO_ALLOCATE = "hami.io/enflame-gcu-devices-to-allocate"
ALLOCATED = "hami.io/enflame-gcu-devices-allocated"
WHOLE = 100
"""Memory, percentage and cores of a whole-card request and of each device."""


def capacity_count(node: Obj, name: str) -> int | None:
    """`status.capacity[name]` as `Quantity.AsInt64` reads it: 0 when absent, None when not an integer."""
    capacity = objects.as_mapping(objects.status(node).get("capacity"))
    if not name or name not in capacity:
        return 0
    return res.as_int(capacity[name])


class GcuVendor(GenericVendor):
    key = GCU
    allocation_keys = (TO_ALLOCATE, ALLOCATED)
    handshake_key = None
    lock_key = None
    register_key = None

    def __init__(self, count_resource: str) -> None:
        super().__init__(ResourceNames(count_resource))

    # -- requests ---------------------------------------------------------------------------------

    def request(self, container: Obj) -> ContainerDeviceRequest | None:
        resources = res.resources_of(container)
        if resources is None:
            return None
        count = res.as_int(res.lookup(resources, self.names.count))
        if count is None:
            return None
        nums = res.int32(count)
        if nums <= 0:  # Resourcereqs keeps Nums > 0 only
            return None
        return ContainerDeviceRequest(
            nums=nums, type=GCU, memreq=WHOLE, mem_percentage_req=WHOLE, coresreq=WHOLE
        )

    # -- registration -----------------------------------------------------------------------------

    def node_devices(self, node: Obj) -> list[DeviceInfo]:
        count = capacity_count(node, self.names.count)
        if count is None or count == 0:
            raise InventoryError(f"device not found {self.names.count}")
        name = objects.name(node)
        return [
            DeviceInfo(
                id=f"{name}-{GCU}-{i}", index=i, count=1, devmem=WHOLE, devcore=WHOLE, type=GCU, numa=0,
                health=True, device_vendor=GCU,
            )
            for i in range(max(count, 0))
        ]

    def check_health(self, node: Obj, now: datetime, tz: tzinfo | None) -> Health:
        count = capacity_count(node, self.names.count)
        return Health(healthy=(count or 0) > 0, need_update=True)

    # -- fit --------------------------------------------------------------------------------------

    def ladder(
        self, request: ContainerDeviceRequest, devices: Sequence[DeviceInfo], usage: Sequence[DeviceUsage],
        order: Sequence[int], *, ctx: PodFitContext, cordoned: frozenset[str],
        allocated: Sequence[ContainerDevices] = (), quick: bool = False,
    ) -> FitResult | str | None:
        """HAMi's GCU Fit over `order` from the end. Every device is judged on its own and the
        failure reason counts them all: the quick verdict is order-free."""
        remaining = request.nums
        taken: list[int] = []
        reasons: dict[str, int] = {}
        for pos in reversed(order):
            dev = devices[pos]
            u = usage[pos]
            if not dev.health or u.mig_conflict:
                reason = R.CARD_NOT_HEALTH
            elif request.type != GCU:
                reason = R.CARD_TYPE_MISMATCH
            elif u.used > 0:
                reason = R.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT
            else:
                if remaining > 0:
                    remaining -= 1
                    taken.append(pos)
                if remaining == 0:
                    if quick:
                        return ""
                    mem, cores = request.memreq, request.coresreq
                    picked = [devices[p] for p in taken]
                    entries = [ContainerDevice(d.id, GCU, mem, cores, d.index) for d in picked]
                    return FitResult(True, entries, taken)
                continue
            reasons[reason] = reasons.get(reason, 0) + 1
        if taken:
            reasons[R.ALLOCATED_CARDS_INSUFFICIENT_REQUEST] = len(taken)
        text = R.gen_reason(reasons, len(order))
        return text if quick else FitResult(False, reason=text)
