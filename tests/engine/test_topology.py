"""§5.3 "After the loop": topology-aware selection from pair scores."""

from __future__ import annotations

import pytest

from vgpu_scheduler.devices.nvidia.topology import PairScores, best_combination, worst_single

# HAMi's own example: totals gpu0=300, gpu1=250, gpu2=350; best pair [gpu0, gpu2]=200.
THREE: PairScores = {
    "gpu0": {"gpu1": 100, "gpu2": 200},
    "gpu1": {"gpu0": 100, "gpu2": 150},
    "gpu2": {"gpu0": 200, "gpu1": 150},
}


def test_worst_single_lowest_total() -> None:
    assert worst_single(["gpu0", "gpu1", "gpu2"], THREE) == 1


def test_worst_single_first_wins_ties() -> None:
    scores: PairScores = {"a": {"b": 5}, "b": {"a": 5}}
    assert worst_single(["b", "a"], scores) == 0


def test_worst_single_reads_own_row_and_missing_is_zero() -> None:
    # a's row is empty (0), b->a is 7: a has the lowest total although b scores it.
    assert worst_single(["b", "a"], {"b": {"a": 7}}) == 1


def test_worst_single_skips_same_uuid() -> None:
    # Two MIG instances of "m" do not score against each other.
    assert worst_single(["m", "m", "x"], {"m": {"x": 1, "m": 100}, "x": {"m": 50}}) == 0


def test_best_combination_example() -> None:
    assert best_combination(["gpu0", "gpu1", "gpu2"], 2, THREE) == (0, 2)


def test_best_combination_first_max_wins() -> None:
    scores: PairScores = {u: {v: 10 for v in "abcd" if v != u} for u in "abcd"}
    assert best_combination(list("abcd"), 2, scores) == (0, 1)
    assert best_combination(list("abcd"), 3, scores) == (0, 1, 2)


def test_best_combination_score_read_from_earlier_device() -> None:
    # (a, b) is read from a's row only: b->a = 100 does not count.
    scores: PairScores = {"a": {"b": 1, "c": 2}, "b": {"a": 100}}
    assert best_combination(["a", "b", "c"], 2, scores) == (0, 2)


def test_best_combination_all_negative_still_chooses() -> None:
    scores: PairScores = {"a": {"b": -5, "c": -1}, "b": {"c": -3}}
    assert best_combination(["a", "b", "c"], 2, scores) == (0, 2)


def nvlink(groups: list[list[str]], intra: int, inter: int) -> PairScores:
    """Symmetric scores: `intra` inside a group, `inter` across groups."""
    members = [u for g in groups for u in g]
    group_of = {u: i for i, g in enumerate(groups) for u in g}
    return {
        u: {v: intra if group_of[u] == group_of[v] else inter for v in members if v != u} for u in members
    }


@pytest.mark.parametrize(
    ("collected", "nums", "expected"),
    [
        # 8 GPUs in two NVLink quads, collected from the end of the sorted list.
        pytest.param(["GPU-7", "GPU-6", "GPU-4", "GPU-3", "GPU-2", "GPU-1", "GPU-0"], 4, (3, 4, 5, 6),
                     id="4 of 7, GPU-5 missing: the complete quad"),
        pytest.param(
            ["GPU-7", "GPU-6", "GPU-5", "GPU-4", "GPU-3", "GPU-2", "GPU-1", "GPU-0"], 4, (0, 1, 2, 3),
            id="4 of 8: the first complete quad collected",
        ),
        pytest.param(["GPU-7", "GPU-6", "GPU-5", "GPU-4", "GPU-3", "GPU-2", "GPU-1", "GPU-0"], 2, (0, 1),
                     id="2 of 8: the first linked pair"),
        pytest.param(["GPU-7", "GPU-3", "GPU-2"], 2, (1, 2), id="2 of 3: the linked pair"),
    ],
)
def test_best_combination_eight_gpus(collected: list[str], nums: int, expected: tuple[int, ...]) -> None:
    scores = nvlink([[f"GPU-{i}" for i in range(4)], [f"GPU-{i}" for i in range(4, 8)]], 100, 20)
    assert best_combination(collected, nums, scores) == expected
