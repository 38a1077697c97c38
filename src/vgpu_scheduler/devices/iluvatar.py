"""Iluvatar (HAMi `pkg/device/iluvatar`): one vendor per chip of the `iluvatars` list.

Section `iluvatars`, a list of {chipName, commonWord, resourceCountName, resourceMemoryName,
resourceCoreName}; registered only with `--enable-iluvatar` (the registry's gate). Each entry is
a vendor whose key is its `commonWord` (the chart lists MR-V100, MR-V50, BI-V150, BI-V100); an
empty or missing list registers none. HAMi v2.10 has no legacy resource-name flags for Iluvatar
(`--iluvatar-name` & co. were removed in v2.8), so the list is the only source of names.

Per chip `<cw>`: inventory `hami.io/node-<cw>-register` (legacy comma form only), handshake
`hami.io/node-handshake-<cw>` (never deleted: HAMi's NodeCleanUp does nothing), allocations under
`hami.io/<cw>-devices-{to-allocate,allocated}`, uuid filters `hami.io/use-<cw>-uuid` /
`hami.io/no-use-<cw>-uuid` (no type filters), node lock `hami.io/mutex.lock`.

Requests differ from the generic pattern: memory is counted in units of 256 MiB and a value that
is not a plain integer in [0, 2^31-1 / 256] drops the whole request; cores default to 0 and are
taken as Go's int32 of the value (no range check); the count is int32-wrapped too. The webhook
sets `limits[<core resource>] = 100 × count` for a count above 1 and adds the env var
`SOL_CONTINER_NAME` (sic) = the container name. The fit is the generic check ladder.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from vgpu_scheduler.config import DeviceConfig
from vgpu_scheduler.devices import resources as res
from vgpu_scheduler.devices.base import GenericVendor
from vgpu_scheduler.devices.protocol import (
    Obj,
    ResourceNames,
    Vendor,
    VendorConfigError,
    VendorFlags,
)
from vgpu_scheduler.devices.sections import Section
from vgpu_scheduler.devices.spec import RESOURCE_NAME_KEYS, Each, VendorSpec
from vgpu_scheduler.model import ContainerDeviceRequest

SECTION = "iluvatars"
MEMORY_FACTOR = 256
"""MiB per unit of the memory resource (HAMi's `MemoryFactor`, also the quota factor)."""
MAX_MEMORY_UNITS = res.INT32_MAX // MEMORY_FACTOR
CONTAINER_NAME_ENV = "SOL_CONTINER_NAME"  # HAMi's spelling, kept for the runtime that reads it


def register_key(cw: str) -> str:
    return f"hami.io/node-{cw}-register"


def handshake_key(cw: str) -> str:
    return f"hami.io/node-handshake-{cw}"


def allocation_keys(cw: str) -> tuple[str, str]:
    return f"hami.io/{cw}-devices-to-allocate", f"hami.io/{cw}-devices-allocated"


def uuid_keys(cw: str) -> tuple[str, str]:
    return f"hami.io/use-{cw}-uuid", f"hami.io/no-use-{cw}-uuid"


def decimal_si(n: int) -> str:
    """`resource.NewQuantity(n, DecimalSI).String()` for n >= 0: "200", "1k", "1500", "2M"."""
    if n == 0:
        return "0"
    exponent = 0
    while n % 1000 == 0 and exponent < 6:
        n //= 1000
        exponent += 1
    return f"{n}{('', 'k', 'M', 'G', 'T', 'P', 'E')[exponent]}"


class IluvatarVendor(GenericVendor):
    inventory_dialect = "legacy"
    default_cores = 0

    def __init__(self, common_word: str, names: ResourceNames, *, chip_name: str = "") -> None:
        self.key = common_word
        self.chip_name = chip_name
        self.allocation_keys = allocation_keys(common_word)
        self.handshake_key = handshake_key(common_word)
        self.register_key = register_key(common_word)
        self.use_uuid_key, self.nouse_uuid_key = uuid_keys(common_word)
        super().__init__(names)
        self.cleanup_key = None  # HAMi's NodeCleanUp is a no-op: the handshake stays

    def __repr__(self) -> str:
        return f"IluvatarVendor({self.key!r}, {self.names!r})"

    def request(self, container: Obj) -> ContainerDeviceRequest | None:
        resources = res.resources_of(container)
        if resources is None:
            return None
        count = res.as_int(res.lookup(resources, self.names.count))
        if count is None:
            return None
        memory = 0
        raw = res.lookup(resources, self.names.memory)
        if raw is not res.MISSING:
            units = res.as_int(raw)
            if units is None or units < 0 or units > MAX_MEMORY_UNITS:
                return None  # HAMi rejects rather than silently under-allocating
            memory = units * MEMORY_FACTOR
        cores = 0
        parsed = res.as_int(res.lookup(resources, self.names.cores))
        if parsed is not None:
            cores = res.int32(parsed)
        return ContainerDeviceRequest(
            nums=res.int32(count), type=self.key, memreq=memory,
            mem_percentage_req=100 if memory == 0 else 0, coresreq=cores,
        )

    def mutate(self, container: dict[str, Any], pod: dict[str, Any]) -> bool:
        if not res.present(container, "limits", self.names.count):
            return False
        count = res.value(container, self.names.count) or 0
        if count > 1:
            # More than one device: each is taken whole.
            res.set_limit(container, self.names.cores, decimal_si(count * 100))
        env = container.get("env")
        has_env = isinstance(env, list) and any(
            isinstance(e, dict) and e.get("name") == CONTAINER_NAME_ENV for e in env
        )
        name = container.get("name")
        if not has_env and isinstance(name, str) and name:
            res.append_env(container, CONTAINER_NAME_ENV, name)
        return True


def chip_vendor(item: object, index: int) -> IluvatarVendor:
    """One entry of the `iluvatars` list (Go zero values for missing keys)."""
    s = Section(item, str(index))
    common_word = s.string("commonWord")
    if not common_word:
        raise VendorConfigError("commonWord is empty (it names the vendor and its annotations)",
                                f"{index}.commonWord")
    names = ResourceNames(
        s.string("resourceCountName"), s.string("resourceMemoryName"), s.string("resourceCoreName"),
        MEMORY_FACTOR,
    )
    return IluvatarVendor(common_word, names, chip_name=s.string("chipName"))


def vendors(config: DeviceConfig, flags: VendorFlags) -> Sequence[Vendor]:
    raw = config.other_vendors.get(SECTION)
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise VendorConfigError(f"expected a list, got {type(raw).__name__}")
    # HAMi keeps the chips in a map by commonWord: a repeated one is the last entry's, in the place
    # of the first.
    by_key: dict[str, IluvatarVendor] = {}
    for index, item in enumerate(raw):
        vendor = chip_vendor(item, index)
        by_key[vendor.key] = vendor
    return list(by_key.values())


SPEC = VendorSpec(
    SECTION,
    __name__,
    gate="enable_iluvatar",
    gate_help="enable iluvatar device",
    keys=Each(dict.fromkeys(("commonWord", "chipName", *RESOURCE_NAME_KEYS))),
)
