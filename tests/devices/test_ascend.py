"""Ascend vNPU (§2.2, §3.3, §3.4, §4.4, §5.3, §7): the vectors of HAMi v2.10.0's
pkg/device/ascend/device_test.go and device_910c_pairing_test.go on the vendor itself —
configuration, requests, inventory, health, fit, annotations, score, admission. The vendor
inside the scheduler (registration, decisions, webhook, device plugin, simulate) is in
test_ascend_scheduler.py."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC
from typing import Any

import pytest

from tests.builders import container, node, pod
from tests.devices import vendorkit
from tests.devices.vendorkit import NOW, fit_checked, health_flags, readable, usages
from vgpu_scheduler.config import DeviceConfig
from vgpu_scheduler.configfile import DeviceConfigError, default_device_config, parse_device_config
from vgpu_scheduler.devices.ascend import topology
from vgpu_scheduler.devices.ascend.config import Template, VnpuConfig, parse_vnpus
from vgpu_scheduler.devices.ascend.inventory import AscendDevice
from vgpu_scheduler.devices.ascend.vendor import AscendVendor, f32
from vgpu_scheduler.devices.protocol import (
    MutationError,
    ResourceNames,
    VendorConfigError,
    VendorFlags,
    Vendors,
)
from vgpu_scheduler.devices.registry import build
from vgpu_scheduler.engine.fit import pod_fit_context
from vgpu_scheduler.model import ContainerDevice, ContainerDeviceRequest, DeviceUsage
from vgpu_scheduler.wire import keys
from vgpu_scheduler.wire.inventory import InventoryError

CHART = default_device_config()
ENABLED = VendorFlags(enable_ascend=True)
VENDORS = build(CHART, ENABLED)
CHIPS = [v for v in VENDORS if isinstance(v, AscendVendor)]

A910 = (
    Template("vir02", 2184, 2),
    Template("vir04", 4369, 4),
    Template("vir08", 8738, 8),
    Template("vir16", 17476, 16),
)


def _readable(value: object) -> str | None:
    """Case ids for the tables below: a vendor by its key, other objects as `vendorkit.readable`."""
    return value.key if isinstance(value, AscendVendor) else readable(value)


def chip(cw: str = "Ascend910A", **kw: Any) -> AscendVendor:
    """A vendor for one chip; names follow HAMi's tests (huawei.com/<cw>, -memory, -core)."""
    hami_core = kw.pop("hami_vnpu_core", False)
    fields: dict[str, Any] = {
        "resource_name": f"huawei.com/{cw}",
        "resource_memory_name": f"huawei.com/{cw}-memory",
        "memory_allocatable": 32768,
        "memory_capacity": 32768,
        "templates": A910,
    }
    fields.update(kw)
    return AscendVendor(VnpuConfig(cw, **fields), hami_vnpu_core=hami_core)


A = chip()
B3 = chip(
    "Ascend910B3",
    resource_core_name="huawei.com/Ascend910B3-core",
    templates=(Template("vir08", 8738, 8), Template("vir16", 17476, 16)),
)


# --------------------------------------------------------------------------------------------
# Configuration (Test_InitDevices) and registration


def test_chart_section_registers_one_vendor_per_chip_only_with_enable_ascend() -> None:
    ascend = tuple(k for k in VENDORS.keys if k.startswith("Ascend"))
    assert VENDORS.keys[-len(ascend):] == ascend  # after every always-registered vendor
    assert ascend == (
        "Ascend910A",
        "Ascend910B2",
        "Ascend910B3",
        "Ascend910B4-1",
        "Ascend910B4",
        "Ascend310P",
        "Ascend910C",
    )
    assert "Ascend910A" not in build(CHART).keys  # the gate (HAMi's enableAscend)
    a = VENDORS["Ascend910A"]
    assert a.names == ResourceNames(
        "huawei.com/Ascend910A", "huawei.com/Ascend910A-memory", "huawei.com/Ascend910A-core", 1
    )
    assert a.managed_resources == {
        "huawei.com/Ascend910A",
        "huawei.com/Ascend910A-memory",
        "huawei.com/Ascend910A-core",
    }
    assert (a.allocation_keys, a.handshake_key, a.cleanup_key, a.lock_key, a.inventory_keys) == (
        ("hami.io/Ascend910A-devices-to-allocate", "hami.io/Ascend910A-devices-allocated"),
        "hami.io/node-handshake-Ascend910A",
        "hami.io/node-handshake-Ascend910A",
        keys.NODE_LOCK,
        ("hami.io/node-register-Ascend910A",),
    )
    c = VENDORS["Ascend910C"]
    assert isinstance(c, AscendVendor) and c.config.super_pod and c.names.memory_factor == 0
    p310 = VENDORS["Ascend310P"]
    assert isinstance(p310, AscendVendor)
    assert (
        p310.config.memory_allocatable,
        p310.config.memory_capacity,
        p310.config.ai_core,
        p310.config.ai_cpu,
    ) == (21527, 24576, 8, 7)
    assert [t.name for t in p310.config.templates] == ["vir01", "vir02", "vir04"]
    # Only the 910 family scores nodes (ScoreNode's Ascend910 prefix).
    assert [v.key for v in CHIPS if v.scores_nodes] == [
        "Ascend910A",
        "Ascend910B2",
        "Ascend910B3",
        "Ascend910B4-1",
        "Ascend910B4",
        "Ascend910C",
    ]


def test_missing_section_registers_no_chip() -> None:
    assert not [k for k in build(DeviceConfig(), ENABLED).keys if k.startswith("Ascend")]


def test_section_values_and_template_order() -> None:
    config = parse_device_config(
        "vnpus:\n"
        "  hamiVnpuCore: true\n"
        "  configs:\n"
        "  - chipName: X\n    commonWord: AscendX\n    resourceName: r/x\n    memoryFactor: 4\n"
        "    memoryAllocatable: 100\n    memoryCapacity: 200\n    aiCore: 3\n    aiCPU: 2\n"
        "    runtimeClassName: ascend\n    overwriteEnv: true\n    superPod: true\n"
        "    templates:\n"
        "    - {name: big, memory: 50, aiCore: 2, aiCPU: 1}\n"
        "    - {name: small, memory: 10}\n"
    )
    (x,) = [v for v in build(config, ENABLED) if isinstance(v, AscendVendor)]
    assert x.hami_vnpu_core and x.names == ResourceNames("r/x", "", "", 4)
    assert x.config == VnpuConfig(
        "AscendX",
        "X",
        "r/x",
        "",
        "",
        100,
        200,
        4,
        3,
        2,
        "ascend",
        True,
        True,
        (Template("small", 10), Template("big", 50, 2, 1)),  # sorted by memory (InitDevices)
    )


