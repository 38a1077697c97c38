"""Fault: two scheduler replicas, the leader killed mid-burst (issue 12 item 5).

Each replica is what one scheduler pod of the Deployment runs: a kube-scheduler with leader
election (profile `hami-failover`) whose extender is its own vgpu-scheduler, that one following the
Lease with `--leader-elect`. The kube-schedulers elect on Lease `hami-failover-ks`; our servers follow
its mirror `hami-failover` (leasemirror.py says why: on one machine every kube-scheduler has the
same hostname). Short lease timings (6 s / 4 s / 1 s) keep the test quick; the Deployment keeps
kube-scheduler's defaults (15 s / 10 s / 2 s).

While a burst of pods is being scheduled, the leader's kube-scheduler and server are SIGKILLed
together (a node failure: no lease release, binds cut mid-way). Then: the other kube-scheduler
takes the Lease, the other server becomes leader and every pod, of the burst and created after the
kill, ends bound and confirmed; no device is over-committed or on another node; no lock is left.
Figures: seconds from the kill to the Lease taken over, and to the first pod bound by the new leader.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from controlplane import ControlPlane
from faultcheck import report, violations, wait_settled
from leasemirror import LeaseMirror
from standin import DevicePluginStandIn, create_group, delete_group, group_pod, group_selector

from vgpu_scheduler.cluster import api
from vgpu_scheduler.cluster.client import KubeClient
from vgpu_scheduler.cluster.errors import ApiError
from vgpu_scheduler.cluster.reflector import Reflector

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

GROUP = "e2e-failover"
NAMESPACE = "e2e-failover"
SCHEDULER = "hami-failover"
KS_LEASE, MIRROR_LEASE = "hami-failover-ks", "hami-failover"
LEASE = {"leaseDuration": "6s", "renewDeadline": "4s", "retryPeriod": "1s"}
NODES, GPUS = 4, 2  # 80 pod slots
BURST, AFTER = 30, 10
KILL_AFTER_BOUND = 8  # kill the leader once this many pods of the burst are bound


class Bindings:
    """Pod informer handler: loop time at which each pod was first seen bound."""

    def __init__(self) -> None:
        self.at: dict[str, float] = {}

    def on_add(self, obj: dict[str, Any]) -> None:
        self._see(obj)

    def on_update(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        self._see(new)

    def on_delete(self, obj: dict[str, Any]) -> None:
        pass

    def _see(self, pod: dict[str, Any]) -> None:
        if pod["spec"].get("nodeName"):
            self.at.setdefault(pod["metadata"]["name"], asyncio.get_running_loop().time())


async def _holder(client: KubeClient) -> str:
    try:
        lease = await client.get_lease(NAMESPACE, KS_LEASE)
    except ApiError as exc:
        if exc.status == 404:
            return ""
        raise
    return str((lease.get("spec") or {}).get("holderIdentity") or "")


async def _until(probe: Any, what: str, timeout: float) -> Any:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not (got := await probe()):
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)
    return got


def _replica(cp: ControlPlane, name: str) -> str:
    url, _ = cp.spawn_server(f"vgpu-scheduler-{name}", hostname=f"e2e-replica-{name}", extra=[
        f"--scheduler-name={SCHEDULER}", "--leader-elect=true",
        f"--leader-elect-resource-name={MIRROR_LEASE}", f"--leader-elect-resource-namespace={NAMESPACE}",
        f"--node-label-selector={group_selector(GROUP)}",
    ])
    return url


async def test_leader_killed_mid_burst(control_plane: ControlPlane, client: KubeClient) -> None:
    cp = control_plane
    await create_group(client, GROUP, NODES, gpus=GPUS)
    cp.ensure_namespace(NAMESPACE, webhook=False)
    election = {"leaderElect": True, "resourceLock": "leases", "resourceName": KS_LEASE,
                "resourceNamespace": NAMESPACE, **LEASE}
    url_a, url_b = _replica(cp, "a"), _replica(cp, "b")
    bindings = Bindings()
    watch = Reflector(client, api.PODS, namespace=NAMESPACE, handler=bindings)
    loop = asyncio.get_running_loop()
    try:
        cp.spawn_scheduler("kube-scheduler-a", profiles=(SCHEDULER,), server_url=url_a,
                           leader_election=election)
        id_a = await _until(lambda: _holder(client), "kube-scheduler-a to take the Lease", 60)
        async with LeaseMirror(client, NAMESPACE, KS_LEASE, MIRROR_LEASE, names={id_a: "e2e-replica-a"},
                               other="e2e-replica-b") as mirror:
            cp.spawn_scheduler("kube-scheduler-b", profiles=(SCHEDULER,), server_url=url_b,
                               leader_election=election, wait=False)
            watch.start()
            await watch.wait_synced(timeout=60)
            async with DevicePluginStandIn(client, delay=0.05, namespace=NAMESPACE) as plugin:
                await asyncio.gather(*(client.create(api.PODS, group_pod(f"burst-{i:02d}", NAMESPACE, GROUP,
                                                                         scheduler_name=SCHEDULER))
                                       for i in range(BURST)))
                await _until(lambda: asyncio.sleep(0, len(bindings.at) >= KILL_AFTER_BOUND),
                             f"{KILL_AFTER_BOUND} pods bound by replica a", 120)
                killed = loop.time()
                cp.kill("kube-scheduler-a")
                cp.kill("vgpu-scheduler-a")
                bound_before = set(bindings.at)
                await asyncio.gather(*(client.create(api.PODS, group_pod(f"after-{i:02d}", NAMESPACE, GROUP,
                                                                         scheduler_name=SCHEDULER))
                                       for i in range(AFTER)))
                id_b = await _until(lambda: _new_holder(client, id_a), "kube-scheduler-b to lead", 60)
                taken_over = loop.time() - killed
                snap = await wait_settled(client, NAMESPACE, group_selector(GROUP), timeout=120,
                                          confirmed=BURST + AFTER)
                assert not plugin.errors, plugin.errors
            assert not mirror.errors, mirror.errors
            assert mirror.holders == [id_a, id_b]  # one takeover, no flapping

        assert violations(snap) == []
        assert len(snap.confirmed()) == BURST + AFTER
        after_kill = sorted(t for name, t in bindings.at.items() if name not in bound_before)
        first_bind = after_kill[0] - killed
        leader_b = _became_leader(cp, "vgpu-scheduler-b")
        assert leader_b, "vgpu-scheduler-b never logged that it became the leader"
        report("leader-failover", lease_duration_s=6, bound_before_kill=len(bound_before),
               lease_taken_over_s=taken_over, first_bind_after_kill_s=first_bind,
               all_confirmed_s=max(bindings.at.values()) - killed)
    finally:
        await watch.stop()
        for name in ("kube-scheduler-a", "kube-scheduler-b", "vgpu-scheduler-a", "vgpu-scheduler-b"):
            if name in cp.procs:
                cp.kill(name)
        await delete_group(client, GROUP, NAMESPACE)


async def _new_holder(client: KubeClient, old: str) -> str:
    holder = await _holder(client)
    return holder if holder and holder != old else ""


def _became_leader(cp: ControlPlane, name: str) -> bool:
    return "became the leader" in cp.procs[name].log.read_text(errors="replace")
