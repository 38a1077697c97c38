"""Enflame configuration and the whole-card GCU vendor: the vectors of HAMi v2.10.0's
pkg/device/enflame/gcu_test.go (and config.go), then GCU in the registry and the decision."""

from __future__ import annotations

import dataclasses
from datetime import UTC
from typing import Any

import pytest

from tests.builders import container, pod
from tests.devices.enflame_helpers import (
    CHART,
    CORE_NAME,
    DRS_NAME,
    GCU,
    GCU_NAME,
    MEM_NAME,
    VENDORS,
    gcu_node,
    readable,
)
from tests.devices.vendorkit import NOW, config_error_key, health_flags
from vgpu_scheduler.config import DeviceConfig
from vgpu_scheduler.configfile import parse_device_config
from vgpu_scheduler.devices.protocol import PodFitContext, ResourceNames, Vendors
from vgpu_scheduler.devices.registry import build
from vgpu_scheduler.engine.decide import Chosen, NoFit, decide_on_nodes
from vgpu_scheduler.model import ContainerDevice, ContainerDeviceRequest, DeviceInfo, DeviceUsage
from vgpu_scheduler.scheduler.extender import _locking_request
from vgpu_scheduler.scheduler.options import SchedulerOptions, vendor_flags
from vgpu_scheduler.wire.inventory import InventoryError

# --------------------------------------------------------------------------------------------
# Configuration (TestInitGCUDevice, InitEnflameDevice, config_test.go)


def test_chart_section_gives_gcu_then_enflame() -> None:
    assert [k for k in VENDORS.keys if k in ("DCU", "GCU", "Enflame")] == ["DCU", "GCU", "Enflame"]
    drs = VENDORS["Enflame"]
    assert GCU.names == ResourceNames(GCU_NAME)
    assert drs.names == ResourceNames(DRS_NAME, MEM_NAME, CORE_NAME)
    assert GCU.managed_resources == {GCU_NAME}
    assert drs.managed_resources == {DRS_NAME, MEM_NAME, CORE_NAME}
    assert GCU.allocation_keys == (
        "hami.io/enflame-gcu-devices-to-allocate",
        "hami.io/enflame-gcu-devices-allocated",
    )
    assert drs.allocation_keys == ("", "hami.io/enflame-vgpu-devices-allocated")
    for vendor in (GCU, drs):  # neither locks nor shakes hands (§6.2, §3.4)
        assert (vendor.lock_key, vendor.handshake_key, vendor.cleanup_key) == (None, None, None)
    assert (GCU.inventory_keys, drs.inventory_keys) == ((), ("enflame.com/gcu-drs-capacity",))


def test_missing_section_leaves_gcu_unnamed_and_drs_on_its_defaults() -> None:
    vendors = build(DeviceConfig())
    assert vendors["GCU"].names == ResourceNames("")
    assert vendors["Enflame"].names == ResourceNames(DRS_NAME, MEM_NAME, CORE_NAME)


@pytest.mark.parametrize(
    ("yaml", "count"),
    [
        ("enflame:\n  resourceNameVGCU: old.example/vgcu\n", "old.example/vgcu"),  # legacy key as fallback
        (
            "enflame:\n  resourceNameVGCU: old.example/vgcu\n  resourceNameDRSGCU: new.example/drs\n",
            "new.example/drs",
        ),
        ("enflame:\n  resourceNameGCU: g\n  resourceNameDRSGCU: ''\n", DRS_NAME),
    ],
    ids=readable,
)
def test_drs_count_name_falls_back_to_the_legacy_key_then_the_default(yaml: str, count: str) -> None:
    assert build(parse_device_config(yaml))["Enflame"].names.count == count


def test_config_wins_over_the_legacy_flags() -> None:
    """HAMi's init assigns the section over every --enflame-* flag, even when the value is empty."""
    opts = dataclasses.replace(
        SchedulerOptions(),
        enflame_gcu_resource_name="flag.example/gcu",
        enflame_drs_gcu_resource_name="flag.example/drs",
        enflame_gcu_memory_resource_name="flag.example/mem",
    )
    vendors = build(CHART, vendor_flags(opts))
    assert (vendors["GCU"].names.count, vendors["Enflame"].names.count) == (GCU_NAME, DRS_NAME)
    empty = build(DeviceConfig(), vendor_flags(opts))
    assert (empty["GCU"].names.count, empty["Enflame"].names.memory) == ("", MEM_NAME)


