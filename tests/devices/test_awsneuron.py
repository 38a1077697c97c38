"""AWS Neuron end to end (§2.2, §3.2, §4.4, §5.3, §6.2, §7): the vectors of HAMi v2.10.0's
pkg/device/awsneuron/device_test.go, then the vendor inside the registry, the registration loop,
the decision, the webhook, the simulated device plugin and `vgpu-scheduler simulate`."""

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
    admit_bound_pod,
    config_error_key,
    health_flags,
    metrics_text,
    readable,
    registration,
    review,
    simulate_report,
)
from vgpu_scheduler.config import DeviceConfig
from vgpu_scheduler.configfile import default_device_config, parse_device_config
from vgpu_scheduler.devices import awsneuron as aws
from vgpu_scheduler.devices.awsneuron import (
    AWSNeuronVendor,
    NeuronDevice,
    add_core_usage,
    core_count,
    graph_select,
)
from vgpu_scheduler.devices.protocol import MutationError, ResourceNames, Vendors
from vgpu_scheduler.devices.registry import build
from vgpu_scheduler.engine.decide import Chosen, NoFit, decide, decide_on_nodes
from vgpu_scheduler.engine.fit import pod_fit_context
from vgpu_scheduler.engine.requests import pod_requests
from vgpu_scheduler.engine.state import SchedulerState
from vgpu_scheduler.model import ContainerDevice, ContainerDeviceRequest, DeviceInfo, DeviceUsage
from vgpu_scheduler.scheduler.extender import _locking_request
from vgpu_scheduler.wire import keys
from vgpu_scheduler.wire.inventory import InventoryError

COUNT, CORES = "aws.amazon.com/neuron", "aws.amazon.com/neuroncore"
NAMES = ResourceNames(COUNT, "", CORES)
CHART = default_device_config()
SECTION = """\
awsneuron:
  resourceCountName: "aws.amazon.com/neuron"
  resourceCoreName: "aws.amazon.com/neuroncore"
"""



def neuron(cores_per_device: int = 2) -> AWSNeuronVendor:
    """A vendor that has seen a node with `cores_per_device` (0: none yet)."""
    vendor = AWSNeuronVendor(NAMES)
    vendor.cores_per_device = cores_per_device
    return vendor


def aws_node(name: str = "test", *, devices: Any = 1, cores: Any = 2, itype: str | None = "inf2") -> Any:
    capacity = {k: str(v) for k, v in ((COUNT, devices), (CORES, cores)) if v is not None}
    labels = {aws.INSTANCE_TYPE_LABEL: itype} if itype is not None else None
    return node(name, labels=labels, capacity=capacity, allocatable=dict(capacity))


def entry(uuid: str, idx: int, cores: int) -> ContainerDevice:
    return ContainerDevice(uuid, "AWSNeuron", 0, cores, idx)


def limits(**kw: str) -> dict[str, Any]:
    names = {"count": COUNT, "cores": CORES}
    return container(limits={names[k]: v for k, v in kw.items()})


def requests_only(**kw: str) -> dict[str, Any]:
    names = {"count": COUNT, "cores": CORES}
    return container(requests={names[k]: v for k, v in kw.items()})


# --------------------------------------------------------------------------------------------
# Configuration and registration


def test_chart_section_registers_awsneuron_after_the_earlier_vendors() -> None:
    vendors = build(CHART)
    assert vendors.keys.index("AWSNeuron") > vendors.keys.index("DCU")
    v = vendors["AWSNeuron"]
    assert v.names == ResourceNames(COUNT, "", CORES)
    assert v.managed_resources == {COUNT, CORES}  # both are extender resources in the chart
    assert v.allocation_keys == ("", "hami.io/aws-neuron-devices-allocated")  # no to-allocate key
    assert (v.handshake_key, v.cleanup_key, v.lock_key, v.inventory_keys) == (None, None, None, ())


