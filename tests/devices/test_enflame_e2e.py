"""Enflame inside the scheduler: registration loop, decisions on the live ledger, usage of later
pods, the webhook, metrics, the simulated device plugin and `vgpu-scheduler simulate`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.builders import container, pod
from tests.devices.enflame_helpers import (
    CORE_NAME,
    DRS,
    DRS_NAME,
    GCU_NAME,
    MEM_NAME,
    VENDORS,
    drs_capacity,
    drs_ctr,
    drs_node,
    gcu_node,
)
from tests.devices.vendorkit import NOW, metrics_text, registration, review, simulate_report
from vgpu_scheduler.cluster.client import KubeClient
from vgpu_scheduler.engine.decide import Chosen, NoFit, decide
from vgpu_scheduler.engine.state import SchedulerState
from vgpu_scheduler.scheduler.extender import _locking_request
from vgpu_scheduler.standin.embedded.deviceplugin import SimDevicePlugin
from vgpu_scheduler.standin.memory import MemoryCluster
from vgpu_scheduler.standin.transport import MemoryTransport
from vgpu_scheduler.wire import keys

ALLOCATED = "hami.io/enflame-vgpu-devices-allocated"


def enflame_pod(name: str, *ctrs: dict[str, Any], **kw: Any) -> dict[str, Any]:
    return pod(name, uid=f"uid-{name}", containers=list(ctrs), status={"phase": "Pending"}, **kw)


def run(state: SchedulerState, p: dict[str, Any], nodes: list[str], now: int = 1700000000) -> Any:
    return decide(p, nodes, state, default_node_policy="binpack", default_gpu_policy="spread", now=now)


# --------------------------------------------------------------------------------------------
# Registration


async def test_registration_reads_both_vendors_and_writes_nothing_to_the_nodes() -> None:
    both = drs_node("both", drs_capacity(6, 6), capacity={GCU_NAME: "2"})
    async with registration(VENDORS, NOW) as reg:
        reg.add(
            both,
            drs_node(
                "drs-broken", '{"devices":[{"capacity":0}],"profiles":{"1g.6gb":"0"}}'
            ),  # one node's bad
            drs_node("drs-ok", drs_capacity(4)),  # annotation never affects another
            gcu_node("gcu-only", "1"))
        report = await reg.run()
        view = reg.state.ledger.view("both")
        assert view is not None
        assert [d.id for d in view.devices] == [
            "both-GCU-0",
            "both-GCU-1",
            "both-enflame-drs-0",
            "both-enflame-drs-1",
        ]
        assert reg.state.ledger.view("drs-ok") is not None and reg.state.ledger.view("gcu-only") is not None
        assert reg.state.ledger.view("drs-broken") is None
        assert report.errors["drs-broken"] == "invalid drs capacity on node drs-broken"
        annotations = reg.node_annotations("drs-ok")
        # No Enflame handshake: only the vendors that have one are stamped.
        assert not any("enflame" in k and "handshake" in k for k in annotations)
        assert keys.NODE_HANDSHAKE in annotations


async def test_gcu_devices_go_when_the_capacity_does() -> None:
    async with registration(VENDORS, NOW) as reg:
        reg.add(drs_node("mixed", drs_capacity(6), capacity={GCU_NAME: "1"}))
        await reg.loop.run_pass()
        reg.cluster.patch("nodes", "mixed", {"status": {"capacity": {GCU_NAME: "0"}}}, subresource="status")
        reg.refresh("mixed")
        report = await reg.run()
        assert report.cleaned == ["mixed"]
        view = reg.state.ledger.view("mixed")
        assert view is not None and [d.id for d in view.devices] == ["mixed-enflame-drs-0"]


# --------------------------------------------------------------------------------------------
# Decisions on the live ledger


def drs_state(*capacities: int) -> SchedulerState:
    state = SchedulerState(VENDORS)
    state.set_node_devices("drs-1", DRS.node_devices(drs_node("drs-1", drs_capacity(*capacities))))
    return state


def test_decision_writes_the_device_plugin_annotations() -> None:
    state = drs_state(6)
    p = enflame_pod("p", container("init"), drs_ctr("pod-gcu-example1", drs="3"))
    d = run(state, p, ["drs-1"])
    assert isinstance(d, Chosen)
    assert d.annotations == {
        keys.VGPU_NODE: "drs-1",
        keys.VGPU_TIME: "1700000000",
        ALLOCATED: ";drs-1-enflame-drs-0,Enflame,20480,50:;",
        "enflame.com/gcu-assigned": "false",
        "enflame.com/gcu-assigned-time": "1700000000000000000",
        "enflame.com/gcu-assigned-index": "0",
        "enflame.com/gcu-assigned-id": "0",
        "enflame.com/gcu-assigned-minor": "0",
        "enflame.com/gcu-request-size": "3",
        "assigned-containers": (
            '{"pod-gcu-example1":{"allocated":false,"request":3,"profileID":"1","profileName":"3g.20gb"}}'
        ),
    }
    assert not _locking_request(p, VENDORS)  # DRS never locks


def test_slices_count_within_a_pod_and_one_slot_per_earlier_pod() -> None:
    """Inside one pod, AddResourceUsage adds the profile's slices; a pod already placed counts one
    slot per device (HAMi's getNodesUsage ignores the slices, which are not encoded)."""
    state = drs_state(3, 3)
    two = enflame_pod("two", drs_ctr("a", drs="3"), drs_ctr("b", drs="1"))
    d = run(state, two, ["drs-1"])
    assert isinstance(d, Chosen)
    # a took drs-1 (3 of 3 slices), so b cannot share it and goes to drs-0.
    assert (
        d.annotations[ALLOCATED]
        == "drs-1-enflame-drs-1,Enflame,20480,50:;drs-1-enflame-drs-0,Enflame,6144,17:;"
    )
    assert d.annotations["enflame.com/gcu-assigned-index"] == "1"
    state.reserve(two, d)
    usage = {
        dev.id: u
        for dev, u in zip(state.ledger.view("drs-1").devices, state.ledger.view("drs-1").usage, strict=True)
    }
    assert (usage["drs-1-enflame-drs-1"].used, usage["drs-1-enflame-drs-1"].usedmem) == (1, 20480)
    # A binpacking pod finds room on drs-1 by slots (1 < 3) and memory (20480 + 20480 <= 40960).
    third = enflame_pod(
        "third", drs_ctr("c", mem="20", core="50"), annotations={keys.GPU_SCHEDULER_POLICY: "binpack"}
    )
    d3 = run(state, third, ["drs-1"], now=1700000001)
    assert isinstance(d3, Chosen) and d3.annotations[ALLOCATED] == "drs-1-enflame-drs-1,Enflame,20480,50:;"
    state.reserve(third, d3)
    big = enflame_pod("big", drs_ctr("d", drs="6"))
    assert run(state, big, ["drs-1"], now=1700000002) == NoFit({"drs-1": "2/2 CardInsufficientMemory"})


def test_unknown_profile_fails_the_node_once() -> None:
    state = drs_state(6, 6)
    assert run(state, enflame_pod("p", drs_ctr(drs="4")), ["drs-1"]) == NoFit({"drs-1": "1/2 ModeNotFit"})


def test_quota_counts_drs_memory_and_cores() -> None:
    state = drs_state(6)
    p = enflame_pod("p", drs_ctr(mem="20480", core="40"))
    d = run(state, p, ["drs-1"])
    assert isinstance(d, Chosen)
    state.reserve(p, d)
    assert (state.quota.used("default", MEM_NAME), state.quota.used("default", CORE_NAME)) == (20480, 50)


def test_a_pod_asking_gcu_and_drs_gets_one_allocation_per_vendor() -> None:
    state = SchedulerState(VENDORS)
    node = drs_node("mixed", drs_capacity(6), capacity={GCU_NAME: "2"})
    state.set_node_devices("mixed", [*VENDORS["GCU"].node_devices(node), *DRS.node_devices(node)])
    p = enflame_pod("m", drs_ctr("whole", gcu="1"), drs_ctr("part", drs="1"))
    d = run(state, p, ["mixed"])
    assert isinstance(d, Chosen)
    assert d.annotations["hami.io/enflame-gcu-devices-to-allocate"] == "mixed-GCU-1,GCU,100,100:;;"
    assert d.annotations["hami.io/enflame-gcu-devices-allocated"] == "mixed-GCU-1,GCU,100,100:;;"
    assert d.annotations[ALLOCATED] == ";mixed-enflame-drs-0,Enflame,6144,17:;"
    assert json.loads(d.annotations["assigned-containers"]) == {
        "part": {"allocated": False, "request": 1, "profileID": "0", "profileName": "1g.6gb"}
    }


def test_metrics_list_enflame_devices() -> None:
    state = drs_state(6)
    p = enflame_pod("p", drs_ctr(drs="3"))
    d = run(state, p, ["drs-1"])
    assert isinstance(d, Chosen)
    state.reserve(p, d)
    text = metrics_text(state)
    assert (
        'hami_gpu_memory_allocated_bytes{device_cores="100",device_index="0",device_type="Enflame",'
        'device_uuid="drs-1-enflame-drs-0",node="drs-1",zone="vGPU"} 2.147483648e+10'
    ) in text


# --------------------------------------------------------------------------------------------
# Webhook


def test_webhook_takes_enflame_pods_and_rejects_bad_requests() -> None:
    ok = review(pod(containers=[drs_ctr(mem="20480", core="50")]), VENDORS)
    assert ok.allowed
    assert ok.patch == [  # the limits mirrored into requests, then our scheduler
        {
            "op": "add",
            "path": "/spec/containers/0/resources/requests",
            "value": {MEM_NAME: "20480", CORE_NAME: "50"},
        },
        {"op": "add", "path": "/spec/schedulerName", "value": "hami-scheduler"},
    ]
    whole = review(pod(containers=[drs_ctr(gcu="1")]), VENDORS)
    assert whole.allowed
    assert whole.patch == [{"op": "add", "path": "/spec/schedulerName", "value": "hami-scheduler"}]
    bad = review(pod(containers=[drs_ctr(core="150")]), VENDORS)
    assert (bad.allowed, bad.code, bad.message) == (
        False,
        500,
        "enflame.com/gcu-core must be in range (0,100]",
    )
    zero = review(pod(containers=[drs_ctr(drs="0")]), VENDORS)
    assert (zero.allowed, zero.message) == (False, f"{DRS_NAME} must be greater than 0")


# --------------------------------------------------------------------------------------------
# Simulated device plugin and `vgpu-scheduler simulate`


async def test_simulated_device_plugin_consumes_gcu_and_leaves_drs_to_enflames_plugin() -> None:
    """GCU's to-allocate entries are consumed per container like every vendor's; DRS has no
    to-allocate key (Enflame's own plugin reads assigned-containers), so nothing of it is consumed."""
    cluster = MemoryCluster(seed=1)
    cluster.create("nodes", {"metadata": {"name": "n1"}})
    annotations = {
        "hami.io/enflame-gcu-devices-to-allocate": "n1-GCU-1,GCU,100,100:;;",
        "hami.io/enflame-gcu-devices-allocated": "n1-GCU-1,GCU,100,100:;;",
        ALLOCATED: ";n1-enflame-drs-0,Enflame,6144,17:;",
        "enflame.com/gcu-assigned": "false",
        keys.BIND_PHASE: "allocating",
    }
    cluster.create(
        "pods",
        pod("p", annotations=annotations, containers=[drs_ctr("whole", gcu="1"), drs_ctr("part", drs="1")]),
    )
    cluster.bind("default", "p", "n1")
    plugin = SimDevicePlugin(KubeClient(MemoryTransport(cluster)), VENDORS)
    assert (await plugin.admit(cluster.get("pods", "p", "default"))).phase == "Running"
    after = cluster.get("pods", "p", "default")["metadata"]["annotations"]
    assert after["hami.io/enflame-gcu-devices-to-allocate"] == ";;" and after[keys.BIND_PHASE] == "success"
    assert after[ALLOCATED] == ";n1-enflame-drs-0,Enflame,6144,17:;"
    assert after["enflame.com/gcu-assigned"] == "false"

    drs_only = {ALLOCATED: "n1-enflame-drs-0,Enflame,6144,17:;", keys.BIND_PHASE: "allocating"}
    cluster.create("pods", pod("q", annotations=drs_only, containers=[drs_ctr("part", drs="1")]))
    cluster.bind("default", "q", "n1")
    assert (await plugin.admit(cluster.get("pods", "q", "default"))).phase == "Running"
    assert cluster.get("pods", "q", "default")["metadata"]["annotations"] == drs_only


CHART_SECTION = """\
nvidia:
  resourceCountName: nvidia.com/gpu
enflame:
  resourceNameGCU: "enflame.com/gcu"
  resourceNameDRSGCU: enflame.com/drs-gcu
  resourceNameGCUMemory: enflame.com/gcu-memory
  resourceNameGCUCore: enflame.com/gcu-core
"""

PODS = """\
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default}}
spec:
  containers:
  - name: {ctr}
    image: x
    resources: {{limits: {{{limits}}}}}
"""


def sim_node(name: str, capacity: dict[str, str], annotations: dict[str, str]) -> dict[str, Any]:
    resources = {"cpu": "8", "memory": "32Gi", "pods": "110", **capacity}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "annotations": annotations},
        "status": {"capacity": resources, "allocatable": resources},
    }


