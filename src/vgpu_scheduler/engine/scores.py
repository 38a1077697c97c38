"""Device and node scores (hami-spec §5.5) with Go float32 semantics.

HAMi computes scores in float32 and sorts devices by them, so two devices whose scores differ in
float64 may tie in float32 (and a tie changes which device is taken). Every intermediate value is
therefore rounded to float32 exactly where Go rounds it: each int->float32 conversion, each
division, multiplication and addition. Rounding a float64 result of one float32 operation to
float32 gives the correctly rounded float32 result (53 >= 2*24+2 bits), so float64 arithmetic
plus a rounding step is exact. Rounding is batched through `array('f')` (one C call per stage for
all devices of a node) because per-value struct packing costs ~5x more.
"""

from __future__ import annotations

import re
import struct
from array import array
from collections.abc import Mapping, Sequence

from vgpu_scheduler.engine.nodeview import DeviceUsage
from vgpu_scheduler.model import PERCENTAGE_UNSET, ContainerDeviceRequest, DeviceInfo
from vgpu_scheduler.wire.gocompat import go_quote

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


def _request_terms(
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


def device_scores(
    devices: Sequence[DeviceInfo],
    used: Sequence[int],
    usedcores: Sequence[int],
    usedmem: Sequence[int],
    requests: Mapping[str, ContainerDeviceRequest],
    weights: Weights = DEFAULT_WEIGHTS,
) -> list[float]:
    """Float32 scores of `devices` (aligned with the usage sequences) for one container's requests."""
    n = len(devices)
    zero = [False] * n
    ratios: list[float] = [0.0] * (3 * n)
    types_seen = requests and {r.type for r in requests.values()}
    for i, d in enumerate(devices):
        count, devcore, devmem = d.count, d.devcore, d.devmem
        if count == 0 or devcore == 0 or devmem == 0:
            zero[i] = True
            continue
        if types_seen and d.type in types_seen:
            rn, rc, rm = _request_terms(requests, d.type, devmem)
        else:
            rn = rc = rm = 0
        j = 3 * i
        ratios[j] = _i2f(rn + used[i]) / _i2f(count)
        ratios[j + 1] = _i2f(rc + usedcores[i]) / _i2f(devcore)
        ratios[j + 2] = _i2f(rm + usedmem[i]) / _i2f(devmem)
    r = f32_all(ratios)
    ws, wc, wm = weights
    if ws != 1 or wc != 1 or wm != 1:
        fs, fc, fm = _i2f(ws), _i2f(wc), _i2f(wm)
        r = f32_all([v * (fs, fc, fm)[k % 3] for k, v in enumerate(r)])
    first = f32_all([r[3 * i] + r[3 * i + 1] for i in range(n)])
    second = f32_all([first[i] + r[3 * i + 2] for i in range(n)])
    scores = f32_all([SCORE_WEIGHT * s for s in second])
    for i in range(n):
        if zero[i]:
            scores[i] = 0.0
    return scores


def device_score(
    dev: DeviceInfo,
    used: int,
    usedcores: int,
    usedmem: int,
    requests: Mapping[str, ContainerDeviceRequest] | None = None,
    weights: Weights = DEFAULT_WEIGHTS,
) -> float:
    """Float32 score of one device (see `device_scores`)."""
    return device_scores([dev], [used], [usedcores], [usedmem], requests or {}, weights)[0]


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
