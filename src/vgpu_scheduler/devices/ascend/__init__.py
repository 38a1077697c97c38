"""Ascend vNPU (HAMi `pkg/device/ascend`): one vendor per chip of the `vnpus` section, registered
only with `--enable-ascend` (the registry's gate)."""

from __future__ import annotations

from collections.abc import Sequence

from vgpu_scheduler.config import DeviceConfig
from vgpu_scheduler.devices.ascend.config import VnpuConfig, parse_vnpus
from vgpu_scheduler.devices.ascend.vendor import AscendVendor
from vgpu_scheduler.devices.protocol import Vendor, VendorFlags
from vgpu_scheduler.devices.spec import Each, VendorSpec

__all__ = ["AscendVendor", "VnpuConfig", "parse_vnpus", "vendors"]


def vendors(config: DeviceConfig, flags: VendorFlags) -> Sequence[Vendor]:
    """One vendor per distinct `commonWord`, in file order. HAMi keys its devices by commonWord,
    so a repeated commonWord keeps its first position and takes the last entry's settings."""
    vnpus = parse_vnpus(config.other_vendors.get("vnpus"))
    chips: dict[str, VnpuConfig] = {}
    for chip in vnpus.configs:
        chips[chip.common_word] = chip
    return [AscendVendor(chip, hami_vnpu_core=vnpus.hami_vnpu_core) for chip in chips.values()]


_CHIP_KEYS = (
    "commonWord", "chipName", "resourceName", "resourceMemoryName", "resourceCoreName", "memoryAllocatable",
    "memoryCapacity", "memoryFactor", "aiCore", "aiCPU", "runtimeClassName", "overwriteEnv", "superPod",
)
_TEMPLATE_KEYS = ("name", "memory", "aiCore", "aiCPU")
SPEC = VendorSpec(
    "vnpus",
    __name__,
    gate="enable_ascend",
    gate_help="enable ascend device",
    keys={
        "hamiVnpuCore": None,
        "configs": Each({**dict.fromkeys(_CHIP_KEYS), "templates": Each(dict.fromkeys(_TEMPLATE_KEYS))}),
    },
)
