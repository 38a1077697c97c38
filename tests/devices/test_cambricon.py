"""Cambricon MLU (§2.2, §4.4, §5.3, §7): the vectors of HAMi v2.10.0's pkg/device/cambricon/
device_test.go, then the vendor inside the registry, the registration loop, the decision, the
metrics, the simulated device plugin and the simulator's CLI. The node lock is in
test_cambricon_lock.py."""

from __future__ import annotations

import dataclasses
import json
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
    fit_checked,
    hami_fit_vectors,
    health_flags,
    metrics_text,
    privileged,
    readable,
    registration,
    review,
    simulate_report,
    usages,
)
from vgpu_scheduler.cluster.client import KubeClient
from vgpu_scheduler.config import DeviceConfig
from vgpu_scheduler.configfile import default_device_config, parse_device_config
from vgpu_scheduler.devices import cambricon
from vgpu_scheduler.devices.cambricon import CambriconVendor
from vgpu_scheduler.devices.protocol import NodeLockSpec, PodFitContext, ResourceNames, Vendors
from vgpu_scheduler.devices.registry import build
from vgpu_scheduler.engine.decide import Chosen, NoFit, decide, decide_on_nodes
from vgpu_scheduler.engine.quota import QuotaManager
from vgpu_scheduler.engine.requests import pod_requests
from vgpu_scheduler.engine.state import SchedulerState
from vgpu_scheduler.model import ContainerDevice, ContainerDeviceRequest, DeviceInfo, DeviceUsage
from vgpu_scheduler.scheduler.extender import pod_node_locks
from vgpu_scheduler.scheduler.options import SchedulerOptions, vendor_flags
from vgpu_scheduler.standin.embedded.deviceplugin import SimDevicePlugin
from vgpu_scheduler.standin.memory import MemoryCluster
from vgpu_scheduler.standin.transport import MemoryTransport
from vgpu_scheduler.wire import keys
from vgpu_scheduler.wire.inventory import InventoryError

COUNT, MEM, CORES = "cambricon.com/vmlu", "cambricon.com/mlu.smlu.vmemory", "cambricon.com/mlu.smlu.vcore"
CHART = default_device_config()
VENDORS = build(CHART)  # NVIDIA, MLU, DCU, ... (the chart's sections)
MLU = VENDORS["MLU"]
# HAMi's tests name the count resource cambricon.com/mlu (the legacy flag's default).
GO_TEST = CambriconVendor(ResourceNames("cambricon.com/mlu", MEM, CORES, 256))



def limits(**kw: str) -> dict[str, Any]:
    names = {"count": COUNT, "mem": MEM, "cores": CORES}
    return container(limits={names[k]: v for k, v in kw.items()})


def mlu_node(
    name: str = "n", *, vcore: str | None = "200", vmemory: str | None = "4096", **annos: str
) -> Any:
    capacity = {k: v for k, v in ((CORES, vcore), (MEM, vmemory)) if v is not None}
    return node(name, annotations=dict(annos), capacity=capacity or None)


# --------------------------------------------------------------------------------------------
# Configuration and registration order


def test_chart_section() -> None:
    assert [k for k in VENDORS.keys if k in ("NVIDIA", "MLU", "DCU")] == ["NVIDIA", "MLU", "DCU"]
    assert MLU.names == ResourceNames(COUNT, MEM, CORES, 256)
    assert MLU.managed_resources == {COUNT, MEM, CORES}
    assert (MLU.allocation_keys, MLU.handshake_key, MLU.cleanup_key, MLU.inventory_keys) == (
        ("hami.io/cambricon-mlu-devices-to-allocate", "hami.io/cambricon-mlu-devices-allocated"),
        None, None, (),
    )
    # Its own lock, not the shared mutex.
    assert MLU.lock_key == "cambricon.com/dsmlu.lock"
    assert MLU.node_lock == NodeLockSpec(
        "cambricon.com/dsmlu.lock", names_holder=False, expiry_seconds=120.0,
        busy_message="node {node} has been locked within 2 minutes",
    )


