"""Cambricon's own node lock `cambricon.com/dsmlu.lock` (§6.2; HAMi v2.10.0 cambricon/device.go
LockNode/ReleaseNodeLock and its Test_LockNode/Test_ReleaseNodeLock): the lock itself against the
in-memory API server, then the bind taking it beside or instead of `hami.io/mutex.lock`, and a
property test that no sequence of filters, binds, failures and deletions leaves a lock behind."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.builders import container, gpu_node, node, pod
from vgpu_scheduler.cluster import stamplock
from vgpu_scheduler.cluster.client import KubeClient
from vgpu_scheduler.cluster.errors import ApiError, status_body
from vgpu_scheduler.cluster.nodelock import NodeLockContention, NodeLockError, format_lock, format_rfc3339
from vgpu_scheduler.cluster.stamplock import StampLocker
from vgpu_scheduler.configfile import default_device_config
from vgpu_scheduler.devices.cambricon import DSMLU_LOCK, LOCK
from vgpu_scheduler.scheduler.options import SchedulerOptions
from vgpu_scheduler.scheduler.process import SchedulerProcess
from vgpu_scheduler.standin.embedded.deviceplugin import SimDevicePlugin
from vgpu_scheduler.standin.memory import MemoryCluster
from vgpu_scheduler.standin.transport import MemoryTransport
from vgpu_scheduler.wire.keys import NODE_LOCK

Obj = dict[str, Any]
T0 = datetime(2026, 11, 29, 21, 0, 0, tzinfo=UTC)
BUSY = "node n1 has been locked within 2 minutes"


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def annotations_of(cluster: MemoryCluster, name: str = "n1") -> dict[str, str]:
    return dict(cluster.get("nodes", name)["metadata"].get("annotations") or {})


@pytest.fixture
def cluster() -> MemoryCluster:
    return MemoryCluster()


@pytest.fixture
def client(cluster: MemoryCluster) -> KubeClient:
    return KubeClient(MemoryTransport(cluster))


def with_lock(cluster: MemoryCluster, value: str | None) -> None:
    cluster.create("nodes", node("n1", typed=True, annotations={} if value is None else {LOCK: value}))


# --------------------------------------------------------------------------------------------
# The lock (Test_LockNode, Test_setNodeLock, Test_ReleaseNodeLock)


@pytest.mark.parametrize(
    ("value", "outcome"),
    [
        pytest.param(None, "taken", id="node is not locked"),
        pytest.param(format_rfc3339(T0 - timedelta(minutes=1)), BUSY, id="locked within 2 minutes"),
        pytest.param(format_rfc3339(T0 - timedelta(minutes=2)), BUSY, id="exactly 2 minutes: still held"),
        pytest.param(format_rfc3339(T0 - timedelta(minutes=2, seconds=1)), "taken", id="just expired"),
        pytest.param(format_rfc3339(T0 - timedelta(hours=1)), "taken", id="expired an hour ago"),
        pytest.param("2026-11-29T21:59:30+01:00", BUSY, id="another zone, 30 s old"),
        pytest.param(format_rfc3339(T0 + timedelta(minutes=2)), BUSY, id="2 minutes ahead: clock skew"),
        # A lock that can never expire is taken over (HAMi: the bind fails; see stamplock's docstring).
        pytest.param(format_rfc3339(T0 + timedelta(minutes=2, seconds=1)), "taken",
                     id="beyond 2 minutes ahead"),
        pytest.param("invalid-format", "taken", id="malformed"),
        pytest.param(format_lock(T0, "default", "p"), "taken", id="an owner-format value is malformed here"),
    ],
)
async def test_lock(cluster: MemoryCluster, client: KubeClient, value: str | None, outcome: str) -> None:
    with_lock(cluster, value)
    locker = StampLocker(client, DSMLU_LOCK, now=Clock())
    if outcome == "taken":
        assert await locker.lock("n1") == "2026-11-29T21:00:00Z"
        assert annotations_of(cluster)[LOCK] == "2026-11-29T21:00:00Z"
        return
    error = NodeLockContention if outcome == BUSY else NodeLockError
    with pytest.raises(error) as err:
        await locker.lock("n1")
    assert str(err.value) == outcome
    assert annotations_of(cluster)[LOCK] == value  # nothing written


async def test_lock_value_in_the_schedulers_zone(cluster: MemoryCluster, client: KubeClient) -> None:
    with_lock(cluster, None)
    east = T0.astimezone(timezone_east())
    assert await StampLocker(client, DSMLU_LOCK, now=lambda: east).lock("n1") == "2026-11-30T05:00:00+08:00"


def timezone_east() -> Any:
    from datetime import timezone

    return timezone(timedelta(hours=8))


class StaleFirstRead:
    """The client, except that the first node read returns a copy taken before another replica wrote
    the lock: the write then carries a stale resourceVersion."""

    def __init__(self, client: KubeClient, stale: Obj) -> None:
        self.client = client
        self.stale: Obj | None = stale
        self.conflicts = 0

    async def get_node(self, name: str) -> Obj:
        if self.stale is not None:
            stale, self.stale = self.stale, None
            return stale
        return await self.client.get_node(name)

    async def patch_node(self, name: str, patch: Obj, *, answer: bool = True) -> Obj:
        try:
            return await self.client.patch_node(name, patch, answer=answer)
        except ApiError as exc:
            self.conflicts += exc.status == 409
            raise

    async def get_pod(self, namespace: str, name: str) -> Obj:
        return await self.client.get_pod(namespace, name)


async def test_two_replicas_racing_one_wins_on_the_resource_version(
    cluster: MemoryCluster, client: KubeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stamplock, "backoff", lambda attempt: 0.0)
    with_lock(cluster, None)
    before = cluster.get("nodes", "n1")
    assert await StampLocker(client, DSMLU_LOCK, now=Clock()).lock("n1") == "2026-11-29T21:00:00Z"
    # The second replica decided on the node as it was before the first wrote: its write conflicts,
    # it reads again and finds a live lock (HAMi's plain merge patch would have let both hold it).
    api = StaleFirstRead(client, before)
    later = Clock()
    later.now = T0 + timedelta(seconds=5)
    with pytest.raises(NodeLockContention, match=f"^{BUSY}$"):
        await StampLocker(api, DSMLU_LOCK, now=later).lock("n1")
    assert api.conflicts == 1
    assert annotations_of(cluster)[LOCK] == "2026-11-29T21:00:00Z"


async def test_concurrent_binds_exactly_one_holds(cluster: MemoryCluster, client: KubeClient) -> None:
    with_lock(cluster, None)
    lockers = [StampLocker(client, DSMLU_LOCK, now=Clock()) for _ in range(4)]
    results = await asyncio.gather(*(lk.lock("n1") for lk in lockers), return_exceptions=True)
    assert sum(isinstance(r, str) for r in results) == 1
    assert sum(isinstance(r, NodeLockContention) for r in results) == 3


class FailingWrites:
    def __init__(self, node_obj: Obj) -> None:
        self.node = node_obj
        self.patches = 0

    async def get_node(self, name: str) -> Obj:
        return self.node

    async def patch_node(self, name: str, patch: Obj, *, answer: bool = True) -> Obj:
        self.patches += 1
        raise ApiError(500, status_body(500, "InternalError", "etcdserver: request timed out"))

    async def get_pod(self, namespace: str, name: str) -> Obj:
        raise AssertionError("a lock without holder never looks a pod up")


async def test_write_failing_every_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stamplock, "backoff", lambda attempt: 0.0)
    api = FailingWrites(node("n1"))
    with pytest.raises(NodeLockError, match=r"^setNodeLock exceeds retry count 5$"):
        await StampLocker(api, DSMLU_LOCK, now=Clock()).lock("n1")
    assert api.patches == 5
    with pytest.raises(ApiError):
        await StampLocker(FailingWrites(node("n1", annotations={LOCK: "x"})), DSMLU_LOCK).release("n1", None)


@pytest.mark.parametrize(
    ("value", "release", "kept"),
    [
        pytest.param(None, "2026-11-29T21:00:00Z", None, id="no lock: nothing to do"),
        pytest.param("2026-11-29T21:00:00Z", "2026-11-29T21:00:00Z", None, id="the value written: deleted"),
        pytest.param("2026-11-29T21:03:00Z", "2026-11-29T21:00:00Z", "2026-11-29T21:03:00Z",
                     id="taken over since: kept"),
        pytest.param("2026-11-29T21:03:00Z", None, None, id="the device plugin's release: whatever it holds"),
        pytest.param("garbage", None, None, id="the device plugin removes even a malformed value"),
    ],
)
async def test_release(
    cluster: MemoryCluster, client: KubeClient, value: str | None, release: str | None, kept: str | None
) -> None:
    with_lock(cluster, value)
    await StampLocker(client, DSMLU_LOCK).release("n1", release)
    assert annotations_of(cluster).get(LOCK) == kept


async def test_release_of_a_missing_node_is_fine(client: KubeClient) -> None:
    await StampLocker(client, DSMLU_LOCK).release("nowhere", None)


# --------------------------------------------------------------------------------------------
# In the bind: beside or instead of hami.io/mutex.lock


GPU_LIMITS = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"}
MLU_LIMITS = {"cambricon.com/vmlu": "1", "cambricon.com/mlu.smlu.vmemory": "4"}
KINDS = {
    "gpu": [container("g", image="x", limits=GPU_LIMITS)],
    "mlu": [container("m", image="x", limits=MLU_LIMITS)],
    "mixed": [container("g", image="x", limits=GPU_LIMITS), container("m", image="x", limits=MLU_LIMITS)],
}


def mixed_node(name: str = "n1") -> Obj:
    obj = gpu_node(name, gpus=2, allocatable={"cpu": "8", "memory": "32Gi", "pods": "110"})
    obj["status"]["capacity"] = {
        "cambricon.com/mlu.smlu.vcore": "200", "cambricon.com/mlu.smlu.vmemory": "512",
    }
    return obj


def device_pod(name: str, kind: str, *, group: str = "") -> Obj:
    labels = {"scheduling.x-k8s.io/pod-group": group} if group else None
    spec = {"schedulerName": "hami-scheduler"}
    return pod(name, typed=True, spec=spec, containers=KINDS[kind], labels=labels)


class Stack:
    def __init__(self, cluster: MemoryCluster, process: SchedulerProcess) -> None:
        self.cluster = cluster
        self.process = process
        self.plugin = SimDevicePlugin(KubeClient(MemoryTransport(cluster)), process.vendors)

    async def settle(self) -> None:
        for _ in range(20):
            await asyncio.sleep(0)
        await asyncio.sleep(0.01)

    async def create(self, name: str, kind: str, *, group: str = "") -> Obj:
        created: Obj = self.cluster.create("pods", device_pod(name, kind, group=group), namespace="default")
        await self.settle()
        return created

    async def filter(self, p: Obj) -> str:
        body = json.dumps({"Pod": p, "NodeNames": ["n1"]}).encode()
        answer = json.loads(await self.process.extender.filter(body))
        return str(answer.get("Error") or "")

    async def bind(self, p: Obj) -> str:
        meta = p["metadata"]
        body = {"PodName": meta["name"], "PodNamespace": "default", "PodUID": meta["uid"], "Node": "n1"}
        error = str(json.loads(await self.process.extender.bind(json.dumps(body).encode()))["Error"])
        await self.settle()
        return error

    def locks(self) -> dict[str, str]:
        return {k: v for k, v in annotations_of(self.cluster).items() if k in (LOCK, NODE_LOCK)}

    def lock_by_hand(self, key: str, value: str) -> None:
        self.cluster.patch("nodes", "n1", {"metadata": {"annotations": {key: value}}})


async def start_stack(**opts: Any) -> Stack:
    cluster = MemoryCluster()
    cluster.create("nodes", mixed_node())
    options = SchedulerOptions(scheduler_name="hami-scheduler", node_lock_retry_timeout=5.0, **opts)
    process = SchedulerProcess(options, default_device_config(), KubeClient(MemoryTransport(cluster)), "host")
    await process.start(sync_timeout=5)
    return Stack(cluster, process)


@pytest.fixture
async def stack() -> AsyncIterator[Stack]:
    s = await start_stack()
    yield s
    await s.process.stop()


def now_rfc3339() -> str:
    return format_rfc3339(datetime.now().astimezone())


async def test_an_mlu_pod_takes_only_the_mlu_lock(stack: Stack) -> None:
    p = await stack.create("m", "mlu")
    assert await stack.filter(p) == ""
    assert await stack.bind(p) == ""
    locks = stack.locks()
    assert set(locks) == {LOCK}  # HAMi's Cambricon LockNode never writes hami.io/mutex.lock
    assert abs(datetime.fromisoformat(locks[LOCK]) - datetime.now().astimezone()) < timedelta(seconds=5)
    assert (await stack.plugin.admit(stack.cluster.get("pods", "m", "default"))).phase == "Running"
    assert stack.locks() == {}


async def test_a_mixed_pod_takes_both_and_the_plugin_releases_both(stack: Stack) -> None:
    p = await stack.create("x", "mixed")
    assert await stack.filter(p) == ""
    assert await stack.bind(p) == ""
    locks = stack.locks()
    assert set(locks) == {LOCK, NODE_LOCK} and locks[NODE_LOCK].endswith(",default,x")
    assert (await stack.plugin.admit(stack.cluster.get("pods", "x", "default"))).phase == "Running"
    assert stack.locks() == {}


async def test_a_mixed_pod_releases_both_when_the_binding_fails(stack: Stack) -> None:
    p = await stack.create("x", "mixed")
    assert await stack.filter(p) == ""
    stack.cluster.fail_next("create", 1, 500, resource="pods/binding", message="etcd is sad")
    assert await stack.bind(p) == "etcd is sad"
    assert stack.locks() == {}
    # Nothing stays behind: the next pod binds.
    q = await stack.create("y", "mixed")
    assert await stack.filter(q) == "" and await stack.bind(q) == ""


async def test_a_busy_mlu_lock_fails_the_bind_before_the_mutex_is_tried(stack: Stack) -> None:
    held = now_rfc3339()
    stack.lock_by_hand(LOCK, held)
    p = await stack.create("x", "mixed")
    assert await stack.filter(p) == ""
    assert await stack.bind(p) == BUSY
    assert stack.locks() == {LOCK: held}  # another bind's lock without owner is never deleted


async def test_a_held_mutex_releases_the_mlu_lock_taken_before_it() -> None:
    stack = await start_stack(lock_aware_placement=False)  # else the filter already refuses the node
    try:
        await stack.create("holder", "gpu")
        stack.lock_by_hand(NODE_LOCK, format_lock(datetime.now().astimezone(), "default", "holder"))
        p = await stack.create("x", "mixed")
        assert await stack.filter(p) == ""
        assert (await stack.bind(p)).endswith(": node lock contention")
        assert set(stack.locks()) == {NODE_LOCK} and stack.locks()[NODE_LOCK].endswith(",default,holder")
    finally:
        await stack.process.stop()


async def test_an_expired_mlu_lock_is_taken_over_at_bind(stack: Stack) -> None:
    stack.lock_by_hand(LOCK, format_rfc3339(datetime.now().astimezone() - timedelta(minutes=3)))
    p = await stack.create("m", "mlu")
    assert await stack.filter(p) == "" and await stack.bind(p) == ""
    taken_at = datetime.fromisoformat(stack.locks()[LOCK])
    assert abs(taken_at - datetime.now().astimezone()) < timedelta(seconds=5)


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("test123", id="malformed"),
        pytest.param(format_rfc3339(datetime.now().astimezone() + timedelta(days=3 * 365)), id="years ahead"),
    ],
)
async def test_an_mlu_lock_that_cannot_expire_is_taken_over_at_bind(stack: Stack, value: str) -> None:
    """HAMi fails this bind and its failure path deletes the lock, so the retry binds; ours takes the
    lock over at once, counted by cause."""
    stack.lock_by_hand(LOCK, value)
    p = await stack.create("m", "mlu")
    assert await stack.filter(p) == "" and await stack.bind(p) == ""
    taken_at = datetime.fromisoformat(stack.locks()[LOCK])
    assert abs(taken_at - datetime.now().astimezone()) < timedelta(seconds=5)
    cause = "unparsable" if value == "test123" else "future"
    assert dict(stack.process.locker.stats.takeovers.series())[(cause,)] == 1


async def test_a_pod_group_member_does_not_wait_on_the_mlu_lock(stack: Stack) -> None:
    """HAMi's Cambricon busy error is not its contention error: PodGroup members fail at once."""
    stack.lock_by_hand(LOCK, now_rfc3339())
    p = await stack.create("m", "mlu", group="g")
    assert await stack.filter(p) == ""
    started = time.monotonic()
    assert await stack.bind(p) == BUSY
    assert time.monotonic() - started < 2.0


