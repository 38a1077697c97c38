"""Watches through KubeClient over both transports: event order, bookmarks, 410, drops, filters."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncGenerator
from typing import Any

import pytest
import yaml

from tests.builders import api_pod
from tests.builders import node as node_object
from vgpu_scheduler.cluster.client import KubeClient
from vgpu_scheduler.cluster.errors import ApiConnectionError, ApiError, is_gone
from vgpu_scheduler.standin.memory import MemoryCluster

Event = tuple[str, dict[str, Any]]


async def _collect(events: AsyncGenerator[Event, None], n: int) -> list[Event]:
    out: list[Event] = []
    async for ev in events:
        out.append(ev)
        if len(out) == n:
            break
    await events.aclose()
    return out


async def _started(cluster: MemoryCluster, n: int = 1) -> None:
    """Wait until `n` watches are registered (the HTTP one needs a few loop turns)."""
    for _ in range(500):
        if cluster.watch_count() >= n:
            return
        await asyncio.sleep(0.005)
    raise AssertionError("watch did not start")


async def test_watch_sequence_like_the_fixture(client: KubeClient, cluster: MemoryCluster, fx: Any) -> None:
    """The life of pod watch-demo as captured in api/watch-pods.stream.jsonl."""
    want = [json.loads(line) for line in fx.text("api/watch-pods.stream.jsonl").splitlines()]
    rv = str(cluster.resource_version)
    events = client.watch("pods", resource_version=rv, timeout_seconds=30)
    collector = asyncio.create_task(_collect(events, len(want)))
    await _started(cluster)
    cluster.create("pods", yaml.safe_load(fx.text("inputs/pods/watch-demo.yaml")))
    cluster.bind("default", "watch-demo", "gpu-node-1")
    cluster.patch(
        "pods", "watch-demo", {"metadata": {"annotations": {"hami.io/bind-phase": "success"}}}, "default"
    )
    cluster.delete("pods", "watch-demo", "default")
    cluster.delete("pods", "watch-demo", "default", grace_period_seconds=0)
    cluster.trigger_bookmarks()
    got = await asyncio.wait_for(collector, 10)

    assert [t for t, _ in got] == [w["type"] for w in want]

    def shape(o: dict[str, Any]) -> tuple[Any, ...]:
        m = o["metadata"]
        return (
            o["kind"],
            o["apiVersion"],
            m.get("generation"),
            m.get("deletionGracePeriodSeconds"),
            "deletionTimestamp" in m,
            (o.get("spec") or {}).get("nodeName"),
            m.get("annotations"),
            [c["type"] for c in (o.get("status") or {}).get("conditions") or []],
        )

    assert [shape(o) for _, o in got[:-1]] == [shape(w["object"]) for w in want[:-1]]
    rvs = [int(o["metadata"]["resourceVersion"]) for _, o in got]
    assert rvs == sorted(rvs) and rvs[-1] == cluster.resource_version  # DELETED carries a new rv
    bookmark = dict(want[-1]["object"], metadata={"resourceVersion": str(cluster.resource_version)})
    assert got[-1][1] == bookmark


async def test_watch_from_too_old_resource_version(
    client: KubeClient, cluster: MemoryCluster, fx: Any
) -> None:
    want = json.loads(fx.text("api/watch-410.stream.jsonl"))
    cluster.create("pods", api_pod("a"))
    old = str(cluster.resource_version)
    cluster.compact()
    with pytest.raises(ApiError) as err:
        await _collect(client.watch("pods", resource_version=old), 1)
    assert is_gone(err.value)
    body = dict(err.value.body)
    assert re.fullmatch(rf"too old resource version: {old} \(\d+\)", body.pop("message"))
    want["object"].pop("message")
    assert body == want["object"]


async def test_watch_history_window() -> None:
    from vgpu_scheduler.cluster.client import KubeClient
    from vgpu_scheduler.standin.transport import MemoryTransport

    cluster = MemoryCluster(history_size=8)
    client = KubeClient(MemoryTransport(cluster))
    start = str(cluster.resource_version)
    for i in range(6):
        cluster.create("pods", api_pod(f"p{i}"))
    got = await _collect(client.watch("pods", resource_version=start), 6)
    assert [o["metadata"]["name"] for _, o in got] == [f"p{i}" for i in range(6)]
    for i in range(20):
        cluster.create("nodes", node_object(f"n{i}", typed=True))  # other resources do not evict pod history
    got = await _collect(client.watch("pods", resource_version=start), 6)
    assert len(got) == 6
    for i in range(6, 20):
        cluster.create("pods", api_pod(f"p{i}"))
    with pytest.raises(ApiError) as err:
        await _collect(client.watch("pods", resource_version=start), 1)
    assert err.value.status == 410


async def test_watch_without_resource_version_sends_current_state(
    client: KubeClient, cluster: MemoryCluster
) -> None:
    cluster.create("pods", api_pod("b"))
    cluster.create("pods", api_pod("a", namespace="other"))
    got = await _collect(client.watch("pods"), 2)
    assert [(t, o["metadata"]["name"]) for t, o in got] == [("ADDED", "b"), ("ADDED", "a")]  # key order


async def test_send_initial_events_ends_with_annotated_bookmark(
    client: KubeClient, cluster: MemoryCluster
) -> None:
    cluster.create("pods", api_pod("a"))
    got = await _collect(client.watch("pods", send_initial_events=True), 2)
    assert got[0][0] == "ADDED"
    assert got[1][0] == "BOOKMARK"
    assert got[1][1]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}


async def test_watch_timeout_ends_the_stream(client: KubeClient, cluster: MemoryCluster) -> None:
    cluster.bookmark_interval = 3600
    rv = str(cluster.resource_version)
    got = [ev async for ev in client.watch("pods", resource_version=rv, timeout_seconds=0.2)]
    assert got == []
    assert cluster.watch_count() == 0


async def test_periodic_bookmarks(client: KubeClient, cluster: MemoryCluster) -> None:
    cluster.bookmark_interval = 0.05
    cluster.create("pods", api_pod("a"))
    got = await asyncio.wait_for(
        _collect(client.watch("pods", resource_version=str(cluster.resource_version)), 2), 10
    )
    assert [t for t, _ in got] == ["BOOKMARK", "BOOKMARK"]
    assert got[0][1]["metadata"]["resourceVersion"] == str(cluster.resource_version)
    without = client.watch(
        "pods", resource_version=str(cluster.resource_version), allow_bookmarks=False, timeout_seconds=0.2
    )
    assert [ev async for ev in without] == []


async def test_dropped_watch_raises_connection_error(
    client: KubeClient, cluster: MemoryCluster
) -> None:
    events = client.watch("pods", resource_version=str(cluster.resource_version))
    collector = asyncio.create_task(_collect(events, 5))
    await _started(cluster)
    cluster.create("pods", api_pod("a"))
    await asyncio.sleep(0.05)
    assert cluster.drop_watches() == 1
    with pytest.raises(ApiConnectionError):
        await asyncio.wait_for(collector, 10)


async def test_selector_transitions(client: KubeClient, cluster: MemoryCluster) -> None:
    cluster.create("pods", api_pod("a", labels={"app": "gpu"}))
    events = client.watch("pods", label_selector="app=gpu", resource_version=str(cluster.resource_version))
    collector = asyncio.create_task(_collect(events, 3))
    await _started(cluster)
    cluster.create("pods", api_pod("noise"))
    cluster.patch("pods", "a", {"metadata": {"labels": {"app": "cpu"}}}, "default")  # leaves the selection
    cluster.patch("pods", "noise", {"metadata": {"labels": {"app": "gpu"}}}, "default")  # enters it
    cluster.patch("pods", "noise", {"metadata": {"annotations": {"x": "1"}}}, "default")
    got = await asyncio.wait_for(collector, 10)
    assert [(t, o["metadata"]["name"]) for t, o in got] == [
        ("DELETED", "a"),
        ("ADDED", "noise"),
        ("MODIFIED", "noise"),
    ]
    assert got[0][1]["metadata"]["labels"] == {"app": "cpu"}  # the object as it is now


async def test_namespaced_watch_and_lease_field_selector(
    client: KubeClient, cluster: MemoryCluster, fx: Any
) -> None:
    raw = fx.json("api/lease.hami-scheduler.raw.json")
    cluster.seed_from_list([raw, dict(raw, metadata={**raw["metadata"], "name": "other"})])
    rv = str(cluster.resource_version)
    events = client.watch(
        "leases", "hami-system", field_selector="metadata.name=hami-scheduler", resource_version=rv
    )
    collector = asyncio.create_task(_collect(events, 2))
    await _started(cluster)
    for renew in ("2026-11-29T21:05:41.477124Z", "2026-11-29T21:05:43.481109Z"):
        cluster.patch("leases", "other", {"spec": {"renewTime": renew}}, "hami-system")
        cluster.patch("leases", "hami-scheduler", {"spec": {"renewTime": renew}}, "hami-system")
    got = await asyncio.wait_for(collector, 10)
    want = [json.loads(line) for line in fx.text("api/watch-lease.stream.jsonl").splitlines()]
    assert [t for t, _ in got] == [w["type"] for w in want]
    for (_, obj), w in zip(got, want, strict=True):
        assert obj["spec"] == w["object"]["spec"]
        assert list(obj) == list(w["object"])
