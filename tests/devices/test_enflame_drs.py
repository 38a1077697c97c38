"""Enflame DRS (vendor `Enflame`): the vectors of HAMi v2.10.0's pkg/device/enflame/device_test.go
— inventory from `enflame.com/gcu-drs-capacity`, requests, profile choice, fit, usage, the pod
annotations the Enflame device plugin reads, admission."""

from __future__ import annotations

import dataclasses
import json
import math
from datetime import UTC
from typing import Any

import pytest

from tests.builders import container, pod
from tests.devices.enflame_helpers import (
    CORE_NAME,
    DRS,
    DRS_NAME,
    MEM_NAME,
    PROFILES,
    drs_capacity,
    drs_ctr,
    drs_node,
    readable,
)
from tests.devices.vendorkit import NOW, health_flags
from vgpu_scheduler.devices.enflame import capacity, drs
from vgpu_scheduler.devices.enflame.profiles import candidates, memory_request_gb, parse_profile
from vgpu_scheduler.devices.enflame.types import DrsDevice, DrsEntry, DrsRequest
from vgpu_scheduler.devices.protocol import MutationError, Vendors
from vgpu_scheduler.engine.fit import pod_fit_context
from vgpu_scheduler.model import ContainerDevice, ContainerDeviceRequest, DeviceUsage
from vgpu_scheduler.wire import keys
from vgpu_scheduler.wire.inventory import InventoryError

INT32_MAX = 2**31 - 1


def direct(slices: int, ctr: str = "c") -> DrsRequest:
    return DrsRequest(1, "Enflame", slices, 0, 0, container=ctr)


def by_spec(memory: int, cores: int, ctr: str = "c") -> DrsRequest:
    return DrsRequest(1, "Enflame", memory, -1, cores, container=ctr)


# --------------------------------------------------------------------------------------------
# Inventory (TestGetNodeDevices_DRSAnnotation, TestParseDRSCapacity_RejectsNaNAndInf)


def test_inventory_from_the_drs_annotation() -> None:
    value = (
        '{"devices":[{"index":"0","minor":"0","capacity":6}],'
        '"profiles":{"1g.6gb":"0","3g.20gb":"1","6g.40gb":"2"}}'
    )
    devices = DRS.node_devices(drs_node("node-a", value))
    assert devices == [
        DrsDevice(
            id="node-a-enflame-drs-0",
            index=0,
            count=6,
            devmem=40960,
            devcore=100,
            type="Enflame",
            numa=0,
            health=True,
            device_vendor="Enflame",
            minor="0",
            index_text="0",
            profiles=tuple(PROFILES.items()),
            max_slice=6,
        )
    ]


def test_index_and_minor_fall_back() -> None:
    """An index that is not an integer takes the device's position; an empty minor the index."""
    value = json.dumps(
        {
            "Devices": [
                {"index": "7", "minor": " ", "capacity": "3"},
                {"INDEX": "x", "Minor": "9", "capacity": 2.9},
            ],
            "profiles": {"2g.": "a", "4G.16GB": "b"},
        }
    )
    devices = DRS.node_devices(drs_node("n", value))
    assert [(d.id, d.index, d.index_text, d.minor, d.count) for d in devices if isinstance(d, DrsDevice)] == [
        ("n-enflame-drs-7", 7, "7", "7", 3),
        ("n-enflame-drs-1", 1, "1", "9", 2),  # capacity 2.9 truncated, as int32(float64)
    ]
    assert devices[0].devmem == 16 * 1024


def test_profiles_without_memory_use_the_slice_count_as_gb() -> None:
    devices = DRS.node_devices(drs_node("n", drs_capacity(4, profiles={"2g": "0", "4g.x": "1"})))
    assert devices[0].devmem == 4 * 1024


