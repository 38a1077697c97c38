"""Kunlun's card-combination rule and node score (HAMi `pkg/device/kunlun/topo.go`).

A Kunlun node has 8 cards in two wings of 4 (positions 0-3 and 4-7 of the device list Fit is
handed, i.e. the policy-sorted list, not the card indices). Cards are linked across the wings
pairwise (0-4, 1-5, 2-6, 3-7) and within a wing all to all. A request takes 1, 2, 4 or 8 cards:

* 8: every card must fit;
* 1, 2, 4: from one wing when a wing holds a suitable number of fitting cards (for 1 card the
  wing with 1, then 3, 2, 4 fitting cards is preferred, for 2 and 4 the one with 2, 3, 4): the
  first fitting cards of that wing in list order; else across the wings: 2 cards linked 0-4 / 1-5 /
  2-6 / 3-7, 4 cards forming one of the quads 0-1-4-5, 2-3-6-7, 0-2-4-6, 1-3-5-7, 0-3-4-7, 1-2-5-6;
* any other count never fits.

The answer is a list of card indices (`DeviceInfo.index`), as HAMi's. Fitness is decided once per
position by the caller (`fits`), which is what HAMi's repeated calls of one pure check amount to.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

WING = 4
"""Positions below it are the left wing."""
CARDS = 8
"""The wing walk never looks past this position."""
CROSS_PAIRS: tuple[tuple[int, int], ...] = ((0, 4), (1, 5), (2, 6), (3, 7))
WING_PAIRS: tuple[tuple[int, int], ...] = (
    (0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3), (4, 5), (4, 6), (4, 7), (5, 6), (5, 7), (6, 7),
)
QUADS: tuple[tuple[int, int, int, int], ...] = (
    (0, 1, 4, 5), (2, 3, 6, 7), (0, 2, 4, 6), (1, 3, 5, 7), (0, 3, 4, 7), (1, 2, 5, 6),
)
ODD_ORDER = (1, 3, 2, 4)
"""Wing sizes tried, in this order, for an odd count."""


def wing_pick(indices: Sequence[int], fits: Sequence[bool], start: int, count: int) -> list[int]:
    """The first `count` fitting cards from position `start` (fewer if the walk reaches 8)."""
    out: list[int] = []
    for pos in range(start, min(CARDS, len(indices))):
        if fits[pos]:
            out.append(indices[pos])
            if len(out) == count:
                break
    return out


def can_meet(have: Iterable[int], want: Iterable[int]) -> bool:
    present = set(have)
    return all(w in present for w in want)


def without(have: Sequence[int], taken: Iterable[int]) -> list[int]:
    """`have` minus `taken`, in `have`'s order."""
    gone = set(taken)
    return [h for h in have if h not in gone]


def _linked_pair(indices: Sequence[int], fits: Sequence[bool]) -> list[int]:
    candidates = [indices[p] for p, ok in enumerate(fits) if ok]
    for a in candidates:
        for b in candidates:
            if a == b:
                continue
            if any((lw, rw) in ((a, b), (b, a)) for lw, rw in CROSS_PAIRS):
                return [a, b]
    return []


def _linked_quad(indices: Sequence[int], fits: Sequence[bool]) -> list[int]:
    free = [indices[p] for p, ok in enumerate(fits) if ok]
    if len(free) in (4, 5):
        for quad in QUADS:
            if can_meet(free, quad):
                return list(quad)
    if len(free) == 6:
        # Prefer a quad whose two leftover cards are still linked to each other; else the last
        # quad that fits.
        chosen: list[int] = []
        for quad in QUADS:
            if can_meet(free, quad):
                chosen = list(quad)
                rest = without(free, quad)
                if any(can_meet(rest, pair) for pair in (*CROSS_PAIRS, *WING_PAIRS)):
                    return chosen
        return chosen
    return []


def interconnect(indices: Sequence[int], fits: Sequence[bool], count: int) -> list[int]:
    """Cards across the wings: 2 linked cards or 4 forming a quad ([] for anything else)."""
    if count == 2:
        return _linked_pair(indices, fits)
    if count == 4:
        return _linked_quad(indices, fits)
    return []


def graph_select(indices: Sequence[int], fits: Sequence[bool], count: int) -> list[int]:
    """HAMi `graghSelect`: the card indices for `count` cards, [] when they cannot be combined.

    `indices[p]` is the card index at list position p, `fits[p]` whether that card may be taken."""
    left = sum(1 for p, ok in enumerate(fits) if ok and p < WING)
    right = sum(1 for p, ok in enumerate(fits) if ok and p >= WING)
    if count == CARDS:
        return list(range(CARDS)) if left + right == count else []
    if count not in (1, 2, 4):
        return []
    if left >= count or right >= count:
        for slots in range(count, WING + 1):
            wanted = ODD_ORDER[slots - 1] if count % 2 == 1 else slots
            if left == wanted:
                return wing_pick(indices, fits, 0, count)
            if right == wanted:
                return wing_pick(indices, fits, WING, count)
    return interconnect(indices, fits, count)


# --------------------------------------------------------------------------------------------
# Node score (HAMi `calcscore`)


def wing_value(n: int) -> int:
    """How badly a wing holding `n` used cards is fragmented: full 0, one card 2, else 1."""
    if n == WING:
        return 0
    if n == 1:
        return 2
    return 1


def fragmentation(cards: Iterable[int]) -> int:
    """HAMi `countbubble`: the wing values of a set of card indices summed (no card: 1)."""
    left = right = 0
    for c in cards:
        if c < WING:
            left += 1
        else:
            right += 1
    if left == 0 and right == 0:
        return 1
    return wing_value(left) + wing_value(right)


def fragmentation_score(previous: Iterable[int], current: Iterable[int]) -> float:
    """HAMi `calcscore`: 3000/2000/1000/0 as the pod's cards are 1 less, as, 1 or 2 more
    fragmented than the node's used cards; 1000 for any other difference."""
    delta = fragmentation(current) - fragmentation(previous)
    return {-1: 3000.0, 0: 2000.0, 1: 1000.0, 2: 0.0}.get(delta, 1000.0)
