"""A GPU pod through the real admission chain, the real kube-scheduler and our extender.

kube-apiserver calls our /webhook (schedulerName), kube-scheduler's hami-scheduler profile calls our
/filter and /bind, and the device-plugin stand-in confirms the allocation and drops the node lock.
Waits are bounded polls; nothing asserts on elapsed time.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from controlplane import HAMI_SCHEDULER, ControlPlane
from pluginstandin import DevicePluginStandIn, create_node, gpu_node, gpu_pod

from tests.builders import gpu_uuid
from vgpu_scheduler.cluster import api
from vgpu_scheduler.cluster.client import KubeClient
from vgpu_scheduler.cluster.errors import ApiError
from vgpu_scheduler.wire import keys

pytestmark = pytest.mark.e2e

NODES = ("e2e-gpu-0", "e2e-gpu-1")
T = TypeVar("T")


async def eventually(probe: Callable[[], Awaitable[T | None]], what: str, timeout: float = 90.0) -> T:
    """Poll `probe` until it returns something truthy (bounded)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        got = await probe()
        if got:
            return got
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.2)


@pytest.fixture
async def nodes(control_plane: ControlPlane, client: KubeClient) -> tuple[str, ...]:
    for name in NODES:
        try:
            await create_node(client, *gpu_node(name, gpus=2))
        except ApiError as exc:
            if exc.status != 409:  # already there from an earlier test of this session
                raise
    await asyncio.to_thread(control_plane.wait_devices_registered, 2 * len(NODES))
    return NODES


async def test_gpu_pod_is_admitted_filtered_bound_and_confirmed(
    control_plane: ControlPlane, client: KubeClient, nodes: tuple[str, ...]
) -> None:
    control_plane.ensure_namespace("e2e-bind")
    async with DevicePluginStandIn(client, delay=0.2, namespace="e2e-bind") as plugin:
        created = await client.create(api.PODS, gpu_pod("gpu-one", "e2e-bind", gpumem=4000))
        # Our webhook moved the pod to our scheduler (it asked for nvidia.com/gpu).
        assert created["spec"]["schedulerName"] == HAMI_SCHEDULER

        async def bound_and_confirmed() -> dict[str, Any] | None:
            pod = await client.get_pod("e2e-bind", "gpu-one")
            ann = pod["metadata"].get("annotations") or {}
            done = pod["spec"].get("nodeName") and ann.get(keys.BIND_PHASE) == keys.BIND_PHASE_SUCCESS
            # The stand-in records its confirmation when its patch's answer is back, which a GET
            # issued meanwhile can beat: wait for both.
            return pod if done and "e2e-bind/gpu-one" in plugin.confirmed else None

        pod = await eventually(bound_and_confirmed, "gpu-one bound with bind-phase success")
        assert not plugin.errors

    node = pod["spec"]["nodeName"]
    ann = pod["metadata"]["annotations"]
    assert node in nodes
    assert ann[keys.VGPU_NODE] == node
    allocated = ann[keys.VGPU_ALLOCATED]
    assert allocated.split(",")[0] in {gpu_uuid(node, i) for i in range(2)}
    assert ",NVIDIA,4000," in allocated
    # The stand-in consumed the to-allocate entry, as kubelet's Allocate would.
    assert keys.VGPU_TO_ALLOCATE in ann and "NVIDIA" not in ann[keys.VGPU_TO_ALLOCATE]

    async def lock_gone() -> bool:
        n = await client.get_node(node)
        return keys.NODE_LOCK not in (n["metadata"].get("annotations") or {})

    await eventually(lock_gone, f"{keys.NODE_LOCK} removed from {node}")

    # kube-scheduler recorded the binding our /bind made.
    events, _ = await client.list_all(api.EVENTS_V1, "e2e-bind", field_selector="regarding.name=gpu-one")
    assert any(e.get("reason") == "Scheduled" for e in events)


async def test_pod_that_fits_nowhere_stays_pending_with_our_reason(
    control_plane: ControlPlane, client: KubeClient, nodes: tuple[str, ...]
) -> None:
    control_plane.ensure_namespace("e2e-nofit")
    # More memory than any card has: every node fails with CardInsufficientMemory.
    await client.create(api.PODS, gpu_pod("too-big", "e2e-nofit", gpumem=200_000))

    async def failed_event() -> dict[str, Any] | None:
        events, _ = await client.list_all(api.EVENTS_V1, "e2e-nofit", field_selector="regarding.name=too-big")
        return next((e for e in events if e.get("reason") == "FailedScheduling"), None)

    event = await eventually(failed_event, "a FailedScheduling event for too-big")
    assert event["type"] == "Warning"
    assert event["reportingController"] == HAMI_SCHEDULER
    assert "CardInsufficientMemory" in event["note"]
    pod = await client.get_pod("e2e-nofit", "too-big")
    assert not pod["spec"].get("nodeName")
    assert pod["status"].get("phase") == "Pending"
    assert keys.BIND_PHASE not in (pod["metadata"].get("annotations") or {})
