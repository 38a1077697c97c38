"""Vastai end to end (§2.2, §3.3, §3.4, §4.4, §5.3, §5.5, §7): the vectors of HAMi v2.10.0's
pkg/device/vastai/device_test.go (die mode included), then the vendor inside the registry, the
registration loop, the decision and its node score, the bind, the webhook, the metrics and the
simulator's CLI."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.builders import container, node, pod
from tests.devices.vendorkit import (
    HANDSHAKE_HEALTH,
    NOW,
    admit_bound_pod,
    health_flags,
    metrics_text,
    readable,
    registration,
    review,
    simulate_report,
)
from vgpu_scheduler.config import DeviceConfig
from vgpu_scheduler.configfile import DeviceConfigError, default_device_config, parse_device_config
from vgpu_scheduler.devices import vastai
from vgpu_scheduler.devices.protocol import ResourceNames, Vendors
from vgpu_scheduler.devices.registry import build
from vgpu_scheduler.devices.vastai import VastaiDevice, best_combination, f32
from vgpu_scheduler.engine.decide import Chosen, NoFit, decide
from vgpu_scheduler.engine.fit import pod_fit_context
from vgpu_scheduler.engine.state import SchedulerState
from vgpu_scheduler.model import ContainerDevice, ContainerDeviceRequest, DeviceInfo, DeviceUsage
from vgpu_scheduler.scheduler.extender import _locking_request
from vgpu_scheduler.wire import keys
from vgpu_scheduler.wire.inventory import InventoryError

COUNT = "vastaitech.com/va"
CHART = default_device_config()
VENDORS = build(CHART)
VA = VENDORS["Vastai"]
CHART_SECTION = "vastai:\n  resourceCountName: vastaitech.com/va\n"
DIE = {"DeviceStrategy": "die"}



def limits(count: str) -> dict[str, Any]:
    return container(limits={COUNT: count})


# --------------------------------------------------------------------------------------------
# Configuration


def test_chart_section_and_registration_order() -> None:
    keys_ = VENDORS.keys
    assert keys_.index("DCU") < keys_.index("AMD") < keys_.index("Vastai")
    assert VA.names == ResourceNames(COUNT, "", "", 0)
    assert VA.managed_resources == {COUNT}
    assert (VA.allocation_keys, VA.handshake_key, VA.cleanup_key, VA.lock_key, VA.inventory_keys) == (
        ("hami.io/Vastai-devices-to-allocate", "hami.io/Vastai-devices-allocated"),
        "hami.io/node-handshake-va",
        "hami.io/node-handshake-va",
        keys.NODE_LOCK,
        ("hami.io/node-va-register",),
    )
    assert (VA.prefilter, VA.scores_nodes) == (False, True)


def test_chart_section_verbatim_and_missing_section() -> None:
    assert build(parse_device_config(CHART_SECTION))["Vastai"].names == ResourceNames(COUNT, "", "", 0)
    assert build(DeviceConfig())["Vastai"].names == ResourceNames("", "", "", 0)


def test_bad_section_is_a_config_error() -> None:
    with pytest.raises(DeviceConfigError) as err:
        parse_device_config("vastai:\n  resourceCountName: [a]\n", "f.yaml")
    assert err.value.key == "vastai.resourceCountName"


# --------------------------------------------------------------------------------------------
# Requests (Test_GenerateResourceRequests)


def req(nums: int) -> ContainerDeviceRequest:
    return ContainerDeviceRequest(nums, "Vastai", 0, 100, 0)


@pytest.mark.parametrize(
    ("ctr", "expected"),
    [
        ({"name": "c", "resources": {"limits": {}, "requests": {}}}, None),
        ({"name": "c", "resources": {"limits": {COUNT: "1"}, "requests": {COUNT: "1"}}}, req(1)),
        (limits("1"), req(1)),
        ({"name": "c", "resources": {"requests": {COUNT: "1"}}}, req(1)),
        (limits("3"), req(3)),
        (limits("0"), None),  # Nums 0: Resourcereqs drops it
        (limits("-1"), None),
        (limits("0.5"), None),
        (limits("4294967297"), req(1)),  # int32(n) without a range check, as HAMi converts
        ({"name": "c", "resources": {"limits": {"other.com/x": "1"}}}, None),
    ],
    ids=readable,
)
def test_requests(ctr: dict[str, Any], expected: ContainerDeviceRequest | None) -> None:
    assert VA.request(ctr) == expected


# --------------------------------------------------------------------------------------------
# Inventory (Test_GetNodeDevices) and health (Test_CheckHealth)


def va_node(register: str | None, *, name: str = "n", allocatable: str | None = None, **annos: str) -> Any:
    annotations = dict(annos)
    if register is not None:
        annotations[vastai.REGISTER] = register
    return node(name, annotations=annotations, allocatable={COUNT: allocatable} if allocatable else None)


def test_inventory_json_forces_devcore_100() -> None:
    register = '[{"id":"7-0","count":1,"devmem":32768,"type":"Vastai","health":true,"devicepairscore":{}}]'
    assert VA.node_devices(va_node(register)) == [
        VastaiDevice(id="7-0", index=0, count=1, devmem=32768, devcore=100, type="Vastai", numa=0,
                     health=True, device_vendor="Vastai")
    ]
    [dev] = VA.node_devices(va_node('[{"id":"a","count":4,"devcore":7,"type":"Vastai","health":true}]'))
    assert dev.devcore == 100


@pytest.mark.parametrize(
    ("register", "infos"),
    [
        pytest.param('[{"id":"d0","type":"Vastai","custominfo":{"DeviceStrategy":"die","AIC":"1"}},'
                     '{"id":"d1","type":"Vastai"}]', [{"DeviceStrategy": "die", "AIC": "1"}, None],
                     id="a die and a device without custominfo"),
        ('[{"id":"d0","type":"Vastai","CustomInfo":{"AIC":"2"}}]', [{"AIC": "2"}]),  # Go folds the name
        ('[{"id":"d0","type":"Vastai","custominfo":null}]', [None]),
    ],
    ids=readable,
)
def test_inventory_keeps_custominfo(register: str, infos: list[Any]) -> None:
    devices = VA.node_devices(va_node(register))
    assert [d.custom_info for d in devices if isinstance(d, VastaiDevice)] == infos


@pytest.mark.parametrize(
    ("register", "error"),
    [
        (None, "annos not found hami.io/node-va-register"),
        (":", "invalid node annotation JSON"),
        ("", "invalid node annotation JSON"),
        ("[]", "no gpu found on node"),
        ('[{"id":"d0","custominfo":"die"}]', "device 0: field 'custominfo' must be an object, got string"),
        ('[{"id":"d0","count":true}]', "device 0: field 'count' must be an int32"),
    ],
    ids=readable,
)
def test_inventory_errors(register: str | None, error: str) -> None:
    with pytest.raises(InventoryError, match=error):
        VA.node_devices(va_node(register))


@pytest.mark.parametrize(
    ("handshake", "allocatable", "healthy", "need_update", "write"),
    HANDSHAKE_HEALTH,
    ids=readable,
)
def test_health(
    handshake: str | None, allocatable: str | None, healthy: bool, need_update: bool, write: bool
) -> None:
    annos = {vastai.HANDSHAKE: handshake} if handshake is not None else {}
    health = VA.check_health(va_node(None, allocatable=allocatable, **annos), NOW, UTC)
    assert health_flags(health) == (healthy, need_update, write)


# --------------------------------------------------------------------------------------------
# Fit (TestDevices_Fit, Test_checkType) and computeBestCombination


@dataclasses.dataclass
class Dev:
    id: str
    count: int = 1
    used: int = 0
    health: bool = True
    index: int = 0
    info: dict[str, Any] | None = None
    totalmem: int = 0


def devices_of(devs: list[Dev]) -> list[DeviceInfo]:
    return [VastaiDevice(id=d.id, index=d.index, count=d.count, devmem=d.totalmem, devcore=100, type="Vastai",
                         health=d.health, custom_info=d.info) for d in devs]


def run_fit(
    devs: list[Dev], request: ContainerDeviceRequest, annos: dict[str, str] | None = None
) -> tuple[bool, list[str], str]:
    devices = devices_of(devs)
    usage = [DeviceUsage(d.used) for d in devs]
    ctx = pod_fit_context(pod(annotations=annos or {}), vendors=Vendors([VA]))
    order = list(range(len(devs)))
    result = VA.fit(request, devices, usage, order, ctx=ctx, cordoned=frozenset(), allocated=())
    quick = VA.quick_verdict(request, devices, usage, order, ctx=ctx, cordoned=frozenset())
    assert quick is None or quick == result.reason
    assert quick is not None or any(d.info for d in devs)  # order-free unless there are dies
    assert [devices[p].id for p in result.positions] == [e.uuid for e in result.devices]
    return result.ok, [e.uuid for e in result.devices], result.reason


def die(card: str) -> dict[str, Any]:
    return {**DIE, "AIC": card}


MUTEX = {keys.GPU_SCHEDULER_POLICY: "mutex"}


@pytest.mark.parametrize(
    ("devs", "request_", "annos", "reason", "ids"),
    [
        ([Dev("dev-0"), Dev("dev-1", index=1)], req(1), {}, "", ["dev-1"]),
        ([Dev("dev-0")], ContainerDeviceRequest(1, "OtherType", 512, 0, 50), {}, "1/1 CardTypeMismatch", []),
        ([Dev("dev-1")], req(1), {vastai.USE_UUID: "dev-0"}, "1/1 CardUuidMismatch", []),
        ([Dev("dev-0")], req(1), {vastai.NOUSE_UUID: "dev-0"}, "1/1 CardUuidMismatch", []),
        ([Dev("dev-0", used=1)], req(1), {}, "1/1 CardTimeSlicingExhausted", []),
        ([Dev("dev-0")], req(2), {}, "1/1 AllocatedCardsInsufficientRequest", []),
        ([Dev("dev-0", count=2, used=1)], req(1), MUTEX, "1/1 ExclusiveDeviceAllocateConflict", []),
        ([Dev("dev-0", count=2, used=1, info=die("1")), Dev("dev-1", index=1, info=die("1")),
          Dev("dev-2", index=2, info=die("2"))], req(1), MUTEX, "", ["dev-2"]),
        ([Dev("dev-0", count=2, used=1, info=die("1")), Dev("dev-1", index=1, info=die("1"))], req(1), MUTEX,
         "2/2 ExclusiveDeviceAllocateConflict", []),
        ([Dev("dev-0", count=100, totalmem=1280), Dev("dev-1", count=100, index=1, totalmem=1280)],
         ContainerDeviceRequest(3, "Vastai", 512, 0, 20), {}, "2/2 AllocatedCardsInsufficientRequest", []),
        ([Dev("dev-0", health=False)], req(1), {}, "1/1 CardNotHealth", []),
        # No type selection for Vastai: NVIDIA's and the unused vastaitech.com/use-va say nothing.
        ([Dev("dev-0")], req(1), {keys.USE_GPUTYPE: "A100", "vastaitech.com/use-va": "x"}, "", ["dev-0"]),
        # Die mode (the first device is a die): every passing die is collected, then chosen.
        ([Dev("d0", info=die("1")), Dev("d1", index=1, info=die("2")), Dev("d2", index=2, info=die("2"))],
         req(1), {}, "", ["d2"]),
        ([Dev("d0", info=die("1")), Dev("d1", index=1, info=die("2")), Dev("d2", index=2, info=die("2")),
          Dev("d3", index=3, info=die("1")), Dev("d4", index=4, info=die("2"))], req(2), {}, "",
         ["d4", "d2"]),
        ([Dev("d0", info=die("1")), Dev("d1", index=1, info=die("2"))], req(2), {}, "", ["d1", "d0"]),
        ([Dev("d0", info=die("1")), Dev("d1", index=1, used=1, info=die("1"))], req(2), {},
         "1/2 AllocatedCardsInsufficientRequest, 1/2 CardTimeSlicingExhausted", []),
        # Without mutex a used die's siblings stay usable (count permitting).
        ([Dev("d0", count=2, used=1, info=die("1")), Dev("d1", index=1, info=die("1"))], req(1), {}, "",
         ["d1"]),
        # Die mode comes from the first device of the order only.
        ([Dev("d0"), Dev("d1", index=1, info=die("1")), Dev("d2", index=2, info=die("1"))], req(1), {}, "",
         ["d2"]),
    ],
    ids=readable,
)
def test_fit(
    devs: list[Dev], request_: ContainerDeviceRequest, annos: dict[str, str], reason: str, ids: list[str]
) -> None:
    ok, got, got_reason = run_fit(devs, request_, annos)
    assert (ok, got_reason) == (reason == "", reason)
    if ok:
        assert got == ids


def test_fit_entries_carry_the_request() -> None:
    """Entries: the vendor key, no memory, the request's cores (0), the device index."""
    devices = devices_of([Dev("dev-0", index=3, totalmem=32768)])
    ctx = pod_fit_context(pod(), vendors=Vendors([VA]))
    result = VA.fit(req(1), devices, [DeviceUsage()], [0], ctx=ctx, cordoned=frozenset(), allocated=())
    assert result.devices == [ContainerDevice("dev-0", "Vastai", 0, 0, 3)]
    u = DeviceUsage(1)
    VA.add_usage(devices[0], u, result.devices[0], container_index=0, device_index=0, migs=[])
    assert u == DeviceUsage(2, 0, 0)


