"""Iluvatar (§2.2, §3.3, §3.4, §4.4, §5.3, §6.2, §7): the vectors of HAMi v2.10.0's
pkg/device/iluvatar/device_test.go, then the `iluvatars` list inside the registry (gated by
--enable-iluvatar), the registration loop, the decision, the bind, the webhook and the metrics.
The `simulate` CLI end to end is in test_iluvatar_biren_cli.py."""

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
    device_infos,
    fit_checked,
    health_flags,
    metrics_text,
    patch_ops,
    privileged,
    readable,
    registration,
    review,
    usages,
)
from vgpu_scheduler.config import DeviceConfig
from vgpu_scheduler.configfile import default_device_config, parse_device_config
from vgpu_scheduler.devices import iluvatar
from vgpu_scheduler.devices.iluvatar import IluvatarVendor, decimal_si
from vgpu_scheduler.devices.protocol import ResourceNames, VendorConfigError, VendorFlags, Vendors
from vgpu_scheduler.devices.registry import build
from vgpu_scheduler.engine.decide import Chosen, NoFit, decide
from vgpu_scheduler.engine.quota import QuotaManager
from vgpu_scheduler.engine.requests import pod_requests
from vgpu_scheduler.engine.state import SchedulerState
from vgpu_scheduler.model import NVIDIA, ContainerDevice, ContainerDeviceRequest, DeviceInfo, DeviceUsage
from vgpu_scheduler.scheduler.extender import _locking_request
from vgpu_scheduler.scheduler.options import SchedulerOptions, vendor_flags
from vgpu_scheduler.wire import keys
from vgpu_scheduler.wire.inventory import InventoryError

CW = "MR-V100"
COUNT, MEM, CORES = "iluvatar.ai/MR-V100-vgpu", "iluvatar.ai/MR-V100.vMem", "iluvatar.ai/MR-V100.vCore"
ILU = IluvatarVendor(CW, ResourceNames(COUNT, MEM, CORES, 256), chip_name=CW)
CHART = default_device_config()
ENABLED = VendorFlags(enable_iluvatar=True)
VENDORS = build(CHART, ENABLED)
CHIPS = ("MR-V100", "MR-V50", "BI-V150", "BI-V100")



def limits(**kw: str) -> dict[str, Any]:
    names = {"count": COUNT, "mem": MEM, "cores": CORES}
    return container(limits={names[k]: v for k, v in kw.items()})


# --------------------------------------------------------------------------------------------
# Configuration: one vendor per list entry, only with --enable-iluvatar


def test_chart_list_registers_one_vendor_per_chip_after_the_others() -> None:
    assert VENDORS.keys[-4:] == CHIPS
    assert VENDORS.keys[0] == NVIDIA
    v = VENDORS["BI-V150"]
    assert v.names == ResourceNames(
        "iluvatar.ai/BI-V150-vgpu", "iluvatar.ai/BI-V150.vMem", "iluvatar.ai/BI-V150.vCore", 256
    )
    assert v.managed_resources == {"iluvatar.ai/BI-V150-vgpu", "iluvatar.ai/BI-V150.vMem",
                                   "iluvatar.ai/BI-V150.vCore"}
    assert (v.allocation_keys, v.handshake_key, v.cleanup_key, v.lock_key, v.inventory_keys) == (
        ("hami.io/BI-V150-devices-to-allocate", "hami.io/BI-V150-devices-allocated"),
        "hami.io/node-handshake-BI-V150",
        None,  # NodeCleanUp does nothing
        keys.NODE_LOCK,
        ("hami.io/node-BI-V150-register",),
    )
    assert isinstance(v, IluvatarVendor) and v.chip_name == "BI-V150"
    assert v.prefilter is True and v.scores_nodes is False  # ScoreNode is 0
    assert v.score_node([], annotations={}, devices=[], previous=[], policy="binpack") == 0
    assert (v.use_uuid_key, v.nouse_uuid_key) == ("hami.io/use-BI-V150-uuid", "hami.io/no-use-BI-V150-uuid")


def test_without_the_flag_no_chip_registers() -> None:
    assert not set(CHIPS) & set(build(CHART).keys)
    assert not set(CHIPS) & set(build(CHART, vendor_flags(SchedulerOptions())).keys)
    opts = dataclasses.replace(SchedulerOptions(), enable_iluvatar=True)
    assert build(CHART, vendor_flags(opts)).keys[-4:] == CHIPS


