"""The DRS inventory: node annotation `enflame.com/gcu-drs-capacity` (HAMi `GetNodeDevices`).

    {"devices":[{"index":"0","minor":"0","capacity":6}],"profiles":{"1g.6gb":"0","3g.20gb":"1"}}

Decoded as Go's `encoding/json` decodes it into HAMi's structs (field names case-insensitive,
`index`/`minor`/profile ids strings, `capacity` any JSON value); any decode error fails the
node's DRS inventory with `failed to parse enflame.com/gcu-drs-capacity: <error>`. Then:

* the largest slice count and memory among the profile names; no positive slice count is
  `no valid drs profiles found on node <n>`; no positive memory uses the slice count as GB;
* per device: index `strconv.Atoi` (else its position), capacity a number in int32 range or an
  integer string (clamped), > 0, else `invalid drs capacity on node <n>`; minor trimmed, else the
  index; id `<node>-enflame-drs-<index>`, count = capacity, devmem = largest GB × 1024 (int32),
  devcore 100, type `Enflame`, healthy;
* no device at all is `no drs devices found on node <n>`.
"""

from __future__ import annotations

import json
import math
from typing import Any

from vgpu_scheduler.devices import resources as res
from vgpu_scheduler.devices.enflame.profiles import go_atoi, go_trim, parse_profile
from vgpu_scheduler.devices.enflame.types import DrsDevice
from vgpu_scheduler.gocompat.parsing import json_kind
from vgpu_scheduler.wire.inventory import InventoryError

ENFLAME = "Enflame"
DRS_CAPACITY = "enflame.com/gcu-drs-capacity"
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


class _GoJsonError(ValueError):
    pass


def _type_error(value: Any, where: str, go_type: str) -> _GoJsonError:
    return _GoJsonError(f"json: cannot unmarshal {json_kind(value)} into {where} of type {go_type}")


def _no_constants(name: str) -> Any:
    raise _GoJsonError(f"invalid character '{name[0]}' looking for beginning of value")


def _field(obj: dict[str, Any], name: str) -> Any:
    """Go's case-insensitive field match; the last matching key wins."""
    value = None
    for key, v in obj.items():
        if key.lower() == name:
            value = v
    return value


def _string(value: Any, field: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise _type_error(value, f"Go struct field drsDeviceSpec.devices.{field}", "string")
    return value


def decode_spec(text: str) -> tuple[list[tuple[str, str, Any]], list[tuple[str, str]]]:
    """(devices as (index, minor, capacity), profiles as (name, id)); raises _GoJsonError."""
    try:
        raw = json.loads(text, parse_constant=_no_constants)
    except json.JSONDecodeError as exc:
        if exc.pos >= len(text.rstrip()):
            raise _GoJsonError("unexpected end of JSON input") from None
        raise _GoJsonError(f"invalid JSON at offset {exc.pos}: {exc.msg}") from None
    if raw is None:
        return [], []
    if not isinstance(raw, dict):
        raise _type_error(raw, "Go value", "enflame.drsCapacitySpec")
    devices: list[tuple[str, str, Any]] = []
    raw_devices = _field(raw, "devices")
    if raw_devices is not None:
        if not isinstance(raw_devices, list):
            where = "Go struct field drsCapacitySpec.devices"
            raise _type_error(raw_devices, where, "[]enflame.drsDeviceSpec")
        for item in raw_devices:
            if item is None:
                devices.append(("", "", None))
                continue
            if not isinstance(item, dict):
                raise _type_error(item, "Go struct field drsCapacitySpec.devices", "enflame.drsDeviceSpec")
            devices.append((_string(_field(item, "index"), "index"), _string(_field(item, "minor"), "minor"),
                            _field(item, "capacity")))
    profiles: list[tuple[str, str]] = []
    raw_profiles = _field(raw, "profiles")
    if raw_profiles is not None:
        if not isinstance(raw_profiles, dict):
            raise _type_error(raw_profiles, "Go struct field drsCapacitySpec.profiles", "map[string]string")
        for name, pid in raw_profiles.items():
            if pid is not None and not isinstance(pid, str):
                raise _type_error(pid, "Go struct field drsCapacitySpec.profiles", "string")
            profiles.append((name, pid or ""))
    return devices, profiles


def parse_capacity(raw: Any) -> int | None:
    """HAMi `parseDRSCapacity`: a JSON number in int32 range (truncated) or an integer string
    (clamped to int32); None for anything else."""
    if isinstance(raw, bool) or raw is None:
        return None
    if isinstance(raw, int | float):
        value = float(raw)
        if math.isnan(value) or value > INT32_MAX or value < INT32_MIN:
            return None
        return int(value)
    if isinstance(raw, str):
        parsed = go_atoi(go_trim(raw))
        return None if parsed is None else max(INT32_MIN, min(INT32_MAX, parsed))
    return None


def drs_devices(node_name: str, value: str) -> list[DrsDevice]:
    try:
        specs, profiles = decode_spec(value)
    except _GoJsonError as exc:
        raise InventoryError(f"failed to parse {DRS_CAPACITY}: {exc}") from None
    max_slice = max_mem = 0
    for name, _ in profiles:
        size, memory = parse_profile(name)
        max_slice = max(max_slice, size)
        max_mem = max(max_mem, memory)
    if max_slice <= 0:
        raise InventoryError(f"no valid drs profiles found on node {node_name}")
    if max_mem <= 0:
        max_mem = max_slice
    out: list[DrsDevice] = []
    for position, (index_raw, minor_raw, capacity_raw) in enumerate(specs):
        parsed = go_atoi(index_raw)
        index = position if parsed is None else parsed
        capacity = parse_capacity(capacity_raw)
        if capacity is None or capacity <= 0:
            raise InventoryError(f"invalid drs capacity on node {node_name}")
        minor = go_trim(minor_raw) or str(index)
        out.append(
            DrsDevice(
                id=f"{node_name}-enflame-drs-{index}", index=index % 2**64, count=capacity,
                devmem=res.int32(max_mem * 1024), devcore=100, type=ENFLAME, numa=0, health=True,
                device_vendor=ENFLAME, minor=minor, index_text=str(index), profiles=tuple(profiles),
                max_slice=max_slice,
            )
        )
    if not out:
        raise InventoryError(f"no drs devices found on node {node_name}")
    return out
