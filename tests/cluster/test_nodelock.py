"""The node lock (§6.2) against the in-memory API server, through the real client."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.builders import api_pod, node
from vgpu_scheduler.cluster import nodelock
from vgpu_scheduler.cluster.client import KubeClient
from vgpu_scheduler.cluster.errors import ApiError, status_body
from vgpu_scheduler.cluster.nodelock import (
    NodeLockContention,
    NodeLocker,
    NodeLockError,
    format_lock,
    format_rfc3339,
    judge_lock,
    parse_lock,
    probable_lock,
)
from vgpu_scheduler.standin.memory import MemoryCluster
from vgpu_scheduler.standin.transport import MemoryTransport
from vgpu_scheduler.wire.keys import BIND_TIME, NODE_LOCK

T0 = datetime(2026, 11, 29, 21, 0, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def _node(name: str, lock: str | None = None) -> dict[str, Any]:
    return node(name, typed=True, annotations={} if lock is None else {NODE_LOCK: lock})


def _pod(name: str, namespace: str = "default") -> dict[str, Any]:
    return api_pod(name, namespace=namespace)


@pytest.fixture
def cluster() -> MemoryCluster:
    return MemoryCluster()


@pytest.fixture
def client(cluster: MemoryCluster) -> KubeClient:
    return KubeClient(MemoryTransport(cluster))


def _lock_of(cluster: MemoryCluster, node: str) -> str | None:
    annotations = cluster.get("nodes", node)["metadata"].get("annotations") or {}
    value = annotations.get(NODE_LOCK)
    return None if value is None else str(value)


@pytest.mark.parametrize(
    ("moment", "text"),
    [
        pytest.param(T0, "2026-11-29T21:00:00Z", id="UTC"),
        pytest.param(
            datetime(2025, 10, 20, 3, 7, 2, 999, tzinfo=timezone(timedelta(hours=8))),
            "2025-10-20T03:07:02+08:00",
            id="+08:00, fraction dropped",
        ),
    ],
)
def test_rfc3339_like_go(moment: datetime, text: str) -> None:
    assert format_rfc3339(moment) == text


def test_parse_lock_forms() -> None:
    value = parse_lock("2025-10-20T03:07:02Z,jingyu-test,gputest-6c77bb77f8-gvtzc")
    assert (value.namespace, value.pod) == ("jingyu-test", "gputest-6c77bb77f8-gvtzc")
    legacy = parse_lock("2025-10-20T03:07:02+08:00")
    assert not legacy.has_owner
    assert legacy.taken_at == datetime(2025, 10, 19, 19, 7, 2, tzinfo=UTC)


RFC = '"2006-01-02T15:04:05Z07:00"'


# HAMi's ParseNodeLock errors, word for word: HAMi's bind on such a node answers with them (ours takes
# the lock over; explanations quote them).
@pytest.mark.parametrize(
    ("value", "message"),
    [
        pytest.param(
            "2025-10-20T03:07:02Z,ns",
            "malformed lock annotation: expected 3 parts, got 2 from 2025-10-20T03:07:02Z,ns",
            id="two parts",
        ),
        pytest.param("a,b,c,d", "malformed lock annotation: expected 3 parts, got 4 from a,b,c,d",
                     id="four parts"),
        pytest.param("lock", f'parsing time "lock" as {RFC}: cannot parse "lock" as "2006"', id="no commas"),
        pytest.param(
            "garbage,default,p1", f'parsing time "garbage" as {RFC}: cannot parse "garbage" as "2006"',
            id="time garbage",
        ),
        pytest.param(
            " 2025-10-20T03:07:02Z",
            f'parsing time " 2025-10-20T03:07:02Z" as {RFC}: cannot parse " 2025-10-20T03:07:02Z" as "2006"',
            id="leading space",
        ),
        pytest.param(
            "2025-10-20T03:07:02,ns,p",
            f'parsing time "2025-10-20T03:07:02" as {RFC}: cannot parse "" as "Z07:00"',
            id="no zone",
        ),
    ],
)
def test_parse_lock_errors(value: str, message: str) -> None:
    with pytest.raises(NodeLockError) as err:
        parse_lock(value)
    assert str(err.value) == message


async def test_lock_sets_the_owner_value_and_is_reentrant(cluster: MemoryCluster, client: KubeClient) -> None:
    cluster.create("nodes", _node("n1"))
    locker = NodeLocker(client, now=Clock())
    await locker.lock("n1", "default", "p1")
    assert _lock_of(cluster, "n1") == "2026-11-29T21:00:00Z,default,p1"
    rv = cluster.get("nodes", "n1")["metadata"]["resourceVersion"]
    await locker.lock("n1", "default", "p1")  # re-entrant: no second write
    assert cluster.get("nodes", "n1")["metadata"]["resourceVersion"] == rv


async def test_contention_with_a_live_holder(cluster: MemoryCluster, client: KubeClient) -> None:
    cluster.create("pods", _pod("holder"), namespace="default")
    cluster.create("nodes", _node("n1", format_lock(T0, "default", "holder")))
    locker = NodeLocker(client, now=Clock())
    contention = "node n1 has been locked within 5m0s: node lock contention"
    with pytest.raises(NodeLockContention, match=contention) as got:
        await locker.lock("n1", "default", "p2")
    assert got.value.holder_named  # a failure-path release would find another pod's lock: skipped
    assert _lock_of(cluster, "n1") == format_lock(T0, "default", "holder")


async def test_contention_with_a_live_legacy_lock_names_no_holder(
    cluster: MemoryCluster, client: KubeClient
) -> None:
    cluster.create("nodes", _node("n1", format_rfc3339(T0)))  # HAMi's old lock: the time alone
    with pytest.raises(NodeLockContention) as got:
        await NodeLocker(client, now=Clock()).lock("n1", "default", "p2")
    assert not got.value.holder_named  # the failure-path release clears such a lock (HAMi)


async def test_expired_lock_is_taken_over(cluster: MemoryCluster, client: KubeClient) -> None:
    cluster.create("pods", _pod("holder"), namespace="default")
    cluster.create("nodes", _node("n1", format_lock(T0, "default", "holder")))
    clock = Clock()
    clock.now = T0 + timedelta(minutes=5, seconds=1)
    await NodeLocker(client, now=clock).lock("n1", "default", "p2")
    assert _lock_of(cluster, "n1") == "2026-11-29T21:05:01Z,default,p2"


async def test_dangling_lock_of_a_deleted_pod_is_taken_over(
    cluster: MemoryCluster, client: KubeClient
) -> None:
    cluster.create("nodes", _node("n1", format_lock(T0, "default", "gone")))
    await NodeLocker(client, now=Clock()).lock("n1", "default", "p2")
    assert _lock_of(cluster, "n1") == format_lock(T0, "default", "p2")


@pytest.mark.parametrize(("bound_to", "taken_over"), [("n2", True), ("n1", False), ("", False)])
async def test_lock_of_a_pod_bound_to_another_node_is_dangling(
    cluster: MemoryCluster, client: KubeClient, bound_to: str, taken_over: bool
) -> None:
    # The holder's bind on n1 failed after the lock was set, then the pod was bound to n2: n1's
    # device plugin never sees it, so only the expiry would free n1. Bound to n1 (or not yet
    # bound) it is still a live holder.
    holder = _pod("holder")
    holder["spec"]["nodeName"] = bound_to
    cluster.create("pods", holder, namespace="default")
    cluster.create("nodes", _node("n1", format_lock(T0, "default", "holder")))
    locker = NodeLocker(client, now=Clock())
    if taken_over:
        await locker.lock("n1", "default", "p2")
        assert _lock_of(cluster, "n1") == format_lock(T0, "default", "p2")
    else:
        with pytest.raises(NodeLockContention):
            await locker.lock("n1", "default", "p2")
        assert _lock_of(cluster, "n1") == format_lock(T0, "default", "holder")


async def test_malformed_lock_is_taken_over(cluster: MemoryCluster, client: KubeClient) -> None:
    # HAMi fails the bind with the parse error (and every later one until someone deletes the value).
    cluster.create("nodes", _node("n1", "lock"))
    await NodeLocker(client, now=Clock()).lock("n1", "default", "p2")
    assert _lock_of(cluster, "n1") == format_lock(T0, "default", "p2")


async def test_stale_cache_is_corrected_by_a_conflict(cluster: MemoryCluster, client: KubeClient) -> None:
    cluster.create("nodes", _node("n1"))
    stale = cluster.get("nodes", "n1")
    cluster.create("pods", _pod("holder"), namespace="default")
    cluster.patch(
        "nodes", "n1", {"metadata": {"annotations": {NODE_LOCK: format_lock(T0, "default", "holder")}}}
    )
    locker = NodeLocker(client, now=Clock(), cached_node=lambda _name: stale)
    with pytest.raises(NodeLockContention):
        await locker.lock("n1", "default", "p2")
    assert _lock_of(cluster, "n1") == format_lock(T0, "default", "holder")


async def test_racing_binds_one_wins(cluster: MemoryCluster, client: KubeClient) -> None:
    cluster.create("nodes", _node("n1"))
    for name in ("a", "b"):
        cluster.create("pods", _pod(name), namespace="default")
    # Two schedulers (separate lockers, so no shared in-process mutex) race for the node.
    lockers = [NodeLocker(client, now=Clock()), NodeLocker(client, now=Clock())]
    results = await asyncio.gather(
        lockers[0].lock("n1", "default", "a"), lockers[1].lock("n1", "default", "b"), return_exceptions=True
    )
    winners = [r for r in results if r is None]
    losers = [r for r in results if isinstance(r, NodeLockContention)]
    assert len(winners) == 1 and len(losers) == 1
    holder = "a" if results[0] is None else "b"
    assert _lock_of(cluster, "n1") == format_lock(T0, "default", holder)


async def test_release_only_by_the_owner(cluster: MemoryCluster, client: KubeClient) -> None:
    cluster.create("nodes", _node("n1", format_lock(T0, "default", "holder")))
    locker = NodeLocker(client, now=Clock())
    await locker.release("n1", "default", "other")
    assert _lock_of(cluster, "n1") is not None
    await locker.release("n1", "default", "holder")
    assert _lock_of(cluster, "n1") is None
    await locker.release("n1", "default", "holder")  # nothing to release: fine
    await locker.release("missing-node", "default", "holder")


def _node_requests(cluster: MemoryCluster) -> list[tuple[str, str]]:
    return [(verb, path) for verb, _, path in cluster.request_log if "/nodes" in path]


async def test_release_of_the_expected_value_is_one_write_without_a_read(
    cluster: MemoryCluster, client: KubeClient
) -> None:
    value = format_lock(T0, "default", "holder")
    cluster.create("nodes", _node("n1", value))
    cluster.request_log.clear()
    await NodeLocker(client, now=Clock()).release("n1", "default", "holder", expected=value)
    assert _lock_of(cluster, "n1") is None
    assert _node_requests(cluster) == [("patch", "/api/v1/nodes/n1")]
    await NodeLocker(client, now=Clock()).release("gone", "default", "holder", expected=value)
    assert _node_requests(cluster)[1:] == [("patch", "/api/v1/nodes/gone")]  # 404: nothing to read


@pytest.mark.parametrize(
    ("held", "released"),
    [
        # The guess was wrong but the lock is still this pod's (taken a second later): deleted.
        pytest.param(format_lock(T0 + timedelta(seconds=1), "default", "holder"), True, id="own, other time"),
        # Taken over by another pod meanwhile: the guarded write fails, the read says not ours.
        pytest.param(format_lock(T0, "default", "other"), False, id="another pod's"),
        # A legacy lock names no owner: released as before (HAMi clears it too).
        pytest.param(format_rfc3339(T0), True, id="legacy, no owner"),
        pytest.param(None, False, id="no lock"),
    ],
)
async def test_release_of_an_unexpected_value_falls_back_to_reading_the_node(
    cluster: MemoryCluster, client: KubeClient, held: str | None, released: bool
) -> None:
    cluster.create("nodes", _node("n1", held))
    before = cluster.get("nodes", "n1")["metadata"]["resourceVersion"]
    cluster.request_log.clear()
    expected = format_lock(T0, "default", "holder")
    await NodeLocker(client, now=Clock()).release("n1", "default", "holder", expected=expected)
    assert _lock_of(cluster, "n1") == (None if released else held)
    writes = 2 if released else 1  # the failed guarded write, then the delete read made sure of
    assert [verb for verb, _ in _node_requests(cluster)] == ["patch", "get", "patch"][:writes + 1]
    if not released:
        assert cluster.get("nodes", "n1")["metadata"]["resourceVersion"] == before


async def test_an_expected_value_naming_another_pod_is_never_written(
    cluster: MemoryCluster, client: KubeClient
) -> None:
    other = format_lock(T0, "default", "other")
    cluster.create("nodes", _node("n1", other))
    cluster.request_log.clear()
    locker = NodeLocker(client, now=Clock())
    await locker.release("n1", "default", "holder", expected=other)
    assert _lock_of(cluster, "n1") == other
    assert _node_requests(cluster) == [("get", "/api/v1/nodes/n1")]
    # A forced release judges the value it reads, not a guess: the guess is not tried either.
    await locker.release("n1", "default", "holder", skip_owner_check=True, expected=other)
    assert _lock_of(cluster, "n1") is None
    assert [verb for verb, _ in _node_requests(cluster)] == ["get", "get", "patch"]


def test_probable_lock_is_the_bind_time_in_utc_with_the_pod() -> None:
    pod = api_pod("p", namespace="ns", annotations={BIND_TIME: str(int(T0.timestamp()))})
    assert probable_lock(pod) == format_lock(T0, "ns", "p") == "2026-11-29T21:00:00Z,ns,p"
    assert probable_lock(api_pod("p")) is None
    assert probable_lock(api_pod("p", annotations={BIND_TIME: "soon"})) is None
    assert probable_lock(api_pod("p", annotations={BIND_TIME: "9" * 30})) is None


async def test_retry_waits_for_release(cluster: MemoryCluster, client: KubeClient) -> None:
    cluster.create("pods", _pod("holder"), namespace="default")
    cluster.create("nodes", _node("n1", format_lock(T0, "default", "holder")))
    locker = NodeLocker(client, now=Clock())

    async def plugin_releases() -> None:
        await asyncio.sleep(0.25)
        cluster.patch("nodes", "n1", {"metadata": {"annotations": {NODE_LOCK: None}}})

    releaser = asyncio.create_task(plugin_releases())
    await locker.lock_with_retry("n1", "default", "p2", retry_timeout=5.0)
    await releaser
    assert _lock_of(cluster, "n1") == format_lock(T0, "default", "p2")


async def test_retry_times_out_with_hami_message(cluster: MemoryCluster, client: KubeClient) -> None:
    cluster.create("pods", _pod("holder"), namespace="default")
    cluster.create("nodes", _node("n1", format_lock(T0, "default", "holder")))
    locker = NodeLocker(client, now=Clock())
    with pytest.raises(NodeLockContention, match=r"timed out after 300ms waiting for node n1 to be unlocked"):
        await locker.lock_with_retry("n1", "default", "p2", retry_timeout=0.3)


async def test_unparsable_lock_naming_this_pod_is_written_anew(
    cluster: MemoryCluster, client: KubeClient
) -> None:
    # Not re-entered: a value that does not parse names nobody, so it is taken over like any other.
    cluster.create("nodes", _node("n1", "garbage,default,p1"))
    await NodeLocker(client, now=Clock()).lock("n1", "default", "p1")
    assert _lock_of(cluster, "n1") == format_lock(T0, "default", "p1")


async def test_expired_lock_of_this_pod_is_taken_again_with_a_new_time(
    cluster: MemoryCluster, client: KubeClient
) -> None:
    cluster.create("pods", _pod("p1"), namespace="default")
    cluster.create("nodes", _node("n1", format_lock(T0, "default", "p1")))
    clock = Clock()
    clock.now = T0 + timedelta(minutes=6)
    await NodeLocker(client, now=clock).lock("n1", "default", "p1")
    assert _lock_of(cluster, "n1") == "2026-11-29T21:06:00Z,default,p1"


async def test_lock_without_a_namespace_is_never_dangling(cluster: MemoryCluster, client: KubeClient) -> None:
    # HAMi checks the holder only when the lock names both a namespace and a pod.
    cluster.create("nodes", _node("n1", "2026-11-29T21:00:00Z,,gone"))
    with pytest.raises(NodeLockContention):
        await NodeLocker(client, now=Clock()).lock("n1", "default", "p2")


class FailingApi:
    """A LockApi whose pod reads or node writes fail with a given API error."""

    def __init__(self, node: dict[str, Any], *, pod_error: ApiError | None = None) -> None:
        self.node = node
        self.pod_error = pod_error
        self.patches = 0

    async def get_node(self, name: str) -> dict[str, Any]:
        return self.node

    async def patch_node(self, name: str, patch: dict[str, Any], *, answer: bool = True) -> dict[str, Any]:
        self.patches += 1
        raise ApiError(500, status_body(500, "InternalError", "etcdserver: request timed out"))

    async def get_pod(self, namespace: str, name: str) -> dict[str, Any]:
        if self.pod_error is not None:
            raise self.pod_error
        return _pod(name, namespace)


async def test_holder_lookup_error_is_the_bind_error() -> None:
    forbidden = ApiError(
        403, status_body(403, "Forbidden", 'pods "holder" is forbidden: User "x" cannot get resource "pods"')
    )
    api = FailingApi(_node("n1", format_lock(T0, "default", "holder")), pod_error=forbidden)
    with pytest.raises(NodeLockError) as err:
        await NodeLocker(api, now=Clock()).lock("n1", "default", "p2")
    assert str(err.value) == 'pods "holder" is forbidden: User "x" cannot get resource "pods"'


async def test_lock_write_failing_every_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nodelock, "_backoff", lambda attempt: 0.0)
    api = FailingApi(_node("n1"))
    with pytest.raises(NodeLockError) as err:
        await NodeLocker(api, now=Clock()).lock("n1", "default", "p2")
    assert api.patches == 5  # HAMi retries every write error 5 times
    assert str(err.value) == (
        "failed to set node lock (node=n1, retry strategy={Duration:100ms Factor:2 Jitter:0.5 Steps:5 "
        "Cap:0s}): etcdserver: request timed out"
    )


class ScriptedNodes:
    """A LockApi whose node reads return the given lock values in turn; every write conflicts
    except the last one allowed."""

    def __init__(self, values: list[str]) -> None:
        self.values = values
        self.reads = 0
        self.deleted: list[str] = []

    async def get_node(self, name: str) -> dict[str, Any]:
        value = self.values[min(self.reads, len(self.values) - 1)]
        self.reads += 1
        node = _node(name, value)
        node["metadata"]["resourceVersion"] = str(self.reads)
        return node

    async def patch_node(self, name: str, patch: dict[str, Any], *, answer: bool = True) -> dict[str, Any]:
        if self.reads < len(self.values):
            raise ApiError(409, status_body(409, "Conflict", "the object has been modified"))
        self.deleted.append(self.values[-1])
        return {}

    async def get_pod(self, namespace: str, name: str) -> dict[str, Any]:
        return _pod(name, namespace)


@pytest.mark.parametrize(
    ("values", "skip", "deleted"),
    [
        # A legacy lock replaced by another legacy lock after a conflict is not ours to delete.
        pytest.param(["2026-11-29T21:00:00Z", "2026-11-29T21:00:05Z"], False, [],
                     id="legacy lock replaced: kept"),
        pytest.param(["2026-11-29T21:00:00Z", "2026-11-29T21:00:00Z"], False, ["2026-11-29T21:00:00Z"],
                     id="legacy lock unchanged: deleted"),
        # Forced release (expired / dangling takeover) deletes only the value it judged.
        pytest.param([format_lock(T0, "default", "old"), format_lock(T0, "default", "new")], True, [],
                     id="forced release of a changed lock: kept"),
        # Our own owner-format lock is deleted whatever its time.
        pytest.param(
            [format_lock(T0, "default", "p"), format_lock(T0, "default", "p")],
            False,
            [format_lock(T0, "default", "p")],
            id="own lock: deleted",
        ),
    ],
)
async def test_release_stops_when_the_lock_changed(
    monkeypatch: pytest.MonkeyPatch, values: list[str], skip: bool, deleted: list[str]
) -> None:
    monkeypatch.setattr(nodelock, "_backoff", lambda attempt: 0.0)
    api = ScriptedNodes(values)
    await NodeLocker(api, now=Clock()).release("n1", "default", "p", skip_owner_check=skip)
    assert api.deleted == deleted


# -- Smaller contracts, each pinned by a test since mutation testing found them unchecked ---------


class RecordingApi:
    """A LockApi over one node dict (the same for every name): counts node and pod reads,
    records the patches, answers the first `conflicts` writes with 409; reads of the node
    named `gated` wait for `gate`. Every pod exists, running, unless `pods` lists them."""

    def __init__(
        self, node: dict[str, Any], *, conflicts: int = 0, pods: dict[str, dict[str, Any]] | None = None
    ) -> None:
        self.node = node
        self.conflicts = conflicts
        self.pods = pods
        self.node_reads = 0
        self.pod_reads = 0
        self.patches: list[dict[str, Any]] = []
        self.gate = asyncio.Event()
        self.gated = ""

    async def get_node(self, name: str) -> dict[str, Any]:
        self.node_reads += 1
        if name == self.gated:
            await self.gate.wait()
        return self.node

    async def patch_node(self, name: str, patch: dict[str, Any], *, answer: bool = True) -> dict[str, Any]:
        self.patches.append(patch)
        if self.conflicts:
            self.conflicts -= 1
            raise ApiError(409, status_body(409, "Conflict", "the object has been modified"))
        return {}

    async def get_pod(self, namespace: str, name: str) -> dict[str, Any]:
        self.pod_reads += 1
        if self.pods is None:
            return _pod(name, namespace)
        if name not in self.pods:
            raise ApiError(404, status_body(404, "NotFound", f'pods "{name}" not found'))
        return self.pods[name]


def _with_version(value: str | None, version: str) -> dict[str, Any]:
    n = _node("n1", value)
    n["metadata"]["resourceVersion"] = version
    return n


def test_contention_names_no_holder_unless_told() -> None:
    assert not NodeLockContention("node n1 is locked").holder_named


async def test_a_free_node_in_the_cache_is_locked_without_a_read_guarded_by_the_cached_version() -> None:
    api = RecordingApi(_with_version(None, "3"))
    cache = {"n1": _with_version(None, "7")}
    await NodeLocker(api, now=Clock(), cached_node=cache.get).lock("n1", "default", "p1")
    assert api.node_reads == 0
    annotations = {NODE_LOCK: format_lock(T0, "default", "p1")}
    assert api.patches == [{"metadata": {"annotations": annotations, "resourceVersion": "7"}}]


async def test_a_node_without_metadata_is_unlocked_and_written_without_a_version() -> None:
    api = RecordingApi({})
    await NodeLocker(api, now=Clock()).lock("n1", "default", "p1")
    assert api.patches[0]["metadata"]["resourceVersion"] == ""
    locker = NodeLocker(api, now=Clock(), cached_node=lambda _name: {})
    assert locker.live_holder("n1", lambda *_: True) is None


def test_live_holder_asks_about_the_lock_read_and_its_node() -> None:
    asked: list[tuple[object, str]] = []

    def holder_live(held: object, node_name: str) -> bool:
        asked.append((held, node_name))
        return True

    cache = {"n1": _node("n1", format_lock(T0, "default", "holder"))}
    locker = NodeLocker(RecordingApi({}), now=Clock(), cached_node=cache.get)
    held = locker.live_holder("n1", holder_live)
    assert held == parse_lock(format_lock(T0, "default", "holder"))
    assert asked == [(held, "n1")]


@settings(max_examples=200, deadline=None)
@given(
    steps=st.lists(
        st.tuples(
            st.sampled_from(["n1", "n2"]),
            st.one_of(st.none(), st.integers(-400, 400), st.just("garbage")),
            st.integers(-400, 400),
            st.booleans(),
        ),
        max_size=12,
    )
)
def test_the_many_node_test_answers_as_a_fresh_judgement(steps: list[tuple[str, object, int, bool]]) -> None:
    """`live_holder_test` keeps each node's parsed lock by its cached object: after any sequence
    of node replacements, clock moves and holder verdicts, it answers as `judge_lock` on the
    node as cached now."""
    clock = Clock()
    cache: dict[str, dict[str, Any]] = {}
    locker = NodeLocker(RecordingApi({}), now=clock, cached_node=cache.get, timeout=300)
    for node_name, lock_at, clock_at, alive in steps:
        if lock_at == "garbage":
            cache[node_name] = _node(node_name, "not a lock")
        elif isinstance(lock_at, int):
            cache[node_name] = _node(node_name, format_lock(T0 + timedelta(seconds=lock_at), "ns", "p"))
        else:
            cache[node_name] = _node(node_name)
        clock.now = T0 + timedelta(seconds=clock_at)
        test = locker.live_holder_test(lambda _held, _node, alive=alive: alive)
        for asked in ("n1", "n2"):
            value = cache.get(asked, {}).get("metadata", {}).get("annotations", {}).get(NODE_LOCK)
            held, stale = (None, "none") if value is None else judge_lock(value, now=clock.now, timeout=300)
            expected = held if held is not None and stale is None and alive else None
            assert test(asked) == expected


@settings(max_examples=300, deadline=None)
@given(
    taken_at=st.sampled_from(
        [T0, datetime(1, 1, 1, tzinfo=UTC), datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)]
    ),
    timeout=st.sampled_from([0.0, 0.5, 300.0, 299.999999, 1e6]),
    offset=st.one_of(
        st.integers(-2, 2).flatmap(lambda side: st.integers(-3, 3).map(lambda us: (side, us))),
        st.tuples(st.integers(-10**6, 10**6), st.integers(-(10**6), 10**6)),
    ),
)
def test_a_lock_is_live_exactly_within_its_timeout_on_either_side(
    taken_at: datetime, timeout: float, offset: tuple[int, int]
) -> None:
    """The walk's kept live window agrees with `judge_lock` to the microsecond: at and around
    both ends, with fractional and huge timeouts, for locks dated at the first and last times."""
    sides, micros = offset
    try:
        now = taken_at + sides * timedelta(seconds=timeout) + timedelta(microseconds=micros)
    except OverflowError:
        return
    value = format_lock(taken_at, "ns", "p")
    locker = NodeLocker(RecordingApi({}), now=lambda: now, cached_node={"n1": _node("n1", value)}.get,
                        timeout=timeout)
    held, stale = judge_lock(value, now=now, timeout=timeout)
    assert held is not None
    assert locker.live_holder_test(lambda _held, _node: True)("n1") == (held if stale is None else None)


def _messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == nodelock.__name__]


@pytest.mark.parametrize(
    ("holder", "bound_to", "late", "message"),
    [
        pytest.param("holder", "", True, "node n1 lock '{value}' expired, taking it over", id="expired"),
        pytest.param("gone", "", False, "node n1 lock holder default/gone is gone, taking over",
                     id="holder gone"),
        pytest.param(
            "holder", "n2", False,
            "node n1 lock holder default/holder no longer needs it (holder_elsewhere), taking over",
            id="holder bound elsewhere",
        ),
    ],
)
async def test_every_takeover_is_logged_with_the_node_the_holder_and_the_cause(
    caplog: pytest.LogCaptureFixture, holder: str, bound_to: str, late: bool, message: str
) -> None:
    value = format_lock(T0, "default", holder)
    pod = _pod("holder")
    pod["spec"]["nodeName"] = bound_to
    api = RecordingApi(_node("n1", value), pods={"holder": pod})
    clock = Clock()
    if late:
        clock.now = T0 + timedelta(minutes=5, seconds=1)
    caplog.set_level("INFO", logger=nodelock.__name__)
    await NodeLocker(api, now=clock).lock("n1", "default", "p2")
    assert _messages(caplog) == [message.format(value=value)]


@pytest.mark.parametrize(
    ("retry_timeout", "stop"),
    [pytest.param(0.0, False, id="no retry timeout"), pytest.param(5.0, True, id="told to stop")],
)
async def test_contention_without_waiting_is_the_plain_contention_error(
    retry_timeout: float, stop: bool
) -> None:
    api = RecordingApi(_node("n1", format_lock(T0, "default", "holder")))
    with pytest.raises(NodeLockContention) as err:
        await NodeLocker(api, now=Clock()).lock_with_retry(
            "n1", "default", "p2", retry_timeout, should_stop=lambda: stop
        )
    assert str(err.value) == "node n1 has been locked within 5m0s: node lock contention"
    assert api.pod_reads == 1


async def test_a_retry_timeout_shorter_than_one_poll_gives_up_after_one_try() -> None:
    api = RecordingApi(_node("n1", format_lock(T0, "default", "holder")))
    with pytest.raises(NodeLockContention, match=r"^timed out after 50ms waiting for node n1 to be unlocked"):
        await NodeLocker(api, now=Clock()).lock_with_retry("n1", "default", "p2", 0.05)
    assert api.pod_reads == 1


async def test_release_is_guarded_by_the_version_read() -> None:
    api = RecordingApi(_with_version(format_lock(T0, "default", "p1"), "9"))
    await NodeLocker(api, now=Clock()).release("n1", "default", "p1")
    assert api.patches == [{"metadata": {"annotations": {NODE_LOCK: None}, "resourceVersion": "9"}}]


async def test_release_retries_a_conflict_after_a_backoff() -> None:
    api = RecordingApi(_node("n1", format_lock(T0, "default", "p1")), conflicts=1)
    await NodeLocker(api, now=Clock()).release("n1", "default", "p1")
    assert len(api.patches) == 2


async def test_release_gives_up_after_five_conflicts_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(nodelock, "_backoff", lambda attempt: 0.0)
    api = RecordingApi(_node("n1", format_lock(T0, "default", "p1")), conflicts=99)
    await NodeLocker(api, now=Clock()).release("n1", "default", "p1")
    assert len(api.patches) == 5
    assert _messages(caplog) == ["gave up releasing the lock of node n1 after conflicts"]


async def test_a_slow_node_never_holds_up_locks_and_releases_of_other_nodes() -> None:
    api = RecordingApi(_node("n1"))
    api.gated = "slow"
    locker = NodeLocker(api, now=Clock())
    slow = [asyncio.create_task(locker.lock("slow", "default", "p1")),
            asyncio.create_task(locker.release("slow", "default", "p1"))]
    await asyncio.sleep(0.01)
    await asyncio.wait_for(locker.lock("n1", "default", "p1"), timeout=2)
    await asyncio.wait_for(locker.release("n1", "default", "p1"), timeout=2)
    assert not any(task.done() for task in slow)
    api.gate.set()
    await asyncio.gather(*slow)


@pytest.mark.parametrize(
    ("draw", "waits"),
    [pytest.param(0.0, [0.1, 0.2, 0.4, 0.8, 1.6], id="no jitter"),
     pytest.param(1.0, [0.15, 0.3, 0.6, 1.2, 2.4], id="full jitter")],
)
def test_backoff_is_hamis_100ms_doubling_with_half_jitter(
    monkeypatch: pytest.MonkeyPatch, draw: float, waits: list[float]
) -> None:
    monkeypatch.setattr(nodelock.random, "random", lambda: draw)
    assert [nodelock._backoff(attempt) for attempt in range(5)] == pytest.approx(waits)
