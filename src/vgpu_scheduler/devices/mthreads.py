"""Moore Threads sGPU (HAMi `pkg/device/mthreads`): GPUs read from node capacity.

Section `mthreads` (`resourceCountName`, `resourceMemoryName`, `resourceCoreName`); the
`--mthreads-name/-memory/-cores` flags are overwritten by the section (empty when it is missing).
The inventory is the node's capacity: one GPU `<node>-mthreads-<i>` per 16 `cores`, each with 100
slots, 16 cores and `memory × 512 × 16 / cores` MiB. No handshake (always healthy, re-read every
pass), no node lock, no cleanup; selection annotations `mthreads.ai/{use,nouse}-gpuuuid`.

Requests: memory in units of 512 MiB (the memory factor) and cores, both split evenly over the
count; no memory means the whole GPU (percentage 100), no cores means 0. Fit is the common check
ladder plus one rule of its own: every device of the pod's earlier containers (in the same init
or app phase) must be this device (`CardNotFoundCustomFilterRule`).

Annotations: `hami.io/mthreads-vgpu-devices-allocated` only (the to-allocate key is registered
but never written), plus `mthreads.com/gpu-index` (the last container's device indexes),
`mthreads.com/predicate-time` (unix nanoseconds) and `mthreads.com/predicate-node`.

Webhook: a count above 1 gets count × 16 cores and count × 96 memory units (and the pod
annotation `mthreads.com/request-gpu-num`); a single GPU without a memory limit gets 16 and 96;
a memory limit must be one of 2, 4, 8, 16, 32, 64, 96.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from vgpu_scheduler.config import DeviceConfig
from vgpu_scheduler.devices import resources as res
from vgpu_scheduler.devices.base import GenericVendor
from vgpu_scheduler.devices.capacity import capacity_int64
from vgpu_scheduler.devices.protocol import (
    FitResult,
    MutationError,
    Obj,
    PodFitContext,
    ResourceNames,
    Vendor,
    VendorFlags,
)
from vgpu_scheduler.devices.resources import trunc_div
from vgpu_scheduler.devices.sections import Section
from vgpu_scheduler.devices.selection import SelectionFilters
from vgpu_scheduler.devices.spec import RESOURCE_NAME_KEYS, VendorFlag, VendorSpec
from vgpu_scheduler.model import (
    PERCENTAGE_UNSET,
    ContainerDevice,
    ContainerDeviceRequest,
    ContainerDevices,
    DeviceInfo,
    DeviceUsage,
    PodSingleDevice,
)
from vgpu_scheduler.wire import objects
from vgpu_scheduler.wire import reasons as R
from vgpu_scheduler.wire.inventory import InventoryError
from vgpu_scheduler.wire.quantity import canonical_quantity

MTHREADS = "Mthreads"
TO_ALLOCATE = "hami.io/mthreads-vgpu-devices-to-allocate"
ALLOCATED = "hami.io/mthreads-vgpu-devices-allocated"
USE_UUID = "mthreads.ai/use-gpuuuid"
NOUSE_UUID = "mthreads.ai/nouse-gpuuuid"
GPU_INDEX = "mthreads.com/gpu-index"
PREDICATE_NODE = "mthreads.com/predicate-node"
PREDICATE_TIME = "mthreads.com/predicate-time"
REQUEST_GPU_NUM = "mthreads.com/request-gpu-num"

CORES_PER_GPU = 16
MEMORY_PER_GPU = 96
"""Memory units (of 512 MiB) the webhook gives a whole GPU."""
MEMORY_FACTOR = 512
SLOTS_PER_GPU = 100
LEGAL_MEMORY = (2, 4, 8, 16, 32, 64, 96)
INVALID_MEMORY = "sGPU memory request value is invalid, valid values are [2, 4, 8, 16, 32, 64, 96]"


def one_device_rule(allocated: Sequence[ContainerDevices], dev: DeviceInfo) -> bool:
    """HAMi `customFilterRule`: every device the pod's earlier containers got is `dev`."""
    return all(entry.uuid == dev.id for ctr in allocated for entry in ctr)