def test_missing_section_registers_mlu_with_empty_names() -> None:
    vendors = build(DeviceConfig())
    assert vendors["MLU"].names == ResourceNames("", "", "", 256)
    assert pod_requests(pod(containers=[container(limits={"": "1"})]), vendors) == [{}]


def test_config_wins_over_the_legacy_flags() -> None:
    """InitMLUDevice assigns the section's values over --cambricon-mlu-* unconditionally."""
    opts = dataclasses.replace(
        SchedulerOptions(), cambricon_mlu_name="flag.example/mlu", cambricon_mlu_memory="flag.example/mem",
        cambricon_mlu_cores="flag.example/cores",
    )
    assert build(CHART, vendor_flags(opts))["MLU"].names == ResourceNames(COUNT, MEM, CORES, 256)
    assert build(DeviceConfig(), vendor_flags(opts))["MLU"].names.count == ""


@pytest.mark.parametrize(
    ("yaml", "key"),
    [
        ("cambricon:\n  resourceCountName: 5\n", "cambricon.resourceCountName"),
        ("cambricon:\n  resourceCoreName: [a]\n", "cambricon.resourceCoreName"),
        ("cambricon: text\n", "cambricon"),
    ],
    ids=readable,
)
def test_bad_section_is_a_config_error(yaml: str, key: str) -> None:
    assert config_error_key(yaml) == key


def test_custom_section_keeps_the_memory_unit() -> None:
    config = parse_device_config("cambricon:\n  resourceCountName: example.com/mlu\n  memoryFactor: 4\n")
    assert build(config)["MLU"].names == ResourceNames("example.com/mlu", "", "", 256)


# --------------------------------------------------------------------------------------------
# Requests (Test_GenerateResourceRequests)


def req(nums: int, mem: int, pct: int, cores: int) -> ContainerDeviceRequest:
    return ContainerDeviceRequest(nums, "MLU", mem, pct, cores)


def go_ctr(lim: dict[str, str], requests: dict[str, str] | None = None) -> dict[str, Any]:
    names = {"count": "cambricon.com/mlu", "mem": MEM, "cores": CORES}
    return container(
        limits={names[k]: v for k, v in lim.items()},
        requests=None if requests is None else {names[k]: v for k, v in requests.items()},
    )


@pytest.mark.parametrize(
    ("ctr", "expected"),
    [
        pytest.param(container(limits={}, requests={}), None, id="nothing set"),
        pytest.param(go_ctr({"count": "1", "mem": "1000", "cores": "2"},
                            {"count": "1", "mem": "1000", "cores": "2"}),
                     req(1, 256000, 0, 2), id="count, memory and cores"),
        pytest.param(go_ctr({"count": "1", "mem": "1000"}, {"count": "1", "mem": "1000"}),
                     req(1, 256000, 0, 100), id="no cores: 100"),
        pytest.param(go_ctr({"count": "1", "cores": "2"}, {"count": "1", "cores": "2"}),
                     req(1, 0, 100, 2), id="no memory: the whole device"),
        pytest.param(go_ctr({"count": "1", "mem": "16Gi"}), None, id="memory over int32 rejected"),
        pytest.param(go_ctr({"count": "1", "mem": "16.0Gi"}), None, id="decimal-form memory rejected"),
        # Beyond HAMi's table, from its code:
        pytest.param(go_ctr({"count": "1", "mem": "8388607"}), req(1, 2147483392, 0, 100),
                     id="largest memory: MaxInt32 over 256"),
        pytest.param(go_ctr({"count": "1", "mem": "8388608"}), None, id="one unit more rejected"),
        pytest.param(go_ctr({"count": "1", "mem": "-1"}), None, id="negative memory rejected"),
        pytest.param(go_ctr({"count": "1", "mem": "0.5"}), None, id="fractional memory rejects the request"),
        pytest.param(go_ctr({"count": "1", "cores": "-5"}), req(1, 0, 100, -5),
                     id="cores are not range-checked"),
        pytest.param(go_ctr({"count": "1", "cores": "1500m"}), req(1, 0, 100, 100),
                     id="fractional cores: the default"),
        pytest.param(go_ctr({"count": "4294967297"}), req(1, 0, 100, 100), id="count wraps like int32"),
        pytest.param(go_ctr({"count": "0"}), None, id="count zero: no request"),
        pytest.param(go_ctr({"count": "-1"}), None, id="negative count: no request"),
        pytest.param(go_ctr({"count": "0.5"}), None, id="fractional count: no request"),
        pytest.param(container(requests={"cambricon.com/mlu": "2", MEM: "4"}), req(2, 1024, 0, 100),
                     id="requests only"),
    ],
)
def test_requests(ctr: dict[str, Any], expected: ContainerDeviceRequest | None) -> None:
    assert GO_TEST.request(ctr) == expected


