"""Ascend vNPU inside the scheduler: the registration loop, decisions and their annotations, the
node score, the webhook, the node lock, metrics, the simulated device plugin and `simulate` end
to end with the chart's `vnpus` section (the vendor's own vectors are in test_ascend.py)."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.builders import container, node, pod
from tests.devices.vendorkit import (
    NOW,
    admit_bound_pod,
    metrics_text,
    patch_ops,
    registration,
    review,
    simulate_report,
)
from vgpu_scheduler.configfile import default_device_config, parse_device_config
from vgpu_scheduler.devices.protocol import VendorFlags
from vgpu_scheduler.devices.registry import build
from vgpu_scheduler.engine.decide import Chosen, NoFit, decide, decide_on_nodes
from vgpu_scheduler.engine.state import SchedulerState
from vgpu_scheduler.scheduler.extender import _locking_request
from vgpu_scheduler.scheduler.options import SchedulerOptions
from vgpu_scheduler.server.webhook import review_pod
from vgpu_scheduler.wire import keys

CHART = default_device_config()
VENDORS = build(CHART, VendorFlags(enable_ascend=True))
B3 = "Ascend910B3"
REGISTER_B3 = "hami.io/node-register-Ascend910B3"
HAMI_CORE = {"huawei.com/vnpu-mode": "hami-core"}


def npu_devices(n: int = 4, *, cw: str = B3, devmem: int = 65536, networks: list[int] | None = None) -> str:
    """A device plugin's register annotation: n NPUs, NetworkID when `networks` is given."""
    out = []
    for i in range(n):
        dev: dict[str, Any] = {
            "id": f"{cw}-{i}",
            "index": i,
            "count": 4,
            "devmem": devmem,
            "devcore": 20,
            "type": cw,
            "health": True,
        }
        if networks is not None:
            dev["custominfo"] = {"NetworkID": networks[i]}
        out.append(dev)
    return json.dumps(out)


def npu_node(name: str, register: str, *, cw: str = B3, **annos: str) -> dict[str, Any]:
    annotations = {f"hami.io/node-register-{cw}": register, **annos}
    counts = {f"huawei.com/{cw}": "4"}
    return node(name, annotations=annotations, capacity=counts, allocatable=counts)


def npu_pod(
    name: str, *, cw: str = B3, annotations: dict[str, str] | None = None, **kw: str
) -> dict[str, Any]:
    suffix = {"count": "", "mem": "-memory", "core": "-core"}
    limits = {f"huawei.com/{cw}{suffix[k]}": v for k, v in kw.items()}
    return pod(
        name,
        uid=f"uid-{name}",
        annotations=annotations,
        containers=[container(limits=limits)],
        status={"phase": "Pending"},
    )


def state_with(*nodes: dict[str, Any]) -> SchedulerState:
    state = SchedulerState(VENDORS)
    for obj in nodes:
        devices = [d for v in VENDORS for d in _try(v, obj)]
        state.set_node_devices(obj["metadata"]["name"], devices, annotations=obj["metadata"]["annotations"])
    return state


def _try(vendor: Any, obj: dict[str, Any]) -> list[Any]:
    try:
        return list(vendor.node_devices(obj))
    except ValueError:
        return []


def run(
    p: dict[str, Any],
    state: SchedulerState,
    nodes: list[str],
    *,
    now: int = 1700000000,
    policy: str = "binpack",
    evaluate_all: bool = False,
) -> Any:
    return decide(p, nodes, state, default_node_policy=policy, default_gpu_policy="spread", now=now,
                  evaluate_all=evaluate_all)


# --------------------------------------------------------------------------------------------
# Registration


async def test_registration_reads_npu_nodes_and_stamps_each_chip_handshake() -> None:
    async with registration(VENDORS, NOW) as reg:
        reg.add(
            npu_node("npu-1", npu_devices(2)),
            npu_node("npu-broken", "[{"),  # one node's bad annotation ...
            npu_node("npu-310", npu_devices(1, cw="Ascend310P"), cw="Ascend310P"))
        report = await reg.run()
        view = reg.state.ledger.view("npu-1")
        assert view is not None and [d.id for d in view.devices] == ["Ascend910B3-0", "Ascend910B3-1"]
        assert {d.device_vendor for d in view.devices} == {B3}
        p310 = reg.state.ledger.view("npu-310")  # ... never affects another
        assert p310 is not None and [d.device_vendor for d in p310.devices] == ["Ascend310P"]
        assert reg.state.ledger.view("npu-broken") is None
        assert report.errors["npu-broken"].startswith("invalid node annotation JSON")
        annotations = reg.node_annotations("npu-1")
        # Every registered chip's handshake is stamped on every node, as HAMi does.
        for cw in ("Ascend910A", B3, "Ascend310P", "Ascend910C"):
            assert annotations[f"hami.io/node-handshake-{cw}"] == "Requesting_2026-11-29 21:03:30"


