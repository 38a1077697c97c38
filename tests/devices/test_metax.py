"""Metax (§2.2, §3, §4.4, §5.3, §5.5, §7): the `metax` section and its Metax-GPU vendor, with the
vectors of HAMi v2.10.0's pkg/device/metax/device_test.go, then both Metax vendors in the registry,
the registration loop, the decision, the device plugin and `vgpu-scheduler simulate`. The sGPU
vendor's own vectors (sdevice_test.go, protocol_test.go, qos_test.go) are in test_metax_sgpu.py."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC
from pathlib import Path
from typing import Any

import pytest

from tests.builders import container, gpu_quota, node, pod
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
from vgpu_scheduler.devices.metax import gpu, sgpu
from vgpu_scheduler.devices.metax.gpu import MetaxGpuVendor
from vgpu_scheduler.devices.protocol import ResourceNames, Vendors
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

GPU_COUNT = "metax-tech.com/gpu"
SGPU_COUNT, VMEM, VCORE = "metax-tech.com/sgpu", "metax-tech.com/vmemory", "metax-tech.com/vcore"
# The chart's section, verbatim as device-configmap.yaml renders it with the default values.
CHART_SECTION = """\
metax:
  resourceCountName: "metax-tech.com/gpu"
  resourceVCountName: metax-tech.com/sgpu
  resourceVMemoryName: metax-tech.com/vmemory
  resourceVCoreName: metax-tech.com/vcore
  sgpuTopologyAware: false
