"""Metax-SGPU (§3.2, §5.1, §5.3, §5.5, §7): the vectors of HAMi v2.10.0's pkg/device/metax
sdevice_test.go, protocol_test.go and qos_test.go — requests, inventory, health, admission, the
fit (every reason), QoS policies, app classes, link zones, the node score, the annotations."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from datetime import UTC
from typing import Any

import pytest

from tests.builders import container, node, pod
from tests.devices.vendorkit import NOW, health_flags, readable
from vgpu_scheduler.devices.metax import rules, sgpu
from vgpu_scheduler.devices.metax.inventory import SgpuDevice, decode_sdevices
from vgpu_scheduler.devices.metax.rules import LinkDevice
from vgpu_scheduler.devices.metax.sgpu import MetaxSgpuVendor, SgpuEntry
from vgpu_scheduler.devices.protocol import MutationError, ResourceNames, Vendors
from vgpu_scheduler.engine.fit import pod_fit_context
from vgpu_scheduler.model import ContainerDevice, ContainerDeviceRequest, DeviceUsage
from vgpu_scheduler.wire import keys
from vgpu_scheduler.wire.inventory import InventoryError

COUNT, VMEM, VCORE = "metax-tech.com/sgpu", "metax-tech.com/vmemory", "metax-tech.com/vcore"
NAMES = ResourceNames(COUNT, VMEM, VCORE, 1024)
ON, OFF = {sgpu.APP_CLASS: "online"}, {sgpu.APP_CLASS: "offline"}
BE, FS, BS = "best-effort", "fixed-share", "burst-share"


def vendor(*, topology_aware: bool = False) -> MetaxSgpuVendor:
    return MetaxSgpuVendor(NAMES, topology_aware=topology_aware)



# --------------------------------------------------------------------------------------------
# Requests (TestGenerateResourceRequests)


def req(nums: int, mem: int, pct: int, cores: int, type_: str = sgpu.SGPU) -> ContainerDeviceRequest:
    return ContainerDeviceRequest(nums, type_, mem, pct, cores)


def limits(**kw: str) -> dict[str, Any]:
    names = {"count": COUNT, "mem": VMEM, "cores": VCORE}
    return container(limits={names[k]: v for k, v in kw.items()})


@pytest.mark.parametrize(
    ("ctr", "expected"),
    [
        (limits(count="1"), req(1, 0, 100, 100)),
        (limits(count="2"), req(2, 0, 100, 100)),
        (limits(count="1", cores="30"), req(1, 0, 100, 30)),
        (limits(count="1", mem="16"), req(1, 16 * 1024, 0, 100)),
        (limits(count="1", cores="60", mem="16"), req(1, 16 * 1024, 0, 60)),
        (limits(count="1", cores="60", mem="1024Mi"), req(1, 1024, 0, 60)),
        (limits(count="1", cores="60", mem="16Gi"), req(1, 16 * 1024, 0, 60)),
        (limits(count="1", mem="2100001"), None),  # no unit: > MaxInt32/1024 before multiplying
        (limits(count="2200000000"), None),
        (limits(count="1", cores="2200000000"), None),
        # Beyond HAMi's table: limits only, unreadable values keep the defaults, negative counts drop,
        # and "unit" means a letter in the API server's canonical text ("1000" is "1k": bytes).
        (container(requests={COUNT: "1"}), None),
        (limits(count="0"), None),
        (limits(count="1", cores="0.5"), req(1, 0, 100, 100)),
        (limits(count="1", cores="-1"), None),
        (limits(count="1", mem="0"), req(1, 0, 100, 100)),
        (limits(count="1", mem="1000"), req(1, 0, 100, 100)),
        (limits(count="1", mem="1500"), req(1, 1500 * 1024, 0, 100)),
        (limits(count="1", mem="-1Gi"), None),
        (limits(count="1", mem="3Ti"), req(1, 3 * 1024 * 1024, 0, 100)),
    ],
    ids=readable,
)
def test_requests(ctr: dict[str, Any], expected: ContainerDeviceRequest | None) -> None:
    assert vendor().request(ctr) == expected


# --------------------------------------------------------------------------------------------
# Inventory (TestGetMetaxSDevices, TestConvertMetaxSDeviceToHAMIDevice) and health


def sdev_node(value: str | None) -> dict[str, Any]:
    return node("normal", annotations={sgpu.REGISTER: value} if value is not None else {})


NORMAL = (
    '[{"uuid": "GPU-123", "model": "sgpu", "totalDevCount": 16, "totalCompute": 100, "bdf": '
    '"0000:44:00.0", "totalVRam" : 32768, "numa": 1, "healthy": true, "qosPolicy": "fixed-share"}]'
)


def test_inventory_normal_node() -> None:
    assert vendor().node_devices(sdev_node(NORMAL)) == [
        SgpuDevice(
            id="GPU-123",
            index=0,
            count=16,
            devmem=32768,
            devcore=100,
            type=sgpu.SGPU,
            numa=1,
            mode="",
            health=True,
            device_vendor=sgpu.SGPU,
            qos_policy=FS,
            model="sgpu",
            link_zone=0,
        )
    ]


def test_inventory_conversion() -> None:
    value = json.dumps(
        [
            {
                "uuid": "GPU-a9",
                "bdf": "0000:0a:00.0",
                "model": "native",
                "totalDevCount": 16,
                "totalCompute": 100,
                "totalVRam": 65536,
                "availableDevCount": 6,
                "availableCompute": 50,
                "availableVRam": 32768,
                "numa": 0,
                "healthy": True,
                "qosPolicy": BE,
                "linkZone": 1,
            },
            {
                "UUID": "GPU-a8",
                "BDF": "0000:09:00.0",
                "Model": "sgpu",
                "TotalDevCount": 8,
                "totalcompute": 100,
                "totalVRam": 32768,
                "numa": -1,
                "healthy": False,
                "qosPolicy": BS,
                "linkZone": 2,
                "unknown": [1],
            },
        ]
    )
    assert decode_sdevices(value) == [
        SgpuDevice(
            id="GPU-a9",
            index=0,
            count=16,
            devmem=65536,
            devcore=100,
            type=sgpu.SGPU,
            numa=0,
            mode="",
            health=True,
            device_vendor=sgpu.SGPU,
            qos_policy=BE,
            model="native",
            link_zone=1,
        ),
        SgpuDevice(
            id="GPU-a8",
            index=1,
            count=8,
            devmem=32768,
            devcore=100,
            type=sgpu.SGPU,
            numa=-1,
            mode="",
            health=False,
            device_vendor=sgpu.SGPU,
            qos_policy=BS,
            model="sgpu",
            link_zone=2,
        ),
    ]


@pytest.mark.parametrize(
    ("value", "error"),
    [
        (None, "annos not found metax-tech.com/node-gpu-devices"),
        ("", "invalid node annotation JSON"),
        ("[]", "no sdevice found on node"),
        ("null", "no sdevice found on node"),
        ('{"uuid": "a"}', "cannot unmarshal object into Go value of type"),
        (
            '[{"uuid": "a", "totalVRam": "1"}]',
            "cannot unmarshal string into Go struct field MetaxSDeviceInfo.TotalVRam",
        ),
        (
            '[{"uuid": "a", "numa": 1.5}]',
            "cannot unmarshal number 1.5 into Go struct field MetaxSDeviceInfo.Numa",
        ),
        ('[{"uuid": "a", "totalDevCount": 3000000000}]', "MetaxSDeviceInfo.TotalDevCount of type int32"),
        ('[{"uuid": "a", "healthy": "yes"}]', "MetaxSDeviceInfo.Healthy of type bool"),
        ("[null]", "metax sdevice entry is null"),
    ],
    ids=readable,
)
def test_inventory_errors(value: str | None, error: str) -> None:
    with pytest.raises(InventoryError, match=error):
        vendor().node_devices(sdev_node(value))


def test_null_fields_keep_zero_values() -> None:
    (dev,) = decode_sdevices('[{"uuid": "a", "totalVRam": null, "healthy": null, "qosPolicy": null}]')
    assert (dev.devmem, dev.health, dev.qos_policy) == (0, False, "")


@pytest.mark.parametrize(
    ("value", "healthy"),
    [(NORMAL, True), (None, False), ("[]", False), ("oops", False)],
    ids=["one device", "no annotation", "empty list", "not JSON"],
)
def test_health_is_listing_devices(value: str | None, healthy: bool) -> None:
    health = vendor().check_health(sdev_node(value), NOW, UTC)
    assert health_flags(health) == (healthy, True, False)


# --------------------------------------------------------------------------------------------
# Admission (TestMutateAdmission)


@pytest.mark.parametrize(
    ("ctr", "annos", "found", "error", "after"),
    [
        (container(limits={}), {sgpu.QOS_POLICY: BE}, False, "", {sgpu.QOS_POLICY: BE}),
        (
            limits(count="1"),
            {sgpu.QOS_POLICY: "best-effortx"},
            True,
            "metax-tech.com/sgpu-qos-policy must be set one of [best-effort, fixed-share, burst-share]",
            {sgpu.QOS_POLICY: "best-effortx"},
        ),
        (limits(count="1"), {}, True, "", {sgpu.QOS_POLICY: BE}),
        (limits(count="1"), None, True, "", {sgpu.QOS_POLICY: BE}),  # no annotations at all
        (limits(count="1"), {sgpu.QOS_POLICY: BS}, True, "", {sgpu.QOS_POLICY: BS}),
        (limits(count="2"), ON, True, "app-class pod must request single device", ON),
        (
            limits(count="1"),
            {sgpu.APP_CLASS: "oNLine"},
            True,
            "metax-tech.com/sgpu-app-class must be set one of [online, offline]",
            {sgpu.APP_CLASS: "oNLine"},
        ),
        (
            limits(count="1"),
            {**OFF, sgpu.QOS_POLICY: "best-effortx"},
            True,
            "metax-tech.com/sgpu-qos-policy must be set one of [best-effort, fixed-share, burst-share]",
            {**OFF, sgpu.QOS_POLICY: "best-effortx"},
        ),
        (
            limits(count="1"),
            {**ON, sgpu.QOS_POLICY: "best-effortx"},
            True,
            "",
            {**ON, sgpu.QOS_POLICY: "best-effortx"},
        ),
        # Beyond HAMi's table: an offline pod gets the default too; requests are not looked at;
        # Quantity.Value() rounds up (0.5 is 1 device).
        (limits(count="1"), OFF, True, "", {**OFF, sgpu.QOS_POLICY: BE}),
        (container(requests={COUNT: "1"}), {}, False, "", {}),
        (limits(count="0.5"), ON, True, "", ON),
    ],
    ids=readable,
)
def test_mutate(
    ctr: dict[str, Any], annos: dict[str, str] | None, found: bool, error: str, after: dict[str, str]
) -> None:
    p = pod(annotations=annos) if annos is not None else pod()
    if error:
        with pytest.raises(MutationError) as err:
            vendor().mutate(ctr, p)
        assert str(err.value) == error
    else:
        assert vendor().mutate(ctr, p) is found
    assert dict(p["metadata"].get("annotations") or {}) == after


# --------------------------------------------------------------------------------------------
# Fit (TestMetaxSDevices_Fit, TestCheckAppClass, TestCheckDeviceQos)


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
    pods: tuple[Mapping[str, str], ...] = ()
    qos: str = ""
    zone: int = 0


def devices_of(devs: list[Dev]) -> tuple[list[SgpuDevice], list[DeviceUsage]]:
    devices = [
        SgpuDevice(
            id=d.id,
            index=i,
            count=d.count,
            devmem=d.totalmem,
            devcore=d.totalcore,
            type=sgpu.SGPU,
            health=d.health,
            qos_policy=d.qos,
            link_zone=d.zone,
        )
        for i, d in enumerate(devs)
    ]
    usage = [DeviceUsage(d.used, d.usedmem, d.usedcores, pod_infos=d.pods) for d in devs]
    return devices, usage


def run_fit(
    devs: list[Dev],
    request: ContainerDeviceRequest,
    annos: dict[str, str] | None = None,
    v: MetaxSgpuVendor | None = None,
) -> tuple[bool, list[ContainerDevice], str]:
    v = v or vendor()
    devices, usage = devices_of(devs)
    ctx = pod_fit_context(pod(annotations=annos or {}), vendors=Vendors([v]))
    order = list(range(len(devs)))
    result = v.fit(request, devices, usage, order, ctx=ctx, cordoned=frozenset(), allocated=())
    # The order-free verdict agrees with the ordered Fit.
    quick = v.quick_verdict(request, devices, usage, order, ctx=ctx, cordoned=frozenset())
    assert quick == result.reason
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
        ([Dev("dev-0")], req(1, 512, 0, 50, ""), {}, False, [], "1/1 CardTypeMismatch"),
        (
            [Dev("dev-0", used=1, usedmem=64, usedcores=10, pods=({},))],
            req(1, 512, 0, 50),
            ON,
            False,
            [],
            "1/1 CardAppClassMismatch",
        ),
        (
            [Dev("dev-0", used=1, usedmem=64, usedcores=10, pods=(ON,))],
            req(1, 512, 0, 50),
            {},
            False,
            [],
            "1/1 CardAppClassMismatch",
        ),
        ([Dev("dev-0", health=False)], req(1, 512, 0, 50), {}, False, [], "1/1 CardUnhealthy"),
        (
            [Dev("dev-0", totalmem=1280, used=100)],
            req(1, 512, 0, 50),
            {},
            False,
            [],
            "1/1 CardTimeSlicingExhausted",
        ),
        # No clamp of cores above 100 here (unlike Metax-GPU).
        ([Dev("dev-0", totalmem=1280)], req(1, 512, 0, 120), {}, False, [], "1/1 CardInsufficientCore"),
        (
            [Dev("dev-0", totalmem=1280, used=20)],
            req(1, 512, 0, 100),
            {},
            False,
            [],
            "1/1 ExclusiveDeviceAllocateConflict",
        ),
        (
            [Dev("dev-1", totalmem=1280)],
            req(2, 512, 0, 50),
            {sgpu.USE_UUID: "dev-0"},
            False,
            [],
            "1/1 CardUuidMismatch",
        ),
        (
            [Dev("dev-0", totalmem=1280)],
            req(2, 512, 0, 50),
            {sgpu.NOUSE_UUID: "dev-0"},
            False,
            [],
            "1/1 CardUuidMismatch",
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
            req(1, 64, 0, 50),
            {keys.GPU_SCHEDULER_POLICY: "mutex"},
            False,
            [],
            "1/1 ExclusiveDeviceAllocateConflict",
        ),
        # The order of the checks: type, health, app class, QoS, uuid, slots, mutex, memory, cores.
        ([Dev("a", health=False)], req(1, 0, 100, 100, ""), {}, False, [], "1/1 CardTypeMismatch"),
        (
            [Dev("a", health=False, used=1, pods=(ON,))],
            req(1, 0, 100, 50),
            {},
            False,
            [],
            "1/1 CardUnhealthy",
        ),
        (
            [Dev("a", used=1, qos=FS, pods=(ON,))],
            req(1, 0, 100, 50),
            {sgpu.QOS_POLICY: BE},
            False,
            [],
            "1/1 CardAppClassMismatch",
        ),
        (
            [Dev("a", used=1, qos=FS)],
            req(1, 0, 100, 50),
            {sgpu.QOS_POLICY: BE, sgpu.USE_UUID: "x"},
            False,
            [],
            "1/1 CardQosPolicyMismatch",
        ),
        # Online pods skip the QoS and core checks and take no cores.
        (
            [Dev("a", used=1, usedcores=100, qos=FS, pods=(OFF,))],
            req(1, 64, 0, 100),
            {**ON, sgpu.QOS_POLICY: BE},
            True,
            ["a"],
            "",
        ),
        # Offline pods follow the GPU policy order (no re-ranking) and do check cores.
        (
            [Dev("a", used=1, usedcores=100, pods=(OFF,))],
            req(1, 64, 0, 50),
            OFF,
            False,
            [],
            "1/1 CardInsufficientCore",
        ),
        # Several reasons, counted per device and sorted.
        (
            [Dev("a", health=False), Dev("b", used=100), Dev("c")],
            req(2, 64, 0, 50),
            {},
            False,
            [],
            "1/3 AllocatedCardsInsufficientRequest, 1/3 CardTimeSlicingExhausted, 1/3 CardUnhealthy",
        ),
    ],
    ids=readable,
)
def test_fit(
    devs: list[Dev],
    request_: ContainerDeviceRequest,
    annos: dict[str, str],
    ok: bool,
    ids: list[str],
    reason: str,
) -> None:
    got_ok, got, got_reason = run_fit(devs, request_, annos)
    assert (got_ok, got_reason) == (ok, reason)
    if ok:
        assert [d.uuid for d in got] == ids


def test_fit_entries_carry_the_device_state_and_the_pod() -> None:
    annos = {**ON, "x": "y"}
    _, got, _ = run_fit(
        [Dev("a", totalmem=1000, qos=BS, zone=3, used=1, pods=(OFF,))], req(1, 0, 50, 40), annos
    )
    assert got == [SgpuEntry("a", sgpu.SGPU, 500, 0, 0)]  # online: no cores
    (entry,) = got
    assert isinstance(entry, SgpuEntry)
    assert (entry.qos_policy, entry.link_zone, dict(entry.pod_annotations)) == (BS, 3, annos)


@pytest.mark.parametrize(
    ("request_class", "used", "pods", "ok"),
    [
        ("online", 0, (), True),
        ("", 1, (ON,), False),
        ("", 1, (OFF,), False),
        ("", 1, ({},), True),
        ("online", 1, ({},), False),
        ("online", 2, (ON, OFF), True),
        ("offline", 2, (ON, OFF), False),
        ("offline", 1, (OFF,), True),
        ("bogus", 1, ({},), True),  # an unknown class is unclassed
    ],
    ids=readable,
)
def test_app_class(request_class: str, used: int, pods: tuple[dict[str, str], ...], ok: bool) -> None:
    assert rules.app_class_fits(request_class, DeviceUsage(used, pod_infos=pods)) is ok


@pytest.mark.parametrize(
    ("wanted", "used", "device_qos", "cores", "cached", "ok"),
    [
        (BE, 0, BS, 50, None, True),  # an unused device switches to any policy
        (BE, 2, BS, 100, None, True),  # a whole device needs none
        (BE, 2, BS, 50, None, False),
        (BE, 2, BE, 50, None, True),
        (BE, 2, "", 50, None, True),  # no policy yet
        (BE, 2, BE, 50, FS, False),  # switching to fixed-share: the cache wins
        (FS, 2, BE, 50, FS, True),
        (BE, 2, BS, 50, "", True),  # switching to "no policy" (a whole device)
    ],
    ids=readable,
)
def test_check_device_qos(
    wanted: str, used: int, device_qos: str, cores: int, cached: str | None, ok: bool
) -> None:
    v = vendor()
    if cached is not None:
        v.jittery.add("GPU-123", cached)
    dev = SgpuDevice(id="GPU-123", qos_policy=device_qos)
    assert v.qos_fits(wanted, dev, DeviceUsage(used), cores) is ok


# --------------------------------------------------------------------------------------------
# Usage (TestMetaxSDevices_AddResourceUsage) and the QoS the pod leaves on a device


def entry(cores: int, annos: Mapping[str, str], uuid: str = "dev-0", qos: str = "") -> SgpuEntry:
    return SgpuEntry(uuid, sgpu.SGPU, 1024, cores, 0, qos_policy=qos, pod_annotations=annos)


@pytest.mark.parametrize(
    ("e", "custom"),
    [
        (entry(50, {}), {"QosPolicy": ""}),
        (entry(50, {sgpu.QOS_POLICY: FS}), {"QosPolicy": FS}),
        (entry(100, {sgpu.QOS_POLICY: FS}), {"QosPolicy": ""}),
        (entry(0, {**ON, sgpu.QOS_POLICY: FS}), None),  # online pods leave the policy alone
        (ContainerDevice("dev-0", sgpu.SGPU, 1024, 50), {"QosPolicy": ""}),
    ],
    ids=readable,
)
def test_add_usage(e: ContainerDevice, custom: dict[str, str] | None) -> None:
    u = DeviceUsage(0, 2000, 15)
    assert vendor().add_usage(SgpuDevice(id="dev-0"), u, e, container_index=0, device_index=0, migs=[]) is e
    assert (u.used, u.usedmem, u.usedcores, u.custom) == (1, 3024, 15 + e.usedcores, custom)


def test_a_pods_next_container_sees_the_policy_its_first_one_set() -> None:
    """AddResourceUsage switches the device (in this filter's copy) to the pod's policy, so the
    pod's second container may share it although the inventory says otherwise."""
    v = vendor()
    devices, usage = devices_of([Dev("a", count=4, totalmem=1000, qos=BE)])
    ctx = pod_fit_context(pod(annotations={sgpu.QOS_POLICY: FS}), vendors=Vendors([v]))
    first = v.fit(req(1, 100, 0, 30), devices, usage, [0], ctx=ctx, cordoned=frozenset(), allocated=())
    assert first.ok
    assert (
        v.quick_verdict(
            req(1, 100, 0, 30), devices, [DeviceUsage(1, 100, 30)], [0], ctx=ctx, cordoned=frozenset()
        )
        == "1/1 CardQosPolicyMismatch"
    )
    v.add_usage(devices[0], usage[0], first.devices[0], container_index=0, device_index=0, migs=[])
    second = v.fit(req(1, 100, 0, 30), devices, usage, [0], ctx=ctx, cordoned=frozenset(), allocated=())
    assert second.ok and usage[0].custom == {"QosPolicy": FS}
    assert usage[0].copy().custom == {"QosPolicy": FS} and usage[0].copy().custom is not usage[0].custom


# --------------------------------------------------------------------------------------------
# Device choice (TestPrioritizeExclusiveDevices, TestPrioritizeOnlineDevices)


@pytest.mark.parametrize(
    ("zones", "require", "expected"),
    [
        ({1: 1, 2: 1, 5: 2}, 1, [5]),
        ({1: 1, 2: 1, 5: 2, 6: 2, 7: 2}, 2, [1, 2]),
        ({1: 1, 2: 1, 5: 2, 6: 2, 7: 2, 8: 2}, 4, [5, 6, 7, 8]),
        ({1: 1, 2: 1, 5: 2, 6: 2, 7: 2}, 4, [1, 2, 5, 6]),
        ({5: 0, 6: 0, 7: 0}, 2, [5, 6]),
        ({3: 0, 4: 0, 7: 1, 8: 1}, 2, [7, 8]),
        ({3: 0, 4: 0, 6: 1, 7: 1, 8: 1}, 4, [6, 7, 8, 3]),
        ({1: 1, 2: 2}, 2, [1, 2]),  # not more candidates than needed: as they are
    ],
    ids=readable,
)
def test_prioritize_exclusive(zones: dict[int, int], require: int, expected: list[int]) -> None:
    assert rules.prioritize_exclusive(list(zones), zones, require) == expected


def usage_with(*classes: dict[str, str]) -> DeviceUsage:
    return DeviceUsage(len(classes), pod_infos=classes)


@pytest.mark.parametrize(
    ("devices", "expected"),
    [
        ([(), (ON,), (ON, ON), (ON, OFF), (ON, ON, OFF), (OFF,), (OFF, OFF)], 0),  # idle first
        ([(ON,), (ON, ON), (ON, ON, ON, OFF), (OFF, OFF)], 0),  # fewest online
        ([(ON, ON, ON), (ON, OFF), (ON, ON, OFF), (OFF,), (OFF, OFF)], 1),  # online & offline
        ([(OFF,), (OFF, OFF)], 0),  # only offline: fewest offline
    ],
    ids=[
        "prioritize idle device",
        "prioritize onlyOnline device",
        "prioritize online&offline device",
        "prioritize onlyOffline device",
    ],
)
def test_prioritize_online(devices: list[tuple[dict[str, str], ...]], expected: int) -> None:
    usage = [usage_with(*classes) for classes in devices]
    assert rules.prioritize_online(list(range(len(usage))), usage, 1) == [expected]


def test_fit_prefers_one_link_zone_for_whole_devices_and_online_devices_by_class() -> None:
    zones = [Dev("a", zone=1), Dev("b", zone=2), Dev("c", zone=2), Dev("d", zone=1), Dev("e", zone=1)]
    _, got, _ = run_fit(zones, req(2, 0, 100, 100))
    assert [d.uuid for d in got] == ["c", "b"]  # walked from the end: zone 2 (2 devices) fits exactly
    _, got, _ = run_fit(zones, req(2, 0, 100, 50))  # not whole devices: the policy order
    assert [d.uuid for d in got] == ["e", "d"]
    _, got, _ = run_fit(zones, req(2, 0, 100, 100), {sgpu.APP_CLASS: ""})  # a classed pod: no zones
    assert [d.uuid for d in got] == ["e", "d"]
    online = [Dev("a", used=1, pods=(ON,)), Dev("b", used=2, pods=(ON, OFF)), Dev("c", used=1, pods=(OFF,))]
    _, got, _ = run_fit(online, req(1, 16, 0, 0), ON)
    assert [d.uuid for d in got] == ["a"]


# --------------------------------------------------------------------------------------------
# Node score (TestNeedScore, TestScoreExclusiveDevices, TestScoreOnlineDevices,
# TestScoreNodePolicyIndependence)


def whole(uuid: str, zone: int = 0, annos: Mapping[str, str] | None = None, cores: int = 100) -> SgpuEntry:
    return SgpuEntry(uuid, sgpu.SGPU, 0, cores, 0, link_zone=zone, pod_annotations=annos or {})


TOPO = {sgpu.TOPOLOGY_AWARE: "true"}


@pytest.mark.parametrize(
    ("per_container", "default", "expected"),
    [
        ([[whole("a", annos=TOPO)]], False, True),
        ([[whole("a", annos={sgpu.TOPOLOGY_AWARE: "false"})]], True, False),
        ([[whole("a", annos=TOPO, cores=99)]], True, False),
        ([[whole("a", annos=TOPO, cores=99)], [whole("b", annos=TOPO)]], False, True),
        ([[whole("a")]], True, True),  # the configured default
        ([[whole("a", annos={sgpu.TOPOLOGY_AWARE: "yes"})]], True, True),  # not a Go bool: default
        ([[whole("a", annos={sgpu.TOPOLOGY_AWARE: "T"})]], False, True),
    ],
    ids=readable,
)
def test_topology_enabled(per_container: list[list[SgpuEntry]], default: bool, expected: bool) -> None:
    entries = [d for ctr in per_container for d in ctr]
    assert vendor(topology_aware=default).topology_enabled(entries) is expected


def links(spec: list[tuple[int, int]]) -> list[LinkDevice]:
    return [LinkDevice(f"GPU-{i}", zone) for i, zone in spec]


@pytest.mark.parametrize(
    ("allocated", "previous", "score"),
    [
        ([(4, 1)], [(1, 1, 1), (2, 1, 1), (3, 1, 1), (4, 0, 1)], 0),
        ([(4, 1)], [(1, 0, 1), (2, 0, 1), (3, 0, 1), (4, 0, 1)], -30),
        ([(3, 1), (4, 1)], [(1, 0, 1), (2, 0, 1), (3, 0, 1), (4, 0, 1)], 60),
        (
            [(4, 1), (5, 2)],
            [(1, 1, 1), (2, 1, 1), (3, 1, 1), (4, 0, 1), (5, 0, 2), (6, 1, 2), (7, 1, 2), (8, 1, 2)],
            0,
        ),
        ([(1, 1), (2, 1), (3, 1), (4, 1)], [(1, 0, 1), (2, 0, 1), (3, 0, 1), (4, 0, 1), (5, 0, 2)], 600),
        ([(3, 1), (4, 1), (5, 2), (6, 2)], [(2, 0, 1), (3, 0, 1), (4, 0, 1), (5, 0, 2), (6, 0, 2)], 180),
        (
            [(i, 1 if i <= 4 else 2) for i in range(1, 9)],
            [(i, 0, 1 if i <= 4 else 2) for i in range(1, 9)],
            1200,
        ),
    ],
    ids=[
        "allocate one device, rest zero device",
        "allocate one device, rest three device",
        "allocate two device, best result",
        "allocate two device, bad result",
        "allocate four device, best result",
        "allocate four device, bad result",
        "allocate eight device",
    ],
)
def test_score_exclusive(
    allocated: list[tuple[int, int]], previous: list[tuple[int, int, int]], score: int
) -> None:
    idle = links([(i, zone) for i, used, zone in previous if used == 0])
    assert rules.score_exclusive(links(allocated), idle) == score
    # The same through ScoreNode, with the node's devices and usage (weighted ×10000, policy-neutral).
    v = vendor(topology_aware=True)
    devices = [SgpuDevice(id=f"GPU-{i}", link_zone=zone) for i, _, zone in previous]
    usage = [DeviceUsage(used) for _, used, _ in previous]
    entries = [[whole(f"GPU-{i}", zone) for i, zone in allocated]]
    assert (
        v.score_node(entries, annotations={}, devices=devices, previous=usage, policy="binpack")
        == 10000 * score
    )


@pytest.mark.parametrize(
    ("classes", "score"),
    [((), 0), ((ON, ON), -40), ((OFF, OFF), -200), ((OFF, OFF, ON, ON), -44)],
    ids=[
        "test idle device",
        "test only online device",
        "test only offline device",
        "test online/offline device",
    ],
)
def test_score_online(classes: tuple[dict[str, str], ...], score: int) -> None:
    assert (
        rules.score_online({"GPU-123"}, ["GPU-123", "GPU-9"], [usage_with(*classes), usage_with(ON)]) == score
    )


@pytest.mark.parametrize(
    ("per_container", "devices", "usage", "raw"),
    [
        (
            [[whole("GPU-3", 1, TOPO), whole("GPU-4", 1, TOPO)]],
            [SgpuDevice(id=f"GPU-{i}", link_zone=1) for i in range(1, 5)],
            [DeviceUsage() for _ in range(4)],
            60,
        ),
        (
            [[SgpuEntry("GPU-1", sgpu.SGPU, 0, 0, 0, pod_annotations=ON)]],
            [SgpuDevice(id="GPU-1"), SgpuDevice(id="GPU-2")],
            [usage_with(ON), DeviceUsage()],
            -20,
        ),
        ([[SgpuEntry("GPU-1", sgpu.SGPU, 0, 50, 0)]], [SgpuDevice(id="GPU-1")], [DeviceUsage()], 0),
    ],
    ids=[
        "topology-aware exclusive allocation",
        "online allocation",
        "no topology or online hint scores zero",
    ],
)
def test_score_node_is_policy_neutral_and_weighted(
    per_container: list[list[ContainerDevice]], devices: list[SgpuDevice], usage: list[DeviceUsage], raw: int
) -> None:
    """ScoreNode itself ignores the policy (raw_score); HAMi's OverrideScore weights it ×10000,
    ×−10000 under spread — done here by the vendor, which gets the node policy."""
    v = vendor()
    assert v.raw_score(per_container, devices, usage) == raw
    got = {
        p: v.score_node(per_container, annotations={}, devices=devices, previous=usage, policy=p)
        for p in ("binpack", "spread", "")
    }
    assert got == {"binpack": 10000.0 * raw, "spread": -10000.0 * raw, "": 10000.0 * raw}


# --------------------------------------------------------------------------------------------
# Annotations (TestConvertHAMIPodDeviceToMetaxPodDevice, TestAddJitteryQos) and the QoS cache
# (TestJitteryQosCacheSync, TestGet)


def test_patch_annotations() -> None:
    per_container = [
        [SgpuEntry("GPU-a0", sgpu.SGPU, 10, 50, 0), SgpuEntry("GPU-a1", sgpu.SGPU, 1024, 30, 1)],
        [],
        [SgpuEntry("GPU-a3", sgpu.SGPU, 10 * 1024, 20, 3), SgpuEntry("GPU-a7", sgpu.SGPU, 64 * 1024, 0, 7)],
    ]
    hami = (
        "GPU-a0,Metax-SGPU,10,50:GPU-a1,Metax-SGPU,1024,30:;;"
        "GPU-a3,Metax-SGPU,10240,20:GPU-a7,Metax-SGPU,65536,0:;"
    )
    assert vendor().patch_annotations(per_container, [], node="n", now=1700000000) == {
        "hami.io/metax-sgpu-devices-to-allocate": hami,
        "hami.io/metax-sgpu-devices-allocated": hami,
        "metax-tech.com/gpu-devices-allocated": (
            '[[{"uuid":"GPU-a0","compute":50,"vRam":10},{"uuid":"GPU-a1","compute":30,"vRam":1024}],[],'
            '[{"uuid":"GPU-a3","compute":20,"vRam":10240},{"uuid":"GPU-a7","vRam":65536}]]'
        ),
        "metax-tech.com/predicate-time": "1700000000000000000",
    }
    assert vendor().patch_annotations([], [], node="n", now=1) == {}


def test_patch_remembers_the_policies_being_switched() -> None:
    v = vendor()
    annos = {sgpu.QOS_POLICY: BE}
    v.patch_annotations(
        [
            [
                entry(50, annos, "GPU-123", BE),
                entry(50, annos, "GPU-456", BS),
                entry(100, annos, "GPU-789", BE),
            ]
        ],
        [],
        node="n",
        now=1,
    )
    assert {u: v.jittery.get(u) for u in ("GPU-123", "GPU-456", "GPU-789")} == {
        "GPU-123": None,
        "GPU-456": BE,
        "GPU-789": "",
    }
    online = vendor()
    online.patch_annotations([[entry(0, {**ON, **annos}, "GPU-456", BS)]], [], node="n", now=1)
    assert len(online.jittery) == 0


@pytest.mark.parametrize(
    ("cache", "expected"),
    [
        ({"GPU-123": FS, "GPU-789": BS}, {"GPU-123": FS, "GPU-789": BS}),
        ({"GPU-123": BE, "GPU-789": BS}, {"GPU-789": BS}),
        ({"GPU-123": BE, "GPU-789": BE}, {}),
    ],
    ids=["no sync", "sync one", "sync all"],
)
def test_inventory_reads_sync_the_qos_cache(cache: dict[str, str], expected: dict[str, str]) -> None:
    v = vendor()
    for uuid, qos in cache.items():
        v.jittery.add(uuid, qos)
    value = json.dumps(
        [{"uuid": u, "qosPolicy": BE, "healthy": True} for u in ("GPU-123", "GPU-456", "GPU-789")]
    )
    v.node_devices(node("n", annotations={sgpu.REGISTER: value}))
    assert {u: v.jittery.get(u) for u in cache if v.jittery.get(u) is not None} == expected
    assert v.inventory_keys == ()  # read on every pass, so the sync runs as often as HAMi's