# --------------------------------------------------------------------------------------------
# Property: no sequence of filters, binds, failures and deletions leaks a lock

NAMES = ("a", "b", "c", "d")
FAILURES = ("", "", "patch", "binding")
BIND = st.tuples(
    st.just("bind"), st.sampled_from(NAMES), st.sampled_from(sorted(KINDS)), st.sampled_from(FAILURES)
)
STEP = st.one_of(
    # Create the pod if needed, filter it, bind it (the bind's pod patch or Binding may fail); twice
    # as likely as the other steps, so binds often meet the locks of pods not admitted yet.
    BIND,
    BIND,
    # Create and filter only: a decision kube-scheduler never binds.
    st.tuples(st.just("filter"), st.sampled_from(NAMES), st.sampled_from(sorted(KINDS)), st.just("")),
    st.tuples(st.just("delete"), st.sampled_from(NAMES), st.just(""), st.just("")),
    st.tuples(st.just("admit"), st.sampled_from(NAMES), st.just(""), st.just("")),
)


async def run_steps(steps: list[tuple[str, str, str, str]]) -> None:
    stack = await start_stack(lock_aware_placement=False)  # binds reach the locks while they are held
    bound: dict[str, str] = {}  # pods bound and not admitted (deleted ones stay: nobody admits them)
    live: dict[str, str] = {}  # existing pods -> kind; a name is created at most once
    created: dict[str, Obj] = {}  # every pod created, as created
    try:
        for op, name, kind, failure in steps:
            if op in ("bind", "filter") and name not in created:
                created[name] = await stack.create(name, kind)
                live[name] = kind
            current = stack.cluster.get("pods", name, "default") if name in live else None
            if op == "bind" and name in created and current is None:
                assert await stack.bind(created[name]) != ""  # a deleted pod: nothing is locked
            if op in ("bind", "filter") and current is not None and not current["spec"].get("nodeName"):
                await stack.filter(current)
                if op == "bind":
                    if failure == "patch":
                        stack.cluster.fail_next("patch", 1, 500, resource="pods", message="patch failed")
                    elif failure == "binding":
                        stack.cluster.fail_next(
                            "create", 1, 500, resource="pods/binding", message="bind failed"
                        )
                    if await stack.bind(current) == "":
                        bound[name] = live[name]
                    stack.cluster._faults.faults.clear()  # a fault the bind never reached fires nowhere else
            elif op == "delete" and current is not None:
                stack.cluster.delete("pods", name, "default")
                await stack.settle()
                live.pop(name)
            elif op == "admit" and name in bound and current is not None:
                await stack.plugin.admit(current)
                bound.pop(name)
            check_no_leak(stack.locks(), bound)
        for name in [n for n in bound if n in live]:  # the device plugin admits every bound pod
            await stack.plugin.admit(stack.cluster.get("pods", name, "default"))
            bound.pop(name)
        check_no_leak(stack.locks(), bound)  # only pods deleted before their Allocate hold a lock
        if not bound:
            assert stack.locks() == {}
    finally:
        await stack.process.stop()


def check_no_leak(locks: dict[str, str], bound: dict[str, str]) -> None:
    """A lock on the node belongs to a pod bound and not yet admitted that needs it."""
    if LOCK in locks:
        assert any(kind in ("mlu", "mixed") for kind in bound.values()), (locks, bound)
    if NODE_LOCK in locks:
        holder = locks[NODE_LOCK].rsplit(",", 1)[-1]
        assert bound.get(holder) in ("gpu", "mixed"), (locks, bound)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(STEP, min_size=1, max_size=10))
def test_no_sequence_leaks_a_lock(steps: list[tuple[str, str, str, str]]) -> None:
    asyncio.run(run_steps(steps))
