"""`best-fit` across nodes (ours, opt-in): which fitting node a pod should take.

HAMi picks the node by the node policy alone (usage before the pod) and the GPU policy only orders
devices inside it. On a fleet of mixed cards that is where most room is lost: a quarter-card slice
lands on an 80 GB card because that node is the most used, and the half-card slice behind it finds
no card with half its memory free. `best-fit` fits the pod on every candidate node and compares the
placements by what they leave for the pods that usually come:

1. Headroom, scarcest shape first. For each pod shape among the recent requests (`DemandTable`),
   its room is how many more pods of that shape the fleet's devices could hold (each device on its
   own, as if only that shape came), and its headroom is that room divided by the shape's share of
   the requests: how many pods of the usual mix could arrive before that shape finds no room. The
   placement that leaves the largest smallest headroom wins, then the largest second smallest, and
   so on (leximin): room is taken from the scarcest shape only when every placement takes it, and
   no number of plentiful shapes outweighs a scarce one, so there is no weight to choose.
2. The dominant leftover fraction of the devices it takes (`policy.leftover_after`: memory, and
   cores when the pod asks for some), summed: a tight fit leaves fewer stranded scraps.

Ties go to the node policy's order (HAMi's node scores), then to the node name. A pod that only one
node fits goes there, as under any policy; a node's verdict (fits or not) never depends on this
choice.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable, Mapping, Sequence

from vgpu_scheduler.engine.fit import NodeFit
from vgpu_scheduler.engine.ledger import DeviceLedger
from vgpu_scheduler.engine.nodeview import NodeView
from vgpu_scheduler.model import (
    PERCENTAGE_UNSET,
    ContainerDeviceRequest,
    ContainerRequests,
    DeviceInfo,
    DeviceUsage,
)

WINDOW = 256
"""Device requests remembered: enough for the mix of a busy fleet, short enough to follow it."""

_MAX_INSTANCES = 64


class DemandTable:
    """The shapes (one instance: vendor, memory, cores) of the last `window` device requests."""

    def __init__(self, window: int = WINDOW) -> None:
        self._recent: deque[ContainerDeviceRequest] = deque()
        self._window = window
        self._counts: Counter[ContainerDeviceRequest] = Counter()
        self.room = FleetRoom()
        """The fleet's room for the shapes seen (kept here: it lives as long as the table)."""

    def observe(self, requests: Iterable[ContainerRequests]) -> None:
        for container in requests:
            for req in container.values():
                shape = ContainerDeviceRequest(1, req.type, req.memreq, req.mem_percentage_req, req.coresreq)
                if len(self._recent) == self._window:
                    old = self._recent.popleft()
                    self._counts[old] -= 1
                    if not self._counts[old]:
                        del self._counts[old]
                self._recent.append(shape)
                self._counts[shape] += 1

    def shares(self) -> list[tuple[ContainerDeviceRequest, float]]:
        """Each shape seen and its share of the remembered requests (first seen first)."""
        total = len(self._recent)
        return [(shape, n / total) for shape, n in self._counts.items()]


Ask = tuple[int, int, int]
"""A shape as `rooms_on` reads it: (memory MiB, memory percentage, cores); see `ask_of`."""


def ask_of(shape: ContainerDeviceRequest) -> Ask:
    return (shape.memreq, shape.mem_percentage_req, shape.coresreq)