# --------------------------------------------------------------------------------------------
# Inventory (Test_GetNodeDevices) and health


def mlu(name: str, i: int, devmem: int) -> DeviceInfo:
    return DeviceInfo(id=f"{name}-cambricon-mlu-{i}", index=i, count=100, devmem=devmem, devcore=100,
                      type="MLU", numa=0, health=True, device_vendor="MLU")


@pytest.mark.parametrize(
    ("vcore", "vmemory", "expected"),
    [
        pytest.param("1", "1", [mlu("test", 0, 25600)], id="HAMi vector: 1 vcore, 1 unit"),
        pytest.param("200", "4096", [mlu("test", 0, 524288), mlu("test", 1, 524288)], id="two MLUs"),
        pytest.param("250", "300", [mlu("test", i, 30720) for i in range(3)], id="a partial third MLU"),
        pytest.param("100", None, [mlu("test", 0, 0)], id="no memory capacity: 0"),
        pytest.param("-100", "10", [], id="negative capacity: no devices, no error"),
    ],
)
def test_inventory_from_capacity(vcore: str, vmemory: str | None, expected: list[DeviceInfo]) -> None:
    assert MLU.node_devices(mlu_node("test", vcore=vcore, vmemory=vmemory)) == expected


@pytest.mark.parametrize(
    ("vcore", "vmemory"),
    [
        pytest.param(None, "4096", id="no core capacity"),
        pytest.param("0", "4096", id="zero cores"),
        pytest.param("1.5", "4096", id="fractional cores"),
        pytest.param(None, None, id="nothing"),
    ],
)
def test_inventory_absent(vcore: str | None, vmemory: str | None) -> None:
    with pytest.raises(InventoryError, match=f"^device not found {CORES}$"):
        MLU.node_devices(mlu_node(vcore=vcore, vmemory=vmemory))


def test_health_is_always_healthy_without_handshake() -> None:
    health = MLU.check_health(mlu_node(vcore=None), NOW, UTC)
    assert health_flags(health) == (True, True, False)


# --------------------------------------------------------------------------------------------
# Fit (TestDevices_Fit, TestDevices_Fit_ResourceQuotaWholeCardRequest, TestDevices_AddResourceUsage)


def run_fit(
    devs: list[Dev], request: ContainerDeviceRequest, annos: dict[str, str] | None = None, *,
    quota: QuotaManager | None = None, namespace: str = "default",
) -> tuple[bool, list[str], str]:
    result = fit_checked(MLU, request, device_infos(devs, "MLU"), usages(devs), annos=annos, quota=quota,
                         namespace=namespace)
    return result.ok, [d.uuid for d in result.devices], result.reason


@pytest.mark.parametrize(
    ("devs", "request_", "annos", "ok", "ids", "reason"),
    [
        *hami_fit_vectors("MLU", use_uuid=cambricon.USE_UUID, nouse_uuid=cambricon.NOUSE_UUID),
        # HAMi declares cambricon.com/use-mlutype but never reads it; NUMA binding is not Cambricon's.
        ([Dev("dev-0")], req(1, 64, 0, 50), {"cambricon.com/use-mlutype": "MLU590"}, True, ["dev-0"], ""),
        ([Dev("dev-0")], req(1, 64, 0, 50), {"cambricon.com/nouse-mlutype": "MLU"}, True, ["dev-0"], ""),
        ([Dev("dev-0")], req(1, 64, 0, 50), {keys.NUMA_BIND: "true"}, True, ["dev-0"], ""),
    ],
    ids=readable,
)
def test_fit(
    devs: list[Dev], request_: ContainerDeviceRequest, annos: dict[str, str], ok: bool, ids: list[str],
    reason: str,
) -> None:
    got_ok, got_ids, got_reason = run_fit(devs, request_, annos)
    assert (got_ok, got_reason) == (ok, reason)
    if ok:
        assert got_ids == ids


