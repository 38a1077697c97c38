"""Moore Threads sGPU end to end (§2.2, §3.2, §4.4, §5.3, §6.2, §7): the vectors of HAMi v2.10.0's
pkg/device/mthreads/device_test.go, then the vendor inside the registry, the registration loop,
the decision, the webhook, the simulated device plugin and `vgpu-scheduler simulate`."""

from __future__ import annotations

import dataclasses
from datetime import UTC
from pathlib import Path
from typing import Any

import pytest

from tests.builders import container, node, pod
from tests.devices.vendorkit import (
    NOW,
    Dev,
    admit_bound_pod,
    config_error_key,
    device_infos,
    fit_both,
    hami_fit_vectors,
    health_flags,
    metrics_text,
    readable,
    registration,
    review,
    simulate_report,
    usages,
)
from vgpu_scheduler.config import DeviceConfig
from vgpu_scheduler.configfile import default_device_config
from vgpu_scheduler.devices import mthreads as mt
from vgpu_scheduler.devices.mthreads import MthreadsVendor, one_device_rule
from vgpu_scheduler.devices.protocol import MutationError, ResourceNames, Vendors
from vgpu_scheduler.devices.registry import build
from vgpu_scheduler.engine.decide import Chosen, NoFit, decide, decide_on_nodes
from vgpu_scheduler.engine.explain import explain_pod
from vgpu_scheduler.engine.fit import pod_fit_context
from vgpu_scheduler.engine.requests import pod_requests
from vgpu_scheduler.engine.state import SchedulerState
from vgpu_scheduler.model import ContainerDevice, ContainerDeviceRequest, DeviceInfo, DeviceUsage
from vgpu_scheduler.scheduler.extender import _locking_request
from vgpu_scheduler.scheduler.options import SchedulerOptions, vendor_flags
from vgpu_scheduler.wire import keys
from vgpu_scheduler.wire.inventory import InventoryError

COUNT, MEM, CORES = "mthreads.com/vgpu", "mthreads.com/sgpu-memory", "mthreads.com/sgpu-core"
NAMES = ResourceNames(COUNT, MEM, CORES, 512)
MTH = MthreadsVendor(NAMES)
CHART = default_device_config()
SECTION = """\
mthreads:
  resourceCountName: "mthreads.com/vgpu"
  resourceMemoryName: "mthreads.com/sgpu-memory"
  resourceCoreName: "mthreads.com/sgpu-core"
"""



NAMES_BY_KEY = {"count": COUNT, "mem": MEM, "cores": CORES}


def limits(**kw: str) -> dict[str, Any]:
    return container(limits={NAMES_BY_KEY[k]: v for k, v in kw.items()})


def requests_only(**kw: str) -> dict[str, Any]:
    return container(requests={NAMES_BY_KEY[k]: v for k, v in kw.items()})


def mt_node(name: str = "test", *, memory: Any = 1, cores: Any = 1, vgpu: Any = None) -> Any:
    capacity = {k: str(v) for k, v in ((MEM, memory), (CORES, cores), (COUNT, vgpu)) if v is not None}
    return node(name, capacity=capacity, allocatable=dict(capacity))


def entry(uuid: str, idx: int, mem: int, cores: int) -> ContainerDevice:
    return ContainerDevice(uuid, "Mthreads", mem, cores, idx)


# --------------------------------------------------------------------------------------------
# Configuration and registration


def test_chart_section() -> None:
    v = build(CHART)["Mthreads"]
    assert v.names == NAMES
    assert v.managed_resources == {COUNT}  # the chart's extender lists the count only
    # The to-allocate key is registered (the ledger and the plugin know it) but never written.
    assert v.allocation_keys == ("hami.io/mthreads-vgpu-devices-to-allocate",
                                 "hami.io/mthreads-vgpu-devices-allocated")
    assert (v.handshake_key, v.cleanup_key, v.lock_key, v.inventory_keys) == (None, None, None, ())


