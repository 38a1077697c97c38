"""EventRecorder: core/v1 Events shaped like client-go's legacy recorder, sent off the request path."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from tests import builders
from vgpu_scheduler.cluster.client import KubeClient
from vgpu_scheduler.cluster.errors import ApiConnectionError
from vgpu_scheduler.cluster.events import (
    BINDING_SUCCEED,
    FILTERING_FAILED,
    FILTERING_SUCCEED,
    NORMAL,
    WARNING,
    EventRecorder,
    make_event,
    pod_reference,
    rfc3339,
    unix_nanos,
)
from vgpu_scheduler.cluster.transport import HttpTransport
from vgpu_scheduler.standin.fakeapi import serve
from vgpu_scheduler.standin.memory import MemoryCluster
from vgpu_scheduler.standin.transport import MemoryTransport

Obj = dict[str, Any]
T0 = datetime(2026, 11, 29, 21, 2, 48, 600349, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> datetime:
        return self.t


def pod(name: str = "gpu-single", namespace: str | None = "default") -> Obj:
    """The captured pod's identity (uid, resourceVersion), which the events refer to."""
    return builders.pod(name, namespace=namespace, uid="5748c399-a333-4761-a85d-302a5e301e11",
                        resource_version="255", containers=[builders.container("c")])


def events(cluster: MemoryCluster, namespace: str = "default") -> list[Obj]:
    return cluster.objects("events", namespace)


@pytest.fixture
async def client(cluster: MemoryCluster) -> AsyncIterator[KubeClient]:
    kc = KubeClient(MemoryTransport(cluster))
    yield kc
    await kc.close()


# ------------------------------------------------------------------ shape


def test_helpers() -> None:
    assert rfc3339(T0) == "2026-11-29T21:02:48Z"
    assert rfc3339(T0.astimezone(timezone(timedelta(hours=8)))) == "2026-11-29T21:02:48Z"
    assert unix_nanos(T0) == 1_795_986_168_600_349_000
    assert unix_nanos(datetime(1970, 1, 1, tzinfo=UTC)) == 0