def test_missing_section_registers_awsneuron_with_empty_names() -> None:
    vendors = build(DeviceConfig())
    assert vendors["AWSNeuron"].names == ResourceNames("", "", "")
    assert pod_requests(pod(containers=[container(limits={"": "1"})]), vendors) == [{}]
    with pytest.raises(InventoryError, match=r"^device not found $"):
        vendors["AWSNeuron"].node_devices(aws_node())


@pytest.mark.parametrize(
    ("yaml", "key"),
    [
        ("awsneuron:\n  resourceCountName: 5\n", "awsneuron.resourceCountName"),
        ("awsneuron:\n  resourceCoreName: [a]\n", "awsneuron.resourceCoreName"),
        ("awsneuron: text\n", "awsneuron"),
    ],
    ids=readable,
)
def test_bad_section_is_a_config_error(yaml: str, key: str) -> None:
    assert config_error_key(yaml) == key


def test_custom_section() -> None:
    config = parse_device_config("awsneuron:\n  resourceCountName: example.com/neuron\n")
    assert build(config)["AWSNeuron"].names == ResourceNames("example.com/neuron", "", "")


# --------------------------------------------------------------------------------------------
# Requests (Test_GenerateResourceRequests, Test_splitCoreRequest)


def req(nums: int, cores: int) -> ContainerDeviceRequest:
    return ContainerDeviceRequest(nums, "AWSNeuron", 0, 0, cores)


@pytest.mark.parametrize(
    ("ctr", "expected"),
    [
        (container(limits={COUNT: "1"}, requests={COUNT: "1"}), req(1, 2)),
        (requests_only(count="2147483648"), None),
        (container(limits={CORES: "1"}, requests={CORES: "1"}), req(1, 1)),
        (container(limits={CORES: "3"}, requests={CORES: "3"}), None),
        (requests_only(cores="3"), None),
        (limits(cores="0"), None),
        (limits(cores="-2"), None),
        (limits(cores=str(2 * (2**31 - 1) + 2)), None),
        # Beyond HAMi's table: requests only, several devices, a count winning over cores,
        # a non-integer count.
        (requests_only(count="3"), req(3, 2)),
        (limits(cores="6"), req(3, 2)),
        (limits(cores="2"), req(1, 2)),
        (limits(count="1", cores="1"), req(1, 2)),
        (limits(count="1.5"), None),
        (container(limits={}), None),
        (container(), None),
    ],
    ids=readable,
)
def test_requests(ctr: dict[str, Any], expected: ContainerDeviceRequest | None) -> None:
    assert neuron().request(ctr) == expected


@pytest.mark.parametrize(
    ("per_device", "cores", "shape", "error"),
    [
        (2, 1, (1, 1), ""),
        (2, 2, (1, 2), ""),
        (2, 6, (3, 2), ""),
        (2, 3, None, "aws.amazon.com/neuroncore must be 1 or a multiple of 2, got 3"),
        (4, 4, (2, 2), ""),  # only two cores of a device are addressable
        (0, 4, (2, 2), ""),  # no node seen yet: the addressable limit
        (1, 2**31, None,
         "aws.amazon.com/neuroncore needs 2147483648 devices, which exceeds the maximum of 2147483647"),
    ],
    ids=readable,
)
def test_split_cores(per_device: int, cores: int, shape: tuple[int, int] | None, error: str) -> None:
    if shape is not None:
        assert neuron(per_device).split_cores(cores) == shape
    else:
        with pytest.raises(MutationError) as err:
            neuron(per_device).split_cores(cores)
        assert str(err.value) == error


def test_requests_before_any_node_is_seen() -> None:
    """The cores per device are learnt from the first node: before it, a device request asks 0 cores."""
    fresh = neuron(0)
    assert fresh.request(limits(count="1")) == req(1, 0)
    assert fresh.request(limits(cores="4")) == req(2, 2)


# --------------------------------------------------------------------------------------------
# Admission (Test_MutateAdmission)