def test_missing_section_and_legacy_flags() -> None:
    """The section's names overwrite --mthreads-name & co., with empty names when it is missing."""
    opts = dataclasses.replace(SchedulerOptions(), mthreads_name="flag.example/vgpu")
    assert build(CHART, vendor_flags(opts))["Mthreads"].names == NAMES
    empty = build(DeviceConfig(), vendor_flags(opts))
    assert empty["Mthreads"].names == ResourceNames("", "", "", 512)
    assert pod_requests(pod(containers=[container(limits={"": "1"})]), empty) == [{}]


@pytest.mark.parametrize(
    ("yaml", "key"),
    [
        ("mthreads:\n  resourceCountName: 5\n", "mthreads.resourceCountName"),
        ("mthreads:\n  resourceMemoryName: [a]\n", "mthreads.resourceMemoryName"),
        ("mthreads: text\n", "mthreads"),
    ],
    ids=readable,
)
def test_bad_section_is_a_config_error(yaml: str, key: str) -> None:
    assert config_error_key(yaml) == key


# --------------------------------------------------------------------------------------------
# Requests (Test_GenerateResourceRequests)


def req(nums: int, mem: int, pct: int, cores: int) -> ContainerDeviceRequest:
    return ContainerDeviceRequest(nums, "Mthreads", mem, pct, cores)


BOTH = {COUNT: "1", MEM: "1000", CORES: "1"}


@pytest.mark.parametrize(
    ("ctr", "expected"),
    [
        (container(limits=BOTH, requests=BOTH), req(1, 512000, 0, 1)),
        (container(limits={}, requests={MEM: "1000", CORES: "1"}), None),
        (container(limits={}, requests={COUNT: "1"}), req(1, 0, 100, 0)),
        (limits(count="0", mem="1000", cores="1"), None),
        (limits(count="-1", mem="1000", cores="1"), None),
        (limits(count="4294967296", mem="1000", cores="1"), None),
        (limits(count="1", mem="16Gi", cores="1"), None),
        (limits(count="1", mem="16.0Gi", cores="1"), None),
        # Beyond HAMi's table: memory and cores split over the count, the memory bound, a
        # non-integer core count read as 0, a core count wrapped to int32.
        (limits(count="2", mem="8", cores="32"), req(2, 2048, 0, 16)),
        (limits(count="3", cores="16"), req(3, 0, 100, 5)),
        (limits(count="1", mem="4194303"), req(1, 2147483136, 0, 0)),
        (limits(count="1", mem="4194304"), None),
        (limits(count="1", mem="-1"), None),
        (limits(count="1", cores="1.5"), req(1, 0, 100, 0)),
        (limits(count="1", cores="4294967297"), req(1, 0, 100, 1)),
        (limits(count="1.5"), None),
    ],
    ids=readable,
)
def test_requests(ctr: dict[str, Any], expected: ContainerDeviceRequest | None) -> None:
    assert MTH.request(ctr) == expected


# --------------------------------------------------------------------------------------------
# Admission (Test_MutateAdmission)


@pytest.mark.parametrize(
    ("ctr", "has", "error"),
    [
        (limits(count="2", mem="2", cores="1"), True, ""),
        (limits(count="2"), True, ""),
        (requests_only(count="2"), True, ""),
        (requests_only(count="1"), True, ""),
        (limits(mem="2", cores="1"), False, ""),
        (limits(count="1", cores="1"), True, ""),
        (limits(count="1", mem="2", cores="1"), True, ""),
        (limits(count="1", mem="3", cores="1"), True, mt.INVALID_MEMORY),
        (limits(count="0", mem="2", cores="1"), False, "mthreads.com/vgpu must be greater than 0"),
        (limits(count="-1", mem="2", cores="1"), False, "mthreads.com/vgpu must be greater than 0"),
        (requests_only(count="0", mem="2", cores="1"), False, "mthreads.com/vgpu must be greater than 0"),
    ],
    ids=readable,
)
def test_mutate(ctr: dict[str, Any], has: bool, error: str) -> None:
    p = pod(annotations={"mthreads.com/request-gpu-num": "test123"})
    if error:
        with pytest.raises(MutationError) as err:
            MTH.mutate(ctr, p)
        assert str(err.value) == error
    else:
        assert MTH.mutate(ctr, p) is has