async def test_node_hami_core_annotation_is_read_again_with_the_inventory() -> None:
    """A new `hami-vnpu-core` value counts from the next registration pass (HAMi: from the next
    inventory update, i.e. the next answered handshake)."""
    p = npu_pod("p", annotations=HAMI_CORE, count="1")
    async with registration(VENDORS, NOW) as reg:
        reg.add(npu_node("n", npu_devices(1)))
        await reg.run()
        assert run(p, reg.state, ["n"]) == NoFit({"n": "1/1 ModeNotFit"})
        reg.cluster.patch("nodes", "n", {"metadata": {"annotations": {"hami-vnpu-core": "true"}}})
        reg.refresh("n")
        report = await reg.run()
        assert report.errors == {}
        assert isinstance(run(p, reg.state, ["n"]), Chosen)


async def test_unhealthy_chip_is_cleaned_up() -> None:
    """No allocatable NPUs and a stale handshake: the chip's devices and handshake go."""
    async with registration(VENDORS, NOW) as reg:
        reg.add(npu_node("n", npu_devices(1)))
        await reg.run()
        assert reg.state.ledger.view("n") is not None
        reg.cluster.patch(
            "nodes", "n", {"status": {"allocatable": {"huawei.com/Ascend910B3": "0"}}}, subresource="status"
        )
        reg.refresh("n")
        reg.clock[0] = NOW + timedelta(seconds=61)
        report = await reg.run()
        assert report.cleaned == ["n"] and reg.state.ledger.view("n") is None
        assert (
            "hami.io/node-handshake-Ascend910B3" not in reg.node_annotations("n")
        )


# --------------------------------------------------------------------------------------------
# Decisions and their annotations


def test_decision_writes_the_ascend_annotations() -> None:
    state = state_with(npu_node("npu-1", npu_devices(2)))
    d = run(npu_pod("p", count="1", mem="16384"), state, ["npu-1"])
    assert isinstance(d, Chosen)
    assert d.annotations == {
        keys.VGPU_NODE: "npu-1",
        keys.VGPU_TIME: "1700000000",
        "hami.io/Ascend910B3-devices-to-allocate": "Ascend910B3-1,Ascend910B3,16384,0:;",
        "hami.io/Ascend910B3-devices-allocated": "Ascend910B3-1,Ascend910B3,16384,0:;",
        "predicate-time": "1700000000",
        "huawei.com/Ascend910B3": '[{"UUID":"Ascend910B3-1","temp":"vir05_1c_16g","memory":16384}]',
    }


def test_hami_core_pod_needs_a_hami_core_node() -> None:
    legacy = npu_node("legacy", npu_devices(2))
    soft = npu_node("soft", npu_devices(2), **{"hami-vnpu-core": "true"})
    state = state_with(legacy, soft)
    p = npu_pod("p", annotations=HAMI_CORE, count="1", mem="15360", core="30")
    d = run(p, state, ["legacy", "soft"])
    assert isinstance(d, Chosen) and d.node == "soft"
    assert d.failed == {"legacy": "1/2 ModeNotFit"}
    # hami-core: the memory and cores as asked, no template
    assert d.annotations["huawei.com/Ascend910B3"] == '[{"UUID":"Ascend910B3-1","memory":15360,"core":30}]'
    assert run(p, state, ["legacy"]) == NoFit({"legacy": "1/2 ModeNotFit"})


def test_hami_vnpu_core_cluster_default() -> None:
    config = parse_device_config(
        "vnpus:\n  hamiVnpuCore: true\n  configs:\n"
        "  - {commonWord: Ascend910B3, resourceName: huawei.com/Ascend910B3}\n"
    )
    vendors = build(config, VendorFlags(enable_ascend=True))
    p = npu_pod("p", annotations=HAMI_CORE, count="1")
    nodes = [npu_node("a", npu_devices(1)), npu_node("b", npu_devices(1), **{"hami-vnpu-core": "false"})]
    d = decide_on_nodes(p, nodes, vendors, default_node_policy="binpack", default_gpu_policy="spread", now=1)
    assert isinstance(d, Chosen) and d.node == "a" and d.failed == {"b": "1/1 ModeNotFit"}


