"""The collectors behind `/metrics`: the scheduler's series per scrape, `hami_build_info`, the
extender's counters, and the registry that holds them (no process/platform collectors)."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from vgpu_scheduler.server.metrics.families import BUILD_INFO, BUILD_INFO_HELP, families
from vgpu_scheduler.server.metrics.snapshot import StateSnapshot, snapshot_rows, take_snapshot
from vgpu_scheduler.version import build_info_labels

if TYPE_CHECKING:
    from vgpu_scheduler.engine.state import SchedulerState
    from vgpu_scheduler.scheduler.stats import ExtenderStats


class SchedulerCollector(Collector):
    """Every series but hami_build_info, computed per scrape from `state`.

    `collect()` may run on any thread: off the loop it asks `loop` (the running loop at
    construction time unless given) for the snapshot and waits at most `snapshot_timeout`."""

    def __init__(
        self,
        state: SchedulerState,
        *,
        legacy: bool = False,
        loop: asyncio.AbstractEventLoop | None = None,
        snapshot_timeout: float = 10.0,
    ) -> None:
        self.state = state
        self.legacy = legacy
        self.snapshot_timeout = snapshot_timeout
        if loop is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                loop = None
        self.loop = loop

    def snapshot(self) -> StateSnapshot:
        loop = self.loop
        if loop is None or not loop.is_running() or _running_loop() is loop:
            return take_snapshot(self.state)
        result: concurrent.futures.Future[StateSnapshot] = concurrent.futures.Future()

        def grab() -> None:
            try:
                result.set_result(take_snapshot(self.state))
            except BaseException as exc:  # handed to the waiting thread
                result.set_exception(exc)

        loop.call_soon_threadsafe(grab)
        return result.result(timeout=self.snapshot_timeout)

    def collect(self) -> Iterable[Metric]:
        return families(snapshot_rows(self.snapshot()), self.legacy)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class BuildInfoCollector(Collector):
    """`hami_build_info` = 1 (no zone label)."""

    def __init__(self, labels: Mapping[str, str] | None = None) -> None:
        self.labels = dict(labels if labels is not None else build_info_labels())

    def collect(self) -> Iterator[Metric]:
        names = list(self.labels)
        family = GaugeMetricFamily(BUILD_INFO, BUILD_INFO_HELP, labels=names)
        family.add_metric([self.labels[n] for n in names], 1.0)
        yield family


class ExtenderCollector(Collector):
    """Our own counters beside HAMi's names: what the extender verbs did, and why binds stopped."""

    def __init__(self, stats: ExtenderStats) -> None:
        self.stats = stats

    def collect(self) -> Iterator[Metric]:
        st = self.stats
        yield _counter("vgpu_scheduler_filter_requests", "Filter requests received.", st.filters)
        yield _counter(
            "vgpu_scheduler_filter_unknown_pod",
            "Filters refused because the pod is not in the informer cache (nothing reserved).",
            st.filters_unknown_pod,
        )
        yield _counter(
            "vgpu_scheduler_filter_lock_contention",
            "Filters refused with lock contention: every fitting node was locked or about to be "
            "locked by another pod's bind (nothing reserved; kube-scheduler retries).",
            st.filters_all_busy,
        )
        yield _counter("vgpu_scheduler_bind_requests", "Bind requests received.", st.binds)
        yield _counter(
            "vgpu_scheduler_bind_failures", "Bind requests answered with an error.", st.bind_failures
        )
        yield _counter(
            "vgpu_scheduler_bind_lock_contention",
            "Binds that found the node lock held by another live pod.",
            st.lock_contention,
        )
        stopped = CounterMetricFamily(
            "vgpu_scheduler_bind_stopped",
            "Binds stopped before their next write, by reason: superseded (a newer filter for the "
            "pod), cancelled (the caller went away), deadline (--bind-timeout), wrong_node (not the "
            "node of the latest filter). Each released the node lock it held.",
            labels=["reason"],
        )
        for reason, value in (
            ("superseded", st.binds_superseded),
            ("cancelled", st.binds_cancelled),
            ("deadline", st.binds_deadline),
            ("wrong_node", st.binds_wrong_node),
        ):
            stopped.add_metric([reason], float(value))
        yield stopped


def _counter(name: str, help_text: str, value: int) -> Metric:
    family = CounterMetricFamily(name, help_text)
    family.add_metric([], float(value))
    return family


def metrics_registry(
    state: SchedulerState,
    *,
    legacy: bool = False,
    build_info: Mapping[str, str] | None = None,
    loop: asyncio.AbstractEventLoop | None = None,
    extender_stats: ExtenderStats | None = None,
) -> CollectorRegistry:
    """A fresh registry with hami_build_info and the scheduler collector (call it on the loop), plus
    our extender counters when `extender_stats` is given."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BuildInfoCollector(build_info))
    registry.register(SchedulerCollector(state, legacy=legacy, loop=loop))
    if extender_stats is not None:
        registry.register(ExtenderCollector(extender_stats))
    return registry
