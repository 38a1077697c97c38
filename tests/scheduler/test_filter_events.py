"""§5.7: the FilteringFailed event texts when no node fits."""

from __future__ import annotations

import pytest

from vgpu_scheduler.scheduler.extender import filtering_failed_messages


@pytest.mark.parametrize(
    ("failed", "expected"),
    [
        pytest.param(
            {"n1": "2/2 CardInsufficientMemory", "n2": "2/2 CardInsufficientMemory"},
            ["2 nodes CardInsufficientMemory(n1,n2)", "no available node, 2 nodes do not meet"],
            id="one-reason-type",
        ),
        pytest.param(
            {
                "n2": "1/2 CardInsufficientMemory, 1/2 CardNotHealth",
                "n1": "2/2 CardInsufficientMemory",
                "n3": "1/4 AllocatedCardsInsufficientRequest, 3/4 ResourceQuotaNotFit",
            },
            [
                "1 nodes AllocatedCardsInsufficientRequest(n3)",
                "2 nodes CardInsufficientMemory(n1,n2)",
                "1 nodes CardNotHealth(n2)",
                "1 nodes ResourceQuotaNotFit(n3)",
                "no available node, 3 nodes do not meet",
            ],
            id="grouped-per-reason-type-not-per-string",
        ),
        pytest.param(
            {"n1": "NodeInsufficientDevice", "gone": "node unregistered"},
            ["1 nodes NodeInsufficientDevice(n1)", "no available node, 2 nodes do not meet"],
            id="unregistered-has-no-reason-type",
        ),
    ],
)
def test_filtering_failed_messages(failed: dict[str, str], expected: list[str]) -> None:
    assert filtering_failed_messages(failed) == expected