def test_910c_takes_whole_modules() -> None:
    register = npu_devices(4, cw="Ascend910C")
    state = state_with(npu_node("c-1", register, cw="Ascend910C"))
    d = run(npu_pod("p", cw="Ascend910C", count="2"), state, ["c-1"])
    assert isinstance(d, Chosen)
    allocated = d.annotations["hami.io/Ascend910C-devices-allocated"]
    ids = [e.split(",")[0] for e in allocated.rstrip(";").split(":") if e]
    assert sorted(ids) in (["Ascend910C-0", "Ascend910C-1"], ["Ascend910C-2", "Ascend910C-3"])
    state.reserve(npu_pod("p", cw="Ascend910C", count="2"), d)
    # one whole module left: four NPUs fail, counted over the request
    half = run(npu_pod("q", cw="Ascend910C", count="4"), state, ["c-1"])
    assert half == NoFit({"c-1": "2/4 AllocatedCardsInsufficientRequest, 2/4 CardInsufficientMemory"})


def test_network_score_prefers_nodes_keeping_a_pod_on_one_network() -> None:
    """ScoreNode adds 10 × (devices on the largest network / devices) per container."""
    split = npu_node("split", npu_devices(2, networks=[0, 1]))
    joint = npu_node("joint", npu_devices(2, networks=[5, 5]))
    state = state_with(split, joint)
    d = run(npu_pod("p", count="2"), state, ["split", "joint"], evaluate_all=True)
    assert isinstance(d, Chosen) and d.node == "joint"
    assert d.scores["joint"] - d.scores["split"] == pytest.approx(5.0)
    # Visiting nodes best bound first gives the same answer without fitting "split".
    state = state_with(split, joint)
    early = run(npu_pod("p", count="2"), state, ["split", "joint"])
    assert isinstance(early, Chosen) and (early.node, early.score) == ("joint", d.score)


def test_a_910b4_pod_may_use_910b4_1_devices() -> None:
    """HAMi hands a vendor every device whose type contains its commonWord (getNodeResources)."""
    state = state_with(npu_node("n", npu_devices(1, cw="Ascend910B4-1"), cw="Ascend910B4-1"))
    d = run(npu_pod("p", cw="Ascend910B4", count="1", mem="8192"), state, ["n"])
    assert isinstance(d, Chosen)
    assert d.annotations["hami.io/Ascend910B4-devices-allocated"] == "Ascend910B4-1-0,Ascend910B4,8192,0:;"


def test_lock_only_for_regular_containers() -> None:
    limits = {"huawei.com/Ascend910B3": "1"}
    assert _locking_request(pod(containers=[container(limits=limits)]), VENDORS)
    assert not _locking_request(
        pod(init_containers=[container(limits=limits)], containers=[container()]), VENDORS
    )


# --------------------------------------------------------------------------------------------
# Webhook


def test_webhook_trims_memory_sets_the_runtime_class_and_our_scheduler() -> None:
    config = parse_device_config(
        "vnpus:\n  configs:\n  - commonWord: Ascend910B3\n    resourceName: huawei.com/Ascend910B3\n"
        "    resourceMemoryName: huawei.com/Ascend910B3-memory\n    memoryAllocatable: 65536\n"
        "    memoryCapacity: 65536\n    runtimeClassName: ascend\n"
        "    templates: [{name: vir05_1c_16g, memory: 16384}, {name: vir10_3c_32g, memory: 32768}]\n"
    )
    vendors = build(config, VendorFlags(enable_ascend=True))
    original = npu_pod("p", count="1", mem="10000")
    response = review(original, vendors)
    assert response.allowed
    ops = patch_ops(response)
    assert ops[("add", "/spec/schedulerName")] == "hami-scheduler"
    assert ops[("add", "/spec/runtimeClassName")] == "ascend"
    assert ops[("replace", "/spec/containers/0/resources/limits/huawei.com~1Ascend910B3-memory")] == "16384"
    assert ops[("add", "/spec/containers/0/resources/requests")] == {"huawei.com/Ascend910B3-memory": "16384"}


@pytest.mark.parametrize(
    ("p", "message"),
    [
        (npu_pod("p", count="2", mem="16384"), "vNPU not supported for multiple devices"),
        (npu_pod("p", cw="Ascend910C", count="3"), "Ascend910C device request must be 1 or 2*n, got 3"),
        (
            npu_pod("p", count="1", core="5"),
            "huawei.com/Ascend910B3-core is only supported in hami-core (soft split) mode",
        ),
    ],
    ids=["several vNPUs", "odd 910C", "hard split cores"],
)
def test_webhook_errors(p: dict[str, Any], message: str) -> None:
    response = review_pod(p, SchedulerOptions(), VENDORS)
    assert (response.allowed, response.code, response.message) == (False, 500, message)


# --------------------------------------------------------------------------------------------
# Metrics and the simulated device plugin


