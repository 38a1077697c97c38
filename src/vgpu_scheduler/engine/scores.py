"""Device and node scores (§5.5) with Go float32 semantics.

HAMi computes scores in float32 and sorts devices by them, so two devices whose scores differ in
float64 may tie in float32 (and a tie changes which device is taken). Every intermediate value is
therefore rounded to float32 exactly where Go rounds it: each int->float32 conversion, each
division, multiplication and addition. Rounding a float64 result of one float32 operation to
float32 gives the correctly rounded float32 result (53 >= 2*24+2 bits), so float64 arithmetic
plus a rounding step is exact. Scores are memoised on their integer inputs (see `_score`).
"""

from __future__ import annotations

import re
import struct
from array import array
from collections.abc import Mapping, Sequence

from vgpu_scheduler.gocompat.parsing import go_quote
from vgpu_scheduler.model import PERCENTAGE_UNSET, ContainerDeviceRequest, DeviceInfo, DeviceUsage

Weights = tuple[int, int, int]
"""(slot, core, memory) device-scoring weights."""

DEFAULT_WEIGHTS: Weights = (1, 1, 1)
SCORE_WEIGHT = 10.0
"""HAMi's `util.Weight`."""

DEVICE_SCORING_WEIGHTS_KEY = "hami.io/device-scoring-weights"

_F32 = struct.Struct("f")
_EXACT_INT = 1 << 24


def f32(x: float) -> float:
    """Round one float64 to the nearest float32 (returned as a Python float)."""
    result: float = _F32.unpack(_F32.pack(x))[0]
    return result


def f32_all(values: Sequence[float]) -> list[float]:
    """Round many float64 values to float32 in one call."""
    return array("f", values).tolist()


def _i2f(value: int) -> float:
    """Go's `float32(int32)`: exact below 2**24, rounded above."""
    if -_EXACT_INT <= value <= _EXACT_INT:
        return float(value)
    return f32(float(value))


class ScoringWeightsError(ValueError):
    """An invalid `hami.io/device-scoring-weights` annotation; the whole Filter fails with it."""


_GO_INT64 = re.compile(r"[+-]?[0-9]+\Z")
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def parse_scoring_weights(value: str) -> Weights:
    """Parse `slot=<int>,core=<int>,memory=<int>` (any order, whitespace allowed).

    Error texts are HAMi's, so the Filter error the user sees is the same.
    """
    prefix = f"invalid {DEVICE_SCORING_WEIGHTS_KEY} annotation {go_quote(value)}"
    parts = value.split(",")
    if len(parts) != 3:
        raise ScoringWeightsError(f"{prefix}: expected slot, core, and memory weights")
    weights: dict[str, int] = {}
    for part in parts:
        key, eq, raw = part.strip().partition("=")
        if not eq:
            raise ScoringWeightsError(f"{prefix}: expected key=value entries")
        key = key.strip()
        if key in weights:
            raise ScoringWeightsError(f"{prefix}: duplicate {go_quote(key)} weight")
        raw = raw.strip()
        if _GO_INT64.match(raw) is None or not _INT64_MIN <= int(raw) <= _INT64_MAX:
            raise ScoringWeightsError(f"{prefix}: {go_quote(key)} weight must be an integer")
        weight = int(raw)
        if weight < 0:
            raise ScoringWeightsError(f"{prefix}: {go_quote(key)} weight must not be negative")
        if key not in ("slot", "core", "memory"):
            raise ScoringWeightsError(f"{prefix}: unknown weight {go_quote(key)}")
        weights[key] = weight
    # Three entries, no duplicates, all known: every key is present.
    result = (weights["slot"], weights["core"], weights["memory"])
    if result == (0, 0, 0):
        raise ScoringWeightsError(f"{prefix}: at least one weight must be positive")
    return result


def pod_scoring_weights(annotations: Mapping[str, str]) -> Weights:
    """Weights of a pod: the annotation when present (may raise), else the defaults."""
    value = annotations.get(DEVICE_SCORING_WEIGHTS_KEY)
    if value is None:
        return DEFAULT_WEIGHTS
    return parse_scoring_weights(value)


