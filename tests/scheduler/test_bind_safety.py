"""A bind acts only on the decision it belongs to, never outlives its caller, and placement avoids
busy node locks (issue "Safe under a burst"). Extender verbs driven bytes-in/bytes-out on the
in-memory API server, so every write is observable."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping
from datetime import datetime
from typing import Any

import pytest

from tests.builders import gpu_node, gpu_pod
from vgpu_scheduler.cluster.client import KubeClient
from vgpu_scheduler.cluster.nodelock import format_lock
from vgpu_scheduler.config import DeviceConfig
from vgpu_scheduler.scheduler.options import SchedulerOptions
from vgpu_scheduler.scheduler.process import SchedulerProcess
from vgpu_scheduler.standin.memory import MemoryCluster
from vgpu_scheduler.standin.transport import MemoryTransport
from vgpu_scheduler.wire import keys

Obj = dict[str, Any]
GIB = 1024


def node(name: str, gpus: int = 2) -> Obj:
    return gpu_node(name, gpus=gpus, allocatable={"cpu": "8", "memory": "32Gi", "pods": "110"})


def pod(name: str, *, mem: int = 1000, group: str = "") -> Obj:
    return gpu_pod(name, mem=mem, container_name="c", labels={keys.POD_GROUP_LABEL: group} if group else None)


class Events:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str]] = []

    def record(self, pod: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        self.seen.append((pod["metadata"]["name"], reason, message))


class Stack:
    def __init__(self, cluster: MemoryCluster, process: SchedulerProcess, events: Events) -> None:
        self.cluster = cluster
        self.process = process
        self.extender = process.extender
        self.events = events

    async def settle(self) -> None:
        for _ in range(20):
            await asyncio.sleep(0)
        await asyncio.sleep(0.02)

    async def create(self, obj: Obj) -> Obj:
        created: Obj = self.cluster.create("pods", obj, namespace="default")
        await self.settle()
        return created

    async def filter(self, p: Obj, nodes: list[str]) -> Obj:
        body = json.dumps({"Pod": p, "NodeNames": nodes}).encode()
        answer: Obj = json.loads(await self.extender.filter(body))
        return answer

    async def bind(self, p: Obj, node_name: str) -> str:
        meta = p["metadata"]
        body = {"PodName": meta["name"], "PodNamespace": "default", "PodUID": meta["uid"], "Node": node_name}
        return str(json.loads(await self.extender.bind(json.dumps(body).encode()))["Error"])

    def lock_of(self, node_name: str) -> str | None:
        annotations = self.cluster.get("nodes", node_name)["metadata"].get("annotations") or {}
        value = annotations.get(keys.NODE_LOCK)
        return value if isinstance(value, str) else None

    async def lock_node_for(self, node_name: str, holder: str) -> None:
        value = format_lock(datetime.now().astimezone(), "default", holder)
        self.cluster.patch("nodes", node_name, {"metadata": {"annotations": {keys.NODE_LOCK: value}}})
        await self.settle()

    def stored(self, name: str) -> Obj:
        got: Obj = self.cluster.get("pods", name, "default")
        return got


async def make_stack(**opts: Any) -> tuple[Stack, SchedulerProcess]:
    cluster = MemoryCluster()
    for name in ("n1", "n2"):
        cluster.create("nodes", node(name))
    events = Events()
    options = SchedulerOptions(scheduler_name="hami-scheduler", **opts)
    client = KubeClient(MemoryTransport(cluster))
    process = SchedulerProcess(options, DeviceConfig(), client, "host", events=events)
    await process.start(sync_timeout=5)
    return Stack(cluster, process, events), process


@pytest.fixture
async def stack() -> AsyncIterator[Stack]:
    s, process = await make_stack(node_lock_retry_timeout=5.0)
    yield s
    await process.stop()


async def test_a_newer_filter_supersedes_a_bind_waiting_on_a_lock(stack: Stack) -> None:
    await stack.create(pod("holder"))
    await stack.lock_node_for("n1", "holder")
    p = await stack.create(pod("member", group="g"))  # PodGroup members wait on contention
    assert (await stack.filter(p, ["n1"]))["NodeNames"] == ["n1"]
    first = asyncio.ensure_future(stack.bind(p, "n1"))
    await asyncio.sleep(0.25)  # the bind polls n1's lock
    assert (await stack.filter(p, ["n2"]))["NodeNames"] == ["n2"]  # kube-scheduler retried the pod
    assert "superseded by a newer filter" in await first
    assert await stack.bind(p, "n2") == ""
    stored = stack.stored("member")
    assert stored["spec"]["nodeName"] == "n2"
    assert stored["metadata"]["annotations"][keys.VGPU_NODE] == "n2"
    assert "GPU-n2-" in stored["metadata"]["annotations"][keys.VGPU_TO_ALLOCATE]
    assert stack.lock_of("n1").endswith(",default,holder")  # type: ignore[union-attr]
    assert stack.extender.stats.binds_superseded == 1


async def test_a_bind_for_another_node_than_the_latest_decision_writes_nothing(stack: Stack) -> None:
    p = await stack.create(pod("p"))
    assert (await stack.filter(p, ["n1"]))["NodeNames"] == ["n1"]
    before = stack.stored("p")
    error = await stack.bind(p, "n2")
    assert error == "pod default/p was last filtered onto node n1, not n2"
    assert stack.stored("p") == before
    assert stack.lock_of("n2") is None
    assert await stack.bind(p, "n1") == ""  # the reservation for n1 is intact


async def test_a_bind_whose_caller_goes_away_stops_and_releases_its_lock(stack: Stack) -> None:
    p = await stack.create(pod("p"))
    assert (await stack.filter(p, ["n1"]))["NodeNames"] == ["n1"]
    stack.cluster.delay_next("patch", seconds=0.3, resource="pods")
    handler = asyncio.ensure_future(stack.bind(p, "n1"))
    await asyncio.sleep(0.1)  # lock taken, the pod patch in flight
    assert stack.lock_of("n1") is not None
    handler.cancel()  # aiohttp cancels the handler when kube-scheduler hangs up
    with pytest.raises(asyncio.CancelledError):
        await handler
    for _ in range(50):
        await asyncio.sleep(0.02)
        if stack.lock_of("n1") is None:
            break
    assert stack.lock_of("n1") is None
    assert "nodeName" not in stack.stored("p")["spec"]
    assert stack.extender.stats.binds_cancelled == 1


async def test_a_bind_never_waits_past_its_deadline() -> None:
    s, process = await make_stack(node_lock_retry_timeout=28.0, bind_timeout=0.3)
    try:
        await s.create(pod("holder"))
        await s.lock_node_for("n1", "holder")
        p = await s.create(pod("member", group="g"))
        await s.filter(p, ["n1"])
        error = await s.bind(p, "n1")
        assert "node lock contention" in error
        assert s.lock_of("n1").endswith(",default,holder")  # type: ignore[union-attr]
    finally:
        await process.stop()


CONTENTION = "node n1 has been locked within 5m0s: node lock contention"


async def test_a_filter_fails_fast_when_every_fitting_node_is_locked(stack: Stack) -> None:
    await stack.create(pod("holder"))
    await stack.lock_node_for("n1", "holder")
    p = await stack.create(pod("p"))
    answer = await stack.filter(p, ["n1"])  # the only candidate, locked by a live pod
    assert answer["NodeNames"] is None and answer["Error"] == CONTENTION
    assert stack.extender.state.allocation(p["metadata"]["uid"]) is None  # nothing reserved
    assert stack.extender.stats.filters_all_busy == 1
    assert stack.lock_of("n1").endswith(",default,holder")  # type: ignore[union-attr]


async def test_a_filter_fails_fast_when_every_fitting_node_awaits_another_bind(stack: Stack) -> None:
    first = await stack.create(pod("first"))
    assert (await stack.filter(first, ["n1"]))["NodeNames"] == ["n1"]  # its bind is to come
    second = await stack.create(pod("second"))
    assert (await stack.filter(second, ["n1"]))["Error"] == CONTENTION
    assert await stack.bind(first, "n1") == ""  # the first decision is untouched


async def test_a_filter_picks_a_free_node_over_a_locked_better_one(stack: Stack) -> None:
    await stack.create(pod("holder"))
    await stack.lock_node_for("n1", "holder")
    p = await stack.create(pod("p"))
    assert (await stack.filter(p, ["n1", "n2"]))["NodeNames"] == ["n2"]


async def test_a_bind_outside_any_group_fails_fast_on_contention(stack: Stack) -> None:
    p = await stack.create(pod("p"))
    assert (await stack.filter(p, ["n1"]))["NodeNames"] == ["n1"]
    await stack.create(pod("holder"))
    await stack.lock_node_for("n1", "holder")  # taken between our filter and our bind
    assert await stack.bind(p, "n1") == CONTENTION
    assert stack.lock_of("n1").endswith(",default,holder")  # type: ignore[union-attr]
    assert stack.extender.stats.lock_contention == 1


async def test_a_pod_group_member_still_chooses_a_locked_node_and_waits(stack: Stack) -> None:
    await stack.create(pod("holder"))
    await stack.lock_node_for("n1", "holder")
    p = await stack.create(pod("member", group="g"))
    assert (await stack.filter(p, ["n1"]))["NodeNames"] == ["n1"]  # its bind waits (HAMi)
    assert stack.extender.stats.filters_all_busy == 0


async def test_the_pod_patch_is_retried_on_a_conflict_while_the_pod_is_unbound(stack: Stack) -> None:
    p = await stack.create(pod("p"))
    await stack.filter(p, ["n1"])
    stack.cluster.patch("pods", "p", {"metadata": {"labels": {"touched": "yes"}}}, namespace="default")
    # No settle: the informer still has the older resourceVersion, so the first patch conflicts.
    assert await stack.bind(p, "n1") == ""
    stored = stack.stored("p")
    assert stored["spec"]["nodeName"] == "n1" and stored["metadata"]["labels"]["touched"] == "yes"


async def test_a_pod_bound_meanwhile_is_never_patched(stack: Stack) -> None:
    p = await stack.create(pod("p"))
    await stack.filter(p, ["n1"])
    stack.cluster.bind("default", "p", "n2")  # someone else bound it; our cache has not seen it yet
    error = await stack.bind(p, "n1")
    assert error == 'pod default/p is already assigned to node "n2"'
    stored = stack.stored("p")
    assert keys.VGPU_NODE not in (stored["metadata"].get("annotations") or {})
    assert stack.lock_of("n1") is None


async def test_filter_of_a_pod_the_cache_shows_bound_reserves_nothing(stack: Stack) -> None:
    p = await stack.create(pod("p"))
    stack.cluster.bind("default", "p", "n2")
    await stack.settle()
    answer = await stack.filter(p, ["n1", "n2"])
    assert answer["Error"] == 'pod default/p is already assigned to node "n2"'
    assert stack.process.state.allocation(p["metadata"]["uid"]) is None


def _chosen(answer: Obj) -> str:
    names = answer["NodeNames"]
    assert names and len(names) == 1, answer
    return str(names[0])


async def test_lock_aware_placement_ranks_a_locked_node_after_free_ones(stack: Stack) -> None:
    # Binpack prefers the busier node: put one pod on n1 first.
    first = await stack.create(pod("first"))
    assert _chosen(await stack.filter(first, ["n1"])) == "n1"
    assert await stack.bind(first, "n1") == ""
    await stack.settle()
    second = await stack.create(pod("second"))
    # n1 is locked by `first` (the device plugin has not confirmed yet): the free n2 is chosen.
    assert _chosen(await stack.filter(second, ["n1", "n2"])) == "n2"
    # Lock released: HAMi's choice again (binpack → the used node).
    stack.cluster.patch("nodes", "n1", {"metadata": {"annotations": {keys.NODE_LOCK: None}}})
    await stack.settle()
    assert _chosen(await stack.filter(second, ["n1", "n2"])) == "n1"


async def test_a_pending_bind_makes_its_node_busy_for_other_pods(stack: Stack) -> None:
    a = await stack.create(pod("a"))
    b = await stack.create(pod("b"))
    first = _chosen(await stack.filter(a, ["n1", "n2"]))
    # a's bind has not run yet: b goes to the other node instead of queueing on the same lock.
    assert _chosen(await stack.filter(b, ["n1", "n2"])) != first


async def test_lock_aware_placement_can_be_turned_off() -> None:
    s, process = await make_stack(lock_aware_placement=False)
    try:
        a = await s.create(pod("a"))
        b = await s.create(pod("b"))
        first = _chosen(await s.filter(a, ["n1", "n2"]))
        assert _chosen(await s.filter(b, ["n1", "n2"])) == first  # binpack, as HAMi
    finally:
        await process.stop()


async def test_a_lock_of_a_gone_pod_does_not_count_as_busy(stack: Stack) -> None:
    first = await stack.create(pod("first"))
    await stack.filter(first, ["n1"])
    assert await stack.bind(first, "n1") == ""
    await stack.lock_node_for("n1", "nobody")  # holder pod does not exist
    second = await stack.create(pod("second"))
    assert _chosen(await stack.filter(second, ["n1", "n2"])) == "n1"


@pytest.mark.parametrize(("holder_on", "chosen"), [("n2", "n1"), ("n1", "n2")])
async def test_a_lock_of_a_pod_bound_to_another_node_does_not_count_as_busy(
    stack: Stack, holder_on: str, chosen: str
) -> None:
    first = await stack.create(pod("first"))
    await stack.filter(first, ["n1"])
    assert await stack.bind(first, "n1") == ""  # binpack now prefers n1
    holder: Obj = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "holder", "namespace": "default"},
                   "spec": {"nodeName": holder_on, "containers": [{"name": "c", "image": "x"}]}}
    await stack.create(holder)
    # n1's lock names `holder`: bound elsewhere it is dangling (n1 is free), bound to n1 it is not.
    await stack.lock_node_for("n1", "holder")
    second = await stack.create(pod("second"))
    assert _chosen(await stack.filter(second, ["n1", "n2"])) == chosen


@pytest.mark.parametrize(
    ("status", "chosen"),
    [({"phase": "Succeeded"}, "n1"), ({"phase": "Failed"}, "n1"), ({"phase": "Running"}, "n2")],
    ids=["holder succeeded: free", "holder failed: free", "holder running: busy"],
)
async def test_a_lock_of_a_finished_pod_does_not_count_as_busy(
    stack: Stack, status: dict[str, str], chosen: str
) -> None:
    first = await stack.create(pod("first"))
    await stack.filter(first, ["n1"])
    assert await stack.bind(first, "n1") == ""  # binpack now prefers n1
    holder: Obj = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "holder", "namespace": "default"},
                   "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "x"}]}, "status": status}
    await stack.create(holder)
    await stack.lock_node_for("n1", "holder")
    second = await stack.create(pod("second"))
    assert _chosen(await stack.filter(second, ["n1", "n2"])) == chosen


async def test_a_holder_that_finishes_after_being_judged_frees_its_node(stack: Stack) -> None:
    """The busy test keeps each holder's verdict while its lock and cached pod are the same: a
    new pod object (here: it finished) is judged again."""
    first = await stack.create(pod("first"))
    await stack.filter(first, ["n1"])
    assert await stack.bind(first, "n1") == ""  # binpack now prefers n1
    holder: Obj = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "holder", "namespace": "default"},
                   "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "x"}]},
                   "status": {"phase": "Running"}}
    await stack.create(holder)
    await stack.lock_node_for("n1", "holder")
    second = await stack.create(pod("second"))
    assert _chosen(await stack.filter(second, ["n1", "n2"])) == "n2"  # n1 busy
    stack.cluster.patch("pods", "holder", {"status": {"phase": "Succeeded"}}, namespace="default",
                        subresource="status")
    await stack.settle()
    assert _chosen(await stack.filter(second, ["n1", "n2"])) == "n1"  # the lock is dangling now


async def test_filtering_succeed_lists_every_fitting_node_with_its_score(stack: Stack) -> None:
    p = await stack.create(pod("p"))
    await stack.filter(p, ["n1", "n2", "ghost"])
    (message,) = [m for name, reason, m in stack.events.seen if reason == "FilteringSucceed"]
    assert message.startswith("find fit node(n1), 1 nodes not fit, 2 nodes fit(n1:")
    assert ",n2:" in message and "evaluated" not in message


async def test_a_decision_never_bound_stops_marking_its_node_busy(stack: Stack) -> None:
    a = await stack.create(pod("a"))
    b = await stack.create(pod("b"))
    first = _chosen(await stack.filter(a, ["n1", "n2"]))
    # kube-scheduler rejected `a` after our filter: no bind comes; once the bind timeout has
    # passed, its node ranks as free again.
    later = stack.extender.now() + stack.extender.bind_timeout + 1
    stack.extender.now = lambda: later
    assert _chosen(await stack.filter(b, ["n1", "n2"])) == first
