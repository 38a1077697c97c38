"""Issue 27: a lock that can never expire holds no node (§6.2).

A lock dated further ahead than its timeout (the timeout itself is allowed for clock skew) or whose
value does not parse is stale: the next bind takes it over with one guarded write, counted in
vgpu_scheduler_node_lock_takeovers_total by cause (`future`, `unparsable`), and lock-aware
placement does not count it as live. HAMi fails the bind on such a node. Both lock kinds: the
shared `hami.io/mutex.lock` (NodeLocker) and a vendor's own lock without holder (StampLocker,
Cambricon's `cambricon.com/dsmlu.lock`, the only vendor declaring one)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.builders import api_pod, gpu_node, gpu_pod, node
from vgpu_scheduler.cluster import nodelock, stamplock
from vgpu_scheduler.cluster.client import KubeClient
from vgpu_scheduler.cluster.lockstats import CAUSES, NodeLockStats
from vgpu_scheduler.cluster.lockview import describe_node_locks, node_lock_deadlines
from vgpu_scheduler.cluster.nodelock import (
    LockValue,
    NodeLockContention,
    NodeLocker,
    describe_lock,
    format_lock,
    format_rfc3339,
    lock_expires_at,
    stale_cause,
)
from vgpu_scheduler.cluster.stamplock import StampLocker, stamp_expires_at
from vgpu_scheduler.configfile import default_device_config
from vgpu_scheduler.devices.cambricon import DSMLU_LOCK, LOCK
from vgpu_scheduler.devices.protocol import NodeLockSpec
from vgpu_scheduler.scheduler.options import SchedulerOptions
from vgpu_scheduler.scheduler.process import SchedulerProcess
from vgpu_scheduler.standin.memory import MemoryCluster
from vgpu_scheduler.standin.transport import MemoryTransport
from vgpu_scheduler.wire.keys import NODE_LOCK

T0 = datetime(2026, 11, 29, 21, 0, 0, tzinfo=UTC)
TIMEOUT = 300.0  # NodeLocker's default --node-lock-timeout
EXPIRY = DSMLU_LOCK.expiry_seconds  # 120 s
ZERO = {(cause,): 0 for cause in CAUSES}
FAR_AHEAD = T0 + timedelta(days=3 * 365)
UNPARSABLE_MUTEX = [
    pytest.param(",,", id="commas only"),
    pytest.param("", id="empty"),
    pytest.param("garbage", id="garbage"),
    pytest.param("2020-01-01T00:00:00Z,a", id="two parts"),
    pytest.param("2026-11-29T21:00:00Z,a,b,c", id="four parts"),
    pytest.param("2026-11-29 21:00:00Z,default,holder", id="time does not parse"),
]
UNPARSABLE_STAMP = [
    pytest.param(",,", id="commas only"),
    pytest.param("", id="empty"),
    pytest.param("garbage", id="garbage"),
    pytest.param("2020-01-01T00:00:00Z,a", id="extra text"),
    pytest.param(format_lock(T0, "default", "p"), id="an owner-format value"),
]


def _cluster(key: str, value: str, *, holder: bool = True) -> MemoryCluster:
    cluster = MemoryCluster()
    if holder:  # a live holder pod: only the lock's own value can make it takeable
        cluster.create("pods", api_pod("holder"), namespace="default")
    cluster.create("nodes", node("n1", typed=True, annotations={key: value}))
    return cluster


def _value(cluster: MemoryCluster, key: str) -> str | None:
    annotations = cluster.get("nodes", "n1")["metadata"].get("annotations") or {}
    return annotations.get(key)


def _mutex_locker(cluster: MemoryCluster, **kw: Any) -> NodeLocker:
    return NodeLocker(KubeClient(MemoryTransport(cluster)), timeout=TIMEOUT, now=lambda: T0, **kw)


def _stamp_locker(cluster: MemoryCluster, stats: NodeLockStats | None) -> StampLocker:
    return StampLocker(KubeClient(MemoryTransport(cluster)), DSMLU_LOCK, now=lambda: T0, stats=stats)


def _counted(stats: NodeLockStats) -> dict[tuple[str, ...], float]:
    return {k: v for k, v in stats.takeovers.series() if v}


# --------------------------------------------------------------------------------------------
# hami.io/mutex.lock (NodeLocker)


@pytest.mark.parametrize(
    ("taken_at", "cause"),
    [
        pytest.param(FAR_AHEAD, "future", id="years ahead"),
        pytest.param(T0 + timedelta(seconds=TIMEOUT + 1), "future", id="one second beyond the timeout"),
        pytest.param(T0 - timedelta(seconds=TIMEOUT + 1), "expired", id="expired (unchanged)"),
    ],
)
async def test_a_mutex_lock_out_of_its_window_is_taken_over(taken_at: datetime, cause: str) -> None:
    cluster = _cluster(NODE_LOCK, format_lock(taken_at, "default", "holder"))
    locker = _mutex_locker(cluster)
    await locker.lock("n1", "default", "p2")
    assert _value(cluster, NODE_LOCK) == format_lock(T0, "default", "p2")
    assert dict(locker.stats.takeovers.series()) == {**ZERO, (cause,): 1}


async def test_a_mutex_lock_exactly_the_timeout_ahead_is_contended() -> None:
    """Clock skew between writers: a lock up to the timeout ahead is live."""
    held = format_lock(T0 + timedelta(seconds=TIMEOUT), "default", "holder")
    cluster = _cluster(NODE_LOCK, held)
    locker = _mutex_locker(cluster)
    with pytest.raises(NodeLockContention):
        await locker.lock("n1", "default", "p2")
    assert _value(cluster, NODE_LOCK) == held
    assert dict(locker.stats.takeovers.series()) == ZERO


@pytest.mark.parametrize("value", UNPARSABLE_MUTEX)
async def test_an_unparsable_mutex_lock_is_taken_over(value: str, caplog: pytest.LogCaptureFixture) -> None:
    cluster = _cluster(NODE_LOCK, value)
    locker = _mutex_locker(cluster)
    caplog.set_level("INFO", logger=nodelock.__name__)
    await locker.lock("n1", "default", "p2")
    assert _value(cluster, NODE_LOCK) == format_lock(T0, "default", "p2")
    assert dict(locker.stats.takeovers.series()) == {**ZERO, ("unparsable",): 1}
    logged = [r.getMessage() for r in caplog.records if r.name == nodelock.__name__]
    assert logged == [f"node n1 lock {value!r} does not parse, taking it over"]


class CountingWrites(KubeClient):
    patches = 0

    async def patch_node(self, name: str, patch: Any, **kw: Any) -> dict[str, Any]:
        self.patches += 1
        return await super().patch_node(name, patch, **kw)


async def test_an_unparsable_lock_in_the_cache_is_judged_on_a_fresh_read() -> None:
    """The informer may be behind the API: the takeover is decided on what the API holds, without
    a write attempt on the cached copy's say-so."""
    live = format_lock(T0, "default", "holder")
    cluster = _cluster(NODE_LOCK, live)
    cached = cluster.get("nodes", "n1")
    cached["metadata"]["annotations"][NODE_LOCK] = ",,"
    api = CountingWrites(MemoryTransport(cluster))
    locker = NodeLocker(api, timeout=TIMEOUT, now=lambda: T0, cached_node=lambda _name: cached)
    with pytest.raises(NodeLockContention):
        await locker.lock("n1", "default", "p2")
    assert _value(cluster, NODE_LOCK) == live
    assert api.patches == 0
    assert dict(locker.stats.takeovers.series()) == ZERO


