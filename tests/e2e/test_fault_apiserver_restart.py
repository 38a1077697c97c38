"""Fault: kube-apiserver restarted mid-run (issue 12 item 5).

Pods are placed, then kube-apiserver is stopped and etcd compacted past every revision a watcher has
seen, so no watch can resume: our server's reflectors must relist (410 Gone) and go on. Right after
the restart half of the placed pods are deleted and more are created than the free devices could
hold without those deletions: the new pods all fit only if our server relisted and saw the
deletions, and they are only filtered at all once its pod watch is back (a pod it does not know is
refused). Figures: how long the API was down, and from the API being back to the last new pod
confirmed.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from controlplane import ControlPlane
from faultcheck import report, violations, wait_settled
from pluginstandin import DevicePluginStandIn, create_group, delete_group, group_pod, group_selector

from vgpu_scheduler.cluster import api
from vgpu_scheduler.cluster.client import KubeClient

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

GROUP = "e2e-restart"
NAMESPACE = "e2e-restart"
NODES, GPUS, PER_GPU = 2, 1, 5  # 10 pod slots
FIRST, DELETED, SECOND = 8, 4, 6  # 8 placed, 4 deleted, 6 more: exactly full again


async def test_apiserver_restart_drops_every_watch_and_scheduling_goes_on(
    control_plane: ControlPlane, client: KubeClient
) -> None:
    before = await asyncio.to_thread(control_plane.registered_devices)
    await create_group(client, GROUP, NODES, gpus=GPUS, per_gpu=PER_GPU)
    await asyncio.to_thread(control_plane.wait_devices_registered, before + NODES * GPUS)
    control_plane.ensure_namespace(NAMESPACE)
    selector = group_selector(GROUP)
    loop = asyncio.get_running_loop()
    try:
        async with DevicePluginStandIn(client, delay=0.1, namespace=NAMESPACE) as plugin:
            first = [f"before-{i}" for i in range(FIRST)]
            await asyncio.gather(*(client.create(api.PODS, group_pod(n, NAMESPACE, GROUP)) for n in first))
            snap = await wait_settled(client, NAMESPACE, selector, timeout=90, confirmed=FIRST)
            assert sorted(snap.confirmed()) == sorted(first), violations(snap)

            log = control_plane.procs["vgpu-scheduler"].log
            log_mark = log.stat().st_size
            down = await asyncio.to_thread(control_plane.restart_apiserver, compact=True)
            back = loop.time()

            await asyncio.gather(*(client.delete(api.PODS, n, NAMESPACE, grace_period_seconds=0)
                                   for n in first[:DELETED]))
            second = [f"after-{i}" for i in range(SECOND)]
            await asyncio.gather(*(client.create(api.PODS, group_pod(n, NAMESPACE, GROUP)) for n in second))
            snap = await wait_settled(client, NAMESPACE, selector, timeout=120,
                                      confirmed=FIRST - DELETED + SECOND)
            recovered = loop.time() - back
            assert not plugin.errors, plugin.errors

        assert violations(snap) == []
        assert snap.confirmed() == set(first[DELETED:]) | set(second)
        relisted = log.read_text(errors="replace")[log_mark:]
        assert "reflector pods: " in relisted and "relisting" in relisted, relisted[-2000:]
        report("apiserver-restart", api_down_s=down, api_back_to_all_confirmed_s=recovered,
               pods_after_restart=SECOND)
    finally:
        await delete_group(client, GROUP, NAMESPACE)
