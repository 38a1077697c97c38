"""The collector settings a simulation runs under are put back afterwards."""

from __future__ import annotations

import gc

from vgpu_scheduler.gctuning import collector_settled


def test_collector_settled_restores_thresholds_and_unfreezes() -> None:
    outer = gc.get_threshold()
    gc.set_threshold(700, 10, 10)  # other tests may have settled the heap of this process already
    gc.unfreeze()
    try:
        kept = [object() for _ in range(10)]
        with collector_settled():
            assert gc.get_threshold() != (700, 10, 10)
            assert gc.get_freeze_count() >= len(kept)
        assert gc.get_threshold() == (700, 10, 10)
        assert gc.get_freeze_count() == 0
    finally:
        gc.set_threshold(*outer)