def chosen_of(*cards: str | None) -> list[tuple[int, ContainerDevice, str | None]]:
    return [(i, ContainerDevice(f"dev{i + 1}", "Vastai", 0, 0, i + 1), c) for i, c in enumerate(cards)]


@pytest.mark.parametrize(
    ("nums", "cards", "expected"),
    [
        (2, ("1", "1", "1"), ["dev1", "dev2"]),
        (3, ("1", "1", "1", "2", "2", "3"), ["dev1", "dev2", "dev3"]),
        (4, ("1", "1", "1", "2", "2", "3"), ["dev1", "dev2", "dev3", "dev4"]),
        (5, ("1", "1", "2"), ["dev1", "dev2", "dev3"]),
        (2, ("2", "1", "1"), ["dev2", "dev3"]),  # fullest card first, not first met
        (2, ("2", "1"), ["dev1", "dev2"]),  # a tie keeps the order the cards were met in
        (2, (None, "1", None), ["dev2"]),  # dies without a card are left out (short, as in HAMi)
    ],
    ids=readable,
)
def test_best_combination(nums: int, cards: tuple[str | None, ...], expected: list[str]) -> None:
    chosen = chosen_of(*cards)
    assert [chosen[i][1].uuid for i in best_combination(nums, chosen)] == expected