@pytest.mark.parametrize(
    "yaml",
    ["nvidia: {resourceCountName: nvidia.com/gpu}\n", "iluvatars: []\nnvidia: {resourceCountName: x}\n",
     "iluvatars:\nnvidia: {resourceCountName: x}\n"],
    ids=["section missing", "empty list", "null list"],
)
def test_missing_or_empty_list_registers_no_chip(yaml: str) -> None:
    keys_ = build(parse_device_config(yaml), ENABLED).keys
    assert not any(k in CHIPS for k in keys_) and len(keys_) == len(build(DeviceConfig()).keys)


def test_custom_list_and_missing_names() -> None:
    config = parse_device_config("iluvatars:\n- {commonWord: X1, resourceCountName: ex.com/x1}\n")
    v = build(config, ENABLED)["X1"]
    assert v.names == ResourceNames("ex.com/x1", "", "", 256)
    assert v.request(container(limits={"ex.com/x1": "2"})) == ContainerDeviceRequest(2, "X1", 0, 100, 0)


def test_a_repeated_common_word_keeps_the_last_entry_in_the_first_place() -> None:
    """HAMi keeps the chips in a map by commonWord: the last entry's names win."""
    config = parse_device_config(
        "iluvatars:\n- {commonWord: A, resourceCountName: a/1}\n- {commonWord: B, resourceCountName: b}\n"
        "- {commonWord: A, resourceCountName: a/2}\n"
    )
    vendors = build(config, ENABLED)
    assert vendors.keys[-2:] == ("A", "B")
    assert vendors["A"].names.count == "a/2"


@pytest.mark.parametrize(
    ("section", "key"),
    [
        ([{"commonWord": 5}], "iluvatars.0.commonWord"),
        ([{"commonWord": "A"}, "text"], "iluvatars.1"),
        ([{"commonWord": "A", "resourceCoreName": ["x"]}], "iluvatars.0.resourceCoreName"),
        ([{"chipName": "A"}], "iluvatars.0.commonWord"),  # no commonWord: no key, no annotations
        ({"commonWord": "A"}, "iluvatars"),
    ],
    ids=readable,
)
def test_bad_entries_are_config_errors_naming_the_entry(section: object, key: str) -> None:
    with pytest.raises(VendorConfigError) as err:
        build(DeviceConfig(other_vendors={"iluvatars": section}), ENABLED)
    assert err.value.key == key


def test_v2_10_has_no_legacy_iluvatar_flags() -> None:
    """--iluvatar-name/--iluvatar-memory/--iluvatar-cores were removed in HAMi v2.8: only the list counts."""
    assert not [name for name in vendor_flags(SchedulerOptions()).legacy if "iluvatar" in name]


# --------------------------------------------------------------------------------------------
# Requests (Test_GenerateResourceRequests): memory in 256 MiB units, cores default 0


def req(nums: int, mem: int, pct: int, cores: int) -> ContainerDeviceRequest:
    return ContainerDeviceRequest(nums, CW, mem, pct, cores)


@pytest.mark.parametrize(
    ("ctr", "expected"),
    [
        ({"name": "c", "resources": {"limits": {COUNT: "1", MEM: "1000", CORES: "100"},
                                     "requests": {COUNT: "1", MEM: "1000", CORES: "100"}}},
         req(1, 256000, 0, 100)),
        (container(limits={}, requests={}), None),
        ({"name": "c", "resources": {"limits": {COUNT: "1"}, "requests": {COUNT: "1"}}}, req(1, 0, 100, 0)),
        (limits(count="1", mem="16Gi"), None),  # overflows int32 once scaled: rejected, not truncated
        (limits(count="1", mem="16.0Gi"), None),
        (limits(count="1", mem="0.5"), None),  # not a plain integer: rejected, not treated as 0
        (limits(count="1", mem="-1"), None),
        (limits(count="1", mem="8388607"), req(1, 2147483392, 0, 0)),  # the largest accepted
        (limits(count="1", mem="8388608"), None),
        (limits(count="1", mem="0"), req(1, 0, 100, 0)),  # 0 units: the whole device
        (limits(count="2", mem="4", cores="50"), req(2, 1024, 0, 50)),
        # count in requests only, memory and cores from requests
        ({"name": "c", "resources": {"requests": {COUNT: "1", MEM: "2", CORES: "30"}}}, req(1, 512, 0, 30)),
        # cores: Go's int32 of the value, no range check; unreadable cores are 0
        (limits(count="1", cores="-5"), req(1, 0, 100, -5)),
        (limits(count="1", cores="4294967396"), req(1, 0, 100, 100)),
        (limits(count="1", cores="1500m"), req(1, 0, 100, 0)),
        (limits(count="1", cores="250"), req(1, 0, 100, 250)),  # clamped to 100 by the fit, not here
        # count: Go's int32 of the value; 0 or negative asks for nothing (dropped by the engine)
        (limits(count="4294967297"), req(1, 0, 100, 0)),
        (limits(count="0"), req(0, 0, 100, 0)),
        (limits(count="0.5"), None),
        (limits(mem="4"), None),
    ],
    ids=readable,
)
def test_requests(ctr: dict[str, Any], expected: ContainerDeviceRequest | None) -> None:
    assert ILU.request(ctr) == expected