@pytest.mark.parametrize(
    ("ctr", "limits_after", "gpu_num"),
    [
        # Several GPUs: whole GPUs' cores and memory, over what the user wrote.
        (limits(count="2", mem="2", cores="1"), {COUNT: "2", MEM: "192", CORES: "32"}, "2"),
        (requests_only(count="2"), {MEM: "192", CORES: "32"}, "2"),
        (limits(count="1000"), {COUNT: "1000", MEM: "96k", CORES: "16k"}, "1000"),
        # One GPU without a memory limit: a whole GPU, its cores overwritten.
        (limits(count="1", cores="1"), {COUNT: "1", MEM: "96", CORES: "16"}, None),
        # One GPU with a legal memory limit: unchanged.
        (limits(count="1", mem="8", cores="3"), {COUNT: "1", MEM: "8", CORES: "3"}, None),
    ],
    ids=readable,
)
def test_mutate_fills_limits(ctr: dict[str, Any], limits_after: dict[str, str], gpu_num: str | None) -> None:
    p = pod()
    assert MTH.mutate(ctr, p)
    assert ctr["resources"]["limits"] == limits_after
    assert p["metadata"].get("annotations", {}).get("mthreads.com/request-gpu-num") == gpu_num


def test_webhook_fills_and_denies_with_hamis_texts() -> None:
    vendors = build(CHART)
    ok = review(pod(containers=[limits(count="2")]), vendors)
    assert ok.allowed
    paths = {op["path"] for op in ok.patch}
    assert "/spec/schedulerName" in paths
    assert "/metadata/annotations" in paths or "/metadata/annotations/mthreads.com~1request-gpu-num" in paths
    bad = review(pod(containers=[limits(count="1", mem="3")]), vendors)
    assert (bad.allowed, bad.code, bad.message) == (False, 500, mt.INVALID_MEMORY)
    zero = review(pod(containers=[limits(count="0")]), vendors)
    assert (zero.allowed, zero.message) == (False, "mthreads.com/vgpu must be greater than 0")


# --------------------------------------------------------------------------------------------
# Inventory (Test_GetNodeDevices) and health


def test_inventory_from_capacity() -> None:
    assert MTH.node_devices(mt_node()) == [
        DeviceInfo(id="test-mthreads-0", index=0, count=100, devmem=8192, devcore=16, type="Mthreads", numa=0,
                   mode="", health=True, device_vendor="Mthreads")
    ]


def test_inventory_of_a_multi_gpu_node() -> None:
    # 8 GPUs × 16 cores, 8 × 96 units of 512 MiB: 48 GiB each.
    devices = MTH.node_devices(mt_node("m", memory=768, cores=128))
    got = [(d.id, d.index, d.devmem) for d in devices][::7]
    assert got == [("m-mthreads-0", 0, 49152), ("m-mthreads-7", 7, 49152)]
    assert len(devices) == 8
    # 17 cores still make a second GPU (HAMi loops while i × 16 < cores).
    assert len(MTH.node_devices(mt_node(memory=96, cores=17))) == 2


@pytest.mark.parametrize(
    ("memory", "cores", "error"),
    [(1, None, "device not found mthreads.com/sgpu-core"),
     (1, 0, "device not found mthreads.com/sgpu-core"),
     (1, "1.5", "device not found mthreads.com/sgpu-core"),
     (1, "junk", "device not found mthreads.com/sgpu-core")],
    ids=readable,
)
def test_inventory_errors(memory: Any, cores: Any, error: str) -> None:
    with pytest.raises(InventoryError) as err:
        MTH.node_devices(mt_node(memory=memory, cores=cores))
    assert str(err.value) == error


def test_always_healthy_without_handshake() -> None:
    health = MTH.check_health(mt_node(), NOW, UTC)
    assert health_flags(health) == (True, True, False)


# --------------------------------------------------------------------------------------------
# Fit (Test_CustomFilterRule, TestDevices_Fit, TestDevices_AddResourceUsage)