def test_repeated_common_word_is_one_vendor_with_the_last_settings() -> None:
    """HAMi keys its devices map by commonWord: the later entry replaces the earlier one."""
    config = parse_device_config(
        "vnpus:\n  configs:\n"
        "  - {commonWord: Ascend910B4, resourceName: first, memoryAllocatable: 32768}\n"
        "  - {commonWord: Ascend310P, resourceName: other}\n"
        "  - {commonWord: Ascend910B4, resourceName: second, memoryAllocatable: 65536}\n"
    )
    vendors = build(config, ENABLED)
    assert [k for k in vendors.keys if k.startswith("Ascend")] == ["Ascend910B4", "Ascend310P"]
    assert vendors["Ascend910B4"].names.count == "second"


@pytest.mark.parametrize(
    ("yaml", "key"),
    [
        ("vnpus: [1]\n", "vnpus"),
        ("vnpus:\n  hamiVnpuCore: yes please\n", "vnpus.hamiVnpuCore"),
        ("vnpus:\n  configs: {a: 1}\n", "vnpus.configs"),
        ("vnpus:\n  configs:\n  - commonWord: 5\n", "vnpus.configs[0].commonWord"),
        (
            "vnpus:\n  configs:\n  - {commonWord: A}\n  - {memoryAllocatable: lots}\n",
            "vnpus.configs[1].memoryAllocatable",
        ),
        ("vnpus:\n  configs:\n  - {aiCore: 3000000000}\n", "vnpus.configs[0].aiCore"),
        (
            "vnpus:\n  configs:\n  - {memoryCapacity: 10000000000000000000}\n",
            "vnpus.configs[0].memoryCapacity",
        ),
        ("vnpus:\n  configs:\n  - {superPod: 1}\n", "vnpus.configs[0].superPod"),
        (
            "vnpus:\n  configs:\n  - templates: [{name: t, memory: 1.5}]\n",
            "vnpus.configs[0].templates[0].memory",
        ),
    ],
    ids=_readable,
)
def test_bad_section_is_a_config_error(yaml: str, key: str) -> None:
    """The file parses (its vendors are checked without the gate); the scheduler's build with
    --enable-ascend then stops with the key (server/main.py reports it)."""
    with pytest.raises((DeviceConfigError, VendorConfigError)) as err:
        build(parse_device_config(yaml, "f.yaml"), ENABLED)
    assert isinstance(err.value, DeviceConfigError | VendorConfigError) and err.value.key == key


def test_a_bad_section_is_ignored_without_enable_ascend() -> None:
    """Without the flag HAMi never reads the configs (InitDevices returns at once)."""
    keys = build(parse_device_config("vnpus:\n  configs: 5\n"), VendorFlags()).keys
    assert not [k for k in keys if k.startswith("Ascend")]


def test_parse_vnpus_without_section() -> None:
    assert parse_vnpus(None).configs == ()


# --------------------------------------------------------------------------------------------
# Memory templates (trimMemory): every boundary of every chart chip


def _boundaries() -> list[tuple[str, int, tuple[int, str]]]:
    out = []
    for v in CHIPS:
        cfg = v.config
        out.append((cfg.common_word, 0, (cfg.templates[0].memory, cfg.templates[0].name)))
        for i, t in enumerate(cfg.templates):
            out.append((cfg.common_word, t.memory, (t.memory, t.name)))
            above = cfg.templates[i + 1] if i + 1 < len(cfg.templates) else None
            out.append(
                (
                    cfg.common_word,
                    t.memory + 1,
                    (above.memory, above.name) if above else (cfg.memory_allocatable, ""),
                )
            )
        out.append((cfg.common_word, cfg.memory_capacity, (cfg.memory_allocatable, "")))
        out.append((cfg.common_word, cfg.memory_capacity + 1, (0, "")))
    return out


@pytest.mark.parametrize(("cw", "memory", "expected"), _boundaries(), ids=_readable)
def test_trim_memory_takes_the_smallest_template_that_holds_the_request(
    cw: str, memory: int, expected: tuple[int, str]
) -> None:
    vendor = VENDORS[cw]
    assert isinstance(vendor, AscendVendor)
    assert vendor.config.trim_memory(memory) == expected


def test_trim_memory_310p_between_last_template_and_capacity() -> None:
    """310P: allocatable (21527) is below capacity (24576): a request in between gets 21527."""
    p310 = VENDORS["Ascend310P"]
    assert isinstance(p310, AscendVendor)
    assert p310.config.trim_memory(12289) == (21527, "")
    assert p310.config.trim_memory(24576) == (21527, "")
    assert p310.config.trim_memory(24577) == (0, "")


# --------------------------------------------------------------------------------------------
# Requests (Test_GenerateResourceRequests, _VNPUCoreMode, Factor, _OutOfRangeValues, _MemoryFactorOverflow)


def areq(nums: int, mem: int, pct: int, cores: int, cw: str = "Ascend910A") -> ContainerDeviceRequest:
    return ContainerDeviceRequest(nums, cw, mem, pct, cores)


def npu(cw: str = "Ascend910A", *, requests: bool = False, **kw: str) -> dict[str, Any]:
    """A container asking `cw` (count=, mem=, core= in limits; also in requests with requests=True)."""
    suffix = {"count": "", "mem": "-memory", "core": "-core"}
    values = {f"huawei.com/{cw}{suffix[k]}": v for k, v in kw.items()}
    return container(limits=values, requests=dict(values) if requests else None)


