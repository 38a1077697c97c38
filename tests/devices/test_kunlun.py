"""Kunlun whole cards (`kunlun`) and vXPU (`XPU`) (§2.2, §3.3, §3.4, §4.4, §5.3, §6.2, §7): the
vectors of HAMi v2.10.0's pkg/device/kunlun/device_test.go and vdevice_test.go, then both vendors
inside the registry, the registration loop, the decision, the bind, the webhook, the metrics and
the simulated device plugin. The combination rule itself is in test_kunlun_topo.py."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from datetime import UTC, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.builders import container, node, pod
from tests.devices.vendorkit import (
    NOW,
    config_error_key,
    health_flags,
    metrics_text,
    patch_ops,
    privileged,
    readable,
    registration,
    review,
    simulate_report,
)
from vgpu_scheduler.cluster.client import KubeClient
from vgpu_scheduler.config import DeviceConfig
from vgpu_scheduler.configfile import default_device_config, parse_device_config
from vgpu_scheduler.devices import kunlun
from vgpu_scheduler.devices.kunlun import common, vxpu, whole
from vgpu_scheduler.devices.kunlun.vxpu import XpuVendor, round_memory
from vgpu_scheduler.devices.kunlun.whole import KunlunVendor
from vgpu_scheduler.devices.protocol import ResourceNames, Vendor, Vendors
from vgpu_scheduler.devices.registry import build
from vgpu_scheduler.engine.decide import Chosen, NoFit, decide, decide_on_nodes
from vgpu_scheduler.engine.fit import pod_fit_context
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
from vgpu_scheduler.standin.embedded.deviceplugin import SimDevicePlugin
from vgpu_scheduler.standin.memory import MemoryCluster
from vgpu_scheduler.standin.transport import MemoryTransport
from vgpu_scheduler.wire import keys
from vgpu_scheduler.wire.inventory import InventoryError

XPU_COUNT = "kunlunxin.com/xpu"
VXPU, VMEM = "kunlunxin.com/vxpu", "kunlunxin.com/vxpu-memory"
WHOLE = KunlunVendor(ResourceNames(XPU_COUNT))
SLICED = XpuVendor(ResourceNames(VXPU, VMEM))
CHART = default_device_config()
VENDORS = build(CHART)
CHART_SECTION = """\
kunlun:
  resourceCountName: kunlunxin.com/xpu
  resourceVCountName: kunlunxin.com/vxpu
  resourceVMemoryName: kunlunxin.com/vxpu-memory
"""



def whole_req(nums: int) -> ContainerDeviceRequest:
    return ContainerDeviceRequest(nums, "kunlun", 0, 100, 0)


def slice_req(nums: int, mem: int = 98304, pct: int = 100, cores: int = 100) -> ContainerDeviceRequest:
    return ContainerDeviceRequest(nums, "XPU", mem, pct, cores)


# --------------------------------------------------------------------------------------------
# Configuration and registration order


def test_chart_section_gives_two_vendors_after_dcu() -> None:
    keys_ = VENDORS.keys
    assert keys_.index("DCU") < keys_.index("kunlun") == keys_.index("XPU") - 1
    cards, slices = VENDORS["kunlun"], VENDORS["XPU"]
    assert cards.names == ResourceNames(XPU_COUNT)
    assert slices.names == ResourceNames(VXPU, VMEM)
    assert cards.managed_resources == {XPU_COUNT}
    assert slices.managed_resources == {VXPU, VMEM}
    assert (cards.allocation_keys, cards.handshake_key, cards.cleanup_key, cards.lock_key) == (
        ("", "hami.io/kunlun-allocated"), None, None, None
    )
    assert (slices.allocation_keys, slices.handshake_key, slices.cleanup_key, slices.lock_key) == (
        ("hami.io/xpu-devices-to-allocate", "hami.io/xpu-devices-allocated"),
        "hami.io/node-handshake-xpu", "hami.io/node-handshake-xpu", keys.NODE_LOCK,
    )
    assert cards.inventory_keys == () and slices.inventory_keys == ("hami.io/node-register-xpu",)
    assert cards.scores_nodes and not slices.scores_nodes


def test_chart_section_verbatim() -> None:
    vendors = build(parse_device_config(CHART_SECTION))
    assert vendors["kunlun"].names == ResourceNames(XPU_COUNT)
    assert vendors["XPU"].names == ResourceNames(VXPU, VMEM)


def test_missing_section_registers_both_with_empty_names() -> None:
    vendors = build(DeviceConfig())
    assert vendors["kunlun"].names == ResourceNames("")
    assert vendors["XPU"].names == ResourceNames("", "")
    assert pod_requests(pod(containers=[container(limits={"": "1"})]), vendors) == [{}]


def test_config_wins_over_the_legacy_flags() -> None:
    """InitKunlunDevice / InitKunlunVDevice assign the section's names over --kunlun-* unconditionally."""
    opts = dataclasses.replace(SchedulerOptions(), kunlun_name="flag.example/xpu",
                               kunlun_vcount="flag.example/vxpu", kunlun_vmemory="flag.example/vmem")
    flagged = build(CHART, vendor_flags(opts))
    assert (flagged["kunlun"].names.count, flagged["XPU"].names) == (XPU_COUNT, ResourceNames(VXPU, VMEM))
    empty = build(DeviceConfig(), vendor_flags(opts))
    assert (empty["kunlun"].names.count, empty["XPU"].names.count, empty["XPU"].names.memory) == ("", "", "")


def test_custom_section() -> None:
    config = parse_device_config("kunlun:\n  resourceCountName: example.com/xpu\n"
                                 "  resourceVMemoryName: example.com/vmem\n")
    vendors = build(config)
    assert vendors["kunlun"].names == ResourceNames("example.com/xpu")
    assert vendors["XPU"].names == ResourceNames("", "example.com/vmem")


@pytest.mark.parametrize(
    ("yaml", "key"),
    [
        ("kunlun:\n  resourceCountName: 5\n", "kunlun.resourceCountName"),
        ("kunlun:\n  resourceVCountName: [a]\n", "kunlun.resourceVCountName"),
        ("kunlun:\n  resourceVMemoryName: true\n", "kunlun.resourceVMemoryName"),
    ],
    ids=readable,
)
def test_bad_section_is_a_config_error(yaml: str, key: str) -> None:
    assert config_error_key(yaml) == key


