"""The plain counters and histograms behind the vgpu_scheduler_* metrics: Prometheus bucket
semantics (`value <= le`), cumulative copies, fixed label arity."""

from __future__ import annotations

import pytest

from vgpu_scheduler.cluster.instruments import LATENCY_BUCKETS, CounterVec, Histogram, HistogramVec


@pytest.mark.parametrize(
    ("value", "bucket"),
    [
        pytest.param(0.0, 0, id="zero in the first bucket"),
        pytest.param(0.0005, 0, id="on a bound: that bucket (le is inclusive)"),
        pytest.param(0.00051, 1, id="just above a bound: the next one"),
        pytest.param(30.0, 14, id="on the last bound"),
        pytest.param(31.0, 15, id="past the last bound: +Inf only"),
    ],
)
def test_an_observation_lands_in_the_first_bucket_it_does_not_exceed(value: float, bucket: int) -> None:
    hist = Histogram()
    hist.observe(value)
    assert hist.counts.index(1) == bucket
    data = hist.data()
    assert data.cumulative[:bucket] == (0,) * bucket
    assert set(data.cumulative[bucket:]) == {1}
    assert data.count == 1 and data.sum == value


def test_latency_buckets_span_half_a_millisecond_to_thirty_seconds() -> None:
    assert LATENCY_BUCKETS[0] == 0.0005 and LATENCY_BUCKETS[-1] == 30.0
    assert list(LATENCY_BUCKETS) == sorted(set(LATENCY_BUCKETS))


def test_cumulative_counts_and_sum() -> None:
    hist = Histogram((1.0, 2.0))
    for value in (0.5, 1.0, 1.5, 3.0, 4.0):
        hist.observe(value)
    data = hist.data()
    assert data.bounds == (1.0, 2.0)
    assert data.cumulative == (2, 3, 5)
    assert data.count == 5 and data.sum == 10.0


@pytest.mark.parametrize(
    "bounds",
    [pytest.param((2.0, 1.0), id="decreasing"), pytest.param((1.0, 1.0), id="repeated")],
)
def test_bounds_must_increase(bounds: tuple[float, ...]) -> None:
    with pytest.raises(ValueError, match="strictly increasing"):
        Histogram(bounds)


def test_vectors_keep_one_series_per_label_values_and_expose_known_ones_at_zero() -> None:
    counts = CounterVec(("outcome", "reason"), known=[("chosen", "fit")])
    assert counts.series() == [(("chosen", "fit"), 0)]
    counts.inc(("nofit", "CardInsufficientMemory"))
    counts.inc(("nofit", "CardInsufficientMemory"), 2)
    assert counts.get(("nofit", "CardInsufficientMemory")) == 3
    assert sorted(counts.series()) == [(("chosen", "fit"), 0), (("nofit", "CardInsufficientMemory"), 3)]

    hists = HistogramVec(("outcome",), (1.0,), known=[("bound",)])
    hists.observe(("error",), 2.0)
    series = dict(hists.series())
    assert series[("bound",)].cumulative == (0, 0)
    assert series[("error",)].cumulative == (0, 1)


@pytest.mark.parametrize(
    "values", [pytest.param(("a",), id="too few"), pytest.param(("a", "b", "c"), id="too many")]
)
def test_label_values_must_match_the_label_names(values: tuple[str, ...]) -> None:
    with pytest.raises(ValueError, match="label values"):
        CounterVec(("x", "y")).inc(values)
    with pytest.raises(ValueError, match="label values"):
        HistogramVec(("x", "y")).observe(values, 1.0)