"""
CHART = default_device_config()
VENDORS = build(CHART)
GPU = MetaxGpuVendor(ResourceNames(GPU_COUNT))



# --------------------------------------------------------------------------------------------
# Configuration and registration


def test_chart_section_registers_both_vendors_after_dcu() -> None:
    keys_ = VENDORS.keys
    assert keys_.index("DCU") < keys_.index(gpu.GPU) == keys_.index(sgpu.SGPU) - 1
    g, s = VENDORS[gpu.GPU], VENDORS[sgpu.SGPU]
    assert g.names == ResourceNames(GPU_COUNT)
    assert s.names == ResourceNames(SGPU_COUNT, VMEM, VCORE, 1024)
    assert g.managed_resources == {GPU_COUNT} and s.managed_resources == {SGPU_COUNT, VMEM, VCORE}
    assert (g.allocation_keys, g.handshake_key, g.cleanup_key, g.lock_key, g.inventory_keys) == (
        ("hami.io/metax-gpu-devices-to-allocate", "hami.io/metax-gpu-devices-allocated"),
        None,
        None,
        None,
        (),
    )
    assert (s.allocation_keys, s.handshake_key, s.cleanup_key, s.lock_key) == (
        ("hami.io/metax-sgpu-devices-to-allocate", "hami.io/metax-sgpu-devices-allocated"),
        None,
        None,
        keys.NODE_LOCK,
    )
    assert g.scores_nodes and s.scores_nodes and not s.prefilter


def test_chart_section_verbatim_parses_like_the_packaged_default() -> None:
    config = parse_device_config(CHART_SECTION)
    vendors = build(config)
    assert vendors[sgpu.SGPU].names == VENDORS[sgpu.SGPU].names
    assert vendors[sgpu.SGPU].topology_aware_default is False  # type: ignore[attr-defined]


def test_missing_section_registers_both_with_empty_names() -> None:
    vendors = build(DeviceConfig())
    assert vendors[gpu.GPU].names == ResourceNames("")
    assert vendors[sgpu.SGPU].names == ResourceNames("", "", "", 1024)
    assert pod_requests(pod(containers=[container(limits={"": "1"})]), vendors) == [{}]


def test_config_wins_over_the_legacy_flags() -> None:
    """HAMi assigns the section over --metax-name/--metax-v*/--sgpu-topology-aware unconditionally."""
    opts = dataclasses.replace(
        SchedulerOptions(), metax_name="flag/gpu", metax_vcount="flag/sgpu", sgpu_topology_aware=True
    )
    vendors = build(CHART, vendor_flags(opts))
    assert vendors[gpu.GPU].names.count == GPU_COUNT and vendors[sgpu.SGPU].names.count == SGPU_COUNT
    assert vendors[sgpu.SGPU].topology_aware_default is False  # type: ignore[attr-defined]
    assert build(DeviceConfig(), vendor_flags(opts))[gpu.GPU].names.count == ""


@pytest.mark.parametrize(
    ("yaml", "key"),
    [
        ("metax:\n  resourceCountName: 5\n", "metax.resourceCountName"),
        ("metax:\n  resourceVMemoryName: [a]\n", "metax.resourceVMemoryName"),
        ('metax:\n  sgpuTopologyAware: "false"\n', "metax.sgpuTopologyAware"),
    ],
    ids=readable,
)
def test_bad_section_is_a_config_error(yaml: str, key: str) -> None:
    assert config_error_key(yaml) == key


def test_topology_aware_from_the_section() -> None:
    vendors = build(parse_device_config(CHART_SECTION.replace("false", "true")))
    assert vendors[sgpu.SGPU].topology_aware_default is True  # type: ignore[attr-defined]


# --------------------------------------------------------------------------------------------
# Metax-GPU: requests (Test_GenerateResourceRequests), admission (Test_MutateAdmission)


WHOLE = ContainerDeviceRequest(1, gpu.GPU, 0, 100, 100)


@pytest.mark.parametrize(
    ("ctr", "expected"),
    [
        (container(limits={GPU_COUNT: "1"}, requests={GPU_COUNT: "1"}), WHOLE),
        (container(limits={}, requests={}), None),
        (container(requests={GPU_COUNT: "2"}), ContainerDeviceRequest(2, gpu.GPU, 0, 100, 100)),
        (container(limits={GPU_COUNT: "0"}), None),
        (container(limits={GPU_COUNT: "1.5"}), None),  # AsInt64 fails
        (container(limits={GPU_COUNT: "4294967297"}), WHOLE),  # int32(n) wraps, as HAMi's does
    ],
    ids=readable,
)
def test_gpu_requests(ctr: dict[str, Any], expected: ContainerDeviceRequest | None) -> None:
    assert GPU.request(ctr) == expected


@pytest.mark.parametrize(
    ("ctr", "has"),
    [
        (container(limits={GPU_COUNT: "1"}), True),
        (container(limits={}), False),
        (container(requests={GPU_COUNT: "1"}), False),
    ],
    ids=readable,
)
def test_gpu_mutate(ctr: dict[str, Any], has: bool) -> None:
    p = pod()
    before = json.dumps(p)
    assert GPU.mutate(ctr, p) is has
    assert json.dumps(p) == before


# --------------------------------------------------------------------------------------------
# Metax-GPU: inventory (TestGetNodeDevices) and health


def gpu_node(count: str | None, name: str = "test", **annos: str) -> dict[str, Any]:
    return node(name, annotations=annos, capacity={GPU_COUNT: count} if count is not None else None)


def test_gpu_inventory_from_capacity() -> None:
    devices = GPU.node_devices(gpu_node("2"))
    assert devices == [
        DeviceInfo(
            id=f"test-metax-{i}",
            index=i,
            count=1,
            devmem=65536,
            devcore=100,
            type="Metax-GPU",
            numa=0,
            health=True,
            device_vendor="Metax-GPU",
        )
        for i in range(2)
    ]


@pytest.mark.parametrize("count", [None, "0", "x", "1.5"], ids=lambda c: f"capacity {c}")
def test_gpu_inventory_errors(count: str | None) -> None:
    with pytest.raises(InventoryError, match=r"^device not found metax-tech\.com/gpu$"):
        GPU.node_devices(gpu_node(count))


@pytest.mark.parametrize(("count", "healthy"), [("1", True), ("0", False), (None, False)], ids=readable)
def test_gpu_health_is_capacity(count: str | None, healthy: bool) -> None:
    health = GPU.check_health(gpu_node(count), NOW, UTC)
    assert health_flags(health) == (healthy, True, False)


# --------------------------------------------------------------------------------------------
# Metax-GPU: fit (TestMetaxDevices_Fit, Test_checkType, Test_CustomFilterRule)


@dataclasses.dataclass
class Dev:
    id: str
    used: int = 0
    usedmem: int = 0
    usedcores: int = 0
    count: int = 100
    totalmem: int = 128
    totalcore: int = 100
    health: bool = True


def req(nums: int, mem: int, pct: int, cores: int, type_: str = gpu.GPU) -> ContainerDeviceRequest:
    return ContainerDeviceRequest(nums, type_, mem, pct, cores)


def run_gpu_fit(
    devs: list[Dev],
    request: ContainerDeviceRequest,
    annos: dict[str, str] | None = None,
    allocated: list[list[ContainerDevice]] | None = None,
) -> tuple[bool, list[ContainerDevice], str]:
    devices = [
        DeviceInfo(
            id=d.id,
            index=i,
            count=d.count,
            devmem=d.totalmem,
            devcore=d.totalcore,
            type=gpu.GPU,
            health=d.health,
        )
        for i, d in enumerate(devs)
    ]
    usage = [DeviceUsage(d.used, d.usedmem, d.usedcores) for d in devs]
    ctx = pod_fit_context(pod(annotations=annos or {}), vendors=Vendors([GPU]))
    order = list(range(len(devs)))
    result = GPU.fit(request, devices, usage, order, ctx=ctx, cordoned=frozenset(), allocated=allocated or ())
    assert GPU.quick_verdict(request, devices, usage, order, ctx=ctx, cordoned=frozenset()) is None
    return result.ok, result.devices, result.reason


@pytest.mark.parametrize(
    ("devs", "request_", "annos", "ok", "ids", "reason"),
    [
        ([Dev("dev-0"), Dev("dev-1")], req(1, 64, 0, 50), {}, True, ["dev-1"], ""),
        ([Dev("dev-0")], req(1, 512, 0, 50), {}, False, [], "1/1 CardInsufficientMemory"),
        (
            [Dev("dev-0", totalmem=1024, usedcores=100)],
            req(1, 512, 0, 50),
            {},
            False,
            [],
            "1/1 CardInsufficientCore",
        ),
        ([Dev("dev-0")], req(1, 512, 0, 50, "OtherType"), {}, False, [], "1/1 CardTypeMismatch"),
        (
            [Dev("dev-0", totalmem=1280, used=100)],
            req(1, 512, 0, 50),
            {},
            False,
            [],
            "1/1 CardTimeSlicingExhausted",
        ),
        ([Dev("dev-0", totalmem=1280)], req(1, 512, 0, 120), {}, True, ["dev-0"], ""),  # cores clamped
        (
            [Dev("dev-0", totalmem=1280, used=20)],
            req(1, 512, 0, 100),
            {},
            False,
            [],
            "1/1 ExclusiveDeviceAllocateConflict",
        ),
        (
            [Dev("dev-0", totalmem=1280, used=20, usedcores=100)],
            req(1, 512, 0, 0),
            {},
            False,
            [],
            "1/1 CardComputeUnitsExhausted",
        ),
        (
            [Dev("dev-0", totalmem=1280, used=20, usedcores=10)],
            req(2, 512, 0, 20),
            {},
            False,
            [],
            "1/1 AllocatedCardsInsufficientRequest",
        ),
        ([Dev("dev-0", totalmem=1280, used=20, usedcores=10)], req(1, 0, 10, 20), {}, True, ["dev-0"], ""),
        (
            [Dev("dev-0", used=1)],
            req(1, 64, 101, 50),
            {keys.GPU_SCHEDULER_POLICY: "mutex"},
            False,
            [],
            "1/1 ExclusiveDeviceAllocateConflict",
        ),
        ([Dev("dev-0", totalmem=1280, health=False)], req(1, 512, 0, 50), {}, False, [], "1/1 CardNotHealth"),
        # Health is checked before the type (Test_checkType: the type alone decides, no annotations).
        ([Dev("dev-0", health=False)], req(1, 0, 100, 100, "test"), {}, False, [], "1/1 CardNotHealth"),
        # The real request: a whole 64 GiB device; the second device of the pod never is another one.
        ([Dev("a", count=1, totalmem=65536), Dev("b", count=1, totalmem=65536)], WHOLE, {}, True, ["b"], ""),
    ],
    ids=readable,
)
def test_gpu_fit(
    devs: list[Dev],
    request_: ContainerDeviceRequest,
    annos: dict[str, str],
    ok: bool,
    ids: list[str],
    reason: str,
) -> None:
    got_ok, got, got_reason = run_gpu_fit(devs, request_, annos)
    assert (got_ok, got_reason) == (ok, reason)
    if ok:
        assert [d.uuid for d in got] == ids


@pytest.mark.parametrize(
    ("earlier", "ok", "reason"),
    [
        (["test-0000"], True, ""),  # the same device as before (Test_CustomFilterRule, first case)
        (["test-1111"], False, "1/1 CardNotFoundCustomFilterRule"),  # another one
        (["test-0000", "test-1111"], False, "1/1 CardNotFoundCustomFilterRule"),
        ([], True, ""),
    ],
    ids=readable,
)
def test_gpu_custom_filter_rule_all_devices_of_a_pod_are_one(
    earlier: list[str], ok: bool, reason: str
) -> None:
    allocated = [[ContainerDevice(u, gpu.GPU, 1000, 1, 0)] for u in earlier]
    got_ok, _, got_reason = run_gpu_fit(
        [Dev("test-0000", totalmem=1280)], req(1, 512, 0, 20), allocated=allocated
    )
    assert (got_ok, got_reason) == (ok, reason)


def test_gpu_fit_entry_and_usage() -> None:
    """TestMetaxDevices_AddResourceUsage; the entry's type is the request's, memory resolved."""
    _, got, _ = run_gpu_fit([Dev("dev-0", count=1, totalmem=65536)], WHOLE)
    assert got == [ContainerDevice("dev-0", gpu.GPU, 65536, 100, 0)]
    dev = DeviceInfo(id="dev-0")
    u = DeviceUsage(0, 2000, 15)
    entry = ContainerDevice("dev-0", gpu.GPU, 1024, 50)
    assert GPU.add_usage(dev, u, entry, container_index=0, device_index=0, migs=[]) is entry
    assert u == DeviceUsage(1, 3024, 65)


# --------------------------------------------------------------------------------------------
# Metax-GPU: node score (Test_ScoreNode, TestParseMetaxAnnos) and annotations


TABLE = '{"1":0,"2":110,"3":270,"4":540,"5":580,"6":730,"7":930,"8":1240}'


@pytest.mark.parametrize(
    ("index", "value"),
    [(1, 0), (2, 110), (3, 270), (4, 540), (5, 580), (6, 730), (7, 930), (8, 1240)],
    ids=lambda v: f"n={v}",
)
def test_topology_table(index: int, value: int) -> None:
    assert gpu.topology_value(TABLE, index) == value


@pytest.mark.parametrize(
    "text", ["", "[1]", '{"x":1}', '{"1":1.5}', '{"1":"2"}', '{"1":true}', "null", '{"2":5}'], ids=repr
)
def test_topology_table_unreadable_or_missing_is_zero(text: str) -> None:
    assert gpu.topology_value(text, 1) == 0


def two(n: int) -> list[list[ContainerDevice]]:
    return [[ContainerDevice(f"test-{i}", gpu.GPU, 1000, 1, i) for i in range(n)]]


@pytest.mark.parametrize(
    ("annos", "entries", "policy", "score"),
    [
        ({gpu.LOSSES: '{"1":100,"2":200}'}, two(2), "binpack", 1800.0),
        ({gpu.SCORES: '{"1":100,"2":200}'}, two(1), "spread", 1900.0),
        ({gpu.SCORES: '{"1":100,"2":200}'}, two(1), "binpack", 0.0),  # binpack reads the losses only
        ({gpu.LOSSES: "garbage"}, two(1), "binpack", 2000.0),  # unreadable: loss 0
        ({gpu.LOSSES: '{"1":100}'}, [[], *two(1)], "binpack", 1900.0),  # n counts devices, not containers
        ({}, two(1), "spread", 0.0),
    ],
    ids=readable,
)
def test_gpu_score_node(annos: dict[str, str], entries: Any, policy: str, score: float) -> None:
    assert GPU.score_node(entries, annotations=annos, devices=[], previous=[], policy=policy) == score


def test_gpu_patch_annotations_and_no_lock() -> None:
    entries = [[], [ContainerDevice("n-metax-1", gpu.GPU, 65536, 100, 1)]]
    assert GPU.patch_annotations(entries, [], node="n", now=1) == {
        "hami.io/metax-gpu-devices-to-allocate": ";n-metax-1,Metax-GPU,65536,100:;",
        "hami.io/metax-gpu-devices-allocated": ";n-metax-1,Metax-GPU,65536,100:;",
    }
    assert GPU.patch_annotations([], [], node="n", now=1) == {}
    assert not _locking_request(pod(containers=[container(limits={GPU_COUNT: "1"})]), VENDORS)


# --------------------------------------------------------------------------------------------
# In the scheduler: registration, decision, webhook, metrics, device plugin, simulate


def sgpu_json(
    n: int = 2, *, zones: tuple[int, ...] = (), qos: str = "best-effort", healthy: bool = True
) -> str:
    return json.dumps(
        [
            {
                "uuid": f"GPU-{i}",
                "bdf": f"0000:{i:02x}:00.0",
                "model": "C500",
                "totalDevCount": 16,
                "totalCompute": 100,
                "totalVRam": 65536,
                "numa": 0,
                "healthy": healthy,
                "qosPolicy": qos,
                "linkZone": zones[i] if i < len(zones) else 0,
            }
            for i in range(n)
        ]
    )


def sgpu_node(value: str | None, name: str = "s", **annos: str) -> dict[str, Any]:
    annotations = dict(annos)
    if value is not None:
        annotations[sgpu.REGISTER] = value
    return node(name, annotations=annotations)


async def test_registration_reads_both_vendors_and_one_broken_node_stays_alone() -> None:
    async with registration(VENDORS, NOW) as reg:
        both = node("both", annotations={sgpu.REGISTER: sgpu_json(1)}, capacity={GPU_COUNT: "1"})
        reg.add(both, sgpu_node('[{"uuid": 5}]', name="broken"), sgpu_node(sgpu_json(2), name="s2"))
        report = await reg.run()
        view = reg.state.ledger.view("both")
        assert view is not None and [d.id for d in view.devices] == ["both-metax-0", "GPU-0"]
        assert reg.state.ledger.view("s2") is not None
        assert reg.state.ledger.view("broken") is None
        # CheckHealth comes first and finds no sGPU devices (the annotation does not decode), so
        # the node is only "unhealthy" for Metax-SGPU, as in HAMi; the report names NVIDIA's absence.
        assert report.errors == {"broken": "annos not found hami.io/node-nvidia-register"}
        assert "broken" in report.unhealthy
        annotations = reg.node_annotations("both")
        assert not any("metax" in k and "handshake" in k for k in annotations)  # Metax has no handshake


def metax_pod(name: str, annotations: dict[str, str] | None = None, **limits: str) -> dict[str, Any]:
    names = {"gpu": GPU_COUNT, "sgpu": SGPU_COUNT, "mem": VMEM, "cores": VCORE}
    return pod(
        name,
        uid=f"uid-{name}",
        annotations=annotations or {},
        status={"phase": "Pending"},
        containers=[container(limits={names[k]: v for k, v in limits.items()})],
    )


def test_decision_writes_the_gpu_annotations_and_scores_by_losses() -> None:
    state = SchedulerState(VENDORS)
    losses = {gpu.LOSSES: '{"1":300}'}
    state.set_node_devices("g1", GPU.node_devices(gpu_node("2", "g1")), annotations=losses)
    state.set_node_devices("g2", GPU.node_devices(gpu_node("2", "g2")), annotations={gpu.LOSSES: '{"1":100}'})
    d = decide(
        metax_pod("p", gpu="1"),
        ["g1", "g2"],
        state,
        default_node_policy="binpack",
        default_gpu_policy="spread",
        now=1700000000,
    )
    assert isinstance(d, Chosen) and d.node == "g2"  # lower loss, higher score
    assert d.annotations == {
        keys.VGPU_NODE: "g2",
        keys.VGPU_TIME: "1700000000",
        "hami.io/metax-gpu-devices-to-allocate": "g2-metax-1,Metax-GPU,65536,100:;",
        "hami.io/metax-gpu-devices-allocated": "g2-metax-1,Metax-GPU,65536,100:;",
    }
    state.reserve(metax_pod("p", gpu="1"), d)
    nofit = decide(
        metax_pod("q", gpu="2"),
        ["g2"],
        state,
        default_node_policy="binpack",
        default_gpu_policy="spread",
        now=1700000001,
    )
    assert nofit == NoFit({"g2": "1/2 AllocatedCardsInsufficientRequest, 1/2 CardTimeSlicingExhausted"})


def test_decision_writes_the_sgpu_annotations_and_locks() -> None:
    state = SchedulerState(VENDORS)
    state.set_node_devices("s", VENDORS[sgpu.SGPU].node_devices(sgpu_node(sgpu_json(2))))
    p = metax_pod("p", {sgpu.QOS_POLICY: "fixed-share"}, sgpu="1", mem="4", cores="30")
    d = decide(p, ["s"], state, default_node_policy="binpack", default_gpu_policy="spread", now=1700000000)
    assert isinstance(d, Chosen)
    assert d.annotations == {
        keys.VGPU_NODE: "s",
        keys.VGPU_TIME: "1700000000",
        "hami.io/metax-sgpu-devices-to-allocate": "GPU-1,Metax-SGPU,4096,30:;",
        "hami.io/metax-sgpu-devices-allocated": "GPU-1,Metax-SGPU,4096,30:;",
        "metax-tech.com/gpu-devices-allocated": '[[{"uuid":"GPU-1","compute":30,"vRam":4096}]]',
        "metax-tech.com/predicate-time": "1700000000000000000",
    }
    assert _locking_request(p, VENDORS)
    assert not _locking_request(
        pod(init_containers=[container(limits={SGPU_COUNT: "1"})], containers=[container()]), VENDORS
    )
    # GPU-1 is switching to fixed-share (inventory still says best-effort): a best-effort pod
    # sharing it is refused until the inventory reports the new policy.
    state.reserve(p, d)
    q = metax_pod(
        "q", {sgpu.QOS_POLICY: "best-effort", sgpu.USE_UUID: "GPU-1"}, sgpu="1", mem="4", cores="30"
    )
    refused = decide(
        q, ["s"], state, default_node_policy="binpack", default_gpu_policy="spread", now=1700000001
    )
    assert refused == NoFit({"s": "1/2 CardQosPolicyMismatch, 1/2 CardUuidMismatch"})


def test_webhook_defaults_the_qos_policy_and_rejects_bad_classes() -> None:
    ok = review(metax_pod("p", sgpu="1"), VENDORS)
    assert ok.allowed
    assert ok.patch is not None and any(
        op.get("value") == {sgpu.QOS_POLICY: "best-effort"} or op.get("value") == "best-effort"
        for op in ok.patch
    )
    bad = review(metax_pod("p", {sgpu.APP_CLASS: "oNLine"}, sgpu="1"), VENDORS)
    assert not bad.allowed and bad.code == 500
    assert bad.message == "metax-tech.com/sgpu-app-class must be set one of [online, offline]"
    whole = review(metax_pod("g", gpu="1"), VENDORS)
    assert whole.allowed and whole.patch is not None


def test_metrics_list_metax_devices() -> None:
    state = SchedulerState(VENDORS)
    state.set_node_devices("s", VENDORS[sgpu.SGPU].node_devices(sgpu_node(sgpu_json(1))))
    p = metax_pod("p", {sgpu.QOS_POLICY: "best-effort"}, sgpu="1", mem="1", cores="20")
    d = decide(p, ["s"], state, default_node_policy="binpack", default_gpu_policy="spread", now=1)
    assert isinstance(d, Chosen)
    state.reserve(p, d)
    text = metrics_text(state)
    assert (
        'hami_gpu_memory_allocated_bytes{device_cores="100",device_index="0",device_type="Metax-SGPU",'
        'device_uuid="GPU-0",node="s",zone="vGPU"} 1.073741824e+09'
    ) in text


async def test_simulated_device_plugin_consumes_both_metax_allocations() -> None:
    annotations = {
        "hami.io/metax-gpu-devices-to-allocate": "n1-metax-0,Metax-GPU,65536,100:;;",
        "hami.io/metax-sgpu-devices-to-allocate": ";GPU-1,Metax-SGPU,4096,30:;",
        keys.BIND_PHASE: "allocating",
    }
    containers = [container("a", limits={GPU_COUNT: "1"}), container("b", limits={SGPU_COUNT: "1"})]
    admitted = await admit_bound_pod(VENDORS, pod("p", annotations=annotations, containers=containers))
    assert admitted.phase == "Running"
    after = admitted.annotations
    assert after["hami.io/metax-gpu-devices-to-allocate"] == ";;"
    assert after["hami.io/metax-sgpu-devices-to-allocate"] == ";;"
    assert after[keys.BIND_PHASE] == "success"
    assert keys.NODE_LOCK not in admitted.node_annotations


POD_YAML = """\
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default, annotations: {{{annos}}}}}
spec:
  containers:
  - name: c
    image: x
    resources: {{limits: {{{limits}}}}}