def test_simulate_places_gcu_and_drs_pods(tmp_path: Path) -> None:
    nodes = [
        sim_node("gcu-1", {GCU_NAME: "2"}, {}),
        sim_node("drs-1", {DRS_NAME: "6"}, {"enflame.com/gcu-drs-capacity": drs_capacity(6)}),
    ]
    pods = [
        PODS.format(name=n, ctr=c, limits=lim)
        for n, c, lim in [
            ("whole", "c", f"{GCU_NAME}: 2"),
            ("drs-a", "pod-gcu-example1", f"{DRS_NAME}: 3"),
            ("drs-b", "worker", f"{MEM_NAME}: 20480, {CORE_NAME}: 40"),
            ("drs-c", "late", f"{DRS_NAME}: 1"),
            ("whole-2", "c", f"{GCU_NAME}: 1"),
        ]
    ]
    report = simulate_report(tmp_path, nodes=nodes, pods=pods, config=CHART_SECTION)
    assert report["whole"]["node"] == "gcu-1"
    assert report["whole"]["annotations"]["hami.io/enflame-gcu-devices-allocated"] == (
        "gcu-1-GCU-1,GCU,100,100:gcu-1-GCU-0,GCU,100,100:;"
    )
    assert report["whole"]["annotations"]["hami.io/enflame-gcu-devices-to-allocate"] == ";"  # consumed
    a = report["drs-a"]["annotations"]
    assert report["drs-a"]["node"] == "drs-1"
    assert a[ALLOCATED] == "drs-1-enflame-drs-0,Enflame,20480,50:;"
    assert a["assigned-containers"] == (
        '{"pod-gcu-example1":{"allocated":false,"request":3,"profileID":"1","profileName":"3g.20gb"}}'
    )
    assert a["enflame.com/gcu-assigned-time"] == a[keys.VGPU_TIME] + "000000000"  # simulated clock
    assert (a["enflame.com/gcu-request-size"], a["enflame.com/gcu-assigned-minor"]) == ("3", "0")
    assert report["drs-b"]["node"] == "drs-1"
    assert (
        json.loads(report["drs-b"]["annotations"]["assigned-containers"])["worker"]["profileName"]
        == "3g.20gb"
    )
    assert report["drs-c"]["node"] is None
    assert report["drs-c"]["reasons"] == {
        "drs-1": "1/1 CardInsufficientMemory",
        "gcu-1": "NodeInsufficientDevice",
    }
    assert report["whole-2"]["reasons"] == {
        "drs-1": "NodeInsufficientDevice",
        "gcu-1": "2/2 ExclusiveDeviceAllocateConflict",
    }


def test_metrics_list_gcu_devices() -> None:
    state = SchedulerState(VENDORS)
    state.set_node_devices("gcu-1", VENDORS["GCU"].node_devices(gcu_node("gcu-1", "2")))
    p = enflame_pod("p", drs_ctr(gcu="1"))
    d = run(state, p, ["gcu-1"])
    assert isinstance(d, Chosen)
    state.reserve(p, d)
    text = metrics_text(state)
    assert (
        'hami_gpu_memory_allocated_bytes{device_cores="100",device_index="1",device_type="GCU",'
        'device_uuid="gcu-1-GCU-1",node="gcu-1",zone="vGPU"} 1.048576e+08'
    ) in text
