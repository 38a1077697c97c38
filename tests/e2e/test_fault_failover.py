"""Fault: two scheduler replicas, the leader killed mid-burst (issue 12 item 5).

Each replica is what one scheduler pod of the Deployment runs: a kube-scheduler with leader
election (profile `hami-failover`) whose extender is its own vgpu-scheduler, that one following the
Lease with `--leader-elect`. The kube-schedulers elect on Lease `hami-failover-ks`; our servers follow
its mirror `hami-failover` (leasemirror.py says why: on one machine every kube-scheduler has the
same hostname). Short lease timings (6 s / 4 s / 1 s) keep the test quick; the Deployment keeps
kube-scheduler's defaults (15 s / 10 s / 2 s).

While a burst of pods is being scheduled, the leader's kube-scheduler and server are SIGKILLed
together (a node failure: no lease release) at the worst moment: our server holds a node lock for a
pod it has not bound yet. Then the other kube-scheduler takes the Lease, the other server becomes
leader and every pod, of the burst and created after the kill, ends bound and confirmed; no device
is over-committed or on another node; no lock is left. The locked node is cordoned right after the
kill, so the new leader binds that pod elsewhere and the old lock names a pod bound to another node;
once the node is back, a pod for it must take that dangling lock over at once (not fail on
contention until the lock expires, 5 min).
Figures: seconds from the kill to the Lease taken over, to the first pod bound after it (by the new
leader), and to the last pod bound.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from controlplane import ControlPlane
from faultcheck import Bindings, report, violations, wait_settled
from leasemirror import LeaseMirror
from pluginstandin import DevicePluginStandIn, create_group, delete_group, group_pod, group_selector

from vgpu_scheduler.cluster import api
from vgpu_scheduler.cluster.client import KubeClient
from vgpu_scheduler.cluster.errors import ApiError
from vgpu_scheduler.cluster.nodelock import parse_lock
from vgpu_scheduler.cluster.reflector import Reflector
from vgpu_scheduler.wire import keys

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

GROUP = "e2e-failover"
NAMESPACE = "e2e-failover"
SCHEDULER = "hami-failover"
KS_LEASE, MIRROR_LEASE = "hami-failover-ks", "hami-failover"
LEASE = {"leaseDuration": "6s", "renewDeadline": "4s", "retryPeriod": "1s"}
NODES, GPUS = 4, 2  # 80 pod slots
BURST, AFTER = 30, 10
ARMED_AFTER = 8  # pods bound before the leader may be killed


class LockWindow:
    """Node informer handler: once `armed_after` pods are bound, set `seen` when a node lock names
    a pod not bound yet, i.e. a bind between its lock and its Binding (the worst moment to kill
    the leader)."""

    def __init__(self, bindings: Bindings, armed_after: int) -> None:
        self.bindings = bindings
        self.armed_after = armed_after
        self.seen = asyncio.Event()
        self.pod = self.node = ""

    def on_add(self, obj: dict[str, Any]) -> None:
        self.on_update(obj, obj)

    def on_update(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        value = (new["metadata"].get("annotations") or {}).get(keys.NODE_LOCK)
        if not value or self.seen.is_set() or len(self.bindings.at) < self.armed_after:
            return
        held = parse_lock(value)
        if held.namespace == NAMESPACE and held.pod not in self.bindings.at:
            self.pod, self.node = held.pod, new["metadata"]["name"]
            self.seen.set()

    def on_delete(self, obj: dict[str, Any]) -> None:
        pass


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


def _replica(cp: ControlPlane, name: str, *extra: str) -> str:
    url, _ = cp.spawn_server(f"vgpu-scheduler-{name}", hostname=f"e2e-replica-{name}", extra=[
        f"--scheduler-name={SCHEDULER}", "--leader-elect=true",
        f"--leader-elect-resource-name={MIRROR_LEASE}", f"--leader-elect-resource-namespace={NAMESPACE}",
        f"--node-label-selector={group_selector(GROUP)}", *extra,
    ])
    return url


def _pods(prefix: str, count: int) -> list[dict[str, Any]]:
    return [group_pod(f"{prefix}-{i:02d}", NAMESPACE, GROUP, scheduler_name=SCHEDULER) for i in range(count)]


async def test_leader_killed_mid_burst(control_plane: ControlPlane, client: KubeClient) -> None:
    cp = control_plane
    await create_group(client, GROUP, NODES, gpus=GPUS)
    cp.ensure_namespace(NAMESPACE, webhook=False)
    election = {"leaderElect": True, "resourceLock": "leases", "resourceName": KS_LEASE,
                "resourceNamespace": NAMESPACE, **LEASE}
    # Replica a writes at 10 requests/s with no burst: ~0.1 s between a bind's lock and its Binding,
    # wide enough for the test to see the lock and kill a in that window.
    url_a = _replica(cp, "a", "--kube-qps=10", "--kube-burst=1")
    url_b = _replica(cp, "b")
    bindings = Bindings()
    window = LockWindow(bindings, armed_after=ARMED_AFTER)
    pods = Reflector(client, api.PODS, namespace=NAMESPACE, handler=bindings)
    nodes = Reflector(client, api.NODES, label_selector=group_selector(GROUP), handler=window)
    loop = asyncio.get_running_loop()
    try:
        cp.spawn_scheduler("kube-scheduler-a", profiles=(SCHEDULER,), server_url=url_a,
                           leader_election=election)
        id_a = await _until(lambda: _holder(client), "kube-scheduler-a to take the Lease", 60)
        async with LeaseMirror(client, NAMESPACE, KS_LEASE, MIRROR_LEASE, names={id_a: "e2e-replica-a"},
                               other="e2e-replica-b") as mirror:
            cp.spawn_scheduler("kube-scheduler-b", profiles=(SCHEDULER,), server_url=url_b,
                               leader_election=election, wait=False)
            for reflector in (pods, nodes):
                reflector.start()
                await reflector.wait_synced(timeout=60)
            async with DevicePluginStandIn(client, delay=0.05, namespace=NAMESPACE) as plugin:
                await asyncio.gather(*(client.create(api.PODS, p) for p in _pods("burst", BURST)))
                while True:  # the pod watch may lag: ask the API whether that pod is still unbound
                    await asyncio.wait_for(window.seen.wait(), 120)
                    if not await _node_of(client, window.pod):
                        break
                    window.seen.clear()
                # a has locked a node for a pod it has not bound yet: the node dies now.
                cp.kill("kube-scheduler-a")
                cp.kill("vgpu-scheduler-a")
                killed = loop.time()
                bound_at_kill = len(bindings.at)
                # The locked node is cordoned, so the pod a was binding goes elsewhere: a's lock
                # there names a pod bound to another node, which nobody will ever release.
                await _cordon(client, window.node, True)
                await asyncio.gather(*(client.create(api.PODS, p) for p in _pods("after", AFTER)))
                id_b = await _until(lambda: _new_holder(client, id_a), "kube-scheduler-b to lead", 60)
                took_over = loop.time()
                moved = await _until(lambda: _node_of(client, window.pod), f"{window.pod} bound", 120)
                # Back in service: a pod for that node must take the dangling lock over at once
                # instead of failing on contention until the lock expires (5 min).
                await _cordon(client, window.node, False)
                late = _pods("late", 1)[0]
                late["spec"]["nodeSelector"]["kubernetes.io/hostname"] = window.node
                await client.create(api.PODS, late)
                snap = await wait_settled(client, NAMESPACE, group_selector(GROUP), timeout=120,
                                          confirmed=BURST + AFTER + 1)
                assert not plugin.errors, plugin.errors
            assert not mirror.errors, mirror.errors
            assert mirror.holders == [id_a, id_b]  # one takeover, no flapping

        assert violations(snap) == []
        assert len(snap.confirmed()) == BURST + AFTER + 1
        assert moved != window.node and snap.bound()["late-00"] == window.node
        assert _became_leader(cp, "vgpu-scheduler-b"), "vgpu-scheduler-b never logged that it led"
        in_flight = sum(1 for t in bindings.at.values() if killed <= t < took_over)  # a's last writes
        first_by_b = min(t for t in bindings.at.values() if t >= took_over)
        report("leader-failover", lease_duration_s=6, killed_with_lock_of=f"{window.pod}@{window.node}",
               bound_before_kill=bound_at_kill, landed_after_kill=in_flight,
               lease_taken_over_s=took_over - killed, first_bind_by_new_leader_s=first_by_b - killed,
               all_confirmed_s=max(bindings.at.values()) - killed)
    finally:
        await pods.stop()
        await nodes.stop()
        for name in ("kube-scheduler-a", "kube-scheduler-b", "vgpu-scheduler-a", "vgpu-scheduler-b"):
            if name in cp.procs:
                cp.kill(name)
        await delete_group(client, GROUP, NAMESPACE)


async def _cordon(client: KubeClient, node: str, unschedulable: bool) -> None:
    await client.patch(api.NODES, node, {"spec": {"unschedulable": unschedulable or None}})


async def _node_of(client: KubeClient, pod: str) -> str:
    return str((await client.get_pod(NAMESPACE, pod))["spec"].get("nodeName") or "")


async def _new_holder(client: KubeClient, old: str) -> str:
    holder = await _holder(client)
    return holder if holder and holder != old else ""


def _became_leader(cp: ControlPlane, name: str) -> bool:
    return "became the leader" in cp.procs[name].log.read_text(errors="replace")
