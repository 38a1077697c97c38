"""A vendor's own node lock: one annotation holding a bare RFC 3339 time, naming no holder (§6.2).

Declared by a vendor as `NodeLockSpec(key, names_holder=False, expiry_seconds=…)` (Cambricon's
`cambricon.com/dsmlu.lock`; no other vendor declares one). HAMi's rules: no annotation ⇒ write the
current time; a value that does not parse ⇒ the bind fails with Go's parse error; older than the
expiry ⇒ taken over; else the bind fails with the vendor's busy message. The vendor's device plugin
deletes the annotation after Allocate, whoever wrote it.

Differences from HAMi, same wire value: every write carries the node's resourceVersion, so of two
scheduler replicas (or two binds) racing for a free or expired lock exactly one wins and the other
fails as busy (HAMi's plain merge patch lets both believe they hold it); an expired lock is taken
over with one guarded patch instead of delete-then-set; the decision is made on a fresh read of
the node rather than the informer's copy; and the scheduler deletes the lock on a failed bind only
while it still holds the value this bind wrote (HAMi's release deletes it unconditionally, even one
another pod holds).

A lock that can never expire is stale and taken over like an expired one: a value that does not
parse, or a time further ahead of now than the expiry (the expiry itself is allowed for clock skew).
In HAMi such a lock fails the bind, and its failure path (Cambricon's ReleaseNodeLock, which deletes
the annotation whatever it holds) clears it, so the pod binds on its retry. Our failure path keeps
deleting only the value this bind wrote, so that a failed bind can never free a lock another bind
holds; the takeover is what lets the pod bind instead (on the first attempt, not the retry). Each
takeover is logged and counted in `vgpu_scheduler_node_lock_takeovers_total` by cause (`expired`,
`future`, `unparsable`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from vgpu_scheduler.cluster.errors import ApiError
from vgpu_scheduler.cluster.lockstats import UNPARSABLE, NodeLockStats
from vgpu_scheduler.cluster.nodelock import (
    CONFLICT_RETRIES,
    TAKEN_OVER_BECAUSE,
    LockApi,
    NodeLockContention,
    NodeLockError,
    expiry_of,
    format_rfc3339,
    stale_cause,
    stale_words,
)
from vgpu_scheduler.cluster.nodelock import _backoff as backoff
from vgpu_scheduler.devices.protocol import NodeLockSpec
from vgpu_scheduler.gocompat.gotime import GoTimeParseError, parse_rfc3339
from vgpu_scheduler.wire import objects

log = logging.getLogger(__name__)


def _annotations(node: dict[str, Any]) -> dict[str, str]:
    return node.get("metadata", {}).get("annotations") or {}


def _resource_version(node: dict[str, Any]) -> str:
    return str(node.get("metadata", {}).get("resourceVersion", ""))


def parse_stamp(value: str) -> datetime:
    """The time of a lock without holder; NodeLockError with Go's parse error when it has none."""
    try:
        return parse_rfc3339(value)
    except GoTimeParseError as exc:
        raise NodeLockError(str(exc)) from None


def stamp_stale_cause(value: str, *, now: datetime, expiry: float) -> str | None:
    """Why the lock value is stale at `now` (EXPIRED, FUTURE, UNPARSABLE), None while it is live."""
    try:
        taken_at = parse_stamp(value)
    except NodeLockError:
        return UNPARSABLE
    return stale_cause(taken_at, now=now, timeout=expiry)


def stamp_expires_at(value: str, expiry: float) -> datetime | None:
    """When the lock value stops being live by age (its time + `expiry`); None when it does not
    parse (takeable already). `lock_expires_at` for a lock without holder."""
    try:
        return expiry_of(parse_stamp(value), expiry)
    except NodeLockError:
        return None


def describe_stamp_lock(node: Mapping[str, Any], spec: NodeLockSpec, *, now: datetime) -> str:
    """The vendor lock `spec` on the node in words ("" when there is none), for explanations."""
    value = objects.annotation(node, spec.key)
    if value is None:
        return ""
    try:
        taken_at = parse_stamp(value)
    except NodeLockError as exc:
        return f"unparsable {spec.key} {value!r}: {exc}; the next bind takes it over"
    text = f"{spec.key} held since {format_rfc3339(taken_at)}"
    cause = stale_cause(taken_at, now=now, timeout=spec.expiry_seconds)
    return text if cause is None else f"{text}, {stale_words(cause, spec.expiry_seconds)}"


class StampLocker:
    """Takes and releases one vendor lock without holder on nodes."""

    def __init__(
        self,
        api: LockApi,
        spec: NodeLockSpec,
        *,
        now: Callable[[], datetime] = lambda: datetime.now().astimezone(),
        stats: NodeLockStats | None = None,
    ) -> None:
        """`stats`: where takeovers are counted (the scheduler's NodeLocker's, so that every lock
        kind shows in one metric); None counts nowhere."""
        self._api = api
        self.spec = spec
        self._now = now
        self._stats = stats

    def busy_message(self, node_name: str) -> str:
        return self.spec.busy_message.replace("{node}", node_name)

    async def lock(self, node_name: str) -> str:
        """Write the lock; returns the value written. Raises NodeLockContention while another
        bind's lock is live, NodeLockError when writes keep failing. A stale lock (expired, dated
        beyond the expiry ahead, or unparsable) is taken over."""
        key = self.spec.key
        for attempt in range(CONFLICT_RETRIES):
            node = await self._api.get_node(node_name)
            current = _annotations(node).get(key)
            stale: str | None = None
            if current is not None:
                stale = stamp_stale_cause(current, now=self._now(), expiry=self.spec.expiry_seconds)
                if stale is None:
                    raise NodeLockContention(self.busy_message(node_name), holder_named=True)
            value = format_rfc3339(self._now())
            patch = {"metadata": {"annotations": {key: value}, "resourceVersion": _resource_version(node)}}
            try:
                await self._api.patch_node(node_name, patch, answer=False)
            except ApiError as exc:  # a 409: someone wrote the node since our read; read again
                log.info("node %s lock %s write failed (%s), retrying", node_name, key, exc.message)
                await asyncio.sleep(backoff(attempt))
                continue
            if stale is not None:  # logged and counted once, when the takeover is written
                why = TAKEN_OVER_BECAUSE[stale]
                log.info("node %s lock %s=%r %s, taking it over", node_name, key, current, why)
                if self._stats is not None:
                    self._stats.count_takeover(stale)
            return value
        raise NodeLockError(f"setNodeLock exceeds retry count {CONFLICT_RETRIES}")

    async def release(self, node_name: str, value: str | None) -> None:
        """Delete the lock while it still holds `value` (None: whatever it holds, as the vendor's
        device plugin does). A lock taken over meanwhile is someone else's and stays."""
        key = self.spec.key
        for attempt in range(CONFLICT_RETRIES):
            try:
                node = await self._api.get_node(node_name)
            except ApiError as exc:
                if exc.status == 404:
                    return
                raise
            current = _annotations(node).get(key)
            if current is None or (value is not None and current != value):
                return
            patch = {"metadata": {"annotations": {key: None}, "resourceVersion": _resource_version(node)}}
            try:
                await self._api.patch_node(node_name, patch, answer=False)
                return
            except ApiError as exc:
                if exc.status != 409:
                    raise
                await asyncio.sleep(backoff(attempt))
        raise NodeLockError(f"releaseNodeLock exceeds retry count {CONFLICT_RETRIES}")
