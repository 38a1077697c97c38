"""The vgpu_scheduler_* operator families: text format as client_golang writes histograms, bounded
decision reasons, ledger gauges read on the event loop, and what each source adds."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from tests import builders
from tests.builders import assigned_annotations, container, device
from vgpu_scheduler.cluster.apistats import ApiStats
from vgpu_scheduler.cluster.client import KubeClient
from vgpu_scheduler.cluster.lockstats import NodeLockStats
from vgpu_scheduler.cluster.reflector import ReflectorStats
from vgpu_scheduler.config import DeviceConfig
from vgpu_scheduler.engine.decide import NODE_UNREGISTERED
from vgpu_scheduler.engine.state import SchedulerState
from vgpu_scheduler.scheduler.extender import ExtenderStats, failed_by_type, main_reason
from vgpu_scheduler.scheduler.options import SchedulerOptions
from vgpu_scheduler.scheduler.process import SchedulerProcess
from vgpu_scheduler.server.metrics import exposition
from vgpu_scheduler.server.opmetrics import LedgerSizes, OperatorCollector, OperatorSources, ledger_sizes
from vgpu_scheduler.standin.memory import MemoryCluster
from vgpu_scheduler.standin.transport import MemoryTransport

BUCKETS = ["0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1",
           "2.5", "5", "10", "30", "+Inf"]


def text_of(sources: OperatorSources) -> str:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(OperatorCollector(sources))
    return exposition(registry).decode()


def new_process() -> SchedulerProcess:
    client = KubeClient(MemoryTransport(MemoryCluster()))
    return SchedulerProcess(SchedulerOptions(), DeviceConfig(), client, "host")


def state_with_one_pod() -> SchedulerState:
    state = new_process().state  # built with the process's device configuration
    state.set_node_devices("n1", [device("GPU-0", index=0), device("GPU-1", index=1)])
    state.set_node_devices("n2", [device("GPU-2", index=0)])
    annotations = assigned_annotations("n1", "GPU-0,NVIDIA,1000,30:;")
    state.on_pod(builders.pod("p1", namespace="team", uid="uid-p1", phase="Running",
                              containers=[container("c")], annotations=annotations))
    return state


def test_histograms_are_written_as_client_golang_writes_them() -> None:
    stats = ExtenderStats()
    for seconds in (0.25, 0.5, 40.0):  # on a bound, on the next bound, past the last one
        stats.filter_duration.observe(("chosen",), seconds)
    lines = text_of(OperatorSources(extender=stats)).splitlines()
    name = "vgpu_scheduler_filter_duration_seconds"
    assert lines[lines.index(f"# TYPE {name} histogram") - 1].startswith(f"# HELP {name} Time to answer")
    start = lines.index(f'{name}_bucket{{outcome="chosen",le="0.0005"}} 0')
    cumulative = [0] * 8 + [1] + [2] * 6 + [3]
    buckets = zip(BUCKETS, cumulative, strict=True)
    assert lines[start : start + 18] == [
        *(f'{name}_bucket{{outcome="chosen",le="{le}"}} {n}' for le, n in buckets),
        f'{name}_sum{{outcome="chosen"}} 40.75',
        f'{name}_count{{outcome="chosen"}} 3',
    ]
    # Every outcome is there from the start, in label-value order, so rates work before the first one.
    counts = [line for line in lines if line.startswith(f"{name}_count")]
    assert counts == [
        f'{name}_count{{outcome="{o}"}} {3 if o == "chosen" else 0}'
        for o in ("chosen", "contention", "error", "no_request", "nofit")
    ]


def test_every_family_parses_with_its_type() -> None:
    extender, api, lock = ExtenderStats(), ApiStats(), NodeLockStats()
    extender.decisions.inc(("nofit", "CardInsufficientMemory"))
    extender.bind_duration.observe(("bound",), 0.01)
    extender.lock_wait.observe(("acquired",), 0.002)
    api.record("PATCH", 200, 0.003)
    api.record("WATCH", 200, None)
    api.rate_limiter_wait.observe(0.0)
    lock.note_takeover("n1", "expired")
    lock.lock_written("n1", over_another=True)
    reflectors = [("pods", ReflectorStats(relists_after_gone=2, errors=3)), ("nodes", ReflectorStats())]
    sources = OperatorSources(extender, api, lock, reflectors, state_with_one_pod())
    text = text_of(sources)
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert {name: f.type for name, f in families.items()} == {
        "vgpu_scheduler_api_rate_limiter_wait_seconds": "histogram",
        "vgpu_scheduler_api_request_duration_seconds": "histogram",
        "vgpu_scheduler_api_requests": "counter",
        "vgpu_scheduler_bind_duration_seconds": "histogram",
        "vgpu_scheduler_decisions": "counter",
        "vgpu_scheduler_filter_duration_seconds": "histogram",
        "vgpu_scheduler_ledger_devices": "gauge",
        "vgpu_scheduler_ledger_nodes": "gauge",
        "vgpu_scheduler_ledger_pods": "gauge",
        "vgpu_scheduler_ledger_reservations": "gauge",
        "vgpu_scheduler_node_lock_takeovers": "counter",
        "vgpu_scheduler_node_lock_wait_seconds": "histogram",
        "vgpu_scheduler_reflector_errors": "counter",
        "vgpu_scheduler_reflector_relists": "counter",
    }
    lines = text.splitlines()
    assert 'vgpu_scheduler_decisions_total{outcome="nofit",reason="CardInsufficientMemory"} 1' in lines
    assert 'vgpu_scheduler_api_requests_total{code="200",verb="PATCH"} 1' in lines
    assert 'vgpu_scheduler_api_requests_total{code="200",verb="WATCH"} 1' in lines
    assert 'vgpu_scheduler_api_request_duration_seconds_count{verb="PATCH"} 1' in lines
    assert not any(line.startswith('vgpu_scheduler_api_request_duration_seconds_count{verb="WATCH"')
                   for line in lines)
    assert 'vgpu_scheduler_api_rate_limiter_wait_seconds_bucket{le="0.0005"} 1' in lines
    assert 'vgpu_scheduler_node_lock_takeovers_total{cause="expired"} 1' in lines
    assert 'vgpu_scheduler_node_lock_takeovers_total{cause="holder_gone"} 0' in lines
    assert 'vgpu_scheduler_reflector_relists_total{resource="pods"} 2' in lines
    assert 'vgpu_scheduler_reflector_relists_total{resource="nodes"} 0' in lines
    assert 'vgpu_scheduler_reflector_errors_total{resource="pods"} 3' in lines
    assert "vgpu_scheduler_ledger_nodes 2" in lines
    assert "vgpu_scheduler_ledger_devices 3" in lines
    assert "vgpu_scheduler_ledger_pods 1" in lines
    assert "vgpu_scheduler_ledger_reservations 0" in lines


def test_no_source_no_family() -> None:
    assert text_of(OperatorSources()) == ""


@pytest.mark.parametrize(
    ("failed", "reason"),
    [
        pytest.param(
            {"a": "2/2 CardInsufficientMemory", "b": "1/2 CardInsufficientCore, 1/2 CardInsufficientMemory",
             "c": "2/2 CardInsufficientCore", "d": "1/1 CardTypeMismatch"},
            "CardInsufficientCore",
            id="most nodes; a tie goes to the first name",
        ),
        pytest.param({"a": "NodeInsufficientDevice", "b": NODE_UNREGISTERED}, "NodeInsufficientDevice",
                     id="unregistered nodes do not outvote a reason type"),
        pytest.param({"a": NODE_UNREGISTERED, "b": NODE_UNREGISTERED}, "NodeUnregistered",
                     id="every node unregistered"),
        pytest.param({"node-7": "failed to get node node-7: boom"}, "Other",
                     id="free text never becomes a label"),
    ],
)
def test_the_reason_of_a_nofit_decision_is_bounded(failed: dict[str, str], reason: str) -> None:
    assert main_reason(failed_by_type(failed), failed) == reason


async def test_ledger_gauges_are_read_on_the_loop_thread() -> None:
    state = state_with_one_pod()
    loop_thread = threading.get_ident()
    readers: list[int] = []
    reservations = state.reservations

    def tracking() -> Any:
        readers.append(threading.get_ident())
        return reservations()

    state.reservations = tracking  # type: ignore[method-assign]
    collector = OperatorCollector(OperatorSources(state=state))
    families = await asyncio.to_thread(lambda: list(collector.collect()))
    assert readers == [loop_thread]
    values = {f.name: f.samples[0].value for f in families}
    assert values == {
        "vgpu_scheduler_ledger_nodes": 2,
        "vgpu_scheduler_ledger_devices": 3,
        "vgpu_scheduler_ledger_pods": 1,
        "vgpu_scheduler_ledger_reservations": 0,  # reservations: tests/integration/test_operator_metrics.py
    }
    assert ledger_sizes(state) == LedgerSizes(nodes=2, devices=3, pods=1, reservations=0)


def test_the_process_sources() -> None:
    process = new_process()
    transport = process.client.transport
    sources = OperatorSources.of_process(process)
    assert sources.extender is process.extender.stats
    assert sources.api is transport.stats
    assert sources.node_lock is process.locker.stats
    assert [name for name, _ in sources.reflectors] == ["pods", "nodes", "resourcequotas"]
    assert sources.state is process.state


def test_a_transport_without_stats_leaves_the_api_families_out() -> None:
    class Bare:
        def with_own_rate_limit(self, qps: float | None = None, burst: int | None = None) -> Bare:
            return self

    process = SchedulerProcess(SchedulerOptions(), DeviceConfig(), KubeClient(Bare()), "host")  # type: ignore[arg-type]
    assert OperatorSources.of_process(process).api is None