# --------------------------------------------------------------------------------------------
# Node score (ScoreNode)


SCORE_DEVICES = devices_of([
    Dev("a", info=die("1")), Dev("b", info=die("1")), Dev("c", info=die("2")),
    Dev("w"), Dev("x", info={"DeviceStrategy": "card", "AIC": "1"}), Dev("y", info=DIE),
    Dev("z", info={**DIE, "AIC": 7}), Dev("e", info={}),
])


def entries(*ids: str) -> list[ContainerDevice]:
    return [ContainerDevice(i, "Vastai", 0, 0) for i in ids]


@pytest.mark.parametrize(
    ("per_container", "score"),
    [
        ([entries("a", "b")], 1.0),
        ([entries("a", "b", "c")], f32(2 / 3)),
        ([entries("a", "c"), [], entries("a", "b")], 1.5),
        ([entries("a", "w")], 0.0),  # no custominfo
        ([entries("a", "b"), entries("x")], 0.0),  # another strategy zeroes the whole pod
        ([entries("y")], 0.0),  # a die without a card
        ([entries("z")], 0.0),  # a card that is not a string: nothing counted
        ([entries("e")], 0.0),  # custominfo without a strategy or card
    ],
    ids=readable,
)
def test_score_node(per_container: list[list[ContainerDevice]], score: float) -> None:
    got = VA.score_node(per_container, annotations={}, devices=SCORE_DEVICES, previous=[], policy="binpack")
    assert got == score