def request_terms(
    requests: Mapping[str, ContainerDeviceRequest], dev_type: str, devmem: int
) -> tuple[int, int, int]:
    """(reqN, reqCore, reqMem) of the request entries whose Type equals the device's type.

    Requests carry the vendor key ("NVIDIA") and real devices a model name, so in production
    these are all zero (§5.5 note) — only devices typed exactly "NVIDIA" see request terms.
    """
    n = core = mem = 0
    for req in requests.values():
        if req.type != dev_type:
            continue
        n += 1
        core += req.coresreq
        pct = req.mem_percentage_req
        if pct != 0 and pct != PERCENTAGE_UNSET:
            mem += devmem * pct // 100 if devmem * pct >= 0 else -((-devmem * pct) // 100)
        else:
            mem += req.memreq
    return n, core, mem


_MEMO: dict[tuple[int, int, int, int, int, int, Weights], float] = {}
_MEMO_LIMIT = 1 << 16


def score_of(
    count: int, devcore: int, devmem: int, *, slots: int, cores: int, mem: int, weights: Weights
) -> float:
    """10*(ws*slots/count + wc*cores/devcore + wm*mem/devmem) in float32, memoised.

    The score depends only on these integers, and a cluster has few distinct combinations
    (idle devices, common request sizes), so most calls are one dict lookup.
    """
    key = (count, devcore, devmem, slots, cores, mem, weights)
    score = _MEMO.get(key)
    if score is not None:
        return score
    if count == 0 or devcore == 0 or devmem == 0:
        score = 0.0
    else:
        u = f32(_i2f(slots) / _i2f(count))
        c = f32(_i2f(cores) / _i2f(devcore))
        m = f32(_i2f(mem) / _i2f(devmem))
        ws, wc, wm = weights
        if weights != DEFAULT_WEIGHTS:  # x * 1.0 is exact, so the common case skips three roundings
            u, c, m = f32(_i2f(ws) * u), f32(_i2f(wc) * c), f32(_i2f(wm) * m)
        score = f32(SCORE_WEIGHT * f32(f32(u + c) + m))
    if len(_MEMO) >= _MEMO_LIMIT:
        _MEMO.clear()
    _MEMO[key] = score
    return score


def device_scores(
    devices: Sequence[DeviceInfo],
    used: Sequence[int],
    usedcores: Sequence[int],
    usedmem: Sequence[int],
    *,
    requests: Mapping[str, ContainerDeviceRequest],
    weights: Weights = DEFAULT_WEIGHTS,
) -> list[float]:
    """Float32 scores of `devices` (aligned with the usage sequences) for one container's requests."""
    types = {r.type for r in requests.values()} if requests else ()
    out: list[float] = []
    for i, d in enumerate(devices):
        if types and d.type in types:
            rn, rc, rm = request_terms(requests, d.type, d.devmem)
            out.append(
                score_of(d.count, d.devcore, d.devmem, slots=rn + used[i], cores=rc + usedcores[i],
                    mem=rm + usedmem[i], weights=weights
                )
            )
        else:
            out.append(score_of(d.count, d.devcore, d.devmem, slots=used[i], cores=usedcores[i],
                mem=usedmem[i], weights=weights))
    return out


def device_score(
    dev: DeviceInfo,
    used: int,
    usedcores: int,
    usedmem: int,
    *,
    requests: Mapping[str, ContainerDeviceRequest] | None = None,
    weights: Weights = DEFAULT_WEIGHTS,
) -> float:
    """Float32 score of one device (see `device_scores`)."""
    return device_scores([dev], [used], [usedcores], [usedmem], requests=requests or {}, weights=weights)[0]


def node_default_score(devices: Sequence[DeviceInfo], usage: Sequence[DeviceUsage]) -> float:
    """HAMi `ComputeDefaultScore`: 10*(Σused/Σcount + Σusedcores/Σdevcore + Σusedmem/Σdevmem).

    Over all devices of the node (every vendor), existing usage only; 0 when a denominator is 0.
    """
    total = total_core = total_mem = 0
    for d in devices:
        total += d.count
        total_core += d.devcore
        total_mem += d.devmem
    if total == 0 or total_core == 0 or total_mem == 0:
        return 0.0
    used = used_core = used_mem = 0
    for u in usage:
        used += u.used
        used_core += u.usedcores
        used_mem += u.usedmem
    a, b, c = f32_all(
        [_i2f(used) / _i2f(total), _i2f(used_core) / _i2f(total_core), _i2f(used_mem) / _i2f(total_mem)]
    )
    return f32(SCORE_WEIGHT * f32(f32(a + b) + c))