def quota(vmemory: str) -> QuotaManager:
    manager = QuotaManager.for_vendors(VENDORS)
    manager.upsert_quota({
        "metadata": {"name": "mlu-quota", "namespace": "q"},
        "spec": {"hard": {f"limits.{MEM}": vmemory}},
    })
    return manager


def test_whole_card_request_over_the_quota_is_refused() -> None:
    """The quota limit is in 256 MiB units: 50 units = 12800 MiB < a whole 40960 MiB MLU."""
    whole = req(1, 0, 100, 10)
    assert run_fit([Dev("dev-0", totalmem=40960)], whole, quota=quota("50"), namespace="q") == (
        False, [], "1/1 ResourceQuotaNotFit",
    )
    assert run_fit([Dev("dev-0", totalmem=40960)], whole, quota=quota("160"), namespace="q")[0]


def test_fit_entry_and_usage() -> None:
    devices = [DeviceInfo(id="dev-0", index=3, count=100, devmem=1280, devcore=100, type="MLU", health=True)]
    ctx = PodFitContext(vendors=Vendors([MLU]))
    result = MLU.fit(req(1, 0, 10, 20), devices, [DeviceUsage(0, 0, 0)], [0], ctx=ctx, cordoned=frozenset(),
                     allocated=())
    assert result.devices == [ContainerDevice("dev-0", "MLU", 128, 20, 3)]
    u = DeviceUsage(0, 2000, 15)
    MLU.add_usage(devices[0], u, ContainerDevice("dev-0", "MLU", 1024, 50), container_index=0, device_index=0,
                  migs=[])
    assert u == DeviceUsage(1, 3024, 65)


# --------------------------------------------------------------------------------------------
# Annotations (Test_PatchAnnotations), admission (Test_MutateAdmission)


@pytest.mark.parametrize(
    ("entries", "expected"),
    [
        pytest.param([[ContainerDevice("device-0", "MLU", 256000, 1, 0)]], {
            "CAMBRICON_DSMLU_ASSIGNED": "false",
            "CAMBRICON_DSMLU_PROFILE": "0_1_1000",
            "hami.io/cambricon-mlu-devices-to-allocate": "device-0,MLU,256000,1:;",
            "hami.io/cambricon-mlu-devices-allocated": "device-0,MLU,256000,1:;",
        }, id="exist device"),
        pytest.param([], {}, id="no device"),
        pytest.param([[], [ContainerDevice("device-0", "MLU", 256000, 1, 0)]], {
            "CAMBRICON_DSMLU_ASSIGNED": "false",
            "CAMBRICON_DSMLU_PROFILE": "0_1_1000",
            "hami.io/cambricon-mlu-devices-to-allocate": ";device-0,MLU,256000,1:;",
            "hami.io/cambricon-mlu-devices-allocated": ";device-0,MLU,256000,1:;",
        }, id="leading container without device"),
        # Only the first container's first device names the profile; memory / 256 truncates.
        pytest.param([[ContainerDevice("a", "MLU", 1000, 30, 2), ContainerDevice("b", "MLU", 512, 5, 1)],
                      [ContainerDevice("c", "MLU", 256, 10, 0)]], {
            "CAMBRICON_DSMLU_ASSIGNED": "false",
            "CAMBRICON_DSMLU_PROFILE": "2_30_3",
            "hami.io/cambricon-mlu-devices-to-allocate": "a,MLU,1000,30:b,MLU,512,5:;c,MLU,256,10:;",
            "hami.io/cambricon-mlu-devices-allocated": "a,MLU,1000,30:b,MLU,512,5:;c,MLU,256,10:;",
        }, id="several devices and containers"),
        pytest.param([[], []], {
            "CAMBRICON_DSMLU_ASSIGNED": "false",
            "hami.io/cambricon-mlu-devices-to-allocate": ";;",
            "hami.io/cambricon-mlu-devices-allocated": ";;",
        }, id="only empty containers: no profile"),
    ],
)
def test_patch_annotations(entries: list[list[ContainerDevice]], expected: dict[str, str]) -> None:
    assert MLU.patch_annotations(entries, [], node="n", now=1) == expected