# --------------------------------------------------------------------------------------------
# Annotations (Test_PatchAnnotations), lock (TestDevices_LockNode), admission (Test_MutateAdmission)


def test_patch_annotations() -> None:
    assert VA.patch_annotations([[ContainerDevice("test1", "Vastai", 2048, 1, 1)]], [], node="n", now=1) == {
        "hami.io/Vastai-devices-to-allocate": "test1,Vastai,2048,1:;",
        "hami.io/Vastai-devices-allocated": "test1,Vastai,2048,1:;",
    }
    assert VA.patch_annotations([], [], node="n", now=1) == {}


@pytest.mark.parametrize(
    ("p", "locks"),
    [
        (pod(containers=[]), False),
        (pod(containers=[{"name": "c", "resources": {"requests": {COUNT: "1"}}}]), True),
        (pod(init_containers=[limits("1")], containers=[container()]), False),
    ],
    ids=readable,
)
def test_lock_only_for_regular_containers(p: dict[str, Any], locks: bool) -> None:
    assert _locking_request(p, VENDORS) is locks


@pytest.mark.parametrize(
    ("ctr", "has"),
    [(limits("1"), True), ({"name": "c", "resources": {"requests": {COUNT: "1"}}}, False)],
    ids=readable,
)
def test_mutate(ctr: dict[str, Any], has: bool) -> None:
    before = json.loads(json.dumps(ctr))
    assert VA.mutate(ctr, pod()) is has
    assert ctr == before


