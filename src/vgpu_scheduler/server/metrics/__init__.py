"""Prometheus metrics (`GET /metrics` on --metrics-bind-address, §8.4).

A fresh `CollectorRegistry` (no process/platform collectors) with two collectors:

* `hami_build_info` = 1, labelled with `version.build_info_labels()`;
* `SchedulerCollector`, which computes every other series per scrape from the scheduler state:
  registered devices and their usage (ledger), realized MIG instances, namespace quotas and the
  collapsed per-pod allocations. Each of those series carries the constant label `zone="vGPU"`.
  With `legacy=True` (--legacy-metrics) the pre-2.8 names are emitted as well.

Output matches client_golang's: families sorted by name, series sorted by label values, labels
sorted by name inside a series (prometheus_client's text writer sorts them the same way), and a
duplicated series (same labels twice, e.g. a device id listed twice on a node) emitted once
instead of failing the whole scrape.

The state belongs to the event loop. The HTTP handler renders in a worker thread (building and
formatting the series is the expensive part: seconds for thousands of nodes) and the collector
asks the loop for a snapshot (`take_snapshot`: references to the immutable pod allocations and
copies of the usage counters, milliseconds), so the state is only ever read on the loop thread.
"""

from vgpu_scheduler.server.metrics.app import make_metrics_app
from vgpu_scheduler.server.metrics.collectors import (
    BuildInfoCollector,
    ExtenderCollector,
    SchedulerCollector,
    metrics_registry,
)
from vgpu_scheduler.server.metrics.exposition import CONTENT_TYPE, exposition, go_float, render
from vgpu_scheduler.server.metrics.families import families, normalized_cores
from vgpu_scheduler.server.metrics.snapshot import (
    ContainerRow,
    DeviceRow,
    MetricsSnapshot,
    MigRow,
    QuotaRow,
    StateSnapshot,
    snapshot_rows,
    take_snapshot,
)

__all__ = [
    "CONTENT_TYPE",
    "BuildInfoCollector",
    "ContainerRow",
    "DeviceRow",
    "ExtenderCollector",
    "MetricsSnapshot",
    "MigRow",
    "QuotaRow",
    "SchedulerCollector",
    "StateSnapshot",
    "exposition",
    "families",
    "go_float",
    "make_metrics_app",
    "metrics_registry",
    "normalized_cores",
    "render",
    "snapshot_rows",
    "take_snapshot",
]