# --------------------------------------------------------------------------------------------
# Requests (whole: GenerateResourceRequests; vXPU: Test_trimMemory, Test_..._GenerateResourceRequests)


@pytest.mark.parametrize(
    ("ctr", "expected"),
    [
        (container(), None),
        (container(limits={XPU_COUNT: "2"}), whole_req(2)),
        (container(requests={XPU_COUNT: "4"}), whole_req(4)),
        # limits win by presence: the request is not looked at.
        (container(limits={XPU_COUNT: "8"}, requests={XPU_COUNT: "1"}), whole_req(8)),
        (container(limits={XPU_COUNT: "0.5"}), None),  # not an integer
        (container(limits={XPU_COUNT: "4294967297"}), whole_req(1)),  # int32(n) wraps
        (container(limits={XPU_COUNT: "0"}), whole_req(0)),  # Nums 0: Resourcereqs drops it
        (container(limits={VXPU: "1"}), None),
    ],
    ids=readable,
)
def test_whole_card_requests(ctr: dict[str, Any], expected: ContainerDeviceRequest | None) -> None:
    assert WHOLE.request(ctr) == expected


@pytest.mark.parametrize(
    ("mib", "rounded"),
    [(0, 24576), (1, 24576), (24576, 24576), (24577, 49152), (49152, 49152), (49153, 98304), (98304, 98304),
     (200000, 98304), (-5, 24576)],
    ids=readable,
)
def test_round_memory(mib: int, rounded: int) -> None:
    assert round_memory(mib) == rounded


@pytest.mark.parametrize(
    ("ctr", "expected"),
    [
        (container(), None),
        # No memory: the whole card (Test_..._GenerateResourceRequests "defaults to full device").
        (container(limits={VXPU: "1"}), slice_req(1)),
        (container(requests={VXPU: "2", VMEM: "24576"}), slice_req(2, 24576, 0, 25)),
        # Every boundary of the rounding; cores follow the memory (× 100 / 98304).
        (container(limits={VXPU: "1", VMEM: "0"}), slice_req(1, 24576, 0, 25)),  # 0 is a size, not "whole"
        (container(limits={VXPU: "1", VMEM: "24576"}), slice_req(1, 24576, 0, 25)),
        (container(limits={VXPU: "1", VMEM: "24577"}), slice_req(1, 49152, 0, 50)),
        (container(limits={VXPU: "1", VMEM: "49152"}), slice_req(1, 49152, 0, 50)),
        (container(limits={VXPU: "1", VMEM: "49153"}), slice_req(1, 98304, 0, 100)),
        (container(limits={VXPU: "1", VMEM: "98304"}), slice_req(1, 98304, 0, 100)),
        (container(limits={VXPU: "1", VMEM: "1Ki"}), slice_req(1, 24576, 0, 25)),
        (container(limits={VXPU: "1", VMEM: "-3"}), slice_req(1, 24576, 0, 25)),
        # Memory in limits wins over requests; an unreadable memory means the whole card.
        (container(limits={VXPU: "1", VMEM: "30000"}, requests={VMEM: "1"}), slice_req(1, 49152, 0, 50)),
        (container(limits={VXPU: "1", VMEM: "1.5"}), slice_req(1)),
        (container(limits={VXPU: "1.5", VMEM: "1024"}), None),
        (container(limits={VXPU: "4294967298"}), slice_req(2)),
        (container(limits={XPU_COUNT: "1"}), None),
    ],
    ids=readable,
)
def test_vxpu_requests(ctr: dict[str, Any], expected: ContainerDeviceRequest | None) -> None:
    assert SLICED.request(ctr) == expected


# --------------------------------------------------------------------------------------------
# Inventory and health


def kunlun_node(
    name: str = "n", *, cards: str | None = "8", register: str | None = None, vxpus: str | None = None,
    **annos: str,
) -> Any:
    annotations = dict(annos)
    if register is not None:
        annotations[vxpu.REGISTER] = register
    capacity = {XPU_COUNT: cards} if cards is not None else {}
    allocatable = dict(capacity)
    if vxpus is not None:
        allocatable[VXPU] = vxpus
    return node(name, annotations=annotations, capacity=capacity, allocatable=allocatable)


def test_whole_inventory_from_capacity() -> None:
    devices = WHOLE.node_devices(kunlun_node("k1", cards="8"))
    assert [(d.id, d.index, d.numa) for d in devices] == [
        (f"k1-kunlun-{i}", i, 0 if i < 4 else 1) for i in range(8)
    ]
    assert devices[0] == DeviceInfo(id="k1-kunlun-0", index=0, count=100, devmem=98304, devcore=100,
                                    type="kunlun", numa=0, mode="", health=True, device_vendor="kunlun")
    # NUMA 1 from card N/2 (integer division): 3 cards ⇒ 0, 1, 1.
    assert [d.numa for d in WHOLE.node_devices(kunlun_node(cards="3"))] == [0, 1, 1]
    assert WHOLE.node_devices(kunlun_node(cards="-2")) == []  # no card and no error


@pytest.mark.parametrize("cards", [None, "0", "1.5"], ids=["absent", "zero", "not an integer"])
def test_whole_inventory_errors(cards: str | None) -> None:
    with pytest.raises(InventoryError, match=r"^device not found kunlunxin\.com/xpu$"):
        WHOLE.node_devices(kunlun_node(cards=cards))


def test_whole_cards_are_always_healthy() -> None:
    health = WHOLE.check_health(kunlun_node(cards=None), NOW, UTC)
    assert health_flags(health) == (True, True, False)


XPUS = json.dumps([
    {"id": f"xpu-{i}", "index": i, "count": 4, "devmem": 98304, "devcore": 100, "type": "XPU", "numa": i // 4,
     "health": True}
    for i in range(8)
])


def test_vxpu_inventory() -> None:
    devices = SLICED.node_devices(kunlun_node(register=XPUS))
    assert [d.id for d in devices] == [f"xpu-{i}" for i in range(8)]
    assert {d.device_vendor for d in devices} == {"XPU"}
    one = '[{"id":"xpu-0","index":0,"count":1,"devmem":98304,"devcore":100,"type":"XPU","health":true}]'
    assert SLICED.node_devices(kunlun_node(register=one))[0].device_vendor == "XPU"