def test_zero_and_negative_counts_ask_for_nothing() -> None:
    vendors = Vendors([ILU])
    assert pod_requests(pod(containers=[limits(count="0"), limits(count="-1")]), vendors) == [{}, {}]


# --------------------------------------------------------------------------------------------
# Inventory (TestGetNodeDevices) and health


def ilu_node(register: str | None, *, name: str = "n", cw: str = CW, allocatable: str | None = "4",
             **annos: str) -> Any:
    annotations = dict(annos)
    if register is not None:
        annotations[iluvatar.register_key(cw)] = register
    count = f"iluvatar.ai/{cw}-vgpu"
    return node(name, annotations=annotations, allocatable={count: allocatable} if allocatable else None)


def test_inventory_legacy_form() -> None:
    register = "GPU-bad51c5a-ed4c-591d-91bf-c04a12e19eae,10,8192,100,MR-V100,0,true:"
    devices = ILU.node_devices(ilu_node(register))
    assert devices == [
        DeviceInfo(id="GPU-bad51c5a-ed4c-591d-91bf-c04a12e19eae", index=0, count=10, devmem=8192, devcore=100,
                   type="MR-V100", numa=0, mode="hami-core", health=True, device_vendor=CW)
    ]


def test_inventory_nine_fields_and_unhealthy_device() -> None:
    register = "a,4,32768,100,MR-V100,1,false,3,hami-core:b,4,32768,100,MR-V100,0,true:"
    devices = ILU.node_devices(ilu_node(register))
    assert [(d.id, d.index, d.numa, d.health) for d in devices] == [("a", 3, 1, False), ("b", 0, 0, True)]


@pytest.mark.parametrize(
    ("register", "error"),
    [
        (None, "annos not found hami.io/node-MR-V100-register"),
        ("[]", "node annotation missing device separator"),  # HAMi's test calls it "no device"
        ("", "node annotation missing device separator"),
        (":", "no gpu found on node"),
        ('[{"id":"a","count":1}]:', "malformed node annotation segment"),  # legacy decoder only
        ("a,4,1024,100,MR-V100:", "unexpected field count 5 in node annotation"),
        ("a,x,1024,100,MR-V100,0,true:", "invalid count field"),
        ("a,4,1024,100,MR-V100,0,yes:", "invalid health field"),
    ],
    ids=readable,
)
def test_inventory_errors(register: str | None, error: str) -> None:
    with pytest.raises(InventoryError, match=error):
        ILU.node_devices(ilu_node(register))


@pytest.mark.parametrize(
    ("handshake", "allocatable", "healthy", "need_update", "write"),
    [
        *HANDSHAKE_HEALTH[:3],
        ("Requesting", None, True, False, False),  # no timestamp: healthy, nothing to do
        *HANDSHAKE_HEALTH[3:],
    ],
    ids=readable,
)
def test_health_reads_the_chips_handshake_and_count(
    handshake: str | None, allocatable: str | None, healthy: bool, need_update: bool, write: bool
) -> None:
    annos = {iluvatar.handshake_key(CW): handshake} if handshake is not None else {}
    # Another chip's handshake says nothing about this one.
    annos[iluvatar.handshake_key("MR-V50")] = "Requesting_2026-11-29 21:03:29"
    health = ILU.check_health(ilu_node(":", allocatable=allocatable, **annos), NOW, UTC)
    assert health_flags(health) == (healthy, need_update, write)


