"""Whole Kunlun XPU cards (HAMi `pkg/device/kunlun/device.go`, vendor key `kunlun`).

* Inventory from node capacity `<resourceCountName>`: N cards `<node>-kunlun-<i>`, index i,
  Count 100, Devmem 98304, Devcore 100, type `kunlun`, NUMA 1 for the second half (i >= N/2);
  capacity absent, 0 or not an integer ⇒ "device not found <name>". Always healthy, no
  handshake, nothing to clean up, never locks.
* Request: count from limits, else requests (an integer, wrapped to int32); memory 0 at 100 %,
  cores 0.
* Fit: `graghSelect` over idle healthy cards (Used == 0), the uuid annotations of `common`;
  failure is "K/N CardUuidMismatch" when K cards were refused by uuid, else "1/N NumaNotFit".
  An entry takes the card's whole memory and cores; AddResourceUsage only counts the slot.
* Annotations: `hami.io/kunlun-allocated` (no to-allocate key) and `BAIDU_COM_DEVICE_IDX`, the
  card indices of the last container with cards, comma-separated (the vendor's device plugin
  reads it).
* Node score: `calcscore` of the pod's cards against the node's used cards, 0 when the node has
  a device of another kind.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from datetime import datetime, tzinfo

from vgpu_scheduler.devices import resources as res
from vgpu_scheduler.devices.base import GenericVendor
from vgpu_scheduler.devices.kunlun import common, topo
from vgpu_scheduler.devices.protocol import FitResult, Health, Obj, PodFitContext
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

KUNLUN = "kunlun"
ALLOCATED = "hami.io/kunlun-allocated"
DEVICE_SELECTION = "BAIDU_COM_DEVICE_IDX"
CARD_MEMORY = 98304
CARD_CORES = 100
CARD_COUNT = 100


def idle_and_healthy(dev: DeviceInfo, usage: DeviceUsage) -> bool:
    """HAMi `FitXPU`: a whole card is taken only when nobody uses it."""
    return usage.used == 0 and dev.health


class KunlunVendor(GenericVendor):
    key = KUNLUN
    allocation_keys = ("", ALLOCATED)
    handshake_key = None
    lock_key = None
    register_key = None
    prefilter = False
    scores_nodes = True

    # -- requests ------------------------------------------------------------------------------

    def request(self, container: Obj) -> ContainerDeviceRequest | None:
        return self.whole_device_request(container)

    # -- registration --------------------------------------------------------------------------

    def node_devices(self, node: Obj) -> list[DeviceInfo]:
        capacity = objects.status(node).get("capacity")
        raw = capacity.get(self.names.count) if isinstance(capacity, Mapping) and self.names.count else None
        cards = res.as_int(raw) if raw is not None else 0
        if not cards:  # absent, zero or not an integer
            raise InventoryError(f"device not found {self.names.count}")
        name = objects.name(node)
        return [
            DeviceInfo(
                id=f"{name}-kunlun-{i}", index=i, count=CARD_COUNT, devmem=CARD_MEMORY, devcore=CARD_CORES,
                type=KUNLUN, numa=1 if i >= cards // 2 else 0, mode="", health=True, device_vendor=KUNLUN,
            )
            for i in range(cards)  # a negative capacity: no card, no error
        ]

    def check_health(self, node: Obj, now: datetime, tz: tzinfo | None) -> Health:
        return Health(healthy=True, need_update=True)

    # -- fit -----------------------------------------------------------------------------------

    def pod_filters(self, annotations: Mapping[str, str]) -> Hashable:
        return common.uuid_filters(annotations)

    def _examine(
        self, devices: Sequence[DeviceInfo], usage: Sequence[DeviceUsage], positions: Sequence[int],
        ctx: PodFitContext,
    ) -> common.Examined:
        filters = ctx.filters(self)
        assert isinstance(filters, common.UuidFilters)
        return common.examine(devices, usage, positions, filters=filters, check=idle_and_healthy)

    @staticmethod
    def _reason(examined: common.Examined, cards: int) -> str:
        if examined.mismatched:
            return R.gen_reason({R.CARD_UUID_MISMATCH: len(examined.mismatched)}, cards)
        return R.gen_reason({R.NUMA_NOT_FIT: 1}, cards)

    def ladder(
        self, request: ContainerDeviceRequest, devices: Sequence[DeviceInfo], usage: Sequence[DeviceUsage],
        order: Sequence[int], *, ctx: PodFitContext, cordoned: frozenset[str],
        allocated: Sequence[ContainerDevices] = (), quick: bool = False,
    ) -> FitResult | str | None:
        examined = self._examine(devices, usage, order, ctx)
        if quick:
            outcome = common.order_free_outcome(request.nums, sum(examined.fits), len(order))
            if outcome is None:
                return None
            return "" if outcome else self._reason(examined, len(order))

        def entry_of(dev: DeviceInfo) -> ContainerDevice:
            return ContainerDevice(dev.id, request.type, dev.devmem, dev.devcore, dev.index)

        result = common.topology_fit(request, devices, order, examined=examined, entry_of=entry_of)
        return result if result is not None else FitResult(False, reason=self._reason(examined, len(order)))

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
        usage.used += 1  # HAMi counts the slot only; the entry's memory and cores are not added
        return entry

    # -- annotations and score -----------------------------------------------------------------

    def extra_annotations(
        self, per_container: PodSingleDevice, *, node: str, now: int, pod: Obj | None
    ) -> dict[str, str]:
        out: dict[str, str] = {}
        for ctr in per_container:
            if ctr:  # each container with cards overwrites the one before
                out[DEVICE_SELECTION] = ",".join(str(d.idx) for d in ctr)
        return out

    def score_node(
        self,
        per_container: PodSingleDevice,
        *,
        annotations: Mapping[str, str],
        devices: Sequence[DeviceInfo],
        previous: Sequence[DeviceUsage],
        policy: str,
    ) -> float:
        used: list[int] = []
        for dev, use in zip(devices, previous, strict=True):
            if KUNLUN not in dev.type:
                return 0.0
            if use.used > 0:
                used.append(dev.index)
        current: list[int] = []
        for ctr in per_container:
            for entry in ctr:
                if KUNLUN not in entry.type:
                    return 0.0
                current.append(entry.idx)
        return topo.fragmentation_score(set(used), set(current))
