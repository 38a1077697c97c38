"""Waiting until the scheduler's informers have seen every write to the embedded cluster.

The simulation drives the cluster and the scheduler in one event loop: after each write it lets the
informers catch up before the next decision, so that every decision sees the cluster as it is (as
a live scheduler would a moment later)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from vgpu_scheduler.cluster.reflector import Reflector
from vgpu_scheduler.standin.memory import MemoryCluster

SETTLE_SPINS = 100_000
"""Event-loop turns `settle` gives the informers before it waits in wall time."""
BOOKMARK_AFTER_SPINS = 8
"""Turns `settle` lets informers catch up on their own events before it asks for BOOKMARKs."""
SETTLE_WAIT_SECONDS = 60.0
"""Wall time `settle` then waits before giving up on an informer that does not catch up."""


class InformerSettler:
    """`settle()` returns once every reflector has reached the cluster's last write to its resource."""

    def __init__(self, cluster: MemoryCluster, reflectors: Sequence[Reflector]) -> None:
        self.cluster = cluster
        self.reflectors = reflectors
        self.settled_at = -1  # the cluster resourceVersion every informer is known to have reached

    async def settle(self) -> None:
        """Wait until every informer of the process has seen every write made so far."""
        target = self.cluster.resource_version
        if target == self.settled_at:
            return  # nothing written since the informers last caught up (their versions only grow)
        # An informer is caught up once it has seen the last write to its own resource: one whose
        # resource nobody wrote needs nothing. Only one that has not got there after a few turns
        # (a filtered watch never sees some writes) is moved on by a BOOKMARK, which costs every
        # watch an event to encode, decode and apply (and the node table a refresh).
        reflectors = self.reflectors
        marks = [self.cluster.last_write(r.rt) for r in reflectors]

        def caught_up() -> bool:
            return all(_rv(r.resource_version) >= mark for r, mark in zip(reflectors, marks, strict=True))

        bookmarked = False
        for spin in range(SETTLE_SPINS):
            if caught_up():
                self.settled_at = target
                return
            if spin == BOOKMARK_AFTER_SPINS:
                self.cluster.trigger_bookmarks()
                bookmarked = True
            await asyncio.sleep(0)
        if not bookmarked:
            self.cluster.trigger_bookmarks()
        # Still behind: a reflector is between two watches (its server-side timeout ends one every
        # few minutes of wall time) or the machine is slow. Wait in wall time, bounded.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + SETTLE_WAIT_SECONDS
        while loop.time() < deadline:
            if caught_up():
                self.settled_at = target
                return
            await asyncio.sleep(0.01)
        raise RuntimeError("the scheduler's informers did not catch up with the embedded cluster")


def _rv(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        return 0
