"""A replica that is not the leader any more writes nothing (issue 31, found by the chaos tier: a
leader SIGSTOPped past its lease, once woken, still locked, patched and bound the pods its
kube-scheduler had in flight, and nudged the pods its filter had just refused, while the other
replica led).

The server follows the Lease with `--leader-elect` (cluster/leader.py); every bind asks it before
its first write and again before each next one, and requeue nudges are written only by the leader.
Driven on the in-memory API server, whose request log shows every write.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.builders import gpu_node, gpu_pod
from vgpu_scheduler.cluster.client import KubeClient
from vgpu_scheduler.config import DeviceConfig
from vgpu_scheduler.scheduler.options import SchedulerOptions
from vgpu_scheduler.scheduler.process import SchedulerProcess
from vgpu_scheduler.standin.memory import MemoryCluster
from vgpu_scheduler.standin.transport import MemoryTransport
from vgpu_scheduler.wire import keys

Obj = dict[str, Any]
NS, LEASE = "kube-system", "hami-scheduler"
WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def lease(holder: str) -> Obj:
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": LEASE, "namespace": NS},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15, "renewTime": now}}


class Replica:
    def __init__(self, cluster: MemoryCluster, process: SchedulerProcess) -> None:
        self.cluster = cluster
        self.process = process

    async def settle(self) -> None:
        for _ in range(20):
            await asyncio.sleep(0)
        await asyncio.sleep(0.05)

    async def hand_lease_to(self, holder: str) -> None:
        self.cluster.patch("leases", LEASE, {"spec": {"holderIdentity": holder}}, namespace=NS)
        await self.settle()

    async def filter_and_bind(self, name: str, *, after_filter: Any = None) -> str:
        p = self.cluster.create("pods", gpu_pod(name, mem=1000, container_name="c"), namespace="default")
        await self.settle()
        answer = json.loads(await self.process.extender.filter(
            json.dumps({"Pod": p, "NodeNames": ["n1"]}).encode()))
        assert answer["NodeNames"] == ["n1"], answer
        if after_filter is not None:
            await after_filter()
        meta = p["metadata"]
        body = {"PodName": meta["name"], "PodNamespace": "default", "PodUID": meta["uid"], "Node": "n1"}
        return str(json.loads(await self.process.extender.bind(json.dumps(body).encode()))["Error"])

    def writes_since(self, mark: int) -> list[tuple[str, str]]:
        log = list(self.cluster.request_log)[mark:]
        return [(method, path) for _, method, path in log if method in WRITES and "/events" not in path]


@pytest.fixture
async def replica() -> AsyncIterator[Replica]:
    cluster = MemoryCluster()
    cluster.create("nodes", gpu_node("n1", gpus=1, count=1, allocatable={"cpu": "8", "pods": "110"}))
    cluster.create("leases", lease("host_1111"), namespace=NS)
    options = SchedulerOptions(scheduler_name="hami-scheduler", leader_elect=True,
                               leader_elect_resource_name=LEASE, leader_elect_resource_namespace=NS)
    process = SchedulerProcess(options, DeviceConfig(), KubeClient(MemoryTransport(cluster)), "host")
    await process.start(sync_timeout=5)
    yield Replica(cluster, process)
    await process.stop()


async def test_the_leader_binds(replica: Replica) -> None:
    assert await replica.filter_and_bind("p") == ""
    assert replica.cluster.get("pods", "p", "default")["spec"]["nodeName"] == "n1"


async def test_a_replica_deposed_before_the_bind_writes_nothing(replica: Replica) -> None:
    marks: list[int] = []

    async def deposed() -> None:
        await replica.hand_lease_to("other_2222")
        marks.append(len(replica.cluster.request_log))

    error = await replica.filter_and_bind("p", after_filter=deposed)
    assert "not the leader" in error
    pod = replica.cluster.get("pods", "p", "default")
    assert not pod["spec"].get("nodeName")
    assert keys.NODE_LOCK not in (replica.cluster.get("nodes", "n1")["metadata"].get("annotations") or {})
    assert replica.writes_since(marks[0]) == []


async def test_a_replica_deposed_in_the_middle_of_a_bind_stops_writing(replica: Replica) -> None:
    # The pod patch is held 0.3 s: the Lease changes hands meanwhile (the replica was paused).
    replica.cluster.delay_next("patch", seconds=0.3, resource="pods")

    async def deposed_during_the_patch() -> None:
        async def later() -> None:
            await asyncio.sleep(0.1)
            await replica.hand_lease_to("other_2222")

        asyncio.get_running_loop().create_task(later())

    error = await replica.filter_and_bind("p", after_filter=deposed_during_the_patch)
    assert "not the leader" in error
    assert not replica.cluster.get("pods", "p", "default")["spec"].get("nodeName")  # no Binding


async def test_a_write_waiting_in_the_client_when_the_replica_is_deposed_is_not_sent(
    replica: Replica,
) -> None:
    """The bind checks before its lock write, then the write waits (rate limiter, a paused
    process) while the Lease changes hands: the transport checks again right before sending."""
    transport = replica.process.client.transport
    send = transport.request
    armed: list[bool] = []  # from the bind on (registration patches the node too)
    handed: list[bool] = []

    async def waits_then_sends(method: str, path: str, **kwargs: Any) -> Any:
        if armed and method == "PATCH" and path.endswith("/nodes/n1") and not handed:
            handed.append(True)
            await replica.hand_lease_to("other_2222")
        return await send(method, path, **kwargs)

    async def arm() -> None:
        armed.append(True)

    transport.request = waits_then_sends  # type: ignore[method-assign]
    error = await replica.filter_and_bind("p", after_filter=arm)
    assert handed and "not the leader" in error
    assert keys.NODE_LOCK not in (replica.cluster.get("nodes", "n1")["metadata"].get("annotations") or {})
    assert not replica.cluster.get("pods", "p", "default")["spec"].get("nodeName")


async def test_a_deposed_replica_nudges_no_refused_pod(replica: Replica) -> None:
    assert await replica.filter_and_bind("holder") == ""
    waiting = replica.cluster.create("pods", gpu_pod("waiting", mem=1000, container_name="c"),
                                     namespace="default")
    await replica.settle()
    answer = json.loads(await replica.process.extender.filter(
        json.dumps({"Pod": waiting, "NodeNames": ["n1"]}).encode()))
    assert answer["FailedNodes"], answer  # refused: the one slot is the holder's
    await replica.hand_lease_to("other_2222")
    mark = len(replica.cluster.request_log)
    replica.cluster.delete("pods", "holder", "default", grace_period_seconds=0)  # devices freed
    await replica.settle()
    await replica.process.extender.requeue.drain()
    assert replica.writes_since(mark) == []
    assert keys.REQUEUE not in (replica.cluster.get("pods", "waiting", "default")["metadata"]
                                .get("annotations") or {})