def test_webhook_puts_vastai_pods_under_our_scheduler() -> None:
    response = review(pod(containers=[limits("1")]), VENDORS)
    assert response.allowed
    assert any(op.get("path") == "/spec/schedulerName" for op in response.patch)


# --------------------------------------------------------------------------------------------
# In the scheduler: registration, decision, bind, metrics, simulator


def va_devices(n: int = 2, cards: list[str] | None = None, *, count: int = 1) -> str:
    out = []
    for i in range(n):
        d: dict[str, Any] = {"id": f"VA-{i}", "index": i, "count": count, "devmem": 32768, "devcore": 0,
                             "type": "Vastai", "health": True}
        if cards is not None:
            d["custominfo"] = die(cards[i])
        out.append(d)
    return json.dumps(out, separators=(",", ":"))


async def test_registration_stamps_the_va_handshake_and_cleans_up() -> None:
    async with registration(VENDORS, NOW) as reg:
        reg.add(
            va_node(va_devices(cards=["1", "1"]), name="va-1"),
            va_node('[{"id":"x","custominfo":[1]}]', name="va-broken"),  # one node's bad annotation ...
            va_node(va_devices(1), name="va-2"))
        report = await reg.run()
        view = reg.state.ledger.view("va-1")
        assert view is not None and [d.id for d in view.devices] == ["VA-0", "VA-1"]
        assert all(isinstance(d, VastaiDevice) and d.custom_info == die("1") for d in view.devices)
        assert reg.state.ledger.view("va-2") is not None  # ... never affects another
        assert reg.state.ledger.view("va-broken") is None
        assert report.errors == {"va-broken": "device 0: field 'custominfo' must be an object, got array"}
        annotations = reg.node_annotations("va-1")
        assert annotations[vastai.HANDSHAKE] == "Requesting_2026-11-29 21:03:30"
        # Nobody answers and nothing is allocatable: unhealthy after 60 s, the handshake deleted.
        reg.refresh("va-1")
        reg.clock[0] = NOW + timedelta(seconds=61)
        report = await reg.run()
        assert "va-1" in report.cleaned and reg.state.ledger.view("va-1") is None
        assert vastai.HANDSHAKE not in reg.node_annotations("va-1")


