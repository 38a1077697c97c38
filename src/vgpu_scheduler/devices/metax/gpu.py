"""Metax GPU (HAMi metax `device.go`): whole devices counted from node capacity.

The inventory is `status.capacity[<resourceCountName>]` devices of 64 GiB and 100 cores each
(ids `<node>-metax-<i>`); there is no handshake, health is "capacity > 0", the vendor never locks.
A container asks for whole devices (memory 100 %, cores 100). Its fit is the common check ladder
plus HAMi's custom rule: every device of one pod must be the same device (so a pod's second
container asking for Metax GPUs finds none). Node score from the device plugin's annotations
`metax-tech.com/gpu.topology.losses` (binpack) / `.scores` (spread), by number of devices taken.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable, Hashable, Mapping, Sequence
from datetime import datetime, tzinfo
from typing import Any

import msgspec

from vgpu_scheduler.devices import resources as res
from vgpu_scheduler.devices.base import GenericVendor
from vgpu_scheduler.devices.protocol import FitResult, Health, NodeBound, Obj, PodFitContext, ResourceNames
from vgpu_scheduler.devices.resources import trunc_div
from vgpu_scheduler.gocompat.parsing import GoSyntaxError, parse_int
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

GPU = "Metax-GPU"
TO_ALLOCATE = "hami.io/metax-gpu-devices-to-allocate"
ALLOCATED = "hami.io/metax-gpu-devices-allocated"
LOSSES = "metax-tech.com/gpu.topology.losses"
SCORES = "metax-tech.com/gpu.topology.scores"
DEVICE_MEMORY = 65536

_decode: Callable[[str | bytes], Any] = msgspec.json.Decoder().decode


def f32(x: float) -> float:
    """Round to float32, as HAMi's scores are."""
    return float(struct.unpack("f", struct.pack("f", x))[0])


def capacity_count(node: Obj, name: str) -> int | None:
    """`status.capacity[name]` as `Quantity.AsInt64` (a missing name is 0), None when not exact."""
    capacity = objects.as_mapping(objects.status(node).get("capacity"))
    if not name or name not in capacity:
        return 0
    return res.as_int(capacity[name])


@functools.lru_cache(maxsize=1024)  # a model's nodes share one text: decoded once, not per node
def topology_value(annotation: str, wanted: int) -> int:
    """HAMi `parseMetaxAnnos`: entry `wanted` of a JSON object {"<n>": <int>}; 0 when the text is
    not such an object (any key or value Go cannot read as int) or has no such entry."""
    try:
        raw = _decode(annotation)
    except msgspec.DecodeError:
        return 0
    if raw is None:
        return 0
    if type(raw) is not dict:
        return 0
    table: dict[int, int] = {}
    for key, value in raw.items():
        try:
            n = parse_int(key)
        except GoSyntaxError:
            return 0
        if value is None:
            table[n] = 0
        elif type(value) is int and -(2**63) <= value < 2**63:
            table[n] = value
        else:
            return 0
    return table.get(wanted, 0)


def topology_score(annotations: Mapping[str, str], n: int, policy: str) -> float:
    """ScoreNode for a pod taking `n` devices on a node with `annotations` (see `score_node`)."""
    key = LOSSES if policy == "binpack" else SCORES if policy == "spread" else None
    value = annotations.get(key) if key else None
    if value is None:
        return 0.0
    return _score_of(value, n)


@functools.lru_cache(maxsize=1024)
def _score_of(annotation: str, n: int) -> float:
    return f32(2000 - f32(topology_value(annotation, n)))