@pytest.mark.parametrize(
    ("vendor", "ctr", "expected"),
    [
        (A, container(limits={}, requests={}), None),
        (A, npu(count="2", mem="8738", requests=True), areq(2, 8738, 0, 0)),
        (A, npu(count="2", requests=True), areq(2, 0, 100, 0)),
        (B3, npu("Ascend910B3", count="1", core="10", mem="15360"), areq(1, 15360, 0, 10, "Ascend910B3")),
        # count only in requests: looked up there (limits first, then requests).
        (A, container(requests={"huawei.com/Ascend910A": "1"}), areq(1, 0, 100, 0)),
        # out of range (all drop the request)
        (B3, npu("Ascend910B3", count="1", core="10", mem="16Gi"), None),
        (B3, npu("Ascend910B3", count="1", mem="16Gi"), None),
        (B3, npu("Ascend910B3", count="1", mem="-1m"), None),  # negative fraction: sign first
        (B3, npu("Ascend910B3", count="1", mem="-100"), None),
        (B3, npu("Ascend910B3", count="2200000000"), None),
        (B3, npu("Ascend910B3", count="1", core="-1"), None),
        (B3, npu("Ascend910B3", count="1", core="2200000000"), None),
        (A, npu(count="0"), None),
        (A, npu(count="0.5"), None),
        # a positive fraction of memory is unreadable (AsInt64): the whole device instead
        (A, npu(count="1", mem="0.5"), areq(1, 0, 100, 0)),
        # cores are read with Value(): rounded up
        (B3, npu("Ascend910B3", count="1", core="1500m"), areq(1, 0, 100, 2, "Ascend910B3")),
        # no core resource name configured: cores are never read
        (A, container(limits={"huawei.com/Ascend910A": "1", "": "5"}), areq(1, 0, 100, 0)),
    ],
    ids=_readable,
)
def test_requests(vendor: AscendVendor, ctr: dict[str, Any], expected: ContainerDeviceRequest | None) -> None:
    assert vendor.request(ctr) == expected


@pytest.mark.parametrize(("factor", "memreq"), [(10, 1280), (100, 12800), (0, 128), (1, 128)], ids=_readable)
def test_memory_factor(factor: int, memreq: int) -> None:
    vendor = chip(memory_factor=factor)
    assert vendor.request(npu(count="1", mem="128", requests=True)) == areq(1, memreq, 0, 0)


@pytest.mark.parametrize(
    "vendor",
    [
        chip("Ascend910B3", resource_core_name="huawei.com/Ascend910B3-core", memory_factor=10, templates=()),
        chip(memory_factor=10, templates=()),
    ],
    ids=["soft-partitioning path", "trim path"],
)
def test_memory_factor_overflow_drops_the_request(vendor: AscendVendor) -> None:
    cw = vendor.key
    core = {"core": "10"} if vendor.names.cores else {}
    assert vendor.request(npu(cw, count="1", mem="300000000", **core)) is None


# --------------------------------------------------------------------------------------------
# Inventory (Test_GetNodeDevices) and health (Test_CheckHealth)

REGISTER_A = "hami.io/node-register-Ascend910A"


def npu_node(
    register: str | None,
    *,
    name: str = "n",
    allocatable: str | None = None,
    cw: str = "Ascend910A",
    **annos: str,
) -> Any:
    annotations = dict(annos)
    if register is not None:
        annotations[f"hami.io/node-register-{cw}"] = register
    return node(
        name, annotations=annotations, allocatable={f"huawei.com/{cw}": allocatable} if allocatable else None
    )


def test_inventory_json() -> None:
    head = '[{"ID":"GPU-0","Count":4,"Devmem":8738,"Devcore":8,'
    register = head + '"Type":"huawei.com/Ascend910","Numa":0,"Health":true}]'
    (dev,) = A.node_devices(npu_node(register))
    assert dev == AscendDevice(
        node_name="n",
        id="GPU-0",
        count=4,
        devmem=8738,
        devcore=8,
        type="huawei.com/Ascend910",
        health=True,
        device_vendor="Ascend910A",
    )


def test_inventory_keeps_custominfo_and_the_node_mode() -> None:
    register = json.dumps(
        [
            {
                "id": "npu-0",
                "count": 1,
                "devmem": 65536,
                "devcore": 20,
                "type": "Ascend910B3",
                "health": True,
                "custominfo": {"NetworkID": 3, "extra": "x"},
            },
            {"id": "npu-1", "CustomInfo": {"NetworkID": 1.0}},
            {"id": "npu-2", "customInfo": None},
        ]
    )
    devs = B3.node_devices(npu_node(register, cw="Ascend910B3", **{"hami-vnpu-core": "true"}))
    assert [d.custom_info for d in devs if isinstance(d, AscendDevice)] == [
        {"NetworkID": 3, "extra": "x"},
        {"NetworkID": 1.0},
        None,
    ]
    assert {d.node_hami_core for d in devs if isinstance(d, AscendDevice)} == {True}


@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, None), ("true", True), ("false", False), ("True", False), ("", False)],
    ids=_readable,
)
def test_node_hami_core_annotation(value: str | None, expected: bool | None) -> None:
    annos = {} if value is None else {"hami-vnpu-core": value}
    (dev,) = A.node_devices(npu_node('[{"id":"a"}]', **annos))
    assert isinstance(dev, AscendDevice) and dev.node_hami_core is expected


@pytest.mark.parametrize(
    ("register", "error"),
    [
        (None, "annos not found hami.io/node-register-Ascend910A"),
        ("[]", "no device found on node"),
        ("null", "no device found on node"),
        ("", "invalid node annotation JSON"),
        ("0,1,2,3,Ascend,0,true:", "invalid node annotation JSON"),  # JSON only
        ('[{"id":"a","count":"x"}]', "field 'count' must be an int32"),
        ('[{"id":"a","custominfo":[1]}]', "field 'custominfo' must be an object, got array"),
    ],
    ids=_readable,
)
def test_inventory_errors(register: str | None, error: str) -> None:
    with pytest.raises(InventoryError, match=error):
        A.node_devices(npu_node(register))