def va_pod(name: str, count: str, **annos: str) -> dict[str, Any]:
    return pod(name, uid=f"uid-{name}", annotations=annos, containers=[limits(count)],
               status={"phase": "Pending"})


def test_decision_writes_the_vastai_annotations() -> None:
    state = SchedulerState(VENDORS)
    state.set_node_devices("va-1", VA.node_devices(va_node(va_devices())))
    first = va_pod("p", "1")
    d = decide(first, ["va-1"], state, default_node_policy="binpack", default_gpu_policy="spread",
               now=1700000000)
    assert isinstance(d, Chosen)
    assert d.annotations == {
        keys.VGPU_NODE: "va-1",
        keys.VGPU_TIME: "1700000000",
        "hami.io/Vastai-devices-to-allocate": "VA-1,Vastai,0,0:;",
        "hami.io/Vastai-devices-allocated": "VA-1,Vastai,0,0:;",
    }
    state.reserve(first, d)
    two = decide(va_pod("q", "2"), ["va-1"], state,
                 default_node_policy="binpack", default_gpu_policy="spread", now=1700000001)
    assert two == NoFit({"va-1": "1/2 AllocatedCardsInsufficientRequest, 1/2 CardTimeSlicingExhausted"})


def test_die_mode_node_score_prefers_dies_of_one_card() -> None:
    """Two dies asked: on "split" they sit on two cards (ScoreNode 0.5), on "paired" on one (1.0).

    The score is added as it is (Vastai is not a PolicyNeutralScorer): binpack takes the highest
    node score, so "paired"; spread takes the lowest, so the same bonus sends the pod to "split"."""
    state = SchedulerState(VENDORS)
    state.set_node_devices("split", VA.node_devices(va_node(va_devices(2, ["1", "2"]))))
    state.set_node_devices("paired", VA.node_devices(va_node(va_devices(2, ["1", "1"]))))
    for policy, chosen in (("binpack", "paired"), ("spread", "split")):
        d = decide(va_pod("p", "2"), ["split", "paired"], state,
                   default_node_policy=policy, default_gpu_policy="spread", now=1)
        assert isinstance(d, Chosen) and (d.node, d.scores) == (chosen, {"split": 0.5, "paired": 1.0})
        assert d.annotations["hami.io/Vastai-devices-allocated"] == "VA-1,Vastai,0,0:VA-0,Vastai,0,0:;"


def test_die_mode_mutex_refuses_the_siblings_of_a_used_die() -> None:
    state = SchedulerState(VENDORS)
    state.set_node_devices("va-1", VA.node_devices(va_node(va_devices(3, ["1", "2", "2"], count=2))))

    def allocated(name: str, gpu_policy: str, **annos: str) -> str | NoFit:
        d = decide(va_pod(name, "1", **annos), ["va-1"], state,
                   default_node_policy="binpack", default_gpu_policy=gpu_policy, now=1)
        return d.annotations["hami.io/Vastai-devices-allocated"] if isinstance(d, Chosen) else d

    first = va_pod("p", "1")
    d = decide(first, ["va-1"], state, default_node_policy="binpack", default_gpu_policy="spread", now=1)
    assert isinstance(d, Chosen) and d.annotations["hami.io/Vastai-devices-allocated"] == "VA-2,Vastai,0,0:;"
    state.reserve(first, d)
    # binpack prefers the used die; without mutex it shares it, with mutex card 2 is taken whole.
    assert allocated("q", "binpack") == "VA-2,Vastai,0,0:;"
    assert allocated("q", "binpack", **MUTEX) == "VA-0,Vastai,0,0:;"
    second = va_pod("r", "1", **MUTEX)
    d = decide(second, ["va-1"], state, default_node_policy="binpack", default_gpu_policy="binpack", now=2)
    assert isinstance(d, Chosen)
    state.reserve(second, d)  # card 1 now used too
    assert allocated("s", "binpack", **MUTEX) == NoFit({"va-1": "3/3 ExclusiveDeviceAllocateConflict"})


