"""The node handshake and device health rules (§3.4), as pure functions.

The scheduler stamps `hami.io/node-handshake: Requesting_<YYYY-MM-DD HH:MM:SS>` (its local time) on
every node it looks at. A `Requesting_` stamp older than 60 s on a node whose allocatable device
count is 0 means the device plugin is gone: the node's devices are unhealthy. Anything else in the
annotation (absent, the ≤ v2.7 plugins' `Reported <time>`, the ≤ v2.6 `Deleted_<time>`) is answered
by a fresh `Requesting_<now>` and a re-read of the inventory.

Vendors with a handshake annotation use `check_node` as their CheckHealth (NVIDIA wraps it with
per-node counters, `devices.nvidia.health`). Nothing here does I/O or reads a clock: the
registration loop passes `now` and performs the writes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime, timedelta, tzinfo
from functools import lru_cache
from typing import Any

from vgpu_scheduler.devices.protocol import Health
from vgpu_scheduler.wire import objects
from vgpu_scheduler.wire.quantity import quantity_as_int64

REQUESTING = "Requesting"
REQUESTING_PREFIX = "Requesting_"
HANDSHAKE_TIMEOUT = timedelta(seconds=60)

# Go's time.DateTime layout "2006-01-02 15:04:05" as time.Parse reads it: fixed-width year, month,
# day, minute and second; the hour may have one or two digits; a fractional second ("." or ",") may
# follow the seconds even though the layout has none; nothing else may follow. Digits are ASCII
# only (re.ASCII: a bare \d would also match other scripts' digits, which Go rejects).
_DATETIME_RE = re.compile(r"(\d{4})-(\d{2})-(\d{2}) (\d{1,2}):(\d{2}):(\d{2})(?:[.,](\d+))?", re.ASCII)


def format_timestamp(now: datetime, tz: tzinfo | None = None) -> str:
    """`now` as `YYYY-MM-DD HH:MM:SS` wall-clock time in `tz` (None: the process's local zone).

    A naive `now` is taken as already being wall-clock time in that zone."""
    if now.tzinfo is not None:
        now = now.astimezone(tz)
    return now.strftime("%Y-%m-%d %H:%M:%S")


@lru_cache(maxsize=64)
def parse_timestamp(text: str, tz: tzinfo | None = None) -> datetime | None:
    """The instant a `YYYY-MM-DD HH:MM:SS` wall-clock time in `tz` names, or None if Go's
    `time.Parse(time.DateTime, ...)` would reject `text`. Kept for a few texts: a registration
    pass stamps every node with the same time, so the next pass reads one text thousands of times."""
    m = _DATETIME_RE.fullmatch(text)
    if m is None:
        return None
    year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
    frac = m.group(7) or ""
    micro = int((frac + "000000")[:6]) if frac else 0
    try:
        naive = datetime(year, month, day, hour, minute, second, micro)
    except ValueError:  # month 13, Feb 30, hour 24 ... (Go: "... out of range")
        return None
    # astimezone() on a naive datetime interprets it in the local zone, as time.Local does.
    return naive.replace(tzinfo=tz) if tz is not None else naive.astimezone()


def format_requesting(now: datetime, tz: tzinfo | None = None) -> str:
    """The handshake value the scheduler writes: `Requesting_<YYYY-MM-DD HH:MM:SS>`."""
    return REQUESTING_PREFIX + format_timestamp(now, tz)


def requesting_patch(key: str, value: str | None) -> dict[str, object]:
    """The node merge patch that sets (or with None, deletes) one handshake annotation."""
    return {"metadata": {"annotations": {key: value}}}


HandshakeResult = Health
"""What the generic check answers (the protocol's health verdict)."""


def allocatable_count(node: Mapping[str, Any], resource: str) -> int:
    """`status.allocatable[resource]` as an integer; absent or not an integer ⇒ 0."""
    alloc = objects.status(node).get("allocatable")
    value = alloc.get(resource) if isinstance(alloc, Mapping) else None
    if not isinstance(value, str | int):
        return 0
    count = quantity_as_int64(value)
    return count if count is not None else 0


def check_node(
    node: Mapping[str, Any], key: str, count_resource: str, now: datetime, *, tz: tzinfo | None = None
) -> Health:
    """HAMi's `device.CheckHealth` for a vendor with handshake annotation `key` on a node object."""
    value = objects.annotation(node, key)
    return check_handshake(value, now, allocatable_count(node, count_resource), tz)


def check_handshake(
    value: str | None, now: datetime, allocatable: int, tz: tzinfo | None = None
) -> HandshakeResult:
    """The generic check of §3.4 for one vendor's handshake annotation value (None: absent).

    `now` must be timezone-aware (or naive local time when `tz` is None); `allocatable` is the
    node's allocatable count of the vendor's count resource (0 when absent or not an integer)."""
    if value is None or REQUESTING not in value:
        # Absent, "Reported ...", "Deleted_...", anything else: ask again and re-read.
        return HandshakeResult(healthy=True, need_update=True, write_requesting=True)
    _, sep, stamp = value.partition("_")
    if not sep:
        return HandshakeResult(healthy=True, need_update=False)
    requested = parse_timestamp(stamp, tz)
    if requested is None:
        return HandshakeResult(healthy=True, need_update=False)
    if _as_comparable(now, requested) < requested + HANDSHAKE_TIMEOUT:
        return HandshakeResult(healthy=True, need_update=False)
    if allocatable > 0:
        return HandshakeResult(healthy=True, need_update=False)
    return HandshakeResult(healthy=False, need_update=False)


def _as_comparable(now: datetime, other: datetime) -> datetime:
    """Make `now` comparable with the aware `other` (a naive `now` is local wall-clock time)."""
    if now.tzinfo is None and other.tzinfo is not None:
        return now.astimezone()
    return now
