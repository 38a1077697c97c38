"""Our extender counters beside HAMi's metric names: binds stopped by reason, contention, unknown pods."""

from __future__ import annotations

from vgpu_scheduler.engine.state import SchedulerState
from vgpu_scheduler.scheduler.extender import ExtenderStats
from vgpu_scheduler.server.metrics import exposition, metrics_registry


def test_extender_counters_are_exposed_as_go_writes_counters() -> None:
    stats = ExtenderStats(binds=7, bind_failures=3, binds_superseded=1, binds_cancelled=2, lock_contention=4)
    text = exposition(metrics_registry(SchedulerState(), extender_stats=stats)).decode()
    lines = text.splitlines()
    assert "# TYPE vgpu_scheduler_bind_stopped_total counter" in lines
    assert 'vgpu_scheduler_bind_stopped_total{reason="cancelled"} 2' in lines
    assert 'vgpu_scheduler_bind_stopped_total{reason="superseded"} 1' in lines
    assert 'vgpu_scheduler_bind_stopped_total{reason="deadline"} 0' in lines
    assert "vgpu_scheduler_bind_requests_total 7" in lines
    assert "vgpu_scheduler_bind_failures_total 3" in lines
    assert "vgpu_scheduler_bind_lock_contention_total 4" in lines


def test_without_extender_stats_only_hamis_families_are_written() -> None:
    text = exposition(metrics_registry(SchedulerState())).decode()
    assert "vgpu_scheduler_" not in text
