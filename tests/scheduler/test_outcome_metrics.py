"""How each filter and bind answer is counted in the operator metrics (decisions by outcome and
reason, duration histograms by outcome, node-lock wait): the paths the integration test does not
reach, driven bytes-in/bytes-out on the in-memory API server. Counts only, never durations."""

from __future__ import annotations

import asyncio
from datetime import datetime

import pytest

from tests.builders import gpu_node, gpu_pod, node
from tests.scheduler.conftest import Stack
from vgpu_scheduler.cluster.nodelock import format_lock
from vgpu_scheduler.wire import keys


async def test_filter_errors_by_cause(stack: Stack) -> None:
    assert (await stack.filter(b"{not json"))["Error"]
    assert (await stack.filter({"NodeNames": ["n1"]}))["Error"] == "extender args missing pod"
    gone = await stack.create(gpu_pod("gone"))
    stack.cluster.delete("pods", "gone", "default", grace_period_seconds=0)
    for _ in range(200):
        if stack.process.pods.store.get("default", "gone") is None:
            break
        await asyncio.sleep(0.01)
    assert (await stack.filter({"Pod": gone, "NodeNames": ["n1"]}))["Error"] == 'pods "gone" not found'
    bound = await stack.create(gpu_pod("bound", spec={"nodeName": "n2"}))
    assert "already assigned" in (await stack.filter({"Pod": bound, "NodeNames": ["n1"]}))["Error"]
    assert stack.decisions() == {
        ("error", "bad_request"): 2,
        ("error", "pod_deleted"): 1,
        ("error", "pod_bound"): 1,
    }
    assert stack.counts(stack.stats.filter_duration) == {"error": 4}


async def test_a_filter_whose_caller_goes_away_is_counted_as_cancelled(stack: Stack) -> None:
    stack.extender.pod_wait = 30.0  # the filter waits for a pod that never comes
    ghost = gpu_pod("ghost", uid="uid-ghost")
    task = asyncio.ensure_future(stack.filter({"Pod": ghost, "NodeNames": ["n1"]}))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert stack.decisions() == {("error", "cancelled"): 1}
    assert stack.counts(stack.stats.filter_duration) == {"error": 1}


async def test_a_filter_before_the_informers_synced(stack: Stack) -> None:
    stack.extender.synced.clear()
    stack.extender.sync_wait = 0.01
    assert (await stack.filter({"Pod": gpu_pod("p"), "NodeNames": ["n1"]}))["Error"] == "context cancelled"
    assert stack.decisions() == {("error", "not_synced"): 1}


async def test_the_node_objects_path_counts_like_the_node_names_path(stack: Stack) -> None:
    """kube-scheduler without nodeCacheCapable sends Node objects; the decision is made on them."""
    items = [gpu_node("t1"), node("t2", typed=True)]
    assert (await stack.filter({"Pod": gpu_pod("a"), "Nodes": {"items": items}}))["Nodes"]["items"]
    too_big = gpu_pod("b", mem=1024 * 1024)
    assert (await stack.filter({"Pod": too_big, "Nodes": {"items": items}}))["FailedNodes"]
    plain = {"metadata": {"name": "c", "namespace": "default"}, "spec": {"containers": [{"name": "c"}]}}
    assert (await stack.filter({"Pod": plain, "Nodes": {"items": items}}))["Nodes"]["items"] == items
    assert stack.decisions() == {
        ("chosen", "fit"): 1,
        ("nofit", "CardInsufficientMemory"): 1,
        ("no_request", "no_device_request"): 1,
    }


async def test_binds_by_outcome(stack: Stack) -> None:
    p = await stack.create(gpu_pod("p"))
    assert (await stack.filter({"Pod": p, "NodeNames": ["n1"]}))["NodeNames"] == ["n1"]
    assert "last filtered onto node n1" in await stack.bind(p, "n2")  # stopped: wrong node
    assert await stack.bind(p, "missing") == 'node "missing" not found'  # error
    # A PodGroup member waits on contention; a newer filter stops it while it waits.
    holder = await stack.create(gpu_pod("holder"))
    value = format_lock(datetime.now().astimezone(), "default", holder["metadata"]["name"])
    stack.cluster.patch("nodes", "n2", {"metadata": {"annotations": {keys.NODE_LOCK: value}}})
    member = await stack.create(gpu_pod("member", labels={keys.POD_GROUP_LABEL: "g"}))
    assert (await stack.filter({"Pod": member, "NodeNames": ["n2"]}))["NodeNames"] == ["n2"]
    waiting = asyncio.ensure_future(stack.bind(member, "n2"))
    await asyncio.sleep(0.25)  # polling n2's lock
    assert (await stack.filter({"Pod": member, "NodeNames": ["n1"]}))["NodeNames"] == ["n1"]
    assert "superseded" in await waiting
    assert await stack.bind(member, "n1") == ""
    # A bind whose caller goes away (n1's lock released first, as the device plugin would).
    stack.cluster.patch("nodes", "n1", {"metadata": {"annotations": {keys.NODE_LOCK: None}}})
    for _ in range(200):
        cached = stack.process.nodes.store.get(None, "n1") or {}
        if keys.NODE_LOCK not in (cached.get("metadata", {}).get("annotations") or {}):
            break
        await asyncio.sleep(0.01)
    q = await stack.create(gpu_pod("q"))
    stack.cluster.delay_next("patch", seconds=0.3, resource="pods")
    assert (await stack.filter({"Pod": q, "NodeNames": ["n1"]}))["NodeNames"] == ["n1"]
    handler = asyncio.ensure_future(stack.bind(q, "n1"))
    await asyncio.sleep(0.1)
    handler.cancel()
    with pytest.raises(asyncio.CancelledError):
        await handler

    assert stack.counts(stack.stats.bind_duration) == {"stopped": 3, "error": 1, "bound": 1}
    # Locks: the member's wait ended when it was superseded; the second bind and q's took n1's lock.
    assert stack.counts(stack.stats.lock_wait) == {"stopped": 1, "acquired": 2}
