"""The chaos workload: pods of several shapes and two vendors created and deleted at random.

Every `1 / rate` seconds (on average) the workload creates a pod of a shape drawn by weight while
fewer than `max_live` of its pods exist, and deletes a random live one (bound or pending) with
chance `churn`, so binds, confirmations and releases keep racing the nemesis. `huge` pods fit no
device (they must end pending with the filter's verdict); the others fit an empty node. Calls go
straight to kube-apiserver with the harness' client; a call the API fails (kube-apiserver down)
is counted and skipped.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Mapping
from dataclasses import dataclass, field

from fleet import GROUP
from pluginstandin import GROUP_LABEL, Obj

from tests import builders
from vgpu_scheduler.cluster import api
from vgpu_scheduler.cluster.client import KubeClient
from vgpu_scheduler.cluster.errors import ApiConnectionError, ApiError


@dataclass(frozen=True)
class Shape:
    name: str
    limits: Mapping[str, str]
    weight: int


SHAPES = (
    Shape("small", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000"}, 30),
    Shape("shared-cores",
          {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "16000", "nvidia.com/gpucores": "30"}, 15),
    Shape("two-gpus", {"nvidia.com/gpu": "2", "nvidia.com/gpumem": "10000"}, 12),
    Shape("exclusive", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8000", "nvidia.com/gpucores": "100"}, 8),
    Shape("percent", {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "25"}, 8),
    Shape("four-gpus", {"nvidia.com/gpu": "4", "nvidia.com/gpumem": "30000"}, 4),
    Shape("dcu", {"hygon.com/dcunum": "1", "hygon.com/dcumem": "4096", "hygon.com/dcucores": "20"}, 15),
    Shape("huge", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "200000"}, 2),
)


def chaos_pod(name: str, namespace: str, shape: Shape, scheduler_name: str) -> Obj:
    ctr = builders.container("main", image="registry.invalid/cuda:none", limits=dict(shape.limits),
                             requests={"cpu": "100m"})
    spec = {"terminationGracePeriodSeconds": 0, "schedulerName": scheduler_name,
            "nodeSelector": {GROUP_LABEL: GROUP}}
    return builders.pod(name, namespace=namespace, labels={"chaos/shape": shape.name}, typed=True,
                        containers=[ctr], spec=spec)


@dataclass
class WorkloadStats:
    created: int = 0
    deleted: int = 0
    failed_calls: int = 0
    shapes: dict[str, int] = field(default_factory=dict)


class Workload:
    def __init__(
        self, client: KubeClient, *, namespace: str, scheduler_name: str, rng: random.Random,
        rate: float = 4.0, max_live: int = 600, churn: float = 0.6,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.scheduler_name = scheduler_name
        self.rng = rng
        self.rate = rate
        self.max_live = max_live
        self.churn = churn
        self.live: list[str] = []
        self.stats = WorkloadStats()
        self._next = 0
        self._tasks: set[asyncio.Task[None]] = set()

    async def run(self, seconds: float) -> None:
        loop = asyncio.get_running_loop()
        until = loop.time() + seconds
        weights = [s.weight for s in SHAPES]
        while loop.time() < until:
            await asyncio.sleep(self.rng.expovariate(self.rate))
            if len(self.live) < self.max_live:
                shape = self.rng.choices(SHAPES, weights)[0]
                self._spawn(self._create(shape))
            if self.live and self.rng.random() < self.churn * len(self.live) / self.max_live:
                name = self.live.pop(self.rng.randrange(len(self.live)))
                self._spawn(self._delete(name))
        while self._tasks:
            await asyncio.sleep(0.1)

    def _spawn(self, coro: object) -> None:
        task = asyncio.get_running_loop().create_task(coro)  # type: ignore[arg-type]
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _create(self, shape: Shape) -> None:
        name = f"{shape.name}-{self._next:05d}"
        self._next += 1
        try:
            await self.client.create(api.PODS, chaos_pod(name, self.namespace, shape, self.scheduler_name),
                                     self.namespace)
        except (ApiError, ApiConnectionError):
            self.stats.failed_calls += 1
            return
        self.live.append(name)
        self.stats.created += 1
        self.stats.shapes[shape.name] = self.stats.shapes.get(shape.name, 0) + 1

    async def _delete(self, name: str) -> None:
        try:
            await self.client.delete(api.PODS, name, self.namespace, grace_period_seconds=0)
        except (ApiError, ApiConnectionError):
            self.stats.failed_calls += 1
            self.live.append(name)  # still there as far as we know: may be drawn again
            return
        self.stats.deleted += 1
