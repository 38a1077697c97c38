"""Hygon DCU (HAMi `pkg/device/hygon`): the generic pattern with DCU's keys and defaults.

Section `hygon` (`resourceCountName`, `resourceMemoryName`, `resourceCoreName`, `memoryFactor`);
the `--dcu-name`/`--dcu-memory`/`--dcu-cores` flags are overwritten by the section, empty when it
is missing (HAMi assigns the config values unconditionally). Inventory in
`hami.io/node-dcu-register`, legacy comma form only; handshake `hami.io/node-handshake-dcu`;
allocations under `hami.io/dcu-devices-{to-allocate,allocated}`; selection annotations
`hygon.com/{use,nouse}-dcutype` and `hygon.com/{use,nouse}-gpuuuid`; node lock
`hami.io/mutex.lock`. A container names no cores ⇒ 100 (the whole device); no memory ⇒ 100 % of it.
Everything else is `GenericVendor`'s.
"""

from __future__ import annotations

from collections.abc import Sequence

from vgpu_scheduler.config import DeviceConfig
from vgpu_scheduler.devices.base import GenericVendor
from vgpu_scheduler.devices.protocol import Vendor, VendorFlags
from vgpu_scheduler.devices.sections import Section
from vgpu_scheduler.devices.spec import RESOURCE_NAME_KEYS, VendorFlag, VendorSpec

DCU = "DCU"
REGISTER = "hami.io/node-dcu-register"
HANDSHAKE = "hami.io/node-handshake-dcu"
TO_ALLOCATE = "hami.io/dcu-devices-to-allocate"
ALLOCATED = "hami.io/dcu-devices-allocated"
USE_TYPE = "hygon.com/use-dcutype"
NOUSE_TYPE = "hygon.com/nouse-dcutype"
USE_UUID = "hygon.com/use-gpuuuid"
NOUSE_UUID = "hygon.com/nouse-gpuuuid"


class HygonVendor(GenericVendor):
    key = DCU
    allocation_keys = (TO_ALLOCATE, ALLOCATED)
    handshake_key = HANDSHAKE
    register_key = REGISTER
    inventory_dialect = "legacy"
    use_type_key = USE_TYPE
    nouse_type_key = NOUSE_TYPE
    use_uuid_key = USE_UUID
    nouse_uuid_key = NOUSE_UUID
    default_cores = 100


def vendors(config: DeviceConfig, flags: VendorFlags) -> Sequence[Vendor]:
    names = Section(config.other_vendors.get("hygon")).resource_names(memory_factor="memoryFactor")
    return [HygonVendor(names)]


SPEC = VendorSpec(
    "hygon",
    __name__,
    flags=(
        VendorFlag("dcu-cores", "hygon.com/dcucores", "dcu core resource"),
        VendorFlag("dcu-memory", "hygon.com/dcumem", "dcu memory resource"),
        VendorFlag("dcu-name", "hygon.com/dcunum", "dcu resource count"),
    ),
    keys=dict.fromkeys((*RESOURCE_NAME_KEYS, "memoryFactor")),
)
