"""The reflector survives what a real API server does to it, over both transports."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.builders import api_pod, container, pod
from tests.builders import node as node_object
from vgpu_scheduler.cluster.api import key_of
from vgpu_scheduler.cluster.client import KubeClient
from vgpu_scheduler.cluster.reflector import Backoff, Reflector
from vgpu_scheduler.cluster.store import Store
from vgpu_scheduler.cluster.transport import HttpTransport
from vgpu_scheduler.standin.fakeapi import serve
from vgpu_scheduler.standin.memory import MemoryCluster

Obj = dict[str, Any]


class Recorder:
    """Rebuilds the cluster state from the callbacks alone, and checks they make sense."""

    def __init__(self) -> None:
        self.state: dict[str, str] = {}
        self.calls: list[tuple[str, str]] = []
        self.fail_on: str | None = None

    def on_add(self, obj: Obj) -> None:
        key = key_of(obj)
        assert key not in self.state, f"add of known {key}"
        self.state[key] = obj["metadata"]["resourceVersion"]
        self.calls.append(("add", key))
        if obj["metadata"]["name"] == self.fail_on:
            raise RuntimeError("handler bug")

    def on_update(self, old: Obj, new: Obj) -> None:
        key = key_of(new)
        assert key_of(old) == key and self.state[key] == old["metadata"]["resourceVersion"]
        self.state[key] = new["metadata"]["resourceVersion"]
        self.calls.append(("update", key))

    def on_delete(self, obj: Obj) -> None:
        key = key_of(obj)
        assert key in self.state, f"delete of unknown {key}"
        del self.state[key]
        self.calls.append(("delete", key))


def truth(cluster: MemoryCluster, resource: str = "pods") -> dict[str, str]:
    return {key_of(o): o["metadata"]["resourceVersion"] for o in cluster.objects(resource)}


async def eventually(cond: Callable[[], bool], what: str = "condition") -> None:
    for _ in range(1000):
        if cond():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"timed out waiting for {what}")


def fast_backoff() -> Backoff:
    return Backoff(initial=0.001, maximum=0.01, jitter=0.0)


@pytest.fixture
async def reflector(client: KubeClient) -> AsyncIterator[Callable[..., Reflector]]:
    made: list[Reflector] = []

    def make(resource: str = "pods", **kw: Any) -> Reflector:
        kw.setdefault("backoff", fast_backoff())
        kw.setdefault("handler", Recorder())
        r = Reflector(client, resource, **kw)
        made.append(r)
        r.start()
        return r

    yield make
    for r in made:
        await r.stop()


def recorder(r: Reflector) -> Recorder:
    assert isinstance(r.handler, Recorder)
    return r.handler


async def test_initial_paginated_list(
    reflector: Callable[..., Reflector], cluster: MemoryCluster
) -> None:
    for i in range(1203):
        cluster.create("pods", api_pod(f"p{i:04d}", namespace=f"ns{i % 3}"))
    r = reflector(page_size=500)
    assert await r.wait_synced(10)
    assert r.has_synced and r.stats.lists == 1
    assert recorder(r).state == truth(cluster)
    assert len(r.store) == 1203 and r.store.get("ns1", "p0001") is not None
    assert r.resource_version == str(cluster.resource_version)
    assert [verb for verb, _, _ in cluster.request_log].count("list") == 3  # 500 + 500 + 203


async def test_dropped_watch_loses_nothing(
    reflector: Callable[..., Reflector], cluster: MemoryCluster
) -> None:
    cluster.create("pods", api_pod("a"))
    r = reflector()
    assert await r.wait_synced(10)
    await eventually(lambda: cluster.watch_count("pods") == 1, "watch")
    cluster.create("pods", api_pod("b"))
    cluster.drop_watches()
    # While the reflector is reconnecting:
    cluster.create("pods", api_pod("c"))
    cluster.delete("pods", "a", "default")
    cluster.patch("pods", "b", {"metadata": {"labels": {"x": "y"}}}, "default")
    await eventually(lambda: recorder(r).state == truth(cluster), "store to catch up")
    assert r.stats.lists == 1, "resumed from the last resourceVersion, no relist"
    assert r.stats.errors >= 1 and r.stats.watches >= 2
    assert ("delete", "default/a") in recorder(r).calls


MANAGED = [{"manager": "kubectl", "operation": "Update", "apiVersion": "v1", "fieldsType": "FieldsV1",
            "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:x": {}}}}}]


async def test_the_cache_keeps_no_managed_fields(
    reflector: Callable[..., Reflector], cluster: MemoryCluster
) -> None:
    # What kube-scheduler's informers drop too: listed and watched objects alike.
    listed = api_pod("listed")
    listed["metadata"]["managedFields"] = MANAGED
    cluster.create("pods", listed)
    r = reflector()
    assert await r.wait_synced(10)
    await eventually(lambda: cluster.watch_count("pods") == 1, "watch")
    watched = api_pod("watched")
    watched["metadata"]["managedFields"] = MANAGED
    cluster.create("pods", watched)
    await eventually(lambda: r.store.get("default", "watched") is not None, "watched pod")
    for name in ("listed", "watched"):
        cached = r.store.get("default", name)
        assert cached is not None and "managedFields" not in cached["metadata"]
        assert cached["metadata"]["name"] == name
        assert cluster.get("pods", name, "default")["metadata"]["managedFields"] == MANAGED


async def test_forced_410_relists_and_emits_missed_deletes(
    reflector: Callable[..., Reflector], cluster: MemoryCluster
) -> None:
    for name in "abcd":
        cluster.create("pods", api_pod(name))
    r = reflector()
    assert await r.wait_synced(10)
    await eventually(lambda: cluster.watch_count("pods") == 1, "watch")
    cluster.fail_next("watch", 2, 503)  # keep it away for a moment
    cluster.drop_watches()
    cluster.delete("pods", "a", "default")
    cluster.delete("pods", "b", "default")
    cluster.patch("pods", "c", {"metadata": {"annotations": {"k": "v"}}}, "default")
    cluster.create("pods", api_pod("e"))
    cluster.compact()  # the events above are gone from history: the watch must answer 410
    rec = recorder(r)
    rec.calls.clear()
    await eventually(lambda: rec.state == truth(cluster), "relist")
    assert r.stats.relists_after_gone == 1 and r.stats.lists == 2
    assert sorted(rec.calls) == [
        ("add", "default/e"),
        ("delete", "default/a"),
        ("delete", "default/b"),
        ("update", "default/c"),
    ]
    # Deletes are delivered before adds and updates.
    assert [c[0] for c in rec.calls[:2]] == ["delete", "delete"]


async def test_http_410_on_watch_start_relists(
    reflector: Callable[..., Reflector], cluster: MemoryCluster
) -> None:
    cluster.create("pods", api_pod("a"))
    r = reflector()
    assert await r.wait_synced(10)
    await eventually(lambda: cluster.watch_count("pods") == 1, "watch")
    cluster.fail_next("watch", 1, 410, reason="Expired", message="too old resource version: 1 (2)")
    cluster.drop_watches()
    await eventually(lambda: r.stats.lists == 2, "relist")
    assert r.stats.relists_after_gone == 1
    assert recorder(r).state == truth(cluster)


async def test_bookmarks_advance_the_resource_version(
    reflector: Callable[..., Reflector], cluster: MemoryCluster
) -> None:
    cluster.create("pods", api_pod("a"))
    r = reflector()
    assert await r.wait_synced(10)
    await eventually(lambda: cluster.watch_count("pods") == 1, "watch")
    for i in range(5):
        cluster.create("nodes", node_object(f"n{i}", typed=True))  # the global revision moves, no pod event
    assert int(r.resource_version) < cluster.resource_version
    cluster.trigger_bookmarks()
    await eventually(lambda: r.resource_version == str(cluster.resource_version), "bookmark")
    assert r.stats.bookmarks == 1
    # Resuming after a drop now starts from the bookmark.
    cluster.drop_watches()
    await eventually(lambda: r.stats.watches == 2 and cluster.watch_count("pods") == 1, "re-watch")
    assert r.stats.lists == 1


async def test_api_errors_back_off_and_recover(
    reflector: Callable[..., Reflector], cluster: MemoryCluster
) -> None:
    delays: list[float] = []

    class Recording(Backoff):
        def next(self) -> float:
            delay = super().next()
            delays.append(delay)
            return delay

    cluster.create("pods", api_pod("a"))
    cluster.fail_next("list", 3, 500)
    r = reflector(backoff=Recording(initial=0.001, maximum=0.004, jitter=0.0))
    assert await r.wait_synced(10)
    assert r.stats.errors == 3
    assert delays == [0.001, 0.002, 0.004]
    cluster.fail_next("watch", 2, 503)
    cluster.drop_watches()
    cluster.create("pods", api_pod("b"))
    await eventually(lambda: recorder(r).state == truth(cluster), "recovery")
    assert r.stats.lists == 1  # watch errors resume from the resourceVersion, no relist


async def test_handler_errors_do_not_stop_the_stream(
    reflector: Callable[..., Reflector], cluster: MemoryCluster
) -> None:
    rec = Recorder()
    rec.fail_on = "bad"
    r = reflector(handler=rec)
    assert await r.wait_synced(10)
    await eventually(lambda: cluster.watch_count("pods") == 1, "watch")
    cluster.create("pods", api_pod("bad"))
    cluster.create("pods", api_pod("good"))
    await eventually(lambda: rec.state == truth(cluster), "both pods")
    assert r.stats.errors == 0


async def test_stop_closes_the_watch(reflector: Callable[..., Reflector], cluster: MemoryCluster) -> None:
    r = reflector()
    assert await r.wait_synced(10)
    await eventually(lambda: cluster.watch_count("pods") == 1, "watch")
    await r.stop()
    await eventually(lambda: cluster.watch_count("pods") == 0, "watch closed")


async def test_selectors_and_shared_store(client: KubeClient, cluster: MemoryCluster) -> None:
    store = Store()
    cluster.create("pods", api_pod("a", labels={"app": "hami"}))
    cluster.create("pods", api_pod("b"))
    r = Reflector(client, "pods", label_selector="app=hami", store=store, backoff=fast_backoff())
    r.start()
    try:
        assert await r.wait_synced(10)
        assert store.all_keys() == ["default/a"]
        await eventually(lambda: cluster.watch_count("pods") == 1, "watch")
        cluster.patch("pods", "a", {"metadata": {"labels": {"app": None}}}, "default")
        await eventually(lambda: len(store) == 0, "label removal seen as delete")
    finally:
        await r.stop()


async def test_slow_responses_time_out_and_retry(cluster: MemoryCluster) -> None:
    cluster.create("pods", api_pod("a"))
    srv = await serve(cluster)
    client = KubeClient(HttpTransport(srv.url, qps=0, timeout=0.5))
    cluster.delay_next("list", 2, seconds=30.0)  # cancelled when the client gives up
    r = Reflector(client, "pods", backoff=fast_backoff(), handler=Recorder())
    r.start()
    try:
        assert await r.wait_synced(10)
        assert r.stats.errors == 2 and r.stats.lists == 1
        # A slow answer within the timeout is just slow.
        cluster.latency = 0.03
        cluster.create("pods", api_pod("b"))
        await eventually(lambda: recorder(r).state == truth(cluster), "slow but fine")
    finally:
        await r.stop()
        await client.close()
        await srv.close()


def test_backoff_sequence_and_jitter() -> None:
    b = Backoff(initial=0.2, maximum=10.0, factor=2.0, jitter=0.0)
    assert [b.next() for _ in range(8)] == [0.2, 0.4, 0.8, 1.6, 3.2, 6.4, 10.0, 10.0]
    b.reset()
    assert b.next() == 0.2
    j = Backoff(initial=1.0, maximum=1.0, jitter=0.5, rng=random.Random(1))
    samples = [j.next() for _ in range(200)]
    assert all(1.0 <= s <= 1.5 for s in samples) and len(set(samples)) > 100


_steps = st.lists(
    st.one_of(
        st.tuples(st.sampled_from(["create", "delete", "label", "bind"]), st.integers(0, 12)),
        st.tuples(
            st.sampled_from(["drop", "compact", "fail_watch", "fail_list", "bookmark", "yield"]), st.just(0)
        ),
    ),
    max_size=40,
)


@settings(max_examples=40, deadline=None)
@given(steps=_steps, history=st.integers(2, 20))
def test_reflector_converges_whatever_happens(steps: list[tuple[str, int]], history: int) -> None:
    """Random writes mixed with drops, compactions, failures and bookmarks: the handler's view
    always ends equal to the cluster, and every callback is consistent with the previous ones."""
    asyncio.run(_converge(steps, history))


async def _converge(steps: list[tuple[str, int]], history: int) -> None:
    from vgpu_scheduler.standin.transport import MemoryTransport

    cluster = MemoryCluster(seed=2, history_size=history)
    rec = Recorder()
    r = Reflector(KubeClient(MemoryTransport(cluster)), "pods", handler=rec, backoff=fast_backoff())
    r.start()
    try:
        assert await r.wait_synced(10)
        for op, i in steps:
            name = f"p{i}"
            exists = any(p["metadata"]["name"] == name for p in cluster.objects("pods"))
            if op == "create" and not exists:
                cluster.create("pods", pod(name, containers=[container("c")]))
            elif op == "delete" and exists:
                cluster.delete("pods", name, "default", grace_period_seconds=0)
            elif op == "label" and exists:
                cluster.patch("pods", name, {"metadata": {"labels": {"n": str(len(rec.calls))}}}, "default")
            elif op == "bind" and exists and not cluster.get("pods", name, "default")["spec"].get("nodeName"):
                cluster.bind("default", name, "n1")
            elif op == "drop":
                cluster.drop_watches()
            elif op == "compact":
                cluster.compact()
            elif op == "fail_watch":
                cluster.fail_next("watch", 1, 500)
            elif op == "fail_list":
                cluster.fail_next("list", 1, 503)
            elif op == "bookmark":
                cluster.trigger_bookmarks()
            elif op == "yield":
                await asyncio.sleep(0.001)
        await eventually(lambda: rec.state == truth(cluster), "convergence")
    finally:
        await r.stop()