@pytest.mark.parametrize(
    ("ctr", "has"),
    [
        pytest.param(limits(count="1"), True, id="count in limits"),
        pytest.param(container(requests={COUNT: "1"}), False, id="MutateAdmission reads limits only"),
        pytest.param(limits(mem="10", cores="20"), False, id="memory and cores without count"),
    ],
)
def test_mutate(ctr: dict[str, Any], has: bool) -> None:
    before = json.dumps(ctr, sort_keys=True)
    assert MLU.mutate(ctr, pod()) is has
    assert json.dumps(ctr, sort_keys=True) == before  # nothing changes in the container


def test_webhook_puts_mlu_pods_under_our_scheduler_and_denies_privileged() -> None:
    response = review(pod(containers=[limits(count="1", mem="10")]), VENDORS)
    assert response.allowed
    denied = review(privileged(limits(count="1")), VENDORS)
    assert not denied.allowed and denied.message == "container c is privileged"


def test_node_score_is_zero() -> None:
    entries = [[ContainerDevice("n-cambricon-mlu-0", "MLU", 256, 10, 0)]]
    assert MLU.score_node(entries, annotations={}, devices=[], previous=[], policy="binpack") == 0.0
    assert not MLU.scores_nodes


# --------------------------------------------------------------------------------------------
# In the scheduler: registration, decision, metrics, device plugin, simulator


async def test_registration_reads_capacity_and_writes_no_handshake() -> None:
    async with registration(VENDORS, NOW) as reg:
        reg.add(
            mlu_node("mlu-1"),
            mlu_node("mlu-odd", vcore="1.5"),  # unusable capacity: this node has no MLU ...
            mlu_node("mlu-2", vcore="100", vmemory="1024"),
            node("plain"))
        report = await reg.run()
        view = reg.state.ledger.view("mlu-1")
        assert view is not None
        assert [d.id for d in view.devices] == ["mlu-1-cambricon-mlu-0", "mlu-1-cambricon-mlu-1"]
        view = reg.state.ledger.view("mlu-2")  # ... and it never affects another
        assert view is not None
        assert [(d.id, d.devmem) for d in view.devices] == [("mlu-2-cambricon-mlu-0", 262144)]
        assert reg.state.ledger.view("mlu-odd") is None and reg.state.ledger.view("plain") is None
        # A node whose MLU capacity is unusable says so; one without any device reports the first
        # vendor's reason, as before MLU registered.
        assert report.errors == {
            "mlu-odd": "device not found cambricon.com/mlu.smlu.vcore",
            "plain": "annos not found hami.io/node-nvidia-register",
        }
        annotations = reg.cluster.get("nodes", "mlu-1")["metadata"].get("annotations") or {}
        assert not any("cambricon" in k for k in annotations)  # no MLU handshake exists


def mlu_pod(name: str, **kw: str) -> dict[str, Any]:
    return pod(name, uid=f"uid-{name}", containers=[limits(**kw)], status={"phase": "Pending"})


def mlu_state() -> SchedulerState:
    state = SchedulerState(VENDORS)
    state.set_node_devices("mlu-1", MLU.node_devices(mlu_node("mlu-1")))
    return state


