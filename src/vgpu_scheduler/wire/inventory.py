"""Node device inventory codecs (§3.1, §3.2).

Two dialects carry the same data in `hami.io/node-<vendor>-register`:

* JSON (NVIDIA since HAMi v2.8, AMD, Vastai, Biren, Kunlun vXPU, Ascend): a list of objects
  decoded the way Go's `encoding/json` does it — field names case-insensitive, unknown fields
  ignored, `null` leaves the default, a wrong JSON type is an error;
* the legacy comma/colon form (NVIDIA <= v2.7, Hygon, Iluvatar), parsed with Go `strconv` rules.

`decode_node_devices` picks the dialect by the first non-blank character, so old and new device
plugins can share one cluster. Every malformed value raises `InventoryError`; callers treat that
as "this vendor on this node is unusable" and never let it escape further.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Annotated, Any, TypeVar

import msgspec

from vgpu_scheduler.gocompat import parsing as sc
from vgpu_scheduler.gocompat.parsing import go_json, json_kind

from ..model import DeviceInfo, MigPlacement, MigProfile
from .keys import NODE_NVIDIA_REGISTER

# HAMi's own default when a device does not state its mode.
DEFAULT_MODE = "hami-core"

UINT64_MAX = 2**64 - 1

_T = TypeVar("_T")


class InventoryError(ValueError):
    """A node inventory / pair-score annotation that cannot be used."""


# ---------------------------------------------------------------------------------------------
# JSON dialect


_json_decode: Callable[[str | bytes], Any] = msgspec.json.Decoder().decode


def _bad(where: str, field: str, want: str, value: Any) -> InventoryError:
    return InventoryError(f"{where}: field {field!r} must be {want}, got {json_kind(value)} {value!r}")


def _int_in(where: str, field: str, value: Any, *, lo: int, hi: int, want: str) -> int:
    # `type(...) is int` rejects bools (a Python int subclass) and floats such as 10.0, as Go does.
    if type(value) is not int or value < lo or value > hi:
        raise _bad(where, field, want, value)
    return value


def _str(where: str, field: str, value: Any) -> str:
    if type(value) is not str:
        raise _bad(where, field, "a string", value)
    return value


def _fold(obj: dict[str, Any], known: frozenset[str]) -> dict[str, Any]:
    """Map keys onto lower case the way Go matches struct fields (last duplicate wins)."""
    if obj.keys() <= known:
        return obj
    return {k.lower(): v for k, v in obj.items()}


_PLACEMENT_KEYS = frozenset({"start", "size"})
_DEVICE_KEYS = frozenset(
    {
        "id",
        "index",
        "count",
        "devmem",
        "devcore",
        "type",
        "numa",
        "mode",
        "migprofiles",
        "health",
        "devicevendor",
    }
)


def _placement(where: str, raw: Any) -> MigPlacement:
    if type(raw) is not dict:
        raise InventoryError(f"{where}: placement must be an object, got {json_kind(raw)}")
    obj = _fold(raw, _PLACEMENT_KEYS)
    start = obj.get("start")
    size = obj.get("size")
    return MigPlacement(
        start=0 if start is None else _int_in(where, "start", start, lo=0, hi=sc.INT32_MAX,
            want="a non-negative int32"),
        size=0 if size is None else _int_in(where, "size", size, lo=0, hi=sc.INT32_MAX,
            want="a non-negative int32"),
    )


def _mig_profile(where: str, raw: Any) -> MigProfile:
    if type(raw) is not dict:
        raise InventoryError(f"{where}: MIG profile must be an object, got {json_kind(raw)}")
    obj = {k.lower(): v for k, v in raw.items()}  # canonical names are camelCase: always fold
    name = obj.get("name")
    placements_raw = obj.get("placements")
    if placements_raw is not None and type(placements_raw) is not list:
        raise _bad(where, "placements", "an array", placements_raw)
    ints: dict[str, int] = {}
    for key in ("memorymb", "core", "slicecount"):
        v = obj.get(key)
        ints[key] = 0 if v is None else _int_in(where, key, v, lo=sc.INT32_MIN, hi=sc.INT32_MAX,
            want="an int32")
    return MigProfile(
        name="" if name is None else _str(where, "name", name),
        memory_mb=ints["memorymb"],
        core=ints["core"],
        slice_count=ints["slicecount"],
        placements=tuple(_placement(f"{where} placement {i}", p) for i, p in enumerate(placements_raw or ())),
    )


def _device_from_json(i: int, raw: Any) -> DeviceInfo:
    where = f"device {i}"
    if type(raw) is not dict:
        raise InventoryError(f"{where} must be a JSON object, got {json_kind(raw)}")
    d = DeviceInfo(id="")
    for key, value in raw.items():
        if value is None:  # Go leaves the field at its zero value
            continue
        k = key if key in _DEVICE_KEYS else key.lower()
        if k == "id":
            d.id = _str(where, "id", value)
        elif k == "count":
            d.count = _int_in(where, "count", value, lo=sc.INT32_MIN, hi=sc.INT32_MAX, want="an int32")
        elif k == "devmem":
            d.devmem = _int_in(where, "devmem", value, lo=sc.INT32_MIN, hi=sc.INT32_MAX, want="an int32")
        elif k == "devcore":
            d.devcore = _int_in(where, "devcore", value, lo=sc.INT32_MIN, hi=sc.INT32_MAX, want="an int32")
        elif k == "type":
            d.type = _str(where, "type", value)
        elif k == "health":
            if type(value) is not bool:
                raise _bad(where, "health", "a bool", value)
            d.health = value
        elif k == "index":
            d.index = _int_in(where, "index", value, lo=0, hi=UINT64_MAX, want="a non-negative integer")
        elif k == "numa":
            d.numa = _int_in(where, "numa", value, lo=sc.INT64_MIN, hi=sc.INT64_MAX, want="an integer")
        elif k == "mode":
            d.mode = _str(where, "mode", value) or DEFAULT_MODE
        elif k == "migprofiles":
            if type(value) is not list:
                raise _bad(where, "migProfiles", "an array", value)
            d.mig_profiles = tuple(_mig_profile(f"{where} migProfiles[{j}]", p) for j, p in enumerate(value))
        elif k == "devicevendor":
            d.device_vendor = _str(where, "devicevendor", value)
        # Anything else (custominfo, migtemplate, devicepairscore, future fields) is ignored.
    return d


# Fast path: what HAMi's own device plugin writes (exact field names, right types) decodes in one
# typed msgspec pass. Anything else — other spellings, unknown fields, nulls, type errors — makes
# msgspec raise and the value goes through the general, Go-faithful decoder above, which also
# produces the error message.

_Int32 = Annotated[int, msgspec.Meta(ge=sc.INT32_MIN, le=sc.INT32_MAX)]
_UInt32 = Annotated[int, msgspec.Meta(ge=0, le=sc.INT32_MAX)]


class _FastPlacement(msgspec.Struct, forbid_unknown_fields=True):
    start: _UInt32 = 0
    size: _UInt32 = 0


class _FastProfile(
    msgspec.Struct, forbid_unknown_fields=True, rename={"memory_mb": "memoryMB", "slice_count": "sliceCount"}
):
    name: str = ""
    memory_mb: _Int32 = 0
    core: _Int32 = 0
    slice_count: _Int32 = 0
    placements: list[_FastPlacement] = []


class _FastDevice(msgspec.Struct, forbid_unknown_fields=True, rename={"mig_profiles": "migProfiles"}):
    id: str = ""
    index: Annotated[int, msgspec.Meta(ge=0)] = 0  # above int64: general path
    count: _Int32 = 0
    devmem: _Int32 = 0
    devcore: _Int32 = 0
    type: str = ""
    numa: Annotated[int, msgspec.Meta(ge=sc.INT64_MIN, le=sc.INT64_MAX)] = 0
    mode: str = ""
    mig_profiles: list[_FastProfile] = []
    health: bool = False


_fast_decode = msgspec.json.Decoder(list[_FastDevice]).decode


def _from_fast(f: _FastDevice) -> DeviceInfo:
    return DeviceInfo(
        id=f.id,
        index=f.index,
        count=f.count,
        devmem=f.devmem,
        devcore=f.devcore,
        type=f.type,
        numa=f.numa,
        mode=f.mode or DEFAULT_MODE,
        health=f.health,
        mig_profiles=tuple(
            MigProfile(
                name=p.name,
                memory_mb=p.memory_mb,
                core=p.core,
                slice_count=p.slice_count,
                placements=tuple(MigPlacement(pl.start, pl.size) for pl in p.placements),
            )
            for p in f.mig_profiles
        )
        if f.mig_profiles
        else (),
    )


def _decode_json(value: str) -> list[DeviceInfo]:
    try:
        devices = [_from_fast(f) for f in _fast_decode(value)]
    except (msgspec.DecodeError, msgspec.ValidationError):
        devices = _decode_json_general(value)
    return devices


def _decode_json_general(value: str) -> list[DeviceInfo]:
    try:
        raw = _json_decode(value)
    except msgspec.DecodeError as exc:
        raise InventoryError(f"invalid node annotation JSON: {exc}") from None
    if raw is None:
        return []
    if type(raw) is not list:
        raise InventoryError(f"node annotation JSON must be an array, got {json_kind(raw)}")
    return [_device_from_json(i, obj) for i, obj in enumerate(raw)]


# ---------------------------------------------------------------------------------------------
# Legacy comma/colon dialect


def _decode_legacy(value: str) -> list[DeviceInfo]:
    if ":" not in value:
        raise InventoryError("node annotation missing device separator")
    devices: list[DeviceInfo] = []
    seen: set[str] = set()
    for segment in value.split(":"):
        if not segment:
            continue
        if "," not in segment:
            raise InventoryError(f"malformed node annotation segment: {sc.go_quote(segment)}")
        fields = segment.split(",")
        if len(fields) != 7 and len(fields) != 9:
            raise InventoryError(f"unexpected field count {len(fields)} in node annotation")
        dev_id = fields[0]
        # Two rules beyond §3.2 (from HAMi's strict Iluvatar decoder): an empty or repeated id
        # would make the usage ledger attribute allocations to the wrong device.
        if not dev_id.strip():
            raise InventoryError("device ID must not be empty")
        if dev_id in seen:
            raise InventoryError(f"duplicate device ID {sc.go_quote(dev_id)}")
        seen.add(dev_id)
        count = _legacy_field("count", fields[1], sc.parse_int32)
        devmem = _legacy_field("memory", fields[2], sc.parse_int32)
        devcore = _legacy_field("core", fields[3], sc.parse_int32)
        numa = _legacy_field("numa", fields[5], sc.atoi)
        health = _legacy_field("health", fields[6], sc.parse_bool)
        index, mode = 0, DEFAULT_MODE
        if len(fields) == 9:
            index = _legacy_field("index", fields[7], sc.atoi)
            mode = fields[8]
        if index < 0:
            raise InventoryError(f"index field must not be negative: {index}")
        devices.append(
            DeviceInfo(
                id=dev_id,
                index=index,
                count=count,
                devmem=devmem,
                devcore=devcore,
                type=fields[4],
                numa=numa,
                mode=mode,
                health=health,
            )
        )
    return devices


def _legacy_field(name: str, text: str, parse: Callable[[str], _T]) -> _T:
    try:
        return parse(text)
    except sc.GoSyntaxError as exc:
        raise InventoryError(f"invalid {name} field: {exc}") from None


# ---------------------------------------------------------------------------------------------
# Public API


def decode_node_devices(value: str, dialect: str = "auto") -> list[DeviceInfo]:
    """Decode a register annotation: `dialect` "auto" reads either (JSON if it starts with `[`),
    "legacy" only the comma form (HAMi's `DecodeNodeDevices`), "json" only JSON
    (`UnMarshalNodeDevices`)."""
    if dialect == "json" or (dialect == "auto" and value.lstrip().startswith("[")):
        return _decode_json(value)
    return _decode_legacy(value)


def _profile_to_json(p: MigProfile) -> dict[str, Any]:
    return {
        "name": p.name,
        "memoryMB": p.memory_mb,
        "core": p.core,
        "sliceCount": p.slice_count,
        "placements": [{"start": pl.start, "size": pl.size} for pl in p.placements],
    }


def _device_to_json(d: DeviceInfo) -> dict[str, Any]:
    # Field order and omission follow the Go struct with `omitempty` on every field.
    out: dict[str, Any] = {}
    if d.id:
        out["id"] = d.id
    if d.index:
        out["index"] = d.index
    if d.count:
        out["count"] = d.count
    if d.devmem:
        out["devmem"] = d.devmem
    if d.devcore:
        out["devcore"] = d.devcore
    if d.type:
        out["type"] = d.type
    if d.numa:
        out["numa"] = d.numa
    if d.mode:
        out["mode"] = d.mode
    if d.mig_profiles:
        out["migProfiles"] = [_profile_to_json(p) for p in d.mig_profiles]
    if d.health:
        out["health"] = True
    return out


def encode_node_devices_json(devices: Iterable[DeviceInfo]) -> str:
    """The v2.8+ JSON register annotation."""
    return go_json([_device_to_json(d) for d in devices])


def encode_node_devices_legacy(devices: Iterable[DeviceInfo]) -> str:
    """The legacy form, always 9 fields: `id,count,devmem,devcore,type,numa,health,index,mode:`."""
    return "".join(
        f"{d.id},{d.count},{d.devmem},{d.devcore},{d.type},{d.numa},"
        f"{sc.format_bool(d.health)},{d.index},{d.mode}:"
        for d in devices
    )


# ---------------------------------------------------------------------------------------------
# Pair scores (`hami.io/node-nvidia-score`)


_PAIR_KEYS = frozenset({"uuid", "score"})


def decode_pair_scores(value: str) -> dict[str, dict[str, int]]:
    """Device id -> (other device id -> link score). The first entry of an id wins, as in HAMi."""
    try:
        raw = _json_decode(value)
    except msgspec.DecodeError as exc:
        raise InventoryError(f"invalid pair score JSON: {exc}") from None
    if raw is None:
        return {}
    if type(raw) is not list:
        raise InventoryError(f"pair score JSON must be an array, got {json_kind(raw)}")
    out: dict[str, dict[str, int]] = {}
    for i, item in enumerate(raw):
        where = f"pair score {i}"
        if item is None:
            continue
        if type(item) is not dict:
            raise InventoryError(f"{where} must be an object, got {json_kind(item)}")
        obj = _fold(item, _PAIR_KEYS)
        uuid_raw = obj.get("uuid")
        uuid = "" if uuid_raw is None else _str(where, "uuid", uuid_raw)
        score_raw = obj.get("score")
        scores: dict[str, int] = {}
        if score_raw is not None:
            if type(score_raw) is not dict:
                raise _bad(where, "score", "an object", score_raw)
            for other, s in score_raw.items():
                if s is None:  # Go stores the zero value for a null map element
                    scores[other] = 0
                    continue
                scores[other] = _int_in(
                    where, f"score[{other!r}]", s, lo=sc.INT64_MIN, hi=sc.INT64_MAX, want="an integer"
                )
        out.setdefault(uuid, scores)
    return out


def encode_pair_scores(scores: Mapping[str, Mapping[str, int]]) -> str:
    """JSON list of `{"uuid":..., "score":{...}}`; score keys sorted as Go sorts map keys."""
    items: list[dict[str, Any]] = []
    for uuid, peers in scores.items():
        item: dict[str, Any] = {}
        if uuid:
            item["uuid"] = uuid
        if peers:
            item["score"] = {k: peers[k] for k in sorted(peers)}
        items.append(item)
    return go_json(items)


def attach_pair_scores(devices: Sequence[DeviceInfo], scores: Mapping[str, dict[str, int]]) -> None:
    """Copy each device's scores onto it (devices without an entry keep an empty mapping)."""
    for d in devices:
        peers = scores.get(d.id)
        if peers is not None:
            d.pair_scores = dict(peers)


# ---------------------------------------------------------------------------------------------
# Device cordon (`hami.io/device-cordon`)


def decode_cordon(value: str | None) -> frozenset[str]:
    """Comma-separated device UUIDs excluded from new allocations; blanks are ignored."""
    if not value:
        return frozenset()
    return frozenset(part for part in (p.strip() for p in value.split(",")) if part)


def decode_nvidia_inventory(register: str | None, score: str | None) -> list[DeviceInfo]:
    """NVIDIA's GetNodeDevices: the register annotation with pair scores attached.

    Raises InventoryError (missing annotation, bad inventory, bad score JSON: any of them makes the
    whole inventory unusable, as in HAMi)."""
    if register is None:
        raise InventoryError(f"annos not found {NODE_NVIDIA_REGISTER}")
    devices = decode_node_devices(register)
    if not devices:  # checked on the decoded list, so it holds for both dialects
        raise InventoryError("no gpu found on node")
    if score is not None:
        attach_pair_scores(devices, decode_pair_scores(score))
    return devices