@pytest.mark.parametrize(
    ("value", "error"),
    [
        (None, "annotation not found enflame.com/gcu-drs-capacity"),
        ("", "failed to parse enflame.com/gcu-drs-capacity: unexpected end of JSON input"),
        ('{"devices":[', "failed to parse enflame.com/gcu-drs-capacity: unexpected end of JSON input"),
        ("{x}", "failed to parse enflame.com/gcu-drs-capacity: invalid JSON at offset 1"),
        ('{"profiles":{"1g.6gb":"0"},"devices":[{"capacity":Infinity}]}', "failed to parse"),
        (
            "[]",
            "failed to parse enflame.com/gcu-drs-capacity: json: cannot unmarshal array into Go value of "
            "type enflame.drsCapacitySpec",
        ),
        (
            '{"devices":{}}',
            "cannot unmarshal object into Go struct field drsCapacitySpec.devices of type "
            r"\[\]enflame.drsDeviceSpec",
        ),
        (
            '{"devices":[{"index":0}]}',
            "cannot unmarshal number into Go struct field drsDeviceSpec.devices.index of type string",
        ),
        (
            '{"profiles":{"1g.6gb":0}}',
            "cannot unmarshal number into Go struct field drsCapacitySpec.profiles",
        ),
        ('{"profiles":{"1g.6gb":"0"},"devices":[{"capacity":NaN}]}', "failed to parse"),
        ("null", "no valid drs profiles found on node n"),
        (
            json.dumps({"devices": [{"capacity": 1}], "profiles": {"x.6gb": "0", "0g.4gb": "1"}}),
            "no valid drs profiles found on node n",
        ),
        (drs_capacity(), "no drs devices found on node n"),
        (drs_capacity(6, 0), "invalid drs capacity on node n"),
        (drs_capacity(-1), "invalid drs capacity on node n"),
        (drs_capacity("six"), "invalid drs capacity on node n"),
        (drs_capacity(True), "invalid drs capacity on node n"),
        (drs_capacity(None), "invalid drs capacity on node n"),
        (drs_capacity(1e300), "invalid drs capacity on node n"),
        (drs_capacity(2147483648), "invalid drs capacity on node n"),
        (drs_capacity([1]), "invalid drs capacity on node n"),
    ],
    ids=readable,
)
def test_inventory_errors(value: str | None, error: str) -> None:
    with pytest.raises(InventoryError, match=error):
        DRS.node_devices(drs_node("n", value))


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (math.nan, None),
        (math.inf, None),
        (1e300, None),
        (42.0, 42),
        (-3.5, -3),
        ("2147483648", INT32_MAX),
        (" 12 ", 12),
        ("-2147483649", -(2**31)),
        ("1.5", None),
        (True, None),
        (None, None),
        ({}, None),
    ],
    ids=repr,
)
def test_parse_capacity(raw: object, expected: int | None) -> None:
    assert capacity.parse_capacity(raw) == expected


def test_health_is_always_good() -> None:
    health = DRS.check_health(drs_node("n"), NOW, UTC)
    assert health_flags(health) == (True, True, False)


# --------------------------------------------------------------------------------------------
# Profiles


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("3g.20gb", (3, 20)),
        (" 3G.20GB ", (3, 20)),
        ("3.20", (3, 20)),
        ("3g", (0, 0)),
        ("x.20gb", (0, 0)),
        ("3g.big", (3, 0)),
        ("3g.20gb.extra", (3, 20)),
        ("+3g.-2gb", (3, -2)),
    ],
    ids=repr,
)
def test_parse_profile(name: str, expected: tuple[int, int]) -> None:
    assert parse_profile(name) == expected


@pytest.mark.parametrize(
    ("raw", "max_gb", "expected"),
    [
        (0, 40, 0),
        (-5, 40, 0),
        (20, 40, 20),
        (80, 40, 80),
        (81, 40, 1),
        (20480, 40, 20),
        (20481, 40, 21),
        (7, 0, 7),
    ],
    ids=repr,
)
def test_memory_request_units(raw: int, max_gb: int, expected: int) -> None:
    assert memory_request_gb(raw, max_gb) == expected