@pytest.mark.parametrize(
    ("ctr", "has", "error"),
    [
        (limits(count="2"), True, ""),
        (requests_only(count="2"), True, ""),
        (requests_only(count="2147483648"), False, "aws.amazon.com/neuron must not exceed 2147483647"),
        (limits(cores="2"), True, ""),
        (limits(cores="3"), False, "aws.amazon.com/neuroncore must be 1 or a multiple of 2, got 3"),
        (requests_only(cores="3"), False, "aws.amazon.com/neuroncore must be 1 or a multiple of 2, got 3"),
        (limits(cores="0"), False, "aws.amazon.com/neuroncore must be greater than 0"),
        (limits(cores="-2"), False, "aws.amazon.com/neuroncore must be greater than 0"),
        (limits(cores="4294967296"), False, "aws.amazon.com/neuroncore must not exceed 4294967294"),
        (limits(count="500m"), False, "aws.amazon.com/neuron must be an integer"),
        (container(limits={}), False, ""),
    ],
    ids=readable,
)
def test_mutate(ctr: dict[str, Any], has: bool, error: str) -> None:
    before = json.dumps(ctr, sort_keys=True)
    if error:
        with pytest.raises(MutationError) as err:
            neuron(0).mutate(ctr, pod())
        assert str(err.value) == error
    else:
        assert neuron(0).mutate(ctr, pod()) is has
    assert json.dumps(ctr, sort_keys=True) == before  # the container is never changed


def test_webhook_denies_an_odd_core_count_with_hamis_text() -> None:
    vendors = build(CHART)
    ok = review(pod(containers=[limits(cores="2")]), vendors)
    assert ok.allowed and any(op["path"] == "/spec/schedulerName" for op in ok.patch)
    bad = review(pod(containers=[limits(cores="3")]), vendors)
    assert (bad.allowed, bad.code, bad.message) == (
        False, 500, "aws.amazon.com/neuroncore must be 1 or a multiple of 2, got 3"
    )


# --------------------------------------------------------------------------------------------
# Inventory (Test_GetNodeDevices) and health


def test_inventory_from_capacity() -> None:
    vendor = neuron(0)
    assert vendor.node_devices(aws_node()) == [
        NeuronDevice(id="test-AWSNeuron-0", index=0, count=2, devmem=0, devcore=3, type="AWSNeuron", numa=0,
                     mode="", health=True, device_vendor="AWSNeuron", instance_type="inf2")
    ]
    assert vendor.cores_per_device == 2


def test_cores_per_device_are_learnt_once() -> None:
    """HAMi keeps the first node's ratio for every later node (and request)."""
    vendor = neuron(0)
    vendor.node_devices(aws_node("a", devices=2, cores=2))  # one core per device
    devices = vendor.node_devices(aws_node("b", devices=2, cores=4))
    assert [(d.id, d.count, d.devcore) for d in devices] == [("b-AWSNeuron-0", 1, 1), ("b-AWSNeuron-1", 1, 1)]
    assert vendor.request(limits(count="1")) == req(1, 1)


def test_eight_cores_per_device_mask() -> None:
    devices = neuron(0).node_devices(aws_node(devices=1, cores=8, itype=None))
    assert (devices[0].count, devices[0].devcore, devices[0].instance_type) == (8, 255, "")


@pytest.mark.parametrize(
    ("devices", "cores", "error"),
    [(None, 2, "device not found aws.amazon.com/neuron"),
     (0, 2, "device not found aws.amazon.com/neuron"),
     ("1.5", 2, "device not found aws.amazon.com/neuron"),
     ("junk", 2, "device not found aws.amazon.com/neuron")],
    ids=readable,
)
def test_inventory_errors(devices: Any, cores: Any, error: str) -> None:
    with pytest.raises(InventoryError) as err:
        neuron(0).node_devices(aws_node(devices=devices, cores=cores))
    assert str(err.value) == error


def test_always_healthy_without_handshake() -> None:
    health = neuron().check_health(aws_node(), NOW, UTC)
    assert health_flags(health) == (True, True, False)


