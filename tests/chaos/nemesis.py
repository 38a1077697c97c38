"""The nemesis: from a seed, one fault after another at random, each healed before the next.

Kinds (`KINDS`), each with the `Cluster` operations it uses (the harness implements them):

* `apiserver-kill`: kube-apiserver SIGKILLed and started again; `apiserver-kill-compact` also
  compacts etcd meanwhile, so every watch resumes into 410 Gone and relists;
* `leader-kill`: the replica whose kube-scheduler holds the Lease SIGKILLed (its kube-scheduler and
  server), started again after a while as a follower;
* `leader-pause`: that replica SIGSTOPped for longer than the lease, then SIGCONTed (its
  kube-scheduler, having lost the Lease, exits and is started again; its server must not write);
* `proxy-drop`, `proxy-delay`, `proxy-errors`: the proxies between our servers and kube-apiserver
  cut every open connection and then a share of new ones, delay requests, or answer a share of
  writes with 409 / 429 / 500 / 503;
* `plugin-pause`, `plugin-late`, `plugin-dead`: the device-plugin stand-in confirms nothing, confirms
  seconds late, or is dead on one node;
* `node-reregister`: a node deleted (its pods with it, as the pod GC would) and registered again
  with another inventory.

Every fault becomes a `FaultRecord` (start, end = healed, target); the seed alone decides the
sequence of kinds, targets and durations, so a failing run is replayed with its seed (timings on a
shared machine still differ).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Sequence
from typing import Protocol

from history import FaultRecord

KINDS = (
    "apiserver-kill", "apiserver-kill-compact", "leader-kill", "leader-pause", "proxy-drop",
    "proxy-delay", "proxy-errors", "plugin-pause", "plugin-late", "plugin-dead", "node-reregister",
)


class Cluster(Protocol):
    lease_seconds: float

    async def restart_apiserver(self, *, compact: bool) -> None: ...
    async def leader(self) -> str: ...
    async def kill_replica(self, replica: str) -> None: ...
    async def start_replica(self, replica: str) -> None: ...
    async def pause_replica(self, replica: str) -> None: ...
    async def resume_replica(self, replica: str) -> None: ...
    def proxy_faults(self, *, delay: float = 0.0, drop: float = 0.0, error: float = 0.0) -> None: ...
    def proxy_drop_all(self) -> None: ...
    def plugin(self, action: str, arg: str | float = "") -> None: ...
    def nodes(self) -> Sequence[str]: ...
    async def reregister_node(self, node: str, variant: int) -> None: ...


class Nemesis:
    def __init__(
        self, cluster: Cluster, *, rng: random.Random, clock: Callable[[], float],
        gap: tuple[float, float] = (3.0, 10.0), kinds: Sequence[str] = KINDS,
    ) -> None:
        self.cluster = cluster
        self.rng = rng
        self.clock = clock
        self.gap = gap
        self.kinds = tuple(kinds)
        self.faults: list[FaultRecord] = []
        self.errors: list[str] = []

    async def run(self, seconds: float) -> None:
        """Inject faults until `seconds` have passed; the last one is healed before returning."""
        until = self.clock() + seconds
        while self.clock() < until:
            await asyncio.sleep(self.rng.uniform(*self.gap))
            if self.clock() >= until:
                break
            kind = self.rng.choice(self.kinds)
            hold = self.rng.uniform(3.0, 10.0)
            try:
                await self.inject(kind, hold)
            except Exception as exc:  # the harness' own call failed: note it, go on
                self.errors.append(f"{kind}: {exc!r}")
                if self.faults and not self.faults[-1].end:
                    self.faults[-1].end = self.clock()

    async def inject(self, kind: str, hold: float) -> FaultRecord:
        c = self.cluster
        record = FaultRecord(kind, self.clock())
        self.faults.append(record)
        if kind in ("apiserver-kill", "apiserver-kill-compact"):
            await c.restart_apiserver(compact=kind.endswith("compact"))
        elif kind == "leader-kill":
            record.target = await c.leader()
            await c.kill_replica(record.target)
            record.end = self.clock()  # the kill itself is the fault; a fresh follower comes later
            await asyncio.sleep(hold)
            await c.start_replica(record.target)
            return record
        elif kind == "leader-pause":
            record.target = await c.leader()
            await c.pause_replica(record.target)
            await asyncio.sleep(c.lease_seconds + self.rng.uniform(2.0, 6.0))
            await c.resume_replica(record.target)
        elif kind.startswith("proxy-"):
            if kind == "proxy-drop":
                c.proxy_drop_all()
                c.proxy_faults(drop=self.rng.uniform(0.05, 0.3))
            elif kind == "proxy-delay":
                c.proxy_faults(delay=self.rng.uniform(0.2, 2.0))
            else:
                c.proxy_faults(error=self.rng.uniform(0.1, 0.5))
            await asyncio.sleep(hold)
            c.proxy_faults()
        elif kind == "plugin-pause":
            c.plugin("pause")
            await asyncio.sleep(hold)
            c.plugin("resume")
        elif kind == "plugin-late":
            c.plugin("late", self.rng.uniform(1.0, 5.0))
            await asyncio.sleep(hold)
            c.plugin("late", 0.0)
        elif kind == "plugin-dead":
            record.target = self.rng.choice(list(c.nodes()))
            c.plugin("kill", record.target)
            await asyncio.sleep(hold)
            c.plugin("revive", record.target)
        elif kind == "node-reregister":
            record.target = self.rng.choice(list(c.nodes()))
            await c.reregister_node(record.target, self.rng.randrange(1, 3))
        else:
            raise ValueError(f"unknown fault kind {kind!r}")
        record.end = self.clock()
        return record
