"""One node's record in the device ledger (`engine/ledger.py`): its live view and usage totals,
the `NodeSummary` behind the decision's cheap "cannot fit" test, and how one pod's allocation is
counted in or out of it (`apply_pod`)."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass

from vgpu_scheduler.engine.nodeview import DeviceUsage, NodeView
from vgpu_scheduler.engine.podinfo import PodAllocation
from vgpu_scheduler.engine.scores import node_default_score
from vgpu_scheduler.model import MIG_MODE, DeviceInfo


@dataclass(slots=True, frozen=True)
class NodeSummary:
    """Upper bounds over the usable devices of a node, for cheap "cannot fit" tests.

    Usable = healthy, not cordoned, no MIG conflict. Every field is a bound that any single device
    accepting a request must satisfy, so a request exceeding it cannot fit anywhere on the node.
    """

    slot_free_devices: int
    """Usable devices with used < count."""
    max_free_mem: int
    max_free_cores: int
    min_devmem: int
    """Smallest devmem among usable devices with a free slot (memory percentages scale with it)."""
    has_mig: bool
    """A MIG device may take several instances for one container, so device counts do not bound it."""


EMPTY_SUMMARY = NodeSummary(0, -1, -1, 0, False)

DeviceSnapshot = tuple[str, int, int, int, tuple[str, ...], bool]
"""(id, used, usedmem, usedcores, sorted MIG placements, mig_conflict)."""


class LedgerNode:
    """One registered node's record: its live view, usage totals, score, summary and generation."""

    __slots__ = (
        "bound_class",
        "capacity",
        "conflicts",
        "gen",
        "index",
        "inventory_tick",
        "score",
        "summary",
        "total",
        "types",
        "view",
    )

    def __init__(self, view: NodeView) -> None:
        self.view = view
        # First device wins on a duplicated id, as a linear search over the inventory would.
        self.index: dict[str, int] = {}
        for i, dev in enumerate(view.devices):
            self.index.setdefault(dev.id, i)
        self.conflicts = [0] * len(view.devices)
        # ComputeDefaultScore only needs the node's capacity and usage totals, so it is evaluated on
        # one aggregate "device": O(1) per pod event instead of O(devices of the node).
        self.capacity = DeviceInfo(
            id="",
            count=sum(d.count for d in view.devices),
            devcore=sum(d.devcore for d in view.devices),
            devmem=sum(d.devmem for d in view.devices),
        )
        self.total = DeviceUsage()
        self.types = frozenset(d.type for d in view.devices)
        self.score = 0.0
        self.summary: NodeSummary | None = None
        self.gen = 0
        self.inventory_tick = 0
        """The generation of the node's last inventory change (see `engine/ledger.py`)."""
        self.bound_class: Hashable = ()

    def compute_score(self) -> float:
        return node_default_score((self.capacity,), (self.total,))

    def compute_summary(self) -> NodeSummary:
        slot_free = 0
        max_mem = max_cores = -1
        min_devmem = -1
        has_mig = False
        cordoned = self.view.cordoned
        for dev, use in zip(self.view.devices, self.view.usage, strict=True):
            if not dev.health or use.mig_conflict or dev.id in cordoned:
                continue
            has_mig = has_mig or dev.mode == MIG_MODE
            if use.used >= dev.count:
                continue
            slot_free += 1
            # Comparisons rather than max()/min(): the same values without a call each (this runs
            # for every device of each node a decision changed).
            devmem = dev.devmem
            free = devmem - use.usedmem
            if free > max_mem:
                max_mem = free
            free = dev.devcore - use.usedcores
            if free > max_cores:
                max_cores = free
            if min_devmem < 0 or devmem < min_devmem:
                min_devmem = devmem
        return NodeSummary(slot_free, max_mem, max_cores, max(min_devmem, 0), has_mig)


def apply_pod(node: LedgerNode, alloc: PodAllocation, sign: int) -> bool:
    """Add (sign=+1) or take back (sign=-1) one pod's contribution to a node; never below 0.
    True when some device's conflict flag flipped (an inventory change, see `engine/ledger.py`)."""
    devices = node.view.devices
    usage = node.view.usage
    index = node.index
    flipped = False
    mig_gpus = {m.gpu_uuid for m in alloc.mig}
    for containers in alloc.devices.values():
        for container in containers:
            for dev in container:
                i = index.get(dev.uuid)
                if i is None:
                    continue  # unknown UUIDs are ignored (§5.2)
                u = usage[i]
                slots = dev.slots if dev.slots > 0 else 1
                mem = max(dev.usedmem, 0)
                cores = max(dev.usedcores, 0)
                if sign < 0:
                    slots = -min(slots, u.used)
                    mem = -min(mem, u.usedmem)
                    cores = -min(cores, u.usedcores)
                u.used += slots
                u.usedmem += mem
                u.usedcores += cores
                u.pod_infos = _with_pod(u.pod_infos, alloc.annotations, sign)
                total = node.total
                total.used += slots
                total.usedmem += mem
                total.usedcores += cores
                if devices[i].mode == MIG_MODE and dev.uuid not in mig_gpus:
                    # A MIG device used without a placement fails closed (§5.2).
                    flipped = _conflict(node, i, sign) or flipped
    for m in alloc.mig:
        i = index.get(m.gpu_uuid)
        if i is None:
            continue
        if devices[i].mode != MIG_MODE:
            flipped = _conflict(node, i, sign) or flipped
            continue
        taken = usage[i].mig_taken
        entry = (m.profile, m.placement)
        if sign > 0:
            taken.append(entry)
        elif entry in taken:
            taken.remove(entry)
    return flipped


def _conflict(node: LedgerNode, i: int, sign: int) -> bool:
    """Count one conflict on device `i` in or out; True when its flag flipped."""
    node.conflicts[i] = max(node.conflicts[i] + sign, 0)
    usage = node.view.usage[i]
    was, usage.mig_conflict = usage.mig_conflict, node.conflicts[i] > 0
    return was != usage.mig_conflict


def _with_pod(
    infos: tuple[Mapping[str, str], ...], annotations: Mapping[str, str], sign: int
) -> tuple[Mapping[str, str], ...]:
    """`infos` with one pod's annotations added (sign > 0) or taken back (the same object)."""
    if sign > 0:
        return (*infos, annotations)
    for i, known in enumerate(infos):
        if known is annotations:
            return infos[:i] + infos[i + 1:]
    return infos
