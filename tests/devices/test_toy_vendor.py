"""Adding a vendor touches no shared source file (docs/vendors.md, issue 29 item 3).

A toy vendor defined here declares its config section, its legacy flag and its enable gate in a
`VendorSpec` and joins a temporary registry. The device-config reader, the command line and the
options read those from the registry, and one pod goes through the real filter and bind (the
scheduler process on the in-memory API server, driven by the simulator) and the simulated device
plugin.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import pytest

from tests import builders
from vgpu_scheduler.config import DeviceConfig
from vgpu_scheduler.configfile import DeviceConfigError, parse_device_config
from vgpu_scheduler.devices.base import GenericVendor
from vgpu_scheduler.devices.protocol import ResourceNames, Vendor, VendorFlags
from vgpu_scheduler.devices.registry import REGISTRY, build
from vgpu_scheduler.devices.sections import Section
from vgpu_scheduler.devices.spec import RESOURCE_NAME_KEYS, VendorFlag, VendorSpec
from vgpu_scheduler.flags import FLAGS, FlagError, global_flags, parse_args, vendor_flag_table
from vgpu_scheduler.model import DeviceInfo
from vgpu_scheduler.scheduler.options import SchedulerOptions, options_type, vendor_flags
from vgpu_scheduler.simulate.loop import Simulation
from vgpu_scheduler.simulate.options import SimulationOptions
from vgpu_scheduler.standin.embedded.fleet import fleet
from vgpu_scheduler.wire.inventory import encode_node_devices_json

TOY = "TOY"
REGISTER = "example.com/node-toy-register"
HANDSHAKE = "example.com/node-handshake-toy"
TO_ALLOCATE = "example.com/toy-devices-to-allocate"
ALLOCATED = "example.com/toy-devices-allocated"
COUNT, MEM, CORES = "example.com/toy", "example.com/toy-memory", "example.com/toy-cores"
FLAG_COUNT = "flag.example/toy"


class ToyVendor(GenericVendor):
    key = TOY
    allocation_keys = (TO_ALLOCATE, ALLOCATED)
    handshake_key = HANDSHAKE
    register_key = REGISTER
    inventory_dialect = "json"
    default_cores = 0


def toy_vendors(config: DeviceConfig, flags: VendorFlags) -> Sequence[Vendor]:
    names = Section(config.other_vendors.get("toys")).resource_names(memory_factor=1)
    # Unlike HAMi's vendors (whose section always wins), the toy's legacy flag names its count
    # resource when the section does not: the flag's value visibly reaches the vendor.
    count = names.count or str(flags.legacy.get("toy_count_name", ""))
    return [ToyVendor(ResourceNames(count, names.memory, names.cores, 1))]


SPEC = VendorSpec(
    "toys",
    "",
    gate="enable_toy",
    gate_help="enable toy device",
    flags=(VendorFlag("toy-count-name", FLAG_COUNT, "toy resource count"),),
    factory=toy_vendors,
    keys=dict.fromkeys(RESOURCE_NAME_KEYS),
)
WITH_TOY = (*REGISTRY, SPEC)
"""The package's registry plus the toy: no source file names it."""

CONFIG = f"""
nvidia: {{}}
toys:
  resourceCountName: {COUNT}
  resourceMemoryName: {MEM}
  resourceCoreName: {CORES}
"""


def toy_config() -> DeviceConfig:
    return parse_device_config(CONFIG, "toy.yaml", registry=WITH_TOY)


# --------------------------------------------------------------------------------------------
# The declaration, read from the registry


def test_the_config_section_and_its_keys_come_from_the_registry(caplog: pytest.LogCaptureFixture) -> None:
    assert toy_config().other_vendors["toys"] == {
        "resourceCountName": COUNT, "resourceMemoryName": MEM, "resourceCoreName": CORES,
    }
    # The package's own registry does not know the section: ignored, as any unknown section,
    # which leaves only the empty `nvidia` one.
    with pytest.raises(DeviceConfigError, match="all configurations are empty"):
        parse_device_config(CONFIG, "toy.yaml")
    with pytest.raises(DeviceConfigError) as err:
        parse_device_config("toys: [1]\n", "toy.yaml", registry=WITH_TOY)
    assert (err.value.key, err.value.problem) == ("toys", "expected a mapping, got list [1]")
    with caplog.at_level(logging.WARNING, logger="vgpu_scheduler.configfile"):
        parse_device_config("toys:\n  resourceCountNmaeToy: x\n", "toy.yaml", registry=WITH_TOY)
    assert "unknown key toys.resourceCountNmaeToy (ignored; did you mean resourceCountName?)" in caplog.text


