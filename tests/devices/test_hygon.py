"""Hygon DCU end to end (§2.2, §3.3, §3.4, §4.4, §5.3, §7): the vectors of HAMi v2.10.0's
pkg/device/hygon/device_test.go, then the vendor inside the registry, the registration loop, the
decision, the bind and the webhook. The template for the other vendors' tests (docs/vendors.md)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, timedelta
from typing import Any

import pytest

from tests.builders import container, node, pod
from tests.devices.vendorkit import (
    HANDSHAKE_HEALTH,
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
    usages,
)
from vgpu_scheduler.config import DeviceConfig
from vgpu_scheduler.configfile import default_device_config, parse_device_config
from vgpu_scheduler.devices import hygon
from vgpu_scheduler.devices.base import SelectionFilters
from vgpu_scheduler.devices.hygon import HygonVendor
from vgpu_scheduler.devices.protocol import PodFitContext, ResourceNames, Vendors
from vgpu_scheduler.devices.registry import build
from vgpu_scheduler.engine.decide import Chosen, NoFit, decide, decide_on_nodes
from vgpu_scheduler.engine.requests import pod_requests
from vgpu_scheduler.engine.state import SchedulerState
from vgpu_scheduler.model import (
    NVIDIA,
    ContainerDevice,
    ContainerDeviceRequest,
    DeviceInfo,
    DeviceUsage,
)
from vgpu_scheduler.scheduler.extender import _locking_request
from vgpu_scheduler.scheduler.options import SchedulerOptions, vendor_flags
from vgpu_scheduler.wire import keys
from vgpu_scheduler.wire.inventory import InventoryError

COUNT, MEM, CORES = "hygon.com/dcunum", "hygon.com/dcumem", "hygon.com/dcucores"
NAMES = ResourceNames(COUNT, MEM, CORES)
DCU = HygonVendor(NAMES)
CHART = default_device_config()
VENDORS = build(CHART)  # NVIDIA, DCU, ... (the chart's sections)



def limits(**kw: str) -> dict[str, Any]:
    names = {"count": COUNT, "mem": MEM, "cores": CORES}
    return container(limits={names[k]: v for k, v in kw.items()})


# --------------------------------------------------------------------------------------------
# Configuration and registration order


def test_chart_section_and_registration_order() -> None:
    assert [k for k in VENDORS.keys if k in (NVIDIA, "DCU")] == [NVIDIA, "DCU"]
    dcu = VENDORS["DCU"]
    assert dcu.names == ResourceNames(COUNT, MEM, CORES, 1)
    assert dcu.managed_resources == {COUNT, MEM, CORES}
    assert (dcu.allocation_keys, dcu.handshake_key, dcu.lock_key) == (
        ("hami.io/dcu-devices-to-allocate", "hami.io/dcu-devices-allocated"),
        "hami.io/node-handshake-dcu",
        keys.NODE_LOCK,
    )


def test_missing_section_registers_dcu_with_empty_names() -> None:
    """HAMi registers DCU whatever the file says; without a section nothing ever asks for it."""
    vendors = build(DeviceConfig())
    assert vendors["DCU"].names == ResourceNames("", "", "", 0)
    assert pod_requests(pod(containers=[container(limits={"": "1"})]), vendors) == [{}]


def test_config_wins_over_the_legacy_flags() -> None:
    """HAMi assigns the section's values over --dcu-name & co. unconditionally, even when empty."""
    opts = dataclasses.replace(SchedulerOptions(), dcu_name="flag.example/dcu", dcu_memory="flag.example/mem")
    assert build(CHART, vendor_flags(opts))["DCU"].names == ResourceNames(COUNT, MEM, CORES, 1)
    assert build(DeviceConfig(), vendor_flags(opts))["DCU"].names.count == ""


@pytest.mark.parametrize(
    ("yaml", "key"),
    [
        ("hygon:\n  resourceCountName: 5\n", "hygon.resourceCountName"),
        ("hygon:\n  memoryFactor: two\n", "hygon.memoryFactor"),
        ("hygon:\n  memoryFactor: 3000000000\n", "hygon.memoryFactor"),
    ],
    ids=readable,
)
def test_bad_section_is_a_config_error(yaml: str, key: str) -> None:
    assert config_error_key(yaml) == key


def test_custom_section() -> None:
    config = parse_device_config("hygon:\n  resourceCountName: example.com/dcu\n  memoryFactor: 4\n")
    assert build(config)["DCU"].names == ResourceNames("example.com/dcu", "", "", 4)