# --------------------------------------------------------------------------------------------
# Fit (Test_Fit, TestFit_MutexRejectsUsedDevice, Test_checkType)


def run_fit(
    devs: list[Dev], request: ContainerDeviceRequest, annos: dict[str, str] | None = None
) -> tuple[bool, list[ContainerDevice], str]:
    result = fit_checked(ILU, request, device_infos(devs, CW), usages(devs), annos=annos)
    return result.ok, result.devices, result.reason


USE, NOUSE = iluvatar.uuid_keys(CW)


@pytest.mark.parametrize(
    ("devs", "request_", "annos", "ids", "reason"),
    [
        ([Dev("dev-0"), Dev("dev-1")], req(1, 64, 0, 50), {}, ["dev-1"], ""),
        ([Dev("dev-0")], req(1, 512, 0, 50), {}, [], "1/1 CardInsufficientMemory"),
        # HAMi's "core not enough" case: memory is checked first
        ([Dev("dev-0", usedcores=100)], req(1, 512, 0, 50), {}, [], "1/1 CardInsufficientMemory"),
        ([Dev("dev-0", usedcores=60)], req(1, 64, 0, 50), {}, [], "1/1 CardInsufficientCore"),
        ([Dev("dev-0")], ContainerDeviceRequest(1, "OtherType", 512, 0, 50), {}, [], "1/1 CardTypeMismatch"),
        ([Dev("dev-0", count=2, used=1)], req(1, 64, 0, 50), {keys.GPU_SCHEDULER_POLICY: "mutex"}, [],
         "1/1 ExclusiveDeviceAllocateConflict"),
        ([Dev("dev-0", used=1)], req(1, 64, 0, 50), {keys.GPU_SCHEDULER_POLICY: "mutex"}, [],
         "1/1 ExclusiveDeviceAllocateConflict"),
        ([Dev("dev-0", health=False)], req(1, 64, 0, 50), {}, [], "1/1 CardNotHealth"),
        # the chip's own uuid annotations
        ([Dev("dev-1")], req(1, 64, 0, 50), {USE: "dev-0"}, [], "1/1 CardUuidMismatch"),
        ([Dev("dev-0")], req(1, 64, 0, 50), {NOUSE: " dev-0 ,x"}, [], "1/1 CardUuidMismatch"),
        ([Dev("dev-0"), Dev("dev-1")], req(1, 64, 0, 50), {USE: "dev-0"}, ["dev-0"], ""),
        ([Dev("dev-0")], req(1, 64, 0, 50), {USE: " "}, ["dev-0"], ""),  # blank: no constraint
        # other vendors' selection annotations and NVIDIA's numa-bind mean nothing here
        ([Dev("dev-0")], req(1, 64, 0, 50), {keys.USE_GPUTYPE: "A100", "hami.io/use-MR-V50-uuid": "x",
                                             keys.NUMA_BIND: "true"}, ["dev-0"], ""),
        # generic ladder: slots, exclusive, compute units, percentage, cores clamp
        ([Dev("dev-0", count=1, used=1)], req(1, 64, 0, 50), {}, [], "1/1 CardTimeSlicingExhausted"),
        ([Dev("dev-0", used=1)], req(1, 64, 0, 100), {}, [], "1/1 ExclusiveDeviceAllocateConflict"),
        ([Dev("dev-0", used=1, usedcores=100)], req(1, 64, 0, 0), {}, [], "1/1 CardComputeUnitsExhausted"),
        ([Dev("dev-0", totalmem=1280)], req(1, 512, 0, 120), {}, ["dev-0"], ""),
        ([Dev("dev-0", totalmem=1280, usedmem=1)], req(1, 0, 100, 0), {}, [], "1/1 CardInsufficientMemory"),
        ([Dev("dev-0"), Dev("dev-1", index=1)], req(3, 64, 0, 20), {}, [],
         "2/2 AllocatedCardsInsufficientRequest"),
        ([Dev("dev-0")], req(1, 64, 0, -5), {}, ["dev-0"], ""),  # negative cores pass
    ],
    ids=readable,
)
def test_fit(
    devs: list[Dev], request_: ContainerDeviceRequest, annos: dict[str, str], ids: list[str], reason: str
) -> None:
    ok, chosen, got_reason = run_fit(devs, request_, annos)
    assert (ok, got_reason) == (not reason, reason)
    assert [d.uuid for d in chosen] == ids


