"""Requeue nudges (scheduler/requeue.py): when devices are freed, each pod the filter refused in the
last few seconds is annotated once, so kube-scheduler retries it on the usage we now have instead of
waiting for its 5-minute flush; older refusals, placed pods and a disabled nudger write nothing."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from tests.builders import gpu_node, gpu_pod
from vgpu_scheduler.cluster.client import KubeClient
from vgpu_scheduler.config import DeviceConfig
from vgpu_scheduler.scheduler.options import SchedulerOptions
from vgpu_scheduler.scheduler.process import SchedulerProcess
from vgpu_scheduler.scheduler.requeue import WINDOW_SECONDS, RequeueNudger
from vgpu_scheduler.standin.memory import MemoryCluster
from vgpu_scheduler.standin.transport import MemoryTransport
from vgpu_scheduler.wire import keys

Obj = dict[str, Any]


class Clock:
    def __init__(self) -> None:
        self.t = 1_800_000_000.0

    def __call__(self) -> float:
        return self.t


async def _stack(**opts: Any) -> tuple[MemoryCluster, SchedulerProcess, Clock]:
    cluster = MemoryCluster()
    cluster.create("nodes", gpu_node("n1", gpus=1, count=1))
    clock = Clock()
    client = KubeClient(MemoryTransport(cluster))
    process = SchedulerProcess(SchedulerOptions(**opts), DeviceConfig(), client, "host", now=clock,
                               events=_Quiet())
    await process.start(sync_timeout=5)
    return cluster, process, clock


class _Quiet:
    def record(self, pod: Any, type_: str, reason: str, message: str) -> None:
        """No events."""


async def _settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)
    await asyncio.sleep(0.02)


async def _filter(process: SchedulerProcess, pod: Obj) -> Obj:
    body = json.dumps({"Pod": pod, "NodeNames": ["n1"]}).encode()
    answer: Obj = json.loads(await process.extender.filter(body))
    return answer


async def _place_holder_and_refuse_waiting(cluster: MemoryCluster, process: SchedulerProcess) -> Obj:
    holder = cluster.create("pods", gpu_pod("holder"), namespace="default")
    await _settle()
    assert (await _filter(process, holder))["NodeNames"] == ["n1"]
    body = json.dumps({"PodName": "holder", "PodNamespace": "default", "PodUID": holder["metadata"]["uid"],
                       "Node": "n1"}).encode()
    assert json.loads(await process.extender.bind(body))["Error"] == ""
    waiting = cluster.create("pods", gpu_pod("waiting"), namespace="default")
    await _settle()
    assert (await _filter(process, waiting))["FailedNodes"] == {"n1": "1/1 CardTimeSlicingExhausted"}
    return waiting


def _nudge_of(cluster: MemoryCluster, name: str) -> str | None:
    annotations = cluster.get("pods", name, "default")["metadata"].get("annotations") or {}
    value = annotations.get(keys.REQUEUE)
    return value if isinstance(value, str) else None


async def test_a_pod_refused_just_before_the_deletion_is_nudged_once() -> None:
    cluster, process, clock = await _stack()
    try:
        await _place_holder_and_refuse_waiting(cluster, process)
        clock.t += WINDOW_SECONDS - 1  # refused a moment before our informer saw the deletion
        cluster.delete("pods", "holder", "default", grace_period_seconds=0)
        await _settle()
        await process.extender.requeue.drain()
        assert _nudge_of(cluster, "waiting") == str(int(clock.t))
        assert process.extender.requeue.nudged == 1
        # Once: a second release does not nudge it again.
        cluster.create("pods", gpu_pod("other"), namespace="default")
        cluster.delete("pods", "other", "default", grace_period_seconds=0)
        await _settle()
        await process.extender.requeue.drain()
        assert process.extender.requeue.nudged == 1
    finally:
        await process.stop()


async def test_a_pod_refused_long_before_is_left_to_kube_scheduler() -> None:
    cluster, process, clock = await _stack()
    try:
        await _place_holder_and_refuse_waiting(cluster, process)
        clock.t += WINDOW_SECONDS + 1  # kube-scheduler's own deletion event retries it
        cluster.delete("pods", "holder", "default", grace_period_seconds=0)
        await _settle()
        await process.extender.requeue.drain()
        assert _nudge_of(cluster, "waiting") is None and process.extender.requeue.nudged == 0
    finally:
        await process.stop()


async def test_a_finished_holder_frees_devices_too() -> None:
    cluster, process, _ = await _stack()
    try:
        await _place_holder_and_refuse_waiting(cluster, process)
        cluster.patch("pods", "holder", {"status": {"phase": "Succeeded"}}, "default", subresource="status")
        await _settle()
        await process.extender.requeue.drain()
        assert _nudge_of(cluster, "waiting") is not None
    finally:
        await process.stop()


async def test_nudges_can_be_turned_off() -> None:
    cluster, process, _ = await _stack(requeue_nudges=False)
    try:
        await _place_holder_and_refuse_waiting(cluster, process)
        cluster.delete("pods", "holder", "default", grace_period_seconds=0)
        await _settle()
        await process.extender.requeue.drain()
        assert _nudge_of(cluster, "waiting") is None
    finally:
        await process.stop()


async def test_a_nudge_queued_before_the_replica_was_deposed_is_not_sent() -> None:
    """The nudger asks is_leader() when it queues the nudges, and again as each patch leaves the
    client: a replica paused past its lease with nudges waiting (rate limiter) sends none on waking."""
    cluster = MemoryCluster()
    pod = cluster.create("pods", gpu_pod("waiting", mem=1000, container_name="c"), namespace="default")
    client = KubeClient(MemoryTransport(cluster))
    leading = True
    nudger = RequeueNudger(
        client,
        now=Clock(),
        cached_pod=lambda ns, name: cluster.get("pods", name, ns),
        is_leader=lambda: leading,
    )
    nudger.refused(pod["metadata"]["uid"], "default", "waiting")
    nudger.devices_freed()  # queued while leading
    leading = False  # paused before the patch left, past the lease
    await nudger.drain()
    assert nudger.nudged == 0
    annotations = cluster.get("pods", "waiting", "default")["metadata"].get("annotations") or {}
    assert keys.REQUEUE not in annotations
    await client.close()
