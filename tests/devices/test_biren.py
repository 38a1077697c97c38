"""Biren (§2.2, §3.3, §3.4, §4.4, §5.3, §6.2, §7): the vectors of HAMi v2.10.0's
pkg/device/biren/device_test.go, then the vendor inside the registry, the registration loop, the
decision, the bind, the webhook and the metrics. The `simulate` CLI end to end is in
test_iluvatar_biren_cli.py."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, timedelta
from typing import Any

import pytest

from tests.builders import container, node, pod
from tests.devices import vendorkit
from tests.devices.vendorkit import (
    HANDSHAKE_HEALTH,
    NOW,
    admit_bound_pod,
    device_infos,
    fit_checked,
    health_flags,
    metrics_text,
    privileged,
    readable,
    registration,
    review,
    usages,
)
from vgpu_scheduler.config import DeviceConfig
from vgpu_scheduler.configfile import DeviceConfigError, default_device_config, parse_device_config
from vgpu_scheduler.devices import biren
from vgpu_scheduler.devices.biren import BirenVendor
from vgpu_scheduler.devices.protocol import ResourceNames, Vendors
from vgpu_scheduler.devices.registry import build
from vgpu_scheduler.engine.decide import Chosen, NoFit, decide
from vgpu_scheduler.engine.requests import pod_requests
from vgpu_scheduler.engine.state import SchedulerState
from vgpu_scheduler.model import NVIDIA, ContainerDevice, ContainerDeviceRequest, DeviceInfo, DeviceUsage
from vgpu_scheduler.scheduler.extender import _locking_request
from vgpu_scheduler.wire import keys
from vgpu_scheduler.wire.inventory import InventoryError

COUNT = "birentech.com/gpu"
BR = BirenVendor(ResourceNames(COUNT, "", "", 0))
CHART = default_device_config()
VENDORS = build(CHART)



# --------------------------------------------------------------------------------------------
# Configuration


def test_chart_section() -> None:
    assert "Biren" in VENDORS.keys and VENDORS.keys[0] == NVIDIA
    v = VENDORS["Biren"]
    assert v.names == ResourceNames(COUNT, "", "", 0)
    assert v.managed_resources == {COUNT}
    assert (v.allocation_keys, v.handshake_key, v.cleanup_key, v.lock_key, v.inventory_keys) == (
        ("hami.io/Biren-devices-to-allocate", "hami.io/Biren-devices-allocated"),
        "hami.io/node-handshake-biren",
        "hami.io/node-handshake-biren",
        keys.NODE_LOCK,
        ("hami.io/node-biren-register",),
    )
    assert v.prefilter is False and v.scores_nodes is False  # ScoreNode is 0
    assert v.score_node([], annotations={}, devices=[], previous=[], policy="spread") == 0


def test_missing_section_registers_biren_with_an_empty_name() -> None:
    vendors = build(DeviceConfig())
    assert vendors["Biren"].names == ResourceNames("", "", "", 0)
    assert vendors["Biren"].managed_resources == frozenset()
    assert pod_requests(pod(containers=[container(limits={"": "1"})]), vendors) == [{}]


def test_custom_section_and_type_errors() -> None:
    config = parse_device_config("biren:\n  resourceCountName: ex.com/br\n")
    assert build(config)["Biren"].names.count == "ex.com/br"
    with pytest.raises(DeviceConfigError) as err:
        parse_device_config("biren:\n  resourceCountName: [a]\n", "f.yaml")
    assert err.value.key == "biren.resourceCountName"


# --------------------------------------------------------------------------------------------
# Requests (Test_GenerateResourceRequests): a count only


WHOLE = ContainerDeviceRequest(1, "Biren", 0, 100, 0)


@pytest.mark.parametrize(
    ("ctr", "expected"),
    [
        (container(limits={}, requests={}), None),
        (container(limits={COUNT: "1"}, requests={COUNT: "1"}), WHOLE),
        (container(limits={COUNT: "1"}), WHOLE),
        (container(requests={COUNT: "1"}), WHOLE),
        (container(limits={COUNT: "3"}), ContainerDeviceRequest(3, "Biren", 0, 100, 0)),
        (container(limits={COUNT: "4294967297"}), WHOLE),  # Go's int32 of the count
        (container(limits={COUNT: "0"}), ContainerDeviceRequest(0, "Biren", 0, 100, 0)),
        (container(limits={COUNT: "0.5"}), None),
        (container(limits={"nvidia.com/gpu": "1"}), None),
    ],
    ids=readable,
)
def test_requests(ctr: dict[str, Any], expected: ContainerDeviceRequest | None) -> None:
    assert BR.request(ctr) == expected


def test_non_positive_counts_ask_for_nothing() -> None:
    reqs = pod_requests(pod(containers=[container(limits={COUNT: "0"}), container(limits={COUNT: "-2"})]),
                        Vendors([BR]))
    assert reqs == [{}, {}]


# --------------------------------------------------------------------------------------------
# Inventory (Test_GetNodeDevices) and health (Test_CheckHealth)


def br_node(register: str | None, *, name: str = "n", allocatable: str | None = "4", **annos: str) -> Any:
    annotations = dict(annos)
    if register is not None:
        annotations[biren.REGISTER] = register
    return node(name, annotations=annotations, allocatable={COUNT: allocatable} if allocatable else None)


def test_inventory_json_with_cores_forced_to_100() -> None:
    register = '[{"id":"7-0","count":1,"devmem":32768,"type":"Biren","health":true,"devicepairscore":{}}]'
    devices = BR.node_devices(br_node(register))
    assert [(d.id, d.count, d.devmem, d.devcore, d.type, d.numa, d.health, d.index, d.device_vendor)
            for d in devices] == [("7-0", 1, 32768, 100, "Biren", 0, True, 0, "Biren")]
    register = '[{"id":"a","count":2,"devmem":1,"devcore":7,"type":"Biren","health":false}]'
    assert [(d.devcore, d.health) for d in BR.node_devices(br_node(register))] == [(100, False)]


@pytest.mark.parametrize(
    ("register", "error"),
    [
        (None, "annos not found hami.io/node-biren-register"),
        (":", "invalid node annotation JSON"),  # HAMi's test names it "no biren device"
        ("", "invalid node annotation JSON"),
        ("[]", "no gpu found on node"),
        ("null", "no gpu found on node"),
        ("{}", "must be an array"),
        ("a,1,1024,100,Biren,0,true:", "invalid node annotation JSON"),  # JSON only
        ('[{"id":"a","count":"1"}]', "field 'count' must be an int32"),
    ],
    ids=readable,
)
def test_inventory_errors(register: str | None, error: str) -> None:
    with pytest.raises(InventoryError, match=error):
        BR.node_devices(br_node(register))


@pytest.mark.parametrize(
    ("handshake", "allocatable", "healthy", "need_update", "write"),
    HANDSHAKE_HEALTH,
    ids=readable,
)
def test_health(
    handshake: str | None, allocatable: str | None, healthy: bool, need_update: bool, write: bool
) -> None:
    annos = {biren.HANDSHAKE: handshake} if handshake is not None else {}
    health = BR.check_health(br_node(":", allocatable=allocatable, **annos), NOW, UTC)
    assert health_flags(health) == (healthy, need_update, write)


# --------------------------------------------------------------------------------------------
# Fit (TestDevices_Fit, Test_checkType) and usage (TestDevices_AddResourceUsage)


@dataclasses.dataclass
class Dev(vendorkit.Dev):
    count: int = 1
    totalmem: int = 0
    totalcore: int = 0


def run_fit(
    devs: list[Dev], request: ContainerDeviceRequest, annos: dict[str, str] | None = None
) -> tuple[bool, list[ContainerDevice], str]:
    # Biren's fit never depends on the order: the quick verdict always answers.
    result = fit_checked(BR, request, device_infos(devs, "Biren"), usages(devs), annos=annos, exact=True)
    return result.ok, result.devices, result.reason


def req(nums: int, mem: int = 0, pct: int = 0, cores: int = 0, type_: str = "Biren"
        ) -> ContainerDeviceRequest:
    return ContainerDeviceRequest(nums, type_, mem, pct, cores)


@pytest.mark.parametrize(
    ("devs", "request_", "annos", "ids", "reason"),
    [
        ([Dev("dev-0"), Dev("dev-1", index=1)], req(1), {}, ["dev-1"], ""),
        ([Dev("dev-0")], req(1, 512, 0, 50, "OtherType"), {}, [], "1/1 CardTypeMismatch"),
        ([Dev("dev-1")], req(1), {biren.USE_UUID: "dev-0"}, [], "1/1 CardUuidMismatch"),
        ([Dev("dev-0")], req(1), {biren.NOUSE_UUID: "dev-0"}, [], "1/1 CardUuidMismatch"),
        ([Dev("dev-0", used=1)], req(1), {}, [], "1/1 CardTimeSlicingExhausted"),
        ([Dev("dev-0")], req(2), {}, [], "1/1 AllocatedCardsInsufficientRequest"),
        ([Dev("dev-0", count=2, used=1)], req(1), {keys.GPU_SCHEDULER_POLICY: "mutex"}, [],
         "1/1 ExclusiveDeviceAllocateConflict"),
        ([Dev("dev-0", count=100, totalmem=1280, totalcore=100),
          Dev("dev-1", count=100, totalmem=1280, totalcore=100, index=1)], req(3, 512, 0, 20), {}, [],
         "2/2 AllocatedCardsInsufficientRequest"),
        ([Dev("dev-0", health=False)], req(1), {}, [], "1/1 CardNotHealth"),
        # Neither memory nor cores are checked: a full device with a free slot is taken.
        ([Dev("dev-0", count=4, used=1, totalmem=100, usedmem=100, totalcore=100, usedcores=100)],
         req(1, 0, 100, 0), {}, ["dev-0"], ""),
        # the declared but unread birentech.com/use-biren, and other vendors' annotations, mean nothing
        ([Dev("dev-0")], req(1), {"birentech.com/nouse-biren": "Biren", keys.NOUSE_GPUTYPE: "Biren"},
         ["dev-0"], ""),
        ([Dev("dev-0"), Dev("dev-1", index=1)], req(1), {biren.USE_UUID: "dev-0, x"}, ["dev-0"], ""),
        ([Dev("dev-0", used=1), Dev("dev-1", health=False), Dev("dev-2", index=2)], req(2), {}, [],
         "1/3 AllocatedCardsInsufficientRequest, 1/3 CardNotHealth, 1/3 CardTimeSlicingExhausted"),
    ],
    ids=readable,
)
def test_fit(
    devs: list[Dev], request_: ContainerDeviceRequest, annos: dict[str, str], ids: list[str], reason: str
) -> None:
    ok, chosen, got_reason = run_fit(devs, request_, annos)
    assert (ok, got_reason) == (not reason, reason)
    assert [d.uuid for d in chosen] == ids


def test_fit_entries_record_no_memory_and_the_request_cores() -> None:
    devs = [Dev("a", totalmem=32768, index=5), Dev("b", totalmem=32768, index=6)]
    ok, chosen, _ = run_fit(devs, req(2, 0, 100))
    assert ok and chosen == [ContainerDevice("b", "Biren", 0, 0, 6), ContainerDevice("a", "Biren", 0, 0, 5)]
    u = DeviceUsage(1, 0, 0)
    BR.add_usage(DeviceInfo(id="dev-0"), u, ContainerDevice("dev-0", "Biren", 0, 0), container_index=0,
                 device_index=0, migs=[])
    assert u == DeviceUsage(2, 0, 0)


# --------------------------------------------------------------------------------------------
# Annotations (Test_PatchAnnotations), lock (TestDevices_LockNode), admission (Test_MutateAdmission)


def test_patch_annotations() -> None:
    entries = [[ContainerDevice("test1", "Biren", 2048, 1, 1)]]
    assert BR.patch_annotations(entries, [], node="n", now=1) == {
        "hami.io/Biren-devices-to-allocate": "test1,Biren,2048,1:;",
        "hami.io/Biren-devices-allocated": "test1,Biren,2048,1:;",
    }
    assert BR.patch_annotations([], [], node="n", now=1) == {}


@pytest.mark.parametrize(
    ("p", "locks"),
    [
        (pod(containers=[]), False),
        (pod(containers=[container(requests={COUNT: "1"})]), True),
        (pod(containers=[container(limits={COUNT: "1"})]), True),
        (pod(init_containers=[container(limits={COUNT: "1"})], containers=[container()]), False),
    ],
    ids=readable,
)
def test_lock_only_for_regular_containers(p: dict[str, Any], locks: bool) -> None:
    assert _locking_request(p, VENDORS) is locks


@pytest.mark.parametrize(
    ("ctr", "has"),
    [
        (container(limits={COUNT: "1"}), True),
        (container(requests={COUNT: "1"}), False),  # MutateAdmission reads limits
        (container(limits={"nvidia.com/gpu": "1"}), False),
    ],
    ids=readable,
)
def test_mutate(ctr: dict[str, Any], has: bool) -> None:
    before = json.dumps(ctr)
    assert BR.mutate(ctr, pod()) is has
    assert json.dumps(ctr) == before  # nothing changes


def test_webhook_puts_biren_pods_under_our_scheduler_and_denies_privileged() -> None:
    response = review(pod(containers=[container(limits={COUNT: "1"})]), VENDORS)
    assert response.allowed
    assert [op["path"] for op in response.patch] == ["/spec/schedulerName"]
    denied = review(privileged(container(limits={COUNT: "1"})), VENDORS)
    assert not denied.allowed and denied.message == "container c is privileged"


# --------------------------------------------------------------------------------------------
# In the scheduler: registration, decision, metrics, device plugin


def br_devices(n: int = 2, count: int = 1) -> str:
    return json.dumps([{"id": f"BR-{i}", "count": count, "devmem": 65536, "type": "Biren", "health": True,
                        "index": i} for i in range(n)])


async def test_registration_reads_biren_nodes_and_stamps_the_handshake() -> None:
    async with registration(VENDORS, NOW) as reg:
        reg.add(br_node(br_devices(), name="br-1"), br_node("[{", name="br-broken"),
                    br_node(br_devices(1), name="br-2"))
        report = await reg.run()
        view = reg.state.ledger.view("br-1")
        assert view is not None
        assert [(d.id, d.devcore) for d in view.devices] == [("BR-0", 100), ("BR-1", 100)]
        assert reg.state.ledger.view("br-2") is not None
        assert reg.state.ledger.view("br-broken") is None
        assert list(report.errors) == ["br-broken"]
        assert report.errors["br-broken"].startswith("invalid node annotation JSON")
        annotations = reg.node_annotations("br-1")
        assert annotations[biren.HANDSHAKE] == "Requesting_2026-11-29 21:03:30"


async def test_unhealthy_biren_is_cleaned_up_and_its_handshake_deleted() -> None:
    gpus = '[{"id":"GPU-0","count":10,"devmem":8000,"devcore":100,"type":"NVIDIA-A100","health":true}]'
    obj = br_node(br_devices(), name="mixed", **{keys.NODE_NVIDIA_REGISTER: gpus})
    obj["status"]["allocatable"]["nvidia.com/gpu"] = "10"
    async with registration(VENDORS, NOW) as reg:
        reg.add(obj)
        await reg.run()
        reg.cluster.patch("nodes", "mixed", {"status": {"allocatable": {COUNT: "0"}}}, subresource="status")
        reg.refresh("mixed")
        reg.clock[0] = NOW + timedelta(seconds=61)
        report = await reg.run()
        assert report.cleaned == ["mixed"]
        view = reg.state.ledger.view("mixed")
        assert view is not None and [d.id for d in view.devices] == ["GPU-0"]
        assert biren.HANDSHAKE not in reg.node_annotations("mixed")


def br_pod(name: str, n: str = "1") -> dict[str, Any]:
    return pod(name, uid=f"uid-{name}", containers=[container(limits={COUNT: n})],
               status={"phase": "Pending"})


def br_state(count: int = 1) -> SchedulerState:
    state = SchedulerState(VENDORS)
    state.set_node_devices("br-1", BR.node_devices(br_node(br_devices(2, count))))
    return state


def test_decision_writes_the_biren_annotations_and_slots_run_out() -> None:
    state = br_state()
    first = br_pod("p")
    d = decide(first, ["br-1"], state, default_node_policy="binpack", default_gpu_policy="spread",
               now=1700000000)
    assert isinstance(d, Chosen)
    assert d.annotations == {
        keys.VGPU_NODE: "br-1",
        keys.VGPU_TIME: "1700000000",
        "hami.io/Biren-devices-to-allocate": "BR-1,Biren,0,0:;",
        "hami.io/Biren-devices-allocated": "BR-1,Biren,0,0:;",
    }
    state.reserve(first, d)
    second = br_pod("q")
    d2 = decide(second, ["br-1"], state, default_node_policy="binpack", default_gpu_policy="spread", now=2)
    assert isinstance(d2, Chosen) and d2.annotations["hami.io/Biren-devices-allocated"] == "BR-0,Biren,0,0:;"
    state.reserve(second, d2)
    third = decide(br_pod("r"), ["br-1"], state, default_node_policy="binpack", default_gpu_policy="spread",
                   now=3)
    assert third == NoFit({"br-1": "2/2 CardTimeSlicingExhausted"})
    assert decide(br_pod("s", "3"), ["br-1"], br_state(), default_node_policy="binpack",
                  default_gpu_policy="spread", now=4) == NoFit({"br-1": "NodeInsufficientDevice"})


def test_shared_devices_take_several_pods() -> None:
    """A device with count 2 holds two pods; no memory is ever reserved."""
    state = br_state(count=2)
    for i in range(4):
        p = br_pod(f"p{i}")
        d = decide(p, ["br-1"], state, default_node_policy="binpack", default_gpu_policy="binpack", now=i)
        assert isinstance(d, Chosen)
        state.reserve(p, d)
    view = state.ledger.view("br-1")
    assert view is not None and [(u.used, u.usedmem) for u in view.usage] == [(2, 0), (2, 0)]


def test_metrics_list_biren_devices() -> None:
    state = br_state()
    p = br_pod("p")
    d = decide(p, ["br-1"], state, default_node_policy="binpack", default_gpu_policy="spread", now=1)
    assert isinstance(d, Chosen)
    state.reserve(p, d)
    text = metrics_text(state)
    assert ('hami_gpu_shared_count{device_index="1",device_type="Biren",device_uuid="BR-1",node="br-1",'
            'zone="vGPU"} 1') in text
    assert ('hami_gpu_core_limit_ratio{device_index="0",device_type="Biren",device_uuid="BR-0",node="br-1",'
            'zone="vGPU"} 100') in text


async def test_simulated_device_plugin_consumes_biren_allocations() -> None:
    annotations = {
        "hami.io/Biren-devices-to-allocate": "BR-0,Biren,0,0:BR-1,Biren,0,0:;",
        "hami.io/Biren-devices-allocated": "BR-0,Biren,0,0:BR-1,Biren,0,0:;",
        keys.BIND_PHASE: "allocating",
    }
    bound = pod("p", annotations=annotations, containers=[container(limits={COUNT: "2"})])
    admitted = await admit_bound_pod(VENDORS, bound)
    assert admitted.phase == "Running"
    after = admitted.annotations
    assert after["hami.io/Biren-devices-to-allocate"] == ";" and after[keys.BIND_PHASE] == "success"
    assert keys.NODE_LOCK not in admitted.node_annotations
