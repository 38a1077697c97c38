"""A vendor's own node lock: one annotation holding a bare RFC 3339 time, naming no holder (§6.2).

Declared by a vendor as `NodeLockSpec(key, names_holder=False, expiry_seconds=…)` (Cambricon's
`cambricon.com/dsmlu.lock`). HAMi's rules: no annotation ⇒ write the current time; a value that
does not parse ⇒ the bind fails with Go's parse error; older than the expiry ⇒ taken over; else
the bind fails with the vendor's busy message. The vendor's device plugin deletes the annotation
after Allocate, whoever wrote it.

Differences from HAMi, same wire value: every write carries the node's resourceVersion, so of two
scheduler replicas (or two binds) racing for a free or expired lock exactly one wins and the other
fails as busy (HAMi's plain merge patch lets both believe they hold it); an expired lock is taken
over with one guarded patch instead of delete-then-set; the decision is made on a fresh read of
the node rather than the informer's copy; and the scheduler deletes the lock on a failed bind only
while it still holds the value this bind wrote (HAMi's release deletes it unconditionally, even one
another pod holds).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from vgpu_scheduler.cluster.errors import ApiError
from vgpu_scheduler.cluster.nodelock import (
    CONFLICT_RETRIES,
    LockApi,
    NodeLockContention,
    NodeLockError,
    format_rfc3339,
)
from vgpu_scheduler.cluster.nodelock import _backoff as backoff
from vgpu_scheduler.devices.protocol import NodeLockSpec
from vgpu_scheduler.wire.gotime import GoTimeParseError, parse_rfc3339

log = logging.getLogger(__name__)


def _annotations(node: dict[str, Any]) -> dict[str, str]:
    return node.get("metadata", {}).get("annotations") or {}


def _resource_version(node: dict[str, Any]) -> str:
    return str(node.get("metadata", {}).get("resourceVersion", ""))


class StampLocker:
    """Takes and releases one vendor lock without holder on nodes."""

    def __init__(
        self,
        api: LockApi,
        spec: NodeLockSpec,
        *,
        now: Callable[[], datetime] = lambda: datetime.now().astimezone(),
    ) -> None:
        self._api = api
        self.spec = spec
        self._now = now

    def busy_message(self, node_name: str) -> str:
        return self.spec.busy_message.replace("{node}", node_name)

    async def lock(self, node_name: str) -> str:
        """Write the lock; returns the value written. Raises NodeLockContention while another
        bind's lock is live, NodeLockError for an unparsable value or when writes keep failing."""
        key = self.spec.key
        for attempt in range(CONFLICT_RETRIES):
            node = await self._api.get_node(node_name)
            current = _annotations(node).get(key)
            if current is not None:
                try:
                    taken_at = parse_rfc3339(current)
                except GoTimeParseError as exc:
                    raise NodeLockError(str(exc)) from None
                if self._now() - taken_at <= timedelta(seconds=self.spec.expiry_seconds):
                    raise NodeLockContention(self.busy_message(node_name), holder_named=True)
                log.info("node %s lock %s=%r expired, taking it over", node_name, key, current)
            value = format_rfc3339(self._now())
            patch = {"metadata": {"annotations": {key: value}, "resourceVersion": _resource_version(node)}}
            try:
                await self._api.patch_node(node_name, patch, answer=False)
                return value
            except ApiError as exc:  # a 409: someone wrote the node since our read; read again
                log.info("node %s lock %s write failed (%s), retrying", node_name, key, exc.message)
                await asyncio.sleep(backoff(attempt))
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
