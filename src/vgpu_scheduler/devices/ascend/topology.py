"""Which of the passing devices a 910-family request takes (HAMi `computeBestCombination` and
`computeBestCombination910C`).

Both group candidates and prefer the largest groups. HAMi groups in Go maps and sorts with the
unstable `sort.Slice`, so equal-sized groups come out in a random order; here ties keep the
order in which Fit met the groups (the first candidate of each group), which is one of HAMi's
possible outcomes and makes the choice reproducible.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from vgpu_scheduler.model import ContainerDevice

NPUS_PER_MODULE = 2
"""An Ascend 910C module (one physical card) holds two NPUs, allocated together."""

T = TypeVar("T")


def _groups(items: Sequence[T], key: Callable[[T], int | None]) -> list[list[T]]:
    """Items grouped by `key` (None: left out), groups in order of first appearance, then stably
    by size, largest first."""
    by_key: dict[int, list[T]] = {}
    for item in items:
        k = key(item)
        if k is not None:
            by_key.setdefault(k, []).append(item)
    return sorted(by_key.values(), key=len, reverse=True)


def best_by_network(
    candidates: Sequence[ContainerDevice], network: Callable[[ContainerDevice], float | None], nums: int
) -> list[ContainerDevice]:
    """`nums` candidates taken network by network, the network with most candidates first.
    Candidates without a numeric NetworkID are never taken (so fewer than `nums` may come back,
    as in HAMi)."""
    out: list[ContainerDevice] = []

    def network_key(c: ContainerDevice) -> int | None:
        value = network(c)
        return None if value is None else int(value)  # Go's int(float64) truncates

    for group in _groups(candidates, network_key):
        for dev in group:
            out.append(dev)
            if len(out) == nums:
                return out
    return out


def best_by_module(candidates: Sequence[ContainerDevice], nums: int) -> list[ContainerDevice]:
    """Whole 910C modules (index // 2) whose two NPUs both passed, until `nums` NPUs are covered;
    a module with one passing NPU is never taken. Devices are keyed by index as in HAMi: two
    candidates with the same index count as that index twice and resolve to the last of them."""
    by_index: dict[int, ContainerDevice] = {}
    for dev in candidates:
        by_index[dev.idx] = dev
    indices = [dev.idx for dev in candidates]
    chosen: list[int] = []
    left = nums
    for module in _groups(indices, lambda i: i // NPUS_PER_MODULE):
        if left <= 0:
            break
        if len(module) == NPUS_PER_MODULE:
            chosen.extend(module)
            left -= NPUS_PER_MODULE
    return [by_index[i] for i in chosen]