@pytest.mark.parametrize(
    ("handshake", "allocatable", "healthy", "need_update", "write"),
    [
        ("Requesting_2128-12-02 00:00:00", None, True, False, False),
        ("Unknown", None, True, True, True),
        ("Requesting_2024-01-02 00:00:00", None, False, False, False),
        ("Requesting_2024-01-02 00:00:00", "8", True, False, False),
        (None, None, True, True, True),
    ],
    ids=_readable,
)
def test_health(
    handshake: str | None, allocatable: str | None, healthy: bool, need_update: bool, write: bool
) -> None:
    annos = {} if handshake is None else {"hami.io/node-handshake-Ascend910A": handshake}
    health = A.check_health(npu_node("[]", allocatable=allocatable, **annos), NOW, UTC)
    assert health_flags(health) == (healthy, need_update, write)


# --------------------------------------------------------------------------------------------
# Fit (TestDevices_Fit, for every chart chip; TestDevices_Fit_910C; the 910C pairing tests)


@dataclasses.dataclass
class Dev(vendorkit.Dev):
    network: Any = None  # NetworkID in custominfo ("" = custominfo without it)


def devices_of(devs: list[Dev], cw: str, node_mode: bool | None = None) -> list[AscendDevice]:
    def info(d: Dev) -> dict[str, Any] | None:
        if d.network is None:
            return None
        return {} if d.network == "" else {"NetworkID": d.network}

    return [
        AscendDevice(
            id=d.id,
            index=d.index,
            count=d.count,
            devmem=d.totalmem,
            devcore=d.totalcore,
            type=cw,
            health=d.health,
            device_vendor=cw,
            custom_info=info(d),
            node_hami_core=node_mode,
        )
        for d in devs
    ]


def run_fit(
    vendor: AscendVendor,
    devs: list[Dev],
    request: ContainerDeviceRequest,
    annos: dict[str, str] | None = None,
    node_mode: bool | None = None,
) -> tuple[bool, list[str], str]:
    result = fit_checked(vendor, request, devices_of(devs, vendor.key, node_mode), usages(devs), annos=annos)
    assert result.positions == [[d.id for d in devs].index(c.uuid) for c in result.devices]
    return result.ok, [d.uuid for d in result.devices], result.reason


HAMI_CORE = {"huawei.com/vnpu-mode": "hami-core"}
FIT_CASES = [
    ("fit success", [Dev("dev-0"), Dev("dev-1")], (1, 64, 0, 50), {}, None, True, ["dev-1"], ""),
    ("memory not enough", [Dev("dev-0")], (1, 512, 0, 50), {}, None, False, [], "1/1 CardInsufficientMemory"),
    (
        "core not enough",
        [Dev("dev-0", totalmem=1024, usedcores=100)],
        (1, 512, 0, 50),
        {},
        None,
        False,
        [],
        "1/1 CardInsufficientCore",
    ),
    (
        "use uuid mismatch",
        [Dev("dev-1", totalmem=1280)],
        (2, 512, 0, 50),
        {"use": "dev-0"},
        None,
        False,
        [],
        "1/1 CardUuidMismatch",
    ),
    (
        "no use uuid match",
        [Dev("dev-0", totalmem=1280)],
        (2, 512, 0, 50),
        {"no-use": "dev-0"},
        None,
        False,
        [],
        "1/1 CardUuidMismatch",
    ),
    (
        "card overused",
        [Dev("dev-0", totalmem=1280, used=100)],
        (1, 512, 0, 50),
        {},
        None,
        False,
        [],
        "1/1 CardTimeSlicingExhausted",
    ),
    (
        "core limit clamped to 100",
        [Dev("dev-0", totalmem=1280)],
        (1, 512, 0, 120),
        {},
        None,
        True,
        ["dev-0"],
        "",
    ),
    (
        "card exclusively",
        [Dev("dev-0", totalmem=1280, used=20)],
        (1, 512, 0, 100),
        {},
        None,
        False,
        [],
        "1/1 ExclusiveDeviceAllocateConflict",
    ),
    (
        "compute units exhausted",
        [Dev("dev-0", totalmem=1280, used=20, usedcores=100)],
        (1, 512, 0, 0),
        {},
        None,
        False,
        [],
        "1/1 CardComputeUnitsExhausted",
    ),
    (
        "allocated cards insufficient",
        [Dev("dev-0", totalmem=1280, used=20, usedcores=10)],
        (2, 512, 0, 20),
        {},
        None,
        False,
        [],
        "1/1 AllocatedCardsInsufficientRequest",
    ),
    (
        "memory percentage",
        [Dev("dev-0", totalmem=1280, used=20, usedcores=10)],
        (1, 0, 10, 20),
        {},
        None,
        True,
        ["dev-0"],
        "",
    ),
    (
        "schedule by NetworkID",
        [Dev("dev-0", network=0), Dev("dev-1", network=1), Dev("dev-2", network=1)],
        (2, 64, 0, 50),
        {},
        None,
        True,
        ["dev-2", "dev-1"],
        "",
    ),
    (
        "hami-core pod on legacy node",
        [Dev("dev-0", totalmem=32768)],
        (1, 15360, 0, 20),
        HAMI_CORE,
        None,
        False,
        [],
        "1/1 ModeNotFit",
    ),
    (
        "annotation-less pod on hami-core node",
        [Dev("dev-0", totalmem=32768)],
        (1, 8738, 0, 0),
        {},
        True,
        True,
        ["dev-0"],
        "",
    ),
    (
        "whole-card hami-core pod on legacy node",
        [Dev("dev-0", totalmem=32768)],
        (1, 32768, 0, 0),
        HAMI_CORE,
        None,
        False,
        [],
        "1/1 ModeNotFit",
    ),
    (
        "memory-less hami-core pod on legacy node",
        [Dev("dev-0", totalmem=32768)],
        (1, 0, 101, 0),
        HAMI_CORE,
        None,
        False,
        [],
        "1/1 ModeNotFit",
    ),
    (
        "whole-card hami-core pod on hami-core node",
        [Dev("dev-0", totalmem=32768)],
        (1, 32768, 0, 0),
        HAMI_CORE,
        True,
        True,
        ["dev-0"],
        "",
    ),
    (
        "whole-card legacy pod on hami-core node",
        [Dev("dev-0", totalmem=32768)],
        (1, 32768, 0, 0),
        {},
        True,
        True,
        ["dev-0"],
        "",
    ),
    (
        "mutex policy rejects used device",
        [Dev("dev-0", used=1)],
        (1, 64, 0, 50),
        {keys.GPU_SCHEDULER_POLICY: "mutex"},
        None,
        False,
        [],
        "1/1 ExclusiveDeviceAllocateConflict",
    ),
    (
        "card not health",
        [Dev("dev-0", totalmem=1280, health=False)],
        (1, 512, 0, 50),
        {},
        None,
        False,
        [],
        "1/1 CardNotHealth",
    ),
    (
        "partial allocation",
        [Dev("dev-0", totalmem=1280), Dev("dev-1", totalmem=1280, index=1)],
        (3, 512, 0, 20),
        {},
        None,
        False,
        [],
        "2/2 AllocatedCardsInsufficientRequest",
    ),
]


