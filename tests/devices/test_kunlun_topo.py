"""Kunlun's card-combination rule and node score: the vectors of HAMi v2.10.0's
pkg/device/kunlun/topo_test.go and the graghSelect tables of device_test.go."""

from __future__ import annotations

import pytest

from vgpu_scheduler.devices.kunlun import topo
from vgpu_scheduler.devices.kunlun.vxpu import slice_fits
from vgpu_scheduler.model import DeviceInfo, DeviceUsage

INDICES = list(range(8))


def free_except(*used: int) -> list[bool]:
    """Eight cards at positions = indices 0..7; the `used` ones do not fit (topo_test's newDevices)."""
    return [i not in used for i in range(8)]


def only_free(*kept: int) -> list[bool]:
    return [i in kept for i in range(8)]


def test_wing_pick() -> None:
    """TestDevicepick."""
    fits = free_except(1, 3)
    assert topo.wing_pick(INDICES, fits, 0, 2) == [0, 2]
    assert topo.wing_pick(INDICES, fits, 4, 3) == [4, 5, 6]
    assert topo.wing_pick(INDICES, fits, 6, 5) == [6, 7]  # the walk stops at the eighth card


@pytest.mark.parametrize(
    ("fits", "count", "expected"),
    [
        pytest.param(free_except(), 8, INDICES, id="all eight free, eight asked"),
        pytest.param(free_except(0), 8, [], id="seven free, eight asked"),
        pytest.param(free_except(5), 8, [], id="card 5 used, eight asked"),
        pytest.param(free_except(), 1, [0], id="all free, one asked: first of the left wing"),
        pytest.param(free_except(4, 5, 6, 7), 4, [0, 1, 2, 3], id="four from the left wing"),
        # Wing sizes decide: one card goes to the wing holding 1, then 3, 2, 4 fitting cards.
        pytest.param(free_except(5), 1, [4], id="card 5 used, one asked: the 3-card wing"),
        pytest.param(free_except(6, 7), 1, [4], id="cards 6 7 used, one asked: the 2-card wing"),
        pytest.param(free_except(5), 2, [4, 6], id="card 5 used, two asked: the 3-card wing"),
        pytest.param(free_except(0, 1, 2, 4, 5, 6), 2, [3, 7], id="two asked across the wings"),
        pytest.param(free_except(2, 3, 7), 4, [0, 1, 4, 5], id="four asked, five free: a quad"),
        pytest.param(free_except(3, 6), 4, [0, 1, 4, 5], id="six free, leftover pair unlinked"),
        pytest.param(free_except(2, 6), 4, [0, 1, 4, 5], id="six free, leftover pair linked"),
        pytest.param(free_except(), 3, [], id="three never fit"),
        pytest.param(free_except(), 5, [], id="five never fit"),
        pytest.param(only_free(0, 5), 2, [], id="two free but not linked"),
    ],
)
def test_graph_select(fits: list[bool], count: int, expected: list[int]) -> None:
    assert topo.graph_select(INDICES, fits, count) == expected


def test_positions_not_indices_decide_the_wing() -> None:
    """The wings are positions of the policy-sorted list: reversed cards, the left wing is 7..4."""
    assert topo.graph_select(INDICES[::-1], free_except(), 1) == [7]
    assert topo.graph_select(INDICES[::-1], free_except(), 2) == [7, 6]


def vxpu_cards(*used: tuple[int, int]) -> list[bool]:
    """Test_graphSelectVXPU: 8 cards of 98304 MiB, (used, usedmem) each, asked 24576 MiB slices."""
    return [slice_fits(DeviceInfo(id=str(i), devmem=98304, health=True), DeviceUsage(u, m, 0), 24576)
            for i, (u, m) in enumerate(used)]


IDLE = (0, 0)