def rooms_on(dev: DeviceInfo, use: DeviceUsage, asks: Sequence[Ask]) -> list[int]:
    """For each ask, how many more pods of it the device could hold (fit's per-device rules, as
    `policy.leftover_after` applies them one instance at a time), at most 64. One loop for every
    shape: this runs for each device a placement takes, on every candidate node."""
    count, devmem, devcore = dev.count, dev.devmem, dev.devcore
    if count <= 0 or devmem <= 0 or devcore <= 0:
        return [0] * len(asks)
    shares = min(count - use.used, _MAX_INSTANCES)
    free_mem, free_cores = devmem - use.usedmem, devcore - use.usedcores
    cores_used_up = use.usedcores == devcore
    out = []
    for memreq, pct, cores in asks:
        mem = devmem * pct // 100 if memreq == 0 and pct not in (PERCENTAGE_UNSET, 0) else memreq
        if shares < 1 or free_mem < mem or free_cores < cores or (cores_used_up and cores == 0):
            out.append(0)
        elif devcore == 100 and cores == 100:
            out.append(0 if use.used > 0 else 1)  # a whole card: fit gives it no company
        else:
            n = shares
            if mem > 0:
                n = min(n, free_mem // mem)
            if cores > 0:
                n = min(n, free_cores // cores)
            out.append(n)
    return out


def instances(dev: DeviceInfo, use: DeviceUsage, shape: ContainerDeviceRequest) -> int:
    """How many more pods of `shape` the device could hold (`rooms_on` for one shape)."""
    return rooms_on(dev, use, [ask_of(shape)])[0]


def node_room(view: NodeView, shape: ContainerDeviceRequest) -> int:
    """How many more pods of `shape` the node's devices could hold, each device on its own."""
    ask = [ask_of(shape)]
    return sum(rooms_on(view.devices[p], view.usage[p], ask)[0] for p in view.positions(shape.type))


class FleetRoom:
    """Per shape, `node_room` summed over every registered node of a ledger, kept up to date from
    the ledger's generations: only nodes that changed since the last call are counted again (one
    per decision, usually), so a decision does not pay for the whole fleet."""

    def __init__(self) -> None:
        self._ledger: DeviceLedger | None = None
        self._tick = 0
        self._per_node: dict[str, dict[ContainerDeviceRequest, int]] = {}
        self._total: dict[ContainerDeviceRequest, int] = {}

    def of(self, ledger: DeviceLedger, shapes: Sequence[ContainerDeviceRequest]) -> list[int]:
        """The fleet's room for each of `shapes`, in their order."""
        changed = ledger.changed_since(self._tick) if ledger is self._ledger else None
        if changed is None:  # another ledger, or the changes are no longer known: count all again
            self._ledger, self._per_node, self._total = ledger, {}, {}
            changed = list(ledger.node_names())
        self._tick = ledger.tick
        wanted = set(shapes)
        for gone in self._total.keys() - wanted:  # shapes no longer requested: forget them
            del self._total[gone]
            for rooms in self._per_node.values():
                rooms.pop(gone, None)
        for name in set(changed):
            old = self._per_node.pop(name, {})
            for shape, n in old.items():
                self._total[shape] -= n
            view = ledger.view(name)
            if view is None:
                continue
            rooms = self._per_node[name] = {shape: node_room(view, shape) for shape in self._total}
            for shape, n in rooms.items():
                self._total[shape] += n
        for shape in wanted - self._total.keys():  # shapes new to the table: count every node
            total = 0
            for name, rooms in self._per_node.items():
                view = ledger.view(name)
                n = rooms[shape] = node_room(view, shape) if view is not None else 0
                total += n
            self._total[shape] = total
        return [self._total[shape] for shape in shapes]


def usage_after(fit: NodeFit, view: NodeView) -> dict[int, DeviceUsage]:
    """The usage of each device (by position in `view`) that `fit` takes, once it is taken."""
    by_uuid = {dev.id: p for p, dev in enumerate(view.devices)}
    taken: dict[int, list[int]] = {}  # position -> [shares, memory, cores]
    for per_container in fit.devices.values():
        for container in per_container:
            for granted in container:
                p = by_uuid.get(granted.uuid)
                if p is None:
                    continue
                t = taken.setdefault(p, [0, 0, 0])
                t[0] += 1
                t[1] += max(granted.usedmem, 0)
                t[2] += max(granted.usedcores, 0)
    out = {}
    for p, (shares, memory, cores) in taken.items():
        before = view.usage[p]
        out[p] = DeviceUsage(before.used + shares, before.usedmem + memory, before.usedcores + cores)
    return out


ByVendor = dict[str, tuple[list[int], list[Ask]]]
"""Vendor type -> the positions of its shapes in a shape list, and their asks."""


def by_vendor(shares: Sequence[tuple[ContainerDeviceRequest, float]]) -> ByVendor:
    out: ByVendor = {}
    for k, (shape, _) in enumerate(shares):
        ks, asks = out.setdefault(shape.type, ([], []))
        ks.append(k)
        asks.append(ask_of(shape))
    return out


def rooms_lost(fit: NodeFit, view: NodeView, groups: ByVendor, n_shapes: int) -> tuple[int, ...]:
    """Per shape (the order of `groups`' positions), the room `fit` takes from the node."""
    lost = [0] * n_shapes
    for p, after in usage_after(fit, view).items():
        dev, before = view.devices[p], view.usage[p]
        for key, (ks, asks) in groups.items():
            if p in view.positions(key):
                was, now = rooms_on(dev, before, asks), rooms_on(dev, after, asks)
                for k, b, a in zip(ks, was, now, strict=True):
                    lost[k] += b - a
    return tuple(lost)


def headroom(room: Sequence[int], lost: Sequence[int], shares: Sequence[float]) -> tuple[float, ...]:
    """Each shape's headroom (room / share) once `lost` is taken, smallest first (module doc, 1)."""
    left = zip(room, lost, shares, strict=True)
    return tuple(sorted(round((r - d) / share, 6) for r, d, share in left))


def leftover_cost(fit: NodeFit, view: NodeView) -> float:
    """The dominant leftover fractions of the devices `fit` takes, summed (module doc, 2)."""
    cost = 0.0
    for p, after in usage_after(fit, view).items():
        dev, before = view.devices[p], view.usage[p]
        free_mem = max(dev.devmem - after.usedmem, 0) / dev.devmem if dev.devmem > 0 else 0.0
        free_cores = max(dev.devcore - after.usedcores, 0) / dev.devcore if dev.devcore > 0 else 0.0
        asks_cores = after.usedcores > before.usedcores
        cost += max(free_mem, free_cores) if asks_cores else free_mem
    return cost


def cheapest(
    scores: Mapping[str, float],
    fits: Mapping[str, NodeFit],
    views: Mapping[str, NodeView],
    demand: DemandTable,
    *,
    ledger: DeviceLedger,
    descending: bool,
) -> str:
    """The node of `scores` (the fitting nodes with their HAMi node scores) whose placement leaves
    the most headroom, then the tightest leftover (module doc); ties in the node policy's order
    (`descending` = binpack), then by name. The room is that of every node of `ledger`, candidate
    or not: a node this pod cannot use still holds room for the others."""
    shares = demand.shares()
    room = demand.room.of(ledger, [shape for shape, _ in shares])
    groups, weights = by_vendor(shares), [share for _, share in shares]
    # Most placements take the same room (often only the pod's own): each distinct loss is ranked once.
    ranked: dict[tuple[int, ...], tuple[float, ...]] = {}

    def key(node: str) -> tuple[tuple[float, ...], float, float, str]:
        fit, view, score = fits[node], views[node], scores[node]
        lost = rooms_lost(fit, view, groups, len(room))
        left = ranked.get(lost)
        if left is None:
            left = ranked[lost] = tuple(-h for h in headroom(room, lost, weights))
        return (left, round(leftover_cost(fit, view), 9), -score if descending else score, node)

    return min(scores, key=key)