class MthreadsVendor(GenericVendor):
    key = MTHREADS
    allocation_keys = (TO_ALLOCATE, ALLOCATED)
    writes_to_allocate = False  # HAMi writes only the allocated key at filter time
    handshake_key = None
    lock_key = None
    use_uuid_key = USE_UUID
    nouse_uuid_key = NOUSE_UUID
    default_cores = 0

    def __init__(self, names: ResourceNames) -> None:
        super().__init__(names)
        # The chart lists only the count as an extender resource: kube-scheduler itself checks
        # sGPU memory and cores against the node's capacity.
        self.managed_resources = frozenset({names.count} - {""})

    # -- requests and admission -----------------------------------------------------------------

    def request(self, container: Obj) -> ContainerDeviceRequest | None:
        resources = res.resources_of(container)
        if resources is None:
            return None
        count = res.as_int(res.lookup(resources, self.names.count))
        if count is None or count <= 0 or count > res.INT32_MAX:
            return None
        memory = 0
        raw = res.lookup(resources, self.names.memory)
        if raw is not res.MISSING:
            units = res.as_int(raw)
            if units is None or units < 0 or units > res.INT32_MAX // MEMORY_FACTOR:
                return None  # HAMi rejects rather than under-allocate
            memory = units * MEMORY_FACTOR
        cores = 0
        raw = res.lookup(resources, self.names.cores)
        if raw is not res.MISSING:
            parsed = res.as_int(raw)
            if parsed is not None:
                cores = res.int32(parsed)
        return ContainerDeviceRequest(
            nums=count, type=self.key, memreq=trunc_div(memory, count),
            mem_percentage_req=100 if memory == 0 else 0, coresreq=trunc_div(cores, count),
        )

    def mutate(self, container: dict[str, Any], pod: dict[str, Any]) -> bool:
        count = res.value(container, self.names.count)
        if count is None:
            return False
        if count <= 0:
            raise MutationError(f"{self.names.count} must be greater than 0")
        if count > 1:
            self._fill(container, count)
            metadata = pod.setdefault("metadata", {})
            if not isinstance(metadata.get("annotations"), dict):
                metadata["annotations"] = {}
            metadata["annotations"][REQUEST_GPU_NUM] = str(count)
            return True
        if not res.present(container, "limits", self.names.memory):
            self._fill(container, count)
        elif (res.as_int(container["resources"]["limits"][self.names.memory]) or 0) not in LEGAL_MEMORY:
            raise MutationError(INVALID_MEMORY)
        return True

    def _fill(self, container: dict[str, Any], count: int) -> None:
        """Whole GPUs: their cores and memory as limits (over anything the user set)."""
        res.set_limit(container, self.names.cores, canonical_quantity(str(count * CORES_PER_GPU)))
        res.set_limit(container, self.names.memory, canonical_quantity(str(count * MEMORY_PER_GPU)))

    # -- inventory ----------------------------------------------------------------------------------

    def node_devices(self, node: Obj) -> list[DeviceInfo]:
        cores, ok = capacity_int64(node, self.names.cores)
        if not ok or cores == 0:
            raise InventoryError(f"device not found {self.names.cores}")
        memory, _ = capacity_int64(node, self.names.memory)
        if cores < 0:
            return []  # HAMi's loop (i × 16 < cores) never runs
        devmem = res.int32(trunc_div(memory * MEMORY_FACTOR * CORES_PER_GPU, cores))
        name = objects.name(node)
        gpus = -(-cores // CORES_PER_GPU)  # every i with i × 16 < cores
        return [
            DeviceInfo(
                id=f"{name}-mthreads-{i}", index=i, count=SLOTS_PER_GPU, devmem=devmem, devcore=CORES_PER_GPU,
                type=MTHREADS, numa=0, mode="", health=True, device_vendor=MTHREADS,
            )
            for i in range(gpus)
        ]

    # -- fit ----------------------------------------------------------------------------------------

    def ladder(
        self, request: ContainerDeviceRequest, devices: Sequence[DeviceInfo], usage: Sequence[DeviceUsage],
        order: Sequence[int], *, ctx: PodFitContext, cordoned: frozenset[str],
        allocated: Sequence[ContainerDevices] = (), quick: bool = False,
    ) -> FitResult | str | None:
        """HAMi's Mthreads `Fit`: the common ladder from the end of `order`, then the one-device
        rule, stopping once Nums devices passed.

        Quick, without the earlier containers' devices the one-device rule is unknown: a failure
        could carry another reason string, so only "fits" is answered (`fit` decides the rest, and
        the rule only ever turns a fit into a failure there)."""
        filters = ctx.filters(self)
        assert isinstance(filters, SelectionFilters)
        type_ok = request.type == self.key
        coresreq = request.coresreq
        pct = request.mem_percentage_req
        by_pct = pct != PERCENTAGE_UNSET and request.memreq == 0
        remaining = request.nums
        reasons: dict[str, int] = {}
        chosen: ContainerDevices = []
        positions: list[int] = []
        for pos in reversed(order):
            dev, u = devices[pos], usage[pos]
            if not dev.health or u.mig_conflict:
                reason = R.CARD_NOT_HEALTH
            elif request.type not in dev.type or not type_ok:
                reason = R.CARD_TYPE_MISMATCH
            elif filters.uuids_active and not filters.uuid_ok(dev.id):
                reason = R.CARD_UUID_MISMATCH
            elif dev.count <= u.used:
                reason = R.CARD_TIME_SLICING_EXHAUSTED
            elif ctx.mutex and u.used > 0:
                reason = R.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT
            else:
                coresreq = min(coresreq, 100)  # HAMi clamps here, and the clamp sticks
                memreq = trunc_div(dev.devmem * pct, 100) if by_pct else max(request.memreq, 0)
                if dev.devmem - u.usedmem < memreq:
                    reason = R.CARD_INSUFFICIENT_MEMORY
                elif dev.devcore - u.usedcores < coresreq:
                    reason = R.CARD_INSUFFICIENT_CORE
                elif dev.devcore == 100 and coresreq == 100 and u.used > 0:
                    reason = R.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT
                elif dev.devcore != 0 and u.usedcores == dev.devcore and coresreq == 0:
                    reason = R.CARD_COMPUTE_UNITS_EXHAUSTED
                elif not one_device_rule(allocated, dev):
                    reason = R.CARD_NOT_FOUND_CUSTOM_FILTER_RULE
                else:
                    if remaining > 0:
                        remaining -= 1
                        chosen.append(ContainerDevice(dev.id, request.type, memreq, coresreq, dev.index))
                        positions.append(pos)
                    if remaining == 0:
                        return "" if quick else FitResult(True, chosen, positions)
                    continue
            reasons[reason] = reasons.get(reason, 0) + 1
        if chosen:
            reasons[R.ALLOCATED_CARDS_INSUFFICIENT_REQUEST] = len(chosen)
        return None if quick else FitResult(False, reason=R.gen_reason(reasons, len(order)))

    # -- annotations ----------------------------------------------------------------------------------

    def extra_annotations(
        self, per_container: PodSingleDevice, *, node: str, now: int, pod: Obj | None
    ) -> dict[str, str]:
        out: dict[str, str] = {}
        for entries in per_container:
            if entries:  # each container overwrites the index: the last one with devices stays
                out[GPU_INDEX] = ",".join(str(e.idx) for e in entries)
                out[PREDICATE_TIME] = str(now * 1_000_000_000)
                out[PREDICATE_NODE] = node
        return out


def vendors(config: DeviceConfig, flags: VendorFlags) -> Sequence[Vendor]:
    names = Section(config.other_vendors.get("mthreads")).resource_names(memory_factor=MEMORY_FACTOR)
    return [MthreadsVendor(names)]


SPEC = VendorSpec(
    "mthreads",
    __name__,
    flags=(
        VendorFlag("mthreads-cores", "mthreads.com/sgpu-core", "mthreads core resource"),
        VendorFlag("mthreads-memory", "mthreads.com/sgpu-memory", "mthreads memory resource"),
        VendorFlag("mthreads-name", "mthreads.com/vgpu", "mthreads resource count"),
    ),
    keys=dict.fromkeys(RESOURCE_NAME_KEYS),
)