@pytest.mark.parametrize(
    ("register", "error"),
    [
        (None, "^annos not found hami.io/node-register-xpu$"),
        ("not-json", "invalid"),
        ("[]", "^no device found on node$"),
        # The vXPU inventory is JSON only.
        ("xpu-0,1,98304,100,XPU,0,true:", "invalid"),
    ],
    ids=readable,
)
def test_vxpu_inventory_errors(register: str | None, error: str) -> None:
    with pytest.raises(InventoryError, match=error):
        SLICED.node_devices(kunlun_node(register=register))


@pytest.mark.parametrize(
    ("handshake", "vxpus", "healthy", "need_update", "write"),
    [
        ("Requesting_2025-01-07 00:00:00", None, False, False, False),  # expired, no vXPU: gone
        ("Requesting_2025-01-07 00:00:00", "8", True, False, False),  # expired but allocatable
        ("Requesting_2026-11-29 21:03:00", None, True, False, False),  # within 60 s
        ("Unknown", None, True, True, True),
        (None, None, True, True, True),
    ],
    ids=readable,
)
def test_vxpu_health(
    handshake: str | None, vxpus: str | None, healthy: bool, need_update: bool, write: bool
) -> None:
    annos = {vxpu.HANDSHAKE: handshake} if handshake is not None else {}
    health = SLICED.check_health(kunlun_node(cards=None, vxpus=vxpus, **annos), NOW, UTC)
    assert health_flags(health) == (healthy, need_update, write)


# --------------------------------------------------------------------------------------------
# Fit (TestKunlun*_Fit_*, the uuid annotations)


@dataclasses.dataclass
class Card:
    """One card as HAMi's tests write a DeviceUsage (index = position unless given)."""

    used: int = 0
    usedmem: int = 0
    totalmem: int = 98304
    health: bool = True
    index: int | None = None


def run_fit(
    vendor: Vendor, cards: Sequence[Card], request: ContainerDeviceRequest,
    annos: dict[str, str] | None = None, order: Sequence[int] | None = None,
) -> tuple[bool, list[ContainerDevice], str]:
    devices = [DeviceInfo(id=f"xpu-{i}", index=i if c.index is None else c.index, count=10, devmem=c.totalmem,
                          devcore=100, type=vendor.key, health=c.health) for i, c in enumerate(cards)]
    usage = [DeviceUsage(c.used, c.usedmem, 0) for c in cards]
    ctx = pod_fit_context(pod(annotations=annos or {}), vendors=Vendors([vendor]))
    positions = list(order) if order is not None else list(range(len(cards)))
    result = vendor.fit(request, devices, usage, positions, ctx=ctx, cordoned=frozenset(), allocated=())
    # The order-free verdict agrees with the ordered Fit wherever it answers.
    quick = vendor.quick_verdict(request, devices, usage, positions[::-1], ctx=ctx, cordoned=frozenset())
    assert quick is None or quick == result.reason
    assert result.ok == (not result.reason)
    return result.ok, result.devices, result.reason


def uuids(devices: list[ContainerDevice]) -> list[str]:
    return [d.uuid for d in devices]


EIGHT_SHARED = [Card(used=1, usedmem=24576)] * 8
ALL = ",".join(f"xpu-{i}" for i in range(8))


@pytest.mark.parametrize(
    ("cards", "request_", "annos", "ok", "chosen", "reason"),
    [
        # TestKunlunVDevices_Fit_Mutex: default shares a used card, mutex finds none idle.
        (EIGHT_SHARED, slice_req(1, 24576, 0, 25), {}, True, ["xpu-0"], ""),
        (EIGHT_SHARED, slice_req(1, 24576, 0, 25), {keys.GPU_SCHEDULER_POLICY: "mutex"}, False, [],
         "8/8 ExclusiveDeviceAllocateConflict"),
        # mutex: the idle card is taken; only cards that would take the slice count as conflicts.
        ([*EIGHT_SHARED[:7], Card()], slice_req(1, 24576, 0, 25), {keys.GPU_SCHEDULER_POLICY: "mutex"}, True,
         ["xpu-7"], ""),
        ([Card(used=1, usedmem=49152)] * 8, slice_req(1, 24576, 0, 25), {keys.GPU_SCHEDULER_POLICY: "mutex"},
         False, [], "1/8 NumaNotFit"),
        # TestKunlunVDevices_Fit_NumaNotFit: 1024 MiB cards (unhealthy too) cannot take 2048 MiB.
        ([Card(totalmem=1024, health=False)] * 8, slice_req(1, 2048, 0, 2), {}, False, [], "1/8 NumaNotFit"),
        # TestKunlunVDevices_Fit_UUIDAnnotations
        ([Card()] * 8, slice_req(1), {common.USE_UUID: "xpu-3"}, True, ["xpu-3"], ""),
        ([Card()] * 8, slice_req(1), {common.BAIDU_USE_UUID: "xpu-2"}, True, ["xpu-2"], ""),
        ([Card()] * 8, slice_req(1), {common.NOUSE_UUID: ALL}, False, [], "8/8 CardUuidMismatch"),
        ([Card()] * 8, slice_req(1), {common.BAIDU_NOUSE_UUID: ALL}, False, [], "8/8 CardUuidMismatch"),
        # Both spellings must pass; an empty value constrains nothing.
        ([Card()] * 8, slice_req(1), {common.USE_UUID: "xpu-3", common.BAIDU_NOUSE_UUID: "xpu-3"}, False, [],
         "8/8 CardUuidMismatch"),
        ([Card()] * 8, slice_req(1), {common.USE_UUID: " "}, True, ["xpu-0"], ""),
        # A refused card is counted once even when nothing else fits.
        ([Card(), Card(used=1, usedmem=49152)], slice_req(2, 24576, 0, 25), {common.NOUSE_UUID: "xpu-0"},
         False, [], "1/2 CardUuidMismatch"),
        # Slices of one card are of one size; the memory must also be left.
        ([Card(used=3, usedmem=73728)], slice_req(1, 24576, 0, 25), {}, True, ["xpu-0"], ""),
        ([Card(used=4, usedmem=98304)], slice_req(1, 24576, 0, 25), {}, False, [], "1/1 NumaNotFit"),
        ([Card(used=1, usedmem=24576)], slice_req(1, 49152, 0, 50), {}, False, [], "1/1 NumaNotFit"),
        # Counts other than 1, 2, 4 and 8 never fit.
        ([Card()] * 8, slice_req(3), {}, False, [], "1/8 NumaNotFit"),
    ],
    ids=readable,
)
def test_vxpu_fit(
    cards: list[Card], request_: ContainerDeviceRequest, annos: dict[str, str], ok: bool, chosen: list[str],
    reason: str,
) -> None:
    got_ok, got, got_reason = run_fit(SLICED, cards, request_, annos)
    assert (got_ok, uuids(got), got_reason) == (ok, chosen, reason)


