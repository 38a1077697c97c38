"""Ascend node inventory: `hami.io/node-register-<commonWord>` (JSON) plus what Fit reads besides.

HAMi keeps two things beside the common device fields that the shared decoder drops: each
device's `custominfo` (the 910 family's `NetworkID`, for topology) and the node object itself,
whose `hami-vnpu-core` annotation Fit reads. Both are carried on `AscendDevice`, a DeviceInfo
with more fields, decoded when the inventory is; the vendor also notes the annotation at every
registration pass (`AscendVendor.check_health`), which wins for nodes a registration loop watches.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

import msgspec

from vgpu_scheduler.devices.protocol import Obj
from vgpu_scheduler.gocompat.parsing import json_kind
from vgpu_scheduler.model import DeviceInfo
from vgpu_scheduler.wire import objects
from vgpu_scheduler.wire.inventory import InventoryError, decode_node_devices

NODE_HAMI_CORE = "hami-vnpu-core"
"""Node annotation: "true" = the node supports hami-core soft partitioning (overrides the config)."""

NETWORK_ID = "NetworkID"


@dataclass(slots=True)
class AscendDevice(DeviceInfo):
    custom_info: dict[str, Any] | None = None
    """The device's `custominfo` object (None when absent or null)."""
    node_hami_core: bool | None = None
    """The node's `hami-vnpu-core` annotation when the inventory was read (None: absent)."""
    node_name: str = ""
    numeric_network: bool = field(init=False, repr=False, compare=False)
    """`network_id(custom_info)` is not None: read once, as the score bound asks it of every node
    a spread decision ranks (`custom_info` is never changed once decoded)."""

    def __post_init__(self) -> None:
        custom = self.custom_info
        self.numeric_network = custom is not None and network_id(custom) is not None


def network_id(custom_info: dict[str, Any] | None) -> float | None:
    """`CustomInfo["NetworkID"]` when it is a JSON number (Go's float64 assertion), else None."""
    if custom_info is None:
        return None
    value = custom_info.get(NETWORK_ID)
    if type(value) in (int, float):  # the usual JSON number first (bool is not one of them)
        return float(cast(float, value))
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def has_network_id(custom_info: dict[str, Any] | None) -> bool:
    """HAMi `hasNetworkID` for one device: the key is present, whatever its value."""
    return custom_info is not None and NETWORK_ID in custom_info


def node_hami_core(node: Obj) -> bool | None:
    """The node's `hami-vnpu-core` annotation: None when absent, else whether it is "true"."""
    flag = objects.annotation(node, NODE_HAMI_CORE)
    return None if flag is None else flag == "true"


def _custom_infos(value: str, n: int) -> list[dict[str, Any] | None]:
    """Each device's `custominfo` (field name case-insensitive, last one wins, as Go decodes)."""
    raw = msgspec.json.decode(value)  # already validated by decode_node_devices
    out: list[dict[str, Any] | None] = [None] * n
    if not isinstance(raw, list):
        return out
    for i, obj in enumerate(raw[:n]):
        if not isinstance(obj, dict):
            continue
        for key, info in obj.items():
            if key.lower() != "custominfo" or info is None:
                continue
            if not isinstance(info, dict):
                kind = json_kind(info)
                raise InventoryError(f"device {i}: field 'custominfo' must be an object, got {kind}")
            out[i] = info
    return out


def read_inventory(node: Obj, register_key: str, vendor_key: str) -> list[DeviceInfo]:
    """HAMi `GetNodeDevices` of one chip; raises InventoryError with HAMi's texts."""
    annotations = objects.annotations(node)
    value = annotations.get(register_key)
    if value is None:
        raise InventoryError(f"annos not found {register_key}")
    plain = decode_node_devices(value, "json")
    if not plain:
        raise InventoryError("no device found on node")
    infos = _custom_infos(value, len(plain))
    node_core = node_hami_core(node)
    name = objects.name(node)
    out: list[DeviceInfo] = []
    for dev, info in zip(plain, infos, strict=True):
        out.append(AscendDevice(
            id=dev.id, index=dev.index, count=dev.count, devmem=dev.devmem, devcore=dev.devcore,
            type=dev.type, numa=dev.numa, mode=dev.mode, health=dev.health, mig_profiles=dev.mig_profiles,
            device_vendor=vendor_key, custom_info=info, node_hami_core=node_core, node_name=name,
        ))
    return out


