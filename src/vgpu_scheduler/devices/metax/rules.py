"""Metax sGPU placement rules: app classes, QoS memory, link zones (HAMi metax `sdevice.go`,
`qos.go`, `score.go`).

Plain functions over devices and their usage so the fit, the node score and the tests share them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from vgpu_scheduler.model import DeviceUsage

APP_CLASS = "metax-tech.com/sgpu-app-class"
ONLINE = "online"
OFFLINE = "offline"

DIRECT_LINK_SCORE = 10


# --------------------------------------------------------------------------------------------
# App classes (online / offline pods sharing a device)


def class_counts(usage: DeviceUsage) -> tuple[int, int]:
    """(online, offline) pods counted on the device."""
    online = offline = 0
    for pod in usage.pod_infos:
        cls = pod.get(APP_CLASS)
        if cls == ONLINE:
            online += 1
        elif cls == OFFLINE:
            offline += 1
    return online, offline


def app_class_fits(request_class: str, usage: DeviceUsage) -> bool:
    """HAMi `checkAppClass`: classed pods never share with unclassed ones, and an offline pod
    never joins a device that runs an online one; an unused device takes anyone."""
    if usage.used == 0:
        return True
    online, offline = class_counts(usage)
    device_classed = online > 0 or offline > 0
    request_classed = request_class in (ONLINE, OFFLINE)
    if device_classed != request_classed:
        return False
    return not (online > 0 and request_class == OFFLINE)


def _online_order_before(a: tuple[int, int], b: tuple[int, int]) -> bool:
    """HAMi's less(a, b) over (online, offline) counts: fewer online pods first, devices with
    only offline pods last (fewer offline first among them)."""
    a_only_off = a[0] == 0 and a[1] > 0
    b_only_off = b[0] == 0 and b[1] > 0
    if a_only_off and b_only_off:
        return a[1] < b[1]
    if a_only_off:
        return False
    if b_only_off:
        return True
    if a[0] == b[0]:
        return a[1] < b[1]
    return a[0] < b[0]


def prioritize_online(candidates: Sequence[int], usage: Sequence[DeviceUsage], require: int) -> list[int]:
    """HAMi `prioritizeOnlineDevices`: the `require` best candidates (node positions) for an
    online pod. Go's sort.Slice is an insertion sort (stable) for up to 12 elements; a stable sort
    reproduces it there and is deterministic beyond."""
    if len(candidates) <= require:
        return list(candidates)
    counts = {p: class_counts(usage[p]) for p in candidates}
    out: list[int] = []
    for p in candidates:  # stable insertion by `_online_order_before`
        i = len(out)
        while i > 0 and _online_order_before(counts[p], counts[out[i - 1]]):
            i -= 1
        out.insert(i, p)
    return out[:require]


def prioritize_exclusive(candidates: Sequence[int], zones: Mapping[int, int], require: int) -> list[int]:
    """HAMi `prioritizeExclusiveDevices`: whole devices, preferably all in one MetaLink zone
    (the smallest zone that holds them), else across zones (smallest first), else with devices
    outside any zone. HAMi walks a Go map (random order); zones are taken here in the order their
    first candidate appears, and the sort by size is stable."""
    if len(candidates) <= require:
        return list(candidates)
    by_zone: dict[int, list[int]] = {}
    for p in candidates:
        by_zone.setdefault(zones.get(p, 0), []).append(p)
    linked = sorted((devs for zone, devs in by_zone.items() if zone > 0), key=len)
    others = [p for zone, devs in by_zone.items() if zone <= 0 for p in devs]
    for devs in linked:
        if len(devs) >= require:
            return devs[:require]
    picked: list[int] = []
    for p in [*(p for devs in linked for p in devs), *others]:
        picked.append(p)
        if len(picked) >= require:
            return picked
    return list(candidates[:require])


# --------------------------------------------------------------------------------------------
# Node scores (policy-neutral: higher is better)


@dataclass(slots=True, frozen=True)
class LinkDevice:
    uuid: str
    link_zone: int


def link_score(devices: Sequence[LinkDevice]) -> int:
    """Σ over device pairs of DIRECT_LINK_SCORE when both are in the same (non-zero) zone."""
    score = 0
    for i, a in enumerate(devices):
        for b in devices[i + 1:]:
            if a.uuid != b.uuid and a.link_zone != 0 and a.link_zone == b.link_zone:
                score += DIRECT_LINK_SCORE
    return score


def score_exclusive(allocated: Sequence[LinkDevice], idle: Sequence[LinkDevice]) -> int:
    """HAMi `scoreExclusiveDevices`: 10 × the links inside the allocation minus the links the
    allocation breaks among the node's idle devices."""
    taken = {d.uuid for d in allocated}
    rest = [d for d in idle if d.uuid not in taken]
    allocated_score = link_score(allocated)
    loss = link_score(idle) - allocated_score - link_score(rest)
    return 10 * allocated_score - loss


def score_online(chosen: set[str], ids: Sequence[str], usage: Sequence[DeviceUsage]) -> int:
    """HAMi `scoreOnlineDevices`: penalties for the pods already on the chosen devices (a device
    with only offline pods costs the most, as its offline pods get suspended)."""
    result = 0
    for uuid, u in zip(ids, usage, strict=True):
        if uuid not in chosen:
            continue
        online, offline = class_counts(u)
        if offline > 0 and online == 0:
            result += -100 * offline
        else:
            result += -20 * online - 2 * offline
    return result


# --------------------------------------------------------------------------------------------
# QoS policies being switched (HAMi `JitteryQosCache`)


class JitteryQos:
    """Device uuid -> the QoS policy a bind asked for, until the inventory reports it.

    After a pod is placed the device plugin switches the device's QoS policy; until the node
    annotation shows the new policy, fits read the expected one from here.
    """

    def __init__(self) -> None:
        self._expected: dict[str, str] = {}

    def sync(self, reported: Iterable[tuple[str, str]]) -> None:
        """Forget the devices whose reported (uuid, policy) is the expected one."""
        for uuid, qos in reported:
            if self._expected.get(uuid) == qos:
                del self._expected[uuid]

    def add(self, uuid: str, expected: str) -> None:
        self._expected[uuid] = expected

    def get(self, uuid: str) -> str | None:
        return self._expected.get(uuid)

    def __len__(self) -> int:
        return len(self._expected)
