"""Requeue nudges: a pod our filter refused just before devices were freed is tried again at once.

kube-scheduler retries a pod an extender refused when a cluster event arrives (with no failed
plugin recorded, any event is worth a retry). When the pod holding the devices is deleted,
kube-scheduler and our informer see the deletion at nearly the same time; if kube-scheduler's retry
reaches our filter first, the pod is refused again on the old usage and waits for the next
unrelated event, up to kube-scheduler's 5-minute flush of unschedulable pods. So when our state
frees devices, each pod refused in the last few seconds gets one annotation patch
(`vgpu-scheduler.io/requeue`): an update of an unschedulable pod is such an event, and the pod is
retried on the usage we now have. HAMi has the race and no remedy (issue #1130 and friends).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from vgpu_scheduler.cluster.errors import ApiConnectionError, ApiError
from vgpu_scheduler.cluster.writeguard import guarded_writes
from vgpu_scheduler.wire import keys, objects

log = logging.getLogger(__name__)

WINDOW_SECONDS = 5.0
"""Pods refused this long before the devices were freed may have been refused on stale usage."""
REMEMBERED = 10_000
"""At most this many refused pods are remembered (the oldest are forgotten first)."""


class PodPatcher(Protocol):
    async def patch_pod(
        self, namespace: str, name: str, merge_patch: Mapping[str, Any]
    ) -> dict[str, Any]: ...


class RequeueNudger:
    """Remembers the pods the filter refused; nudges the recent ones when devices are freed."""

    def __init__(
        self,
        api: PodPatcher,
        *,
        now: Callable[[], float],
        cached_pod: Callable[[str, str], Mapping[str, Any] | None],
        enabled: bool = True,
        is_leader: Callable[[], bool] = lambda: True,
    ) -> None:
        """is_leader: with --leader-elect, a replica that is not the leader nudges nothing (the
        leader's filter refuses and nudges; a deposed replica writes nothing)."""
        self.api = api
        self.now = now
        self.cached_pod = cached_pod
        self.enabled = enabled
        self.is_leader = is_leader
        self._refused: OrderedDict[str, tuple[str, str, float]] = OrderedDict()
        self.nudged = 0
        """Patches written (a counter for tests and metrics)."""
        self._tasks: set[asyncio.Task[None]] = set()

    def refused(self, uid: str, namespace: str, name: str) -> None:
        if not self.enabled or not uid:
            return
        self._refused.pop(uid, None)
        self._refused[uid] = (namespace, name, self.now())
        if len(self._refused) > REMEMBERED:
            self._refused.popitem(last=False)

    def forget(self, uid: str) -> None:
        self._refused.pop(uid, None)

    def devices_freed(self) -> None:
        """Some pod's devices were freed: nudge every pod refused within the window, once."""
        if not self._refused:
            return
        if not self.is_leader():
            self._refused.clear()  # refused by this replica while it led: the leader's now
            return
        cutoff = self.now() - WINDOW_SECONDS
        due = [(uid, ns, name) for uid, (ns, name, when) in self._refused.items() if when >= cutoff]
        for uid, _, _ in due:
            del self._refused[uid]
        stale = [uid for uid, (_, _, when) in self._refused.items() if when < cutoff]
        for uid in stale:  # refused long before: kube-scheduler's own event retries them
            del self._refused[uid]
        for uid, namespace, name in due:
            pod = self.cached_pod(namespace, name)
            if pod is None or objects.uid(pod) != uid or objects.node_name(pod):
                continue
            task = asyncio.get_running_loop().create_task(self._nudge(namespace, name))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _nudge(self, namespace: str, name: str) -> None:
        patch = {"metadata": {"annotations": {keys.REQUEUE: str(int(self.now()))}}}
        try:
            # Asked again as the patch leaves: it may wait in the client's rate limiter, and this
            # replica be paused there past its lease.
            with guarded_writes(self._still_leading):
                await self.api.patch_pod(namespace, name, patch)
            self.nudged += 1
        except (ApiError, ApiConnectionError) as exc:  # gone or unreachable: nothing to retry
            log.debug("requeue nudge of %s/%s failed: %s", namespace, name, exc)
        except _Deposed:
            log.debug("requeue nudge of %s/%s dropped: not the leader any more", namespace, name)

    def _still_leading(self) -> None:
        if not self.is_leader():
            raise _Deposed

    async def drain(self) -> None:
        """Wait for the nudges in flight (tests, shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)


class _Deposed(Exception):
    """A nudge stopped as it left: this replica is not the leader any more."""
