"""The registry (§2): HAMi's order, the --enable-ascend/--enable-iluvatar gates, errors per section."""

from __future__ import annotations

import pytest

from vgpu_scheduler.config import DeviceConfig
from vgpu_scheduler.devices.protocol import VendorConfigError, VendorFlags, Vendors
from vgpu_scheduler.devices.registry import REGISTRY, Entry, build
from vgpu_scheduler.model import NVIDIA

HAMI_ORDER = (
    "nvidia", "cambricon", "hygon", "enflame", "mthreads", "metax", "kunlun", "awsneuron", "amd",
    "vastai", "biren", "vnpus", "iluvatars",
)

ALWAYS = (
    "NVIDIA", "MLU", "DCU", "GCU", "Enflame", "Mthreads", "Metax-GPU", "Metax-SGPU", "kunlun", "XPU",
    "AWSNeuron", "AMD", "Vastai", "Biren",
)
"""The vendor keys registered without a gate, in HAMi's order (the Kunlun and Metax sections give two)."""


def test_registered_sections_follow_hamis_order() -> None:
    sections = [entry.section for entry in REGISTRY]
    assert sections == [s for s in HAMI_ORDER if s in sections]
    assert build().keys == ALWAYS


@pytest.mark.parametrize(("gate", "on"), [("enable_iluvatar", True), ("enable_iluvatar", False),
                                          ("enable_ascend", True), ("enable_ascend", False)])
def test_gated_sections_register_only_with_their_flag(gate: str, on: bool) -> None:
    registry = (Entry("nvidia", "nvidia"), Entry("hygon", "hygon", gate=gate))
    flags = VendorFlags(**{gate: on})
    assert ("DCU" in build(DeviceConfig(), flags, registry=registry)) is on


def test_section_errors_name_the_section() -> None:
    config = DeviceConfig(other_vendors={"hygon": {"resourceCountName": ["not", "a", "string"]}})
    with pytest.raises(VendorConfigError) as err:
        build(config)
    assert err.value.key == "hygon.resourceCountName"
    with pytest.raises(VendorConfigError) as err:
        build(DeviceConfig(other_vendors={"hygon": "text"}))
    assert err.value.key == "hygon"


def test_a_vendor_key_registers_once() -> None:
    vendors = build()
    with pytest.raises(ValueError, match="registered twice"):
        Vendors([*vendors, vendors[NVIDIA]])
