"""AWS Neuron (HAMi `pkg/device/awsneuron`): whole Neuron devices or NeuronCores, from node capacity.

Section `awsneuron` (`resourceCountName`, `resourceCoreName`; no legacy flags). The inventory is
the node's capacity: `capacity[count]` devices `<node>-AWSNeuron-<i>`, each with `count` =
NeuronCores per device and `devcore` = the bit mask of those cores; the node's
`node.kubernetes.io/instance-type` label decides the topology rule. No handshake (always healthy,
the inventory re-read every pass), no node lock, no cleanup.

The cores per device are learnt once, from the first node registered (HAMi keeps them in the
backend), and every request and admission uses them afterwards:

* a container asking `count` devices needs all cores of each (coresreq = cores per device);
* a container asking `cores` takes one device for 1 or 2 cores, else cores / 2 whole devices
  (only two cores of a device are addressable); other counts are rejected.

Fit: one device is a walk from the end of the policy order with HAMi's reasons, the cores taken
recorded as a bit mask (core 0 = 1, core 1 = 2, both = 3). Several devices are a contiguous run
of free devices (a ring on `inf*` instance types; aligned blocks of 1, 4, 8 or 16 elsewhere),
or `NumaNotFit`.

Annotations: only `hami.io/aws-neuron-devices-allocated` (no to-allocate key), plus what the AWS
device plugin reads — `AWS_NEURON_IDS` (device indexes, or core indexes for core requests with
`NEURON_RESOURCE_TYPE`), `NEURON_ALLOC_TIME` (unix nanoseconds), `NEURON_ALLOCATED=false` and
`aws.amazon.com/predicate-node`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from vgpu_scheduler.config import DeviceConfig
from vgpu_scheduler.devices import resources as res
from vgpu_scheduler.devices.base import GenericVendor
from vgpu_scheduler.devices.capacity import as_int64, as_uint64, capacity_int64
from vgpu_scheduler.devices.protocol import (
    FitResult,
    MutationError,
    Obj,
    PodFitContext,
    ResourceNames,
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
    PodSingleDevice,
)
from vgpu_scheduler.wire import objects
from vgpu_scheduler.wire import reasons as R
from vgpu_scheduler.wire.inventory import InventoryError

AWS_NEURON = "AWSNeuron"
ALLOCATED = "hami.io/aws-neuron-devices-allocated"
USE_UUID = "aws.amazon.com/use-neuron-uuid"
NOUSE_UUID = "aws.amazon.com/nouse-neuron-uuid"
ASSIGNED_IDS = "AWS_NEURON_IDS"
ASSIGNED_NODE = "aws.amazon.com/predicate-node"
ALLOC_TIME = "NEURON_ALLOC_TIME"
RESOURCE_TYPE = "NEURON_RESOURCE_TYPE"
ALLOCATED_FLAG = "NEURON_ALLOCATED"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"

MAX_DEVICES = res.INT32_MAX
MAX_CORES_PER_DEVICE = 2
"""Only two cores of a device are addressable (the mask has two bits, the IDs two indexes)."""
MAX_CORES = MAX_DEVICES * MAX_CORES_PER_DEVICE
ALIGNED_BLOCKS = (1, 4, 8, 16)
"""Device counts a non-Inferentia node can give as one aligned contiguous block."""


@dataclass(slots=True)
class NeuronDevice(DeviceInfo):
    """A Neuron device with its node's instance type (HAMi's `CustomInfo["AWSNodeType"]`)."""

    instance_type: str = ""


def core_count(mask: int) -> int:
    """Set bits of a core mask (HAMi `countMaskAvailable`: 0 for a negative mask)."""
    return bin(mask).count("1") if mask > 0 else 0


def add_core_usage(taken: int, cores: int) -> int:
    """The mask of cores a one-device request gets on a device whose cores `taken` are in use
    (HAMi `addCoreUsage`): the first free core for 1, both for 2, else the complement of 3."""
    if taken == 0 and cores == 2:
        return 3
    if taken == 0 and cores == 1:
        return 1
    return 3 - taken


def validate(raw: object, name: str, maximum: int) -> int:
    """A count or core quantity as HAMi validates it; raises MutationError with its text."""
    value = res.as_int(raw)
    if value is None:
        raise MutationError(f"{name} must be an integer")
    if value <= 0:
        raise MutationError(f"{name} must be greater than 0")
    if value > maximum:
        raise MutationError(f"{name} must not exceed {maximum}")
    return value


class AWSNeuronVendor(GenericVendor):
    key = AWS_NEURON
    allocation_keys = ("", ALLOCATED)
    handshake_key = None
    lock_key = None
    use_uuid_key = USE_UUID
    nouse_uuid_key = NOUSE_UUID
    prefilter = False  # cores are bit masks and several devices ignore cores: no summary bound

    def __init__(self, names: ResourceNames) -> None:
        super().__init__(names)
        self.cores_per_device = 0
        """uint64 as HAMi keeps it: set by the first node with devices, never changed after."""

    # -- requests and admission -----------------------------------------------------------------

    def addressable_cores(self) -> int:
        """Cores one device gives a core request (HAMi `coresPerDevice`)."""
        observed = as_int64(self.cores_per_device)
        return MAX_CORES_PER_DEVICE if observed <= 0 else min(observed, MAX_CORES_PER_DEVICE)

    def split_cores(self, cores: int) -> tuple[int, int]:
        """(devices, cores per device) of a core request; raises MutationError (HAMi's text)."""
        per_device = self.addressable_cores()
        if cores <= per_device:
            return 1, cores
        if cores % per_device != 0:
            raise MutationError(
                f"{self.names.cores} must be 1 or a multiple of {per_device}, got {cores}"
            )
        nums = cores // per_device
        if nums > MAX_DEVICES:
            raise MutationError(
                f"{self.names.cores} needs {nums} devices, which exceeds the maximum of {MAX_DEVICES}"
            )
        return nums, per_device

    def _shape(self, container: Obj) -> tuple[int, int] | None:
        """(nums, coresreq) the container asks for, None for nothing; raises MutationError."""
        resources = res.resources_of(container) or {}
        raw = res.lookup(resources, self.names.count)
        if raw is not res.MISSING:
            return validate(raw, self.names.count, MAX_DEVICES), res.int32(self.cores_per_device)
        raw = res.lookup(resources, self.names.cores)
        if raw is res.MISSING:
            return None
        return self.split_cores(validate(raw, self.names.cores, MAX_CORES))

    def request(self, container: Obj) -> ContainerDeviceRequest | None:
        try:
            shape = self._shape(container)
        except MutationError:
            return None  # HAMi logs the invalid request and asks for nothing
        if shape is None:
            return None
        nums, cores = shape
        return ContainerDeviceRequest(
            nums=nums, type=self.key, memreq=0, mem_percentage_req=0, coresreq=cores
        )

    def mutate(self, container: dict[str, Any], pod: dict[str, Any]) -> bool:
        return self._shape(container) is not None

    # -- inventory ----------------------------------------------------------------------------------

    def node_devices(self, node: Obj) -> list[DeviceInfo]:
        counts, ok = capacity_int64(node, self.names.count)
        if not ok or counts == 0:
            raise InventoryError(f"device not found {self.names.count}")
        cores_total, _ = capacity_int64(node, self.names.cores)
        if self.cores_per_device == 0:
            self.cores_per_device = as_uint64(cores_total) // as_uint64(counts)
        cores = as_int64(self.cores_per_device)
        mask = (1 << min(cores, 64)) - 1 if cores > 0 else 0
        name = objects.name(node)
        instance_type = objects.labels(node).get(INSTANCE_TYPE_LABEL, "")
        return [
            NeuronDevice(
                id=f"{name}-{AWS_NEURON}-{i}", index=i, count=res.int32(self.cores_per_device), devmem=0,
                devcore=res.int32(mask), type=AWS_NEURON, numa=0, mode="", health=True,
                device_vendor=AWS_NEURON, instance_type=instance_type,
            )
            for i in range(max(counts, 0))
        ]

    # -- fit ----------------------------------------------------------------------------------------

    def ladder(
        self, request: ContainerDeviceRequest, devices: Sequence[DeviceInfo], usage: Sequence[DeviceUsage],
        order: Sequence[int], *, ctx: PodFitContext, cordoned: frozenset[str],
        allocated: Sequence[ContainerDevices] = (), quick: bool = False,
    ) -> FitResult | str | None:
        if request.nums > 1:
            # A contiguous run in the policy order: the quick verdict cannot answer.
            return None if quick else self._fit_several(request, devices, usage, order)
        pos, reasons = self._first_fitting(request, devices, usage, order, ctx=ctx)
        if quick:
            return "" if pos is not None else R.gen_reason(reasons, len(order))
        if pos is None:
            return FitResult(False, reason=R.gen_reason(reasons, len(order)))
        dev = devices[pos]
        # HAMi's per-device "awsusageinfo" starts at the device's used cores and grows with them,
        # so within one evaluation it always equals `usedcores`.
        mask = add_core_usage(usage[pos].usedcores, request.coresreq)
        return FitResult(True, [ContainerDevice(dev.id, request.type, 0, mask, dev.index)], [pos])

    def _first_fitting(
        self,
        request: ContainerDeviceRequest,
        devices: Sequence[DeviceInfo],
        usage: Sequence[DeviceUsage],
        order: Sequence[int],
        *,
        ctx: PodFitContext,
    ) -> tuple[int | None, dict[str, int]]:
        """The first device from the end of `order` that one device's request fits, and the
        reasons of the devices skipped before it."""
        filters = ctx.filters(self)
        assert isinstance(filters, SelectionFilters)
        reasons: dict[str, int] = {}
        for pos in reversed(order):
            dev, u = devices[pos], usage[pos]
            if not dev.health or u.mig_conflict:
                reason = R.CARD_NOT_HEALTH
            elif request.type not in dev.type or request.type != self.key:
                reason = R.CARD_TYPE_MISMATCH
            elif filters.uuids_active and not filters.uuid_ok(dev.id):
                reason = R.CARD_UUID_MISMATCH
            elif dev.count <= u.used:
                reason = R.CARD_TIME_SLICING_EXHAUSTED
            elif ctx.mutex and u.used > 0:
                reason = R.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT
            elif core_count(dev.devcore) - core_count(u.usedcores) < request.coresreq:
                reason = R.CARD_INSUFFICIENT_CORE
            else:
                return pos, reasons
            reasons[reason] = reasons.get(reason, 0) + 1
        return None, reasons

    def _fit_several(
        self,
        request: ContainerDeviceRequest,
        devices: Sequence[DeviceInfo],
        usage: Sequence[DeviceUsage],
        order: Sequence[int],
    ) -> FitResult:
        """HAMi's several-device Fit: `graph_select` picks places in the policy order, and each
        place is then read as a device INDEX (the first device in that order with it), whole."""
        places = graph_select(devices, usage, order, request.nums)
        if not places:
            return FitResult(False, reason=R.gen_reason({R.NUMA_NOT_FIT: 1}, len(order)))
        chosen: ContainerDevices = []
        positions: list[int] = []
        for place in places:
            pos = next((p for p in order if devices[p].index == place), None)
            if pos is None:
                continue  # no device has that index: HAMi takes fewer devices, silently
            dev = devices[pos]
            chosen.append(ContainerDevice(dev.id, request.type, dev.devmem, dev.devcore, dev.index))
            positions.append(pos)
        return FitResult(True, chosen, positions)

    # -- annotations ----------------------------------------------------------------------------------

    def extra_annotations(
        self, per_container: PodSingleDevice, *, node: str, now: int, pod: Obj | None
    ) -> dict[str, str]:
        out: dict[str, str] = {}
        containers = [*objects.init_containers(pod), *objects.containers(pod)] if pod is not None else []
        ids = ""  # accumulates over the containers, as HAMi's does
        for index, entries in enumerate(per_container):
            if not entries or index >= len(containers):
                continue
            by_count = res.limit(res.resources_of(containers[index]) or {}, self.names.count)
            for entry in entries:
                if by_count is not res.MISSING:
                    if (res.as_int(by_count) or 0) > 0:
                        ids += f"{entry.idx},"
                    continue
                first_core = self.cores_per_device * entry.idx
                for bit, core in ((1, first_core), (2, first_core + 1)):
                    if entry.usedcores & bit:
                        ids += f"{core},"
                        out[RESOURCE_TYPE] = self.names.cores
            if ids:
                out[ASSIGNED_IDS] = ids.rstrip(",")
                out[ALLOC_TIME] = str(now * 1_000_000_000)
                out[ALLOCATED_FLAG] = "false"
                out[ASSIGNED_NODE] = node
        return out


def graph_select(
    devices: Sequence[DeviceInfo], usage: Sequence[DeviceUsage], order: Sequence[int], count: int
) -> list[int]:
    """HAMi `graphSelect`: the first run of `count` consecutive PLACES of the policy order whose
    devices are free (unused and healthy) — any start on `inf*` instance types (a ring), else
    starts aligned to `count`, for counts 1, 4, 8 and 16 only. [] when none."""
    if not order:
        return []
    first = devices[order[0]]
    instance_type = first.instance_type if isinstance(first, NeuronDevice) else ""

    def free_run(start: int) -> list[int]:
        if len(order) < start + count:
            return []
        for place in range(start, start + count):
            pos = order[place]
            if usage[pos].used > 0 or not devices[pos].health or usage[pos].mig_conflict:
                return []
        return list(range(start, start + count))

    if "inf" in instance_type or "Inf" in instance_type:
        step = 1
    elif count in ALIGNED_BLOCKS:
        step = count
    else:
        return []
    for start in range(0, len(order), step):
        run = free_run(start)
        if run:
            return run
    return []


def vendors(config: DeviceConfig, flags: VendorFlags) -> Sequence[Vendor]:
    names = Section(config.other_vendors.get("awsneuron")).resource_names(memory=False, memory_factor=1)
    return [AWSNeuronVendor(names)]


SPEC = VendorSpec("awsneuron", __name__, keys=dict.fromkeys(("resourceCountName", "resourceCoreName")))