def test_candidates_sorted_with_core_share() -> None:
    found = candidates([tuple(PROFILES.items())], 0)
    assert [(p.name, p.id, p.size, p.memory_gb, p.core_percent) for p in found] == [
        ("1g.6gb", "0", 1, 6, 17),
        ("3g.20gb", "1", 3, 20, 50),
        ("6g.40gb", "2", 6, 40, 100),
    ]


# --------------------------------------------------------------------------------------------
# Requests (TestGenerateResourceRequests, _ByMemoryCore)


@pytest.mark.parametrize(
    ("ctr", "expected"),
    [
        (drs_ctr(drs="3"), direct(3)),
        (container("c", requests={DRS_NAME: "3"}), direct(3)),
        (drs_ctr(mem="20480", core="40"), by_spec(20480, 40)),
        (drs_ctr(mem="20"), by_spec(20, 0)),
        (drs_ctr(core="30"), by_spec(0, 30)),
        (drs_ctr(mem="1.5"), by_spec(2, 0)),  # Quantity.Value rounds up
        (drs_ctr(mem="-5"), by_spec(-5, 0)),  # no check here: the webhook rejects it
        (drs_ctr(drs="0", mem="20"), by_spec(20, 0)),  # a count of 0 falls through to memory/core
        (drs_ctr(drs="0"), None),
        (drs_ctr(drs="2147483648", mem="20"), None),  # too large: no request at all
        (drs_ctr(mem="2147483648"), None),
        (drs_ctr(core="2147483648"), None),
        (drs_ctr(gcu="1"), None),
        ({"name": "c"}, None),
    ],
    ids=readable,
)
def test_requests(ctr: dict[str, Any], expected: ContainerDeviceRequest | None) -> None:
    assert DRS.request(ctr) == expected


def test_request_remembers_its_container() -> None:
    req = DRS.request(drs_ctr("worker", drs="1"))
    assert isinstance(req, DrsRequest) and req.container == "worker"


# --------------------------------------------------------------------------------------------
# Fit (TestFit_*)


@dataclasses.dataclass
class Dev:
    id: str = "node-a-enflame-drs-0"
    count: int = 6
    used: int = 0
    usedmem: int = 0
    usedcores: int = 0
    totalmem: int = 40960
    totalcore: int = 0  # HAMi's vectors leave Totalcore unset
    health: bool = True
    profiles: tuple[tuple[str, str], ...] = tuple(PROFILES.items())
    max_slice: int = 0


def devices_of(devs: list[Dev]) -> list[DrsDevice]:
    return [
        DrsDevice(
            id=d.id,
            index=i,
            count=d.count,
            devmem=d.totalmem,
            devcore=d.totalcore,
            type="Enflame",
            health=d.health,
            minor=str(i),
            index_text=str(i),
            profiles=d.profiles,
            max_slice=d.max_slice,
        )
        for i, d in enumerate(devs)
    ]


def run_fit(devs: list[Dev], request: ContainerDeviceRequest, annos: dict[str, str] | None = None) -> Any:
    devices = devices_of(devs)
    usage = [DeviceUsage(d.used, d.usedmem, d.usedcores) for d in devs]
    ctx = pod_fit_context(pod(annotations=annos or {}), vendors=Vendors([DRS]))
    order = list(range(len(devs)))
    result = DRS.fit(request, devices, usage, order, ctx=ctx, cordoned=frozenset(), allocated=())
    quick = DRS.quick_verdict(request, devices, usage, order[::-1], ctx=ctx, cordoned=frozenset())
    assert quick == result.reason  # order-free, and exact
    return result


def test_fit_selects_the_profile_of_the_slice_count() -> None:
    result = run_fit([Dev()], direct(3))
    assert (result.ok, result.reason) == (True, "")
    assert result.devices == [
        DrsEntry(
            "node-a-enflame-drs-0",
            "Enflame",
            20480,
            50,
            0,
            container="c",
            profile_name="3g.20gb",
            profile_id="1",
            minor="0",
            index_text="0",
            drs_slice=3,
        )
    ]


