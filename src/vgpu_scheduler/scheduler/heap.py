"""The cyclic garbage collector's settings for a process holding large long-lived caches."""

from __future__ import annotations

import gc


def settle_heap() -> None:
    """Keep the cyclic GC off the long-lived caches once they are built.

    With hundreds of thousands of cached pods, every full collection walks millions of objects
    and stalls the event loop for tens of milliseconds, right inside a /filter call (or, in the
    simulator, seconds of a run). Freezing what exists after the initial sync and collecting the
    young generation less often keeps latency flat; the caches hold no reference cycles that
    need the collector.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 50, 100)