@pytest.mark.parametrize(
    ("value", "live"),
    [
        pytest.param(format_lock(FAR_AHEAD, "default", "holder"), False, id="years ahead"),
        pytest.param(format_lock(T0 + timedelta(seconds=TIMEOUT + 1), "default", "holder"), False,
                     id="one second beyond the timeout ahead"),
        pytest.param(format_lock(T0 + timedelta(seconds=TIMEOUT), "default", "holder"), True,
                     id="exactly the timeout ahead"),
        *[pytest.param(p.values[0], False, id=f"unparsable: {p.id}") for p in UNPARSABLE_MUTEX],
    ],
)
def test_live_holder_ignores_a_lock_that_cannot_expire(value: str, live: bool) -> None:
    cache = {"n1": node("n1", typed=True, annotations={NODE_LOCK: value})}
    locker = NodeLocker(KubeClient(MemoryTransport(MemoryCluster())), now=lambda: T0, cached_node=cache.get)
    held = locker.live_holder("n1", lambda _held, _node: True)
    assert (held is not None) == live
    if live:
        assert held == LockValue(T0 + timedelta(seconds=TIMEOUT), "default", "holder")


# --------------------------------------------------------------------------------------------
# A vendor's own lock without holder (StampLocker)


@pytest.mark.parametrize(
    ("value", "cause"),
    [
        pytest.param(format_rfc3339(FAR_AHEAD), "future", id="years ahead"),
        pytest.param(format_rfc3339(T0 + timedelta(seconds=EXPIRY + 1)), "future",
                     id="just beyond the expiry"),
        pytest.param(format_rfc3339(T0 - timedelta(seconds=EXPIRY + 1)), "expired", id="expired"),
        *[pytest.param(p.values[0], "unparsable", id=f"unparsable: {p.id}") for p in UNPARSABLE_STAMP],
    ],
)
async def test_a_stale_vendor_lock_is_taken_over_and_counted(
    value: str, cause: str, caplog: pytest.LogCaptureFixture
) -> None:
    cluster = _cluster(LOCK, value, holder=False)
    stats = NodeLockStats()
    caplog.set_level("INFO", logger=stamplock.__name__)
    assert await _stamp_locker(cluster, stats).lock("n1") == format_rfc3339(T0)
    assert _value(cluster, LOCK) == format_rfc3339(T0)
    assert _counted(stats) == {(cause,): 1}
    logged = [r.getMessage() for r in caplog.records if r.name == stamplock.__name__]
    assert len(logged) == 1 and logged[0].startswith(f"node n1 lock {LOCK}={value!r} ")


