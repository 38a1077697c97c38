"""Fault injection on the REST path of the in-memory cluster: failures, delays, a slow server.

Tests use these to drive the client's retry, relist and timeout paths deterministically. They act
only on REST requests (`handle` / `open_watch`), never on the direct Python API, so seeding and
assertions in a test are not disturbed by the faults it set up. Cutting open watches is done by the
watch hub (`WatchHub.drop_all`), which owns them.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from vgpu_scheduler.cluster.errors import ApiError


@dataclass(slots=True, kw_only=True)
class Fault:
    """A fault armed for the next `remaining` requests of `verb` ("*": any) on `resource` (None: any;
    a subresource is named "pods/binding")."""

    verb: str
    resource: str | None
    remaining: int
    status: int | None = None  # None: a delay only
    reason: str | None = None
    message: str | None = None
    delay: float = 0.0


class FaultInjector:
    """The armed faults and the latency added to every REST request."""

    def __init__(self) -> None:
        self.faults: list[Fault] = []
        self.latency = 0.0  # seconds added to every REST request (slow API server)

    def arm(self, fault: Fault) -> None:
        """Add a fault; faults fire in the order they were armed."""
        self.faults.append(fault)

    async def before_request(self, verb: str, resource: str) -> None:
        """Wait the latency, then count the request against each matching fault in turn (waiting its
        delay) until one answers with a failure."""
        if self.latency:
            await asyncio.sleep(self.latency)
        for f in list(self.faults):
            if f.verb not in ("*", verb) or (f.resource is not None and f.resource != resource):
                continue
            f.remaining -= 1
            if f.remaining <= 0:
                self.faults.remove(f)
            if f.delay:
                await asyncio.sleep(f.delay)
            if f.status is not None:
                raise ApiError.make(
                    f.status, f.message or f"injected failure for {verb} {resource}", reason=f.reason
                )
