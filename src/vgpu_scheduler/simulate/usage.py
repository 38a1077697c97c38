"""What the running pods of a simulation hold, fleet-wide, over simulated time: the report's
timeline and makespan. Counted from each pod's allocation when it starts running, taken back when
it finishes."""

from __future__ import annotations

from dataclasses import dataclass

from vgpu_scheduler.engine.podinfo import PodAllocation
from vgpu_scheduler.simulate.report import TimelinePoint


@dataclass(slots=True)
class _Held:
    node: str
    used: int
    usedmem: int
    usedcores: int


class FleetUsage:
    """Slots, memory and cores held by running pods, and one timeline point per instant."""

    __slots__ = ("_held", "_totals", "makespan", "running", "timeline")

    def __init__(self) -> None:
        self._held: dict[str, _Held] = {}
        self._totals = [0, 0, 0]  # used, usedmem, usedcores over the fleet
        self.running = 0
        self.makespan = 0.0
        """The last instant a pod started or finished running."""
        self.timeline: list[TimelinePoint] = []

    def started(self, key: str, node: str, alloc: PodAllocation | None, *, now: float, pending: int) -> None:
        """Pod `key` runs on `node` from `now`, holding `alloc` (None: no device)."""
        used = usedmem = usedcores = 0
        if alloc is not None:
            for containers in alloc.devices.values():
                for container in containers:
                    for dev in container:
                        used += dev.slots if dev.slots > 0 else 1
                        usedmem += max(dev.usedmem, 0)
                        usedcores += max(dev.usedcores, 0)
        self._held[key] = _Held(node, used, usedmem, usedcores)
        self._add(1, used, usedmem, usedcores, now=now, pending=pending)

    def finished(self, key: str, *, now: float, pending: int) -> str | None:
        """Pod `key` stops running at `now`: the node it ran on (None: it was not running)."""
        held = self._held.pop(key, None)
        if held is None:
            return None
        self._add(-1, -held.used, -held.usedmem, -held.usedcores, now=now, pending=pending)
        return held.node

    def _add(self, pods: int, used: int, usedmem: int, usedcores: int, *, now: float, pending: int) -> None:
        self.running += pods
        totals = self._totals
        totals[0] += used
        totals[1] += usedmem
        totals[2] += usedcores
        self.makespan = max(self.makespan, now)
        point = TimelinePoint(now, self.running, pending, *totals)
        if self.timeline and self.timeline[-1].time == now:
            self.timeline[-1] = point  # one point per instant: the state after it
        else:
            self.timeline.append(point)