@pytest.mark.parametrize(
    "taken_at",
    [
        pytest.param(T0 + timedelta(seconds=EXPIRY), id="exactly the expiry ahead: clock skew"),
        pytest.param(T0 + timedelta(seconds=1), id="a second ahead"),
        pytest.param(T0 - timedelta(seconds=EXPIRY), id="exactly the expiry old"),
    ],
)
async def test_a_live_vendor_lock_is_contended_and_nothing_counted(taken_at: datetime) -> None:
    value = format_rfc3339(taken_at)
    cluster = _cluster(LOCK, value, holder=False)
    stats = NodeLockStats()
    with pytest.raises(NodeLockContention, match=r"^node n1 has been locked within 2 minutes$"):
        await _stamp_locker(cluster, stats).lock("n1")
    assert _value(cluster, LOCK) == value
    assert _counted(stats) == {}


async def test_a_vendor_locker_without_stats_takes_over_all_the_same() -> None:
    cluster = _cluster(LOCK, ",,", holder=False)
    assert await _stamp_locker(cluster, None).lock("n1") == format_rfc3339(T0)


# --------------------------------------------------------------------------------------------
# The bind and the filter, through the scheduler process (wall clock)


def _now() -> datetime:
    return datetime.now().astimezone().replace(microsecond=0)


@pytest.fixture
async def process() -> AsyncIterator[tuple[MemoryCluster, SchedulerProcess]]:
    cluster = MemoryCluster()
    cluster.create("nodes", gpu_node("n1"))
    cluster.create("pods", api_pod("holder"), namespace="default")
    options = SchedulerOptions(scheduler_name="hami-scheduler")
    proc = SchedulerProcess(options, default_device_config(), KubeClient(MemoryTransport(cluster)), "host")
    await proc.start(sync_timeout=5)
    yield cluster, proc
    await proc.stop()


async def _settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)
    await asyncio.sleep(0.01)


async def _filter_and_bind(cluster: MemoryCluster, proc: SchedulerProcess, value: str) -> tuple[Any, str]:
    cluster.patch("nodes", "n1", {"metadata": {"annotations": {NODE_LOCK: value}}})
    created = cluster.create("pods", gpu_pod("p", mem=1000), namespace="default")
    await _settle()
    args = {"Pod": created, "NodeNames": ["n1"]}
    answer = json.loads(await proc.extender.filter(json.dumps(args).encode()))
    meta = created["metadata"]
    body = {"PodName": "p", "PodNamespace": "default", "PodUID": meta["uid"], "Node": "n1"}
    error = str(json.loads(await proc.extender.bind(json.dumps(body).encode()))["Error"])
    return answer, error