@pytest.mark.parametrize(
    ("yaml", "key"),
    [
        ("enflame:\n  resourceNameGCU: 5\n", "enflame.resourceNameGCU"),
        ("enflame:\n  resourceNameGCUCore: [a]\n", "enflame.resourceNameGCUCore"),
        ("enflame:\n  resourceNameVGCUPercentage: true\n", "enflame.resourceNameVGCUPercentage"),
        ("enflame: 3\n", "enflame"),
    ],
    ids=readable,
)
def test_bad_section_is_a_config_error(yaml: str, key: str) -> None:
    assert config_error_key(yaml) == key


# --------------------------------------------------------------------------------------------
# Requests (TestGCUDevices_GenerateResourceRequests) and admission (TestGCUDevices_MutateAdmission)


WHOLE = ContainerDeviceRequest(1, "GCU", 100, 100, 100)


@pytest.mark.parametrize(
    ("ctr", "expected"),
    [
        (container(limits={GCU_NAME: "1"}), WHOLE),
        (container(requests={GCU_NAME: "1"}), WHOLE),
        (container(limits={"nvidia.com/gpu": "1"}), None),
        (container(limits={GCU_NAME: "3"}), dataclasses.replace(WHOLE, nums=3)),
        (container(limits={GCU_NAME: "0"}), None),
        (container(limits={GCU_NAME: "-1"}), None),
        (container(limits={GCU_NAME: "0.5"}), None),  # AsInt64 fails
        (container(limits={GCU_NAME: "4294967297"}), WHOLE),  # int32(n) wraps to 1, as in Go
        ({"name": "c"}, None),
    ],
    ids=readable,
)
def test_requests(ctr: dict[str, Any], expected: ContainerDeviceRequest | None) -> None:
    assert GCU.request(ctr) == expected


@pytest.mark.parametrize(
    ("ctr", "has"),
    [
        (container(limits={GCU_NAME: "1"}), True),
        (container(requests={GCU_NAME: "1"}), False),  # MutateAdmission reads limits only
        (container(limits={"cpu": "1"}), False),
    ],
    ids=readable,
)
def test_mutate(ctr: dict[str, Any], has: bool) -> None:
    before = dict(ctr)
    assert GCU.mutate(ctr, pod()) is has
    assert ctr == before


# --------------------------------------------------------------------------------------------
# Inventory (TestGCUDevices_GetNodeDevices) and health (TestGCUDevices_CheckHealth)


def test_inventory_from_capacity() -> None:
    devices = GCU.node_devices(gcu_node("testnode", "2"))
    assert devices == [
        DeviceInfo(
            id=f"testnode-GCU-{i}",
            index=i,
            count=1,
            devmem=100,
            devcore=100,
            type="GCU",
            numa=0,
            health=True,
            device_vendor="GCU",
        )
        for i in range(2)
    ]


@pytest.mark.parametrize("count", [None, "0", "1.5", "abc"], ids=lambda c: f"capacity {c}")
def test_inventory_errors(count: str | None) -> None:
    with pytest.raises(InventoryError, match=r"^device not found enflame\.com/gcu$"):
        GCU.node_devices(gcu_node("testnode", count))


def test_negative_capacity_gives_no_device_and_no_error() -> None:
    assert GCU.node_devices(gcu_node("testnode", "-1")) == []


@pytest.mark.parametrize(
    ("count", "healthy"), [("2", True), (None, False), ("0", False), ("-1", False)], ids=lambda v: repr(v)
)
def test_health_is_a_positive_capacity(count: str | None, healthy: bool) -> None:
    health = GCU.check_health(gcu_node("n", count), NOW, UTC)
    assert health_flags(health) == (healthy, True, False)


# --------------------------------------------------------------------------------------------
# Fit (TestGCUDevices_Fit), usage and annotations (TestGCUDevices_PatchAnnotations)


@dataclasses.dataclass
class Dev:
    id: str
    used: int = 0
    health: bool = True


def run_fit(devs: list[Dev], request: ContainerDeviceRequest) -> tuple[bool, list[str], str]:
    devices = [
        DeviceInfo(id=d.id, index=i, count=1, devmem=100, devcore=100, type="GCU", health=d.health)
        for i, d in enumerate(devs)
    ]
    usage = [DeviceUsage(d.used) for d in devs]
    ctx = PodFitContext(vendors=Vendors([GCU]))
    order = list(range(len(devs)))
    result = GCU.fit(request, devices, usage, order, ctx=ctx, cordoned=frozenset(), allocated=())
    quick = GCU.quick_verdict(request, devices, usage, order[::-1], ctx=ctx, cordoned=frozenset())
    assert quick == result.reason  # order-free, and exact
    return result.ok, [d.uuid for d in result.devices], result.reason


