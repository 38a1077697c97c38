"""AMD GPUs (HAMi `pkg/device/amd`): cores as a percentage of each GPU's compute units.

Section `amd` (`resourceCountName`, `resourceMemoryName`, `resourceCoreName`; no memory factor, no
legacy flags). Inventory in `hami.io/node-amd-register`, JSON only. No handshake: the vendor is
healthy on a node whose `status.capacity[<count>]` is a non-zero integer (always healthy with an
empty count name), and its cleanup deletes the register annotation itself. Allocations under
`hami.io/amd-devices-{to-allocate,allocated}`; selection annotations `amd.com/{use,nouse}-gputype`
and `amd.com/{use,nouse}-gpu-uuid`; node lock `hami.io/mutex.lock`.

What differs from the generic pattern:

* requests read `limits` only; memory is MiB as written (0: the whole device), cores an integer
  percentage 1..100 (default 100) — any other value drops the request, and the webhook rejects it;
* `Fit` turns the percentage into compute units of each device (`devcore × pct / 100`, at least 1,
  at most `devcore`), takes all cores with all memory, and has no whole-card or compute-exhausted
  rule; its entries keep the device's own type (the product name), not the vendor key.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, tzinfo
from typing import Any

from vgpu_scheduler.config import DeviceConfig
from vgpu_scheduler.devices import resources as res
from vgpu_scheduler.devices.base import GenericVendor
from vgpu_scheduler.devices.protocol import (
    FitResult,
    Health,
    MutationError,
    Obj,
    PodFitContext,
    Vendor,
    VendorFlags,
)
from vgpu_scheduler.devices.resources import trunc_div
from vgpu_scheduler.devices.sections import Section
from vgpu_scheduler.devices.selection import SelectionFilters
from vgpu_scheduler.devices.spec import RESOURCE_NAME_KEYS, VendorSpec
from vgpu_scheduler.model import (
    ContainerDevice,
    ContainerDeviceRequest,
    ContainerDevices,
    DeviceInfo,
    DeviceUsage,
)
from vgpu_scheduler.wire import objects
from vgpu_scheduler.wire import reasons as R
from vgpu_scheduler.wire.quantity import quantity_as_int64

AMD = "AMD"
REGISTER = "hami.io/node-amd-register"
TO_ALLOCATE = "hami.io/amd-devices-to-allocate"
ALLOCATED = "hami.io/amd-devices-allocated"
USE_TYPE = "amd.com/use-gputype"
NOUSE_TYPE = "amd.com/nouse-gputype"
USE_UUID = "amd.com/use-gpu-uuid"
NOUSE_UUID = "amd.com/nouse-gpu-uuid"

CORE_PERCENT_MIN, CORE_PERCENT_MAX = 1, 100


def capacity_count(node: Obj, resource: str) -> int | None:
    """`status.capacity[resource]` as Go's `AsInt64` reads it: absent is 0, not an integer None."""
    capacity = objects.status(node).get("capacity")
    value = capacity.get(resource) if isinstance(capacity, dict) else None
    if value is None:
        return 0
    if not isinstance(value, str | int) or isinstance(value, bool):
        return None
    return quantity_as_int64(value)