@pytest.mark.parametrize(
    ("value", "cause"),
    [
        pytest.param(format_lock(_now() + timedelta(days=3 * 365), "default", "holder"), "future",
                     id="years ahead"),
        pytest.param(",,", "unparsable", id="unparsable"),
    ],
)
async def test_the_filter_places_and_the_bind_takes_over(
    process: tuple[MemoryCluster, SchedulerProcess], value: str, cause: str
) -> None:
    cluster, proc = process
    answer, error = await _filter_and_bind(cluster, proc, value)
    assert answer["NodeNames"] == ["n1"] and not answer.get("Error")  # not counted as a live lock
    assert error == ""
    assert str(_value(cluster, NODE_LOCK)).endswith(",default,p")
    assert _counted(proc.locker.stats) == {(cause,): 1}


async def test_a_live_lock_still_holds_the_node(process: tuple[MemoryCluster, SchedulerProcess]) -> None:
    """The control: the same lock dated now is contended at filter time and at bind."""
    cluster, proc = process
    answer, error = await _filter_and_bind(cluster, proc, format_lock(_now(), "default", "holder"))
    assert "node lock contention" in answer["Error"]
    assert error.endswith("node lock contention")
    assert _counted(proc.locker.stats) == {}


# --------------------------------------------------------------------------------------------
# Pure helpers: the window, expiry moments, deadlines for the simulator, words for explain


@pytest.mark.parametrize(
    ("offset", "cause"),
    [
        (-TIMEOUT - 1, "expired"),
        (-TIMEOUT, None),
        (0, None),
        (TIMEOUT, None),
        (TIMEOUT + 1, "future"),
    ],
)
def test_stale_cause_window(offset: float, cause: str | None) -> None:
    assert stale_cause(T0 + timedelta(seconds=offset), now=T0, timeout=TIMEOUT) == cause


def test_lock_expires_at() -> None:
    assert lock_expires_at(format_lock(T0, "ns", "p"), TIMEOUT) == T0 + timedelta(seconds=TIMEOUT)
    assert lock_expires_at(format_rfc3339(T0), 30) == T0 + timedelta(seconds=30)  # legacy bare time
    assert lock_expires_at(",,", TIMEOUT) is None
    assert lock_expires_at("9999-12-31T23:59:59Z,ns,p", TIMEOUT) is None  # past the last datetime
    assert stamp_expires_at(format_rfc3339(T0), EXPIRY) == T0 + timedelta(seconds=EXPIRY)
    assert stamp_expires_at(format_lock(T0, "ns", "p"), EXPIRY) is None


SHARED = NodeLockSpec(NODE_LOCK)
SPECS = [SHARED, DSMLU_LOCK, SHARED]  # vendors sharing the mutex name it more than once


def _locked(mutex: str | None, stamp: str | None) -> dict[str, Any]:
    annotations = {k: v for k, v in ((NODE_LOCK, mutex), (LOCK, stamp)) if v is not None}
    return node("n1", typed=True, annotations=annotations)


def test_deadlines_of_live_locks_earliest_first() -> None:
    n = _locked(format_lock(T0, "ns", "p"), format_rfc3339(T0 + timedelta(seconds=10)))
    mutex_end, stamp_end = T0 + timedelta(seconds=TIMEOUT), T0 + timedelta(seconds=10 + EXPIRY)
    assert node_lock_deadlines(n, TIMEOUT, SPECS, now=T0) == [stamp_end, mutex_end]
    assert node_lock_deadlines(n, TIMEOUT, [SHARED], now=T0) == [mutex_end]  # only the specs asked
    assert node_lock_deadlines(n, TIMEOUT, SPECS, now=stamp_end) == [stamp_end, mutex_end]  # still live
    assert node_lock_deadlines(n, TIMEOUT, SPECS, now=stamp_end + timedelta(seconds=1)) == [mutex_end]
    assert node_lock_deadlines(n, TIMEOUT, SPECS, now=mutex_end + timedelta(seconds=1)) == []


@pytest.mark.parametrize(
    ("mutex", "stamp"),
    [
        pytest.param(None, None, id="no lock"),
        pytest.param(",,", "garbage", id="unparsable"),
        pytest.param(format_lock(FAR_AHEAD, "ns", "p"), format_rfc3339(FAR_AHEAD), id="years ahead"),
        pytest.param(format_lock(T0 - timedelta(hours=1), "ns", "p"), format_rfc3339(T0 - timedelta(hours=1)),
                     id="expired"),
        pytest.param("9999-12-31T23:59:59Z,ns,p", "9999-12-31T23:59:59Z", id="the last representable time"),
    ],
)
def test_a_takeable_lock_has_no_deadline(mutex: str | None, stamp: str | None) -> None:
    assert node_lock_deadlines(_locked(mutex, stamp), TIMEOUT, SPECS, now=T0) == []


