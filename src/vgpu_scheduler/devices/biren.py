"""Biren (HAMi `pkg/device/biren`): whole devices counted by one resource, no memory or cores.

Section `biren` (`resourceCountName`, chart `birentech.com/gpu`; a missing section registers the
vendor with an empty name, as HAMi does); key `Biren`. Inventory in `hami.io/node-biren-register`,
JSON only, every device's cores forced to 100 (HAMi: "only for calscore use"); handshake
`hami.io/node-handshake-biren`, deleted on cleanup; allocations under
`hami.io/Biren-devices-{to-allocate,allocated}`; uuid filters `birentech.com/{use,nouse}-gpuuuid`
(HAMi declares `birentech.com/{use,nouse}-biren` but never reads them); node lock
`hami.io/mutex.lock`.

A request is only a count (memory 0 at 100 %, cores 0), and the fit checks neither memory nor
cores: health, type, uuid, time slicing (`count <= used`) and the mutex policy, walked from the
end as usual. The allocation entry records 0 MiB and the request's cores (0).
"""

from __future__ import annotations

from collections.abc import Sequence

from vgpu_scheduler.config import DeviceConfig
from vgpu_scheduler.devices.base import GenericVendor
from vgpu_scheduler.devices.protocol import (
    FitResult,
    Obj,
    PodFitContext,
    Vendor,
    VendorFlags,
)
from vgpu_scheduler.devices.sections import Section
from vgpu_scheduler.devices.selection import SelectionFilters
from vgpu_scheduler.devices.spec import VendorSpec
from vgpu_scheduler.model import (
    ContainerDevice,
    ContainerDeviceRequest,
    ContainerDevices,
    DeviceInfo,
    DeviceUsage,
)
from vgpu_scheduler.wire import reasons as R

BIREN = "Biren"
REGISTER = "hami.io/node-biren-register"
HANDSHAKE = "hami.io/node-handshake-biren"
TO_ALLOCATE = "hami.io/Biren-devices-to-allocate"
ALLOCATED = "hami.io/Biren-devices-allocated"
USE_UUID = "birentech.com/use-gpuuuid"
NOUSE_UUID = "birentech.com/nouse-gpuuuid"
DEVICE_CORES = 100


class BirenVendor(GenericVendor):
    key = BIREN
    allocation_keys = (TO_ALLOCATE, ALLOCATED)
    handshake_key = HANDSHAKE
    register_key = REGISTER
    inventory_dialect = "json"
    use_uuid_key = USE_UUID
    nouse_uuid_key = NOUSE_UUID
    default_cores = 0
    prefilter = False
    """The request's 100 % memory is never checked: it bounds nothing."""

    def request(self, container: Obj) -> ContainerDeviceRequest | None:
        return self.whole_device_request(container)

    def node_devices(self, node: Obj) -> list[DeviceInfo]:
        devices = super().node_devices(node)
        for dev in devices:
            dev.devcore = DEVICE_CORES
        return devices

    def ladder(
        self, request: ContainerDeviceRequest, devices: Sequence[DeviceInfo], usage: Sequence[DeviceUsage],
        order: Sequence[int], *, ctx: PodFitContext, cordoned: frozenset[str],
        allocated: Sequence[ContainerDevices] = (), quick: bool = False,
    ) -> FitResult | str | None:
        """HAMi Biren `Fit` over `order` from the end; every device is judged on its own, so the
        quick verdict does not depend on the order."""
        filters = ctx.filters(self)
        assert isinstance(filters, SelectionFilters)
        type_ok = request.type == self.key
        reasons: dict[str, int] = {}
        chosen: list[int] = []
        for pos in reversed(order):
            dev = devices[pos]
            used = usage[pos].used
            if not dev.health:
                reason = R.CARD_NOT_HEALTH
            elif not type_ok:
                reason = R.CARD_TYPE_MISMATCH
            elif not filters.uuid_ok(dev.id):
                reason = R.CARD_UUID_MISMATCH
            elif dev.count <= used:
                reason = R.CARD_TIME_SLICING_EXHAUSTED
            elif ctx.mutex and used > 0:
                reason = R.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT
            else:
                chosen.append(pos)
                if len(chosen) == request.nums:
                    if quick:
                        return ""
                    entries = [
                        ContainerDevice(devices[p].id, self.key, 0, request.coresreq, devices[p].index)
                        for p in chosen
                    ]
                    return FitResult(True, entries, chosen)
                continue
            reasons[reason] = reasons.get(reason, 0) + 1
        if chosen:
            reasons[R.ALLOCATED_CARDS_INSUFFICIENT_REQUEST] = len(chosen)
        text = R.gen_reason(reasons, len(order))
        return text if quick else FitResult(False, reason=text)


def vendors(config: DeviceConfig, flags: VendorFlags) -> Sequence[Vendor]:
    # HAMi's ResourceNames for Biren hold only the count (memory factor 0).
    return [BirenVendor(Section(config.other_vendors.get("biren")).resource_names(memory=False, cores=False))]


SPEC = VendorSpec("biren", __name__, keys=dict.fromkeys(("resourceCountName",)))