# The test config of device_test.go has no 910C: on a 910C chip a request above one NPU runs the
# module pairing instead (test_910c_pairs), so those vectors are left out for it.
FIT_PARAMS = [
    pytest.param(v.key, *case, id=f"{v.key}:{case[0]}")
    for v in CHIPS
    for case in FIT_CASES
    if not (v.key == "Ascend910C" and case[2][0] > 1)
]


@pytest.mark.parametrize(
    ("cw", "name", "devs", "request_", "annos", "node_mode", "ok", "ids", "reason"), FIT_PARAMS
)
def test_fit(
    cw: str,
    name: str,
    devs: list[Dev],
    request_: tuple[int, int, int, int],
    annos: dict[str, str],
    node_mode: bool | None,
    ok: bool,
    ids: list[str],
    reason: str,
) -> None:
    vendor = VENDORS[cw]
    assert isinstance(vendor, AscendVendor)
    annos = {
        (f"hami.io/use-{cw}-uuid" if k == "use" else f"hami.io/no-use-{cw}-uuid" if k == "no-use" else k): v
        for k, v in annos.items()
    }
    got = run_fit(vendor, devs, areq(*request_, cw=cw), annos, node_mode)
    assert got[0] == ok and got[2] == reason
    if ok:
        assert got[1] == ids


def test_fit_type_mismatch() -> None:
    assert run_fit(A, [Dev("dev-0")], areq(1, 512, 0, 50, cw="OtherType")) == (
        False,
        [],
        "1/1 CardTypeMismatch",
    )


@pytest.mark.parametrize(
    ("config", "node_mode", "reason"),
    [(False, None, "1/2 ModeNotFit"), (True, None, ""), (True, False, "1/2 ModeNotFit"), (False, True, "")],
    ids=["legacy cluster", "hami-core cluster", "node opts out", "node opts in"],
)
def test_node_annotation_overrides_hami_vnpu_core(config: bool, node_mode: bool | None, reason: str) -> None:
    vendor = chip("Ascend910B3", hami_vnpu_core=config)
    devs = [Dev("a", totalmem=32768), Dev("b", totalmem=32768)]
    assert run_fit(vendor, devs, areq(1, 1024, 0, 10, "Ascend910B3"), HAMI_CORE, node_mode)[2] == reason


def test_hami_core_counts_cores_against_100_not_the_ai_core_count() -> None:
    """Devcore is the chip's aiCore count (20 on 910B3); a hami-core pod's cores are percent."""
    devs = [Dev("a", totalmem=65536, totalcore=20)]
    request = areq(1, 1024, 0, 50, "Ascend910B3")
    hard = chip("Ascend910B3")
    assert run_fit(hard, devs, request)[2] == "1/1 CardInsufficientCore"
    soft = chip("Ascend910B3", hami_vnpu_core=True)
    assert run_fit(soft, devs, request, HAMI_CORE) == (True, ["a"], "")
    # ... and a card whose 100 % is taken is exhausted for a core-less hami-core pod.
    full = [Dev("a", totalmem=65536, totalcore=20, used=1, usedcores=100)]
    assert (
        run_fit(soft, full, areq(1, 1024, 0, 0, "Ascend910B3"), HAMI_CORE)[2]
        == "1/1 CardComputeUnitsExhausted"
    )


def test_fit_entries_carry_the_resolved_memory_and_cores() -> None:
    """Memory from the percentage of the device, cores clamped to 100, the device index."""
    devices = devices_of([Dev("dev-0", totalmem=1280, index=3)], "Ascend910A")
    ctx = pod_fit_context(pod(), vendors=Vendors([A]))
    result = A.fit(
        areq(1, 0, 10, 120),
        devices,
        [DeviceUsage(0, 200, 0)],
        [0],
        ctx=ctx,
        cordoned=frozenset(),
        allocated=(),
    )
    assert result.devices == [ContainerDevice("dev-0", "Ascend910A", 128, 100, 3)]


def test_add_resource_usage() -> None:
    usage = DeviceUsage(0, 2000, 15)
    entry = ContainerDevice("dev-0", "Ascend910A", 1024, 50)
    assert (
        A.add_usage(
            devices_of([Dev("dev-0")], "Ascend910A")[0],
            usage,
            entry,
            container_index=0,
            device_index=0,
            migs=[],
        )
        == entry
    )
    assert usage == DeviceUsage(1, 3024, 65)


B3_TOPO = chip("Ascend910B3")


@pytest.mark.parametrize(
    ("devs", "nums", "ok", "ids", "reason"),
    [
        # one NPU among several passing: the first met (walking from the end)
        ([Dev("a", network=0), Dev("b", network=1), Dev("c", network=1)], 1, True, ["c"], ""),
        # exactly as many as asked: taken as met
        ([Dev("a", network=0), Dev("b", network=1)], 2, True, ["b", "a"], ""),
        # the largest network first; equal networks in the order met
        (
            [Dev("a", network=2), Dev("b", network=0), Dev("c", network=1), Dev("d", network=0)],
            2,
            True,
            ["d", "b"],
            "",
        ),
        ([Dev("a", network=2), Dev("b", network=1), Dev("c", network=3)], 2, True, ["c", "b"], ""),
        # too few pass: every device was collected, none counted down
        (
            [Dev("a", network=0), Dev("b", network=0, health=False)],
            2,
            False,
            [],
            "1/2 AllocatedCardsInsufficientRequest, 1/2 CardNotHealth",
        ),
        # a device without NetworkID: no topology, plain Fit
        ([Dev("a", network=0), Dev("b"), Dev("c", network=0)], 2, True, ["c", "b"], ""),
        # a non-numeric NetworkID still turns topology on, but such a device is never taken
        ([Dev("a", network="x"), Dev("b", network=1), Dev("c", network="y")], 2, True, ["b"], ""),
    ],
    ids=_readable,
)
def test_network_topology(devs: list[Dev], nums: int, ok: bool, ids: list[str], reason: str) -> None:
    got = run_fit(B3_TOPO, devs, areq(nums, 64, 0, 0, "Ascend910B3"))
    assert got == (ok, ids if ok else [], reason)


