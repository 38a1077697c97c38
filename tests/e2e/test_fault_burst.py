"""Fault: 500 GPU pods created at once on 50 nodes (issue 12 item 5).

All 500 go through the real admission chain (our /webhook) and kube-scheduler's hami-scheduler
profile (our /filter and /bind) at once, with the device-plugin stand-in confirming. The nodes hold
450 of them (one GPU each, 9 pods by memory): at the end every pod is bound and confirmed or pending
with kube-scheduler's reason, no device holds more than it has, every device is on its pod's node,
and no node lock is left. Figures: pods/s (bound pods / first create to last binding) and the time
until everything settled.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from controlplane import ControlPlane
from faultcheck import Bindings, Snapshot, report, snapshot, violations, wait_settled
from pluginstandin import DevicePluginStandIn, create_group, delete_group, group_pod, group_selector

from vgpu_scheduler.cluster import api
from vgpu_scheduler.cluster.client import KubeClient
from vgpu_scheduler.cluster.reflector import Reflector

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

GROUP = "e2e-burst"
NAMESPACE = "e2e-burst"
NODES, PODS = 50, 500
DEVMEM, GPUMEM = 40960, 4500  # 9 pods per GPU by memory (count 10): 450 fit, 50 stay pending
FITTING = NODES * (DEVMEM // GPUMEM)


def _all_pending_for_memory(snap: Snapshot) -> bool:
    pending = [p["metadata"]["name"] for p in snap.pods if not p["spec"].get("nodeName")]
    return all("CardInsufficientMemory" in snap.reasons.get(name, "") for name in pending)


async def test_500_pods_at_once_on_50_nodes(control_plane: ControlPlane, client: KubeClient) -> None:
    before = await asyncio.to_thread(control_plane.registered_devices)
    await create_group(client, GROUP, NODES, gpus=1, devmem=DEVMEM)
    await asyncio.to_thread(control_plane.wait_devices_registered, before + NODES)
    control_plane.ensure_namespace(NAMESPACE)
    times = Bindings()
    watch = Reflector(client, api.PODS, namespace=NAMESPACE, handler=times)
    watch.start()
    loop = asyncio.get_running_loop()
    try:
        await watch.wait_synced(timeout=60)
        async with DevicePluginStandIn(client, delay=0.05, namespace=NAMESPACE) as plugin:
            t0 = loop.time()
            await asyncio.gather(*(client.create(api.PODS, group_pod(f"p-{i:03d}", NAMESPACE, GROUP,
                                                                     gpumem=GPUMEM))
                                   for i in range(PODS)))
            created = loop.time() - t0
            snap = await wait_settled(client, NAMESPACE, group_selector(GROUP), timeout=180, poll=2.0,
                                      confirmed=FITTING)
            settled = loop.time() - t0
            # A pod whose last attempt was a failed bind (contention) is in kube-scheduler's backoff
            # (at most 10 s); its next attempt finds no room. Wait for those answers too.
            deadline = loop.time() + 30
            while not _all_pending_for_memory(snap) and loop.time() < deadline:
                await asyncio.sleep(2.0)
                snap = await snapshot(client, NAMESPACE, group_selector(GROUP))
            assert not plugin.errors, plugin.errors[:5]

        bound = snap.bound()
        pending = {p["metadata"]["name"]: snap.reasons.get(p["metadata"]["name"], "")
                   for p in snap.pods if not p["spec"].get("nodeName")}
        last = max(times.at.values()) - t0 if times.at else float("nan")
        report("burst-500-on-50", pods=PODS, nodes=NODES, bound=len(bound), pending=len(pending),
               create_s=created, last_bind_s=last, pods_per_s=len(times.at) / last,
               settled_s=settled)
        assert violations(snap) == []
        notes = sorted(set(pending.values()))
        assert len(bound) == FITTING, notes[:5]
        assert all("CardInsufficientMemory" in note for note in notes), notes[:5]
    finally:
        await watch.stop()
        await delete_group(client, GROUP, NAMESPACE)
