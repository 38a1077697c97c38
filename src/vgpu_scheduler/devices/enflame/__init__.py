"""Enflame (HAMi `pkg/device/enflame`): one `enflame` section, two vendors, in HAMi's order.

* `GCU` (`gcu.py`): whole GCUs counted from node capacity, exclusive, allocations under
  `hami.io/enflame-gcu-devices-{to-allocate,allocated}`;
* `Enflame` (`drs.py`): DRS hard partitions described by the node annotation
  `enflame.com/gcu-drs-capacity` (`capacity.py`), requested as a slice count or as memory/core
  and turned into a DRS profile (`profiles.py`); allocation key
  `hami.io/enflame-vgpu-devices-allocated` only, plus the pod annotations Enflame's device plugin
  reads.

Neither locks the node nor has a handshake.
"""

from __future__ import annotations

from collections.abc import Sequence

from vgpu_scheduler.config import DeviceConfig
from vgpu_scheduler.devices.enflame.config import enflame_names
from vgpu_scheduler.devices.enflame.drs import DrsVendor
from vgpu_scheduler.devices.enflame.gcu import GcuVendor
from vgpu_scheduler.devices.protocol import Vendor, VendorFlags
from vgpu_scheduler.devices.spec import VendorFlag, VendorSpec


def vendors(config: DeviceConfig, flags: VendorFlags) -> Sequence[Vendor]:
    names = enflame_names(config.other_vendors.get("enflame"))
    return [GcuVendor(names.gcu), DrsVendor(names)]


SPEC = VendorSpec(
    "enflame",
    __name__,
    flags=(
        VendorFlag("enflame-drs-gcu-resource-name", "enflame.com/drs-gcu", "enflame drs gcu resource name"),
        VendorFlag(
            "enflame-gcu-core-resource-name", "enflame.com/gcu-core", "enflame gcu core resource name"
        ),
        VendorFlag(
            "enflame-gcu-memory-resource-name", "enflame.com/gcu-memory", "enflame gcu memory resource name"
        ),
        VendorFlag("enflame-gcu-resource-name", "enflame.com/gcu", "enflame gcu resource name"),
        VendorFlag(
            "enflame-vgcu-legacy-resource-name", "enflame.com/vgcu", "enflame legacy vgcu resource name"
        ),
        VendorFlag(
            "enflame-vgcu-percentage-resource-name",
            "enflame.com/vgcu-percentage",
            "enflame legacy vgcu percentage resource name",
        ),
        VendorFlag(
            "enflame-vgcu-resource-name",
            "enflame.com/drs-gcu",
            "alias of --enflame-drs-gcu-resource-name",
            attr="enflame_drs_gcu_resource_name",
        ),
    ),
    keys=dict.fromkeys(
        ("resourceNameGCU", "resourceNameDRSGCU", "resourceNameGCUMemory", "resourceNameGCUCore",
         "resourceNameVGCU", "resourceNameVGCUPercentage")
    ),
)