def test_the_legacy_flag_and_the_gate_come_from_the_registry() -> None:
    rows = {f.name: f for f in vendor_flag_table((SPEC,))}
    assert [(f.name, f.attr, f.type_name, f.usage) for f in rows.values()] == [
        ("enable-toy", "enable_toy", "bool", "enable toy device"),
        ("toy-count-name", "toy_count_name", "string", "toy resource count"),
    ]
    names = [f.name for f in global_flags(WITH_TOY)]
    assert names == sorted(names) and {"enable-toy", "toy-count-name"} <= set(names)

    flags = (*FLAGS, *rows.values())
    options = options_type(WITH_TOY)
    opts, _ = parse_args(["--enable-toy", "--toy-count-name=x.example/t"], flags, options=options)
    read = vendor_flags(opts, WITH_TOY)
    assert read.enabled("enable_toy") and read.legacy["toy_count_name"] == "x.example/t"
    assert build(DeviceConfig(), read, registry=WITH_TOY)[TOY].names.count == "x.example/t"

    defaults, _ = parse_args([], flags, options=options)
    assert getattr(defaults, "toy_count_name") == FLAG_COUNT  # noqa: B009 - a field the type made
    assert TOY not in build(DeviceConfig(), vendor_flags(defaults, WITH_TOY), registry=WITH_TOY)
    # The package's command line and options know nothing of the toy.
    assert options_type(REGISTRY) is SchedulerOptions
    with pytest.raises(FlagError, match="unknown flag: --enable-toy"):
        parse_args(["--enable-toy"])


# --------------------------------------------------------------------------------------------
# One pod through filter, bind and the simulated device plugin


def toy_node() -> dict[str, Any]:
    node = fleet(1, 1)[0]
    devices = [
        DeviceInfo(id=f"TOY-{i}", index=i, count=4, devmem=8000, devcore=100, type=TOY, health=True)
        for i in range(2)
    ]
    node["metadata"]["annotations"][REGISTER] = encode_node_devices_json(devices)
    return node


def toy_pod() -> dict[str, Any]:
    limits = {"cpu": "1", "memory": "1Gi", COUNT: "1", MEM: "3000", CORES: "30"}
    return builders.pod("toy-pod", typed=True, containers=[builders.container("c", image="x", limits=limits)])


async def test_a_toy_pod_is_filtered_bound_and_admitted() -> None:
    node = toy_node()
    name = node["metadata"]["name"]
    options = SimulationOptions(
        device_config=toy_config(), vendor_gates=frozenset({"enable_toy"}), registry=WITH_TOY
    )
    sim = Simulation([node], [toy_pod()], options=options)
    try:
        await sim.start()
        assert TOY in sim.process.vendors
        result = await sim.run()
        placed = sim.cluster.get("pods", "toy-pod", "default")
        view = sim.process.state.ledger.view(name)
    finally:
        await sim.close()
    assert [p["name"] for p in result.report["pods"] if p.get("node") == name] == ["toy-pod"]
    assert placed["spec"]["nodeName"] == name and placed["status"]["phase"] == "Running"
    annotations = placed["metadata"]["annotations"]
    assert annotations[ALLOCATED] == "TOY-1,TOY,3000,30:;"
    assert annotations[TO_ALLOCATE] == ";"  # consumed by the simulated device plugin
    assert annotations["hami.io/bind-phase"] == "success"
    assert view is not None
    pairs = zip(view.devices, view.usage, strict=True)
    toy_usage = [(d.id, u.used, u.usedmem, u.usedcores) for d, u in pairs if d.type == TOY]
    assert toy_usage == [("TOY-0", 0, 0, 0), ("TOY-1", 1, 3000, 30)]
