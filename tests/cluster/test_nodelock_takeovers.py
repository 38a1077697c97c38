"""vgpu_scheduler_node_lock_takeovers_total: a takeover counts once, by cause, only when its
guarded write succeeded (through the real client on the in-memory API server)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.builders import api_pod, node
from vgpu_scheduler.cluster.client import KubeClient
from vgpu_scheduler.cluster.lockstats import CAUSES
from vgpu_scheduler.cluster.nodelock import NodeLockContention, NodeLocker, format_lock
from vgpu_scheduler.standin.memory import MemoryCluster
from vgpu_scheduler.standin.transport import MemoryTransport
from vgpu_scheduler.wire.keys import BIND_PHASE, BIND_TIME, NODE_LOCK

T0 = datetime(2026, 11, 29, 21, 0, 0, tzinfo=UTC)
LATER = T0 + timedelta(minutes=5, seconds=1)  # past the default 5-minute timeout of a T0 lock
ZERO = {(cause,): 0 for cause in CAUSES}
HELD = format_lock(T0, "default", "holder")


def _locker(cluster: MemoryCluster, now: datetime, cached: dict[str, Any] | None = None) -> NodeLocker:
    client = KubeClient(MemoryTransport(cluster))
    return NodeLocker(client, now=lambda: now, cached_node=(lambda _n: cached) if cached else None)


def _lock_node(cluster: MemoryCluster, value: str | None) -> None:
    cluster.create("nodes", node("n1", typed=True, annotations={} if value is None else {NODE_LOCK: value}))


@pytest.mark.parametrize(
    ("lock", "holder_exists", "now", "counted"),
    [
        pytest.param(None, False, T0, {}, id="free node: no takeover"),
        pytest.param(HELD, True, LATER, {("expired",): 1}, id="expired"),
        pytest.param(HELD, False, T0, {("holder_gone",): 1}, id="holder gone"),
        pytest.param(format_lock(T0, "default", "p2"), True, T0, {}, id="our own live lock: re-entered"),
    ],
)
async def test_takeovers_by_cause(
    lock: str | None, holder_exists: bool, now: datetime, counted: dict[tuple[str], int]
) -> None:
    cluster = MemoryCluster()
    if holder_exists:
        cluster.create("pods", api_pod("holder" if "holder" in (lock or "") else "p2"), namespace="default")
    _lock_node(cluster, lock)
    locker = _locker(cluster, now)
    await locker.lock("n1", "default", "p2")
    assert dict(locker.stats.takeovers.series()) == {**ZERO, **counted}


async def test_a_holder_bound_to_another_node_is_a_takeover_by_its_own_cause() -> None:
    cluster = MemoryCluster()
    cluster.create("pods", api_pod("holder", node_name="n2"), namespace="default")
    _lock_node(cluster, HELD)
    locker = _locker(cluster, T0)
    await locker.lock("n1", "default", "p2")
    assert dict(locker.stats.takeovers.series()) == {**ZERO, ("holder_elsewhere",): 1}


async def test_contention_is_no_takeover() -> None:
    cluster = MemoryCluster()
    cluster.create("pods", api_pod("holder"), namespace="default")
    _lock_node(cluster, format_lock(T0, "default", "holder"))
    locker = _locker(cluster, T0)
    with pytest.raises(NodeLockContention):
        await locker.lock("n1", "default", "p2")
    assert dict(locker.stats.takeovers.series()) == ZERO


async def test_a_takeover_lost_to_a_conflict_is_not_counted() -> None:
    """The cache still shows an expired lock that was released meanwhile: the takeover write fails
    (409), the fresh read finds the node free, and the lock taken then is no takeover."""
    cluster = MemoryCluster()
    cluster.create("pods", api_pod("holder"), namespace="default")
    _lock_node(cluster, format_lock(T0, "default", "holder"))
    stale = cluster.get("nodes", "n1")
    cluster.patch("nodes", "n1", {"metadata": {"annotations": {NODE_LOCK: None}}})
    locker = _locker(cluster, LATER, cached=stale)
    await locker.lock("n1", "default", "p2")
    assert dict(locker.stats.takeovers.series()) == ZERO


async def test_a_takeover_retried_after_a_conflict_counts_once() -> None:
    cluster = MemoryCluster()
    cluster.create("pods", api_pod("holder"), namespace="default")
    _lock_node(cluster, format_lock(T0, "default", "holder"))
    stale = cluster.get("nodes", "n1")
    cluster.patch("nodes", "n1", {"metadata": {"labels": {"touched": "yes"}}})  # a newer version, same lock
    locker = _locker(cluster, LATER, cached=stale)
    await locker.lock("n1", "default", "p2")
    taken = cluster.get("nodes", "n1")["metadata"]["annotations"][NODE_LOCK]
    assert taken == format_lock(LATER, "default", "p2")
    assert dict(locker.stats.takeovers.series()) == {**ZERO, ("expired",): 1}


def _holder(*, phase: str | None = None, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return api_pod("holder", phase=phase, annotations=annotations)


T0_UNIX = int(T0.timestamp())


@pytest.mark.parametrize(
    ("holder", "counted"),
    [
        pytest.param(_holder(phase="Succeeded"), {("holder_terminal",): 1}, id="holder succeeded"),
        pytest.param(_holder(phase="Failed"), {("holder_terminal",): 1}, id="holder failed"),
        pytest.param(
            _holder(annotations={BIND_PHASE: "failed", BIND_TIME: str(T0_UNIX)}),
            {("holder_bind_failed",): 1},
            id="holder's bind failed after it took the lock",
        ),
        pytest.param(
            _holder(annotations={BIND_PHASE: "failed", BIND_TIME: str(T0_UNIX + 3)}),
            {("holder_bind_failed",): 1},
            id="holder's bind failed seconds after the lock",
        ),
    ],
)
async def test_a_holder_that_no_longer_needs_the_lock_is_taken_over_at_once(
    holder: dict[str, Any], counted: dict[tuple[str], int]
) -> None:
    cluster = MemoryCluster()
    cluster.create("pods", holder, namespace="default")
    _lock_node(cluster, HELD)
    locker = _locker(cluster, T0)  # the lock is fresh: HAMi would wait out its 5 minutes
    await locker.lock("n1", "default", "p2")
    taken = cluster.get("nodes", "n1")["metadata"]["annotations"][NODE_LOCK]
    assert taken == format_lock(T0, "default", "p2")
    assert dict(locker.stats.takeovers.series()) == {**ZERO, **counted}


@pytest.mark.parametrize(
    "holder",
    [
        pytest.param(_holder(phase="Running"), id="holder running"),
        pytest.param(
            _holder(annotations={BIND_PHASE: "allocating", BIND_TIME: str(T0_UNIX)}), id="holder allocating"
        ),
        pytest.param(
            _holder(annotations={BIND_PHASE: "failed", BIND_TIME: str(T0_UNIX - 1)}),
            id="failed phase left by an earlier attempt, before this lock",
        ),
        pytest.param(
            _holder(annotations={BIND_PHASE: "failed", BIND_TIME: "soon"}), id="failed phase, bad bind-time"
        ),
        pytest.param(_holder(annotations={BIND_PHASE: "failed"}), id="failed phase, no bind-time"),
    ],
)
async def test_a_holder_that_may_still_need_the_lock_is_contention(holder: dict[str, Any]) -> None:
    cluster = MemoryCluster()
    cluster.create("pods", holder, namespace="default")
    _lock_node(cluster, HELD)
    locker = _locker(cluster, T0)
    with pytest.raises(NodeLockContention):
        await locker.lock("n1", "default", "p2")
    assert dict(locker.stats.takeovers.series()) == ZERO
