"""The simulator behaves like the live path (issue 16 item 5).

Each scenario (nodes with their annotations, existing pods, ResourceQuotas, pods to schedule) runs
twice: through `simulate(...)` in-process, and through the real control plane (kube-apiserver,
kube-scheduler v1.36 with our server as extender, the device-plugin stand-in). On the live path the
pods are created ONE AT A TIME in the simulator's order, each waited for until it is bound and
confirmed or kube-scheduler reports it unschedulable, so the decisions happen in the same order as
the simulator's serial loop. Then, per pod: the node (or pending), every `hami.io/` annotation but
the timestamps, and for a pending pod the reason per node as our extender gave it; per node, who
holds `hami.io/mutex.lock` at the end (timestamp dropped).

Where the live reasons come from: kube-scheduler's FailedScheduling note holds a histogram of the
extender's FailedNodes strings (`<count> <reason>`, no node names), and our server's FilteringFailed
events name the nodes per reason type. Both are compared with the simulator's reasons per node.

Each scenario has its own namespace and node label (pods select their scenario's nodes), so all of
them share the session's control plane. The pods skip our webhook (unlabelled namespace, explicit
schedulerName): the simulator takes pods as written, and the webhook has tests of its own.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from controlplane import HAMI_SCHEDULER, ControlPlane
from pluginstandin import DevicePluginStandIn, create_node

from tests import builders
from vgpu_scheduler.cluster import api
from vgpu_scheduler.cluster.client import KubeClient
from vgpu_scheduler.cluster.nodelock import format_lock
from vgpu_scheduler.devices.handshake import format_requesting
from vgpu_scheduler.model import DeviceInfo, MigPlacement, MigProfile
from vgpu_scheduler.simulate.loop import Simulation
from vgpu_scheduler.simulate.options import SimulationOptions
from vgpu_scheduler.wire import keys
from vgpu_scheduler.wire.reasons import parse_reason

pytestmark = pytest.mark.e2e

Obj = dict[str, Any]
SCENARIO_LABEL = "vgpu-scheduler.e2e/parity"
LOCK_TIMEOUT = timedelta(minutes=5)  # the server's --node-lock-timeout default
CONTENTION_LEFT = timedelta(seconds=12)
"""How long the contended lock of scenario `contention` stays live after the scenario is built:
long enough for several failed binds, short enough to keep the test quick."""
NORMALIZED = frozenset({keys.VGPU_TIME, keys.BIND_TIME})
"""Annotations holding a wall-clock time (simulated time in the simulator)."""
POD_TIMEOUT = 90.0


# -- building blocks -----------------------------------------------------------------------------


def gpu(node: str, i: int, *, devmem: int = 81920, type_: str = "NVIDIA-A100", count: int = 10) -> DeviceInfo:
    return builders.device(builders.gpu_uuid(node, i), index=i, count=count, devmem=devmem, type=type_)


def _placements(*starts_sizes: tuple[int, int]) -> tuple[MigPlacement, ...]:
    return tuple(MigPlacement(s, z) for s, z in starts_sizes)


def mig_gpu(node: str, i: int) -> DeviceInfo:
    """An A100-80GB in MIG mode with a (partial) A100 geometry."""
    profiles = (
        MigProfile("1g.10gb", 9984, 14, 1, _placements(*((s, 1) for s in range(7)))),
        MigProfile("2g.20gb", 20096, 28, 2, _placements((0, 2), (2, 2), (4, 2))),
        MigProfile("3g.40gb", 40192, 42, 3, _placements((0, 4), (4, 4))),
        MigProfile("7g.80gb", 80000, 100, 8, _placements((0, 8))),
    )
    return builders.device(builders.gpu_uuid(node, i), index=i, count=7, devmem=81920, mode="mig",
                           mig_profiles=profiles)


def node(scenario: str, name: str, devices: list[DeviceInfo], now: datetime, lock: str = "") -> Obj:
    """A Node as HAMi's device plugin and a kubelet leave it (status included)."""
    annotations = {
        keys.NODE_NVIDIA_REGISTER: builders.inventory(devices),
        keys.NODE_HANDSHAKE: format_requesting(now),
    }
    if lock:
        annotations[keys.NODE_LOCK] = lock
    slots = str(sum(d.count for d in devices))
    resources = {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": slots}
    labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", SCENARIO_LABEL: scenario}
    return builders.node(name, typed=True, labels=labels, annotations=annotations, spec={},
                         capacity=resources, allocatable=resources)


def container(name: str, gpus: int = 1, mem: int | None = None, cores: int | None = None,
              pct: int | None = None) -> Obj:
    return builders.gpu_container(name, gpus=gpus, mem=mem, cores=cores, pct=pct,
                                  image="registry.invalid/cuda:none", requests={"cpu": "100m"})


def cpu_container(name: str = "main") -> Obj:
    return builders.container(name, image="registry.invalid/app:none", requests={"cpu": "100m"})


def pod(scenario: str, name: str, *containers: Obj, init: tuple[Obj, ...] = (),
        annotations: Mapping[str, str] | None = None, node_name: str = "") -> Obj:
    """A pod of `scenario`: its namespace, on its nodes, for our scheduler."""
    spec = {"schedulerName": HAMI_SCHEDULER, "nodeSelector": {SCENARIO_LABEL: scenario},
            "terminationGracePeriodSeconds": 0}
    return builders.pod(name, namespace=namespace(scenario), annotations=dict(annotations or {}), typed=True,
                        containers=containers, init_containers=list(init) or None,
                        node_name=node_name or None, spec=spec)


def running_gpu_pod(scenario: str, name: str, node_name: str, uuid: str, mem: int) -> Obj:
    """A pod some earlier scheduler placed and the device plugin confirmed."""
    return pod(scenario, name, container("main", mem=mem), node_name=node_name,
               annotations={keys.VGPU_NODE: node_name, keys.VGPU_ALLOCATED: f"{uuid},NVIDIA,{mem},0:;",
                            keys.BIND_PHASE: keys.BIND_PHASE_SUCCESS})


def quota(scenario: str, name: str, hard: Mapping[str, str]) -> Obj:
    return builders.quota(hard, name=name, namespace=namespace(scenario))


def namespace(scenario: str) -> str:
    return f"parity-{scenario}"


@dataclass
class Scenario:
    nodes: list[Obj]
    pods: list[Obj]
    existing: list[Obj] = field(default_factory=list)
    """Pods already bound (spec.nodeName set)."""
    quotas: list[Obj] = field(default_factory=list)


# -- the scenarios -------------------------------------------------------------------------------


def fit_scenario(now: datetime) -> Scenario:
    """Request shapes: single, multi-container, init containers, memory/cores/percentage, two GPUs,
    use-gputype, and two pods that fit nowhere (type, memory)."""
    s = "fit"
    v100 = "NVIDIA-Tesla V100-PCIE-32GB"
    nodes = [
        node(s, "parity-fit-a", [gpu("parity-fit-a", 0), gpu("parity-fit-a", 1)], now),
        node(s, "parity-fit-b", [gpu("parity-fit-b", i, devmem=32768, type_=v100) for i in range(2)], now),
    ]
    existing = [running_gpu_pod(s, "earlier", "parity-fit-a", "GPU-parity-fit-a-0", 60000)]
    pods = [
        pod(s, "single", container("main", mem=4000)),
        pod(s, "multi", container("a", mem=2000), container("b", mem=3000, cores=30)),
        pod(s, "init", container("main", mem=4000), init=(container("setup", mem=8000),)),
        pod(s, "percent", container("main", pct=50)),
        pod(s, "two-gpus", container("main", gpus=2, mem=10000, cores=20)),
        pod(s, "v100", container("main", mem=1000), annotations={keys.USE_GPUTYPE: "V100"}),
        pod(s, "no-type", container("main", mem=1000), annotations={keys.USE_GPUTYPE: "H100"}),
        pod(s, "too-big", container("main", mem=90000)),
        pod(s, "cores-full", container("main", gpus=2, cores=90)),
        pod(s, "cpu-only", cpu_container()),
    ]
    return Scenario(nodes, pods, existing)


def locks_scenario(now: datetime) -> Scenario:
    """A lock that cannot be parsed (on the only node one pod may use), an expired one (holder gone)
    and a live one held by a running pod on the node binpack likes best."""
    s = "locks"
    expired = format_lock(now - timedelta(minutes=6), namespace(s), "gone")
    live = format_lock(now, namespace(s), "holder")
    nodes = [
        node(s, "parity-locks-a", [gpu("parity-locks-a", 0)], now, lock="lock"),
        node(s, "parity-locks-b", [gpu("parity-locks-b", 0)], now, lock=expired),
        node(s, "parity-locks-c", [gpu("parity-locks-c", 0)], now, lock=live),
    ]
    existing = [
        running_gpu_pod(s, "holder", "parity-locks-c", "GPU-parity-locks-c-0", 40000),
        running_gpu_pod(s, "runner", "parity-locks-b", "GPU-parity-locks-b-0", 20000),
    ]
    only_a = {keys.USE_GPUUUID: "GPU-parity-locks-a-0"}
    pods = [
        pod(s, "best-is-locked", container("main", mem=8000)),
        pod(s, "malformed", container("main", mem=8000), annotations=only_a),
        pod(s, "after", container("main", mem=8000)),
    ]
    return Scenario(nodes, pods, existing)


def contention_scenario(now: datetime) -> Scenario:
    """The only fitting node is locked by a live pod: binds fail with contention until the lock
    expires, then the retry takes it over."""
    s = "contention"
    taken = now - LOCK_TIMEOUT + CONTENTION_LEFT
    nodes = [node(s, "parity-contention-a", [gpu("parity-contention-a", 0)], now,
                  lock=format_lock(taken, namespace(s), "holder"))]
    existing = [pod(s, "holder", cpu_container(), node_name="parity-contention-a")]
    return Scenario(nodes, [pod(s, "waiter", container("main", mem=4000))], existing)


def mig_scenario(now: datetime) -> Scenario:
    """A node with one MIG-mode and one hami-core GPU; MIG pods (vgpu-mode), a multi-container MIG
    pod, one too big for any profile left, and a pod without a mode."""
    s = "mig"
    name = "parity-mig-a"
    nodes = [node(s, name, [mig_gpu(name, 0), gpu(name, 1)], now)]
    mig = {keys.VGPU_MODE: "mig"}
    pods = [
        pod(s, "mig-2g", container("main", mem=15000), annotations=mig),
        pod(s, "mig-1g", container("main", mem=5000), annotations=mig),
        pod(s, "mig-multi", container("a", mem=5000), container("b", mem=9000), annotations=mig),
        pod(s, "mig-3g", container("main", mem=30000), annotations=mig),
        pod(s, "mig-none-left", container("main", mem=30000), annotations=mig),
        pod(s, "any-mode", container("main", mem=4000)),
    ]
    return Scenario(nodes, pods)


def quota_scenario(now: datetime) -> Scenario:
    """A namespace quota on GPU memory and cores: the second pod is over it, the third fits again."""
    s = "quota"
    name = "parity-quota-a"
    nodes = [node(s, name, [gpu(name, 0), gpu(name, 1)], now)]
    quotas = [quota(s, "gpu", {"limits.nvidia.com/gpumem": "10000", "limits.nvidia.com/gpucores": "80"})]
    pods = [
        pod(s, "q1", container("main", mem=6000, cores=30)),
        pod(s, "q2-over-memory", container("main", mem=6000, cores=10)),
        pod(s, "q3", container("main", mem=3000, cores=30)),
        pod(s, "q4-over-cores", container("main", mem=500, cores=30)),
        pod(s, "q5-multi", container("a", mem=500, cores=10), container("b", mem=400, cores=10)),
    ]
    return Scenario(nodes, pods, quotas=quotas)


SCENARIOS: dict[str, Callable[[datetime], Scenario]] = {
    "fit": fit_scenario,
    "locks": locks_scenario,
    "contention": contention_scenario,
    "mig": mig_scenario,
    "quota": quota_scenario,
}


# -- outcomes ------------------------------------------------------------------------------------


@dataclass
class Outcome:
    node: str | None
    annotations: dict[str, str]
    reasons: dict[str, str] = field(default_factory=dict)
    """Simulator: reason per node. Live: kube-scheduler's note (see `reason_types`)."""
    reason_types: dict[str, set[str]] = field(default_factory=dict)
    """Reason types per node (live: from our FilteringFailed events)."""


def allocation_annotations(obj: Mapping[str, Any]) -> dict[str, str]:
    ann = (obj.get("metadata") or {}).get("annotations") or {}
    return {k: str(v) for k, v in ann.items() if k.startswith("hami.io/") and k not in NORMALIZED}


def lock_holder(n: Mapping[str, Any]) -> str:
    """The node lock without its timestamp: `ns/pod`, the raw value if it names no pod, or ""."""
    value = str(((n.get("metadata") or {}).get("annotations") or {}).get(keys.NODE_LOCK, ""))
    parts = value.split(",")
    return "/".join(parts[1:]) if len(parts) == 3 else value


async def run_simulator(sc: Scenario, epoch: int) -> tuple[dict[str, Outcome], dict[str, str]]:
    """Per pod the outcome, and per node its lock holder at the end."""
    sim = Simulation(
        sc.nodes, sc.pods, existing=[*sc.existing, *sc.quotas], options=SimulationOptions(epoch=epoch)
    )
    try:
        result = await sim.run()
        locks = {str(n["metadata"]["name"]): lock_holder(n) for n in sim.cluster.objects("nodes")}
    finally:
        await sim.close()
    out: dict[str, Outcome] = {}
    for entry in result.report["pods"]:
        reasons = dict(entry["reasons"])
        types = {n: set(parse_reason(r)) for n, r in reasons.items()}
        out[entry["name"]] = Outcome(entry["node"], allocation_annotations(
            {"metadata": {"annotations": entry["annotations"]}}), reasons, types)
    return out, locks


_FILTERING_FAILED = re.compile(r"^(\d+) nodes (\w+)\(([^)]*)\)$")


async def _events(client: KubeClient, ns: str, name: str) -> list[Obj]:
    events, _ = await client.list_all(api.EVENTS_V1, ns, field_selector=f"regarding.name={name}")
    return events


def _unschedulable_note(events: list[Obj]) -> str:
    notes = [str(e.get("note") or "") for e in events if e.get("reason") == "FailedScheduling"]
    return next((n for n in reversed(notes) if "nodes are available" in n), "")


def _reason_types(events: list[Obj]) -> dict[str, set[str]]:
    """Per node, the reason types our server's FilteringFailed events name it under."""
    out: dict[str, set[str]] = {}
    for e in events:
        m = _FILTERING_FAILED.match(str(e.get("note") or ""))
        if m and e.get("reason") == "FilteringFailed":
            for n in m.group(3).split(","):
                out.setdefault(n, set()).add(m.group(2))
    return out


async def _settle_pod(client: KubeClient, ns: str, name: str) -> None:
    """Until the pod is bound and confirmed, or kube-scheduler found no node for it."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + POD_TIMEOUT
    while loop.time() < deadline:
        p = await client.get_pod(ns, name)
        ann = p["metadata"].get("annotations") or {}
        if p["spec"].get("nodeName") and ann.get(keys.BIND_PHASE, keys.BIND_PHASE_SUCCESS) != (
            keys.BIND_PHASE_ALLOCATING
        ):
            return
        events = [] if p["spec"].get("nodeName") else await _events(client, ns, name)
        # Our server's FilteringFailed events are sent asynchronously: wait for the summary one.
        if _unschedulable_note(events) and any(
            str(e.get("note") or "").startswith("no available node") for e in events
        ):
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"{ns}/{name}: neither bound nor unschedulable after {POD_TIMEOUT:.0f}s")


def _metrics(cp: ControlPlane) -> str:
    with urllib.request.urlopen(f"{cp.metrics_url}/metrics", timeout=10) as resp:
        return str(resp.read().decode())


async def _wait_server_sees(cp: ControlPlane, ns: str, sc: Scenario) -> None:
    """Until our server's metrics show the scenario's quotas and the existing pods' allocations
    (its informers have them), so the first filter already counts them."""
    wanted = [("hami_resource_quota_limit{", f'namespace="{ns}"')] if sc.quotas else []
    wanted += [("hami_vgpu_memory_allocated_bytes{", f'pod="{p["metadata"]["name"]}"')
               for p in sc.existing if keys.VGPU_ALLOCATED in p["metadata"]["annotations"]]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60
    while True:
        lines = (await asyncio.to_thread(_metrics, cp)).splitlines()
        missing = [w for w in wanted if not any(x.startswith(w[0]) and w[1] in x for x in lines)]
        if not missing:
            return
        if loop.time() > deadline:
            raise AssertionError(f"our server never showed {missing} in its metrics")
        await asyncio.sleep(0.2)


async def run_live(
    cp: ControlPlane, client: KubeClient, sc: Scenario
) -> tuple[dict[str, Outcome], dict[str, str]]:
    ns = namespace(str(sc.nodes[0]["metadata"]["labels"][SCENARIO_LABEL]))
    cp.ensure_namespace(ns, webhook=False)
    for q in sc.quotas:
        await client.create(api.RESOURCEQUOTAS, q)
    before = await asyncio.to_thread(cp.registered_devices)
    for n in sc.nodes:
        spec = {k: v for k, v in n.items() if k != "status"}
        await create_node(client, spec, {"status": n["status"]})
    gpus = sum(len(_register(n)) for n in sc.nodes)
    await asyncio.to_thread(cp.wait_devices_registered, before + gpus, 120.0)
    for p in sc.existing:
        await client.create(api.PODS, p)
    await _wait_server_sees(cp, ns, sc)
    out: dict[str, Outcome] = {}
    async with DevicePluginStandIn(client, namespace=ns) as plugin:
        for p in sc.pods:
            name = p["metadata"]["name"]
            await client.create(api.PODS, p)
            await _settle_pod(client, ns, name)
            got = await client.get_pod(ns, name)
            events = await _events(client, ns, name)
            bound = got["spec"].get("nodeName") or None
            note = "" if bound else _unschedulable_note(events)
            out[name] = Outcome(bound, allocation_annotations(got), {"note": note},
                                {} if bound else _reason_types(events))
        assert not plugin.errors, plugin.errors
    # The final state: a pending pod retried after later binds must still be pending.
    for name, o in out.items():
        final = await client.get_pod(ns, name)
        o.node = final["spec"].get("nodeName") or None
        o.annotations = allocation_annotations(final)
    locks = {}
    for n in sc.nodes:
        name = str(n["metadata"]["name"])
        locks[name] = lock_holder(await client.get_node(name))
    return out, locks


def _register(n: Obj) -> list[Any]:
    return list(json.loads(n["metadata"]["annotations"][keys.NODE_NVIDIA_REGISTER]))


def histogram_entries(reasons: Mapping[str, str]) -> list[str]:
    """The `<count> <reason>` entries kube-scheduler's note shows for these FailedNodes."""
    return sorted(f"{c} {r}" for r, c in Counter(reasons.values()).items())


def disagreements(sim: dict[str, Outcome], live: dict[str, Outcome]) -> list[str]:
    out: list[str] = []
    for name, s in sim.items():
        lv = live[name]
        if s.node != lv.node:
            out.append(f"{name}: node simulator={s.node} live={lv.node}")
        if s.annotations != lv.annotations:
            out.append(f"{name}: annotations simulator={s.annotations} live={lv.annotations}")
        if s.node is None and lv.node is None:
            note = lv.reasons["note"]
            for entry in histogram_entries(s.reasons):
                if entry not in note:
                    out.append(f"{name}: simulator reason {entry!r} not in kube-scheduler's {note!r}")
            if s.reason_types != lv.reason_types:
                out.append(f"{name}: reason types simulator={s.reason_types} live={lv.reason_types}"
                           f" (simulator reasons {s.reasons}, kube-scheduler: {note!r})")
    return out


@pytest.mark.parametrize("scenario", list(SCENARIOS))
async def test_simulator_and_live_path_agree(
    scenario: str, control_plane: ControlPlane, client: KubeClient
) -> None:
    epoch = int(time.time())
    sc = SCENARIOS[scenario](datetime.fromtimestamp(epoch, tz=UTC))
    sim, sim_locks = await run_simulator(sc, epoch)
    live, live_locks = await run_live(control_plane, client, sc)
    assert not disagreements(sim, live), "\n".join(disagreements(sim, live))
    assert sim_locks == live_locks
    assert any(o.node for o in sim.values())  # not vacuous: every scenario places pods