def test_fit_entry_resolves_percentage_and_clamps_cores() -> None:
    ok, chosen, _ = run_fit([Dev("dev-0", totalmem=32768, index=2)], req(1, 0, 100, 150))
    assert ok and chosen == [ContainerDevice("dev-0", CW, 32768, 100, 2)]
    u = DeviceUsage(0, 0, 0)
    ILU.add_usage(DeviceInfo(id="dev-0"), u, chosen[0], container_index=0, device_index=0, migs=[])
    assert u == DeviceUsage(1, 32768, 100)


# --------------------------------------------------------------------------------------------
# Annotations (TestPatchAnnotations), lock (TestDevices_LockNode), admission (Test_MutateAdmission)


def test_patch_annotations() -> None:
    entries = [[ContainerDevice("k8s-gpu-iluvatar-0", CW, 0, 0, 0)]]
    assert ILU.patch_annotations(entries, [], node="n", now=1) == {
        "hami.io/MR-V100-devices-to-allocate": "k8s-gpu-iluvatar-0,MR-V100,0,0:;",
        "hami.io/MR-V100-devices-allocated": "k8s-gpu-iluvatar-0,MR-V100,0,0:;",
    }
    assert ILU.patch_annotations([], [], node="n", now=1) == {}


@pytest.mark.parametrize(
    ("p", "locks"),
    [
        (pod(containers=[]), False),
        (pod(containers=[container(requests={})]), False),
        (pod(containers=[container(requests={COUNT: "1"})]), True),
        (pod(containers=[container(limits={"iluvatar.ai/BI-V100-vgpu": "2"})]), True),
        (pod(init_containers=[limits(count="1")], containers=[container()]), False),
        (pod(containers=[limits(count="0")]), False),
    ],
    ids=readable,
)
def test_lock_only_for_regular_containers(p: dict[str, Any], locks: bool) -> None:
    assert _locking_request(p, VENDORS) is locks


@pytest.mark.parametrize(("n", "text"), [(0, "0"), (100, "100"), (200, "200"), (1000, "1k"), (1500, "1500"),
                                         (20000, "20k"), (3000000, "3M")])
def test_decimal_si(n: int, text: str) -> None:
    assert decimal_si(n) == text


ENV = {"name": "SOL_CONTINER_NAME", "value": "c"}


@pytest.mark.parametrize(
    ("ctr", "has", "after"),
    [
        # HAMi's vector: two devices ⇒ cores become 2 × 100 (the request's 1 is overwritten)
        (limits(count="2", cores="1"), True,
         {"resources": {"limits": {COUNT: "2", CORES: "200"}}, "env": [ENV]}),
        (limits(count="1", cores="30"), True,
         {"resources": {"limits": {COUNT: "1", CORES: "30"}}, "env": [ENV]}),
        (limits(count="10"), True, {"resources": {"limits": {COUNT: "10", CORES: "1k"}}, "env": [ENV]}),
        # the env var is added once, and only to a named container
        ({**limits(count="1"), "env": [{"name": "SOL_CONTINER_NAME", "value": "x"}]}, True,
         {"resources": {"limits": {COUNT: "1"}}, "env": [{"name": "SOL_CONTINER_NAME", "value": "x"}]}),
        ({**limits(count="1"), "env": [{"name": "A", "value": "1"}]}, True,
         {"resources": {"limits": {COUNT: "1"}}, "env": [{"name": "A", "value": "1"}, ENV]}),
        ({"name": "", "resources": {"limits": {COUNT: "1"}}}, True, {"resources": {"limits": {COUNT: "1"}}}),
        # MutateAdmission reads limits only
        (container(requests={COUNT: "2"}), False, {"resources": {"requests": {COUNT: "2"}}}),
        (limits(mem="4"), False, {"resources": {"limits": {MEM: "4"}}}),
    ],
    ids=readable,
)
def test_mutate(ctr: dict[str, Any], has: bool, after: dict[str, Any]) -> None:
    assert ILU.mutate(ctr, pod()) is has
    assert {k: v for k, v in ctr.items() if k != "name"} == after


