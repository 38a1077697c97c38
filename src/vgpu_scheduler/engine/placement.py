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
from functools import lru_cache

from vgpu_scheduler.engine.fit import NodeFit
from vgpu_scheduler.engine.nodeview import NodeView
from vgpu_scheduler.engine.policy import asked_memory, leftover_after
from vgpu_scheduler.model import ContainerDeviceRequest, ContainerRequests, DeviceInfo, DeviceUsage

WINDOW = 256
"""Device requests remembered: enough for the mix of a busy fleet, short enough to follow it."""

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
    """How many more pods of `shape` the device could hold (fit's per-device rules), at most 64."""
    return _instances(dev.count, dev.devmem, dev.devcore, use.used, use.usedmem, use.usedcores,
                      asked_memory(dev, shape), shape.coresreq)


@lru_cache(maxsize=65536)
def _instances(count: int, devmem: int, devcore: int, used: int, usedmem: int, usedcores: int,
               mem: int, cores: int) -> int:
    # Plain ints so that equal device states (most cards of a fleet) share one entry.
    dev = DeviceInfo(id="", index=0, count=count, devmem=devmem, devcore=devcore, type="", numa=0)
    if leftover_after(dev, DeviceUsage(used, usedmem, usedcores), ContainerDeviceRequest(
            1, "", mem, 0, cores)) is None:
        return 0
    if devcore == 100 and cores == 100:
        return 1  # a whole card: fit gives it no company
    n = min(count - used, _MAX_INSTANCES)
    if mem > 0:
        n = min(n, (devmem - usedmem) // mem)
    if cores > 0:
        n = min(n, (devcore - usedcores) // cores)
    return n


def fleet_room(views: Iterable[NodeView], shapes: Sequence[ContainerDeviceRequest]) -> list[int]:
    """Per shape, how many more pods of it the devices of `views` could hold (each device alone)."""
    room = [0] * len(shapes)
    for view in views:
        for k, shape in enumerate(shapes):
            for p in view.positions(shape.type):
                room[k] += instances(view.devices[p], view.usage[p], shape)
    return room


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


def headroom_after(
    fit: NodeFit,
    view: NodeView,
    shares: Sequence[tuple[ContainerDeviceRequest, float]],
    room: Sequence[int],
) -> tuple[float, ...]:
    """Each shape's headroom (room / share) once `fit` is placed, smallest first (module doc, 1)."""
    lost = [0] * len(shares)
    for p, after in usage_after(fit, view).items():
        dev, before = view.devices[p], view.usage[p]
        for k, (shape, _) in enumerate(shares):
            if p in view.positions(shape.type):
                lost[k] += instances(dev, before, shape) - instances(dev, after, shape)
    left = zip(room, lost, shares, strict=True)
    return tuple(sorted(round((r - d) / share, 6) for r, d, (_, share) in left))


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
    descending: bool,
) -> str:
    """The node of `scores` (the fitting nodes with their HAMi node scores) whose placement leaves
    the most headroom, then the tightest leftover (module doc); ties in the node policy's order
    (`descending` = binpack), then by name. `views` holds every candidate node, fitting or not: the
    room for other shapes is counted over all of them."""
    shares = demand.shares()
    room = fleet_room(views.values(), [shape for shape, _ in shares])

    def key(node: str) -> tuple[tuple[float, ...], float, float, str]:
        fit, view, score = fits[node], views[node], scores[node]
        headroom = tuple(-h for h in headroom_after(fit, view, shares, room))
        return (headroom, round(leftover_cost(fit, view), 9), -score if descending else score, node)

    return min(scores, key=key)
