"""Enflame DRS (HAMi `pkg/device/enflame/device.go`, vendor key `Enflame`).

* Inventory: `capacity.py`; health always good, no handshake, nothing to clean up.
* Request (one device per container): `enflame.com/drs-gcu: N` (limits, else requests, `AsInt64`,
  N > 0) asks the profile of exactly N slices — memreq N, percentage 0 (direct mode), cores 0; N
  over int32 drops the request. Otherwise `gcu-memory` / `gcu-core` (`Quantity.Value`) ask the
  smallest profile covering them — memreq, percentage -1 (by spec), cores; either over int32
  drops the request. A count of 0 or less falls through to memory/core.
* Fit: the profile is chosen first over the node's DRS devices (`profiles.py`); none, or one
  whose slices/memory/cores overflow, fails every device with `1/<n> ModeNotFit`. Then per device
  from the end: CardNotHealth, CardTypeMismatch, CardUuidMismatch (`enflame.com/use-gpuuuid`,
  `nouse-gpuuuid`), CardTimeSlicingExhausted (count <= used), mutex policy and used > 0
  (ExclusiveDeviceAllocateConflict), CardInsufficientMemory (profile GB × 1024 MiB),
  CardInsufficientCore (only when devcore > 0). The entry uses the profile's memory and cores.
* Usage: `used` grows by the profile's slices (clamped to int32; 1 for an entry without one, e.g.
  one read back from a pod annotation).
* Annotations: `hami.io/enflame-vgpu-devices-allocated` (no to-allocate key) and what the Enflame
  device plugin reads: `enflame.com/gcu-assigned` "false", `enflame.com/gcu-assigned-time` (unix
  nanoseconds), `enflame.com/gcu-assigned-index` and `-id` (index), `enflame.com/gcu-assigned-minor`
  and `enflame.com/gcu-request-size` (slices) of the first allocated container, and
  `assigned-containers`: container name -> {allocated false, request, profileID, profileName}.
* Admission: validates and mirrors the count, or memory and core, between limits and requests.
* Never locks; score 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, tzinfo
from typing import Any

from vgpu_scheduler.devices import resources as res
from vgpu_scheduler.devices.base import GenericVendor
from vgpu_scheduler.devices.enflame.capacity import DRS_CAPACITY, ENFLAME, drs_devices
from vgpu_scheduler.devices.enflame.config import EnflameNames
from vgpu_scheduler.devices.enflame.profiles import MODE_BY_SPEC, MODE_DIRECT, Profile, candidates, select
from vgpu_scheduler.devices.enflame.types import DrsDevice, DrsEntry, DrsRequest
from vgpu_scheduler.devices.protocol import (
    FitResult,
    Health,
    MutationError,
    Obj,
    PodFitContext,
    ResourceNames,
)
from vgpu_scheduler.devices.selection import SelectionFilters
from vgpu_scheduler.gocompat.parsing import go_json
from vgpu_scheduler.model import (
    ContainerDevice,
    ContainerDeviceRequest,
    ContainerDevices,
    DeviceInfo,
    DeviceUsage,
    MigAllocation,
    PodSingleDevice,
)
from vgpu_scheduler.wire import objects
from vgpu_scheduler.wire import reasons as R
from vgpu_scheduler.wire.inventory import InventoryError
from vgpu_scheduler.wire.quantity import QuantityError

ALLOCATED = "hami.io/enflame-vgpu-devices-allocated"
USE_UUID = "enflame.com/use-gpuuuid"
NOUSE_UUID = "enflame.com/nouse-gpuuuid"
REQUEST_SIZE = "enflame.com/gcu-request-size"
ASSIGNED_ID = "enflame.com/gcu-assigned-id"
ASSIGNED = "enflame.com/gcu-assigned"
ASSIGNED_INDEX = "enflame.com/gcu-assigned-index"
ASSIGNED_MINOR = "enflame.com/gcu-assigned-minor"
ASSIGNED_TIME = "enflame.com/gcu-assigned-time"
ASSIGNED_CONTAINERS = "assigned-containers"
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


def clamp32(value: int) -> int:
    return max(INT32_MIN, min(INT32_MAX, value))


def quantity_value(ctr: Mapping[str, Any], name: str) -> int | None:
    """`Quantity.Value()` of limits[name], else requests[name]; None when absent (an unreadable
    quantity counts as Go's zero Quantity)."""
    try:
        return res.value(ctr, name)
    except (QuantityError, ValueError):
        return 0


def _mirror(ctr: dict[str, Any], name: str) -> None:
    """Copy a resource present in one of limits/requests into the other where it is missing."""
    resources = ctr.setdefault("resources", {})
    limits = resources.get("limits") if isinstance(resources.get("limits"), dict) else None
    requests = resources.get("requests") if isinstance(resources.get("requests"), dict) else None
    # HAMi takes the limit unless it is zero (then the request); a zero limit fails validation first.
    value = limits[name] if limits and name in limits else (requests or {}).get(name)
    if limits is None or name not in limits:
        resources["limits"] = {**(limits or {}), name: value}
    if requests is None or name not in requests:
        resources["requests"] = {**(requests or {}), name: value}


class DrsVendor(GenericVendor):
    key = ENFLAME
    allocation_keys = ("", ALLOCATED)
    handshake_key = None
    lock_key = None
    register_key = DRS_CAPACITY
    use_uuid_key = USE_UUID
    nouse_uuid_key = NOUSE_UUID
    default_cores = 0
    prefilter = False  # memreq is a slice count or GB, not the MiB a device must have free

    def __init__(self, names: EnflameNames) -> None:
        super().__init__(ResourceNames(names.drs, names.memory, names.core))

    # -- requests ---------------------------------------------------------------------------------

    def request(self, container: Obj) -> ContainerDeviceRequest | None:
        resources = res.resources_of(container)
        if resources is None:
            return None
        name = str(container.get("name") or "")
        raw = res.lookup(resources, self.names.count)
        if raw is not res.MISSING:
            n = res.as_int(raw)
            if n is not None and n > 0:
                if n > INT32_MAX:
                    return None
                return DrsRequest(nums=1, type=ENFLAME, memreq=n, mem_percentage_req=MODE_DIRECT, coresreq=0,
                                  container=name)
        memory = quantity_value(container, self.names.memory)
        cores = quantity_value(container, self.names.cores)
        if memory is None and cores is None:
            return None
        if (memory is not None and memory > INT32_MAX) or (cores is not None and cores > INT32_MAX):
            return None
        return DrsRequest(
            nums=1, type=ENFLAME, memreq=res.int32(memory or 0), mem_percentage_req=MODE_BY_SPEC,
            coresreq=res.int32(cores or 0), container=name,
        )

    # -- registration -----------------------------------------------------------------------------

    def node_devices(self, node: Obj) -> list[DeviceInfo]:
        value = objects.annotation(node, DRS_CAPACITY)
        if value is None:
            raise InventoryError(f"annotation not found {DRS_CAPACITY}")
        return list(drs_devices(objects.name(node), value))

    def check_health(self, node: Obj, now: datetime, tz: tzinfo | None) -> Health:
        return Health(healthy=True, need_update=True)

    # -- fit --------------------------------------------------------------------------------------

    def _profile(self, request: ContainerDeviceRequest, devices: Sequence[DeviceInfo],
                 order: Sequence[int]) -> Profile | None:
        drs = [d for d in (devices[p] for p in order) if isinstance(d, DrsDevice)]
        found = candidates((d.profiles for d in drs), max((d.max_slice for d in drs), default=0))
        profile = select(found, request.mem_percentage_req, request.memreq, request.coresreq)
        if profile is None or not 0 < profile.size <= INT32_MAX:
            return None
        if not 0 < profile.memory_gb <= INT32_MAX // 1024 or profile.core_percent > INT32_MAX:
            return None
        return profile

    def ladder(
        self, request: ContainerDeviceRequest, devices: Sequence[DeviceInfo], usage: Sequence[DeviceUsage],
        order: Sequence[int], *, ctx: PodFitContext, cordoned: frozenset[str],
        allocated: Sequence[ContainerDevices] = (), quick: bool = False,
    ) -> FitResult | str | None:
        """HAMi's DRS Fit over `order` from the end. The profile comes from every device alike and
        each device is judged on its own: the quick verdict is order-free."""
        profile = self._profile(request, devices, order)
        if profile is None:
            text = R.gen_reason({R.MODE_NOT_FIT: 1}, len(order))
            return text if quick else FitResult(False, reason=text)
        memory = profile.memory_gb * 1024
        cores = profile.core_percent
        filters = ctx.filters(self)
        assert isinstance(filters, SelectionFilters)
        remaining = request.nums
        taken: list[int] = []
        reasons: dict[str, int] = {}
        for pos in reversed(order):
            dev = devices[pos]
            u = usage[pos]
            if not dev.health or u.mig_conflict:
                reason = R.CARD_NOT_HEALTH
            elif request.type != ENFLAME:
                reason = R.CARD_TYPE_MISMATCH
            elif filters.uuids_active and not filters.uuid_ok(dev.id):
                reason = R.CARD_UUID_MISMATCH
            elif dev.count <= u.used:
                reason = R.CARD_TIME_SLICING_EXHAUSTED
            elif ctx.mutex and u.used > 0:
                reason = R.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT
            elif dev.devmem - u.usedmem < memory:
                reason = R.CARD_INSUFFICIENT_MEMORY
            elif dev.devcore > 0 and dev.devcore - u.usedcores < cores:
                reason = R.CARD_INSUFFICIENT_CORE
            else:
                if remaining > 0:
                    remaining -= 1
                    taken.append(pos)
                if remaining == 0:
                    if quick:
                        return ""
                    container = request.container if isinstance(request, DrsRequest) else ""
                    entries: ContainerDevices = [self._entry(devices[p], profile, container) for p in taken]
                    return FitResult(True, entries, taken)
                continue
            reasons[reason] = reasons.get(reason, 0) + 1
        if taken:
            reasons[R.ALLOCATED_CARDS_INSUFFICIENT_REQUEST] = len(taken)
        text = R.gen_reason(reasons, len(order))
        return text if quick else FitResult(False, reason=text)

    @staticmethod
    def _entry(dev: DeviceInfo, profile: Profile, container: str) -> DrsEntry:
        drs = dev if isinstance(dev, DrsDevice) else None
        return DrsEntry(
            uuid=dev.id, type=ENFLAME, usedmem=profile.memory_gb * 1024, usedcores=profile.core_percent,
            idx=dev.index, container=container, profile_name=profile.name, profile_id=profile.id,
            minor=drs.minor if drs else "", index_text=drs.index_text if drs else "", drs_slice=profile.size,
            request_memory_gb=profile.request_memory_gb, request_core_percent=profile.request_core_percent,
        )

    def add_usage(
        self,
        device: DeviceInfo,
        usage: DeviceUsage,
        entry: ContainerDevice,
        *,
        container_index: int,
        device_index: int,
        migs: list[MigAllocation],
    ) -> ContainerDevice:
        usage.used = clamp32(usage.used + entry_slices(entry))
        usage.usedcores += entry.usedcores
        usage.usedmem += entry.usedmem
        return entry

    # -- annotations, admission -----------------------------------------------------------------

    def extra_annotations(
        self, per_container: PodSingleDevice, *, node: str, now: int, pod: Obj | None
    ) -> dict[str, str]:
        out = {
            ASSIGNED: "false",
            ASSIGNED_TIME: str(now * 1_000_000_000),
        }
        assigned: dict[str, dict[str, Any]] = {}
        for index, devices in enumerate(per_container):
            if not devices:
                continue
            chosen = devices[0]
            drs = chosen if isinstance(chosen, DrsEntry) else None
            slices = entry_slices(chosen)
            info: dict[str, Any] = {"allocated": False, "request": slices}
            if drs and drs.profile_id:
                info["profileID"] = drs.profile_id
            if drs and drs.profile_name:
                info["profileName"] = drs.profile_name
            assigned[drs.container if drs else f"container-{index}"] = info
            if ASSIGNED_INDEX not in out and drs and drs.index_text:
                out[ASSIGNED_INDEX] = out[ASSIGNED_ID] = drs.index_text
            if ASSIGNED_MINOR not in out and drs and drs.minor:
                out[ASSIGNED_MINOR] = drs.minor
            if REQUEST_SIZE not in out:
                out[REQUEST_SIZE] = str(slices)
        if assigned:
            out[ASSIGNED_CONTAINERS] = go_json({name: assigned[name] for name in sorted(assigned)})
        return out

    def mutate(self, container: dict[str, Any], pod: dict[str, Any]) -> bool:
        count = quantity_value(container, self.names.count)
        if count is not None:
            if count <= 0:
                raise MutationError(f"{self.names.count} must be greater than 0")
            _mirror(container, self.names.count)
            return True
        memory = quantity_value(container, self.names.memory)
        cores = quantity_value(container, self.names.cores)
        if memory is None and cores is None:
            return False
        if memory is not None and memory <= 0:
            raise MutationError(f"{self.names.memory} must be greater than 0")
        if cores is not None and not 0 < cores <= 100:
            raise MutationError(f"{self.names.cores} must be in range (0,100]")
        if memory is not None:
            _mirror(container, self.names.memory)
        if cores is not None:
            _mirror(container, self.names.cores)
        return True


def entry_slices(entry: ContainerDevice) -> int:
    """The slices an entry occupies: its profile's (clamped to int32), 1 when it has none."""
    slices = clamp32(entry.drs_slice) if isinstance(entry, DrsEntry) else 0
    return slices if slices > 0 else 1