def test_metrics_list_vastai_devices() -> None:
    state = SchedulerState(VENDORS)
    state.set_node_devices("va-1", VA.node_devices(va_node(va_devices())))
    p = va_pod("p", "1")
    d = decide(p, ["va-1"], state, default_node_policy="binpack", default_gpu_policy="spread", now=1)
    assert isinstance(d, Chosen)
    state.reserve(p, d)
    text = metrics_text(state)
    dev = 'device_index="1",device_type="Vastai",device_uuid="VA-1",node="va-1",zone="vGPU"'
    assert f"hami_gpu_core_limit_ratio{{{dev}}} 100\n" in text  # the forced devcore
    assert f"hami_gpu_shared_count{{{dev}}} 1\n" in text
    assert f"hami_gpu_memory_limit_bytes{{{dev}}} 3.4359738368e+10\n" in text


async def test_simulated_device_plugin_consumes_vastai_allocations() -> None:
    annotations = {
        "hami.io/Vastai-devices-to-allocate": ";VA-1,Vastai,0,0:VA-0,Vastai,0,0:;",
        "hami.io/Vastai-devices-allocated": ";VA-1,Vastai,0,0:VA-0,Vastai,0,0:;",
        keys.BIND_PHASE: "allocating",
    }
    bound = pod("p", annotations=annotations, containers=[container("a"), limits("2")])
    admitted = await admit_bound_pod(VENDORS, bound)
    assert admitted.phase == "Running"
    after = admitted.annotations
    assert after["hami.io/Vastai-devices-to-allocate"] == ";;" and after[keys.BIND_PHASE] == "success"
    assert keys.NODE_LOCK not in admitted.node_annotations


def snapshot_node(name: str, register: str, count: str) -> dict[str, Any]:
    resources = {"cpu": "16", "memory": "64Gi", "pods": "110", COUNT: count}
    # No handshake yet: the first pass stamps it and reads the inventory.
    return node(name, annotations={vastai.REGISTER: register}, capacity=resources, allocatable=resources,
                labels={"kubernetes.io/hostname": name}, typed=True)


POD_YAML = """\
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default}}
spec:
  containers:
  - name: c
    image: x
    resources: {{limits: {{vastaitech.com/va: {count}}}}}
"""


def test_cli_simulate_places_vastai_pods(tmp_path: Path) -> None:
    nodes = [snapshot_node("va-split", va_devices(2, ["1", "2"]), "2"),
             snapshot_node("va-paired", va_devices(2, ["1", "1"]), "2")]
    pods = [POD_YAML.format(name=n, count=c) for n, c in (("pair", 2), ("one", 1))]
    report = simulate_report(tmp_path, nodes=nodes, pods=pods, config=CHART_SECTION)
    pair = report["pair"]
    assert pair["node"] == "va-paired"  # ScoreNode: both dies on one card
    assert pair["annotations"]["hami.io/Vastai-devices-allocated"] == "VA-1,Vastai,0,0:VA-0,Vastai,0,0:;"
    assert (pair["annotations"]["hami.io/Vastai-devices-to-allocate"], pair["annotations"][keys.BIND_PHASE]) \
        == (";", "success")
    assert report["one"]["node"] == "va-split"
    assert report["one"]["annotations"]["hami.io/Vastai-devices-allocated"] == "VA-1,Vastai,0,0:;"
