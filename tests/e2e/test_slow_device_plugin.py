"""A device plugin that holds each node lock for 35 s, longer than kube-scheduler's 30 s extender
timeout: on the real control plane no pod may end up with another node's GPU, no lock may be left
behind, and every pod is placed or pending with a reason (issue "Safe under a burst").

Before the fix a bind waited on the lock past kube-scheduler's deadline, the retried filter chose
another node and the first bind still bound the pod: pods ran with another node's GPU."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from controlplane import ControlPlane
from faultcheck import snapshot, violations
from pluginstandin import DevicePluginStandIn, create_node, gpu_node, gpu_pod

from vgpu_scheduler.cluster import api
from vgpu_scheduler.cluster.client import KubeClient
from vgpu_scheduler.cluster.errors import ApiError

pytestmark = pytest.mark.e2e

NAMESPACE = "e2e-slow-plugin"
NODES = ("e2e-hold-0", "e2e-hold-1")
GROUP_LABEL = "e2e-group"
HOLD_SECONDS = 35.0
PODS = 4


async def _nodes(control_plane: ControlPlane, client: KubeClient) -> None:
    for name in NODES:
        node, status = gpu_node(name, gpus=2)
        node["metadata"]["labels"][GROUP_LABEL] = "hold"
        try:
            await create_node(client, node, status)
        except ApiError as exc:
            if exc.status != 409:
                raise
    await asyncio.to_thread(control_plane.wait_devices_registered, 2 * len(NODES), 120.0)


def _pod(name: str) -> dict[str, Any]:
    pod = gpu_pod(name, NAMESPACE, gpumem=4000)
    pod["spec"]["nodeSelector"] = {GROUP_LABEL: "hold"}  # only this test's nodes
    return pod


async def test_a_device_plugin_slower_than_the_extender_timeout_never_corrupts_allocations(
    control_plane: ControlPlane, client: KubeClient
) -> None:
    await _nodes(control_plane, client)
    control_plane.ensure_namespace(NAMESPACE)
    loop = asyncio.get_running_loop()
    async with DevicePluginStandIn(client, delay=HOLD_SECONDS, namespace=NAMESPACE) as plugin:
        await asyncio.gather(*(client.create(api.PODS, _pod(f"slow-{i}")) for i in range(PODS)))
        # Two nodes, each held 35 s per pod: every pod is confirmed within a few rounds.
        deadline = loop.time() + HOLD_SECONDS * (PODS / len(NODES) + 2) + 60
        while len(plugin.confirmed) < PODS and loop.time() < deadline:
            await asyncio.sleep(1.0)
        assert not plugin.errors, plugin.errors
    # Every pod placed on its own node's devices and confirmed, nothing over-committed, and the
    # plugin released every lock it was given (ours released theirs).
    snap = await snapshot(client, NAMESPACE, f"{GROUP_LABEL}=hold")
    assert violations(snap) == []
    assert len(snap.confirmed()) == PODS  # all placed in the end