# --------------------------------------------------------------------------------------------
# Requests (Test_GenerateResourceRequests, _OutOfRangeValues, _MemoryFactorOverflow)


def req(nums: int, mem: int, pct: int, cores: int) -> ContainerDeviceRequest:
    return ContainerDeviceRequest(nums, "DCU", mem, pct, cores)


@pytest.mark.parametrize(
    ("ctr", "expected"),
    [
        (container(limits={}), None),
        ({"name": "c", "resources": {"limits": {COUNT: "1", CORES: "1", MEM: "1024"},
                                     "requests": {COUNT: "1", CORES: "1", MEM: "1024"}}}, req(1, 1024, 0, 1)),
        # count in limits, memory and cores only in requests: looked up there.
        ({"name": "c", "resources": {"limits": {COUNT: "1"},
                                     "requests": {COUNT: "1", CORES: "1", MEM: "1024"}}}, req(1, 1024, 0, 1)),
        # no memory: the whole device (percentage 100); cores default to 100.
        ({"name": "c", "resources": {"limits": {COUNT: "1"}, "requests": {COUNT: "1", CORES: "1"}}},
         req(1, 0, 100, 1)),
        (limits(count="2"), req(2, 0, 100, 100)),
        (limits(count="1", mem="16Gi"), None),  # over int32
        (limits(count="2200000000"), None),  # count over int32
        (limits(count="0"), None),
        (limits(count="1", cores="-1"), None),
        (limits(count="1", mem="-1"), None),
        (limits(count="0.5"), None),  # not an integer: no request
        (limits(count="1", mem="0.5"), req(1, 0, 100, 100)),  # unreadable memory is ignored
        (limits(count="1", cores="1500m"), req(1, 0, 100, 100)),  # unreadable cores: the default
    ],
    ids=readable,
)
def test_requests(ctr: dict[str, Any], expected: ContainerDeviceRequest | None) -> None:
    assert DCU.request(ctr) == expected


def test_memory_factor_scales_and_overflow_drops() -> None:
    scaled = HygonVendor(ResourceNames(COUNT, MEM, CORES, 1024))
    assert scaled.request(limits(count="1", mem="2")) == req(1, 2048, 0, 100)
    # 3000000 fits in int32, 3000000 * 1024 does not.
    assert scaled.request(limits(count="1", mem="3000000")) is None


# --------------------------------------------------------------------------------------------
# Inventory (Test_GetNodeDevices) and health (Test_CheckHealth)


def dcu_node(register: str | None, *, name: str = "n", allocatable: str | None = "4", **annos: str) -> Any:
    annotations = dict(annos)
    if register is not None:
        annotations[hygon.REGISTER] = register
    return node(name, annotations=annotations, allocatable={COUNT: allocatable} if allocatable else None)


def test_inventory_legacy_form() -> None:
    devices = DCU.node_devices(dcu_node("test-0,1,1024,100,DCU,0,true,0,test:"))
    assert devices == [
        DeviceInfo(id="test-0", index=0, count=1, devmem=1024, devcore=100, type="DCU", numa=0, mode="test",
                   health=True, device_vendor="DCU")
    ]


@pytest.mark.parametrize(
    ("register", "error"),
    [
        (None, "annos not found hami.io/node-dcu-register"),
        (":", "no gpu found on node"),
        ("", "node annotation missing device separator"),
        ("test-0,1,1024,100,DCU:", "unexpected field count 5 in node annotation"),
        ("test-0,x,1024,100,DCU,0,true:", "invalid count field"),
        # HAMi reads DCU inventories with the legacy decoder only: JSON is malformed there.
        ('[{"id":"a","count":1}]', "malformed node annotation segment"),
    ],
    ids=readable,
)
def test_inventory_errors(register: str | None, error: str) -> None:
    with pytest.raises(InventoryError, match=error):
        DCU.node_devices(dcu_node(register))


@pytest.mark.parametrize(
    ("handshake", "allocatable", "healthy", "need_update", "write"),
    HANDSHAKE_HEALTH,
    ids=readable,
)
def test_health(
    handshake: str | None, allocatable: str | None, healthy: bool, need_update: bool, write: bool
) -> None:
    annos = {hygon.HANDSHAKE: handshake} if handshake is not None else {}
    health = DCU.check_health(dcu_node(":", allocatable=allocatable, **annos), NOW, UTC)
    assert health_flags(health) == (healthy, need_update, write)


# --------------------------------------------------------------------------------------------
# Selection annotations (Test_checkDCUtype) and fit (TestDevices_Fit)