def test_webhook_patch_for_an_iluvatar_pod() -> None:
    p = pod(containers=[container("app", limits={"iluvatar.ai/BI-V150-vgpu": "2"})])
    response = review(p, VENDORS)
    assert response.allowed
    ops = patch_ops(response)
    assert ops[("add", "/spec/containers/0/resources/limits/iluvatar.ai~1BI-V150.vCore")] == "200"
    assert ops[("add", "/spec/containers/0/env")] == [{"name": "SOL_CONTINER_NAME", "value": "app"}]
    assert ops[("add", "/spec/schedulerName")] == "hami-scheduler" or ops.get(
        ("replace", "/spec/schedulerName")) == "hami-scheduler"
    # Without --enable-iluvatar the webhook does not know the resource.
    assert review(p, build(CHART)).patch == []
    denied = review(privileged(limits(count="1")), VENDORS)
    assert not denied.allowed and denied.message == "container c is privileged"


# --------------------------------------------------------------------------------------------
# In the scheduler: registration, decision, metrics, device plugin


def chip_devices(cw: str = "BI-V150", n: int = 2, devmem: int = 32768) -> str:
    return "".join(f"ILU-{cw}-{i},4,{devmem},100,{cw},0,true,{i},hami-core:" for i in range(n))


async def test_registration_reads_chip_nodes_and_stamps_each_chips_handshake() -> None:
    async with registration(VENDORS, NOW) as reg:
        reg.add(
            ilu_node(chip_devices(), name="ilu-1", cw="BI-V150"),
            ilu_node("x,4,1024:", name="ilu-broken", cw="BI-V150"),  # a broken annotation ...
            ilu_node(chip_devices("MR-V50", 1), name="ilu-2", cw="MR-V50"))
        report = await reg.run()
        view = reg.state.ledger.view("ilu-1")
        assert view is not None and [d.id for d in view.devices] == ["ILU-BI-V150-0", "ILU-BI-V150-1"]
        assert {d.device_vendor for d in view.devices} == {"BI-V150"}
        view2 = reg.state.ledger.view("ilu-2")  # ... never affects another node
        assert view2 is not None and [d.id for d in view2.devices] == ["ILU-MR-V50-0"]
        assert reg.state.ledger.view("ilu-broken") is None
        assert report.errors == {"ilu-broken": "unexpected field count 3 in node annotation"}
        annotations = reg.node_annotations("ilu-1")
        for cw in CHIPS:
            assert annotations[iluvatar.handshake_key(cw)] == "Requesting_2026-11-29 21:03:30"


async def test_unhealthy_chip_loses_its_devices_but_keeps_its_handshake() -> None:
    """HAMi's Iluvatar NodeCleanUp does nothing: the devices go, the annotation stays."""
    gpus = '[{"id":"GPU-0","count":10,"devmem":8000,"devcore":100,"type":"NVIDIA-A100","health":true}]'
    obj = ilu_node(chip_devices(), name="mixed", cw="BI-V150", **{keys.NODE_NVIDIA_REGISTER: gpus})
    obj["status"]["allocatable"]["nvidia.com/gpu"] = "10"
    async with registration(VENDORS, NOW) as reg:
        reg.add(obj)
        await reg.run()
        view = reg.state.ledger.view("mixed")
        assert view is not None
        assert [d.id for d in view.devices] == ["GPU-0", "ILU-BI-V150-0", "ILU-BI-V150-1"]
        reg.cluster.patch("nodes", "mixed", {"status": {"allocatable": {"iluvatar.ai/BI-V150-vgpu": "0"}}},
                      subresource="status")
        reg.refresh("mixed")
        reg.clock[0] = NOW + timedelta(seconds=61)
        report = await reg.run()
        assert report.cleaned == ["mixed"]
        view = reg.state.ledger.view("mixed")
        assert view is not None and [d.id for d in view.devices] == ["GPU-0"]
        annotations = reg.node_annotations("mixed")
        assert annotations[iluvatar.handshake_key("BI-V150")] == "Requesting_2026-11-29 21:03:30"


BI = "iluvatar.ai/BI-V150-vgpu"


def ilu_pod(name: str, n: str = "1", mem: str | None = None, cores: str | None = None) -> dict[str, Any]:
    lim = {BI: n}
    if mem is not None:
        lim["iluvatar.ai/BI-V150.vMem"] = mem
    if cores is not None:
        lim["iluvatar.ai/BI-V150.vCore"] = cores
    return pod(name, uid=f"uid-{name}", containers=[container(limits=lim)], status={"phase": "Pending"})


