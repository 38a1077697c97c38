"""The order-free verdict of the common request, specialised (`GenericVendor.quick_judge`).

The engine judges every changed node for every pending pod shape, and most of those judgements are
of a plain request: no NUMA grouping, quota, topology or mutex, the request's own vendor type (type,
mode and uuid filters are checked as the ladder does). For it the ladder (`GenericVendor.ladder`
with `quick=True`) reduces to a few comparisons per device; this is that loop with the request's
constants worked out once and the per-reason counts kept in locals. The reason text is then looked
up by those counts (a few distinct combinations recur across thousands of nodes) instead of being
formatted and sorted again. The answers are the ladder's exactly (the vendor tests compare both on
every case).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

from vgpu_scheduler.devices.protocol import QuickJudge
from vgpu_scheduler.model import DeviceInfo, DeviceUsage
from vgpu_scheduler.wire import reasons as R

_MAX_TEXTS = 1 << 14
"""Reason texts remembered (a combination of counts is a handful of small ints: few recur)."""

_texts: dict[tuple[int, ...], str] = {}

Counts = tuple[int, int, int, int, int, int, int, int, int, int]


def _text(counts: Counts) -> str:
    """GenReason of (not healthy, type mismatch, uuid mismatch, time slicing exhausted,
    insufficient memory, insufficient core, exclusive conflict, compute units exhausted,
    collected, total)."""
    text = _texts.get(counts)
    if text is None:
        health, types, uuids, slicing, memory, core, exclusive, units, collected, total = counts
        named = {
            R.CARD_NOT_HEALTH: health,
            R.CARD_TYPE_MISMATCH: types,
            R.CARD_UUID_MISMATCH: uuids,
            R.CARD_TIME_SLICING_EXHAUSTED: slicing,
            R.CARD_INSUFFICIENT_MEMORY: memory,
            R.CARD_INSUFFICIENT_CORE: core,
            R.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT: exclusive,
            R.CARD_COMPUTE_UNITS_EXHAUSTED: units,
            R.ALLOCATED_CARDS_INSUFFICIENT_REQUEST: collected,
        }
        # Interned: the engine caches these texts for thousands of nodes (`VerdictGroup.put`).
        text = sys.intern(R.gen_reason({reason: n for reason, n in named.items() if n}, total))
        if len(_texts) >= _MAX_TEXTS:
            _texts.clear()
        _texts[counts] = text
    return text


def short_of_memory(devices: int) -> str:
    """The plain judge's verdict on a node whose `devices` are all healthy, uncordoned and with a
    free slot, none with the request's memory free: each fails the memory check, the first one
    it meets."""
    return _text((0, 0, 0, 0, devices, 0, 0, 0, 0, devices))


_MAX_INVENTORIES = 1 << 14
"""Nodes whose device ids `_ids_at` remembers (more than a fleet's: cleared when full)."""

_inventories: dict[int, tuple[Sequence[int], Sequence[DeviceInfo], frozenset[str]]] = {}


def _ids_at(devices: Sequence[DeviceInfo], positions: Sequence[int]) -> frozenset[str]:
    """The ids of the devices at `positions`, remembered per `positions` object: the engine passes
    each node's own list (`NodeView.positions`, made once per inventory, like `devices`), so every
    pod judging the node shares one set. The objects themselves are kept, so an id is never
    another list's."""
    entry = _inventories.get(id(positions))
    if entry is not None and entry[0] is positions and entry[1] is devices:
        return entry[2]
    ids = frozenset(devices[pos].id for pos in positions)
    if len(_inventories) >= _MAX_INVENTORIES:
        _inventories.clear()
    _inventories[id(positions)] = (positions, devices, ids)
    return ids


def plain_judge(
    *,
    nums: int,
    memreq: int,
    percentage: int | None,
    coresreq: int,
    instance_mode: str | None,
    cordon_aware: bool,
    type_ok: Callable[[DeviceInfo], bool] | None = None,
    use_uuids: frozenset[str] | None = None,
    nouse_uuids: frozenset[str] | None = None,
    fallback: QuickJudge,
) -> QuickJudge:
    """The ladder's quick verdict of a plain request (see module doc): `memreq` when `percentage`
    is None, else that percentage of each device's memory; `coresreq` already clamped to 100.
    `type_ok`: the pod's type (and mode) filters, None when it has none; `use_uuids` /
    `nouse_uuids`: its uuid filters (HAMi CheckUUID), None when absent. A node
    with cordoned devices the vendor honours goes to `fallback` (the full ladder)."""
    coresreq = min(coresreq, 100)
    whole_card = coresreq == 100
    no_cores = coresreq == 0
    fixed_mem = max(memreq, 0)

    def judge(
        devices: Sequence[DeviceInfo], usage: Sequence[DeviceUsage], positions: Sequence[int],
        cordoned: frozenset[str],
    ) -> str | None:
        if cordoned and cordon_aware:
            return fallback(devices, usage, positions, cordoned)
        remaining = nums
        health = types = uuids = slicing = memory = core = exclusive = units = collected = 0
        # Walked from the end as the ladder does: a MIG device met before Nums passed is order-dependent.
        for pos in reversed(positions):
            dev = devices[pos]
            u = usage[pos]
            if not dev.health or u.mig_conflict:
                health += 1
                continue
            if type_ok is not None and not type_ok(dev):
                types += 1
                continue
            if (use_uuids is not None and dev.id not in use_uuids) or (
                nouse_uuids is not None and dev.id in nouse_uuids
            ):
                uuids += 1
                continue
            used = u.used
            if dev.count <= used:
                slicing += 1
                continue
            devmem = dev.devmem
            if percentage is None:
                need = fixed_mem
            else:
                product = devmem * percentage  # Go division truncates toward zero
                need = product // 100 if product >= 0 else -(-product // 100)
            devcore = dev.devcore
            usedcores = u.usedcores
            if devmem - u.usedmem < need:
                memory += 1
            elif devcore - usedcores < coresreq:
                core += 1
            elif whole_card and devcore == 100 and used > 0:
                exclusive += 1
            elif no_cores and devcore != 0 and usedcores == devcore:
                units += 1
            elif instance_mode is not None and dev.mode == instance_mode:
                return None  # instances of one container interact: order matters
            else:
                if remaining > 0:
                    remaining -= 1
                    collected += 1
                if remaining == 0:
                    return ""
        counts = (health, types, uuids, slicing, memory, core, exclusive, units, collected, len(positions))
        text = _texts.get(counts)  # `_text`, inline once known
        return text if text is not None else _text(counts)

    if use_uuids is None or type_ok is not None:
        return judge
    pinned_to = use_uuids

    def pinned(
        devices: Sequence[DeviceInfo], usage: Sequence[DeviceUsage], positions: Sequence[int],
        cordoned: frozenset[str],
    ) -> str | None:
        """`judge` of a pod pinned to some device uuids, on most nodes none of them: there every
        device fails the health check or else the uuid check, whatever its usage."""
        if cordoned and cordon_aware:
            return judge(devices, usage, positions, cordoned)
        known = _inventories.get(id(positions))  # `_ids_at`, inline once known
        if known is not None and known[0] is positions and known[1] is devices:
            ids = known[2]
        else:
            ids = _ids_at(devices, positions)
        if not pinned_to.isdisjoint(ids):
            return judge(devices, usage, positions, cordoned)
        unhealthy = 0
        for pos in positions:
            if not devices[pos].health or usage[pos].mig_conflict:
                unhealthy += 1
        total = len(positions)
        counts = (unhealthy, 0, total - unhealthy, 0, 0, 0, 0, 0, 0, total)
        text = _texts.get(counts)
        return text if text is not None else _text(counts)

    return pinned