def test_decision_writes_the_mlu_annotations() -> None:
    state = mlu_state()
    p = mlu_pod("p", count="1", mem="20", cores="10")
    d = decide(p, ["mlu-1"], state, default_node_policy="binpack", default_gpu_policy="spread",
               now=1700000000)
    assert isinstance(d, Chosen)
    assert d.annotations == {
        keys.VGPU_NODE: "mlu-1",
        keys.VGPU_TIME: "1700000000",
        "CAMBRICON_DSMLU_ASSIGNED": "false",
        "CAMBRICON_DSMLU_PROFILE": "1_10_20",
        "hami.io/cambricon-mlu-devices-to-allocate": "mlu-1-cambricon-mlu-1,MLU,5120,10:;",
        "hami.io/cambricon-mlu-devices-allocated": "mlu-1-cambricon-mlu-1,MLU,5120,10:;",
    }
    state.reserve(p, d)
    assert state.quota.used("default", MEM) == 5120
    # Two whole MLUs (no memory: 100 % of each) no longer fit next to the first pod.
    whole = decide(mlu_pod("q", count="2"), ["mlu-1"], state, default_node_policy="binpack",
                   default_gpu_policy="spread", now=1700000001)
    assert whole == NoFit({"mlu-1": "1/2 AllocatedCardsInsufficientRequest, 1/2 CardInsufficientMemory"})