@pytest.mark.parametrize(
    ("cards", "request_", "annos", "ok", "chosen", "reason"),
    [
        # TestKunlunDevices_Fit_NumaNotFit: every card in use.
        ([Card(used=1, health=False)] * 8, whole_req(1), {}, False, [], "1/8 NumaNotFit"),
        # TestKunlunDevices_Fit_UseUUID
        ([Card()] * 8, whole_req(1), {common.BAIDU_USE_UUID: "xpu-5"}, True, ["xpu-5"], ""),
        ([Card()] * 8, whole_req(1), {common.USE_UUID: "xpu-3"}, True, ["xpu-3"], ""),
        ([Card()] * 8, whole_req(1), {"hami.io/use-xpu-uuid": "xpu-6"}, True, ["xpu-6"], ""),
        ([Card()] * 8, whole_req(1), {common.USE_UUID: "xpu-99"}, False, [], "8/8 CardUuidMismatch"),
        # TestKunlunDevices_Fit_NoUseUUID
        ([Card()] * 8, whole_req(1), {common.BAIDU_NOUSE_UUID: ALL}, False, [], "8/8 CardUuidMismatch"),
        ([Card()] * 8, whole_req(1), {common.NOUSE_UUID: ALL}, False, [], "8/8 CardUuidMismatch"),
        # Whole cards ignore mutex and memory: only idle healthy cards.
        ([Card(used=1, usedmem=1)] * 7 + [Card()], whole_req(1), {keys.GPU_SCHEDULER_POLICY: "mutex"}, True,
         ["xpu-7"], ""),
        ([Card()] * 8, whole_req(8), {}, True, [f"xpu-{i}" for i in range(8)], ""),
        ([Card()] * 7 + [Card(health=False)], whole_req(8), {}, False, [], "1/8 NumaNotFit"),
        ([Card()] * 4, whole_req(2), {}, True, ["xpu-0", "xpu-1"], ""),
        ([Card()] * 8, whole_req(6), {}, False, [], "1/8 NumaNotFit"),
        # Two free cards, not linked (0 and 5): no combination.
        ([Card(used=0 if i in (0, 5) else 1) for i in range(8)], whole_req(2), {}, False, [],
         "1/8 NumaNotFit"),
    ],
    ids=readable,
)
def test_whole_fit(
    cards: list[Card], request_: ContainerDeviceRequest, annos: dict[str, str], ok: bool, chosen: list[str],
    reason: str,
) -> None:
    got_ok, got, got_reason = run_fit(WHOLE, cards, request_, annos)
    assert (got_ok, uuids(got), got_reason) == (ok, chosen, reason)


def test_policy_order_decides_the_wings() -> None:
    """Fit sees the cards in policy order: positions 0-3 are the left wing whatever their index."""
    ok, got, _ = run_fit(WHOLE, [Card()] * 8, whole_req(2), order=[7, 6, 5, 4, 3, 2, 1, 0])
    assert ok and uuids(got) == ["xpu-7", "xpu-6"]


def test_entries_carry_card_or_slice_amounts() -> None:
    """Whole cards: the card's memory and cores; slices: the request's (both with the card index)."""
    _, got, _ = run_fit(WHOLE, [Card(), Card(index=6)], whole_req(1), {common.USE_UUID: "xpu-1"})
    assert got == [ContainerDevice("xpu-1", "kunlun", 98304, 100, 6)]
    _, got, _ = run_fit(SLICED, [Card()], slice_req(1, 49152, 0, 50))
    assert got == [ContainerDevice("xpu-0", "XPU", 49152, 50, 0)]


def test_an_index_no_card_has_fits_with_fewer_cards() -> None:
    """graghSelect answers indices 0-7 for 8 cards; cards without those indices are skipped, and
    Fit still succeeds (HAMi's behaviour, e.g. an inventory that omits `index`)."""
    ok, got, reason = run_fit(SLICED, [Card(index=0)] * 8, slice_req(8))
    assert (ok, reason) == (True, "")
    assert uuids(got) == ["xpu-0"]  # indices 0..7 looked up: only 0 exists (its first card), 1..7 skipped
    ok, got, _ = run_fit(SLICED, [Card(index=9 + i) for i in range(8)], slice_req(8))
    assert ok and got == []


def test_add_usage() -> None:
    """Whole cards count the slot only (AddResourceUsage); slices add memory and cores too."""
    dev = DeviceInfo(id="d", devmem=98304, devcore=100)
    u = DeviceUsage(1, 10, 1000)
    WHOLE.add_usage(dev, u, ContainerDevice("d", "kunlun", 98304, 100), container_index=0, device_index=0,
                    migs=[])
    assert u == DeviceUsage(2, 10, 1000)
    u = DeviceUsage(1, 1000, 10)
    SLICED.add_usage(dev, u, ContainerDevice("d", "XPU", 2000, 20), container_index=0, device_index=0,
                     migs=[])
    assert u == DeviceUsage(2, 3000, 30)


# --------------------------------------------------------------------------------------------
# Annotations, lock, admission, score


def card(i: int) -> ContainerDevice:
    return ContainerDevice(f"n-kunlun-{i}", "kunlun", 98304, 100, i)


