"""Pending reservations: filter decisions waiting for their bind, and what they mean for others.

One concern: the devices the filter reserved and the binds it expects. `PendingBinds` is the
uid -> decision table with, per node, the pods whose bind is still expected there; `Reservations`
adds the rest of a reservation's life: the uids of deleted pods (a late filter for one must reserve
nothing), the busy-node test of lock-aware placement (a node about to be locked, or locked by
another live bind, ranks last), dropping a reservation, and the sweep behind pod deletion.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from vgpu_scheduler.cluster.nodelock import LockValue, NodeLocker, dangling_cause
from vgpu_scheduler.engine.decide import Chosen
from vgpu_scheduler.engine.state import SchedulerState
from vgpu_scheduler.scheduler.settings import ExtenderSettings

log = logging.getLogger(__name__)

RECENTLY_DELETED = 10_000
"""How many deleted pod uids are remembered to refuse a late filter for them (see `note_deleted`)."""
HOLDERS_SEEN_KEPT = 4096
"""How many nodes' lock holders `_holder_alive` keeps judged (then it starts again from none)."""


class PendingBinds:
    """Filter decisions waiting for their bind, and per node until when each bind may still come."""

    __slots__ = ("decisions", "per_node")

    def __init__(self) -> None:
        # uid -> the decision (the uncollapsed per-container allocation the bind patch writes).
        # Dropped at bind, on re-filter and on pod deletion.
        self.decisions: dict[str, Chosen] = {}
        # node -> uid -> until when its bind may still come (filter time + bind timeout).
        self.per_node: dict[str, dict[str, float]] = {}

    def get(self, uid: str) -> Chosen | None:
        return self.decisions.get(uid)

    def set(self, uid: str, decision: Chosen, until: float | None) -> None:
        """Remember `decision`; `until` (None: its bind takes no node lock) marks its node busy."""
        self.pop(uid)
        self.decisions[uid] = decision
        if until is not None:
            self.per_node.setdefault(decision.node, {})[uid] = until

    def pop(self, uid: str) -> Chosen | None:
        decision = self.decisions.pop(uid, None)
        if decision is not None:
            waiting = self.per_node.get(decision.node)
            if waiting is not None:
                waiting.pop(uid, None)
                if not waiting:
                    del self.per_node[decision.node]
        return decision


class Reservations:
    """The pending binds over the scheduler state's reservations, read by filter and bind alike."""

    __slots__ = ("cached_pod", "deleted", "holders_seen", "locker", "pending", "settings", "state")

    def __init__(
        self,
        *,
        state: SchedulerState,
        locker: NodeLocker,
        cached_pod: Callable[[str, str], dict[str, Any] | None],
        settings: ExtenderSettings,
    ) -> None:
        self.state = state
        self.locker = locker
        self.cached_pod = cached_pod
        self.settings = settings
        self.pending = PendingBinds()
        # uids of pods whose deletion the informer has delivered, oldest first (bounded).
        self.deleted: dict[str, None] = {}
        # node -> (lock value, holder pod object, alive): `_holder_alive`'s memo, by identity.
        self.holders_seen: dict[str, tuple[LockValue, Mapping[str, Any], bool]] = {}

    def get(self, uid: str) -> Chosen | None:
        """The decision whose bind is expected for this pod, if any."""
        return self.pending.get(uid)

    def set(self, uid: str, decision: Chosen, *, locks: bool = True) -> None:
        """Remember the decision until its bind; `locks`: that bind takes the node lock, so the
        node is busy for other locking pods meanwhile."""
        settings = self.settings
        self.pending.set(uid, decision, settings.now() + settings.bind_timeout if locks else None)

    def pop(self, uid: str) -> Chosen | None:
        """Forget the pending bind; the devices stay reserved in the state."""
        return self.pending.pop(uid)

    def drop(self, uid: str) -> None:
        """Forget the pending bind and free the devices reserved for the pod."""
        if uid:
            self.pop(uid)
            self.state.release(uid)

    def note_deleted(self, uid: str) -> None:
        """The pod is gone: no bind is coming. kube-scheduler's cache may lag ours and still filter
        it; no event will ever come for it again, so a reservation made then would never be freed:
        remember the uid so such a filter is refused (HAMi's filter-time patch fails with NotFound
        the same way)."""
        self.pop(uid)
        if uid:
            self.deleted[uid] = None
            if len(self.deleted) > RECENTLY_DELETED:
                del self.deleted[next(iter(self.deleted))]

    def was_deleted(self, uid: str) -> bool:
        return uid in self.deleted

    def sweep(self, pod_exists: Callable[[str, str, str], bool], max_age: float) -> int:
        """Drop reservations older than `max_age` seconds whose pod is gone from the informer.

        The safety net behind `note_deleted`: a pod deleted before our watch ever saw it, then
        filtered from kube-scheduler's lagging cache, would otherwise hold its devices forever.
        """
        dropped = 0
        now = self.settings.now()
        for uid, reserved_at in self.state.reservations():
            alloc = self.state.allocation(uid)
            try:
                age = now - int(reserved_at)
            except ValueError:
                age = max_age + 1
            if alloc is None or age <= max_age or pod_exists(alloc.namespace, alloc.name, uid):
                continue
            log.info("dropping the reservation of vanished pod %s/%s", alloc.namespace, alloc.name)
            self.drop(uid)
            dropped += 1
        return dropped

    def busy_node_test(self, uid: str, namespace: str, name: str) -> Callable[[str], bool] | None:
        """Is a bind other than this pod's about to run, or holding the lock, on the node? None
        when no node can be (no other bind pending, no cached node carrying a lock): the same
        ranking, without asking about every node. Each node is judged when asked (a filter's walk
        asks about the nodes it passes, not every node)."""
        now = self.settings.now()
        per_node = self.pending.per_node
        locker = self.locker
        locked = locker.maybe_locked()
        nothing_locked = locked is not None and not locked
        if nothing_locked and not any(_waits_for_another(w, uid, now) for w in per_node.values()):
            return None
        live_holder = locker.live_holder_test(self._holder_alive)

        def busy(node: str) -> bool:
            waiting = per_node.get(node)
            if waiting and _waits_for_another(waiting, uid, now):
                return True
            if locked is not None and node not in locked:
                return False
            held = live_holder(node)
            return held is not None and (held.namespace, held.pod) != (namespace, name)

        return busy

    def _holder_alive(self, held: LockValue, node: str) -> bool:
        """Can the holder of lock `held` on `node` still need it? Not when it is gone, or in a
        state `dangling_cause` names (the lock is dangling: the next bind takes it over).

        Kept per node while the lock and the holder's cached object are the same ones: a burst's
        filters each ask about every locked node they pass, and on a fleet that was a tenth of the
        server's CPU."""
        pod = self.cached_pod(held.namespace, held.pod)
        if pod is None:
            return False
        known = self.holders_seen.get(node)
        if known is not None and known[0] is held and known[1] is pod:
            return known[2]
        alive = dangling_cause(pod, node, held) is None
        if len(self.holders_seen) >= HOLDERS_SEEN_KEPT:
            self.holders_seen.clear()
        self.holders_seen[node] = (held, pod, alive)
        return alive


def _waits_for_another(waiting: dict[str, float], uid: str, now: float) -> bool:
    """Does a bind of a pod other than `uid` that is still expected wait on this node?"""
    return any(until > now for other, until in waiting.items() if other != uid)
