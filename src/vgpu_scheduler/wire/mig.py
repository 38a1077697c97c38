"""`hami.io/vgpu-mig-allocations` (§4.6).

A JSON array, one element per MIG device granted:
`{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-…","profile":"2g.10gb","placement":{"start":0,"size":2}}`
The device plugin later adds the runtime identity `migUUID`, `gpuInstanceID`, `computeInstanceID`
(all three or none). One bad element makes the whole annotation unusable, as in HAMi.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import msgspec

from vgpu_scheduler.gocompat import parsing as sc
from vgpu_scheduler.gocompat.parsing import go_json

from ..model import MigAllocation, MigPlacement

UINT32_MAX = 2**32 - 1


class MigAllocationError(ValueError):
    """A MIG allocation annotation that cannot be used."""


_json_decode: Callable[[str | bytes], Any] = msgspec.json.Decoder().decode


def _int(i: int, field: str, value: Any, *, lo: int, hi: int) -> int:
    if type(value) is not int or value < lo or value > hi:
        raise MigAllocationError(f"MIG allocation {i}: field {field!r} must be an integer in [{lo}, {hi}]")
    return value


def _str(i: int, field: str, value: Any) -> str:
    if value is None:
        return ""
    if type(value) is not str:
        raise MigAllocationError(f"MIG allocation {i}: field {field!r} must be a string")
    return value


def _placement(i: int, value: Any) -> MigPlacement:
    if value is None:
        return MigPlacement(0, 0)
    if type(value) is not dict:
        raise MigAllocationError(f"MIG allocation {i}: field 'placement' must be an object")
    obj = {k.lower(): v for k, v in value.items()}
    start, size = obj.get("start"), obj.get("size")
    return MigPlacement(
        start=0 if start is None else _int(i, "placement.start", start, lo=0, hi=UINT32_MAX),
        size=0 if size is None else _int(i, "placement.size", size, lo=0, hi=UINT32_MAX),
    )


def _element(i: int, raw: Any) -> MigAllocation:
    if type(raw) is not dict:
        raise MigAllocationError(f"MIG allocation {i} must be a JSON object")
    obj = {k.lower(): v for k, v in raw.items()}  # Go matches field names case-insensitively
    ci, di = obj.get("containerindex"), obj.get("deviceindex")
    gi, cpi = obj.get("gpuinstanceid"), obj.get("computeinstanceid")
    return MigAllocation(
        container_index=0 if ci is None else _int(i, "containerIndex", ci, lo=sc.INT64_MIN, hi=sc.INT64_MAX),
        device_index=0 if di is None else _int(i, "deviceIndex", di, lo=sc.INT64_MIN, hi=sc.INT64_MAX),
        gpu_uuid=_str(i, "gpuUUID", obj.get("gpuuuid")),
        profile=_str(i, "profile", obj.get("profile")),
        placement=_placement(i, obj.get("placement")),
        mig_uuid=_str(i, "migUUID", obj.get("miguuid")),
        gpu_instance_id=None if gi is None else _int(i, "gpuInstanceID", gi, lo=0, hi=UINT32_MAX),
        compute_instance_id=None if cpi is None else _int(i, "computeInstanceID", cpi, lo=0, hi=UINT32_MAX),
    )


def validate_mig_allocations(allocations: Iterable[MigAllocation]) -> None:
    """HAMi's checks: complete elements, all-or-nothing runtime identity, unique slots."""
    seen: set[tuple[int, int]] = set()
    for i, a in enumerate(allocations):
        if (
            a.container_index < 0
            or a.device_index < 0
            or not a.gpu_uuid
            or not a.profile
            or a.placement.size == 0
        ):
            raise MigAllocationError(f"MIG allocation {i} is incomplete")
        runtime = (a.mig_uuid != "") + (a.gpu_instance_id is not None) + (a.compute_instance_id is not None)
        if runtime not in (0, 3):
            raise MigAllocationError(f"MIG allocation {i} has partial runtime identity")
        slot = (a.container_index, a.device_index)
        if slot in seen:
            raise MigAllocationError(
                f"duplicate MIG allocation for container {a.container_index} device {a.device_index}"
            )
        seen.add(slot)


def decode_mig_allocations(value: str) -> list[MigAllocation]:
    """Decode and validate; an empty annotation means no MIG devices."""
    if value == "":
        return []
    try:
        raw = _json_decode(value)
    except msgspec.DecodeError as exc:
        raise MigAllocationError(f"invalid MIG allocation JSON: {exc}") from None
    if raw is None:
        return []
    if type(raw) is not list:
        raise MigAllocationError("MIG allocation annotation must be a JSON array")
    out = [_element(i, item) for i, item in enumerate(raw)]
    validate_mig_allocations(out)
    return out


def encode_mig_allocations(allocations: Iterable[MigAllocation]) -> str:
    """JSON as HAMi writes it; runtime identity keys only when set.

    HAMi writes no annotation at all when a pod has no MIG device; `[]` is returned here for an
    empty input and the caller decides whether to write it.
    """
    items: list[dict[str, Any]] = []
    for a in allocations:
        item: dict[str, Any] = {
            "containerIndex": a.container_index,
            "deviceIndex": a.device_index,
            "gpuUUID": a.gpu_uuid,
            "profile": a.profile,
            "placement": {"start": a.placement.start, "size": a.placement.size},
        }
        if a.mig_uuid:
            item["migUUID"] = a.mig_uuid
        if a.gpu_instance_id is not None:
            item["gpuInstanceID"] = a.gpu_instance_id
        if a.compute_instance_id is not None:
            item["computeInstanceID"] = a.compute_instance_id
        items.append(item)
    return go_json(items)
