"""Topology-aware choice among the devices fit collected (§5.3 "After the loop").

With policy `topology-aware` fit collects every device that passes the checks instead of
stopping at Nums; this module then picks Nums of them from the pair scores of
`hami.io/node-nvidia-score` (higher = better link). Score of (a, b) is read from a's map,
missing = 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import combinations

PairScores = Mapping[str, Mapping[str, int]]
"""Device UUID -> (other UUID -> link score)."""


def worst_single(uuids: Sequence[str], scores: PairScores) -> int:
    """Index of the device with the LOWEST sum of scores to the other collected devices.

    A lone card should not break up a well-connected group; the first one wins ties.
    """
    best_index = 0
    best_total = 0
    for i, a in enumerate(uuids):
        row = scores.get(a, {})
        total = sum(row.get(b, 0) for b in uuids if b != a)
        if i == 0 or total < best_total:
            best_index, best_total = i, total
    return best_index


def best_combination(uuids: Sequence[str], nums: int, scores: PairScores) -> tuple[int, ...]:
    """Indices of the `nums` devices with the HIGHEST sum of pairwise scores.

    Combinations are tried in lexicographic order over the collection order; the first maximum
    wins.
    """
    best: tuple[int, ...] = ()
    best_total = 0
    for combo in combinations(range(len(uuids)), nums):
        total = 0
        for x, i in enumerate(combo):
            row = scores.get(uuids[i], {})
            for j in combo[x + 1 :]:
                total += row.get(uuids[j], 0)
        if not best or total > best_total:
            best, best_total = combo, total
    return best