def test_fit_selects_the_smallest_profile_covering_memory_and_cores() -> None:
    result = run_fit([Dev()], by_spec(20480, 40))  # MiB -> 20 GB, 40 %
    assert result.ok
    entry = result.devices[0]
    assert isinstance(entry, DrsEntry)
    assert (entry.usedmem, entry.usedcores, entry.profile_name, entry.profile_id) == (
        20480,
        50,
        "3g.20gb",
        "1",
    )
    assert (entry.request_memory_gb, entry.request_core_percent) == (20, 40)


@pytest.mark.parametrize(
    ("request_", "profile"),
    [
        (by_spec(0, 0), "1g.6gb"),
        (by_spec(6, 0), "1g.6gb"),
        (by_spec(7, 0), "3g.20gb"),
        (by_spec(0, 51), "6g.40gb"),
        (by_spec(40, 100), "6g.40gb"),
        (by_spec(-1, -1), "1g.6gb"),
        (direct(6), "6g.40gb"),
    ],
    ids=readable,
)
def test_profile_choice(request_: ContainerDeviceRequest, profile: str) -> None:
    entry = run_fit([Dev()], request_).devices[0]
    assert isinstance(entry, DrsEntry) and entry.profile_name == profile


OVERSIZED = [
    (("4294967299g.4294967299gb", "0"),),
    (("4294967299g.20gb", "0"),),
    (("2g.4294967299gb", "0"),),
]


@pytest.mark.parametrize(
    ("devs", "request_", "annos", "reason"),
    [
        ([Dev(profiles=(("1g.6gb", "0"),))], direct(3), {}, "1/1 ModeNotFit"),  # TestFit_ProfileNotFound
        ([Dev(), Dev("other")], direct(2), {}, "1/2 ModeNotFit"),  # counted once, over every device
        ([Dev(profiles=())], by_spec(1, 0), {}, "1/1 ModeNotFit"),
        ([Dev()], by_spec(41, 0), {}, "1/1 ModeNotFit"),
        ([Dev()], by_spec(0, 101), {}, "1/1 ModeNotFit"),
        (
            [Dev(count=2, used=1)],
            direct(3),
            {keys.GPU_SCHEDULER_POLICY: "mutex"},
            "1/1 ExclusiveDeviceAllocateConflict",
        ),  # TestFit_MutexRejectsUsedDevice
        ([Dev(health=False)], direct(3), {}, "1/1 CardNotHealth"),  # TestFit_UnhealthyDeviceRejected
        ([Dev()], dataclasses.replace(direct(3), type="GCU"), {}, "1/1 CardTypeMismatch"),
        ([Dev()], direct(3), {drs.USE_UUID: "other"}, "1/1 CardUuidMismatch"),
        ([Dev()], direct(3), {drs.NOUSE_UUID: " node-a-enflame-drs-0 ,x"}, "1/1 CardUuidMismatch"),
        ([Dev(count=3, used=3)], direct(1), {}, "1/1 CardTimeSlicingExhausted"),
        ([Dev(usedmem=20481)], direct(3), {}, "1/1 CardInsufficientMemory"),
        ([Dev(totalcore=100, usedcores=51)], direct(3), {}, "1/1 CardInsufficientCore"),
        (
            [Dev(health=False), Dev("b", used=6), Dev("c", usedmem=40960)],
            direct(1),
            {},
            "1/3 CardInsufficientMemory, 1/3 CardNotHealth, 1/3 CardTimeSlicingExhausted",
        ),
        *(([Dev(profiles=p)], DrsRequest(1, "Enflame", 3, 101, 0), {}, "1/1 ModeNotFit") for p in OVERSIZED),
        # TestFit_OversizedProfileRejected: 2147483647 slices over a recorded max of 1: core share overflows.
        (
            [Dev(profiles=(("2147483647g.20gb", "0"),), max_slice=1)],
            DrsRequest(1, "Enflame", 3, 101, 0),
            {},
            "1/1 ModeNotFit",
        ),
    ],
    ids=readable,
)
def test_fit_failures(
    devs: list[Dev], request_: ContainerDeviceRequest, annos: dict[str, str], reason: str
) -> None:
    result = run_fit(devs, request_, annos)
    assert (result.ok, result.reason, result.devices) == (False, reason, [])


