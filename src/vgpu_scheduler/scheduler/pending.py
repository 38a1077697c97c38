"""Pending reservations: filter decisions waiting for their bind.

One concern: the uid -> decision table and, per node, the pods whose bind is still expected there
(the lock-aware ranking reads it to treat such a node as about to be locked).
"""

from __future__ import annotations

from vgpu_scheduler.engine.decide import Chosen


class PendingBinds:
    """Filter decisions waiting for their bind, and per node until when each bind may still come."""

    __slots__ = ("decisions", "per_node")

    def __init__(self) -> None:
        # uid -> the decision (the uncollapsed per-container allocation the bind patch writes).
        # Dropped at bind, on re-filter and on pod deletion.
        self.decisions: dict[str, Chosen] = {}
        # node -> uid -> until when its bind may still come (filter time + bind timeout). Never
        # reassigned: the Extender keeps an alias to this dict.
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
