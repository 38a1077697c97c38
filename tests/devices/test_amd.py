"""AMD end to end (§2.2, §3.3, §3.4, §4.4, §5.3, §7, §8.4): the vectors of HAMi v2.10.0's
pkg/device/amd/device_test.go, then the vendor inside the registry, the registration loop, the
decision, the bind, the webhook, the metrics and the simulator's CLI."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC
from pathlib import Path
from typing import Any

import pytest

from tests.builders import container, node, pod
from tests.devices import vendorkit
from tests.devices.vendorkit import (
    NOW,
    admit_bound_pod,
    config_error_key,
    device_infos,
    fit_checked,
    health_flags,
    metrics_text,
    readable,
    registration,
    review,
    simulate_report,
    usages,
)
from vgpu_scheduler.config import DeviceConfig
from vgpu_scheduler.configfile import default_device_config, parse_device_config
from vgpu_scheduler.devices import amd
from vgpu_scheduler.devices.amd import AmdVendor
from vgpu_scheduler.devices.base import SelectionFilters
from vgpu_scheduler.devices.protocol import MutationError, ResourceNames
from vgpu_scheduler.devices.registry import build
from vgpu_scheduler.engine.decide import Chosen, NoFit, decide
from vgpu_scheduler.engine.requests import pod_requests
from vgpu_scheduler.engine.state import SchedulerState
from vgpu_scheduler.model import ContainerDevice, ContainerDeviceRequest, DeviceInfo, DeviceUsage
from vgpu_scheduler.scheduler.extender import _locking_request
from vgpu_scheduler.wire import keys
from vgpu_scheduler.wire.inventory import InventoryError

COUNT, MEM, CORES = "amd.com/gpu", "amd.com/gpumem", "amd.com/gpucores"
CHART = default_device_config()
VENDORS = build(CHART)
AMD = VENDORS["AMD"]
# HAMi's test names (Test_MutateAdmission, Test_GenerateResourceRequests).
T_COUNT, T_MEM, T_CORES = "amd.com/gpu", "amd.com/gpu-mem", "amd.com/gpu-core-pct"
TEST_AMD = AmdVendor(ResourceNames(T_COUNT, T_MEM, T_CORES, 0))
CHART_SECTION = 'amd:\n  resourceCountName: "amd.com/gpu"\n  resourceCoreName: "amd.com/gpucores"\n' \
    '  resourceMemoryName: "amd.com/gpumem"\n'



def limits(**kw: str) -> dict[str, Any]:
    names = {"count": COUNT, "mem": MEM, "cores": CORES}
    return container(limits={names[k]: v for k, v in kw.items()})


# --------------------------------------------------------------------------------------------
# Configuration


def test_chart_section_and_registration_order() -> None:
    keys_ = VENDORS.keys
    assert keys_.index("DCU") < keys_.index("AMD") < keys_.index("Vastai")
    assert AMD.names == ResourceNames(COUNT, MEM, CORES, 0)
    assert AMD.managed_resources == {COUNT, MEM, CORES}
    assert (AMD.allocation_keys, AMD.handshake_key, AMD.cleanup_key, AMD.lock_key, AMD.inventory_keys) == (
        ("hami.io/amd-devices-to-allocate", "hami.io/amd-devices-allocated"),
        None,
        "hami.io/node-amd-register",  # NodeCleanUp deletes the register annotation
        keys.NODE_LOCK,
        ("hami.io/node-amd-register",),
    )
    assert (AMD.prefilter, AMD.scores_nodes) == (False, False)


def test_chart_section_verbatim_and_missing_section() -> None:
    assert build(parse_device_config(CHART_SECTION))["AMD"].names == ResourceNames(COUNT, MEM, CORES, 0)
    vendors = build(DeviceConfig())  # HAMi registers AMD whatever the file says
    assert vendors["AMD"].names == ResourceNames("", "", "", 0)
    assert pod_requests(pod(containers=[container(limits={"": "1"})]), vendors) == [{}]


@pytest.mark.parametrize(
    ("yaml", "key"),
    [("amd:\n  resourceCountName: 5\n", "amd.resourceCountName"), ("amd: [1]\n", "amd")],
    ids=readable,
)
def test_bad_section_is_a_config_error(yaml: str, key: str) -> None:
    assert config_error_key(yaml) == key


# --------------------------------------------------------------------------------------------
# Requests (Test_GenerateResourceRequests)


def req(nums: int, mem: int, cores: int) -> ContainerDeviceRequest:
    return ContainerDeviceRequest(nums, "AMD", mem, 0, cores)


def t_limits(**kw: str) -> dict[str, Any]:
    names = {"count": T_COUNT, "mem": T_MEM, "cores": T_CORES}
    return container(limits={names[k]: v for k, v in kw.items()})


@pytest.mark.parametrize(
    ("ctr", "expected"),
    [
        # limits only: the requests are ignored.
        ({"name": "c", "resources": {"limits": {T_COUNT: "2", T_MEM: "4096", T_CORES: "33"},
                                     "requests": {T_COUNT: "99", T_MEM: "99", T_CORES: "99"}}},
         req(2, 4096, 33)),
        (t_limits(mem="4096", cores="33"), None),  # no count limit
        ({"name": "c", "resources": {"requests": {T_COUNT: "1"}}}, None),
        (t_limits(count="1", mem="4096"), req(1, 4096, 100)),  # omitted cores: 100 %
        (t_limits(count="1"), req(1, 0, 100)),  # omitted memory: 0 (the whole device at fit)
        (t_limits(count="0"), None),
        (t_limits(count="2147483648"), None),
        (t_limits(count="1", mem="-1"), None),
        (t_limits(count="1", mem="2147483648"), None),
        (t_limits(count="1", cores="0"), None),
        (t_limits(count="1", cores="101"), None),
        (t_limits(count="1", cores="500m"), None),  # not an integer
        (t_limits(count="1", mem="0.5"), None),
        (t_limits(count="0.5"), None),
        (t_limits(count="1", mem="1Ki", cores="1"), req(1, 1024, 1)),  # memory as written, no factor
    ],
    ids=readable,
)
def test_requests(ctr: dict[str, Any], expected: ContainerDeviceRequest | None) -> None:
    assert TEST_AMD.request(ctr) == expected


# --------------------------------------------------------------------------------------------
# Inventory (Test_GetNodeDevices) and health (CheckHealth)


def amd_node(register: str | None, *, name: str = "n", capacity: str | None = "2", **annos: str) -> Any:
    annotations = dict(annos)
    if register is not None:
        annotations[amd.REGISTER] = register
    return node(name, annotations=annotations, capacity={COUNT: capacity} if capacity is not None else None)


REGISTER_JSON = (
    '[{"id":"GPU-0","index":0,"count":1,"devmem":8192,"devcore":100,"type":"amd","numa":0,"health":true}]'
)


def test_inventory_json() -> None:
    assert AMD.node_devices(amd_node(REGISTER_JSON)) == [
        DeviceInfo(id="GPU-0", index=0, count=1, devmem=8192, devcore=100, type="amd", numa=0, health=True,
                   device_vendor="AMD")
    ]


@pytest.mark.parametrize(
    ("register", "error"),
    [
        (None, "annos not found hami.io/node-amd-register"),
        ("[]", "no gpu found on node"),
        ("null", "no gpu found on node"),
        ("", "invalid node annotation JSON"),
        ("GPU-0,1,8192,100,amd,0,true:", "invalid node annotation JSON"),  # JSON only
        ('[{"id":"GPU-0","count":"1"}]', "device 0: field 'count' must be an int32"),
    ],
    ids=readable,
)
def test_inventory_errors(register: str | None, error: str) -> None:
    with pytest.raises(InventoryError, match=error):
        AMD.node_devices(amd_node(register))


@pytest.mark.parametrize(
    ("capacity", "healthy"),
    [(None, False), ("0", False), ("2", True), ("1.5", False), ("-1", True)],
    ids=readable,
)
def test_health_is_the_count_capacity(capacity: str | None, healthy: bool) -> None:
    """CheckHealth reads status.capacity (not allocatable): absent/0/not an integer is unhealthy."""
    health = AMD.check_health(amd_node(REGISTER_JSON, capacity=capacity), NOW, UTC)
    assert health_flags(health) == (healthy, healthy, False)


def test_health_with_an_empty_count_name_and_allocatable_only() -> None:
    unnamed = AmdVendor(ResourceNames("", "", "", 0))
    assert unnamed.check_health(amd_node(None, capacity=None), NOW, UTC).healthy
    only_allocatable = node("n", allocatable={COUNT: "2"})
    assert not AMD.check_health(only_allocatable, NOW, UTC).healthy


# --------------------------------------------------------------------------------------------
# Selection annotations (TestCheckAMDType, Test_checkType)


@pytest.mark.parametrize(
    ("annos", "cardtype", "ok"),
    [
        ({}, "MI300X", True),
        ({amd.USE_TYPE: "MI300"}, "MI300X", True),
        ({amd.USE_TYPE: "MI250"}, "MI300X", False),
        ({amd.NOUSE_TYPE: "MI300"}, "MI300X", False),
        ({amd.NOUSE_TYPE: "MI250"}, "MI300X", True),
        ({amd.NOUSE_TYPE: ""}, "MI300X", True),
        ({amd.USE_TYPE: ""}, "MI300X", True),
        ({amd.NOUSE_TYPE: "   "}, "MI300X", True),
        ({amd.USE_TYPE: "   "}, "MI300X", True),
        ({amd.NOUSE_TYPE: "MI250,"}, "MI300X", True),
        ({amd.NOUSE_TYPE: ",MI250"}, "MI300X", True),
        ({amd.NOUSE_TYPE: " MI250 , "}, "MI250X", False),
        ({amd.NOUSE_TYPE: ", "}, "MI300X", True),
        ({amd.USE_TYPE: "MI300,"}, "MI250X", False),
        ({amd.USE_TYPE: ", "}, "MI300X", False),
        ({amd.USE_TYPE: "mi300"}, "AMD-MI300X", True),  # case-insensitive
    ],
    ids=readable,
)
def test_type_annotations(annos: dict[str, str], cardtype: str, ok: bool) -> None:
    filters = AMD.pod_filters(annos)
    assert isinstance(filters, SelectionFilters)
    assert filters.type_ok(DeviceInfo(id="d", type=cardtype)) is ok


# --------------------------------------------------------------------------------------------
# Fit (TestDevices_Fit)


@dataclasses.dataclass
class Dev(vendorkit.Dev):
    count: int = 2
    totalmem: int = 1000
    type: str = "AMD"


def run_fit(
    devs: list[Dev], request: ContainerDeviceRequest, annos: dict[str, str] | None = None
) -> tuple[bool, list[ContainerDevice], str]:
    devices = device_infos(devs, "")
    for info, d in zip(devices, devs, strict=True):
        info.type = d.type  # a product name per device
    # The order-free verdict always answers for AMD, and agrees with the ordered Fit.
    result = fit_checked(AMD, request, devices, usages(devs), annos=annos, exact=True)
    assert [devices[p].id for p in result.positions] == [e.uuid for e in result.devices]
    return result.ok, result.devices, result.reason


@pytest.mark.parametrize(
    ("devs", "request_", "annos", "reason", "entries"),
    [
        # Two whole cards: memreq 0 takes the total memory, and with it all the cores; the walk
        # from the end takes dev-1 first.
        ([Dev("dev-0"), Dev("dev-1", count=12, index=1)], req(2, 0, 0), {}, "",
         [ContainerDevice("dev-1", "AMD", 1000, 100, 1), ContainerDevice("dev-0", "AMD", 1000, 100, 0)]),
        # The percentage maps onto each device's compute units.
        ([Dev("dev-0", totalcore=10), Dev("dev-1", count=12, index=1)], req(1, 500, 50), {}, "",
         [ContainerDevice("dev-1", "AMD", 500, 50, 1)]),
        ([Dev("dev-0", totalcore=10)], req(1, 500, 50), {}, "", [ContainerDevice("dev-0", "AMD", 500, 5, 0)]),
        # The entry keeps the registered product type.
        ([Dev("dev-0", type="AMD_Instinct_MI300X_VF")], req(1, 100, 10), {}, "",
         [ContainerDevice("dev-0", "AMD_Instinct_MI300X_VF", 100, 10, 0)]),
        ([Dev("dev-0", totalcore=64)], req(1, 100, 1), {}, "", [ContainerDevice("dev-0", "AMD", 100, 1, 0)]),
        ([Dev("dev-0", totalcore=64)], req(1, 100, 101), {}, "",
         [ContainerDevice("dev-0", "AMD", 100, 64, 0)]),
        ([Dev("dev-0", usedmem=900)], req(1, 500, 10), {}, "1/1 CardInsufficientMemory", []),
        ([Dev("dev-0", totalcore=10, usedcores=9)], req(1, 100, 100), {}, "1/1 CardInsufficientCore", []),
        ([Dev("dev-0", totalcore=0)], req(1, 100, 10), {}, "1/1 CardInsufficientCore", []),
        ([Dev("dev-1")], req(1, 100, 10), {amd.USE_UUID: "dev-0"}, "1/1 CardUuidMismatch", []),
        ([Dev("dev-0")], req(1, 100, 10), {amd.NOUSE_UUID: "dev-0"}, "1/1 CardUuidMismatch", []),
        ([Dev("dev-0", used=2)], req(1, 100, 10), {}, "1/1 CardTimeSlicingExhausted", []),
        ([Dev("dev-0", health=False)], req(1, 100, 10), {}, "1/1 CardNotHealth", []),
        ([Dev("dev-0")], ContainerDeviceRequest(1, "other", 100, 0, 10), {}, "1/1 CardTypeMismatch", []),
        ([Dev("dev-0", type="AMD-MI300X")], req(1, 100, 10), {amd.USE_TYPE: "MI250"}, "1/1 CardTypeMismatch",
         []),
        ([Dev("dev-0", used=1)], req(1, 100, 10), {keys.GPU_SCHEDULER_POLICY: "mutex"},
         "1/1 ExclusiveDeviceAllocateConflict", []),
        # No whole-card rule: 100 % of the cores on a shared device only needs them free.
        ([Dev("dev-0", used=1, usedmem=100)], req(1, 100, 100), {}, "",
         [ContainerDevice("dev-0", "AMD", 100, 100, 0)]),
        # Memory 0 on a used device asks for all the memory.
        ([Dev("dev-0", used=1, usedmem=1)], req(1, 0, 10), {}, "1/1 CardInsufficientMemory", []),
        ([Dev("dev-0"), Dev("dev-1", usedmem=900, index=1)], req(2, 500, 10), {},
         "1/2 AllocatedCardsInsufficientRequest, 1/2 CardInsufficientMemory", []),
    ],
    ids=readable,
)
def test_fit(
    devs: list[Dev], request_: ContainerDeviceRequest, annos: dict[str, str], reason: str,
    entries: list[ContainerDevice],
) -> None:
    ok, got, got_reason = run_fit(devs, request_, annos)
    assert (ok, got_reason) == (reason == "", reason)
    if ok:
        assert got == entries


def test_add_usage_counts_the_entry() -> None:
    dev = DeviceInfo(id="dev-0", count=2, devmem=1000, devcore=64, type="AMD", health=True)
    u = DeviceUsage(1, 100, 10)
    entry = ContainerDevice("dev-0", "AMD", 500, 32)
    AMD.add_usage(dev, u, entry, container_index=0, device_index=0, migs=[])
    assert u == DeviceUsage(2, 600, 42)


# --------------------------------------------------------------------------------------------
# Annotations (Test_PatchAnnotations), lock, admission (Test_MutateAdmission), score


def test_patch_annotations() -> None:
    entries = [[ContainerDevice("test1", "AMD", 100, 3, 0), ContainerDevice("test2", "AMD", 200, 4, 1)]]
    assert AMD.patch_annotations(entries, [], node="n", now=1) == {
        "hami.io/amd-devices-to-allocate": "test1,AMD,100,3:test2,AMD,200,4:;",
        "hami.io/amd-devices-allocated": "test1,AMD,100,3:test2,AMD,200,4:;",
    }
    assert AMD.patch_annotations([], [], node="n", now=1) == {}


@pytest.mark.parametrize(
    ("p", "locks"),
    [
        (pod(containers=[]), False),
        (pod(containers=[limits(count="1")]), True),
        # GenerateResourceRequests reads limits only: a count in requests neither asks nor locks.
        (pod(containers=[{"name": "c", "resources": {"requests": {COUNT: "1"}}}]), False),
        (pod(init_containers=[limits(count="1")], containers=[container()]), False),
    ],
    ids=readable,
)
def test_lock_only_for_regular_containers(p: dict[str, Any], locks: bool) -> None:
    assert _locking_request(p, VENDORS) is locks


@pytest.mark.parametrize(
    ("ctr", "has"),
    [
        (t_limits(count="2"), True),
        (t_limits(mem="1024"), True),  # memory or cores alone mark the container too
        (t_limits(cores="50"), True),
        ({"name": "c", "resources": {"requests": {T_COUNT: "1"}}}, False),
        (t_limits(count="1", mem="1024"), True),
        (container(limits={}), False),
        (t_limits(cores="0"), True),  # validated only next to a count
    ],
    ids=readable,
)
def test_mutate(ctr: dict[str, Any], has: bool) -> None:
    before = json.loads(json.dumps(ctr))
    assert TEST_AMD.mutate(ctr, pod()) is has
    assert ctr == before


@pytest.mark.parametrize("cores", ["0", "101", "1500m"], ids=str)
def test_mutate_rejects_a_bad_core_percentage(cores: str) -> None:
    with pytest.raises(MutationError) as err:
        TEST_AMD.mutate(t_limits(count="1", cores=cores), pod())
    assert str(err.value) == "amd.com/gpu-core-pct must be an integer percentage between 1 and 100"


def test_webhook_answers_500_for_a_bad_percentage_and_schedules_amd_pods() -> None:
    bad = review(pod(containers=[limits(count="1", cores="150")]), VENDORS)
    assert (bad.allowed, bad.code, bad.message) == (
        False, 500, "amd.com/gpucores must be an integer percentage between 1 and 100"
    )
    good = review(pod(containers=[limits(count="1", cores="50")]), VENDORS)
    assert good.allowed
    assert {"op": "add", "path": "/spec/schedulerName", "value": "hami-scheduler"} in good.patch or any(
        op.get("path") == "/spec/schedulerName" and op.get("value") == "hami-scheduler" for op in good.patch
    )


def test_score_node_is_zero() -> None:
    per_container = [[ContainerDevice("AMD-0", "AMD", 1, 1)]]
    assert AMD.score_node(per_container, annotations={}, devices=[], previous=[], policy="binpack") == 0.0


# --------------------------------------------------------------------------------------------
# In the scheduler: registration, decision, bind, metrics, simulator


def amd_devices(n: int = 2, devmem: int = 65536, devcore: int = 64, type_: str = "AMD-MI300X") -> str:
    return json.dumps([
        {"id": f"AMD-{i}", "index": i, "count": 4, "devmem": devmem, "devcore": devcore, "type": type_,
         "numa": 0, "health": True}
        for i in range(n)
    ], separators=(",", ":"))


async def test_registration_reads_amd_nodes_cleans_up_and_writes_no_amd_handshake() -> None:
    async with registration(VENDORS, NOW) as reg:
        reg.add(
            amd_node(amd_devices(), name="amd-1"),
            amd_node("[{", name="amd-broken"),  # one node's bad annotation ...
            amd_node(amd_devices(1), name="amd-2"))
        report = await reg.run()
        view = reg.state.ledger.view("amd-1")
        assert view is not None and [d.id for d in view.devices] == ["AMD-0", "AMD-1"]
        assert reg.state.ledger.view("amd-2") is not None  # ... never affects another
        assert reg.state.ledger.view("amd-broken") is None
        assert report.errors["amd-broken"].startswith("invalid node annotation JSON")
        annotations = reg.node_annotations("amd-1")
        assert not any("amd" in k for k in annotations if k != amd.REGISTER)  # no AMD handshake
        # The plugin goes away (capacity 0): AMD is unhealthy, its register annotation deleted.
        reg.cluster.patch("nodes", "amd-1", {"status": {"capacity": {COUNT: "0"}}}, subresource="status")
        reg.refresh("amd-1")
        report = await reg.run()
        assert "amd-1" in report.cleaned
        assert reg.state.ledger.view("amd-1") is None
        assert amd.REGISTER not in reg.node_annotations("amd-1")


def amd_pod(name: str, **kw: str) -> dict[str, Any]:
    return pod(name, uid=f"uid-{name}", containers=[limits(**kw)], status={"phase": "Pending"})


def amd_state() -> SchedulerState:
    state = SchedulerState(VENDORS)
    state.set_node_devices("amd-1", AMD.node_devices(amd_node(amd_devices())))
    return state


def test_decision_writes_the_amd_annotations() -> None:
    state = amd_state()
    first = amd_pod("p", count="1", mem="1024", cores="50")
    d = decide(first, ["amd-1"], state, default_node_policy="binpack", default_gpu_policy="spread",
               now=1700000000)
    assert isinstance(d, Chosen)
    # 50 % of 64 compute units = 32; the entry carries the product type.
    assert d.annotations == {
        keys.VGPU_NODE: "amd-1",
        keys.VGPU_TIME: "1700000000",
        "hami.io/amd-devices-to-allocate": "AMD-1,AMD-MI300X,1024,32:;",
        "hami.io/amd-devices-allocated": "AMD-1,AMD-MI300X,1024,32:;",
    }
    state.reserve(first, d)
    # Two whole devices (no memory = all of it): AMD-1 is shared now.
    whole = decide(amd_pod("q", count="2"), ["amd-1"], state,
                   default_node_policy="binpack", default_gpu_policy="spread", now=1700000001)
    assert whole == NoFit({"amd-1": "1/2 AllocatedCardsInsufficientRequest, 1/2 CardInsufficientMemory"})
    one = decide(amd_pod("r", count="1"), ["amd-1"], state,
                 default_node_policy="binpack", default_gpu_policy="spread", now=1700000002)
    assert isinstance(one, Chosen)
    assert one.annotations["hami.io/amd-devices-allocated"] == "AMD-0,AMD-MI300X,65536,64:;"


def test_metrics_normalize_amd_cores() -> None:
    """§8.4: the core ratio of an AMD device is 100 and its allocation ceil(used/devcore × 100)."""
    state = amd_state()
    p = amd_pod("p", count="1", mem="1024", cores="30")  # 30 % of 64 = 19 CUs
    d = decide(p, ["amd-1"], state, default_node_policy="binpack", default_gpu_policy="spread", now=1)
    assert isinstance(d, Chosen)
    state.reserve(p, d)
    text = metrics_text(state, legacy=True)
    dev = 'device_index="1",device_type="AMD-MI300X",device_uuid="AMD-1",node="amd-1",zone="vGPU"'
    assert f"hami_gpu_core_limit_ratio{{{dev}}} 100\n" in text
    assert f"hami_gpu_core_allocated_ratio{{{dev}}} 30\n" in text  # ceil(19 / 64 × 100) = 30
    assert (
        'hami_vgpu_core_allocated_ratio{container_index="0",device_uuid="AMD-1",namespace="default",'
        'node="amd-1",pod="p",zone="vGPU"} 30\n'
    ) in text
    assert 'GPUDeviceCoreLimit{deviceidx="1",devicetype="AMD-MI300X",deviceuuid="AMD-1",nodeid="amd-1",' \
        'zone="vGPU"} 64\n' in text  # legacy: raw


def test_metrics_go_by_the_device_type_not_the_vendor() -> None:
    """HAMi normalizes by the registered type's "AMD" prefix: an AMD device typed "MI300X" keeps
    raw compute units."""
    state = SchedulerState(VENDORS)
    state.set_node_devices("amd-1", AMD.node_devices(amd_node(amd_devices(1, type_="MI300X"))))
    text = metrics_text(state)
    assert 'hami_gpu_core_limit_ratio{device_index="0",device_type="MI300X",device_uuid="AMD-0",' \
        'node="amd-1",zone="vGPU"} 64\n' in text


async def test_simulated_device_plugin_consumes_amd_allocations() -> None:
    annotations = {
        "hami.io/amd-devices-to-allocate": ";AMD-1,AMD-MI300X,2048,32:;",
        "hami.io/amd-devices-allocated": ";AMD-1,AMD-MI300X,2048,32:;",
        keys.BIND_PHASE: "allocating",
    }
    bound = pod("p", annotations=annotations, containers=[container("a"), limits(count="1")])
    admitted = await admit_bound_pod(VENDORS, bound)
    assert admitted.phase == "Running"
    after = admitted.annotations
    assert after["hami.io/amd-devices-to-allocate"] == ";;" and after[keys.BIND_PHASE] == "success"
    assert keys.NODE_LOCK not in admitted.node_annotations


def snapshot_node(name: str, register: str, gpus: str) -> dict[str, Any]:
    resources = {"cpu": "16", "memory": "64Gi", "pods": "110", COUNT: gpus}
    return node(name, annotations={amd.REGISTER: register}, capacity=resources, allocatable=resources,
                labels={"kubernetes.io/hostname": name}, typed=True)


POD_YAML = """\
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default}}
spec:
  containers:
  - name: c
    image: x
    resources: {{limits: {{amd.com/gpu: {count}, amd.com/gpumem: 4096, amd.com/gpucores: {cores}}}}}
"""


def test_cli_simulate_places_amd_pods(tmp_path: Path) -> None:
    nodes = [snapshot_node("amd-a", amd_devices(2), "8"),
             snapshot_node("amd-b", amd_devices(1, devcore=304), "4")]
    pods = [POD_YAML.format(name="two", count=2, cores=25), POD_YAML.format(name="big", count=1, cores=50)]
    report = simulate_report(tmp_path, nodes=nodes, pods=pods, config=CHART_SECTION)
    # Two devices: only amd-a has them; 25 % of 64 CUs = 16 each.
    assert report["two"]["node"] == "amd-a"
    assert report["two"]["annotations"]["hami.io/amd-devices-allocated"] == \
        "AMD-1,AMD-MI300X,4096,16:AMD-0,AMD-MI300X,4096,16:;"
    # One device, 50 %: binpack keeps filling amd-a (32 CUs of 64).
    assert report["big"]["node"] == "amd-a"
    big = report["big"]["annotations"]
    assert big["hami.io/amd-devices-allocated"] == "AMD-1,AMD-MI300X,4096,32:;"
    # The simulated device plugin consumed the allocation.
    assert (big["hami.io/amd-devices-to-allocate"], big[keys.BIND_PHASE]) == (";", "success")