def test_a_pod_asking_nvidia_and_mlu_takes_both_locks() -> None:
    state = mlu_state()
    gpu = DeviceInfo(id="GPU-0", count=10, devmem=8000, devcore=100, type="NVIDIA-A100", health=True)
    state.set_node_devices("mixed", [gpu, *MLU.node_devices(mlu_node("mixed"))])
    both = pod("m", uid="uid-m", containers=[
        container("g", limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"}),
        limits(count="1", mem="8"),
    ])
    d = decide(both, ["mixed"], state, default_node_policy="binpack", default_gpu_policy="spread", now=1)
    assert isinstance(d, Chosen)
    assert d.annotations[keys.VGPU_ALLOCATED] == "GPU-0,NVIDIA,1000,0:;;"
    assert d.annotations["hami.io/cambricon-mlu-devices-allocated"] == ";mixed-cambricon-mlu-1,MLU,2048,100:;"
    assert d.annotations["CAMBRICON_DSMLU_PROFILE"] == "1_100_8"
    locks = [lock.key for lock in pod_node_locks(both, VENDORS)]
    assert locks == ["cambricon.com/dsmlu.lock", keys.NODE_LOCK]
    only_init = pod("i", init_containers=[limits(count="1")], containers=[container()])
    assert pod_node_locks(only_init, VENDORS) == []  # init containers never lock


def test_metrics_list_mlu_devices() -> None:
    state = mlu_state()
    p = mlu_pod("p", count="1", mem="4", cores="30")
    d = decide(p, ["mlu-1"], state, default_node_policy="binpack", default_gpu_policy="spread", now=1)
    assert isinstance(d, Chosen)
    state.reserve(p, d)
    text = metrics_text(state)
    assert (
        'hami_gpu_memory_allocated_bytes{device_cores="100",device_index="1",device_type="MLU",'
        'device_uuid="mlu-1-cambricon-mlu-1",node="mlu-1",zone="vGPU"} 1.073741824e+09'
    ) in text
    assert (
        'hami_gpu_memory_limit_bytes{device_index="0",device_type="MLU",device_uuid="mlu-1-cambricon-mlu-0",'
        'node="mlu-1",zone="vGPU"} 5.49755813888e+11'
    ) in text


def test_template_nodes_read_capacity() -> None:
    nodes = [mlu_node("b"), mlu_node("a", vcore=None), node("c")]
    d = decide_on_nodes(mlu_pod("p", count="2", mem="4"), nodes, VENDORS,
                        default_node_policy="binpack", default_gpu_policy="spread", now=5)
    assert isinstance(d, Chosen) and d.node == "b"
    assert d.annotations["hami.io/cambricon-mlu-devices-allocated"] == (
        "b-cambricon-mlu-1,MLU,1024,100:b-cambricon-mlu-0,MLU,1024,100:;"
    )
    assert d.failed == {"a": "node unregistered", "c": "node unregistered"}


async def test_simulated_device_plugin_consumes_the_allocation_and_removes_the_lock() -> None:
    locks = {cambricon.LOCK: "2026-01-01T00:00:00Z", keys.NODE_LOCK: "2026-01-01T00:00:00Z,default,other"}
    annotations = {
        cambricon.TO_ALLOCATE: ";n1-cambricon-mlu-0,MLU,2048,100:;",
        cambricon.ALLOCATED: ";n1-cambricon-mlu-0,MLU,2048,100:;",
        keys.BIND_PHASE: "allocating",
    }
    bound = pod("p", annotations=annotations, containers=[container("a"), limits(count="1")])
    admitted = await admit_bound_pod(VENDORS, bound, node_annotations=locks)
    assert admitted.phase == "Running"
    after = admitted.annotations
    assert after[cambricon.TO_ALLOCATE] == ";;" and after[keys.BIND_PHASE] == "success"
    node_annos = admitted.node_annotations
    # The Cambricon plugin removes its lock whoever wrote it; another pod's mutex stays.
    assert cambricon.LOCK not in node_annos and node_annos[keys.NODE_LOCK].endswith(",default,other")


async def test_a_failed_allocation_leaves_the_mlu_lock_to_expire() -> None:
    cluster = MemoryCluster(seed=1)
    lock = {cambricon.LOCK: "2026-01-01T00:00:00Z"}
    cluster.create("nodes", {"metadata": {"name": "n1", "annotations": lock}})
    annotations = {cambricon.TO_ALLOCATE: "x,MLU,1,1:y,MLU,1,1:;", keys.BIND_PHASE: "allocating"}
    cluster.create("pods", pod("p", annotations=annotations, containers=[limits(count="1")]))
    cluster.bind("default", "p", "n1")
    plugin = SimDevicePlugin(KubeClient(MemoryTransport(cluster)), VENDORS)
    result = await plugin.admit(cluster.get("pods", "p", "default"))
    assert result.phase == "Failed" and "device number not matched" in result.error
    assert cluster.get("nodes", "n1")["metadata"]["annotations"][cambricon.LOCK] == "2026-01-01T00:00:00Z"


CHART_SECTION = """\
cambricon:
  resourceCountName: cambricon.com/vmlu
  resourceMemoryName: cambricon.com/mlu.smlu.vmemory
  resourceCoreName: cambricon.com/mlu.smlu.vcore
"""

MLU_POD = """\
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default}}
spec:
  containers:
  - name: c
    image: x
    resources: {{limits: {{cambricon.com/vmlu: 1, cambricon.com/mlu.smlu.vmemory: {mem}, \
cambricon.com/mlu.smlu.vcore: {cores}}}}}
"""


def test_simulate_cli_places_mlu_pods(tmp_path: Path) -> None:
    """End to end through `vgpu-scheduler simulate` with the chart's section verbatim: three pods
    on one node with two MLUs, each bind taking and the simulated plugin releasing the MLU lock."""
    snap_node = {"apiVersion": "v1", "kind": "Node", **mlu_node("mlu-node", vcore="200", vmemory="512")}
    snap_node["status"]["allocatable"] = {"cpu": "16", "memory": "64Gi", "pods": "110", COUNT: "2"}
    pods = [MLU_POD.format(name=name, mem=mem, cores=cores) for name, mem, cores in
            (("a", 64, 30), ("b", 64, 30), ("c", 180, 50))]
    report = simulate_report(tmp_path, nodes=[snap_node], pods=pods, config=CHART_SECTION)
    assert {name: p["node"] for name, p in report.items()} == dict.fromkeys("abc", "mlu-node")
    allocated = {name: p["annotations"][cambricon.ALLOCATED] for name, p in report.items()}
    # 256 units × 256 MiB per MLU = 65536 MiB each; the spread GPU policy puts a and b on
    # different MLUs, c (46080 MiB) still fits beside either.
    assert allocated == {
        "a": "mlu-node-cambricon-mlu-1,MLU,16384,30:;",
        "b": "mlu-node-cambricon-mlu-0,MLU,16384,30:;",
        "c": "mlu-node-cambricon-mlu-1,MLU,46080,50:;",
    }
    profiles = [report[n]["annotations"]["CAMBRICON_DSMLU_PROFILE"] for n in "abc"]
    assert profiles == ["1_30_64", "0_30_64", "1_50_180"]
    assert report["a"]["annotations"]["CAMBRICON_DSMLU_ASSIGNED"] == "false"
    # The simulated plugin consumed each allocation.
    assert all(report[n]["annotations"]["hami.io/cambricon-mlu-devices-to-allocate"] == ";" for n in "abc")
