"""Vastai accelerators (HAMi `pkg/device/vastai`): whole devices, or dies of one card in die mode.

Section `vastai` (`resourceCountName` only: no memory or core resources, no legacy flags).
Inventory in `hami.io/node-va-register`, JSON only, every device's `devcore` forced to 100 (only
the device scores read it); handshake `hami.io/node-handshake-va` (the generic check and cleanup);
allocations under `hami.io/Vastai-devices-{to-allocate,allocated}`; uuid selection
`vastaitech.com/{use,nouse}-gpuuuid` (no type selection); node lock `hami.io/mutex.lock`.

A request is a count (from `limits`, else `requests`) and nothing else: memory 100 %, cores 0, and
`Fit` looks at neither. Die mode is each device's `custominfo` (`DeviceStrategy: die`, `AIC`: the
physical card holding the die), which the shared inventory decoder does not keep: `node_devices`
reads it into `VastaiDevice`. When the first device of the fit order is a die, `Fit` collects every
passing die and, asking for several, prefers the cards holding most of them; under the mutex
policy a die on a card with a used die is refused. `ScoreNode` rewards allocations whose dies
share a card.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

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
from vgpu_scheduler.gocompat.parsing import json_kind
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
from vgpu_scheduler.wire.inventory import InventoryError, decode_node_devices

VASTAI = "Vastai"
REGISTER = "hami.io/node-va-register"
HANDSHAKE = "hami.io/node-handshake-va"
TO_ALLOCATE = "hami.io/Vastai-devices-to-allocate"
ALLOCATED = "hami.io/Vastai-devices-allocated"
USE_UUID = "vastaitech.com/use-gpuuuid"
NOUSE_UUID = "vastaitech.com/nouse-gpuuuid"

STRATEGY = "DeviceStrategy"
DIE = "die"
AIC = "AIC"
FORCED_DEVCORE = 100

_F32 = struct.Struct("f")


def f32(x: float) -> float:
    """Round to the nearest float32 (HAMi's ScoreNode computes in float32)."""
    value: float = _F32.unpack(_F32.pack(x))[0]
    return value


@dataclasses.dataclass(slots=True)
class VastaiDevice(DeviceInfo):
    """A Vastai device with the `custominfo` of its inventory entry (None when it has none)."""

    custom_info: Mapping[str, Any] | None = None


def custom_info(dev: DeviceInfo) -> Mapping[str, Any] | None:
    return dev.custom_info if isinstance(dev, VastaiDevice) else None


def is_die(dev: DeviceInfo) -> bool:
    """HAMi `isDieMode` on one device: custominfo names the `die` strategy."""
    info = custom_info(dev)
    return info is not None and info.get(STRATEGY) == DIE


def card_of(dev: DeviceInfo) -> str | None:
    """The physical card (AIC) a die sits on, when custominfo names it as a string."""
    info = custom_info(dev)
    aic = info.get(AIC) if info is not None else None
    return aic if isinstance(aic, str) else None


def best_combination(nums: int, chosen: list[tuple[int, ContainerDevice, str | None]]) -> list[int]:
    """HAMi `computeBestCombination`: indexes into `chosen` taking whole cards, fullest first.

    Dies without a card are left out (the result may then be short, as in HAMi). Cards holding
    equally many dies keep the order they were first met in (HAMi iterates a Go map there, so its
    order is random)."""
    by_card: dict[str, list[int]] = {}
    for i, (_, _, card) in enumerate(chosen):
        if card is not None:
            by_card.setdefault(card, []).append(i)
    out: list[int] = []
    for members in sorted(by_card.values(), key=len, reverse=True):  # sorted() is stable
        for i in members:
            out.append(i)
            if len(out) == nums:
                return out
    return out


class VastaiVendor(GenericVendor):
    key = VASTAI
    allocation_keys = (TO_ALLOCATE, ALLOCATED)
    handshake_key = HANDSHAKE
    register_key = REGISTER
    inventory_dialect = "json"
    use_uuid_key = USE_UUID
    nouse_uuid_key = NOUSE_UUID
    default_cores = 0
    # Memory and cores are never checked: the request bounds nothing the engine's summary sees.
    prefilter = False
    scores_nodes = True

    # -- requests ------------------------------------------------------------------------------

    def request(self, container: Obj) -> ContainerDeviceRequest | None:
        return self.whole_device_request(container, drop_empty=True)

    # -- inventory --------------------------------------------------------------------------------

    def node_devices(self, node: Obj) -> list[DeviceInfo]:
        value = objects.annotation(node, REGISTER)
        if value is None:
            raise InventoryError(f"annos not found {REGISTER}")
        decoded = decode_node_devices(value, "json")
        infos = custom_infos(value, len(decoded))
        devices: list[DeviceInfo] = []
        for dev, info in zip(decoded, infos, strict=True):
            fields = {f.name: getattr(dev, f.name) for f in dataclasses.fields(DeviceInfo)}
            fields.update(devcore=FORCED_DEVCORE, device_vendor=VASTAI)
            devices.append(VastaiDevice(**fields, custom_info=info))
        if not devices:
            raise InventoryError("no gpu found on node")
        return devices

    # -- fit --------------------------------------------------------------------------------------

    def ladder(
        self, request: ContainerDeviceRequest, devices: Sequence[DeviceInfo], usage: Sequence[DeviceUsage],
        order: Sequence[int], *, ctx: PodFitContext, cordoned: frozenset[str],
        allocated: Sequence[ContainerDevices] = (), quick: bool = False,
    ) -> FitResult | str | None:
        """HAMi Vastai `Fit` over `order` from the end."""
        # Die mode is decided by the first device of the sorted order: only without dies is the
        # verdict order-free (each device then judged on its own).
        if quick and any(is_die(devices[p]) for p in order):
            return None
        filters = ctx.filters(self)
        assert isinstance(filters, SelectionFilters)
        die_mode = bool(order) and is_die(devices[order[0]])
        mutex = ctx.mutex
        occupied: set[str] = set()
        if mutex and die_mode:
            # Under mutex a card is exclusive: a used die makes its sibling dies unusable.
            for p in order:
                card = card_of(devices[p])
                if usage[p].used > 0 and card is not None:
                    occupied.add(card)
        origin = remaining = request.nums
        type_ok = request.type == VASTAI
        reasons: dict[str, int] = {}
        chosen: list[tuple[int, ContainerDevice, str | None]] = []
        for pos in reversed(order):
            dev = devices[pos]
            u = usage[pos]
            if not dev.health or u.mig_conflict:
                reason = R.CARD_NOT_HEALTH
            elif not type_ok:
                reason = R.CARD_TYPE_MISMATCH
            elif not filters.uuid_ok(dev.id):
                reason = R.CARD_UUID_MISMATCH
            elif dev.count <= u.used:
                reason = R.CARD_TIME_SLICING_EXHAUSTED
            elif mutex and (u.used > 0 or (die_mode and card_of(dev) in occupied)):
                reason = R.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT
            else:
                if remaining > 0:
                    if not die_mode:
                        remaining -= 1
                    entry = ContainerDevice(dev.id, request.type, 0, request.coresreq, dev.index)
                    chosen.append((pos, entry, card_of(dev)))
                if remaining == 0 and not die_mode:
                    return "" if quick else self._chosen(chosen)
                continue
            reasons[reason] = reasons.get(reason, 0) + 1
        if die_mode and len(chosen) >= origin:
            if quick:
                return ""
            if len(chosen) == origin:
                return self._chosen(chosen)
            picked = [0] if origin == 1 else best_combination(origin, chosen)
            return self._chosen([chosen[i] for i in picked])
        if chosen:
            reasons[R.ALLOCATED_CARDS_INSUFFICIENT_REQUEST] = len(chosen)
        text = R.gen_reason(reasons, len(order))
        return text if quick else FitResult(False, reason=text)

    @staticmethod
    def _chosen(chosen: list[tuple[int, ContainerDevice, str | None]]) -> FitResult:
        return FitResult(True, [e for _, e, _ in chosen], [p for p, _, _ in chosen])

    # -- score ------------------------------------------------------------------------------------

    def score_node(
        self,
        per_container: PodSingleDevice,
        *,
        annotations: Mapping[str, str],
        devices: Sequence[DeviceInfo],
        previous: Sequence[DeviceUsage],
        policy: str,
    ) -> float:
        """HAMi Vastai `ScoreNode`: per container, the share of its dies on its fullest card; 0
        as soon as one device is not a die with a card (its entries carry the device's custominfo)."""
        by_id: dict[str, DeviceInfo] = {}
        for dev in devices:
            by_id.setdefault(dev.id, dev)
        score = 0.0
        for entries in per_container:
            if not entries:
                continue
            per_card: dict[str, int] = {}
            for entry in entries:
                found = by_id.get(entry.uuid)
                info = custom_info(found) if found is not None else None
                if info is None:
                    return 0.0
                strategy = info.get(STRATEGY)
                if isinstance(strategy, str) and strategy != DIE:
                    return 0.0
                if AIC not in info:
                    return 0.0
                card = info[AIC]
                if isinstance(card, str):
                    per_card[card] = per_card.get(card, 0) + 1
            total = sum(per_card.values())
            if total == 0:
                continue
            score = f32(score + f32(max(per_card.values()) / total))
        return score


def custom_infos(value: str, n: int) -> list[Mapping[str, Any] | None]:
    """The `custominfo` object of each of the `n` devices of a JSON register annotation that
    `decode_node_devices` accepted (field names matched case-insensitively, as Go does; a value
    that is not an object is Go's unmarshal error)."""
    if "custominfo" not in value.lower():
        return [None] * n
    raw = msgspec.json.decode(value)
    out: list[Mapping[str, Any] | None] = []
    for i, obj in enumerate(raw or ()):
        info: Any = None
        if isinstance(obj, dict):
            for key, field in obj.items():
                if key.lower() == "custominfo":
                    info = field
        if info is not None and not isinstance(info, dict):
            raise InventoryError(f"device {i}: field 'custominfo' must be an object, got {json_kind(info)}")
        out.append(info)
    return out


def vendors(config: DeviceConfig, flags: VendorFlags) -> Sequence[Vendor]:
    names = Section(config.other_vendors.get("vastai")).resource_names(memory=False, cores=False)
    return [VastaiVendor(names)]


SPEC = VendorSpec("vastai", __name__, keys=dict.fromkeys(("resourceCountName",)))