class AmdVendor(GenericVendor):
    key = AMD
    allocation_keys = (TO_ALLOCATE, ALLOCATED)
    handshake_key = None
    cleanup_key = REGISTER  # HAMi's NodeCleanUp deletes the inventory, there is no handshake
    register_key = REGISTER
    inventory_dialect = "json"
    use_type_key = USE_TYPE
    nouse_type_key = NOUSE_TYPE
    use_uuid_key = USE_UUID
    nouse_uuid_key = NOUSE_UUID
    # Cores are a percentage turned into compute units per device and memory 0 means the whole
    # device: neither bounds what one device must have free in the engine's summary.
    prefilter = False

    # -- requests ------------------------------------------------------------------------------

    def request(self, container: Obj) -> ContainerDeviceRequest | None:
        resources = res.resources_of(container)
        if resources is None:
            return None
        count = res.as_int(res.limit(resources, self.names.count))
        if count is None or count <= 0 or count > res.INT32_MAX:
            return None
        memory = 0
        raw = res.limit(resources, self.names.memory)
        if raw is not res.MISSING:
            mem = res.as_int(raw)
            if mem is None or mem < 0 or mem > res.INT32_MAX:
                return None
            memory = mem
        cores = CORE_PERCENT_MAX  # no core limit: every compute unit of each device
        raw = res.limit(resources, self.names.cores)
        if raw is not res.MISSING:
            pct = res.as_int(raw)
            if pct is None or not CORE_PERCENT_MIN <= pct <= CORE_PERCENT_MAX:
                return None
            cores = pct
        return ContainerDeviceRequest(
            nums=count, type=AMD, memreq=memory, mem_percentage_req=0, coresreq=cores
        )

    # -- health ---------------------------------------------------------------------------------

    def check_health(self, node: Obj, now: datetime, tz: tzinfo | None) -> Health:
        if not self.names.count:
            return Health(healthy=True, need_update=True)
        count = capacity_count(node, self.names.count)
        if count is None or count == 0:
            return Health(healthy=False, need_update=False)
        return Health(healthy=True, need_update=True)

    # -- fit --------------------------------------------------------------------------------------

    def ladder(
        self, request: ContainerDeviceRequest, devices: Sequence[DeviceInfo], usage: Sequence[DeviceUsage],
        order: Sequence[int], *, ctx: PodFitContext, cordoned: frozenset[str],
        allocated: Sequence[ContainerDevices] = (), quick: bool = False,
    ) -> FitResult | str | None:
        # Every device is judged on its own: the quick verdict never depends on the order.
        """HAMi AMD `Fit`: the devices of `order` from the end, the first failing check counted."""
        filters = ctx.filters(self)
        assert isinstance(filters, SelectionFilters)
        type_ok = request.type.casefold() == AMD.casefold()
        remaining = request.nums
        reasons: dict[str, int] = {}
        chosen: list[tuple[int, ContainerDevice]] = []
        for pos in reversed(order):
            dev = devices[pos]
            u = usage[pos]
            if not dev.health or u.mig_conflict:
                reason = R.CARD_NOT_HEALTH
            elif not type_ok or not filters.type_ok(dev):
                reason = R.CARD_TYPE_MISMATCH
            elif not filters.uuid_ok(dev.id):
                reason = R.CARD_UUID_MISMATCH
            elif dev.count <= u.used:
                reason = R.CARD_TIME_SLICING_EXHAUSTED
            elif ctx.mutex and u.used > 0:
                reason = R.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT
            else:
                memreq = dev.devmem if request.memreq <= 0 and dev.devmem > 0 else request.memreq
                cores = device_cores(request.coresreq, dev.devmem, dev.devcore, memreq)
                if dev.devmem - u.usedmem < memreq:
                    reason = R.CARD_INSUFFICIENT_MEMORY
                elif cores is None or dev.devcore - u.usedcores < cores:
                    reason = R.CARD_INSUFFICIENT_CORE
                else:
                    if remaining > 0:
                        remaining -= 1
                        # The entry keeps the device's product type (HAMi: consumers need the model).
                        chosen.append((pos, ContainerDevice(dev.id, dev.type, memreq, cores, dev.index)))
                    if remaining == 0:
                        if quick:
                            return ""
                        return FitResult(True, [e for _, e in chosen], [p for p, _ in chosen])
                    continue
            reasons[reason] = reasons.get(reason, 0) + 1
        if chosen:
            reasons[R.ALLOCATED_CARDS_INSUFFICIENT_REQUEST] = len(chosen)
        text = R.gen_reason(reasons, len(order))
        return text if quick else FitResult(False, reason=text)

    # -- admission --------------------------------------------------------------------------------

    def mutate(self, container: dict[str, Any], pod: dict[str, Any]) -> bool:
        """HAMi AMD MutateAdmission: a core limit next to the count must be a 1..100 integer; the
        count, the memory or the core name in `limits` makes it an AMD container (nothing changes)."""
        names = self.names
        if res.present(container, "limits", names.count):
            resources = res.resources_of(container) or {}
            raw = res.limit(resources, names.cores)
            if raw is not res.MISSING:
                pct = res.as_int(raw)
                if pct is None or not CORE_PERCENT_MIN <= pct <= CORE_PERCENT_MAX:
                    raise MutationError(f"{names.cores} must be an integer percentage between 1 and 100")
            return True
        return res.present(container, "limits", names.memory) or res.present(container, "limits", names.cores)


def device_cores(pct: int, devmem: int, devcore: int, memreq: int) -> int | None:
    """Compute units a `pct` % request takes on one device (None: the device has no core count)."""
    if pct > 0:
        if devcore <= 0:
            return None
        cores = trunc_div(res.int32(devcore * pct), 100)  # int32 arithmetic, as in Go
        return min(max(cores, 1), devcore)
    if devmem > 0 and memreq >= devmem:
        return devcore  # all of the memory: all of the cores
    return 0


def vendors(config: DeviceConfig, flags: VendorFlags) -> Sequence[Vendor]:
    names = Section(config.other_vendors.get("amd")).resource_names()
    return [AmdVendor(names)]


SPEC = VendorSpec("amd", __name__, keys=dict.fromkeys(RESOURCE_NAME_KEYS))
