"""The cyclic garbage collector's settings: off the long-lived caches once they are built, and
paused while a large JSON body (which holds no cycles) is decoded."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


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


@contextmanager
def collector_settled() -> Iterator[None]:
    """`settle_heap` for the span of one batch job (a simulation), then the settings as they were:
    a library caller's process keeps its own collector behaviour afterwards."""
    threshold = gc.get_threshold()
    settle_heap()
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        gc.unfreeze()


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic GC (JSON trees have no cycles). Decoding many thousands of Pods creates
    millions of dicts, and every collection they trigger scans the whole heap, informer caches
    included: a 50,000-pod relist is 4-5x slower without this. Nested use is fine."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