@pytest.mark.parametrize(
    ("devs", "request_", "ok", "ids", "reason"),
    [
        ([Dev("dev-0"), Dev("dev-1")], WHOLE, True, ["dev-1"], ""),
        ([Dev("dev-0")], dataclasses.replace(WHOLE, type="Other"), False, [], "1/1 CardTypeMismatch"),
        ([Dev("dev-0", used=1)], WHOLE, False, [], "1/1 ExclusiveDeviceAllocateConflict"),
        (
            [Dev("dev-0")],
            dataclasses.replace(WHOLE, nums=2),
            False,
            [],
            "1/1 AllocatedCardsInsufficientRequest",
        ),
        (
            [Dev("dev-0"), Dev("dev-1")],
            dataclasses.replace(WHOLE, nums=3),
            False,
            [],
            "2/2 AllocatedCardsInsufficientRequest",
        ),
        ([Dev("dev-0", health=False)], WHOLE, False, [], "1/1 CardNotHealth"),
        (
            [Dev("dev-0"), Dev("dev-1", used=1), Dev("dev-2", health=False)],
            dataclasses.replace(WHOLE, nums=2),
            False,
            [],
            "1/3 AllocatedCardsInsufficientRequest, 1/3 CardNotHealth, 1/3 ExclusiveDeviceAllocateConflict",
        ),
        (
            [Dev("dev-0"), Dev("dev-1"), Dev("dev-2")],
            dataclasses.replace(WHOLE, nums=2),
            True,
            ["dev-2", "dev-1"],
            "",
        ),
    ],
    ids=readable,
)
def test_fit(
    devs: list[Dev], request_: ContainerDeviceRequest, ok: bool, ids: list[str], reason: str
) -> None:
    assert run_fit(devs, request_) == (ok, ids, reason)


def test_entry_and_usage() -> None:
    device = DeviceInfo(id="d", index=4, count=1, devmem=100, devcore=100, type="GCU", health=True)
    result = GCU.fit(
        WHOLE,
        [device],
        [DeviceUsage()],
        [0],
        ctx=PodFitContext(vendors=Vendors([GCU])),
        cordoned=frozenset(),
        allocated=(),
    )
    assert result.devices == [ContainerDevice("d", "GCU", 100, 100, 4)]
    u = DeviceUsage()
    GCU.add_usage(device, u, result.devices[0], container_index=0, device_index=0, migs=[])
    assert u == DeviceUsage(1, 100, 100)


def test_patch_annotations() -> None:
    entries = [[ContainerDevice("testnode-GCU-0", "GCU", 0, 0, 0)]]
    assert GCU.patch_annotations(entries, [], node="n", now=1) == {
        "hami.io/enflame-gcu-devices-to-allocate": "testnode-GCU-0,GCU,0,0:;",
        "hami.io/enflame-gcu-devices-allocated": "testnode-GCU-0,GCU,0,0:;",
    }
    assert GCU.patch_annotations([], [], node="n", now=1) == {}


# --------------------------------------------------------------------------------------------
# In the scheduler


def gcu_pod(name: str, count: str, **kw: Any) -> dict[str, Any]:
    return pod(name, uid=f"uid-{name}", containers=[container(limits={GCU_NAME: count})], **kw)


def test_decision_on_template_nodes_writes_both_gcu_keys() -> None:
    nodes = [gcu_node("a", "1"), gcu_node("b", "4"), gcu_node("c", None)]
    d = decide_on_nodes(
        gcu_pod("p", "2"), nodes, VENDORS, default_node_policy="binpack", default_gpu_policy="spread", now=7
    )
    assert isinstance(d, Chosen) and d.node == "b"
    assert d.annotations == {
        "hami.io/vgpu-node": "b",
        "hami.io/vgpu-time": "7",
        "hami.io/enflame-gcu-devices-to-allocate": "b-GCU-3,GCU,100,100:b-GCU-2,GCU,100,100:;",
        "hami.io/enflame-gcu-devices-allocated": "b-GCU-3,GCU,100,100:b-GCU-2,GCU,100,100:;",
    }
    assert d.failed == {"a": "NodeInsufficientDevice", "c": "node unregistered"}


def test_no_node_fits_five_cards() -> None:
    d = decide_on_nodes(
        gcu_pod("p", "5"),
        [gcu_node("b", "4")],
        VENDORS,
        default_node_policy="binpack",
        default_gpu_policy="spread",
        now=7,
    )
    assert d == NoFit({"b": "NodeInsufficientDevice"})


def test_gcu_pods_never_lock() -> None:
    assert not _locking_request(gcu_pod("p", "1"), VENDORS)