def test_network_topology_only_for_the_910_family() -> None:
    devs = [Dev("a", network=1), Dev("b", network=0), Dev("c", network=0)]
    assert run_fit(chip("Ascend310P"), devs, areq(2, 64, 0, 0, "Ascend310P"))[1] == ["c", "b"]
    assert run_fit(B3_TOPO, devs, areq(2, 64, 0, 0, "Ascend910B3"))[1] == ["c", "b"]
    devs = [Dev("a", network=0), Dev("b", network=1), Dev("c", network=0)]
    assert run_fit(chip("Ascend310P"), devs, areq(2, 64, 0, 0, "Ascend310P"))[1] == ["c", "b"]
    assert run_fit(B3_TOPO, devs, areq(2, 64, 0, 0, "Ascend910B3"))[1] == ["c", "a"]


C = chip("Ascend910C", memory_allocatable=65536, memory_capacity=65536, templates=())


def pair_devs(*indices: int, network: Any = 0) -> list[Dev]:
    return [Dev(f"dev-{i}", count=1, totalmem=32000, totalcore=0, index=i, network=network) for i in indices]


@pytest.mark.parametrize(
    ("devs", "nums", "ok", "ids", "reason"),
    [
        # TestDevices_Fit_910C: three NPUs, module 0 is whole
        (
            [Dev("dev-0", network=0), Dev("dev-1", index=1, network=0), Dev("dev-2", index=2, network=0)],
            2,
            True,
            ["dev-1", "dev-0"],
            "",
        ),
        # TestAscend910C_FitPartialAllocationBug: only module 0 is whole
        (pair_devs(0, 1, 2, 4, 6), 4, False, [], "2/4 AllocatedCardsInsufficientRequest"),
        # TestAscend910C_FitExactCountBypassBug: two NPUs of two half modules
        (pair_devs(0, 2), 2, False, [], "0/2 AllocatedCardsInsufficientRequest"),
        # TestAscend910C_FitFullPairSucceeds
        (pair_devs(0, 1), 2, True, ["dev-1", "dev-0"], ""),
        # TestAscend910C_FitWithoutNetworkID_ValidatesPairing
        (pair_devs(0, 2, network=""), 2, False, [], "0/2 AllocatedCardsInsufficientRequest"),
        (pair_devs(0, 1, network=""), 2, True, ["dev-1", "dev-0"], ""),
        (pair_devs(0, 2, 4, 6, network=""), 4, False, [], "0/4 AllocatedCardsInsufficientRequest"),
        # two whole modules of four: the first met; an odd request can never be met
        (pair_devs(0, 1, 2, 3, 4, 5), 4, True, ["dev-5", "dev-4", "dev-3", "dev-2"], ""),
        (pair_devs(0, 1, 2, 3), 3, False, [], "4/3 AllocatedCardsInsufficientRequest"),
        # other reasons count too, over the request (not the device count)
        (
            [*pair_devs(0, 1, 2), Dev("dev-3", index=3, health=False)],
            4,
            False,
            [],
            "1/4 CardNotHealth, 2/4 AllocatedCardsInsufficientRequest",
        ),
        # one NPU: no pairing (the webhook rounds 1 up to 2 on a superPod)
        (pair_devs(0, 2), 1, True, ["dev-2"], ""),
    ],
    ids=_readable,
)
def test_910c_pairs(devs: list[Dev], nums: int, ok: bool, ids: list[str], reason: str) -> None:
    got = run_fit(C, devs, ContainerDeviceRequest(nums, "Ascend910C", 0, 0, 0))
    assert got == (ok, ids if ok else [], reason)


def test_best_by_module_without_whole_modules_is_empty() -> None:
    """TestComputeBestCombination910C_NoFullPairsReturnsEmpty."""
    candidates = [ContainerDevice(f"dev-{i}", "Ascend910C", 0, 0, i) for i in (0, 2, 4, 6)]
    assert topology.best_by_module(candidates, 4) == []


# --------------------------------------------------------------------------------------------
# PatchAnnotations (Test_PatchAnnotations, _VNPUCoreMode, _ZeroCore)


def test_patch_annotations() -> None:
    vendor = chip(memory_capacity=1024)
    entries = [[ContainerDevice("device-0", "Ascend", 8738, 1, 0)]]
    assert vendor.patch_annotations(entries, [], node="n", now=1700000000) == {
        "hami.io/Ascend910A-devices-to-allocate": "device-0,Ascend,8738,1:;",
        "hami.io/Ascend910A-devices-allocated": "device-0,Ascend,8738,1:;",
        "predicate-time": "1700000000",
        "huawei.com/Ascend910A": '[{"UUID":"device-0","temp":"vir08","memory":8738,"core":1}]',
    }
    assert vendor.patch_annotations([], [], node="n", now=1) == {}


def test_patch_annotations_hami_core_mode_has_no_template() -> None:
    vendor = chip("Ascend910B3", templates=())
    entries = [[ContainerDevice("ascend-uuid-1", "Ascend", 8192, 5, 0)]]
    out = vendor.patch_annotations(entries, [], node="n", now=1, pod={"metadata": {"annotations": HAMI_CORE}})
    assert out["huawei.com/Ascend910B3"] == '[{"UUID":"ascend-uuid-1","memory":8192,"core":5}]'