@pytest.mark.parametrize(
    ("per_container", "expected"),
    [
        ([[card(0), card(3)]],
         {"hami.io/kunlun-allocated": "n-kunlun-0,kunlun,98304,100:n-kunlun-3,kunlun,98304,100:;",
          "BAIDU_COM_DEVICE_IDX": "0,3"}),
        # One BAIDU_COM_DEVICE_IDX per pod: the last container with cards wins.
        ([[card(1)], [], [card(2), card(5)], []],
         {"hami.io/kunlun-allocated": "n-kunlun-1,kunlun,98304,100:;;"
                                      "n-kunlun-2,kunlun,98304,100:n-kunlun-5,kunlun,98304,100:;;",
          "BAIDU_COM_DEVICE_IDX": "2,5"}),
        ([[], [card(4)]], {"hami.io/kunlun-allocated": ";n-kunlun-4,kunlun,98304,100:;",
                           "BAIDU_COM_DEVICE_IDX": "4"}),
        ([], {}),
    ],
    ids=readable,
)
def test_whole_patch_annotations(
    per_container: list[list[ContainerDevice]], expected: dict[str, str]
) -> None:
    assert WHOLE.patch_annotations(per_container, [], node="n", now=1) == expected


def test_vxpu_patch_annotations() -> None:
    entries = [[ContainerDevice("xpu-0", "XPU", 24576, 25, 0)]]
    assert SLICED.patch_annotations(entries, [], node="n", now=1) == {
        "hami.io/xpu-devices-to-allocate": "xpu-0,XPU,24576,25:;",
        "hami.io/xpu-devices-allocated": "xpu-0,XPU,24576,25:;",
    }
    assert SLICED.patch_annotations([], [], node="n", now=1) == {}


@pytest.mark.parametrize(
    ("p", "locks"),
    [
        (pod(containers=[container(limits={XPU_COUNT: "8"})]), False),  # whole cards never lock
        (pod(containers=[container(requests={VXPU: "1"})]), True),  # a vXPU count in requests locks
        (pod(init_containers=[container(limits={VXPU: "1"})], containers=[container()]), False),
        (pod(containers=[container(limits={XPU_COUNT: "1"}), container("v", limits={VXPU: "1"})]), True),
    ],
    ids=readable,
)
def test_only_vxpu_locks_for_regular_containers(p: dict[str, Any], locks: bool) -> None:
    assert _locking_request(p, VENDORS) is locks


@pytest.mark.parametrize(
    ("ctr", "has"),
    [
        (container(limits={XPU_COUNT: "1"}), True),
        (container(requests={XPU_COUNT: "1"}), False),  # MutateAdmission reads limits
        (container(limits={VXPU: "1"}), False),
    ],
    ids=readable,
)
def test_whole_mutate(ctr: dict[str, Any], has: bool) -> None:
    before = json.loads(json.dumps(ctr))
    assert WHOLE.mutate(ctr, pod()) is has
    assert ctr == before


@pytest.mark.parametrize(
    ("ctr", "has", "after"),
    [
        (container(), False, container()),
        (container(limits={VXPU: "1"}), True, container(limits={VXPU: "1"})),
        # Test_MutateAdmission: 30000 rounded to 49152 in limits and requests (created if absent).
        (container(limits={VXPU: "1", VMEM: "30000"}, requests={}), True,
         container(limits={VXPU: "1", VMEM: "49152"}, requests={VMEM: "49152"})),
        (container(limits={VXPU: "1", VMEM: "30000"}), True,
         container(limits={VXPU: "1", VMEM: "49152"}, requests={VMEM: "49152"})),
        (container(limits={VXPU: "1", VMEM: "24576"}), True,
         container(limits={VXPU: "1", VMEM: "24576"}, requests={VMEM: "24576"})),
        (container(limits={VXPU: "1", VMEM: "24577"}, requests={VXPU: "1", VMEM: "24577"}), True,
         container(limits={VXPU: "1", VMEM: "49152"}, requests={VXPU: "1", VMEM: "49152"})),
        (container(limits={VXPU: "1", VMEM: "49153"}), True,
         container(limits={VXPU: "1", VMEM: "98304"}, requests={VMEM: "98304"})),
        (container(limits={VXPU: "1", VMEM: "30Gi"}), True,
         container(limits={VXPU: "1", VMEM: "98304"}, requests={VMEM: "98304"})),
        (container(limits={VXPU: "1", VMEM: "1500m"}), True,  # Value() rounds up: 2
         container(limits={VXPU: "1", VMEM: "24576"}, requests={VMEM: "24576"})),
        # Memory only in requests, or the count only in requests: left alone.
        (container(limits={VXPU: "1"}, requests={VMEM: "30000"}), True,
         container(limits={VXPU: "1"}, requests={VMEM: "30000"})),
        (container(requests={VXPU: "1", VMEM: "30000"}), False,
         container(requests={VXPU: "1", VMEM: "30000"})),
    ],
    ids=readable,
)
def test_vxpu_mutate(ctr: dict[str, Any], has: bool, after: dict[str, Any]) -> None:
    assert SLICED.mutate(ctr, pod()) is has
    assert ctr == after


def test_webhook_rounds_vxpu_memory_and_takes_kunlun_pods() -> None:
    response = review(pod(containers=[container(limits={VXPU: "1", VMEM: "30000"})]), VENDORS)
    assert response.allowed
    ops = patch_ops(response)
    assert ops[("replace", "/spec/containers/0/resources/limits/kunlunxin.com~1vxpu-memory")] == "49152"
    assert ops[("add", "/spec/containers/0/resources/requests")] == {VMEM: "49152"}
    assert ops[("add", "/spec/schedulerName")] == "hami-scheduler"
    cards = review(pod(containers=[container(limits={XPU_COUNT: "2"})]), VENDORS)
    scheduler = {"op": "add", "path": "/spec/schedulerName", "value": "hami-scheduler"}
    assert cards.allowed and scheduler in cards.patch
    denied = review(privileged(container(limits={XPU_COUNT: "1"})), VENDORS)
    assert not denied.allowed and denied.message == "container c is privileged"


def kunlun_devices(n: int) -> list[DeviceInfo]:
    return [DeviceInfo(id=f"n-kunlun-{i}", index=i, type="kunlun") for i in range(n)]


