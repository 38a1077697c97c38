"""What a node's locks mean at a given moment, read from the node alone (no API call, no write).

Both lock kinds (§6.2) are judged by the same rule as the lockers that take them: live from their
timeout before their time (clock skew) to their timeout after it; expired, dated further ahead, or
unparsable means stale, i.e. the next bind takes it over. `node_lock_deadlines` says when a node's
lock state next changes with time (for the simulator, which advances its clock to such moments);
`describe_node_locks` says it in words (for explanations).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from vgpu_scheduler.cluster.nodelock import NodeLockError, describe_lock, expiry_of, parse_lock, stale_cause
from vgpu_scheduler.cluster.stamplock import describe_stamp_lock, parse_stamp
from vgpu_scheduler.devices.protocol import NodeLockSpec
from vgpu_scheduler.wire import objects
from vgpu_scheduler.wire.keys import NODE_LOCK


def _distinct(specs: Iterable[NodeLockSpec]) -> list[NodeLockSpec]:
    """One spec per key (vendors naming one key share that lock), sorted by key."""
    by_key = {spec.key: spec for spec in specs}
    return [by_key[key] for key in sorted(by_key)]


def _taken_at(value: str, spec: NodeLockSpec) -> datetime | None:
    """The time in a lock value of this kind, None when it does not parse."""
    try:
        return parse_lock(value).taken_at if spec.names_holder else parse_stamp(value)
    except NodeLockError:
        return None


def node_lock_deadlines(
    node: Mapping[str, Any], timeout: float, specs: Iterable[NodeLockSpec], *, now: datetime
) -> list[datetime]:
    """For each lock annotation of `specs` on the node that is live at `now`, the moment it stops
    being live (its time + its timeout), earliest first.

    `timeout`: the shared owner-format mutex's (`--node-lock-timeout`); a lock without holder
    (`names_holder` false) uses its spec's `expiry_seconds`. A lock that is absent, unparsable,
    expired or dated beyond its timeout ahead of `now` is takeable already and has no deadline.
    A live lock whose holder pod is gone is takeable too, but no moment decides that: it is not
    judged here. Until its deadline a live lock stays live (`now` only moves forward)."""
    annotations = objects.annotations(node)
    deadlines: list[datetime] = []
    for spec in _distinct(specs):
        value = annotations.get(spec.key)
        if value is None:
            continue
        limit = timeout if spec.names_holder else spec.expiry_seconds
        taken_at = _taken_at(value, spec)
        if taken_at is None or stale_cause(taken_at, now=now, timeout=limit) is not None:
            continue
        deadline = expiry_of(taken_at, limit)
        if deadline is not None:
            deadlines.append(deadline)
    return sorted(deadlines)


def describe_node_locks(
    node: Mapping[str, Any], *, now: datetime, timeout: float, specs: Iterable[NodeLockSpec] = ()
) -> str:
    """Every lock on the node in words ("" when none): the shared `hami.io/mutex.lock` always,
    and each vendor lock without holder among `specs`; a stale one says it will be taken over."""
    parts = [describe_lock(node, now=now, timeout=timeout)]
    parts += [
        describe_stamp_lock(node, spec, now=now)
        for spec in _distinct(specs)
        if not spec.names_holder and spec.key != NODE_LOCK
    ]
    return "; ".join(part for part in parts if part)
