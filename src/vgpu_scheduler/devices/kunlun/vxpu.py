"""Kunlun vXPU (HAMi `pkg/device/kunlun/vdevice.go`, vendor key `XPU`).

* Inventory: `hami.io/node-register-xpu`, JSON only ("no device found on node" when empty);
  handshake `hami.io/node-handshake-xpu` (the generic check on allocatable `<vcount>`), cleaned up
  by deleting it; node lock `hami.io/mutex.lock`.
* Request: count from limits, else requests (an integer, wrapped to int32). Memory (limits, else
  requests; an integer) is rounded up to a card slice: <= 24576 ⇒ 24576, <= 49152 ⇒ 49152, else
  98304, and cores are memory × 100 / 98304 (25, 50, 100). No readable memory ⇒ the whole card:
  98304 MiB at 100 %, 100 cores.
* Fit: `graghSelect` (topo.py) over the cards a slice may join: healthy, room for the memory, and
  idle or already cut into slices of exactly this size (usedmem / used == memreq). With the
  `mutex` policy only idle cards; failing then, each used card that would otherwise take the
  slice counts ExclusiveDeviceAllocateConflict. Else "K/N CardUuidMismatch" (K cards refused by
  the uuid annotations of `common`), else "1/N NumaNotFit". An entry holds the request's memory
  and cores.
* Allocation under `hami.io/xpu-devices-{to-allocate,allocated}`.
* Admission: a container with `<vcount>` in limits is ours; its `<vmemory>` limit, if any, is
  rounded up as above and written to both limits and requests.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from vgpu_scheduler.devices import resources as res
from vgpu_scheduler.devices.base import GenericVendor
from vgpu_scheduler.devices.kunlun import common
from vgpu_scheduler.devices.protocol import FitResult, Obj, PodFitContext
from vgpu_scheduler.devices.resources import trunc_div
from vgpu_scheduler.model import (
    ContainerDevice,
    ContainerDeviceRequest,
    ContainerDevices,
    DeviceInfo,
    DeviceUsage,
)
from vgpu_scheduler.wire import objects
from vgpu_scheduler.wire import reasons as R
from vgpu_scheduler.wire.inventory import InventoryError, decode_node_devices
from vgpu_scheduler.wire.quantity import parse_quantity

XPU = "XPU"
REGISTER = "hami.io/node-register-xpu"
HANDSHAKE = "hami.io/node-handshake-xpu"
TO_ALLOCATE = "hami.io/xpu-devices-to-allocate"
ALLOCATED = "hami.io/xpu-devices-allocated"
SLICES = (24576, 49152)
MAX_MEMORY = 98304


def round_memory(mib: int) -> int:
    """HAMi `trimMemory`: the smallest card slice holding `mib` (anything larger: the whole card)."""
    for size in SLICES:
        if mib <= size:
            return size
    return MAX_MEMORY


def slice_fits(dev: DeviceInfo, usage: DeviceUsage, memreq: int) -> bool:
    """HAMi `FitVXPU`: may a slice of `memreq` MiB join this card?"""
    if not dev.health:
        return False
    if memreq + usage.usedmem > dev.devmem:
        return False
    if usage.used == 0:
        return True
    # A card is cut into equal slices: it takes only more of the size it already holds.
    return trunc_div(usage.usedmem, usage.used) == memreq


class XpuVendor(GenericVendor):
    key = XPU
    allocation_keys = (TO_ALLOCATE, ALLOCATED)
    handshake_key = HANDSHAKE
    register_key = REGISTER
    inventory_dialect = "json"
    prefilter = False

    # -- requests ------------------------------------------------------------------------------

    def request(self, container: Obj) -> ContainerDeviceRequest | None:
        resources = res.resources_of(container)
        if resources is None:
            return None
        count = res.as_int(res.lookup(resources, self.names.count))
        if count is None:
            return None
        memory = 0
        asked = res.as_int(res.lookup(resources, self.names.memory))
        if asked is not None:
            memory = round_memory(asked)
        cores = memory * 100 // MAX_MEMORY
        percentage = 0
        if memory == 0:
            memory, percentage, cores = MAX_MEMORY, 100, 100
        return ContainerDeviceRequest(
            nums=res.int32(count), type=self.key, memreq=memory, mem_percentage_req=percentage, coresreq=cores
        )

    # -- registration --------------------------------------------------------------------------

    def node_devices(self, node: Obj) -> list[DeviceInfo]:
        value = objects.annotation(node, REGISTER)
        if value is None:
            raise InventoryError(f"annos not found {REGISTER}")
        devices = decode_node_devices(value, "json")
        if not devices:
            raise InventoryError("no device found on node")
        for dev in devices:
            dev.device_vendor = self.key
        return devices

    # -- fit -----------------------------------------------------------------------------------

    def pod_filters(self, annotations: Mapping[str, str]) -> Hashable:
        return common.uuid_filters(annotations)

    def _examine(
        self, request: ContainerDeviceRequest, devices: Sequence[DeviceInfo], usage: Sequence[DeviceUsage],
        positions: Sequence[int], *, ctx: PodFitContext,
    ) -> common.Examined:
        filters = ctx.filters(self)
        assert isinstance(filters, common.UuidFilters)
        memreq = request.memreq
        if ctx.mutex:
            def check(dev: DeviceInfo, use: DeviceUsage) -> bool:
                return use.used == 0 and slice_fits(dev, use, memreq)
        else:
            def check(dev: DeviceInfo, use: DeviceUsage) -> bool:
                return slice_fits(dev, use, memreq)
        return common.examine(devices, usage, positions, filters=filters, check=check)

    @staticmethod
    def _reason(
        request: ContainerDeviceRequest, devices: Sequence[DeviceInfo], usage: Sequence[DeviceUsage],
        positions: Sequence[int], *, ctx: PodFitContext, examined: common.Examined,
    ) -> str:
        reasons: dict[str, int] = {}
        if ctx.mutex:
            shared = sum(
                1 for p in positions if usage[p].used > 0 and slice_fits(devices[p], usage[p], request.memreq)
            )
            if shared:
                reasons[R.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT] = shared
        if not reasons and examined.mismatched:
            reasons[R.CARD_UUID_MISMATCH] = len(examined.mismatched)
        if not reasons:
            reasons[R.NUMA_NOT_FIT] = 1
        return R.gen_reason(reasons, len(positions))

    def ladder(
        self, request: ContainerDeviceRequest, devices: Sequence[DeviceInfo], usage: Sequence[DeviceUsage],
        order: Sequence[int], *, ctx: PodFitContext, cordoned: frozenset[str],
        allocated: Sequence[ContainerDevices] = (), quick: bool = False,
    ) -> FitResult | str | None:
        examined = self._examine(request, devices, usage, order, ctx=ctx)
        if quick:
            outcome = common.order_free_outcome(request.nums, sum(examined.fits), len(order))
            if outcome is None:
                return None
            if outcome:
                return ""
            return self._reason(request, devices, usage, order, ctx=ctx, examined=examined)

        def entry_of(dev: DeviceInfo) -> ContainerDevice:
            return ContainerDevice(dev.id, request.type, request.memreq, request.coresreq, dev.index)

        result = common.topology_fit(request, devices, order, examined=examined, entry_of=entry_of)
        if result is not None:
            return result
        reason = self._reason(request, devices, usage, order, ctx=ctx, examined=examined)
        return FitResult(False, reason=reason)

    # -- admission -----------------------------------------------------------------------------

    def mutate(self, container: dict[str, Any], pod: dict[str, Any]) -> bool:
        if not res.present(container, "limits", self.names.count):
            return False
        memory = self.names.memory
        if res.present(container, "limits", memory):
            raw = container["resources"]["limits"][memory]
            rounded = str(round_memory(_quantity_value(raw)))
            res.set_limit(container, memory, rounded)
            resources = container["resources"]
            if not isinstance(resources.get("requests"), dict):
                resources["requests"] = {}
            resources["requests"][memory] = rounded
        return True


def _quantity_value(raw: object) -> int:
    """Go's `Quantity.Value()`: rounded up, away from zero (a null quantity is 0)."""
    if raw is None:
        return 0
    exact = parse_quantity(str(raw))
    return math.ceil(exact) if exact >= 0 else math.floor(exact)