# --------------------------------------------------------------------------------------------
# Fit (Test_countMaskAvailable, Test_graphSelect, TestDevices_Fit)


@pytest.mark.parametrize(("mask", "cores"), [(3, 2), (2, 1), (1, 1), (0, 0), (-1, 0)], ids=readable)
def test_core_count(mask: int, cores: int) -> None:
    assert core_count(mask) == cores


@pytest.mark.parametrize(
    ("taken", "cores", "mask"), [(0, 2, 3), (0, 1, 1), (1, 1, 2), (2, 1, 1), (0, 8, 3)], ids=readable
)
def test_add_core_usage(taken: int, cores: int, mask: int) -> None:
    assert add_core_usage(taken, cores) == mask


def neuron_devices(n: int, itype: str, healthy: bool = True) -> list[DeviceInfo]:
    return [
        NeuronDevice(id=f"d{i}", index=i, count=2, devcore=3, type="AWSNeuron", health=healthy,
                     instance_type=itype)
        for i in range(n)
    ]


def sixteen(
    itype: str, used: tuple[int, ...] = (), healthy: bool = True
) -> tuple[list[DeviceInfo], list[DeviceUsage]]:
    devices = neuron_devices(16, itype, healthy)
    return devices, [DeviceUsage(1 if i in used else 0) for i in range(16)]


@pytest.mark.parametrize(
    ("itype", "used", "count", "places"),
    [
        ("inf2", (), 16, list(range(16))),
        ("trn", (7, 13), 8, []),
        ("trn", (7,), 8, list(range(8, 16))),
        ("inf", (5, 14), 8, list(range(6, 14))),
        # Beyond HAMi's table: counts without an aligned block, unhealthy devices.
        ("trn", (), 2, []),
        ("trn", (), 4, [0, 1, 2, 3]),
    ],
    ids=readable,
)
def test_graph_select(itype: str, used: tuple[int, ...], count: int, places: list[int]) -> None:
    devices, usage = sixteen(itype, used)
    assert graph_select(devices, usage, list(range(16)), count) == places


def test_graph_select_skips_unhealthy_devices() -> None:
    devices, usage = sixteen("inf2", healthy=False)
    assert graph_select(devices, usage, list(range(16)), 2) == []


@dataclasses.dataclass
class Dev:
    id: str
    index: int = 0
    used: int = 0
    count: int = 2
    totalcore: int = 3
    usedcores: int = 0
    itype: str = "trn"
    health: bool = True


def run_fit(
    devs: list[Dev], request: ContainerDeviceRequest, annos: dict[str, str] | None = None
) -> tuple[bool, list[ContainerDevice], str]:
    vendor = neuron()
    devices: list[DeviceInfo] = [
        NeuronDevice(id=d.id, index=d.index, count=d.count, devcore=d.totalcore, type="AWSNeuron",
                     health=d.health, instance_type=d.itype)
        for d in devs
    ]
    usage = [DeviceUsage(d.used, 0, d.usedcores) for d in devs]
    ctx = pod_fit_context(pod(annotations=annos or {}), vendors=Vendors([vendor]))
    order = list(range(len(devs)))
    result = vendor.fit(request, devices, usage, order, ctx=ctx, cordoned=frozenset(), allocated=())
    quick = vendor.quick_verdict(request, devices, usage, order, ctx=ctx, cordoned=frozenset())
    assert quick is None or quick == result.reason  # the order-free verdict agrees where it answers
    return result.ok, result.devices, result.reason