@pytest.mark.parametrize(
    ("annos", "cardtype", "ok"),
    [
        ({hygon.USE_TYPE: "dcu"}, "dcu", True),
        ({hygon.USE_TYPE: "dcu"}, "test", False),
        ({}, "dcu", True),
        ({hygon.USE_TYPE: "dcu,test"}, "dcu", True),
        ({hygon.NOUSE_TYPE: "dcu"}, "dcu", False),
        ({hygon.NOUSE_TYPE: "test,dcu"}, "test", False),
        ({hygon.NOUSE_TYPE: "dcu"}, "test", True),
        ({hygon.USE_TYPE: ""}, "dcu", True),
        ({hygon.NOUSE_TYPE: ""}, "dcu", True),
        ({hygon.NOUSE_TYPE: "   "}, "dcu", True),
        # NVIDIA's annotation says nothing about DCUs.
        ({keys.USE_GPUTYPE: "A100"}, "dcu", True),
    ],
    ids=readable,
)
def test_type_annotations(annos: dict[str, str], cardtype: str, ok: bool) -> None:
    filters = DCU.pod_filters(annos)
    assert isinstance(filters, SelectionFilters)
    assert filters.type_ok(DeviceInfo(id="d", type=cardtype)) is ok


def run_fit(
    devs: list[Dev], request: ContainerDeviceRequest, annos: dict[str, str] | None = None
) -> tuple[bool, list[str], str, int]:
    result = fit_checked(DCU, request, device_infos(devs, "DCU"), usages(devs), annos=annos)
    return result.ok, [d.uuid for d in result.devices], result.reason, len(result.devices)


@pytest.mark.parametrize(
    ("devs", "request_", "annos", "ok", "ids", "reason"),
    [
        *hami_fit_vectors("DCU", use_uuid=hygon.USE_UUID, nouse_uuid=hygon.NOUSE_UUID),
        # The type annotations (checkDCUtype) and NVIDIA's numa-bind, which DCU ignores.
        ([Dev("dev-0")], req(1, 64, 0, 50), {hygon.NOUSE_TYPE: "dcu"}, False, [], "1/1 CardTypeMismatch"),
        ([Dev("dev-0")], req(1, 64, 0, 50), {keys.NUMA_BIND: "true"}, True, ["dev-0"], ""),
    ],
    ids=readable,
)
def test_fit(
    devs: list[Dev], request_: ContainerDeviceRequest, annos: dict[str, str], ok: bool, ids: list[str],
    reason: str,
) -> None:
    got_ok, got_ids, got_reason, _ = run_fit(devs, request_, annos)
    assert (got_ok, got_reason) == (ok, reason)
    if ok:
        assert got_ids == ids


def test_fit_entry_and_usage() -> None:
    """The allocation entry carries the vendor key and the resolved memory (TestDevices_AddResourceUsage)."""
    devices = [DeviceInfo(id="dev-0", index=3, count=10, devmem=1280, devcore=100, type="DCU", health=True)]
    usage = [DeviceUsage(0, 200, 15)]
    ctx = PodFitContext(vendors=Vendors([DCU]))
    result = DCU.fit(req(1, 0, 10, 20), devices, usage, [0], ctx=ctx, cordoned=frozenset(), allocated=())
    assert result.devices == [ContainerDevice("dev-0", "DCU", 128, 20, 3)]
    u = DeviceUsage(0, 200, 15)
    DCU.add_usage(devices[0], u, result.devices[0], container_index=0, device_index=0, migs=[])
    assert u == DeviceUsage(1, 328, 35)


# --------------------------------------------------------------------------------------------
# Annotations (Test_PatchAnnotations), lock (TestDevices_LockNode), admission (Test_MutateAdmission)


def test_patch_annotations() -> None:
    entries = [[ContainerDevice("test1", "DCU", 2048, 1, 1)]]
    assert DCU.patch_annotations(entries, [], node="n", now=1) == {
        "hami.io/dcu-devices-to-allocate": "test1,DCU,2048,1:;",
        "hami.io/dcu-devices-allocated": "test1,DCU,2048,1:;",
    }
    assert DCU.patch_annotations([], [], node="n", now=1) == {}


@pytest.mark.parametrize(
    ("p", "locks"),
    [
        (pod(containers=[]), False),
        # GenerateResourceRequests reads requests too: a count in requests locks.
        (pod(containers=[{"name": "c", "resources": {"requests": {COUNT: "1"}}}]), True),
        (pod(init_containers=[limits(count="1")], containers=[container()]), False),
    ],
    ids=readable,
)
def test_lock_only_for_regular_containers(p: dict[str, Any], locks: bool) -> None:
    assert _locking_request(p, VENDORS) is locks