def ilu_state() -> SchedulerState:
    state = SchedulerState(VENDORS)
    mixed = [*VENDORS["MR-V100"].node_devices(ilu_node(chip_devices("MR-V100", 1), cw="MR-V100")),
             *VENDORS["BI-V150"].node_devices(ilu_node(chip_devices(), cw="BI-V150"))]
    state.set_node_devices("ilu-1", mixed)
    return state


def test_decision_writes_the_chip_annotations_in_256_mib_units() -> None:
    state = ilu_state()
    p = ilu_pod("p", mem="16", cores="30")
    d = decide(p, ["ilu-1"], state, default_node_policy="binpack", default_gpu_policy="spread",
               now=1700000000)
    assert isinstance(d, Chosen)
    assert d.annotations == {
        keys.VGPU_NODE: "ilu-1",
        keys.VGPU_TIME: "1700000000",
        "hami.io/BI-V150-devices-to-allocate": "ILU-BI-V150-1,BI-V150,4096,30:;",
        "hami.io/BI-V150-devices-allocated": "ILU-BI-V150-1,BI-V150,4096,30:;",
    }
    state.reserve(p, d)
    assert state.quota.used("default", "iluvatar.ai/BI-V150.vMem") == 4096
    # Two whole devices (no memory = 100 %) no longer fit: one of them is partly used.
    whole = decide(ilu_pod("q", n="2"), ["ilu-1"], state, default_node_policy="binpack",
                   default_gpu_policy="spread", now=1700000001)
    assert whole == NoFit({"ilu-1": "1/2 AllocatedCardsInsufficientRequest, 1/2 CardInsufficientMemory"})
    # Three BI-V150 on a node with two: NodeInsufficientDevice (the MR-V100 does not count).
    three = decide(ilu_pod("r", n="3"), ["ilu-1"], state, default_node_policy="binpack",
                   default_gpu_policy="spread", now=1700000002)
    assert three == NoFit({"ilu-1": "NodeInsufficientDevice"})


def test_metrics_list_chip_devices() -> None:
    state = ilu_state()
    p = ilu_pod("p", mem="4", cores="30")
    d = decide(p, ["ilu-1"], state, default_node_policy="binpack", default_gpu_policy="spread", now=1)
    assert isinstance(d, Chosen)
    state.reserve(p, d)
    text = metrics_text(state)
    assert (
        'hami_gpu_memory_allocated_bytes{device_cores="100",device_index="1",device_type="BI-V150",'
        'device_uuid="ILU-BI-V150-1",node="ilu-1",zone="vGPU"} 1.073741824e+09'
    ) in text
    limit = 'hami_gpu_memory_limit_bytes{device_index="0",device_type="MR-V100",device_uuid="ILU-MR-V100-0"'
    assert limit in text


async def test_simulated_device_plugin_consumes_chip_allocations() -> None:
    annotations = {
        "hami.io/BI-V150-devices-to-allocate": ";ILU-0,BI-V150,1024,30:;",
        "hami.io/BI-V150-devices-allocated": ";ILU-0,BI-V150,1024,30:;",
        keys.BIND_PHASE: "allocating",
    }
    ctrs = [container("a"), container("b", limits={BI: "1"})]
    admitted = await admit_bound_pod(VENDORS, pod("p", annotations=annotations, containers=ctrs))
    assert admitted.phase == "Running"
    after = admitted.annotations
    assert after["hami.io/BI-V150-devices-to-allocate"] == ";;" and after[keys.BIND_PHASE] == "success"
    assert keys.NODE_LOCK not in admitted.node_annotations


def test_resource_quota_limits_are_in_256_mib_units() -> None:
    """The quota names the memory resource in the pod's units; HAMi scales its limit by 256 too."""
    quota = QuotaManager.for_vendors(VENDORS)
    quota.upsert_quota({"metadata": {"namespace": "default", "name": "q"},
                        "spec": {"hard": {"limits.iluvatar.ai/BI-V150.vMem": "16"}}})
    sixteen = pod_requests(ilu_pod("a", mem="16"), VENDORS)
    seventeen = pod_requests(ilu_pod("b", mem="17"), VENDORS)
    assert quota.admission_fits("default", sixteen, 0) is True
    assert quota.admission_fits("default", seventeen, 0) is False
    assert quota.fits("default", "BI-V150", 16 * 256, 0)
    assert not quota.fits("default", "BI-V150", 16 * 256 + 1, 0)
