"""The visit order of a decision whose vendors bound their node scores per node
(`walk_bounded`), kept between decisions.

For one fit-score group (`fitcache.fit_key` and the quota token) and one candidate list: the
candidates that may fit, each with its rank key — the policy-signed total score (negated under
binpack, so that smaller is better) when the fit-score cache knows it, else the policy-signed bound
of it (`engine/bounds.py`) — sorted by (key, name). A key never ranks a node better than its true
total does. Like the cached outcomes, a key is a function of the node's generation, so a later
decision of the same group re-keys only the nodes the ledger lists as changed since
(`DeviceLedger.changed_since`) and the nodes it visited itself, instead of every candidate.

A group's first decision starts from the ranking by bounds alone that pods with equal bounds on
every node share (`ScoreBounds.key`, e.g. replicas of two memory sizes asking one NPU each): it is
kept the same way, re-keyed where the ledger changed, so only the first pod of such a key ranks
every candidate.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable, Iterator
from collections.abc import Set as AbstractSet
from itertools import groupby
from operator import itemgetter

Run = Iterable[tuple[float, str]]
"""(key, node) ascending: a stretch of a visit order (`score_runs`, `Ranking.order`)."""


def score_runs(scored: Iterable[tuple[float, str]], eligible: AbstractSet[str], sign: float,
               bound: float) -> Iterator[Run]:
    """The visit order when every eligible node's key is sign × (node score + `bound`), from
    (score, node) in policy order with equal scores by name (the ledger's score index): a run per
    score, of its eligible nodes by name. Keys never decrease from a run to the next (float addition
    is monotonic), but two scores may add up to one key, so a later run may hold an equal key with
    an earlier name. Each run is lazy (read it before the next): a pass that ends at a run's first
    key reads no more of the index."""
    for score, group in groupby((pair for pair in scored if pair[1] in eligible), key=itemgetter(0)):
        key = sign * (score + bound)
        yield ((key, name) for _, name in group)


class Ranking:
    """Candidates in visit order, as of ledger tick `tick`."""

    __slots__ = ("_keys", "_members", "candidates", "order", "tick")

    def __init__(self, candidates: list[str], tick: int, order: list[tuple[float, str]]) -> None:
        """`order`: (key, node) of every candidate that may fit, in any order."""
        self.candidates = candidates
        self._members: frozenset[str] | None = None
        self._keys: dict[str, float] | None = None
        self.tick = tick
        order.sort()
        self.order = order
        """(key, node) ascending: the visit order."""

    def copy(self) -> Ranking:
        """An independent ranking with the same candidates, tick and order (the candidates' set
        shared, the keys copied when made: neither is made again for the copy)."""
        twin = Ranking(self.candidates, self.tick, [])
        twin.order = list(self.order)  # sorted already
        twin._members = self._members
        if self._keys is not None:
            twin._keys = dict(self._keys)
        return twin

    @property
    def keys(self) -> dict[str, float]:
        """Node -> key (made when a later decision first re-keys some)."""
        if self._keys is None:
            self._keys = {node: key for key, node in self.order}
        return self._keys

    @property
    def members(self) -> frozenset[str]:
        """The candidates as a set (made when a later decision first re-keys some)."""
        if self._members is None:
            self._members = frozenset(self.candidates)
        return self._members

    def set(self, node: str, key: float | None) -> None:
        """Re-key a candidate (None: it cannot fit, leave it out)."""
        old = self.keys.pop(node, None)
        if old is not None:
            del self.order[bisect_left(self.order, (old, node))]
        if key is not None:
            self.keys[node] = key
            insort(self.order, (key, node))