@pytest.mark.parametrize(
    ("devs", "annos", "chosen"),
    [
        ([Dev("a"), Dev("b")], {}, "b"),  # from the end
        ([Dev("a"), Dev("b", used=6)], {}, "a"),
        ([Dev("a"), Dev("b")], {drs.USE_UUID: "a"}, "a"),
        ([Dev("a", count=2, used=1), Dev("b")], {keys.GPU_SCHEDULER_POLICY: "mutex"}, "b"),
        ([Dev("a", count=2, used=1)], {}, "a"),  # shared without mutex
    ],
    ids=readable,
)
def test_fit_device_choice(devs: list[Dev], annos: dict[str, str], chosen: str) -> None:
    result = run_fit(devs, direct(1), annos)
    assert result.ok and [e.uuid for e in result.devices] == [chosen]


# --------------------------------------------------------------------------------------------
# Usage (TestAddResourceUsage_ClampsOnOverflow, _ClampsOversizedSliceString)


def add(u: DeviceUsage, entry: ContainerDevice) -> DeviceUsage:
    DRS.add_usage(devices_of([Dev()])[0], u, entry, container_index=0, device_index=0, migs=[])
    return u


def test_usage_grows_by_the_profile_slices() -> None:
    entry = DrsEntry("d", "Enflame", 20480, 50, 0, drs_slice=3)
    assert add(DeviceUsage(1, 100, 10), entry) == DeviceUsage(4, 20580, 60)


@pytest.mark.parametrize(
    ("slices", "expected"), [(INT32_MAX, INT32_MAX), (2**31, INT32_MAX), (0, 1), (-4, 1)], ids=repr
)
def test_usage_slices_are_clamped(slices: int, expected: int) -> None:
    u = add(DeviceUsage(), DrsEntry("d", "Enflame", 0, 0, 0, drs_slice=slices))
    assert u.used == expected
    if expected == INT32_MAX:
        assert add(u, DrsEntry("d", "Enflame", 0, 0, 0, drs_slice=slices)).used == INT32_MAX


def test_usage_of_an_entry_without_profile_is_one_slot() -> None:
    assert add(DeviceUsage(), ContainerDevice("d", "Enflame", 6144, 17, 0)) == DeviceUsage(1, 6144, 17)


# --------------------------------------------------------------------------------------------
# Annotations (TestPatchAnnotations_DRSFields)


def entry(
    ctr: str, *, index: str = "0", minor: str = "0", profile: str = "3g.20gb", pid: str = "1", slices: int = 3
) -> DrsEntry:
    return DrsEntry(
        f"node-a-enflame-drs-{index}",
        "Enflame",
        20480,
        50,
        0,
        container=ctr,
        profile_name=profile,
        profile_id=pid,
        minor=minor,
        index_text=index,
        drs_slice=slices,
    )


def test_patch_annotations_for_the_device_plugin() -> None:
    got = DRS.patch_annotations([[entry("pod-gcu-example1")]], [], node="node-a", now=1778573037)
    assert got == {
        "hami.io/enflame-vgpu-devices-allocated": "node-a-enflame-drs-0,Enflame,20480,50:;",
        "enflame.com/gcu-assigned": "false",
        "enflame.com/gcu-assigned-time": "1778573037000000000",
        "enflame.com/gcu-assigned-index": "0",
        "enflame.com/gcu-assigned-id": "0",
        "enflame.com/gcu-assigned-minor": "0",
        "enflame.com/gcu-request-size": "3",
        "assigned-containers": (
            '{"pod-gcu-example1":{"allocated":false,"request":3,"profileID":"1","profileName":"3g.20gb"}}'
        ),
    }


