"""The Metax sGPU inventory: `metax-tech.com/node-gpu-devices` (HAMi metax `protocol.go`).

The device plugin writes a JSON list of its own device objects (uuid, totalDevCount, totalCompute,
totalVRam, numa, healthy, qosPolicy, linkZone, …). It is decoded the way Go's `encoding/json`
fills `[]*MetaxSDeviceInfo`: field names case-insensitive, unknown fields ignored, `null` keeps
the zero value, a wrong JSON type or an out-of-range int32 is an error. Each entry becomes an
`SgpuDevice`: a `DeviceInfo` that keeps the vendor fields HAMi puts in `CustomInfo` (QoS policy,
model, link zone).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from vgpu_scheduler.gocompat.parsing import json_kind
from vgpu_scheduler.model import DeviceInfo
from vgpu_scheduler.wire.inventory import InventoryError

SGPU = "Metax-SGPU"
REGISTER = "metax-tech.com/node-gpu-devices"

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1

_decode: Callable[[str | bytes], Any] = msgspec.json.Decoder().decode


@dataclass(slots=True)
class SgpuDevice(DeviceInfo):
    """One sGPU-capable device: HAMi's DeviceInfo plus its `CustomInfo` fields."""

    qos_policy: str = ""
    model: str = ""
    link_zone: int = 0


_INT_FIELDS = ("totaldevcount", "totalcompute", "totalvram", "availabledevcount", "availablecompute",
               "availablevram", "numa", "linkzone")
_STR_FIELDS = ("uuid", "bdf", "model", "qospolicy")
_GO_NAMES = {
    "uuid": "UUID", "bdf": "BDF", "model": "Model", "totaldevcount": "TotalDevCount",
    "totalcompute": "TotalCompute", "totalvram": "TotalVRam", "availabledevcount": "AvailableDevCount",
    "availablecompute": "AvailableCompute", "availablevram": "AvailableVRam", "numa": "Numa",
    "healthy": "Healthy", "qospolicy": "QosPolicy", "linkzone": "LinkZone",
}


def _type_error(value: Any, field: str, go_type: str) -> InventoryError:
    kind = json_kind(value)
    shown = f"number {value}" if kind == "number" else kind
    return InventoryError(
        f"json: cannot unmarshal {shown} into Go struct field MetaxSDeviceInfo.{_GO_NAMES[field]} "
        f"of type {go_type}"
    )


def _fields(raw: Mapping[str, Any]) -> dict[str, Any]:
    """Go's case-insensitive field match; null keeps the zero value (so it is dropped here)."""
    out: dict[str, Any] = {}
    for key, value in raw.items():
        low = key.lower()
        if low in _GO_NAMES and value is not None:
            out[low] = value
    return out


def _one(raw: Any) -> dict[str, Any]:
    if type(raw) is not dict:
        if raw is None:
            # HAMi keeps a nil entry and then dereferences it (the plugin never writes one).
            raise InventoryError("metax sdevice entry is null")
        raise InventoryError(
            f"json: cannot unmarshal {json_kind(raw)} into Go value of type metax.MetaxSDeviceInfo"
        )
    values = _fields(raw)
    for name in _INT_FIELDS:
        v = values.get(name)
        if v is not None and (type(v) is not int or not INT32_MIN <= v <= INT32_MAX):
            raise _type_error(v, name, "int32")
    for name in _STR_FIELDS:
        v = values.get(name)
        if v is not None and type(v) is not str:
            raise _type_error(v, name, "string")
    healthy = values.get("healthy")
    if healthy is not None and type(healthy) is not bool:
        raise _type_error(healthy, "healthy", "bool")
    return values


def decode_sdevices(value: str) -> list[SgpuDevice]:
    """The annotation's devices, in order; raises InventoryError (HAMi's `getMetaxSDevices`)."""
    try:
        raw = _decode(value)
    except msgspec.DecodeError as exc:
        raise InventoryError(f"invalid node annotation JSON: {exc}") from None
    if raw is None:
        raw = []
    if type(raw) is not list:
        raise InventoryError(
            f"json: cannot unmarshal {json_kind(raw)} into Go value of type []*metax.MetaxSDeviceInfo"
        )
    entries = [_one(item) for item in raw]
    if not entries:
        raise InventoryError("no sdevice found on node")
    return [
        SgpuDevice(
            id=e.get("uuid", ""),
            index=i,
            count=e.get("totaldevcount", 0),
            devmem=e.get("totalvram", 0),
            devcore=e.get("totalcompute", 0),
            type=SGPU,
            numa=e.get("numa", 0),
            mode="",
            health=e.get("healthy", False),
            device_vendor=SGPU,
            qos_policy=e.get("qospolicy", ""),
            model=e.get("model", ""),
            link_zone=e.get("linkzone", 0),
        )
        for i, e in enumerate(entries)
    ]
