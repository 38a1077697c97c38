"""§6.2 step 3: a node lock expires only once its age is *greater* than the lock timeout.

At exactly the timeout the lock is still live: another pod meets contention, the holder re-enters
without a write, and filter-time ranking (`live_holder`) still sees the holder. One second later
it has expired. The lock value has whole-second precision, so the boundary is reachable.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.builders import container, node, pod
from vgpu_scheduler.cluster.client import KubeClient
from vgpu_scheduler.cluster.nodelock import LockValue, NodeLockContention, NodeLocker, format_lock
from vgpu_scheduler.standin.memory import MemoryCluster
from vgpu_scheduler.standin.transport import MemoryTransport
from vgpu_scheduler.wire.keys import NODE_LOCK

TAKEN = datetime(2026, 11, 29, 21, 0, 0, tzinfo=UTC)
TIMEOUT = 30.0  # not the 5m default: the boundary follows the configured timeout
AT_TIMEOUT = TAKEN + timedelta(seconds=TIMEOUT)
PAST_TIMEOUT = AT_TIMEOUT + timedelta(seconds=1)
HELD = format_lock(TAKEN, "default", "holder")


def _cluster_with_lock() -> MemoryCluster:
    cluster = MemoryCluster()
    cluster.create("pods", pod("holder", containers=[container(image="busybox")], typed=True),
        namespace="default")
    cluster.create("nodes", node("n1", annotations={NODE_LOCK: HELD}, typed=True))
    return cluster


def _locker(cluster: MemoryCluster, moment: datetime, **kw: Any) -> NodeLocker:
    def now() -> datetime:
        return moment

    return NodeLocker(KubeClient(MemoryTransport(cluster)), timeout=TIMEOUT, now=now, **kw)


def _lock_of(cluster: MemoryCluster) -> str | None:
    annotations: dict[str, str] = cluster.get("nodes", "n1")["metadata"].get("annotations") or {}
    return annotations.get(NODE_LOCK)


async def test_a_lock_exactly_timeout_old_is_still_contended() -> None:
    cluster = _cluster_with_lock()
    with pytest.raises(NodeLockContention):
        await _locker(cluster, AT_TIMEOUT).lock("n1", "default", "other")
    assert _lock_of(cluster) == HELD


async def test_a_lock_one_second_past_the_timeout_is_taken_over() -> None:
    cluster = _cluster_with_lock()
    await _locker(cluster, PAST_TIMEOUT).lock("n1", "default", "other")
    assert _lock_of(cluster) == format_lock(PAST_TIMEOUT, "default", "other")


async def test_the_holder_re_enters_a_lock_exactly_timeout_old_without_refreshing_it() -> None:
    # Re-entry keeps the original time; only an expired lock of one's own is taken again anew.
    cluster = _cluster_with_lock()
    await _locker(cluster, AT_TIMEOUT).lock("n1", "default", "holder")
    assert _lock_of(cluster) == HELD


@pytest.mark.parametrize(
    ("moment", "expected"),
    [
        pytest.param(AT_TIMEOUT, LockValue(TAKEN, "default", "holder"), id="exactly the timeout: live"),
        pytest.param(PAST_TIMEOUT, None, id="one second past: expired"),
    ],
)
def test_live_holder_follows_the_same_boundary(moment: datetime, expected: LockValue | None) -> None:
    cluster = _cluster_with_lock()
    locker = _locker(cluster, moment, cached_node=lambda name: cluster.get("nodes", name))
    assert locker.live_holder("n1", lambda held, node: True) == expected