@pytest.mark.parametrize(
    ("ctr", "has"),
    [
        (limits(count="1"), True),
        ({"name": "c", "resources": {"requests": {COUNT: "1"}}}, False),  # MutateAdmission reads limits
        (limits(mem="1024"), False),
    ],
    ids=readable,
)
def test_mutate(ctr: dict[str, Any], has: bool) -> None:
    before = dict(ctr)
    assert DCU.mutate(ctr, pod()) is has
    assert ctr == before  # DCU changes nothing in the container


def test_webhook_puts_dcu_pods_under_our_scheduler_and_denies_privileged() -> None:
    plain = pod(containers=[limits(count="1", mem="1024")])
    response = review(plain, VENDORS)
    assert response.allowed
    denied = review(privileged(limits(count="1")), VENDORS)
    assert not denied.allowed and denied.message == "container c is privileged"


# --------------------------------------------------------------------------------------------
# In the scheduler: registration, decision, metrics


def dcu_devices(n: int = 2, devmem: int = 16384) -> str:
    return "".join(f"DCU-{i},4,{devmem},100,DCU-Z100,{i // 2},true,{i},hami-core:" for i in range(n))


async def test_registration_reads_dcu_nodes_and_stamps_the_dcu_handshake() -> None:
    async with registration(VENDORS, NOW) as reg:
        reg.add(
            dcu_node(dcu_devices(), name="dcu-1"),
            dcu_node("DCU-0,4,16384:", name="dcu-broken"),  # one node's bad annotation ...
            dcu_node(dcu_devices(1), name="dcu-2"))
        report = await reg.run()
        view = reg.state.ledger.view("dcu-1")
        assert view is not None and [d.id for d in view.devices] == ["DCU-0", "DCU-1"]
        assert reg.state.ledger.view("dcu-2") is not None  # ... never affects another
        assert reg.state.ledger.view("dcu-broken") is None
        assert report.errors == {"dcu-broken": "unexpected field count 3 in node annotation"}
        annotations = reg.node_annotations("dcu-1")
        # HAMi stamps every vendor's handshake on every node.
        assert annotations[hygon.HANDSHAKE] == "Requesting_2026-11-29 21:03:30"
        assert annotations[keys.NODE_HANDSHAKE] == "Requesting_2026-11-29 21:03:30"


def dcu_pod(name: str, **kw: str) -> dict[str, Any]:
    return pod(name, uid=f"uid-{name}", containers=[limits(**kw)], status={"phase": "Pending"})


def dcu_state() -> SchedulerState:
    state = SchedulerState(VENDORS)
    state.set_node_devices("dcu-1", DCU.node_devices(dcu_node(dcu_devices())))
    return state


def test_decision_writes_the_dcu_annotations() -> None:
    state = dcu_state()
    d = decide(dcu_pod("p", count="1", mem="1024", cores="30"), ["dcu-1"], state,
               default_node_policy="binpack", default_gpu_policy="spread", now=1700000000)
    assert isinstance(d, Chosen)
    # spread: both devices idle and equal, the last in inventory order is taken.
    assert d.annotations == {
        keys.VGPU_NODE: "dcu-1",
        keys.VGPU_TIME: "1700000000",
        "hami.io/dcu-devices-to-allocate": "DCU-1,DCU,1024,30:;",
        "hami.io/dcu-devices-allocated": "DCU-1,DCU,1024,30:;",
    }
    state.reserve(dcu_pod("p", count="1", mem="1024", cores="30"), d)
    # A second pod asking two whole devices (no memory = 100 % of each) sees the first one's usage.
    whole = decide(dcu_pod("q", count="2"), ["dcu-1"], state,
                   default_node_policy="binpack", default_gpu_policy="spread", now=1700000001)
    assert whole == NoFit({"dcu-1": "1/2 AllocatedCardsInsufficientRequest, 1/2 CardInsufficientMemory"})