"""


def test_simulate_end_to_end_with_the_chart_section(tmp_path: Path) -> None:
    """`vgpu-scheduler simulate --device-config-file` with the chart's `metax` section: whole GPUs
    by capacity and losses, sGPUs by QoS policy and app class, the extra sGPU annotations."""
    base = {"cpu": "8", "memory": "32Gi", "pods": "110"}
    nodes = [
        node(
            "mx-gpu",
            annotations={gpu.LOSSES: '{"1":0,"2":100}'},
            capacity={GPU_COUNT: "2", **base},
            allocatable={GPU_COUNT: "2", **base},
        ),
        node(
            "mx-sgpu",
            annotations={sgpu.REGISTER: sgpu_json(2)},
            capacity={SGPU_COUNT: "32", **base},
            allocatable={SGPU_COUNT: "32", **base},
        ),
    ]
    pods = [
        POD_YAML.format(name="g", annos="", limits=f"{GPU_COUNT}: 1"),
        POD_YAML.format(
            name="s",
            annos=f"{sgpu.QOS_POLICY}: best-effort",
            limits=f"{SGPU_COUNT}: 1, {VCORE}: 30, {VMEM}: 4",
        ),
        POD_YAML.format(name="o", annos=f"{sgpu.APP_CLASS}: online", limits=f"{SGPU_COUNT}: 1, {VMEM}: 2Gi"),
        POD_YAML.format(
            name="f",
            annos=f"{sgpu.QOS_POLICY}: fixed-share",
            limits=f"{SGPU_COUNT}: 1, {VCORE}: 10, {VMEM}: 1",
        ),
    ]
    config = "nvidia:\n  resourceCountName: nvidia.com/gpu\n" + CHART_SECTION
    report = simulate_report(tmp_path, nodes=nodes, pods=pods, config=config)
    g, s, o, f = (report[n] for n in "gsof")
    assert g["node"] == "mx-gpu"
    assert g["annotations"]["hami.io/metax-gpu-devices-allocated"] == "mx-gpu-metax-1,Metax-GPU,65536,100:;"
    assert g["annotations"]["hami.io/metax-gpu-devices-to-allocate"] == ";"  # consumed by the plugin
    assert s["node"] == "mx-sgpu"
    assert s["annotations"]["hami.io/metax-sgpu-devices-allocated"] == "GPU-1,Metax-SGPU,4096,30:;"
    assert s["annotations"]["metax-tech.com/gpu-devices-allocated"] == (
        '[[{"uuid":"GPU-1","compute":30,"vRam":4096}]]'
    )
    assert s["annotations"]["metax-tech.com/predicate-time"] == s["annotations"][keys.VGPU_TIME] + "0" * 9
    # The online pod cannot join the unclassed pod's device and takes no cores.
    assert o["annotations"]["hami.io/metax-sgpu-devices-allocated"] == "GPU-0,Metax-SGPU,2048,0:;"
    assert o["annotations"]["metax-tech.com/gpu-devices-allocated"] == '[[{"uuid":"GPU-0","vRam":2048}]]'
    # fixed-share: GPU-0 runs an online pod, GPU-1 a best-effort one: nowhere to go.
    assert f["node"] in ("", None)
    assert f["reasons"] == {
        "mx-gpu": "NodeInsufficientDevice",
        "mx-sgpu": "1/2 CardAppClassMismatch, 1/2 CardQosPolicyMismatch",
    }


def test_ledger_lists_the_pods_on_each_device_for_app_classes() -> None:
    """DeviceUsage.pod_infos (HAMi's PodInfos): each counted pod's annotations, once per device,
    added and taken back with the pod, equal after a rebuild."""
    state = SchedulerState(VENDORS)
    state.set_node_devices("s", VENDORS[sgpu.SGPU].node_devices(sgpu_node(sgpu_json(2))))
    online = {sgpu.APP_CLASS: "online"}
    for name in ("a", "b"):
        p = metax_pod(name, online, sgpu="1", mem="1")
        d = decide(p, ["s"], state, default_node_policy="binpack", default_gpu_policy="spread", now=1)
        assert isinstance(d, Chosen)
        state.reserve(p, d)
    view = state.ledger.view("s")
    assert view is not None
    before = [[dict(a) for a in u.pod_infos] for u in view.usage]
    assert sorted(len(x) for x in before) == [1, 1]  # online pods spread over the devices
    assert all(x[0][sgpu.APP_CLASS] == "online" for x in before)
    state.ledger.rebuild_from(list(state.ledger.pods()))
    view = state.ledger.view("s")
    assert view is not None and [[dict(a) for a in u.pod_infos] for u in view.usage] == before
    state.ledger.remove_pod("uid-a")
    view = state.ledger.view("s")
    assert view is not None and sum(len(u.pod_infos) for u in view.usage) == 1


def test_online_pods_prefer_nodes_whose_devices_hold_fewer_offline_pods() -> None:
    """The sGPU node score is weighted ×10000 (negated under spread): an online pod avoids a device
    running only offline pods (which it would suspend)."""
    state = SchedulerState(VENDORS)
    for name in ("off", "on"):
        state.set_node_devices(name, VENDORS[sgpu.SGPU].node_devices(sgpu_node(sgpu_json(1), name=name)))
    for name, node_name, cls in (("x", "off", "offline"), ("y", "on", "online")):
        p = metax_pod(
            name, {sgpu.APP_CLASS: cls, sgpu.QOS_POLICY: "best-effort"}, sgpu="1", mem="1", cores="10"
        )
        d = decide(p, [node_name], state, default_node_policy="binpack", default_gpu_policy="spread", now=1)
        assert isinstance(d, Chosen)
        state.reserve(p, d)
    p = metax_pod("z", {sgpu.APP_CLASS: "online"}, sgpu="1", mem="1")
    for policy in ("binpack", "spread"):
        d = decide(p, ["off", "on"], state, default_node_policy=policy, default_gpu_policy="spread", now=2)
        assert isinstance(d, Chosen) and d.node == "on", policy


# --------------------------------------------------------------------------------------------
# The custom rule sees the pod's earlier containers, on every path (issue 27)

TWO_GPUS = gpu_node("2", "g1")  # two count-1 Metax GPUs
EARLIER = "1/2 CardNotFoundCustomFilterRule, 1/2 CardTimeSlicingExhausted"
"""HAMi v2.10.0: the second container finds the first one's GPU exhausted and the other one
against the rule (fitInDevices hands Fit the devices of the pod's earlier containers)."""


def gpus(name: str, n: int = 1) -> dict[str, Any]:
    return container(name, limits={GPU_COUNT: str(n)})


def two_container_pod(*, init: int = 0, app: int = 2, namespace: str = "default") -> dict[str, Any]:
    return pod("two", uid="uid-two", namespace=namespace, status={"phase": "Pending"},
               init_containers=[gpus(f"i{i}") for i in range(init)] or None,
               containers=[gpus(f"c{i}") for i in range(app)])


def metax_state(*, quota_namespace: str | None = None) -> SchedulerState:
    state = SchedulerState(VENDORS)
    state.set_node_devices("g1", GPU.node_devices(TWO_GPUS))
    if quota_namespace is not None:  # a quota that never binds: the fit walks its quota steps
        state.on_quota(gpu_quota(mem=10**9, namespace=quota_namespace))
    return state


def every_answer(p: dict[str, Any], state_of: Any) -> dict[str, Any]:
    """The decision through the public entry point (its default path), evaluating every node, on
    the node object alone (no ledger), and explain's verdict for g1."""
    args = {"default_node_policy": "binpack", "default_gpu_policy": "spread", "now": 1700000000}
    exp = explain_pod(p, ["g1"], state_of(), **args)
    return {
        "decide": decide(p, ["g1"], state_of(), **args),
        "every node": decide(p, ["g1"], state_of(), evaluate_all=True, **args),
        "no ledger": decide_on_nodes(p, [TWO_GPUS], VENDORS, **args),
        "explain": (exp.node, [(n.node, n.fits, n.reason) for n in exp.nodes]),
    }


@pytest.mark.parametrize("namespace", ["default", "team"], ids=["no quota", "quota"])
def test_two_containers_one_gpu_each_are_refused_whatever_the_path(namespace: str) -> None:
    p = two_container_pod(namespace=namespace)
    answers = every_answer(p, lambda: metax_state(quota_namespace="team"))
    assert answers == {
        "decide": NoFit({"g1": EARLIER}),
        "every node": NoFit({"g1": EARLIER}),
        "no ledger": NoFit({"g1": EARLIER}),
        "explain": (None, [("g1", False, EARLIER)]),
    }


def test_explain_checks_the_second_container_against_the_first_ones_gpu() -> None:
    exp = explain_pod(two_container_pod(), ["g1"], metax_state(), default_node_policy="binpack",
                      default_gpu_policy="spread", now=1)
    checks = {(d.uuid, c.container): c.verdict for d in exp.nodes[0].devices for c in d.checks}
    # The first container takes g1-metax-1 (HAMi walks the sorted devices from the end); the
    # second may only join it there.
    assert checks == {
        ("g1-metax-0", "c0"): "fits", ("g1-metax-1", "c0"): "fits",
        ("g1-metax-0", "c1"): "CardNotFoundCustomFilterRule", ("g1-metax-1", "c1"): "fits",
    }


def test_init_containers_share_one_gpu_and_the_app_container_starts_afresh() -> None:
    """Two init containers: the second joins the first one's GPU (each sees the node before the
    pod, and HAMi's init list holds the first). The app container's list starts empty."""
    answers = every_answer(two_container_pod(init=2, app=1), metax_state)
    entry = "g1-metax-1,Metax-GPU,65536,100:;"
    for path in ("decide", "every node", "no ledger"):
        d = answers[path]
        assert isinstance(d, Chosen) and d.node == "g1", path
        assert d.annotations["hami.io/metax-gpu-devices-allocated"] == entry * 3, path
    assert answers["explain"] == ("g1", [("g1", True, "")])


def test_an_init_container_after_one_of_both_gpus_is_refused() -> None:
    """Each init container sees the node before the pod, but the second one's list holds both GPUs
    of the first: every GPU differs from one of them."""
    p = pod("two", uid="uid-two", init_containers=[gpus("i0", 2), gpus("i1")], containers=[gpus("c0")])
    refused = "2/2 CardNotFoundCustomFilterRule"
    assert every_answer(p, metax_state) == {
        "decide": NoFit({"g1": refused}),
        "every node": NoFit({"g1": refused}),
        "no ledger": NoFit({"g1": refused}),
        "explain": (None, [("g1", False, refused)]),
    }