class MetaxGpuVendor(GenericVendor):
    key = GPU
    allocation_keys = (TO_ALLOCATE, ALLOCATED)
    lock_key = None
    scores_nodes = True

    def __init__(self, names: ResourceNames) -> None:
        super().__init__(names)
        self.inventory_keys = ()  # read from node capacity: never cached

    # -- requests --------------------------------------------------------------------------------

    def request(self, container: Obj) -> ContainerDeviceRequest | None:
        resources = res.resources_of(container)
        if resources is None:
            return None
        count = res.as_int(res.lookup(resources, self.names.count))
        if count is None or res.int32(count) <= 0:
            return None
        return ContainerDeviceRequest(nums=res.int32(count), type=GPU, memreq=0, mem_percentage_req=100,
                                      coresreq=100)

    # -- registration ----------------------------------------------------------------------------

    def node_devices(self, node: Obj) -> list[DeviceInfo]:
        count = capacity_count(node, self.names.count)
        if count is None or count == 0:
            raise InventoryError(f"device not found {self.names.count}")
        name = objects.name(node)
        return [
            DeviceInfo(id=f"{name}-metax-{i}", index=i, count=1, devmem=DEVICE_MEMORY, devcore=100, type=GPU,
                       numa=0, health=True, device_vendor=GPU)
            for i in range(max(count, 0))
        ]

    def check_health(self, node: Obj, now: datetime, tz: tzinfo | None) -> Health:
        count = capacity_count(node, self.names.count) or 0
        return Health(healthy=count > 0, need_update=True)

    # -- fit -------------------------------------------------------------------------------------

    def pod_filters(self, annotations: Mapping[str, str]) -> Hashable:
        return None  # no selection annotations

    def ladder(
        self, request: ContainerDeviceRequest, devices: Sequence[DeviceInfo], usage: Sequence[DeviceUsage],
        order: Sequence[int], *, ctx: PodFitContext, cordoned: frozenset[str],
        allocated: Sequence[ContainerDevices] = (), quick: bool = False,
    ) -> FitResult | str | None:
        """HAMi metax `Fit`: the common ladder (no cordon, NUMA, quota or selection annotations)
        followed by the rule that a pod's Metax GPUs are all one device."""
        if quick:
            return None  # the custom rule reads the pod's earlier containers, which only `fit` sees
        earlier = {dev.uuid for ctr in allocated for dev in ctr}
        remaining = request.nums
        coresreq = request.coresreq
        reasons: dict[str, int] = {}
        chosen: ContainerDevices = []
        positions: list[int] = []
        for pos in reversed(order):
            dev, u = devices[pos], usage[pos]
            reason = ""
            if not dev.health:
                reason = R.CARD_NOT_HEALTH
            elif request.type != GPU:
                reason = R.CARD_TYPE_MISMATCH
            elif dev.count <= u.used:
                reason = R.CARD_TIME_SLICING_EXHAUSTED
            elif ctx.mutex and u.used > 0:
                reason = R.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT
            else:
                coresreq = min(coresreq, 100)  # HAMi clamps and the clamp sticks
                memreq = max(request.memreq, 0)
                if request.mem_percentage_req != PERCENTAGE_UNSET and request.memreq == 0:
                    memreq = trunc_div(res.int32(dev.devmem * request.mem_percentage_req), 100)
                if dev.devmem - u.usedmem < memreq:
                    reason = R.CARD_INSUFFICIENT_MEMORY
                elif dev.devcore - u.usedcores < coresreq:
                    reason = R.CARD_INSUFFICIENT_CORE
                elif dev.devcore == 100 and coresreq == 100 and u.used > 0:
                    reason = R.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT
                elif dev.devcore != 0 and u.usedcores == dev.devcore and coresreq == 0:
                    reason = R.CARD_COMPUTE_UNITS_EXHAUSTED
                elif earlier and earlier != {dev.id}:
                    reason = R.CARD_NOT_FOUND_CUSTOM_FILTER_RULE
                else:
                    if remaining > 0:
                        remaining -= 1
                        chosen.append(ContainerDevice(dev.id, request.type, memreq, coresreq, dev.index))
                        positions.append(pos)
                    if remaining == 0:
                        return FitResult(True, chosen, positions)
                    continue
            reasons[reason] = reasons.get(reason, 0) + 1
        if chosen:
            reasons[R.ALLOCATED_CARDS_INSUFFICIENT_REQUEST] = len(chosen)
        return FitResult(False, reason=R.gen_reason(reasons, len(order)))

    # -- score, admission --------------------------------------------------------------------------

    def score_node(
        self,
        per_container: PodSingleDevice,
        *,
        annotations: Mapping[str, str],
        devices: Sequence[DeviceInfo],
        previous: Sequence[DeviceUsage],
        policy: str,
    ) -> float:
        """Binpack: 2000 − loss[n] (lower loss preferred); spread: 2000 − score[n]; n = the number
        of devices the pod takes; no annotation: 0."""
        return topology_score(annotations, sum(len(ctr) for ctr in per_container), policy)

    def score_bound(
        self,
        requests: Sequence[ContainerDeviceRequest],
        *,
        pod_annotations: Mapping[str, str],
        policy: str,
        annotations: Mapping[str, str] | None = None,
        devices: Sequence[DeviceInfo] = (),
        previous: Sequence[DeviceUsage] = (),
    ) -> float | None:
        """The score itself on a given node: a fit takes exactly the devices asked. On any node
        none (the annotations' values are any integers)."""
        if annotations is None:
            return None
        n = requests[0].nums if len(requests) == 1 else sum(r.nums for r in requests)
        return topology_score(annotations, n, policy)

    def score_bound_key(
        self,
        requests: Sequence[ContainerDeviceRequest],
        *,
        pod_annotations: Mapping[str, str],
        policy: str,
    ) -> Hashable | None:
        """The per-node bound reads only the number of devices asked."""
        return sum(r.nums for r in requests)

    def node_score_bound(
        self,
        requests: Sequence[ContainerDeviceRequest],
        *,
        pod_annotations: Mapping[str, str],
        policy: str,
    ) -> NodeBound:
        """`score_bound` per node: the node's topology score for the number of devices asked
        (`topology_score` with the annotation key chosen once)."""
        n = sum(r.nums for r in requests)
        key = LOSSES if policy == "binpack" else SCORES if policy == "spread" else None
        if key is None:
            return lambda annotations, devices, previous: 0.0

        def bound(annotations: Mapping[str, str], devices: Sequence[DeviceInfo],
                  previous: Sequence[DeviceUsage]) -> float:
            value = annotations.get(key)
            return 0.0 if value is None else _score_of(value, n)

        return bound

    def node_bound_class(self, annotations: Mapping[str, str]) -> Hashable:
        """The bound reads only the topology annotations: nodes of one model share a class."""
        return annotations.get(LOSSES), annotations.get(SCORES)

    def mutate(self, container: dict[str, Any], pod: dict[str, Any]) -> bool:
        return res.present(container, "limits", self.names.count)