def test_patch_annotations_zero_core_is_omitted() -> None:
    entries = [[ContainerDevice("device-zero-core", "Ascend", 8738, 0, 0)]]
    out = A.patch_annotations(entries, [], node="n", now=1, pod={"metadata": {}})
    assert out["huawei.com/Ascend910A"] == '[{"UUID":"device-zero-core","temp":"vir08","memory":8738}]'


def test_patch_annotations_runtime_info_per_device_and_container() -> None:
    """Every device of every container, in order; memory above the templates has no template;
    containers without devices keep their place in the allocation lists only."""
    entries = [
        [],
        [ContainerDevice("a", "Ascend910A", 2184, 0, 0), ContainerDevice("b", "Ascend910A", 32768, 0, 1)],
        [ContainerDevice("c", "Ascend910A", 4000, 0, 2)],
    ]
    out = A.patch_annotations(entries, [], node="n", now=1)
    assert out["hami.io/Ascend910A-devices-allocated"] == (
        ";a,Ascend910A,2184,0:b,Ascend910A,32768,0:;c,Ascend910A,4000,0:;"
    )
    assert json.loads(out["huawei.com/Ascend910A"]) == [
        {"UUID": "a", "temp": "vir02", "memory": 2184},
        {"UUID": "b", "memory": 32768},
        {"UUID": "c", "temp": "vir04", "memory": 4000},
    ]
    assert A.patch_annotations([[]], [], node="n", now=1)["huawei.com/Ascend910A"] == "null"


# --------------------------------------------------------------------------------------------
# ScoreNode


def scored(vendor: AscendVendor, per_container: list[list[str]], devs: list[Dev]) -> float:
    entries = [[ContainerDevice(u, vendor.key, 0, 0) for u in ctr] for ctr in per_container]
    return vendor.score_node(
        entries, annotations={}, devices=devices_of(devs, vendor.key), previous=[], policy="binpack"
    )


NET = [
    Dev("a", network=0),
    Dev("b", network=1),
    Dev("c", network=1),
    Dev("d", network=1.9),
    Dev("x"),
    Dev("y", network=""),
    Dev("z", network="n"),
]


@pytest.mark.parametrize(
    ("per_container", "score"),
    [
        ([["b", "c"]], 10.0),
        ([["a", "b"]], 5.0),
        ([["a", "b"], ["c"]], 15.0),
        ([["b", "c", "d"]], 10.0),  # 1.9 truncates to network 1
        ([["a", "b", "c"]], f32(f32(f32(2.0) / f32(3.0)) * 10)),
        ([[], ["b"]], 10.0),
        ([["b", "x"]], 0.0),  # no custominfo: the whole score is 0
        ([["b"], ["y"]], 0.0),  # custominfo without NetworkID: 0 too
        ([["b"], ["z"]], 10.0),  # a non-numeric NetworkID is not counted
        ([["z"]], 0.0),
        ([["unknown"]], 0.0),
    ],
    ids=_readable,
)
def test_score_node(per_container: list[list[str]], score: float) -> None:
    assert scored(B3_TOPO, per_container, NET) == score


def test_score_node_is_zero_outside_the_910_family() -> None:
    p310 = chip("Ascend310P")
    assert not p310.scores_nodes
    assert scored(p310, [["b", "c"]], NET) == 0.0


# --------------------------------------------------------------------------------------------
# MutateAdmission (Test_MutateAdmission, _NilRequests, 910C, 910C_VNPUSplit, _VNPUCoreMode,
# _HardSplitCoreRejected)


def mutated(vendor: AscendVendor, ctr: dict[str, Any], p: dict[str, Any] | None = None) -> bool:
    return vendor.mutate(ctr, p if p is not None else pod())


def test_mutate_without_the_count_limit() -> None:
    ctr = container(limits={})
    assert not mutated(A, ctr) and ctr == container(limits={})
    # the count only in requests: not an Ascend container for the webhook (limits only)
    assert not mutated(A, container(requests={"huawei.com/Ascend910A": "1"}))


@pytest.mark.parametrize(
    ("ctr", "error"),
    [
        (npu(count="2", mem="8738"), "vNPU not supported for multiple devices"),
        (npu(count="2", mem="40000"), "huawei.com/Ascend910A-memory 40000 is invalid"),
        (npu(count="1", mem="40000"), "huawei.com/Ascend910A-memory 40000 is invalid"),
    ],
    ids=_readable,
)
def test_mutate_rejects(ctr: dict[str, Any], error: str) -> None:
    with pytest.raises(MutationError) as err:
        mutated(A, ctr)
    assert str(err.value) == error


@pytest.mark.parametrize(
    ("ctr", "memory"),
    [
        (npu(count="1", mem="20000", requests=True), "32768"),  # above the templates, below capacity
        (npu(count="1", mem="8738"), "8738"),
        (npu(count="1", mem="8739"), "17476"),
        (npu(count="1", mem="1"), "2184"),
        (npu(count="1"), "32768"),  # no memory: the whole card
        (npu(count="2"), "32768"),
        (npu(count="2", mem="32768"), "32768"),  # whole cards may be several
    ],
    ids=_readable,
)
def test_mutate_rounds_memory_up_to_a_template(ctr: dict[str, Any], memory: str) -> None:
    assert mutated(A, ctr)
    resources = ctr["resources"]
    assert resources["limits"]["huawei.com/Ascend910A-memory"] == memory
    assert resources["requests"]["huawei.com/Ascend910A-memory"] == memory  # requests created if absent


def c910(super_pod: bool = True) -> AscendVendor:
    return chip(
        "Ascend910C",
        memory_allocatable=65536,
        memory_capacity=65536,
        super_pod=super_pod,
        templates=(Template("vir05_1c_16g", 16384, 5, 1), Template("vir10_3c_32g", 32768, 10, 3)),
    )


@pytest.mark.parametrize(("count", "expected"), [("1", "2"), ("2", "2"), ("4", "4")], ids=_readable)
def test_mutate_910c_super_pod_rounds_one_up_to_a_module(count: str, expected: str) -> None:
    ctr = npu("Ascend910C", count=count, requests=True)
    assert mutated(c910(), ctr)
    assert ctr["resources"]["limits"]["huawei.com/Ascend910C"] == expected
    assert ctr["resources"]["requests"]["huawei.com/Ascend910C"] == expected
    only_limits = npu("Ascend910C", count=count)
    assert mutated(c910(), only_limits)
    assert only_limits["resources"]["requests"] == {"huawei.com/Ascend910C-memory": "65536"}


