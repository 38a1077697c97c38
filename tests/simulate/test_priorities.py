from typing import Any

import pytest

from tests import builders
from vgpu_scheduler.simulate.predicates import NodeInfo
from vgpu_scheduler.simulate.priorities import (
    PRIORITY_FUNCTIONS,
    balanced_resource_allocation,
    least_requested,
    most_requested,
    score_node,
    weighted,
)

GI = 1024**3


def node(cpu: str = "4", memory: str = "8Gi") -> dict[str, Any]:
    return builders.node("n", allocatable={"cpu": cpu, "memory": memory, "pods": "110"})


def pod(name: str, cpu: str | None, memory: str | None) -> dict[str, Any]:
    """A pod (no namespace) of one container requesting `cpu` and `memory` (None: not requested)."""
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    return builders.pod(name, namespace=None, containers=[builders.container("c", requests=requests)])


@pytest.mark.parametrize(
    ("existing", "incoming", "least", "most", "balanced"),
    [
        # cpu 1/4 = 25 %, memory 2/8 = 25 %
        pytest.param([], ("1", "2Gi"), 75, 25, 100, id="one pod at 25 percent"),
        # cpu (1+1)/4 = 50 %, memory (1+3)/8 = 50 %
        pytest.param([("1", "1Gi")], ("1", "3Gi"), 50, 50, 100, id="two pods at 50 percent"),
        # cpu 3/4 = 75 %, memory 2/8 = 25 %: least (25+75)/2, most (75+25)/2, balanced 1-0.5
        pytest.param([("2", "0")], ("1", "2Gi"), 50, 50, 50, id="cpu 75 and memory 25 percent"),
        # no requests at all: kube-scheduler's defaults (100m, 200Mi) still count
        pytest.param(
            [],
            (None, None),
            (3900 * 100 // 4000 + (8 * GI - 200 * 1024**2) * 100 // (8 * GI)) // 2,
            (100 * 100 // 4000 + 200 * 1024**2 * 100 // (8 * GI)) // 2,
            int((1 - abs(100 / 4000 - 200 * 1024**2 / (8 * GI))) * 100),
            id="no requests: kube-scheduler defaults count",
        ),
        # over-committed cpu: least/most give 0 for cpu, balanced 0
        pytest.param([("4", "0")], ("1", "4Gi"), (0 + 50) // 2, (0 + 50) // 2, 0, id="cpu over-committed"),
        # an existing pod without a memory request counts 200Mi: memory (200Mi + 2Gi) / 8Gi
        pytest.param(
            [("2", None)],
            ("1", "2Gi"),
            (25 + 72) // 2,
            (75 + 27) // 2,
            int((1 - abs(0.75 - 2248 / 8192)) * 100),
            id="existing pod without a memory request",
        ),
    ],
)
def test_classic_formulas(
    existing: list[tuple[str | None, str | None]],
    incoming: tuple[str | None, str | None],
    least: int,
    most: int,
    balanced: int,
) -> None:
    n = node()
    info = NodeInfo(n)
    for i, (c, m) in enumerate(existing):
        info.add_pod(pod(f"e{i}", c, m))
    p = pod("new", *incoming)
    assert least_requested(p, n, info) == least
    assert most_requested(p, n, info) == most
    assert balanced_resource_allocation(p, n, info) == balanced


def test_scores_are_within_0_and_100_and_zero_capacity_scores_zero() -> None:
    empty = builders.node("n", allocatable={})
    info = NodeInfo(empty)
    for fn in PRIORITY_FUNCTIONS.values():
        assert fn(pod("p", "1", "1Gi"), empty, info) == 0


def test_weighted_sum_and_unknown_name() -> None:
    n = node()
    info = NodeInfo(n)
    p = pod("p", "1", "2Gi")
    prios = (weighted("LeastRequestedPriority", 2), weighted("MostRequestedPriority"))
    assert score_node(prios, p, n, info) == 2 * 75 + 25
    with pytest.raises(KeyError, match="valid names: BalancedResourceAllocation"):
        weighted("Nope")
