"""Fault: a device plugin that never confirms a bind (issue 12 item 5).

Node `-000`'s device plugin is dead: a pod bound there stays `bind-phase: allocating` and the node
lock it took is never released. A replica of our own (server + kube-scheduler, scheduler name
`hami-unconfirmed`) runs with `--node-lock-timeout=10s` so that the lock expires within the test.

1. `stuck` is pinned to `-000`: bound, never confirmed, the lock stays.
2. `elsewhere` could go to either node, and binpack prefers `-000` (it already holds `stuck`): it is
   placed on `-001` while the lock lives (lock-aware placement; HAMi would fail its binds with
   "node lock contention" until the lock expires) and confirmed there.
3. Once the lock is older than the timeout, `after-expiry` (binpack again prefers `-000`) is bound to
   `-000`: its bind takes the expired lock over.

Figures: seconds until `elsewhere` was confirmed, and the lock's age when `-000` took a pod again.
"""

from __future__ import annotations

import asyncio
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from controlplane import ControlPlane
from faultcheck import allocation_violations, report, settle_violations, snapshot
from pluginstandin import DevicePluginStandIn, create_group, delete_group, group_pod, group_selector

from vgpu_scheduler.cluster import api
from vgpu_scheduler.cluster.client import KubeClient
from vgpu_scheduler.cluster.nodelock import parse_lock
from vgpu_scheduler.wire import keys

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

GROUP = "e2e-unconfirmed"
NAMESPACE = "e2e-unconfirmed"
SCHEDULER = "hami-unconfirmed"
LOCK_TIMEOUT = 10.0  # s, this replica's --node-lock-timeout
DEAD, ALIVE = f"{GROUP}-000", f"{GROUP}-001"


def _pod(name: str, gpumem: int, node: str | None = None) -> dict[str, Any]:
    pod = group_pod(name, NAMESPACE, GROUP, gpumem=gpumem, scheduler_name=SCHEDULER)
    if node:
        pod["spec"]["nodeSelector"]["kubernetes.io/hostname"] = node
    return pod


async def _wait_pod(client: KubeClient, name: str, what: str, timeout: float = 60.0,
                    *, confirmed: bool = False) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        pod = await client.get_pod(NAMESPACE, name)
        phase = (pod["metadata"].get("annotations") or {}).get(keys.BIND_PHASE)
        if pod["spec"].get("nodeName") and (not confirmed or phase == keys.BIND_PHASE_SUCCESS):
            return pod
        assert loop.time() < deadline, f"timed out waiting for {name} {what}"
        await asyncio.sleep(0.2)


async def _lock_of(client: KubeClient, node: str) -> str:
    return str((await client.get_node(node))["metadata"].get("annotations", {}).get(keys.NODE_LOCK, ""))


async def test_a_device_plugin_that_never_confirms(control_plane: ControlPlane, client: KubeClient) -> None:
    await create_group(client, GROUP, 2, gpus=1)
    url, metrics = control_plane.spawn_server("vgpu-scheduler-unconfirmed", extra=[
        f"--scheduler-name={SCHEDULER}", f"--node-lock-timeout={LOCK_TIMEOUT:g}s",
        f"--node-label-selector={group_selector(GROUP)}",
    ])
    control_plane.spawn_scheduler("kube-scheduler-unconfirmed", profiles=(SCHEDULER,), server_url=url)
    control_plane.ensure_namespace(NAMESPACE, webhook=False)
    loop = asyncio.get_running_loop()
    try:
        await asyncio.to_thread(control_plane.wait_devices_registered, 2, metrics_url=metrics)
        async with DevicePluginStandIn(client, namespace=NAMESPACE, nodes=[ALIVE]) as plugin:
            await client.create(api.PODS, _pod("stuck", 8000, node=DEAD))
            stuck = await _wait_pod(client, "stuck", "bound")
            assert stuck["spec"]["nodeName"] == DEAD
            lock = parse_lock(await _lock_of(client, DEAD))
            assert (lock.namespace, lock.pod) == (NAMESPACE, "stuck")

            t0 = loop.time()
            await client.create(api.PODS, _pod("elsewhere", 4000))
            elsewhere = await _wait_pod(client, "elsewhere", "confirmed", confirmed=True)
            placed_elsewhere = loop.time() - t0
            assert elsewhere["spec"]["nodeName"] == ALIVE
            assert parse_lock(await _lock_of(client, DEAD)).pod == "stuck"  # still held

            # Past the timeout (the lock has seconds precision): the lock is dead, -000 takes pods.
            age = (datetime.now().astimezone() - lock.taken_at).total_seconds()
            await asyncio.sleep(max(0.0, LOCK_TIMEOUT + 1.5 - age))
            await client.create(api.PODS, _pod("after-expiry", 8000))
            after = await _wait_pod(client, "after-expiry", "bound")
            reused_at = (datetime.now().astimezone() - lock.taken_at).total_seconds()
            assert after["spec"]["nodeName"] == DEAD
            assert parse_lock(await _lock_of(client, DEAD)).pod == "after-expiry"
            assert not plugin.errors, plugin.errors

        snap = await snapshot(client, NAMESPACE, group_selector(GROUP))
        assert allocation_violations(snap) == []
        assert settle_violations(snap, unconfirmed_ok={"stuck", "after-expiry"}, locks_ok={DEAD}) == []
        report("unconfirmed-bind", lock_timeout_s=LOCK_TIMEOUT, elsewhere_confirmed_s=placed_elsewhere,
               dead_node_reused_at_lock_age_s=reused_at)
    finally:
        control_plane.kill("kube-scheduler-unconfirmed")
        control_plane.kill("vgpu-scheduler-unconfirmed")
        await delete_group(client, GROUP, NAMESPACE)