def test_patch_annotations_take_the_first_allocated_container_and_list_all() -> None:
    per_container = [
        [],
        [entry("z-app", index="1", minor="5", slices=6, profile="6g.40gb", pid="2")],
        [entry("a<b>", index="0", minor="0", slices=0, profile="", pid="")],
    ]
    got = DRS.patch_annotations(per_container, [], node="n", now=2)
    assert got["hami.io/enflame-vgpu-devices-allocated"] == (
        ";node-a-enflame-drs-1,Enflame,20480,50:;node-a-enflame-drs-0,Enflame,20480,50:;"
    )
    assert (got["enflame.com/gcu-assigned-index"], got["enflame.com/gcu-assigned-minor"]) == ("1", "5")
    assert got["enflame.com/gcu-request-size"] == "6"
    # Go's map order (sorted keys), omitempty profile fields, HTML-safe escaping; no slice -> request 1.
    assert got["assigned-containers"] == (
        '{"a\\u003cb\\u003e":{"allocated":false,"request":1},'
        '"z-app":{"allocated":false,"request":6,"profileID":"2","profileName":"6g.40gb"}}'
    )


def test_patch_annotations_without_devices() -> None:
    assert DRS.patch_annotations([], [], node="n", now=1) == {}
    assert DRS.patch_annotations([[]], [], node="n", now=1) == {
        "hami.io/enflame-vgpu-devices-allocated": ";",
        "enflame.com/gcu-assigned": "false",
        "enflame.com/gcu-assigned-time": "1000000000",
    }


# --------------------------------------------------------------------------------------------
# Admission (TestMutateAdmission_ByMemoryCoreAPI)


@pytest.mark.parametrize(
    ("ctr", "has", "resources"),
    [
        (
            drs_ctr(mem="20480", core="50"),
            True,
            {
                "limits": {MEM_NAME: "20480", CORE_NAME: "50"},
                "requests": {MEM_NAME: "20480", CORE_NAME: "50"},
            },
        ),
        (
            container("c", requests={DRS_NAME: "2"}),
            True,
            {"limits": {DRS_NAME: "2"}, "requests": {DRS_NAME: "2"}},
        ),
        (
            container("c", limits={DRS_NAME: "2"}, requests={DRS_NAME: "2"}),
            True,
            {"limits": {DRS_NAME: "2"}, "requests": {DRS_NAME: "2"}},
        ),
        (
            container("c", limits={CORE_NAME: "30"}, requests={MEM_NAME: "8"}),
            True,
            {"limits": {CORE_NAME: "30", MEM_NAME: "8"}, "requests": {MEM_NAME: "8", CORE_NAME: "30"}},
        ),
        (container("c", limits={"cpu": "1"}), False, {"limits": {"cpu": "1"}}),
    ],
    ids=readable,
)
def test_mutate(ctr: dict[str, Any], has: bool, resources: dict[str, Any]) -> None:
    assert DRS.mutate(ctr, pod()) is has
    assert ctr["resources"] == resources


@pytest.mark.parametrize(
    ("ctr", "message"),
    [
        (drs_ctr(drs="0"), "enflame.com/drs-gcu must be greater than 0"),
        (drs_ctr(drs="-1", mem="4"), "enflame.com/drs-gcu must be greater than 0"),
        (drs_ctr(mem="0", core="10"), "enflame.com/gcu-memory must be greater than 0"),
        (drs_ctr(core="0"), r"enflame.com/gcu-core must be in range \(0,100\]"),
        (drs_ctr(mem="4", core="101"), r"enflame.com/gcu-core must be in range \(0,100\]"),
    ],
    ids=readable,
)
def test_mutate_rejects(ctr: dict[str, Any], message: str) -> None:
    with pytest.raises(MutationError, match=message):
        DRS.mutate(ctr, pod())
