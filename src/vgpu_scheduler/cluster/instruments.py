"""Plain counters and histograms that the cluster and scheduler layers record into and the metrics
server reads (server/opmetrics.py turns them into Prometheus families).

Why not prometheus_client objects: the layers below the server stay free of it (import-linter),
and recording here is a dict lookup and an add (a histogram adds a bisect): well under a
microsecond next to a ~1 ms filter.

Threads: everything records on the event loop thread. The metrics handler reads from a worker
thread through `series()`, which copies with single C-level operations (`dict.copy`, list slices)
that the GIL never interrupts, so a scrape never sees a dict change size under it. A histogram's
count is derived from its bucket copy, so `_count` always equals the `+Inf` bucket.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

LATENCY_BUCKETS: tuple[float, ...] = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
)
"""Upper bounds (seconds) from a cache-hot filter (~0.5 ms) to kube-scheduler's bind and extender
timeouts (30 s); anything longer lands in +Inf."""

Labels = tuple[str, ...]


@dataclass(frozen=True, slots=True)
class HistogramData:
    """A copy of one histogram: cumulative counts per upper bound (the last is +Inf)."""

    bounds: tuple[float, ...]
    cumulative: tuple[int, ...]
    sum: float

    @property
    def count(self) -> int:
        return self.cumulative[-1]


class Histogram:
    """Counts per bucket (`value <= bound`, Prometheus' `le`), plus the +Inf bucket and the sum."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: Sequence[float] = LATENCY_BUCKETS) -> None:
        if list(bounds) != sorted(set(bounds)):
            raise ValueError(f"bucket bounds must be strictly increasing: {bounds}")
        self.bounds = tuple(float(b) for b in bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    def data(self) -> HistogramData:
        counts = self.counts[:]  # one C-level copy first; sum may trail it by one observation
        total = 0
        cumulative = []
        for c in counts:
            total += c
            cumulative.append(total)
        return HistogramData(self.bounds, tuple(cumulative), self.sum)


class HistogramVec:
    """Histograms by label values (a bounded set: outcomes, verbs), created on first use."""

    __slots__ = ("_series", "bounds", "label_names")

    def __init__(
        self,
        label_names: Sequence[str],
        bounds: Sequence[float] = LATENCY_BUCKETS,
        *,
        known: Iterable[Labels] = (),
    ) -> None:
        """`known` label values are exposed from the start (zero counts), so rates work at once."""
        self.label_names = tuple(label_names)
        self.bounds = tuple(bounds)
        self._series: dict[Labels, Histogram] = {}
        for labels in known:
            self.labels(*labels)

    def labels(self, *values: str) -> Histogram:
        hist = self._series.get(values)
        if hist is None:
            if len(values) != len(self.label_names):
                raise ValueError(f"want {len(self.label_names)} label values, got {values}")
            hist = self._series[values] = Histogram(self.bounds)
        return hist

    def observe(self, values: Labels, value: float) -> None:
        self.labels(*values).observe(value)

    def series(self) -> list[tuple[Labels, HistogramData]]:
        return [(labels, hist.data()) for labels, hist in self._series.copy().items()]


class CounterVec:
    """Monotonic counts by label values."""

    __slots__ = ("_values", "label_names")

    def __init__(self, label_names: Sequence[str], *, known: Iterable[Labels] = ()) -> None:
        self.label_names = tuple(label_names)
        self._values: dict[Labels, int] = dict.fromkeys(known, 0)

    def inc(self, values: Labels, amount: int = 1) -> None:
        if len(values) != len(self.label_names):
            raise ValueError(f"want {len(self.label_names)} label values, got {values}")
        self._values[values] = self._values.get(values, 0) + amount

    def get(self, values: Labels) -> int:
        return self._values.get(values, 0)

    def series(self) -> list[tuple[Labels, int]]:
        return list(self._values.copy().items())