def test_a_lock_dated_ahead_within_the_skew_allowance_ends_its_timeout_after_its_time() -> None:
    ahead = T0 + timedelta(seconds=TIMEOUT)
    n = _locked(format_lock(ahead, "ns", "p"), None)
    assert node_lock_deadlines(n, TIMEOUT, SPECS, now=T0) == [ahead + timedelta(seconds=TIMEOUT)]


@pytest.mark.parametrize(
    ("value", "text"),
    [
        pytest.param(format_lock(T0, "x", "y"), "held by x/y since 2026-11-29T21:00:00Z", id="live"),
        pytest.param(
            format_lock(FAR_AHEAD, "x", "y"),
            "held by x/y since 2029-11-28T21:00:00Z, is dated beyond its timeout in the future (5m0s): "
            "the next bind takes it over",
            id="years ahead",
        ),
        pytest.param(
            format_rfc3339(T0 - timedelta(hours=1)),
            "held since 2026-11-29T20:00:00Z, expired (5m0s): the next bind takes it over",
            id="expired legacy",
        ),
        pytest.param(
            ",,",
            f"unparsable {NODE_LOCK} ',,': parsing time \"\" as \"2006-01-02T15:04:05Z07:00\": "
            "cannot parse \"\" as \"2006\"; the next bind takes it over",
            id="unparsable",
        ),
    ],
)
def test_describe_lock_says_when_a_lock_will_be_taken_over(value: str, text: str) -> None:
    assert describe_lock(_locked(value, None), now=T0, timeout=TIMEOUT) == text


def test_describe_node_locks_names_every_lock() -> None:
    n = _locked(format_lock(T0, "x", "y"), "garbage")
    assert describe_node_locks(n, now=T0, timeout=TIMEOUT, specs=SPECS) == (
        "held by x/y since 2026-11-29T21:00:00Z; "
        f"unparsable {LOCK} 'garbage': parsing time \"garbage\" as \"2006-01-02T15:04:05Z07:00\": "
        "cannot parse \"garbage\" as \"2006\"; the next bind takes it over"
    )
    assert describe_node_locks(_locked(None, format_rfc3339(T0)), now=T0, timeout=TIMEOUT, specs=SPECS) == (
        f"{LOCK} held since 2026-11-29T21:00:00Z"
    )
    assert describe_node_locks(_locked(None, None), now=T0, timeout=TIMEOUT, specs=SPECS) == ""


def test_a_lock_value_is_parsed_once_while_it_is_judged_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """A burst's filters judge every locked node they pass over: the same value is not parsed again."""

    calls: list[str] = []
    real = nodelock._parse_time

    def counting(text: str) -> datetime:
        calls.append(text)
        return real(text)

    monkeypatch.setattr(nodelock, "_parse_time", counting)
    monkeypatch.setattr(nodelock, "_parsed_locks", {})
    now = datetime(2026, 1, 1, 0, 1, tzinfo=UTC)
    value = "2026-01-01T00:00:00Z,ns,pod"
    first = nodelock.judge_lock(value, now=now, timeout=300)
    again = nodelock.judge_lock(value, now=now + timedelta(minutes=10), timeout=300)
    assert calls == ["2026-01-01T00:00:00Z"]
    assert first == (nodelock.LockValue(datetime(2026, 1, 1, tzinfo=UTC), "ns", "pod"), None)
    assert again[0] == first[0] and again[1] == nodelock.EXPIRED  # staleness is judged at each `now`
    assert nodelock.judge_lock(",,", now=now, timeout=300) == (None, nodelock.UNPARSABLE)
    assert nodelock.judge_lock(",,", now=now, timeout=300) == (None, nodelock.UNPARSABLE)


def test_the_parsed_lock_values_kept_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:

    monkeypatch.setattr(nodelock, "_parsed_locks", {})
    monkeypatch.setattr(nodelock, "PARSED_LOCKS_KEPT", 3)
    now = datetime(2026, 1, 1, tzinfo=UTC)
    for i in range(10):
        nodelock.judge_lock(f"2026-01-01T00:00:0{i}Z,ns,p{i}", now=now, timeout=300)
        assert len(nodelock._parsed_locks) <= 3