@pytest.mark.parametrize("count", ["3", "5"])
def test_mutate_910c_super_pod_rejects_odd_counts(count: str) -> None:
    with pytest.raises(MutationError) as err:
        mutated(c910(), npu("Ascend910C", count=count, requests=True))
    assert str(err.value) == f"Ascend910C device request must be 1 or 2*n, got {count}"


def test_mutate_910c_split_keeps_one_and_odd_counts() -> None:
    """Test_MutateAdmission910C_VNPUSplit: without superPod nothing is paired."""
    one = npu("Ascend910C", count="1", mem="16384")
    one["resources"]["requests"] = {"huawei.com/Ascend910C": "1"}
    assert mutated(c910(super_pod=False), one)
    assert one["resources"]["limits"] == {
        "huawei.com/Ascend910C": "1",
        "huawei.com/Ascend910C-memory": "16384",
    }
    three = npu("Ascend910C", count="3", requests=True)
    assert mutated(c910(super_pod=False), three)
    assert three["resources"]["limits"]["huawei.com/Ascend910C"] == "3"


B3_CORE = chip("Ascend910B3", resource_core_name="huawei.com/Ascend910B3-core", templates=())


def test_mutate_hami_core_keeps_the_raw_memory() -> None:
    ctr = npu("Ascend910B3", count="1", mem="15360", core="20", requests=True)
    assert mutated(B3_CORE, ctr, pod(annotations=HAMI_CORE))
    limits = ctr["resources"]["limits"]
    assert (limits["huawei.com/Ascend910B3-memory"], limits["huawei.com/Ascend910B3-core"]) == ("15360", "20")
    assert "lifecycle" not in ctr
    legacy = npu("Ascend910B3", count="1", mem="15360", requests=True)
    assert mutated(B3_CORE, legacy, pod(annotations={}))
    assert legacy["resources"]["limits"] == {
        "huawei.com/Ascend910B3": "1",
        "huawei.com/Ascend910B3-memory": "32768",
    }


def test_mutate_hami_core_several_devices_and_canonical_quantities() -> None:
    """hami-core: no template check, several devices of any size; written in canonical form."""
    ctr = npu("Ascend910B3", count="2", mem="8000")
    assert mutated(B3_CORE, ctr, pod(annotations=HAMI_CORE))
    assert ctr["resources"]["limits"]["huawei.com/Ascend910B3-memory"] == "8k"
    neg = npu("Ascend910B3", count="1", mem="-5")
    assert mutated(B3_CORE, neg, pod(annotations=HAMI_CORE))
    assert neg["resources"]["requests"]["huawei.com/Ascend910B3-memory"] == "-5"


@pytest.mark.parametrize(
    ("core", "hami_core", "rejected"),
    [
        ("10", False, True),
        ("25", False, True),
        ("0", False, False),
        (None, False, False),
        ("10", True, False),
        ("100m", False, True),
    ],
    ids=[
        "hard split with core",
        "hard split with core over physical",
        "hard split with core=0",
        "hard split without core",
        "hami-core soft split with core",
        "hard split with a fraction",
    ],
)
def test_mutate_hard_split_rejects_cores(core: str | None, hami_core: bool, rejected: bool) -> None:
    vendor = chip(
        "Ascend910B3",
        resource_core_name="huawei.com/Ascend910B3-core",
        templates=(Template("vir08", 8738, 8), Template("vir16", 17476, 16)),
    )
    kw = {"count": "1", "mem": "8738"} | ({"core": core} if core is not None else {})
    p = pod(annotations=HAMI_CORE if hami_core else None)
    if rejected:
        with pytest.raises(MutationError) as err:
            mutated(vendor, npu("Ascend910B3", requests=True, **kw), p)
        assert (
            str(err.value) == "huawei.com/Ascend910B3-core is only supported in hami-core (soft split) mode"
        )
    else:
        assert mutated(vendor, npu("Ascend910B3", requests=True, **kw), p)


def test_mutate_core_in_requests_only_is_rejected_too() -> None:
    ctr = npu("Ascend910B3", count="1")
    ctr["resources"]["requests"] = {"huawei.com/Ascend910B3-core": "5"}
    with pytest.raises(MutationError):
        mutated(B3_CORE, ctr)


@pytest.mark.parametrize(
    ("configured", "spec", "expected"),
    [("ascend", {}, "ascend"), ("ascend", {"runtimeClassName": "mine"}, "mine"), ("", {}, None)],
    ids=_readable,
)
def test_mutate_sets_the_runtime_class(configured: str, spec: dict[str, Any], expected: str | None) -> None:
    vendor = chip(runtime_class_name=configured)
    p = pod(spec=spec, containers=[])
    assert mutated(vendor, npu(count="1"), p)
    assert p["spec"].get("runtimeClassName") == expected
    untouched = pod(containers=[])
    assert not mutated(vendor, container(), untouched)
    assert "runtimeClassName" not in untouched["spec"]


def test_mutate_overwrite_env_blanks_visible_devices_of_other_containers() -> None:
    vendor = chip(overwrite_env=True)
    other = container()
    assert not mutated(vendor, other)
    assert other["env"] == [{"name": "ASCEND_VISIBLE_DEVICES", "value": ""}]
    mine = npu(count="1")
    assert mutated(vendor, mine) and "env" not in mine
    assert not mutated(A, (plain := container())) and "env" not in plain


def test_score_node_reads_devices_of_a_chip_whose_type_contains_the_common_word() -> None:
    """Ascend910B4 pods may take Ascend910B4-1 devices; their NetworkIDs count."""
    b4 = chip("Ascend910B4")
    devices = devices_of([Dev("a", network=1), Dev("b", network=1)], "Ascend910B4-1")
    entries = [[ContainerDevice("a", "Ascend910B4", 0, 0), ContainerDevice("b", "Ascend910B4", 0, 0)]]
    assert b4.score_node(entries, annotations={}, devices=devices, previous=[], policy="binpack") == 10.0