@pytest.mark.parametrize(
    ("devs", "request_", "annos", "ok", "ids", "reason"),
    [
        ([Dev("dev-0"), Dev("dev-1", count=12)], req(1, 2), {}, True, ["dev-1"], ""),
        ([Dev("dev-0")], req(2, 2), {}, False, [], "1/1 NumaNotFit"),
        ([Dev("dev-0", usedcores=1)], req(1, 2), {}, False, [], "1/1 CardInsufficientCore"),
        ([Dev("dev-0")], ContainerDeviceRequest(1, "OtherType", 0, 0, 2), {}, False, [],
         "1/1 CardTypeMismatch"),
        ([Dev("dev-1")], req(1, 2), {aws.USE_UUID: "dev-0"}, False, [], "1/1 CardUuidMismatch"),
        ([Dev("dev-0")], req(1, 2), {aws.NOUSE_UUID: "dev-0"}, False, [], "1/1 CardUuidMismatch"),
        ([Dev("dev-0", used=2)], req(1, 2), {}, False, [], "1/1 CardTimeSlicingExhausted"),
        ([Dev("dev-0", used=1)], req(1, 2), {keys.GPU_SCHEDULER_POLICY: "mutex"}, False, [],
         "1/1 ExclusiveDeviceAllocateConflict"),
        ([Dev("dev-0"), Dev("dev-1", index=1)], req(2, 2), {}, False, [], "1/2 NumaNotFit"),
        ([Dev("dev-0", health=False)], req(1, 2), {}, False, [], "1/1 CardNotHealth"),
        # Beyond HAMi's table: several devices on an Inferentia ring, a free core left.
        ([Dev("dev-0", itype="inf2"), Dev("dev-1", index=1, itype="inf2")], req(2, 2), {}, True,
         ["dev-0", "dev-1"], ""),
        ([Dev("dev-0", used=1, usedcores=1)], req(1, 1), {}, True, ["dev-0"], ""),
        ([Dev("dev-0", used=1, usedcores=1), Dev("dev-1", health=False)], req(1, 2), {}, False, [],
         "1/2 CardInsufficientCore, 1/2 CardNotHealth"),
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


@pytest.mark.parametrize(
    ("taken", "request_", "mask"),
    [(0, req(1, 2), 3), (0, req(1, 1), 1), (1, req(1, 1), 2), (2, req(1, 1), 1)],
    ids=readable,
)
def test_fit_takes_the_free_cores_as_a_mask(taken: int, request_: ContainerDeviceRequest, mask: int) -> None:
    _, got, _ = run_fit([Dev("dev-0", index=5, used=1 if taken else 0, usedcores=taken)], request_)
    assert got == [ContainerDevice("dev-0", "AWSNeuron", 0, mask, 5)]


def test_several_devices_read_places_of_the_order_as_indexes() -> None:
    """HAMi's quirk: graphSelect returns places in the policy order, Fit takes the devices whose
    INDEX equals each place (whole devices: usedmem 0, usedcores the full mask)."""
    vendor = neuron()
    devices = neuron_devices(4, "inf2")
    usage = [DeviceUsage(), DeviceUsage(), DeviceUsage(), DeviceUsage(1, 0, 1)]
    ctx = pod_fit_context(pod(), vendors=Vendors([vendor]))
    # Places 0 and 1 of this order (devices 2 and 0) are free: devices with INDEX 0 and 1 are taken.
    result = vendor.fit(req(2, 2), devices, usage, [2, 0, 3, 1], ctx=ctx, cordoned=frozenset(), allocated=())
    assert result.ok and result.positions == [0, 1]
    assert result.devices == [entry("d0", 0, 3), entry("d1", 1, 3)]
    none = frozenset[str]()
    assert vendor.quick_verdict(req(2, 2), devices, usage, [0, 1, 2, 3], ctx=ctx, cordoned=none) is None


# --------------------------------------------------------------------------------------------
# Annotations (Test_PatchAnnotations) and the node lock


def extras(node_name: str, ids: str, now: int = 1700000000) -> dict[str, str]:
    return {"AWS_NEURON_IDS": ids, "NEURON_ALLOC_TIME": f"{now}000000000", "NEURON_ALLOCATED": "false",
            "aws.amazon.com/predicate-node": node_name}


def test_patch_annotations_device_request() -> None:
    p = pod(containers=[limits(count="2")])
    got = neuron().patch_annotations([[entry("test1", 0, 2), entry("test2", 1, 3)]], [], node="n1",
                                     now=1700000000, pod=p)
    assert got == {"hami.io/aws-neuron-devices-allocated": "test1,AWSNeuron,0,2:test2,AWSNeuron,0,3:;",
                   **extras("n1", "0,1")}


def test_patch_annotations_core_request() -> None:
    p = pod(containers=[limits(cores="2")])
    got = neuron().patch_annotations([[entry("test1", 0, 3)]], [], node="n1", now=1700000000, pod=p)
    assert got == {"hami.io/aws-neuron-devices-allocated": "test1,AWSNeuron,0,3:;", **extras("n1", "0,1"),
                   "NEURON_RESOURCE_TYPE": CORES}
    # The second core of device 3 is core 7.
    got = neuron().patch_annotations([[entry("t", 3, 2)]], [], node="n1", now=1700000000, pod=p)
    assert got["AWS_NEURON_IDS"] == "7"


def test_patch_annotations_init_container_and_accumulated_ids() -> None:
    p = pod(init_containers=[limits(count="1")], containers=[container()])
    got = neuron().patch_annotations([[entry("test1", 0, 3)], []], [], node="n1", now=1700000000, pod=p)
    assert got == {"hami.io/aws-neuron-devices-allocated": "test1,AWSNeuron,0,3:;;", **extras("n1", "0")}
    # The IDs accumulate over the containers (HAMi never resets them).
    two = pod(containers=[limits(count="1"), limits(count="1")])
    got = neuron().patch_annotations([[entry("a", 2, 3)], [entry("b", 5, 3)]], [], node="n1", now=1, pod=two)
    assert got["AWS_NEURON_IDS"] == "2,5"


def test_patch_annotations_count_only_in_requests_reads_as_cores() -> None:
    """HAMi looks for the count in `limits` only: a requests-only count writes core indexes."""
    p = pod(containers=[requests_only(count="1")])
    got = neuron().patch_annotations([[entry("a", 1, 3)]], [], node="n1", now=1, pod=p)
    assert (got["AWS_NEURON_IDS"], got["NEURON_RESOURCE_TYPE"]) == ("2,3", CORES)


def test_patch_annotations_without_pod_or_devices() -> None:
    assert neuron().patch_annotations([[entry("a", 0, 3)]], [], node="n1", now=1) == {
        "hami.io/aws-neuron-devices-allocated": "a,AWSNeuron,0,3:;"
    }
    assert neuron().patch_annotations([], [], node="n1", now=1) == {}


def test_never_locks() -> None:
    assert not _locking_request(pod(containers=[limits(count="1")]), build(CHART))


def test_node_score_is_zero() -> None:
    vendor = neuron()
    assert not vendor.scores_nodes
    devices = vendor.node_devices(aws_node())
    assert vendor.score_node([[entry("test-AWSNeuron-0", 0, 3)]], annotations={}, devices=devices,
                             previous=[DeviceUsage()], policy="binpack") == 0


# --------------------------------------------------------------------------------------------
# In the scheduler: registration, decision, metrics, device plugin, simulate


async def test_registration_reads_capacity_and_one_broken_node_affects_no_other() -> None:
    async with registration(build(CHART), NOW) as reg:
        reg.add(aws_node("aws-1", devices=2, cores=4), aws_node("aws-broken", devices="junk"),
                    aws_node("aws-2", devices=1, cores=2), node("cpu-1", capacity={"cpu": "4"}))
        report = await reg.run()
        view = reg.state.ledger.view("aws-1")
        assert view is not None and [d.id for d in view.devices] == ["aws-1-AWSNeuron-0", "aws-1-AWSNeuron-1"]
        assert reg.state.ledger.view("aws-2") is not None and reg.state.ledger.view("aws-broken") is None
        # Only the node whose capacity names the resource reports the error; a node without any
        # Neuron resource has no such devices (NVIDIA's missing annotation is its error).
        assert report.errors["aws-broken"].startswith("device not found aws.amazon.com/neuron")
        assert report.errors["cpu-1"] == "annos not found hami.io/node-nvidia-register"
        annotations = reg.node_annotations("aws-1")
        assert not [k for k in annotations if "neuron" in k.lower()]  # no handshake of its own


def aws_pod(name: str, *ctrs: dict[str, Any]) -> dict[str, Any]:
    return pod(name, uid=f"uid-{name}", containers=list(ctrs), status={"phase": "Pending"})


def aws_state(itype: str = "inf2", devices: int = 4) -> SchedulerState:
    state = SchedulerState(build(CHART))
    obj = aws_node("aws-1", devices=devices, cores=2 * devices, itype=itype)
    state.set_node_devices("aws-1", state.vendors["AWSNeuron"].node_devices(obj))
    return state


def test_decision_writes_the_neuron_annotations() -> None:
    state = aws_state()
    d = decide(aws_pod("p", limits(cores="1")), ["aws-1"], state, default_node_policy="binpack",
               default_gpu_policy="spread", now=1700000000)
    assert isinstance(d, Chosen)
    # spread: all idle and equal, the last in inventory order; its first core.
    assert d.annotations == {
        keys.VGPU_NODE: "aws-1", keys.VGPU_TIME: "1700000000",
        "hami.io/aws-neuron-devices-allocated": "aws-1-AWSNeuron-3,AWSNeuron,0,1:;",
        "AWS_NEURON_IDS": "6", "NEURON_RESOURCE_TYPE": CORES, **extras("aws-1", "6"),
    }
    state.reserve(aws_pod("p", limits(cores="1")), d)
    # binpack-like GPU policy: the used device first, its other core.
    again = decide(aws_pod("q", limits(cores="1")), ["aws-1"], state, default_node_policy="binpack",
                   default_gpu_policy="binpack", now=1700000001)
    assert isinstance(again, Chosen)
    assert again.annotations["hami.io/aws-neuron-devices-allocated"] == "aws-1-AWSNeuron-3,AWSNeuron,0,2:;"
    assert again.annotations["AWS_NEURON_IDS"] == "7"


def test_decision_for_whole_devices() -> None:
    state = aws_state()
    d = decide(aws_pod("p", limits(count="2")), ["aws-1"], state, default_node_policy="binpack",
               default_gpu_policy="spread", now=5)
    assert isinstance(d, Chosen)
    assert d.annotations["hami.io/aws-neuron-devices-allocated"] == (
        "aws-1-AWSNeuron-0,AWSNeuron,0,3:aws-1-AWSNeuron-1,AWSNeuron,0,3:;"
    )
    assert d.annotations["AWS_NEURON_IDS"] == "0,1" and "NEURON_RESOURCE_TYPE" not in d.annotations
    # Two devices on a Trainium node: no aligned block of 2.
    trn = decide(aws_pod("p", limits(count="2")), ["aws-1"], aws_state("trn1.32xlarge"),
                 default_node_policy="binpack", default_gpu_policy="spread", now=5)
    assert trn == NoFit({"aws-1": "1/4 NumaNotFit"})
    too_many = decide(aws_pod("p", limits(count="5")), ["aws-1"], state, default_node_policy="binpack",
                      default_gpu_policy="spread", now=5)
    assert too_many == NoFit({"aws-1": "NodeInsufficientDevice"})


def test_template_nodes_read_capacity() -> None:
    nodes = [aws_node("b", devices=2, cores=4), aws_node("a", devices=0), node("c")]
    d = decide_on_nodes(aws_pod("p", limits(count="1")), nodes, build(CHART), default_node_policy="binpack",
                        default_gpu_policy="spread", now=5)
    assert isinstance(d, Chosen) and d.node == "b"
    assert d.failed == {"a": "node unregistered", "c": "node unregistered"}


def test_metrics_list_neuron_devices() -> None:
    state = aws_state()
    d = decide(aws_pod("p", limits(cores="1")), ["aws-1"], state, default_node_policy="binpack",
               default_gpu_policy="spread", now=1)
    assert isinstance(d, Chosen)
    state.reserve(aws_pod("p", limits(cores="1")), d)
    text = metrics_text(state)
    lines = [line for line in text.splitlines() if "AWSNeuron-3" in line]
    labels = 'device_index="3",device_type="AWSNeuron",device_uuid="aws-1-AWSNeuron-3",node="aws-1",'
    labels += 'zone="vGPU"'
    # Cores are the mask (limit 3 = two cores, allocated 1 = core 0); no memory, so no memory ratio.
    assert f"hami_gpu_core_limit_ratio{{{labels}}} 3" in lines
    assert f"hami_gpu_core_allocated_ratio{{{labels}}} 1" in lines
    assert f"hami_gpu_shared_count{{{labels}}} 1" in lines
    assert f"hami_gpu_memory_limit_bytes{{{labels}}} 0" in lines
    assert not any(line.startswith("hami_node_gpu_memory_allocated_ratio") for line in lines)


async def test_simulated_device_plugin_runs_neuron_pods_without_to_allocate() -> None:
    """No to-allocate key: the plugin has nothing to consume, writes nothing, and runs the pod."""
    annotations = {"hami.io/aws-neuron-devices-allocated": "n1-AWSNeuron-0,AWSNeuron,0,3:;",
                   **extras("n1", "0"), keys.BIND_PHASE: "allocating"}
    bound = pod("p", annotations=annotations, containers=[limits(count="1")])
    admitted = await admit_bound_pod(build(CHART), bound, node_annotations=None)
    assert admitted.phase == "Running"
    assert admitted.annotations == annotations and admitted.pod["status"]["phase"] == "Running"


SNAP_NODE = {
    "apiVersion": "v1", "kind": "Node",
    "metadata": {"name": "{name}", "labels": {aws.INSTANCE_TYPE_LABEL: "inf2.48xlarge"}},
    "status": {"capacity": {"cpu": "8", "memory": "32Gi", "pods": "110", COUNT: "4", CORES: "8"},
               "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110", COUNT: "4", CORES: "8"}},
}
PODS = """\
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default}}
spec:
  containers:
  - name: c
    image: x
    resources: {{limits: {{{resource}: {n}}}}}
"""


def test_simulate_end_to_end(tmp_path: Path) -> None:
    items = [json.loads(json.dumps(SNAP_NODE).replace("{name}", n)) for n in ("inf-a", "inf-b")]
    pods = [
        PODS.format(name="whole", resource=COUNT, n=2),
        PODS.format(name="core", resource=CORES, n=1),
        PODS.format(name="odd", resource=CORES, n=3),
    ]
    report = simulate_report(tmp_path, nodes=items, pods=pods, config=SECTION)
    whole, core = report["whole"], report["core"]
    assert whole["node"] == core["node"]  # binpack
    n = whole["node"]
    assert whole["annotations"]["hami.io/aws-neuron-devices-allocated"] == (
        f"{n}-AWSNeuron-0,AWSNeuron,0,3:{n}-AWSNeuron-1,AWSNeuron,0,3:;"
    )
    assert whole["annotations"]["AWS_NEURON_IDS"] == "0,1"
    assert whole["annotations"]["NEURON_ALLOCATED"] == "false"
    assert whole["annotations"]["aws.amazon.com/predicate-node"] == n
    assert whole["annotations"]["NEURON_ALLOC_TIME"].endswith("000000000")
    assert core["annotations"]["NEURON_RESOURCE_TYPE"] == CORES
    # Without the webhook (simulate takes pods as given) an odd core count asks for nothing, as
    # in HAMi's GenerateResourceRequests: the pod runs without Neuron annotations.
    assert not [k for k in report["odd"]["annotations"] if "neuron" in k.lower() or "NEURON" in k]