@pytest.mark.parametrize(
    ("allocated", "ok"),
    [([[entry("test123", 0, 0, 0)]], True), ([[entry("test456", 0, 0, 0)]], False), ([], True),
     ([[], [entry("test123", 0, 0, 0)], [entry("test123", 0, 0, 0)]], True),
     ([[entry("test123", 0, 0, 0), entry("x", 1, 0, 0)]], False)],
    ids=readable,
)
def test_one_device_rule(allocated: list[list[ContainerDevice]], ok: bool) -> None:
    assert one_device_rule(allocated, DeviceInfo(id="test123", type="Mthreads")) is ok


def run_fit(
    devs: list[Dev],
    request: ContainerDeviceRequest,
    annos: dict[str, str] | None = None,
    allocated: list[list[ContainerDevice]] | None = None,
) -> tuple[bool, list[ContainerDevice], str]:
    devices, usage = device_infos(devs, "Mthreads"), usages(devs)
    result, quick = fit_both(MTH, request, devices, usage, annos=annos, allocated=allocated or [])
    # The order-free verdict only ever says "fits", and then so does a fit without earlier containers.
    assert quick in (None, "")
    assert quick is None or allocated or result.ok
    return result.ok, result.devices, result.reason


@pytest.mark.parametrize(
    ("devs", "request_", "annos", "ok", "ids", "reason"),
    [
        *hami_fit_vectors("Mthreads", use_uuid=mt.USE_UUID, nouse_uuid=mt.NOUSE_UUID),
    ],
    ids=readable,
)
def test_fit(
    devs: list[Dev], request_: ContainerDeviceRequest, annos: dict[str, str], ok: bool, ids: list[str],
    reason: str,
) -> None:
    got_ok, got, got_reason = run_fit(devs, request_, annos)
    assert (got_ok, got_reason) == (ok, reason)
    if ok:
        assert [d.uuid for d in got] == ids


def test_fit_keeps_the_pod_on_one_device() -> None:
    """An earlier container's device is the only one a later container may take."""
    devs = [Dev("dev-0", totalmem=1280), Dev("dev-1", totalmem=1280, index=1)]
    ok, got, _ = run_fit(devs, req(1, 512, 0, 20), allocated=[[entry("dev-0", 0, 512, 20)]])
    assert ok and [d.uuid for d in got] == ["dev-0"]
    ok, _, reason = run_fit(devs[1:], req(1, 512, 0, 20), allocated=[[entry("dev-0", 0, 512, 20)]])
    assert (ok, reason) == (False, "1/1 CardNotFoundCustomFilterRule")
    # Earlier checks come first; a container that took two devices leaves no device for the next.
    ok, _, reason = run_fit([*devs, Dev("dev-2", totalmem=10)], req(1, 512, 0, 20),
                            allocated=[[entry("dev-0", 0, 1, 1), entry("dev-1", 1, 1, 1)]])
    assert (ok, reason) == (False, "1/3 CardInsufficientMemory, 2/3 CardNotFoundCustomFilterRule")


def test_fit_entry_and_usage() -> None:
    devices = [DeviceInfo(id="dev-0", index=3, count=100, devmem=1280, devcore=16, type="Mthreads",
                          health=True)]
    ctx = pod_fit_context(pod(), vendors=Vendors([MTH]))
    result = MTH.fit(req(1, 0, 100, 4), devices, [DeviceUsage(0, 0, 0)], [0], ctx=ctx, cordoned=frozenset(),
                     allocated=())
    assert result.devices == [entry("dev-0", 3, 1280, 4)]
    u = DeviceUsage(0, 2000, 15)
    MTH.add_usage(devices[0], u, ContainerDevice("dev-0", "Mthreads", 1024, 50, 3), container_index=0,
                  device_index=0, migs=[])
    assert u == DeviceUsage(1, 3024, 65)


# --------------------------------------------------------------------------------------------
# Annotations (Test_PatchAnnotations) and the node lock