def test_whole_score_node() -> None:
    """Test_ScoreNode: four used cards on the left, the pod takes all eight: 1 - 0 ⇒ 3000."""
    every = [[card(i) for i in range(8)]]
    used = [DeviceUsage(1, 0, 0) for _ in range(4)]
    assert WHOLE.score_node(every, annotations={}, devices=kunlun_devices(4), previous=used,
                            policy="binpack") == 3000.0
    assert WHOLE.score_node([[card(0)]], annotations={}, devices=[], previous=[], policy="spread") == 0.0
    # A node with a device of another kind scores 0.
    mixed = [*kunlun_devices(8), DeviceInfo(id="GPU-0", type="NVIDIA-A100")]
    assert WHOLE.score_node(every, annotations={}, devices=mixed, previous=[DeviceUsage()] * 9,
                            policy="binpack") == 0.0
    assert SLICED.score_node(every, annotations={}, devices=[], previous=[], policy="binpack") == 0.0


# --------------------------------------------------------------------------------------------
# In the scheduler: registration, decision, metrics, device plugin


def kunlun_pod(name: str, *ctrs: dict[str, Any], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return pod(name, uid=f"uid-{name}", containers=list(ctrs), annotations=annotations,
               status={"phase": "Pending"})


async def test_registration_reads_both_inventories_and_stamps_the_xpu_handshake() -> None:
    async with registration(VENDORS, NOW) as reg:
        reg.add(
            kunlun_node("cards", cards="8"),
            kunlun_node("slices", cards=None, register=XPUS, vxpus="32"),
            kunlun_node("broken", cards="2", register="xpu-0,1:"),  # one node's bad annotation ...
            kunlun_node("plain", cards=None))
        report = await reg.run()
        cards = reg.state.ledger.view("cards")
        assert cards is not None and [d.id for d in cards.devices] == [f"cards-kunlun-{i}" for i in range(8)]
        slices = reg.state.ledger.view("slices")
        assert slices is not None and [d.id for d in slices.devices] == [f"xpu-{i}" for i in range(8)]
        broken = reg.state.ledger.view("broken")  # ... keeps its whole cards and never affects another
        assert broken is not None and [d.type for d in broken.devices] == ["kunlun", "kunlun"]
        assert reg.state.ledger.view("plain") is None
        # A node without Kunlun capacity is not an error (like a node without an annotation).
        assert set(report.errors) == {"broken", "plain"}
        assert report.errors["broken"].startswith("invalid node annotation JSON")
        assert report.errors["plain"] == "annos not found hami.io/node-nvidia-register"
        annotations = reg.node_annotations("cards")
        assert annotations[vxpu.HANDSHAKE] == "Requesting_2026-11-29 21:03:30"


async def test_unhealthy_vxpu_is_cleaned_up_and_whole_cards_stay() -> None:
    async with registration(VENDORS, NOW) as reg:
        reg.add(kunlun_node("mixed", cards="2", register=XPUS, vxpus="32"))
        await reg.run()
        view = reg.state.ledger.view("mixed")
        assert view is not None and len(view.devices) == 10
        reg.cluster.patch("nodes", "mixed", {"status": {"allocatable": {VXPU: "0"}}}, subresource="status")
        reg.refresh("mixed")
        reg.clock[0] = NOW + timedelta(seconds=61)
        report = await reg.run()
        assert report.cleaned == ["mixed"]
        view = reg.state.ledger.view("mixed")
        assert view is not None and [d.id for d in view.devices] == ["mixed-kunlun-0", "mixed-kunlun-1"]
        assert vxpu.HANDSHAKE not in reg.node_annotations("mixed")


def whole_state(name: str = "k1", cards: str = "8") -> SchedulerState:
    state = SchedulerState(VENDORS)
    state.set_node_devices(name, WHOLE.node_devices(kunlun_node(name, cards=cards)))
    return state


def test_decision_writes_the_whole_card_annotations() -> None:
    state = whole_state()
    p = kunlun_pod("p", container(limits={XPU_COUNT: "2"}))
    d = decide(p, ["k1"], state, default_node_policy="binpack", default_gpu_policy="spread", now=1700000000)
    assert isinstance(d, Chosen)
    # Equal idle cards: the left wing holds 4 fitting cards, the first two of the list are taken.
    assert d.annotations == {
        keys.VGPU_NODE: "k1",
        keys.VGPU_TIME: "1700000000",
        "hami.io/kunlun-allocated": "k1-kunlun-0,kunlun,98304,100:k1-kunlun-1,kunlun,98304,100:;",
        "BAIDU_COM_DEVICE_IDX": "0,1",
    }
    assert not _locking_request(p, VENDORS)
    state.reserve(p, d)
    view = state.ledger.view("k1")
    assert view is not None and [u.used for u in view.usage] == [1, 1, 0, 0, 0, 0, 0, 0]
    # Six cards left: a pod asking six never fits, one asking eight is short of cards.
    six = decide(kunlun_pod("q", container(limits={XPU_COUNT: "6"})), ["k1"], state,
                 default_node_policy="binpack", default_gpu_policy="spread", now=1)
    assert six == NoFit({"k1": "1/8 NumaNotFit"})
    eight = decide(kunlun_pod("r", container(limits={XPU_COUNT: "8"})), ["k1"], state,
                   default_node_policy="binpack", default_gpu_policy="spread", now=1)
    assert eight == NoFit({"k1": "1/8 NumaNotFit"})
    more = decide(kunlun_pod("s", container(limits={XPU_COUNT: "9"})), ["k1"], state,
                  default_node_policy="binpack", default_gpu_policy="spread", now=1)
    assert more == NoFit({"k1": "NodeInsufficientDevice"})


def test_two_containers_never_share_a_whole_card() -> None:
    state = whole_state()
    p = kunlun_pod("p", container("a", limits={XPU_COUNT: "1"}), container("b", limits={XPU_COUNT: "1"}))
    d = decide(p, ["k1"], state, default_node_policy="binpack", default_gpu_policy="binpack", now=1)
    assert isinstance(d, Chosen)
    first, second = d.annotations["hami.io/kunlun-allocated"].split(";")[:2]
    assert first != second and first and second
    assert d.annotations["BAIDU_COM_DEVICE_IDX"] == second.split(",")[0].rsplit("-", 1)[1]


def test_node_score_prefers_the_less_fragmenting_node() -> None:
    """`a` has card 0 used, `b` cards 0-3. One more card: on `a` it joins card 0's wing (3 ⇒ 3,
    2000), on `b` it opens the right wing (1 ⇒ 3, 0). Binpack would prefer the fuller `b`; the
    Kunlun score (not weighted by the policy) outweighs the default score."""
    state = SchedulerState(VENDORS)
    for name, taken in (("a", "1"), ("b", "4")):
        state.set_node_devices(name, WHOLE.node_devices(kunlun_node(name, cards="8")))
        first = kunlun_pod(f"first-{name}", container(limits={XPU_COUNT: taken}))
        d = decide(first, [name], state, default_node_policy="binpack", default_gpu_policy="spread", now=1)
        assert isinstance(d, Chosen)
        state.reserve(first, d)
    d = decide(kunlun_pod("next", container(limits={XPU_COUNT: "1"})), ["a", "b"], state,
               default_node_policy="binpack", default_gpu_policy="spread", now=2)
    assert isinstance(d, Chosen) and d.node == "a" and d.annotations["BAIDU_COM_DEVICE_IDX"] == "1"


def test_running_pods_are_counted_from_their_allocated_annotations() -> None:
    """A restarted scheduler rebuilds usage from `hami.io/kunlun-allocated` and
    `hami.io/xpu-devices-allocated` (§5.2): whole cards count their memory and cores there."""
    state = SchedulerState(VENDORS)
    both = kunlun_node("m", cards="8", register=XPUS)
    state.set_node_devices("m", [*WHOLE.node_devices(both), *SLICED.node_devices(both)])
    annotations = {keys.VGPU_NODE: "m", keys.VGPU_TIME: "1", keys.BIND_PHASE: "success",
                   "hami.io/kunlun-allocated": "m-kunlun-4,kunlun,98304,100:;;",
                   "hami.io/xpu-devices-allocated": ";xpu-1,XPU,24576,25:;",
                   "hami.io/xpu-devices-to-allocate": ";;"}
    ctrs = [container("k", limits={XPU_COUNT: "1"}), container("x", limits={VXPU: "1"})]
    state.on_pod(pod("old", uid="uid-old", annotations=annotations, node_name="m", phase="Running",
                     containers=ctrs))
    view = state.ledger.view("m")
    assert view is not None
    usage = {d.id: (u.used, u.usedmem, u.usedcores) for d, u in zip(view.devices, view.usage, strict=True)}
    assert usage["m-kunlun-4"] == (1, 98304, 100) and usage["xpu-1"] == (1, 24576, 25)
    assert sum(u.used for u in view.usage) == 2
    # spread sorts the busy card 4 first (then NUMA 0 before 1): the list is 4 0 1 2 | 3 5 6 7, so
    # the wings are 3 and 4 fitting cards and four cards come from the second wing of the list.
    d = decide(kunlun_pod("p", container(limits={XPU_COUNT: "4"})), ["m"], state,
               default_node_policy="binpack", default_gpu_policy="spread", now=2)
    assert isinstance(d, Chosen) and d.annotations["BAIDU_COM_DEVICE_IDX"] == "3,5,6,7"


def xpu_state() -> SchedulerState:
    state = SchedulerState(VENDORS)
    state.set_node_devices("x1", SLICED.node_devices(kunlun_node("x1", cards=None, register=XPUS)))
    return state


def test_decision_writes_the_vxpu_annotations() -> None:
    state = xpu_state()
    p = kunlun_pod("p", container(limits={VXPU: "1", VMEM: "30000"}))
    d = decide(p, ["x1"], state, default_node_policy="binpack", default_gpu_policy="spread", now=1700000000)
    assert isinstance(d, Chosen)
    allocated = d.annotations["hami.io/xpu-devices-allocated"]
    assert d.annotations["hami.io/xpu-devices-to-allocate"] == allocated
    assert allocated.endswith(",XPU,49152,50:;") and allocated.startswith("xpu-")
    assert _locking_request(p, VENDORS)
    state.reserve(p, d)
    taken = allocated.split(",")[0]
    # The card now holds a 49152 slice: another 49152 slice may join it, a 24576 one may not.
    same = kunlun_pod("q", container(limits={VXPU: "1", VMEM: "49152"}),
                      annotations={common.USE_UUID: taken})
    assert isinstance(decide(same, ["x1"], state, default_node_policy="binpack", default_gpu_policy="spread",
                             now=2), Chosen)
    other = kunlun_pod("r", container(limits={VXPU: "1", VMEM: "24576"}),
                       annotations={common.USE_UUID: taken})
    assert decide(other, ["x1"], state, default_node_policy="binpack", default_gpu_policy="spread",
                  now=2) == NoFit({"x1": "7/8 CardUuidMismatch"})  # the 8th card fails silently


def test_a_pod_asking_cards_slices_and_gpus_gets_one_allocation_per_vendor() -> None:
    state = SchedulerState(VENDORS)
    gpu = DeviceInfo(id="GPU-0", count=10, devmem=8000, devcore=100, type="NVIDIA-A100", health=True)
    both = kunlun_node("m", cards="8", register=XPUS)
    state.set_node_devices("m", [gpu, *WHOLE.node_devices(both), *SLICED.node_devices(both)])
    p = kunlun_pod("m", container("g", limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"}),
                   container("k", limits={XPU_COUNT: "1"}), container("x", limits={VXPU: "1"}))
    d = decide(p, ["m"], state, default_node_policy="binpack", default_gpu_policy="spread", now=1)
    assert isinstance(d, Chosen)
    assert d.annotations[keys.VGPU_ALLOCATED] == "GPU-0,NVIDIA,1000,0:;;;"
    assert d.annotations["hami.io/kunlun-allocated"].startswith(";m-kunlun-")
    assert d.annotations["hami.io/xpu-devices-allocated"].endswith(",XPU,98304,100:;")
    alloc = state.reserve(p, d)
    assert set(alloc.devices) == {NVIDIA, "kunlun", "XPU"}
    assert state.quota.used("default", VMEM) == 98304


def test_metrics_list_kunlun_cards() -> None:
    state = whole_state()
    p = kunlun_pod("p", container(limits={XPU_COUNT: "1"}))
    d = decide(p, ["k1"], state, default_node_policy="binpack", default_gpu_policy="spread", now=1)
    assert isinstance(d, Chosen)
    state.reserve(p, d)
    text = metrics_text(state)
    # The ledger counts the entry's whole card (98304 MiB, 100 cores), as HAMi's usage rebuild does.
    assert (
        'hami_gpu_memory_allocated_bytes{device_cores="100",device_index="0",device_type="kunlun",'
        'device_uuid="k1-kunlun-0",node="k1",zone="vGPU"} 1.03079215104e+11'
    ) in text.splitlines()
    assert (
        'hami_gpu_shared_count{device_index="0",device_type="kunlun",device_uuid="k1-kunlun-0",node="k1",'
        'zone="vGPU"} 1'
    ) in text.splitlines()


def test_template_nodes_read_capacity_and_annotation() -> None:
    """The simulation path (`Nodes` instead of `NodeNames`) reads both inventories."""
    nodes = [kunlun_node("b", cards="4"), kunlun_node("a", cards=None, register="bad"), node("c")]
    d = decide_on_nodes(kunlun_pod("p", container(limits={XPU_COUNT: "4"})), nodes, VENDORS,
                        default_node_policy="binpack", default_gpu_policy="spread", now=5)
    assert isinstance(d, Chosen) and d.node == "b"
    assert d.annotations["BAIDU_COM_DEVICE_IDX"] == "0,1,2,3"
    assert d.failed == {"a": "node unregistered", "c": "node unregistered"}


async def test_simulated_device_plugin_runs_whole_card_pods_and_consumes_vxpu() -> None:
    """Whole cards have no to-allocate annotation: the plugin has nothing to consume or write for
    them (no bind-phase either) and the pod runs; the vXPU entries are consumed as NVIDIA's."""
    cluster = MemoryCluster(seed=1)
    lock = {keys.NODE_LOCK: "2026-01-01T00:00:00Z,default,mixed"}
    cluster.create("nodes", {"metadata": {"name": "n1", "annotations": lock}})
    plugin = SimDevicePlugin(KubeClient(MemoryTransport(cluster)), VENDORS)
    cards_only = {"hami.io/kunlun-allocated": "n1-kunlun-0,kunlun,98304,100:;", "BAIDU_COM_DEVICE_IDX": "0",
                  keys.BIND_PHASE: "allocating"}
    cards_pod = pod("cards", annotations=cards_only, containers=[container(limits={XPU_COUNT: "1"})])
    cluster.create("pods", cards_pod)
    cluster.bind("default", "cards", "n1")
    result = await plugin.admit(cluster.get("pods", "cards", "default"))
    assert result.phase == "Running"
    assert cluster.get("pods", "cards", "default")["metadata"]["annotations"] == cards_only
    assert keys.NODE_LOCK in cluster.get("nodes", "n1")["metadata"]["annotations"]  # not this pod's

    mixed = {"hami.io/kunlun-allocated": "n1-kunlun-1,kunlun,98304,100:;;", "BAIDU_COM_DEVICE_IDX": "1",
             "hami.io/xpu-devices-to-allocate": ";xpu-2,XPU,24576,25:;",
             "hami.io/xpu-devices-allocated": ";xpu-2,XPU,24576,25:;", keys.BIND_PHASE: "allocating"}
    cluster.create("pods", pod("mixed", annotations=mixed, containers=[
        container("k", limits={XPU_COUNT: "1"}), container("x", limits={VXPU: "1", VMEM: "24576"})]))
    cluster.bind("default", "mixed", "n1")
    result = await plugin.admit(cluster.get("pods", "mixed", "default"))
    assert result.phase == "Running"
    after = cluster.get("pods", "mixed", "default")["metadata"]["annotations"]
    assert after["hami.io/xpu-devices-to-allocate"] == ";;" and after[keys.BIND_PHASE] == "success"
    assert after["hami.io/kunlun-allocated"] == "n1-kunlun-1,kunlun,98304,100:;;"
    assert keys.NODE_LOCK not in (cluster.get("nodes", "n1")["metadata"].get("annotations") or {})


def test_sections_module_entry_point() -> None:
    """The registry line `Entry("kunlun", "kunlun")` builds both vendors, whole cards first."""
    built = kunlun.vendors(CHART, vendor_flags(SchedulerOptions()))
    assert [v.key for v in built] == [whole.KUNLUN, vxpu.XPU]


# --------------------------------------------------------------------------------------------
# End to end through the CLI


def snapshot_node(name: str, *, capacity: dict[str, str], annotations: dict[str, str] | None = None) -> Any:
    resources = {"pods": "110", "cpu": "8", "memory": "32Gi", **capacity}
    return node(name, annotations=annotations, capacity=resources, allocatable=resources, typed=True)


def kunlun_pod_yaml(name: str, limits: str) -> str:
    return (f"apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default}}\nspec:\n"
            f"  containers:\n  - name: c\n    image: x\n    resources: {{limits: {{{limits}}}}}\n")


def test_simulate_cli_places_whole_cards_and_slices(tmp_path: Path) -> None:
    items = [
        snapshot_node("cards", capacity={XPU_COUNT: "8"}),
        snapshot_node("slices", capacity={VXPU: "32"}, annotations={vxpu.REGISTER: XPUS}),
    ]
    pods = [
        kunlun_pod_yaml("two-cards", f"{XPU_COUNT}: 2"),
        kunlun_pod_yaml("slice", f"{VXPU}: 1, {VMEM}: 30000"),
        kunlun_pod_yaml("six-cards", f"{XPU_COUNT}: 6"),
    ]
    report = simulate_report(tmp_path, nodes=items, pods=pods, config=CHART_SECTION)

    two = report["two-cards"]
    assert two["node"] == "cards"
    assert two["annotations"]["hami.io/kunlun-allocated"] == (
        "cards-kunlun-0,kunlun,98304,100:cards-kunlun-1,kunlun,98304,100:;"
    )
    assert two["annotations"]["BAIDU_COM_DEVICE_IDX"] == "0,1"
    # No to-allocate annotation: the simulated plugin writes nothing back for whole cards.
    assert two["annotations"][keys.BIND_PHASE] == "allocating"

    sliced = report["slice"]
    assert sliced["node"] == "slices"
    assert sliced["annotations"]["hami.io/xpu-devices-allocated"].endswith(",XPU,49152,50:;")
    assert sliced["annotations"]["hami.io/xpu-devices-to-allocate"] == ";"
    assert sliced["annotations"][keys.BIND_PHASE] == "success"

    six = report["six-cards"]
    assert six["node"] is None
    assert six["reasons"] == {"cards": "1/8 NumaNotFit", "slices": "NodeInsufficientDevice"}
