"""The collector settings a simulation runs under are put back afterwards."""

from __future__ import annotations

import gc

from vgpu_scheduler.scheduler.heap import collector_settled


def test_collector_settled_restores_thresholds_and_unfreezes() -> None:
    before = gc.get_threshold()
    kept = [object() for _ in range(10)]
    with collector_settled():
        assert gc.get_threshold() != before
        assert gc.get_freeze_count() >= len(kept)
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0
