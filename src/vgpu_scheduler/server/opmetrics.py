"""Operator metrics (`vgpu_scheduler_*`) beside HAMi's names: latency histograms, decisions by
outcome and reason, node-lock waits and takeovers, API requests, ledger size, reflector relists.

The layers below record into plain counters and histograms (cluster/instruments.py); this module
only reads them per scrape and writes Prometheus families, so recording stays free of
prometheus_client. The names, labels and buckets are documented in docs/metrics.md and queried by
deploy/grafana/vgpu-scheduler-dashboard.json; tests/server/test_opmetrics.py keeps all three in step.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import operator
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from vgpu_scheduler.cluster.apistats import ApiStats
from vgpu_scheduler.server.metrics import go_float

if TYPE_CHECKING:
    from vgpu_scheduler.cluster.instruments import CounterVec, HistogramData, HistogramVec
    from vgpu_scheduler.cluster.lockstats import NodeLockStats
    from vgpu_scheduler.cluster.reflector import ReflectorStats
    from vgpu_scheduler.engine.state import SchedulerState
    from vgpu_scheduler.scheduler.extender import ExtenderStats
    from vgpu_scheduler.scheduler.process import SchedulerProcess

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class OperatorSources:
    """What the operator metrics read; a missing source leaves its families out."""

    extender: ExtenderStats | None = None
    api: ApiStats | None = None
    node_lock: NodeLockStats | None = None
    reflectors: Sequence[tuple[str, ReflectorStats]] = ()
    """(resource, stats) per informer."""
    state: SchedulerState | None = None
    """For the ledger gauges (read on the event loop)."""

    @classmethod
    def of_process(cls, process: SchedulerProcess) -> OperatorSources:
        stats = getattr(process.client.transport, "stats", None)  # a test transport may have none
        return cls(
            extender=process.extender.stats,
            api=stats if isinstance(stats, ApiStats) else None,
            node_lock=process.locker.stats,
            reflectors=[(r.rt.qualified, r.stats) for r in process.reflectors],
            state=process.state,
        )


@dataclass(frozen=True, slots=True)
class LedgerSizes:
    nodes: int
    devices: int
    pods: int
    reservations: int


def ledger_sizes(state: SchedulerState) -> LedgerSizes:
    """Must run on the thread that owns `state` (the event loop)."""
    ledger = state.ledger
    devices = 0
    for node in ledger.node_names():
        view = ledger.view(node)
        devices += len(view.devices) if view is not None else 0
    pods = sum(1 for _ in state.pods())
    return LedgerSizes(len(ledger), devices, pods, len(state.reservations()))


def call_on_loop(loop: asyncio.AbstractEventLoop | None, fn: Callable[[], T], timeout: float) -> T:
    """`fn()` on `loop`'s thread (directly when there is no running loop or we are on it)."""
    if loop is None or not loop.is_running() or _running_loop() is loop:
        return fn()
    result: concurrent.futures.Future[T] = concurrent.futures.Future()

    def run() -> None:
        try:
            result.set_result(fn())
        except BaseException as exc:  # handed to the waiting thread
            result.set_exception(exc)

    loop.call_soon_threadsafe(run)
    return result.result(timeout=timeout)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class OperatorCollector(Collector):
    """Every vgpu_scheduler_* family below, from `sources`, per scrape (any thread)."""

    def __init__(
        self,
        sources: OperatorSources,
        *,
        loop: asyncio.AbstractEventLoop | None = None,
        snapshot_timeout: float = 10.0,
    ) -> None:
        self.sources = sources
        self.loop = loop if loop is not None else _running_loop()
        self.snapshot_timeout = snapshot_timeout

    def collect(self) -> Iterator[Metric]:
        src = self.sources
        if src.extender is not None:
            yield from extender_families(src.extender)
        if src.node_lock is not None:
            yield counter_family(
                "vgpu_scheduler_node_lock_takeovers",
                "Node locks taken over from another holder, by cause: expired (older than "
                "its timeout), future (dated beyond its timeout ahead), unparsable, holder_gone, "
                "holder_elsewhere, holder_terminal, holder_bind_failed, other.",
                src.node_lock.takeovers,
            )
        if src.api is not None:
            yield from api_families(src.api)
        if src.reflectors:
            yield from reflector_families(src.reflectors)
        if src.state is not None:
            state = src.state
            sizes = call_on_loop(self.loop, lambda: ledger_sizes(state), self.snapshot_timeout)
            yield from ledger_families(sizes)


