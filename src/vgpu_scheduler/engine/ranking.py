"""The visit order of a decision that scores nodes (`decide._decide_bounded`), kept between decisions.

For one fit-score group (`fitcache.fit_key` and the quota token) and one candidate list: the
candidates that may fit, each with its rank key — the policy-signed total score (negated under
binpack, so that smaller is better) when the fit-score cache knows it, else the policy-signed bound
of it (`engine/bounds.py`) — sorted by (key, name). A key never ranks a node better than its true
total does. Like the cached outcomes, a key is a function of the node's generation, so a later
decision of the same group re-keys only the nodes the ledger lists as changed since
(`DeviceLedger.changed_since`) and the nodes it visited itself, instead of every candidate.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable


class Ranking:
    """Candidates in visit order, as of ledger tick `tick`."""

    __slots__ = ("candidates", "keys", "members", "order", "tick")

    def __init__(self, candidates: list[str], tick: int, key_of: Callable[[str], float | None]) -> None:
        self.candidates = candidates
        self.members = frozenset(candidates)
        self.tick = tick
        self.keys: dict[str, float] = {}
        for node in candidates:
            key = key_of(node)
            if key is not None:
                self.keys[node] = key
        self.order: list[tuple[float, str]] = sorted((key, node) for node, key in self.keys.items())
        """(key, node) ascending: the visit order."""

    def set(self, node: str, key: float | None) -> None:
        """Re-key a candidate (None: it cannot fit, leave it out)."""
        old = self.keys.pop(node, None)
        if old is not None:
            del self.order[bisect_left(self.order, (old, node))]
        if key is not None:
            self.keys[node] = key
            insort(self.order, (key, node))
