"""bench/fragmentation.py's measures: pods admitted in order, its upper bound, and the summary.

The bench is a script, not a package module: it is loaded from its file.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fragmentation_bench", ROOT / "bench" / "fragmentation.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


frag = _load()
GIB = 1024


def _pod(
    limits: dict[str, Any], *, priority: int = 0, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    pod: dict[str, Any] = frag._pod(0, limits)
    pod["spec"]["priority"] = priority
    if annotations:
        pod["metadata"]["annotations"] = annotations
    return pod


WHOLE = {"nvidia.com/gpu": 1, "nvidia.com/gpucores": 100}
HALF = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 40 * GIB, "nvidia.com/gpucores": 50}
SMALL = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 4 * GIB, "nvidia.com/gpucores": 10}
PINNED = {"nvidia.com/use-gpuuuid": "GPU-a"}


def test_admission_order_is_priority_then_input_order() -> None:
    pods = [_pod(SMALL), _pod(SMALL, priority=1000), _pod(SMALL), _pod(SMALL, priority=1000)]
    assert frag.admission_order(pods) == [1, 3, 0, 2]


def test_admitted_in_order_stops_at_the_first_pod_that_waits() -> None:
    pods = [_pod(SMALL), _pod(SMALL, priority=1000), _pod(HALF), _pod(SMALL)]
    # pod 1 (high priority) first, then 0, then 2 waits: pod 3's placement does not count.
    assert frag.admitted_in_order(pods, ["n", "n", None, "n"]) == 2
    assert frag.admitted_in_order(pods, ["n", "n", "n", "n"]) == 4
    assert frag.admitted_in_order(pods, ["n", None, "n", "n"]) == 0


def test_pods_pinned_to_named_gpus_are_left_out() -> None:
    pods = [_pod(SMALL), _pod(SMALL, annotations=PINNED), _pod(SMALL), _pod(SMALL)]
    # The pinned pod neither stops the count nor counts.
    assert frag.admitted_in_order(pods, ["n", None, "n", None]) == 2
    assert frag.admitted_in_order(pods, ["n", "n", "n", "n"]) == 3


def test_asks_reads_limits_as_the_scheduler_does() -> None:
    assert frag.asks(_pod(WHOLE)) == [frag.Ask(1, None, 100, 100)]  # no memory asked: the whole card
    assert frag.asks(_pod(HALF)) == [frag.Ask(1, 40 * GIB, 100, 50)]
    quarter = {"nvidia.com/gpu": 2, "nvidia.com/gpumem-percentage": 25}
    assert frag.asks(_pod(quarter)) == [frag.Ask(2, None, 25, 0)]
    assert frag.asks(_pod({"cpu": "1"})) == []
    assert frag.Ask(1, None, 25, 0).memory_on(32 * GIB) == 8 * GIB


V100 = frag.Card(32 * GIB, 100, 10)
A100 = frag.Card(80 * GIB, 100, 10)


@pytest.mark.parametrize(
    ("limits", "cards", "bound"),
    [
        pytest.param(WHOLE, [V100, A100], 2, id="a pod asking every core takes a card"),
        pytest.param(HALF, [V100, A100], 2, id="a 40 GiB slice fits the 80 GiB card only"),
        pytest.param(HALF, [V100, V100], 0, id="a pod no card can hold stops the count"),
        pytest.param(SMALL, [V100, A100], 20, id="shares: 10 per card"),
        pytest.param({**SMALL, "nvidia.com/gpucores": 30}, [V100, A100], 6, id="cores: 100 per card"),
        # A bound on volume: 4 x 28 GiB = 112 GiB fit the totals, though only 3 such pods fit the cards.
        pytest.param({**SMALL, "nvidia.com/gpumem": 28 * GIB}, [V100, A100], 4, id="memory over both cards"),
    ],
)
def test_admission_bound_is_the_longest_prefix_the_totals_hold(
    limits: dict[str, Any], cards: list[Any], bound: int
) -> None:
    assert frag.admission_bound([_pod(limits) for _ in range(30)], cards) == bound


def test_admission_bound_counts_large_pods_against_the_large_cards_only() -> None:
    # Two halves fill the A100; the small pods after them still fit the V100.
    pods = [_pod(HALF), _pod(HALF), _pod(SMALL), _pod(SMALL), _pod(HALF)]
    assert frag.admission_bound(pods, [V100, A100]) == 4


def test_the_measure_on_a_small_trace_is_deterministic_and_within_its_bound() -> None:
    """300 pods of the training trace (its first 300 pods are those of any longer run)."""
    runs = {gpu: frag.run("training", 300, 1, "spread", gpu) for gpu in ("binpack", "spread", "best-fit")}
    assert {gpu: r["admitted"] for gpu, r in runs.items()} == {"binpack": 254, "spread": 242, "best-fit": 257}
    assert {r["bound"] for r in runs.values()} == {276}
    for r in runs.values():
        assert r["admitted"] <= r["placed"] <= r["total"] == 300
    # GPU memory idle (mostly on the 32 GB cards, which no half slice fits) when the first pod waits.
    assert {gpu: r["idle_at_wait_mib"] // GIB for gpu, r in runs.items()} == {
        "binpack": 640, "spread": 948, "best-fit": 576
    }


def test_the_summary_takes_each_policy_at_its_best_node_policy() -> None:
    def r(admitted: int, placed: int, stranded_gib: int = 0) -> dict[str, int]:
        return {"admitted": admitted, "placed": placed, "bound": 120, "stranded_mib": stranded_gib * GIB,
                "free_mib": 10 * GIB, "idle_at_wait_mib": admitted * GIB}

    rows = [
        ("t", "binpack", "binpack", r(90, 100, 1)), ("t", "binpack", "spread", r(80, 130, 2)),
        ("t", "binpack", "best-fit", r(99, 110, 3)), ("t", "spread", "binpack", r(95, 100, 4)),
        ("t", "spread", "spread", r(70, 120, 5)), ("t", "spread", "best-fit", r(100, 105, 6)),
    ]
    assert frag.best(rows, "t", frag.HAMI_POLICIES, "admitted")[:2] == (95, "spread/binpack")
    assert frag.best(rows, "t", (frag.OURS,), "placed")[:2] == (110, "binpack/best-fit")
    assert frag.summary_table(rows, ["t"])[-1] == (
        "| t | 95 / 80 / 100 | 120 | +5.3 % | 100 / 130 / 110 | -15.4 % | 95 GiB / 80 GiB / 100 GiB | "
        "1 GiB / 2 GiB / 3 GiB |"
    )
