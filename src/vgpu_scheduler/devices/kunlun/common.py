"""What Kunlun's two backends share: the uuid annotations and the topology-driven Fit.

Both `Fit`s (device.go, vdevice.go) hand `graghSelect` the vendor's devices in policy order with a
per-card check; a card whose uuid the pod's annotations exclude fails that check and is counted
once (CardUuidMismatch). The uuid annotations are read in two spellings, both must pass:
`hami.io/use-xpu-uuid` / `hami.io/no-use-xpu-uuid` and `baidu.com/use-gpuuuid` /
`baidu.com/nouse-gpuuuid`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from vgpu_scheduler.devices.kunlun import topo
from vgpu_scheduler.devices.protocol import FitResult
from vgpu_scheduler.devices.selection import SelectionFilters, uuid_set
from vgpu_scheduler.model import ContainerDevice, ContainerDeviceRequest, DeviceInfo, DeviceUsage

USE_UUID = "hami.io/use-xpu-uuid"
NOUSE_UUID = "hami.io/no-use-xpu-uuid"
BAIDU_USE_UUID = "baidu.com/use-gpuuuid"
BAIDU_NOUSE_UUID = "baidu.com/nouse-gpuuuid"

CardCheck = Callable[[DeviceInfo, DeviceUsage], bool]
"""Whether one card may be taken (HAMi's FitXPU / FitVXPU, the mutex variant)."""
EntryOf = Callable[[DeviceInfo], ContainerDevice]


@dataclass(slots=True, frozen=True)
class UuidFilters:
    """The pod's two pairs of uuid annotations (None members constrain nothing)."""

    hami: SelectionFilters
    baidu: SelectionFilters

    def ok(self, uuid: str) -> bool:
        return self.hami.uuid_ok(uuid) and self.baidu.uuid_ok(uuid)


def uuid_filters(annotations: Mapping[str, str]) -> UuidFilters:
    def pair(use: str, nouse: str) -> SelectionFilters:
        return SelectionFilters(
            use_uuids=uuid_set(annotations.get(use)), nouse_uuids=uuid_set(annotations.get(nouse))
        )

    return UuidFilters(pair(USE_UUID, NOUSE_UUID), pair(BAIDU_USE_UUID, BAIDU_NOUSE_UUID))


@dataclass(slots=True)
class Examined:
    """Each card of the request's list judged once: fits, and the uuids the annotations refused."""

    fits: list[bool]
    mismatched: set[str]


def examine(
    devices: Sequence[DeviceInfo],
    usage: Sequence[DeviceUsage],
    positions: Sequence[int],
    *,
    filters: UuidFilters,
    check: CardCheck,
) -> Examined:
    fits: list[bool] = []
    mismatched: set[str] = set()
    for p in positions:
        dev = devices[p]
        if not filters.ok(dev.id):
            mismatched.add(dev.id)
            fits.append(False)
        else:
            fits.append(check(dev, usage[p]))
    return Examined(fits, mismatched)


def topology_fit(
    request: ContainerDeviceRequest,
    devices: Sequence[DeviceInfo],
    order: Sequence[int],
    *,
    examined: Examined,
    entry_of: EntryOf,
) -> FitResult | None:
    """The chosen cards, or None when graghSelect finds no combination.

    graghSelect answers card indices; each is mapped back to the first card of the list with that
    index (an index no card has is skipped: HAMi then fits with fewer cards, or none)."""
    chosen = topo.graph_select([devices[p].index for p in order], examined.fits, request.nums)
    if not chosen:
        return None
    result = FitResult(True)
    for index in chosen:
        pos = next((p for p in order if devices[p].index == index), None)
        if pos is not None:
            result.devices.append(entry_of(devices[pos]))
            result.positions.append(pos)
    return result


def order_free_outcome(nums: int, fitting: int, cards: int) -> bool | None:
    """Whether the request fits, when the answer cannot depend on the list order; else None.

    `fitting` of the `cards` cards pass the per-card check."""
    if nums == topo.CARDS:
        return fitting == nums
    if nums not in (1, 2, 4) or fitting < nums:
        return False
    if nums == 1 and cards <= topo.CARDS:
        return True  # some wing then holds 1 to 4 fitting cards: the wing walk takes one
    return None