def test_patch_annotations() -> None:
    got = MTH.patch_annotations([[entry("test1", 0, 1000, 1)]], [], node="n1", now=1700000000)
    assert got == {
        "hami.io/mthreads-vgpu-devices-allocated": "test1,Mthreads,1000,1:;",
        "mthreads.com/gpu-index": "0",
        "mthreads.com/predicate-time": "1700000000000000000",
        "mthreads.com/predicate-node": "n1",
    }
    assert MTH.patch_annotations([], [], node="n1", now=1) == {}


def test_patch_annotations_last_container_wins() -> None:
    got = MTH.patch_annotations([[entry("a", 2, 1, 1), entry("b", 3, 1, 1)], [], [entry("a", 2, 1, 1)], []],
                                [], node="n1", now=1)
    assert got["mthreads.com/gpu-index"] == "2"
    allocated = "a,Mthreads,1,1:b,Mthreads,1,1:;;a,Mthreads,1,1:;;"
    assert got["hami.io/mthreads-vgpu-devices-allocated"] == allocated
    assert "hami.io/mthreads-vgpu-devices-to-allocate" not in got


def test_never_locks() -> None:
    assert not _locking_request(pod(containers=[limits(count="1")]), build(CHART))


def test_node_score_is_zero() -> None:
    assert not MTH.scores_nodes
    devices = MTH.node_devices(mt_node())
    assert MTH.score_node([[entry("test-mthreads-0", 0, 8192, 16)]], annotations={}, devices=devices,
                          previous=[DeviceUsage()], policy="binpack") == 0


# --------------------------------------------------------------------------------------------
# In the scheduler: registration, decision, metrics, device plugin, simulate


async def test_registration_reads_capacity_and_one_broken_node_affects_no_other() -> None:
    async with registration(build(CHART), NOW) as reg:
        reg.add(mt_node("mt-1", memory=192, cores=32, vgpu=2), mt_node("mt-broken", memory=96, cores="x"),
                    mt_node("mt-2", memory=96, cores=16), node("cpu-1", capacity={"cpu": "4"}))
        report = await reg.run()
        view = reg.state.ledger.view("mt-1")
        assert view is not None and [d.id for d in view.devices] == ["mt-1-mthreads-0", "mt-1-mthreads-1"]
        assert reg.state.ledger.view("mt-2") is not None and reg.state.ledger.view("mt-broken") is None
        assert report.errors["mt-broken"].startswith("device not found mthreads.com/sgpu-core")
        assert report.errors["cpu-1"] == "annos not found hami.io/node-nvidia-register"
        annotations = reg.node_annotations("mt-1")
        assert not [k for k in annotations if "mthreads" in k]  # no handshake of its own


