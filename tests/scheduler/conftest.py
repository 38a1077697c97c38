"""A scheduler process on the in-memory API server with two GPU nodes (n1, n2), driven through
the extender's verbs bytes in, bytes out."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.builders import gpu_node
from vgpu_scheduler.cluster.client import KubeClient
from vgpu_scheduler.config import DeviceConfig
from vgpu_scheduler.scheduler.extender import Extender, ExtenderStats
from vgpu_scheduler.scheduler.options import SchedulerOptions
from vgpu_scheduler.scheduler.process import SchedulerProcess
from vgpu_scheduler.standin.memory import MemoryCluster
from vgpu_scheduler.standin.transport import MemoryTransport

Obj = dict[str, Any]


class Stack:
    def __init__(self, cluster: MemoryCluster, process: SchedulerProcess) -> None:
        self.cluster = cluster
        self.process = process
        self.extender: Extender = process.extender
        self.stats: ExtenderStats = process.extender.stats

    async def create(self, obj: Obj) -> Obj:
        created: Obj = self.cluster.create("pods", obj, namespace="default")
        name = created["metadata"]["name"]
        for _ in range(200):
            if self.process.pods.store.get("default", name) is not None:
                return created
            await asyncio.sleep(0.01)
        raise AssertionError(f"{name} never reached the informer")

    async def filter(self, body: Obj | bytes) -> Obj:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        answer: Obj = json.loads(await self.extender.filter(raw))
        return answer

    async def bind(self, p: Obj, node_name: str) -> str:
        meta = p["metadata"]
        body = {"PodName": meta["name"], "PodNamespace": "default", "PodUID": meta["uid"], "Node": node_name}
        return str(json.loads(await self.extender.bind(json.dumps(body).encode()))["Error"])

    def decisions(self) -> dict[tuple[str, ...], int]:
        return {k: v for k, v in self.stats.decisions.series() if v}

    @staticmethod
    def counts(vec: Any) -> dict[str, int]:
        return {labels[0]: data.count for labels, data in vec.series() if data.count}


@pytest.fixture
async def stack() -> AsyncIterator[Stack]:
    cluster = MemoryCluster()
    for name in ("n1", "n2"):
        cluster.create("nodes", gpu_node(name))
    process = SchedulerProcess(
        SchedulerOptions(scheduler_name="hami-scheduler", node_lock_retry_timeout=5.0),
        DeviceConfig(),
        KubeClient(MemoryTransport(cluster)),
        "host",
    )
    await process.start(sync_timeout=5)
    yield Stack(cluster, process)
    await process.stop()


