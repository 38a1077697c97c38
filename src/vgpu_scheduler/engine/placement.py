"""`best-fit` across nodes (ours, opt-in): which fitting node a pod should take.

HAMi picks the node by the node policy alone (usage before the pod) and the GPU policy only orders
devices inside it. On a fleet of mixed cards that is where most room is lost: a quarter-card slice
lands on an 80 GB card because that node is the most used, and the half-card slice behind it finds
no card with half its memory free. `best-fit` fits the pod on every candidate node and takes the
placement that costs the least, where the cost of each device the pod would take is

1. `ROOM_WEIGHT` x the room it takes from the large pods that usually come: for each recently seen
   pod shape that no card of the smallest size can hold, its share of the recent requests times the
   number of such pods the device could still hold before the pod minus after it; then
2. the device's dominant leftover fraction after the pod (`policy.leftover_after`: memory, and
   cores when the pod asks for some), as on one node: a tight fit leaves fewer stranded scraps.

Ties go to the node policy's order (HAMi's node scores), then to the node name. The shapes come
from `DemandTable`, fed by `best-fit` decisions only. A pod that only one node fits goes there, as
under any policy; a node's verdict (fits or not) never depends on this choice.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable, Mapping, Sequence

from vgpu_scheduler.engine.fit import NodeFit
from vgpu_scheduler.engine.nodeview import NodeView
from vgpu_scheduler.engine.policy import asked_memory, leftover_after
from vgpu_scheduler.model import ContainerDeviceRequest, ContainerRequests, DeviceInfo, DeviceUsage

WINDOW = 256
"""Device requests remembered: enough for the mix of a busy fleet, short enough to follow it."""

ROOM_WEIGHT = 2.0
"""Cost of taking the room of one large pod that makes up all recent requests, in units of a whole
card left over. Chosen among 1, 2 and lexicographic (large room first) on the bench's traces: 1 let
quarter slices eat the half slices' cards (training trace, -8 %), lexicographic kept tiny pods off
large cards even where small cards ran out of shares (inference trace, -1.5 %)."""

_MAX_INSTANCES = 64


class DemandTable:
    """The shapes (one instance: vendor, memory, cores) of the last `window` device requests."""

    def __init__(self, window: int = WINDOW) -> None:
        self._recent: deque[ContainerDeviceRequest] = deque()
        self._window = window
        self._counts: Counter[ContainerDeviceRequest] = Counter()

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


def instances(dev: DeviceInfo, use: DeviceUsage, shape: ContainerDeviceRequest) -> int:
    """How many more pods of `shape` the device could hold (fit's per-device rules)."""
    n = 0
    mem = asked_memory(dev, shape)
    while n < _MAX_INSTANCES and leftover_after(dev, use, shape) is not None:
        n += 1
        use = DeviceUsage(use.used + 1, use.usedmem + mem, use.usedcores + shape.coresreq)
    return n


def smallest_cards(views: Iterable[NodeView], types: Iterable[str]) -> dict[str, DeviceInfo]:
    """Per vendor type, the candidates' device with the least memory (the "small card")."""
    out: dict[str, DeviceInfo] = {}
    wanted = set(types)
    for view in views:
        for key in wanted:
            for p in view.positions(key):
                dev = view.devices[p]
                if key not in out or dev.devmem < out[key].devmem:
                    out[key] = dev
    return out


def large_shapes(
    shares: Sequence[tuple[ContainerDeviceRequest, float]], small: Mapping[str, DeviceInfo]
) -> list[tuple[ContainerDeviceRequest, float]]:
    """The shapes an empty small card of their vendor cannot hold."""
    out = []
    for shape, share in shares:
        card = small.get(shape.type)
        if card is not None and leftover_after(card, DeviceUsage(), shape) is None:
            out.append((shape, share))
    return out


def placement_cost(
    fit: NodeFit, view: NodeView, large: Sequence[tuple[ContainerDeviceRequest, float]]
) -> float:
    """The cost of `fit` on `view` (module doc): large pods' room taken, then what is left over."""
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
    cost = 0.0
    for p, (shares, memory, cores) in taken.items():
        dev, before = view.devices[p], view.usage[p]
        after = DeviceUsage(before.used + shares, before.usedmem + memory, before.usedcores + cores)
        for shape, share in large:
            lost = instances(dev, before, shape) - instances(dev, after, shape)
            cost += ROOM_WEIGHT * share * lost
        free_mem = max(dev.devmem - after.usedmem, 0) / dev.devmem if dev.devmem > 0 else 0.0
        free_cores = max(dev.devcore - after.usedcores, 0) / dev.devcore if dev.devcore > 0 else 0.0
        cost += max(free_mem, free_cores) if cores > 0 else free_mem
    return cost


def cheapest(
    scores: Mapping[str, float],
    fits: Mapping[str, NodeFit],
    views: Mapping[str, NodeView],
    demand: DemandTable,
    *,
    descending: bool,
) -> str:
    """The node of `scores` (the fitting nodes with their HAMi node scores) whose placement costs
    the least; ties in the node policy's order (`descending` = binpack), then by name."""
    fitted = [views[n] for n in scores]
    types = {key for fit in fits.values() for key in fit.devices}
    large = large_shapes(demand.shares(), smallest_cards(fitted, types))

    def key(node: str) -> tuple[float, float, str]:
        score = scores[node]
        cost = round(placement_cost(fits[node], views[node], large), 9)
        return (cost, -score if descending else score, node)

    return min(scores, key=key)