def test_event_shape_matches_client_go(fx: Any) -> None:
    real = fx.json("api/event.scheduled.core-v1.raw.json")
    event = make_event(pod(), NORMAL, BINDING_SUCCEED, "msg", component="hami-scheduler", moment=T0,
        nanos=unix_nanos(T0))
    # The reference to the pod is exactly what the API stores for kube-scheduler's own event.
    assert event["involvedObject"] == real["involvedObject"]
    assert list(event["involvedObject"]) == list(real["involvedObject"])
    assert event["metadata"] == {"name": "gpu-single.18ec9fe7a0f04948", "namespace": "default"}
    # The captured event is named the same way: its suffix is its eventTime in hex nanoseconds.
    suffix = int(real["metadata"]["name"].split(".")[1], 16)
    event_time = datetime.strptime(real["eventTime"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    assert abs(suffix - unix_nanos(event_time)) < 1_000_000
    assert event["source"] == {"component": "hami-scheduler"}
    assert event["firstTimestamp"] == event["lastTimestamp"] == "2026-11-29T21:02:48Z"
    assert (event["count"], event["type"], event["eventTime"]) == (1, "Normal", None)
    assert (event["reportingComponent"], event["reportingInstance"]) == ("hami-scheduler", "")
    # Field order of the Go struct (kind/apiVersion are put in front by the client).
    order = [k for k in real if k in event]
    assert [k for k in event if k in real] == order


def test_reference_leaves_out_empty_fields() -> None:
    assert pod_reference({"metadata": {"name": "p"}}) == {"kind": "Pod", "name": "p", "apiVersion": "v1"}
    assert pod_reference({}) == {"kind": "Pod", "apiVersion": "v1"}


# ------------------------------------------------------------------ sending


async def test_records_through_the_api(cluster: MemoryCluster, client: KubeClient) -> None:
    rec = EventRecorder(client, "hami-scheduler", now=Clock())
    rec.record(pod(), NORMAL, FILTERING_SUCCEED, "find fit node(gpu-node-1), 0 nodes not fit, 1 nodes fit")
    await rec.flush()
    [stored] = events(cluster)
    assert stored["apiVersion"] == "v1" and stored["kind"] == "Event"
    assert re.fullmatch(r"gpu-single\.[0-9a-f]+", stored["metadata"]["name"])
    assert stored["reason"] == FILTERING_SUCCEED and stored["count"] == 1
    assert stored["source"] == {"component": "hami-scheduler"}
    assert stored["involvedObject"]["uid"] == "5748c399-a333-4761-a85d-302a5e301e11"
    assert rec.stats.created == 1
    await rec.stop()


async def test_identical_events_are_folded_into_a_count(cluster: MemoryCluster, client: KubeClient) -> None:
    clock = Clock()
    rec = EventRecorder(client, "hami-scheduler", now=clock)
    rec.record(pod(), WARNING, FILTERING_FAILED, "no available node, 3 nodes do not meet")
    await rec.flush()
    for i in range(1, 3):
        clock.t = T0 + timedelta(seconds=10 * i)
        rec.record(pod(), WARNING, FILTERING_FAILED, "no available node, 3 nodes do not meet")
    rec.record(pod(), WARNING, FILTERING_FAILED, "no available node, 2 nodes do not meet")
    # The same message on another pod is another event.
    rec.record(pod("other"), WARNING, FILTERING_FAILED, "no available node, 3 nodes do not meet")
    await rec.flush()
    by_message = {(e["involvedObject"]["name"], e["message"]): e for e in events(cluster)}
    folded = by_message[("gpu-single", "no available node, 3 nodes do not meet")]
    assert folded["count"] == 3
    assert folded["firstTimestamp"] == "2026-11-29T21:02:48Z"
    assert folded["lastTimestamp"] == "2026-11-29T21:03:08Z"
    assert by_message[("gpu-single", "no available node, 2 nodes do not meet")]["count"] == 1
    assert len(by_message) == 3
    assert (rec.stats.created, rec.stats.patched) == (3, 2)
    await rec.stop()


async def test_folded_event_that_expired_is_recreated(cluster: MemoryCluster, client: KubeClient) -> None:
    rec = EventRecorder(client, "s", now=Clock())
    rec.record(pod(), NORMAL, BINDING_SUCCEED, "ok")
    await rec.flush()
    [first] = events(cluster)
    cluster.delete("events", first["metadata"]["name"], "default")
    rec.record(pod(), NORMAL, BINDING_SUCCEED, "ok")
    await rec.flush()
    [again] = events(cluster)
    assert again["metadata"]["name"] == first["metadata"]["name"] and again["count"] == 2
    await rec.stop()


async def test_empty_component_and_default_namespace(cluster: MemoryCluster, client: KubeClient) -> None:
    rec = EventRecorder(client, "", now=Clock())
    rec.record(pod("p", namespace=None), NORMAL, BINDING_SUCCEED, "ok")
    await rec.flush()
    [stored] = events(cluster, "default")
    assert stored["source"] == {} and stored["reportingComponent"] == ""
    assert "namespace" not in stored["involvedObject"]
    await rec.stop()


async def test_names_never_collide(cluster: MemoryCluster, client: KubeClient) -> None:
    rec = EventRecorder(client, "s", now=Clock())  # frozen clock: same instant for every event
    for i in range(5):
        rec.record(pod(), NORMAL, BINDING_SUCCEED, f"m{i}")
    await rec.flush()
    assert len({e["metadata"]["name"] for e in events(cluster)}) == 5 and rec.stats.failed == 0
    await rec.stop()


async def test_invalid_events_are_refused(cluster: MemoryCluster, client: KubeClient) -> None:
    rec = EventRecorder(client, "s", now=Clock())
    rec.record(pod(), "Error", FILTERING_FAILED, "x")
    rec.record({"metadata": {}}, NORMAL, FILTERING_FAILED, "x")
    await rec.flush()
    assert events(cluster) == [] and rec.stats.invalid == 2
    await rec.stop()


async def test_record_never_blocks_and_drops_when_full(cluster: MemoryCluster, client: KubeClient) -> None:
    rec = EventRecorder(client, "s", max_queue=2, now=Clock())
    for i in range(5):  # no await in between: the sender cannot run
        rec.record(pod(), NORMAL, BINDING_SUCCEED, f"m{i}")
    assert rec.stats.dropped == 3
    await rec.flush()
    assert sorted(e["message"] for e in events(cluster)) == ["m0", "m1"]
    await rec.stop()


async def test_api_rejection_is_final(cluster: MemoryCluster, client: KubeClient) -> None:
    rec = EventRecorder(client, "s", now=Clock())
    cluster.fail_next("create", 1, 403, resource="events")
    rec.record(pod(), NORMAL, BINDING_SUCCEED, "a")
    rec.record(pod(), NORMAL, BINDING_SUCCEED, "b")
    await rec.flush()
    assert [e["message"] for e in events(cluster)] == ["b"] and rec.stats.failed == 1
    await rec.stop()


class FlakyClient(KubeClient):
    def __init__(self, inner: KubeClient, failures: int) -> None:
        super().__init__(inner.transport)
        self.failures = failures

    async def create_event(self, namespace: str, event: Any, *, answer: bool = True) -> Obj:
        if self.failures:
            self.failures -= 1
            raise ApiConnectionError("connection reset")
        return await super().create_event(namespace, event, answer=answer)


async def test_connection_errors_are_retried(cluster: MemoryCluster, client: KubeClient) -> None:
    rec = EventRecorder(FlakyClient(client, 2), "s", now=Clock(), retries=3, retry_delay=0.001)
    rec.record(pod(), NORMAL, BINDING_SUCCEED, "a")
    await rec.flush()
    assert len(events(cluster)) == 1 and rec.stats.failed == 0
    gives_up = EventRecorder(FlakyClient(client, 10), "s", now=Clock(), retries=1, retry_delay=0.001)
    gives_up.record(pod(), NORMAL, BINDING_SUCCEED, "b")
    await gives_up.flush()
    assert len(events(cluster)) == 1 and gives_up.stats.failed == 1
    await rec.stop()
    await gives_up.stop()


async def test_stop_flushes_then_refuses(cluster: MemoryCluster, client: KubeClient) -> None:
    rec = EventRecorder(client, "s", now=Clock())
    for i in range(3):
        rec.record(pod(), NORMAL, BINDING_SUCCEED, f"m{i}")
    await rec.stop()
    assert len(events(cluster)) == 3
    rec.record(pod(), NORMAL, BINDING_SUCCEED, "late")
    assert rec.stats.dropped == 1
    await asyncio.sleep(0)
    assert len(events(cluster)) == 3


async def test_stop_waits_for_a_write_already_in_flight(cluster: MemoryCluster, client: KubeClient) -> None:
    rec = EventRecorder(client, "s", now=Clock())
    rec.record(pod(), NORMAL, BINDING_SUCCEED, "a")
    await asyncio.sleep(0)  # a sender has taken it: the queue is empty, the write not done
    await rec.stop()
    assert [e["message"] for e in events(cluster)] == ["a"] and rec.stats.dropped == 0


async def test_stop_wait_is_bounded(cluster: MemoryCluster, client: KubeClient) -> None:
    rec = EventRecorder(client, "s", now=Clock(), senders=1)
    cluster.delay_next("create", 1, 30.0, resource="events")
    for i in range(3):
        rec.record(pod(), NORMAL, BINDING_SUCCEED, f"m{i}")
    await asyncio.wait_for(rec.stop(timeout=0.05), 5)
    assert rec.stats.dropped == 3  # one cancelled in flight, two never left the queue
    assert events(cluster) == []


async def test_a_slow_write_does_not_hold_the_others_back(cluster: MemoryCluster, client: KubeClient) -> None:
    rec = EventRecorder(client, "s", now=Clock())
    cluster.delay_next("create", 1, 30.0, resource="events")
    for i in range(3):
        rec.record(pod(), NORMAL, BINDING_SUCCEED, f"m{i}")
    await asyncio.wait_for(rec.stop(timeout=0.5), 5)
    assert sorted(e["message"] for e in events(cluster)) == ["m1", "m2"]
    assert rec.stats.dropped == 1  # the slow one, cancelled in flight


class GatedClient(KubeClient):
    """Event writes wait at a gate; counts how many are in flight at once."""

    def __init__(self, inner: KubeClient) -> None:
        super().__init__(inner.transport)
        self.gate = asyncio.Event()
        self.in_flight = 0
        self.most_in_flight = 0

    async def create_event(self, namespace: str, event: Any, *, answer: bool = True) -> Obj:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await self.gate.wait()
            return await super().create_event(namespace, event, answer=answer)
        finally:
            self.in_flight -= 1


async def test_events_are_written_several_at_a_time(cluster: MemoryCluster, client: KubeClient) -> None:
    gated = GatedClient(client)
    rec = EventRecorder(gated, "s", now=Clock(), senders=4)
    for i in range(10):
        rec.record(pod(f"p{i}"), NORMAL, BINDING_SUCCEED, "bound")
    for _ in range(5):
        await asyncio.sleep(0)
    assert gated.most_in_flight == 4  # the senders' bound, not one at a time
    gated.gate.set()
    await rec.flush()
    assert len(events(cluster)) == 10 and rec.stats.created == 10
    await rec.stop()


async def test_identical_events_in_flight_together_still_fold(
    cluster: MemoryCluster, client: KubeClient
) -> None:
    gated = GatedClient(client)
    rec = EventRecorder(gated, "s", now=Clock(), senders=4)
    for _ in range(3):
        rec.record(pod(), WARNING, FILTERING_FAILED, "0/1 nodes are available")
    for _ in range(5):
        await asyncio.sleep(0)
    assert gated.most_in_flight == 1  # the others wait for the first: they fold into it
    gated.gate.set()
    await rec.flush()
    [stored] = events(cluster)
    assert stored["count"] == 3 and rec.stats.created == 1 and rec.stats.patched == 2
    await rec.stop()


async def test_records_over_http(cluster: MemoryCluster) -> None:
    srv = await serve(cluster)
    kc = KubeClient(HttpTransport(srv.url, qps=0))
    try:
        rec = EventRecorder(kc, "hami-scheduler", now=Clock())
        rec.record(pod(), WARNING, FILTERING_FAILED, "1 nodes CardInsufficientMemory(gpu-node-1)")
        rec.record(pod(), WARNING, FILTERING_FAILED, "1 nodes CardInsufficientMemory(gpu-node-1)")
        await rec.stop()
        [stored] = events(cluster)
        assert stored["count"] == 2 and stored["type"] == "Warning"
    finally:
        await kc.close()
        await srv.close()
