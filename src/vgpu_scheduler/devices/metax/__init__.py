"""Metax (HAMi `pkg/device/metax`): one `metax` section, two vendors.

* `Metax-GPU` (`gpu`): whole GPUs counted from node capacity (`resourceCountName`).
* `Metax-SGPU` (`sgpu`): shared GPUs from the device plugin's annotation (`resourceVCountName`,
  `resourceVMemoryName`, `resourceVCoreName`, `sgpuTopologyAware`).

HAMi assigns the section's values over the `--metax-*` / `--sgpu-topology-aware` flags
unconditionally, so a missing section leaves empty names (the vendors never match a container).
"""

from __future__ import annotations

from collections.abc import Sequence

from vgpu_scheduler.config import DeviceConfig
from vgpu_scheduler.devices.metax.gpu import MetaxGpuVendor
from vgpu_scheduler.devices.metax.sgpu import MEMORY_FACTOR, MetaxSgpuVendor
from vgpu_scheduler.devices.protocol import ResourceNames, Vendor, VendorFlags
from vgpu_scheduler.devices.sections import Section
from vgpu_scheduler.devices.spec import VendorFlag, VendorSpec


def vendors(config: DeviceConfig, flags: VendorFlags) -> Sequence[Vendor]:
    s = Section(config.other_vendors.get("metax"))
    gpu = MetaxGpuVendor(ResourceNames(s.string("resourceCountName")))
    sgpu = MetaxSgpuVendor(
        ResourceNames(
            s.string("resourceVCountName"), s.string("resourceVMemoryName"), s.string("resourceVCoreName"),
            MEMORY_FACTOR,
        ),
        topology_aware=s.boolean("sgpuTopologyAware"),
    )
    return [gpu, sgpu]


SPEC = VendorSpec(
    "metax",
    __name__,
    flags=(
        VendorFlag("metax-name", "metax-tech.com/gpu", "metax gpu resource count"),
        VendorFlag("metax-vcore", "metax-tech.com/vcore", "metax sgpu core resource"),
        VendorFlag("metax-vcount", "metax-tech.com/sgpu", "metax sgpu resource count"),
        VendorFlag("metax-vmemory", "metax-tech.com/vmemory", "metax sgpu memory resource"),
        VendorFlag("sgpu-topology-aware", False, "metax sgpu topology aware scheduling"),
    ),
    keys=dict.fromkeys(
        ("resourceCountName", "resourceVCountName", "resourceVMemoryName", "resourceVCoreName",
         "sgpuTopologyAware")
    ),
)
