"""Kunlun (HAMi `pkg/device/kunlun`): one `kunlun` section, two vendors.

`kunlun` — whole XPU cards read from node capacity (`whole.py`); `XPU` — vXPU slices read from
`hami.io/node-register-xpu` (`vxpu.py`). Both combine cards by the rule of `topo.py`.

Section keys: `resourceCountName` (whole cards), `resourceVCountName` and `resourceVMemoryName`
(vXPU). HAMi assigns them over the `--kunlun-name` / `--kunlun-vcount` / `--kunlun-vmemory` flags
unconditionally (InitKunlunDevice / InitKunlunVDevice), so the flags never matter and a missing
section leaves empty names.
"""

from __future__ import annotations

from collections.abc import Sequence

from vgpu_scheduler.config import DeviceConfig
from vgpu_scheduler.devices.kunlun.vxpu import XpuVendor
from vgpu_scheduler.devices.kunlun.whole import KunlunVendor
from vgpu_scheduler.devices.protocol import ResourceNames, Vendor, VendorFlags
from vgpu_scheduler.devices.sections import Section
from vgpu_scheduler.devices.spec import VendorFlag, VendorSpec

SECTION = "kunlun"


def config_names(section: object) -> tuple[ResourceNames, ResourceNames]:
    """(whole-card names, vXPU names) of the `kunlun` section (Go zero values when absent)."""
    s = Section(section)
    return (
        ResourceNames(s.string("resourceCountName")),
        ResourceNames(s.string("resourceVCountName"), s.string("resourceVMemoryName")),
    )


def vendors(config: DeviceConfig, flags: VendorFlags) -> Sequence[Vendor]:
    whole, vxpu = config_names(config.other_vendors.get(SECTION))
    return [KunlunVendor(whole), XpuVendor(vxpu)]


SPEC = VendorSpec(
    SECTION,
    __name__,
    flags=(
        VendorFlag("kunlun-name", "kunlunxin.com/xpu", "kunlunxin xpu resource count"),
        VendorFlag("kunlun-vcount", "kunlunxin.com/vxpu", "kunlunxin vxpu resource count"),
        VendorFlag("kunlun-vmemory", "kunlunxin.com/vxpu-memory", "kunlunxin vxpu memory resource"),
    ),
    keys=dict.fromkeys(("resourceCountName", "resourceVCountName", "resourceVMemoryName")),
)