def mt_pod(name: str, *ctrs: dict[str, Any], init: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return pod(name, uid=f"uid-{name}", containers=list(ctrs), init_containers=init,
               status={"phase": "Pending"})


def mt_state() -> SchedulerState:
    state = SchedulerState(build(CHART))
    state.set_node_devices("mt-1", MTH.node_devices(mt_node("mt-1", memory=192, cores=32)))
    return state


def decide_mt(p: dict[str, Any], state: SchedulerState, *, gpu_policy: str = "spread", now: int = 17) -> Any:
    return decide(p, ["mt-1"], state, default_node_policy="binpack", default_gpu_policy=gpu_policy, now=now)


def test_decision_writes_the_mthreads_annotations() -> None:
    state = mt_state()
    p = mt_pod("p", limits(count="1", mem="8", cores="4"))
    d = decide_mt(p, state, now=1700000000)
    assert isinstance(d, Chosen)
    assert d.annotations == {
        keys.VGPU_NODE: "mt-1", keys.VGPU_TIME: "1700000000",
        "hami.io/mthreads-vgpu-devices-allocated": "mt-1-mthreads-1,Mthreads,4096,4:;",
        "mthreads.com/gpu-index": "1", "mthreads.com/predicate-time": "1700000000000000000",
        "mthreads.com/predicate-node": "mt-1",
    }
    state.reserve(p, d)
    # A whole GPU (no memory: 100 %) and all 16 cores: only the idle GPU 0 has them.
    whole = decide_mt(mt_pod("q", limits(count="1", cores="16")), state)
    assert isinstance(whole, Chosen) and whole.annotations["mthreads.com/gpu-index"] == "0"
    # More cores than a GPU has (and on GPU 1 the whole memory is no longer free).
    assert decide_mt(mt_pod("r", limits(count="1", cores="17")), state) == NoFit(
        {"mt-1": "1/2 CardInsufficientCore, 1/2 CardInsufficientMemory"}
    )


def test_a_pods_containers_share_one_device() -> None:
    """Two containers: the second must take the first one's GPU, whatever the policy prefers."""
    state = mt_state()
    two = mt_pod("p", limits(count="1", mem="8", cores="4"), limits(count="1", mem="8", cores="4"))
    d = decide_mt(two, state)
    assert isinstance(d, Chosen)
    assert d.annotations["hami.io/mthreads-vgpu-devices-allocated"] == (
        "mt-1-mthreads-1,Mthreads,4096,4:;mt-1-mthreads-1,Mthreads,4096,4:;"
    )
    # The second container does not fit beside the first, and the one-device rule keeps it off
    # the idle GPU.
    big = mt_pod("q", limits(count="1", mem="64", cores="12"), limits(count="1", mem="64", cores="12"))
    assert decide_mt(big, mt_state()) == NoFit(
        {"mt-1": "1/2 CardInsufficientMemory, 1/2 CardNotFoundCustomFilterRule"}
    )
    # Init containers are a phase of their own: the app container is fitted without the init
    # container's device (nor its usage), so the rule does not bind it.
    ctr = limits(count="1", mem="64", cores="12")
    with_init = decide_mt(mt_pod("i", ctr, init=[ctr]), mt_state())
    assert isinstance(with_init, Chosen)
    assert with_init.annotations["hami.io/mthreads-vgpu-devices-allocated"] == (
        "mt-1-mthreads-1,Mthreads,32768,12:;mt-1-mthreads-1,Mthreads,32768,12:;"
    )


def test_template_nodes_read_capacity() -> None:
    nodes = [mt_node("b", memory=96, cores=16), mt_node("a", cores=0), node("c")]
    d = decide_on_nodes(mt_pod("p", limits(count="1")), nodes, build(CHART), default_node_policy="binpack",
                        default_gpu_policy="spread", now=5)
    assert isinstance(d, Chosen) and d.node == "b"
    assert d.failed == {"a": "node unregistered", "c": "node unregistered"}


def test_metrics_list_mthreads_devices() -> None:
    state = mt_state()
    p = mt_pod("p", limits(count="1", mem="8", cores="4"))
    d = decide_mt(p, state)
    assert isinstance(d, Chosen)
    state.reserve(p, d)
    lines = metrics_text(state).splitlines()
    labels = 'device_index="1",device_type="Mthreads",device_uuid="mt-1-mthreads-1",node="mt-1",zone="vGPU"'
    assert f"hami_gpu_core_limit_ratio{{{labels}}} 16" in lines
    assert f"hami_gpu_core_allocated_ratio{{{labels}}} 4" in lines
    assert f"hami_node_gpu_memory_allocated_ratio{{{labels}}} 0.08333333333333333" in lines


async def test_simulated_device_plugin_runs_mthreads_pods() -> None:
    """The to-allocate key is never written: nothing to consume, the pod runs."""
    annotations = {"hami.io/mthreads-vgpu-devices-allocated": "n1-mthreads-0,Mthreads,4096,4:;",
                   "mthreads.com/gpu-index": "0", keys.BIND_PHASE: "allocating"}
    bound = pod("p", annotations=annotations, containers=[limits(count="1")])
    admitted = await admit_bound_pod(build(CHART), bound, node_annotations=None)
    assert admitted.phase == "Running"
    assert admitted.annotations == annotations


SNAP_CAPACITY = {"cpu": "8", "memory": "32Gi", "pods": "110", COUNT: "4", MEM: "192", CORES: "32"}
PODS = """\
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default}}
spec:
  containers:
  - name: c
    image: x
    resources: {{limits: {{{limits}}}}}
"""


def test_simulate_end_to_end(tmp_path: Path) -> None:
    items = [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": n},
              "status": {"capacity": SNAP_CAPACITY, "allocatable": SNAP_CAPACITY}} for n in ("mt-a", "mt-b")]
    pods = [
        PODS.format(name="small", limits=f"{COUNT}: 1, {MEM}: 8, {CORES}: 4"),
        PODS.format(name="whole", limits=f"{COUNT}: 1, {MEM}: 96, {CORES}: 16"),
    ]
    report = simulate_report(tmp_path, nodes=items, pods=pods, config=SECTION)
    small, whole = report["small"], report["whole"]
    n = small["node"]
    assert n in ("mt-a", "mt-b")
    annos = small["annotations"]
    assert annos["hami.io/mthreads-vgpu-devices-allocated"] == f"{n}-mthreads-1,Mthreads,4096,4:;"
    assert (annos["mthreads.com/gpu-index"], annos["mthreads.com/predicate-node"]) == ("1", n)
    assert annos["mthreads.com/predicate-time"].endswith("000000000")
    assert "hami.io/mthreads-vgpu-devices-to-allocate" not in annos
    assert whole["annotations"]["mthreads.com/gpu-index"] in ("0", "1")