def extender_families(st: ExtenderStats) -> Iterator[Metric]:
    yield histogram_family(
        "vgpu_scheduler_filter_duration_seconds",
        "Time to answer a filter request, by outcome (chosen, nofit, error, contention, no_request).",
        st.filter_duration,
    )
    yield histogram_family(
        "vgpu_scheduler_bind_duration_seconds",
        "Time to answer a bind request (node lock, pod patch and Binding), by outcome: bound, "
        "contention (node lock held), stopped (superseded, cancelled, deadline, wrong node), error.",
        st.bind_duration,
    )
    yield counter_family(
        "vgpu_scheduler_decisions",
        "Filter decisions by outcome and reason. reason: fit (chosen); for nofit the reason type "
        "that rejected the most nodes (CardInsufficientMemory, ..., NodeUnregistered, Other); "
        "nodes_busy (contention); no_device_request; for error not_synced, bad_request, "
        "pod_deleted, pod_unknown, pod_bound, decision, cancelled.",
        st.decisions,
    )
    yield histogram_family(
        "vgpu_scheduler_node_lock_wait_seconds",
        "Time a bind spent taking its node lock, by outcome: acquired, contention, stopped, error.",
        st.lock_wait,
    )


def api_families(st: ApiStats) -> Iterator[Metric]:
    yield counter_family(
        "vgpu_scheduler_api_requests",
        "Kubernetes API requests by verb (HTTP method; WATCH for watch streams) and code (HTTP "
        "status, <error> when no answer came).",
        st.requests,
    )
    yield histogram_family(
        "vgpu_scheduler_api_request_duration_seconds",
        "Kubernetes API request latency by verb, without the client-side rate limiter's wait.",
        st.duration,
    )
    yield _histogram_metric(
        "vgpu_scheduler_api_rate_limiter_wait_seconds",
        "Time requests waited for the client-side rate limiter (--kube-qps, --kube-burst).",
        (),
        [((), st.rate_limiter_wait.data())],
    )


def reflector_families(reflectors: Sequence[tuple[str, ReflectorStats]]) -> Iterator[Metric]:
    relists = CounterMetricFamily(
        "vgpu_scheduler_reflector_relists",
        "Full relists of an informer after its watch fell too far behind (410 Gone), by resource.",
        labels=["resource"],
    )
    errors = CounterMetricFamily(
        "vgpu_scheduler_reflector_errors",
        "Failed list or watch requests and cut watch streams of an informer (each followed by a "
        "backoff and a resume), by resource.",
        labels=["resource"],
    )
    for resource, st in sorted(reflectors, key=operator.itemgetter(0)):
        relists.add_metric([resource], float(st.relists_after_gone))
        errors.add_metric([resource], float(st.errors))
    yield relists
    yield errors


def ledger_families(sizes: LedgerSizes) -> Iterator[Metric]:
    for name, help_text, value in (
        ("vgpu_scheduler_ledger_nodes", "Nodes with a registered device inventory.", sizes.nodes),
        ("vgpu_scheduler_ledger_devices", "Devices registered over all nodes.", sizes.devices),
        (
            "vgpu_scheduler_ledger_pods",
            "Pods holding devices in the ledger (bound, or reserved by a filter).",
            sizes.pods,
        ),
        (
            "vgpu_scheduler_ledger_reservations",
            "Filter decisions whose allocation annotations have not been seen on the pod yet.",
            sizes.reservations,
        ),
    ):
        family = GaugeMetricFamily(name, help_text)
        family.add_metric([], float(value))
        yield family


def counter_family(name: str, help_text: str, vec: CounterVec) -> Metric:
    family = CounterMetricFamily(name, help_text, labels=list(vec.label_names))
    for labels, value in sorted(vec.series()):
        family.add_metric(list(labels), float(value))
    return family


def histogram_family(name: str, help_text: str, vec: HistogramVec) -> Metric:
    return _histogram_metric(name, help_text, vec.label_names, vec.series())


def _histogram_metric(
    name: str,
    help_text: str,
    label_names: Sequence[str],
    series: Sequence[tuple[tuple[str, ...], HistogramData]],
) -> Metric:
    """Samples in client_golang's order: per series (sorted by label values) the buckets, then
    `_sum`, then `_count`; `le` as Go formats floats."""
    family = Metric(name, help_text, "histogram")
    for values, data in sorted(series, key=operator.itemgetter(0)):
        labels = dict(zip(label_names, values, strict=True))
        bounds = [*map(go_float, data.bounds), "+Inf"]
        for le, count in zip(bounds, data.cumulative, strict=True):
            family.samples.append(Sample(f"{name}_bucket", {**labels, "le": le}, float(count)))
        family.samples.append(Sample(f"{name}_sum", labels, data.sum))
        family.samples.append(Sample(f"{name}_count", labels, float(data.count)))
    return family