def test_metrics_list_npu_devices() -> None:
    state = state_with(npu_node("npu-1", npu_devices(2)))
    p = npu_pod("p", count="1", mem="16384")
    d = run(p, state, ["npu-1"])
    assert isinstance(d, Chosen)
    state.reserve(p, d)
    text = metrics_text(state)
    assert (
        'hami_gpu_memory_allocated_bytes{device_cores="20",device_index="1",device_type="Ascend910B3",'
        'device_uuid="Ascend910B3-1",node="npu-1",zone="vGPU"} 1.7179869184e+10'
    ) in text


async def test_simulated_device_plugin_consumes_npu_allocations() -> None:
    annotations = {
        "hami.io/Ascend910B3-devices-to-allocate": ";Ascend910B3-1,Ascend910B3,16384,0:;",
        "hami.io/Ascend910B3-devices-allocated": ";Ascend910B3-1,Ascend910B3,16384,0:;",
        keys.BIND_PHASE: "allocating",
    }
    ctrs = [container("a"), container("b", limits={"huawei.com/Ascend910B3": "1"})]
    admitted = await admit_bound_pod(VENDORS, pod("p", annotations=annotations, containers=ctrs))
    assert admitted.phase == "Running"
    after = admitted.annotations
    assert after["hami.io/Ascend910B3-devices-to-allocate"] == ";;" and after[keys.BIND_PHASE] == "success"
    assert keys.NODE_LOCK not in admitted.node_annotations


# --------------------------------------------------------------------------------------------
# simulate end to end, with the chart's section verbatim

PODS = """\
apiVersion: v1
kind: Pod
metadata: {name: small, namespace: default}
spec:
  containers:
  - name: c
    image: x
    resources: {limits: {huawei.com/Ascend910B3: 1, huawei.com/Ascend910B3-memory: 16384}}
---
apiVersion: v1
kind: Pod
metadata: {name: soft, namespace: default, annotations: {huawei.com/vnpu-mode: hami-core}}
spec:
  containers:
  - {name: c, image: x, resources: {limits: {huawei.com/Ascend910B3: 1, huawei.com/Ascend910B3-memory: 1000}}}
---
apiVersion: v1
kind: Pod
metadata: {name: pair, namespace: default}
spec:
  containers:
  - {name: c, image: x, resources: {limits: {huawei.com/Ascend910C: 2}}}
"""


def chart_vnpus_section() -> str:
    """The `vnpus` section exactly as the chart renders it with default values."""
    text = (Path(__file__).parents[2] / "src/vgpu_scheduler/data/device-config.yaml").read_text()
    return text[text.index("\nvnpus:") + 1 :]


@pytest.mark.parametrize(
    ("enable", "scheduled"),
    # Without the flag nothing is a device request: kube-scheduler alone places what the nodes'
    # extended resources allow (the -memory resources exist on no node).
    [(True, ["small", "pair"]), (False, ["pair"])],
    ids=["--enable-ascend", "without the flag"],
)
def test_simulate_end_to_end(tmp_path: Path, enable: bool, scheduled: list[str]) -> None:
    counts = {"cpu": "32", "memory": "128Gi", "pods": "110"}
    nodes = [
        npu_node("b3", npu_devices(2)),
        npu_node("c", npu_devices(4, cw="Ascend910C"), cw="Ascend910C"),
    ]
    for obj in nodes:
        obj.update(apiVersion="v1", kind="Node")
        obj["status"]["capacity"].update(counts)
        obj["status"]["allocatable"].update(counts)
    flags = [f"--enable-ascend={str(enable).lower()}"]
    report = simulate_report(tmp_path, nodes=nodes, pods=[PODS], config=chart_vnpus_section(), flags=flags)
    assert [name for name, p in report.items() if p["node"]] == scheduled
    if not enable:
        assert "hami.io/vgpu-node" not in report["pair"]["annotations"]
        return
    small = report["small"]["annotations"]
    assert small["hami.io/vgpu-node"] == "b3"
    assert small["predicate-time"] == small["hami.io/vgpu-time"]  # the decision's `now`
    assert (
        small["huawei.com/Ascend910B3"] == '[{"UUID":"Ascend910B3-1","temp":"vir05_1c_16g","memory":16384}]'
    )
    assert small["hami.io/Ascend910B3-devices-to-allocate"] == ";"  # the device plugin took it
    assert report["soft"]["reasons"] == {"b3": "1/2 ModeNotFit", "c": "NodeInsufficientDevice"}
    pair = report["pair"]["annotations"]["hami.io/Ascend910C-devices-allocated"]
    assert pair in (
        "Ascend910C-1,Ascend910C,65536,0:Ascend910C-0,Ascend910C,65536,0:;",
        "Ascend910C-3,Ascend910C,65536,0:Ascend910C-2,Ascend910C,65536,0:;",
    )
