"""On the real control plane: locks whose holder no longer needs them, and prompt placement when a
device frees up (issue 14, items 3 and 5).

A replica of our own (server + kube-scheduler, scheduler name `hami-holders`) runs with HAMi's
default 5-minute node lock timeout, on a group of one-GPU nodes whose GPU takes a single pod.

1. For each holder state (its pod finished; its bind failed after it took the lock) a node is
   locked in that holder's name, and a pod pinned to the node is bound at once: HAMi would refuse
   it for five minutes ("node lock contention").
2. A parked pod is filtered again as soon as it is annotated (the server's requeue nudge after it
   frees devices), and a pod waiting for the only slot (our filter rejected it:
   CardTimeSlicingExhausted) is bound soon after the pod holding the slot is deleted. The time from
   deletion to binding is the figure the README quotes; kube-scheduler retries a pod an extender
   rejected on its own backoff (1 s doubling to 10 s) once a cluster event arrives.
"""

from __future__ import annotations

import asyncio
import sys
import time
import urllib.request
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from controlplane import ControlPlane
from faultcheck import report
from pluginstandin import DevicePluginStandIn, create_group, delete_group, group_pod, group_selector

from vgpu_scheduler.cluster import api
from vgpu_scheduler.cluster.client import KubeClient
from vgpu_scheduler.cluster.nodelock import format_lock, parse_lock
from vgpu_scheduler.wire import keys

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

GROUP = "e2e-holders"
NAMESPACE = "e2e-holders"
SCHEDULER = "hami-holders"
BIND_WAIT = 30.0  # s: far below the 5-minute lock timeout, far above a normal bind


def _filters(metrics_url: str) -> float:
    """Filter requests our replica has answered (its /metrics)."""
    with urllib.request.urlopen(f"{metrics_url}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return sum(float(line.split()[-1]) for line in text.splitlines()
               if line.startswith("vgpu_scheduler_filter_requests_total"))


def _pod(name: str, node: str | None = None, **annotations: str) -> dict[str, Any]:
    pod = group_pod(name, NAMESPACE, GROUP, gpumem=4000, scheduler_name=SCHEDULER)
    if node:
        pod["spec"]["nodeSelector"]["kubernetes.io/hostname"] = node
    if annotations:
        pod["metadata"]["annotations"] = dict(annotations)
    return pod


async def _bound(client: KubeClient, name: str, timeout: float = BIND_WAIT) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        pod = await client.get_pod(NAMESPACE, name)
        if pod["spec"].get("nodeName"):
            return pod
        assert time.monotonic() < deadline, f"{name} not bound within {timeout:g} s"
        await asyncio.sleep(0.1)


async def _lock(client: KubeClient, node: str, holder: str) -> None:
    value = format_lock(datetime.now().astimezone(), NAMESPACE, holder)
    await client.patch_node(node, {"metadata": {"annotations": {keys.NODE_LOCK: value}}})


async def _finished_holder(client: KubeClient, name: str) -> None:
    await client.create(api.PODS, _pod(name, node="nowhere"))  # never schedulable
    await client.patch(api.PODS, name, {"status": {"phase": "Succeeded"}}, NAMESPACE, subresource="status")


async def _failed_bind_holder(client: KubeClient, name: str) -> None:
    await client.create(api.PODS, _pod(name, node="nowhere", **{
        keys.BIND_PHASE: keys.BIND_PHASE_FAILED, keys.BIND_TIME: str(int(time.time()) + 1),
    }))


async def test_dangling_locks_and_prompt_placement(control_plane: ControlPlane, client: KubeClient) -> None:
    nodes = await create_group(client, GROUP, 3, gpus=1, per_gpu=1)
    url, metrics = control_plane.spawn_server("vgpu-scheduler-holders", extra=[
        f"--scheduler-name={SCHEDULER}", f"--node-label-selector={group_selector(GROUP)}",
    ])
    control_plane.spawn_scheduler("kube-scheduler-holders", profiles=(SCHEDULER,), server_url=url)
    control_plane.ensure_namespace(NAMESPACE, webhook=False)
    figures: dict[str, float] = {}
    try:
        await asyncio.to_thread(control_plane.wait_devices_registered, 3, metrics_url=metrics)
        async with DevicePluginStandIn(client, namespace=NAMESPACE, nodes=nodes) as plugin:
            # 1. Holders that no longer need their lock.
            for node, (holder, make) in zip(nodes, [("finished", _finished_holder),
                                                    ("bind-failed", _failed_bind_holder)], strict=False):
                await make(client, holder)
                await _lock(client, node, holder)
                started = time.monotonic()
                await client.create(api.PODS, _pod(f"after-{holder}", node=node))
                pod = await _bound(client, f"after-{holder}")
                figures[f"bound_after_{holder.replace('-', '_')}_holder_s"] = time.monotonic() - started
                assert pod["spec"]["nodeName"] == node
                lock = (await client.get_node(node))["metadata"].get("annotations", {}).get(keys.NODE_LOCK)
                assert lock is None or parse_lock(lock).pod == f"after-{holder}"  # taken over, then released

            # 2. Deletion -> binding: the last node's only slot is taken, a second pod waits for it.
            last = nodes[2]
            await client.create(api.PODS, _pod("first", node=last))
            await _bound(client, "first")
            await client.create(api.PODS, _pod("waiting", node=last))
            await asyncio.sleep(3.0)  # rejected by our filter at least once, parked by kube-scheduler
            assert not (await client.get_pod(NAMESPACE, "waiting"))["spec"].get("nodeName")
            # A requeue nudge (an annotation update of the parked pod) makes kube-scheduler send it
            # to our filter again at once: what the server does when it frees devices after a refusal.
            before = await asyncio.to_thread(_filters, metrics)
            await client.patch_pod(NAMESPACE, "waiting", {"metadata": {"annotations": {keys.REQUEUE: "1"}}})
            deadline = time.monotonic() + 30.0
            while await asyncio.to_thread(_filters, metrics) == before:
                assert time.monotonic() < deadline, "the nudged pod was not filtered again"
                await asyncio.sleep(0.2)
            deleted = time.monotonic()
            await client.delete(api.PODS, "first", NAMESPACE, grace_period_seconds=0)
            await _bound(client, "waiting", timeout=60.0)
            figures["deletion_to_binding_s"] = time.monotonic() - deleted
            assert not plugin.errors, plugin.errors
        report("lock-holders", **figures)
    finally:
        control_plane.kill("kube-scheduler-holders")
        control_plane.kill("vgpu-scheduler-holders")
        await delete_group(client, GROUP, NAMESPACE)