@pytest.mark.parametrize(
    ("fits", "count", "expected"),
    [
        pytest.param(vxpu_cards(*[IDLE] * 8), 8, INDICES, id="all idle, eight slices"),
        pytest.param(vxpu_cards(IDLE, (1, 24576), IDLE, (2, 49152), IDLE, (1, 49152), IDLE, IDLE), 4,
                     [0, 1, 2, 3], id="matching slices join the left wing"),
        pytest.param(vxpu_cards(IDLE, (2, 49152), IDLE, (1, 49152), IDLE, (1, 24576), IDLE, IDLE), 4,
                     [4, 5, 6, 7], id="mixed sizes: the right wing"),
        pytest.param(vxpu_cards(*[(1, 49152)] * 8), 2, [], id="no card cut into this size"),
        pytest.param(vxpu_cards((1, 24576), (1, 24576), (1, 49152), IDLE, IDLE, (1, 24576), IDLE, IDLE), 1,
                     [0], id="one slice"),
        pytest.param(vxpu_cards(IDLE, (2, 49152), (1, 24576), (1, 49152), IDLE, IDLE, (1, 24576), IDLE), 2,
                     [0, 1], id="two slices"),
    ],
)
def test_graph_select_vxpu(fits: list[bool], count: int, expected: list[int]) -> None:
    assert topo.graph_select(INDICES, fits, count) == expected


def test_interconnect() -> None:
    """TestInterconnect_*: a linked pair, a quad, nothing for other counts."""
    assert sorted(topo.interconnect(INDICES, only_free(0, 4), 2)) == [0, 4]
    pair = topo.interconnect(INDICES, free_except(), 2)
    assert tuple(sorted(pair)) in topo.CROSS_PAIRS
    assert sorted(topo.interconnect(INDICES, only_free(0, 1, 4, 5), 4)) == [0, 1, 4, 5]
    assert topo.interconnect(INDICES, free_except(), 3) == []
    assert topo.interconnect(INDICES, free_except(), 4) == []  # 8 free: not the quad rule's case


def test_link_tables() -> None:
    """TestParseInterconnection*_Structure: pairs of two distinct cards, quads of four."""
    for pair in (*topo.CROSS_PAIRS, *topo.WING_PAIRS):
        assert len(set(pair)) == 2
    for quad in topo.QUADS:
        assert len(set(quad)) == 4
    assert len(topo.CROSS_PAIRS) + len(topo.WING_PAIRS) == 16


@pytest.mark.parametrize(
    ("have", "want", "ok"),
    [([0, 1, 2, 3], [1, 2], True), ([0, 1], [0, 1], True), ([0, 1, 2], [2, 3], False), ([0, 1], [], True)],
    ids=["subset", "exact", "missing element", "empty want"],
)
def test_can_meet(have: list[int], want: list[int], ok: bool) -> None:
    assert topo.can_meet(have, want) is ok


@pytest.mark.parametrize(
    ("have", "taken", "rest"),
    [([0, 1, 2, 3], [1, 2], [0, 3]), ([0, 1], [5, 6], [0, 1]), ([0, 1], [0, 1], [])],
    ids=["removes matched", "no overlap keeps all", "full overlap"],
)
def test_without(have: list[int], taken: list[int], rest: list[int]) -> None:
    assert topo.without(have, taken) == rest


@pytest.mark.parametrize(("n", "value"), [(4, 0), (1, 2), (0, 1), (2, 1), (3, 1)], ids=str)
def test_wing_value(n: int, value: int) -> None:
    assert topo.wing_value(n) == value


@pytest.mark.parametrize(
    ("cards", "value"),
    [([], 1), ([0, 1, 2, 3], 1), ([0], 3), ([4], 3), ([0, 1], 2)],
    ids=["empty", "full left wing", "one left", "one right", "two left"],
)
def test_fragmentation(cards: list[int], value: int) -> None:
    assert topo.fragmentation(cards) == value


@pytest.mark.parametrize(
    ("previous", "current", "score"),
    [
        ([0], [0, 1], 3000.0),
        ([0], [4], 2000.0),
        ([0, 1], [0], 1000.0),
        ([0, 1, 2, 3], [0], 0.0),
        ([0, 4], [0, 1, 2, 3, 4, 5, 6, 7], 1000.0),  # 4 - 0: outside the table
    ],
    ids=["one less", "unchanged", "one more", "two more", "other difference"],
)
def test_fragmentation_score(previous: list[int], current: list[int], score: float) -> None:
    assert topo.fragmentation_score(previous, current) == score