def test_a_pod_asking_nvidia_and_dcu_gets_one_allocation_per_vendor() -> None:
    state = dcu_state()
    gpu = DeviceInfo(id="GPU-0", count=10, devmem=8000, devcore=100, type="NVIDIA-A100", health=True)
    dcus = DCU.node_devices(dcu_node(dcu_devices()))
    state.set_node_devices("mixed", [gpu, *dcus])
    both = pod("m", uid="uid-m", containers=[
        container("g", limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"}),
        limits(count="1", mem="2048"),
    ])
    d = decide(both, ["mixed"], state, default_node_policy="binpack", default_gpu_policy="spread", now=1)
    assert isinstance(d, Chosen)
    assert d.annotations[keys.VGPU_ALLOCATED] == "GPU-0,NVIDIA,1000,0:;;"
    assert d.annotations["hami.io/dcu-devices-allocated"] == ";DCU-1,DCU,2048,100:;"
    assert _locking_request(both, VENDORS)  # one lock key for both: taken once
    alloc = state.reserve(both, d)
    assert set(alloc.devices) == {NVIDIA, "DCU"}
    assert state.quota.used("default", MEM) == 2048
    assert state.quota.used("default", "nvidia.com/gpumem") == 1000


def test_metrics_list_dcu_devices() -> None:
    state = dcu_state()
    d = decide(dcu_pod("p", count="1", mem="1024", cores="30"), ["dcu-1"], state,
               default_node_policy="binpack", default_gpu_policy="spread", now=1)
    assert isinstance(d, Chosen)
    state.reserve(dcu_pod("p", count="1", mem="1024", cores="30"), d)
    text = metrics_text(state)
    assert (
        'hami_gpu_memory_allocated_bytes{device_cores="100",device_index="1",device_type="DCU-Z100",'
        'device_uuid="DCU-1",node="dcu-1",zone="vGPU"} 1.073741824e+09'
    ) in text


async def test_unhealthy_dcu_is_cleaned_up_and_nvidia_devices_stay() -> None:
    """A node with both vendors whose DCU plugin is gone (stale handshake, no allocatable DCUs)
    loses its DCUs and the DCU handshake; its GPUs stay."""
    gpus = '[{"id":"GPU-0","count":10,"devmem":8000,"devcore":100,"type":"NVIDIA-A100","health":true}]'
    obj = dcu_node(dcu_devices(), name="mixed", **{keys.NODE_NVIDIA_REGISTER: gpus})
    obj["status"]["allocatable"]["nvidia.com/gpu"] = "10"
    async with registration(VENDORS, NOW) as reg:
        reg.add(obj)
        await reg.run()
        view = reg.state.ledger.view("mixed")
        assert view is not None and [d.id for d in view.devices] == ["GPU-0", "DCU-0", "DCU-1"]
        # The DCU plugin goes away: no allocatable DCUs, and nobody answers the handshake.
        reg.cluster.patch("nodes", "mixed", {"status": {"allocatable": {COUNT: "0"}}}, subresource="status")
        reg.refresh("mixed")
        reg.clock[0] = NOW + timedelta(seconds=61)
        report = await reg.run()
        assert report.cleaned == ["mixed"]
        view = reg.state.ledger.view("mixed")
        assert view is not None and [d.id for d in view.devices] == ["GPU-0"]
        annotations = reg.node_annotations("mixed")
        assert hygon.HANDSHAKE not in annotations and keys.NODE_HANDSHAKE in annotations


def test_template_nodes_read_dcu_inventories() -> None:
    """The simulation path (`Nodes` instead of `NodeNames`) reads every vendor's inventory."""
    nodes = [dcu_node(dcu_devices(), name="b"), dcu_node("bad", name="a"), node("c")]
    d = decide_on_nodes(dcu_pod("p", count="2", mem="1000"), nodes, VENDORS,
                        default_node_policy="binpack", default_gpu_policy="spread", now=5)
    assert isinstance(d, Chosen) and d.node == "b"
    assert d.annotations["hami.io/dcu-devices-allocated"] == "DCU-1,DCU,1000,100:DCU-0,DCU,1000,100:;"
    assert d.failed == {"a": "node unregistered", "c": "node unregistered"}


async def test_simulated_device_plugin_consumes_dcu_allocations() -> None:
    annotations = {
        "hami.io/dcu-devices-to-allocate": ";DCU-1,DCU,2048,100:;",
        "hami.io/dcu-devices-allocated": ";DCU-1,DCU,2048,100:;",
        keys.BIND_PHASE: "allocating",
    }
    bound = pod("p", annotations=annotations, containers=[container("a"), limits(count="1")])
    admitted = await admit_bound_pod(VENDORS, bound)
    assert admitted.phase == "Running"
    after = admitted.annotations
    assert after["hami.io/dcu-devices-to-allocate"] == ";;" and after[keys.BIND_PHASE] == "success"
    assert keys.NODE_LOCK not in admitted.node_annotations
