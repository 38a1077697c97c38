"""`simulate` ends on every input (issue 27, item 1): a pod that fails with an error on every attempt
is retried on backoff as kube-scheduler would, then parked until something happens, and the run ends
with it pending and its error reported; lock deadlines move the clock; `max_sim_time` and the
no-progress guard stop a run that would go on, and the report says which did."""

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.builders import container, pod
from vgpu_scheduler.cluster.nodelock import format_lock
from vgpu_scheduler.simulate import retries
from vgpu_scheduler.simulate.loop import simulate
from vgpu_scheduler.simulate.options import ARRIVAL_ANNOTATION, SimulationOptions
from vgpu_scheduler.simulate.retries import PARK_AFTER_ERRORS
from vgpu_scheduler.standin.embedded.fleet import fleet
from vgpu_scheduler.standin.embedded.runtime import DEFAULT_EPOCH
from vgpu_scheduler.wire import keys

T0 = datetime.fromtimestamp(DEFAULT_EPOCH, tz=UTC)


def _gpu_pod(name: str, *, annotations: dict[str, str] | None = None, node: str = "") -> dict[str, Any]:
    limits = {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1", "nvidia.com/gpumem": "1024"}
    return pod(
        name, typed=True, containers=[container("c", image="x", limits=limits)],
        annotations=annotations or {}, node_name=node or None,
    )


def _bad_weights(name: str) -> dict[str, Any]:
    return _gpu_pod(name, annotations={keys.DEVICE_SCORING_WEIGHTS: "garbage"})


def _by_name(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["name"]: p for p in report["pods"]}


async def test_a_pod_whose_filter_always_errors_ends_pending_with_its_error() -> None:
    pods = [_bad_weights("bad"), _gpu_pod("good"), _bad_weights("bad2")]
    result = await simulate(fleet(2, 2), pods)
    got = _by_name(result.report)
    assert got["good"]["node"] is not None
    for name in ("bad", "bad2"):
        assert got[name]["node"] is None
        assert "device-scoring-weights" in got[name]["error"]
        assert set(got[name]["reasons"]) == {"gpu-node-00", "gpu-node-01"}
    assert "error" not in got["good"]
    summary = result.report["summary"]
    assert summary["pods"] == {"total": 3, "scheduled": 1, "pending": 2, "pending_error": 2}
    assert summary["end"] == "done"
    # Each erring pod: PARK_AFTER_ERRORS attempts, plus those after the good pod's bind resumed it.
    assert result.cycles <= 1 + 2 * 2 * PARK_AFTER_ERRORS


async def test_a_pod_that_fits_nowhere_has_reasons_but_no_error() -> None:
    huge = pod("huge", typed=True, containers=[container("c", limits={"nvidia.com/gpu": "99"})])
    result = await simulate(fleet(1, 2), [huge])
    (entry,) = result.report["pods"]
    assert entry["node"] is None and entry["reasons"] and "error" not in entry
    assert result.report["summary"]["pods"]["pending_error"] == 0


async def test_a_parked_pod_resumes_when_something_happens_later() -> None:
    """An arrival 1,000 s later resumes the parked pod (it errors again: still reported), and the
    run still ends."""
    late = _gpu_pod("late", annotations={ARRIVAL_ANNOTATION: "1000"})
    result = await simulate(fleet(1, 2), [_bad_weights("bad"), late])
    got = _by_name(result.report)
    assert got["late"]["node"] == "gpu-node-00"
    assert got["bad"]["node"] is None and got["bad"]["error"]
    assert result.report["summary"]["makespan_seconds"] == 1000.0
    assert result.cycles == 1 + 2 * PARK_AFTER_ERRORS


async def test_lock_deadlines_move_the_clock_until_the_lock_is_free() -> None:
    """Two nodes locked by a live holder until 300 s and 600 s: the pod pinned to the second one
    waits out both deadlines (the first frees nothing it can use) and binds after 600 s."""
    nodes = fleet(2, 1)
    holders = []
    for i, node in enumerate(nodes):
        taken = T0 + timedelta(seconds=300 * i)
        node["metadata"]["annotations"][keys.NODE_LOCK] = format_lock(taken, "default", f"holder{i}")
        holders.append(_gpu_pod(f"holder{i}", node=node["metadata"]["name"]))
    pinned = _gpu_pod("pinned")
    pinned["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "gpu-node-01"}
    nodes[1]["metadata"]["labels"]["kubernetes.io/hostname"] = "gpu-node-01"
    result = await simulate(nodes, [pinned], existing=holders)
    got = _by_name(result.report)
    assert got["pinned"]["node"] == "gpu-node-01"
    assert DEFAULT_EPOCH + 600 < int(got["pinned"]["annotations"][keys.BIND_TIME]) <= DEFAULT_EPOCH + 610


async def test_max_sim_time_stops_a_run_and_says_so() -> None:
    late = _gpu_pod("late", annotations={ARRIVAL_ANNOTATION: "500"})
    result = await simulate(
        fleet(1, 2), [_gpu_pod("early"), late], options=SimulationOptions(max_sim_time=100)
    )
    got = _by_name(result.report)
    assert got["early"]["node"] is not None
    assert got["late"]["node"] is None  # never arrived: the run stopped before 500 s
    assert result.report["summary"]["end"] == "max_sim_time"


async def test_deadlines_without_progress_stop_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every deadline resumes the parked pod, which errors again: past IDLE_DEADLINES_LIMIT deadlines
    in a row with nothing bound, the run stops (here 2, with 4 staggered locks)."""
    monkeypatch.setattr(retries, "IDLE_DEADLINES_LIMIT", 2)
    nodes = fleet(4, 1)
    for i, node in enumerate(nodes):
        taken = T0 + timedelta(seconds=100 * i)
        node["metadata"]["annotations"][keys.NODE_LOCK] = format_lock(taken, "default", "holder")
    holder = _gpu_pod("holder", node="gpu-node-00")
    result = await simulate(nodes, [_bad_weights("bad")], existing=[holder])
    assert result.report["summary"]["end"] == "no_progress"
    assert _by_name(result.report)["bad"]["error"]
    # Parked three times: at the start, after the first deadline, after the second.
    assert result.cycles == 3 * PARK_AFTER_ERRORS