# --------------------------------------------------------------------------------------------
# The one-device rule sees the pod's earlier containers, on every path (issue 27)


def every_answer(p: dict[str, Any]) -> dict[str, Any]:
    """The decision through the public entry point, evaluating every node, on the node object alone
    (no ledger), and explain's verdict and per-device checks for mt-1."""
    args = {"default_node_policy": "binpack", "default_gpu_policy": "spread", "now": 17}
    exp = explain_pod(p, ["mt-1"], mt_state(), **args)
    return {
        "decide": decide(p, ["mt-1"], mt_state(), **args),
        "every node": decide(p, ["mt-1"], mt_state(), evaluate_all=True, **args),
        "no ledger": decide_on_nodes(p, [mt_node("mt-1", memory=192, cores=32)], build(CHART), **args),
        "explain": (exp.node, [(n.node, n.fits, n.reason) for n in exp.nodes]),
        "checks": {(d.uuid, c.container): c.verdict for d in exp.nodes[0].devices for c in d.checks},
    }


def test_a_second_container_that_fits_only_on_the_other_gpu_is_refused_on_every_path() -> None:
    big = limits(count="1", mem="64", cores="12")
    second = {**big, "name": "second"}
    refused = "1/2 CardInsufficientMemory, 1/2 CardNotFoundCustomFilterRule"
    answers = every_answer(mt_pod("q", big, second))
    assert answers == {
        "decide": NoFit({"mt-1": refused}),
        "every node": NoFit({"mt-1": refused}),
        "no ledger": NoFit({"mt-1": refused}),
        "explain": (None, [("mt-1", False, refused)]),
        # Explain checks each device on the node before the pod, with the earlier containers as
        # the decision fits them (the first takes GPU 1): GPU 0 breaks the rule for the second.
        "checks": {
            ("mt-1-mthreads-0", "c"): "fits", ("mt-1-mthreads-1", "c"): "fits",
            ("mt-1-mthreads-0", "second"): "CardNotFoundCustomFilterRule",
            ("mt-1-mthreads-1", "second"): "fits",
        },
    }


def test_two_small_containers_share_one_gpu_on_every_path() -> None:
    small = limits(count="1", mem="8", cores="4")
    answers = every_answer(mt_pod("p", small, {**small, "name": "second"}))
    for path in ("decide", "every node", "no ledger"):
        d = answers[path]
        assert isinstance(d, Chosen) and d.node == "mt-1", path
        assert d.annotations["hami.io/mthreads-vgpu-devices-allocated"] == (
            "mt-1-mthreads-1,Mthreads,4096,4:;mt-1-mthreads-1,Mthreads,4096,4:;"
        ), path
    assert answers["explain"] == ("mt-1", [("mt-1", True, "")])
