"""vgpu_scheduler_api_*: every request the transport sends, by verb and code, over real HTTP to the
fake API server and over the in-process transport (the `client` fixture runs both)."""

from __future__ import annotations

import socket

import pytest

from tests.builders import api_pod, node
from vgpu_scheduler.cluster.client import KubeClient
from vgpu_scheduler.cluster.errors import ApiConnectionError, ApiError
from vgpu_scheduler.cluster.transport import HttpTransport
from vgpu_scheduler.standin.memory import MemoryCluster


async def test_requests_by_verb_and_code(client: KubeClient, cluster: MemoryCluster) -> None:
    cluster.create("nodes", node("n1", typed=True))
    await client.get_node("n1")
    with pytest.raises(ApiError):
        await client.get_node("missing")
    await client.patch_node("n1", {"metadata": {"labels": {"a": "b"}}})
    await client.create("pods", api_pod("p"), "default")
    await client.list("nodes")
    watch = client.watch("nodes", resource_version="0")
    assert (await anext(watch))[0] == "ADDED"
    await watch.aclose()

    stats = client.transport.stats  # type: ignore[attr-defined]
    assert dict(stats.requests.series()) == {
        ("GET", "200"): 2,
        ("GET", "404"): 1,
        ("PATCH", "200"): 1,
        ("POST", "201"): 1,
        ("WATCH", "200"): 1,
    }
    # Every request but the watch has a duration; a watch lasts as long as the server keeps it.
    durations = {verb: data.count for (verb,), data in stats.duration.series()}
    assert durations == {"GET": 3, "PATCH": 1, "POST": 1}
    if isinstance(client.transport, HttpTransport):
        assert stats.rate_limiter_wait.data().count == 6  # each request and the watch took a token


async def test_a_request_without_an_answer_is_counted_as_error() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there
    transport = HttpTransport(f"http://127.0.0.1:{port}", qps=0)
    client = KubeClient(transport)
    try:
        with pytest.raises(ApiConnectionError):
            await client.get_node("x")
        with pytest.raises(ApiConnectionError):
            async for _ in client.watch("pods"):
                pass
    finally:
        await client.close()
    assert dict(transport.stats.requests.series()) == {("GET", "<error>"): 1, ("WATCH", "<error>"): 1}
    assert {verb: data.count for (verb,), data in transport.stats.duration.series()} == {"GET": 1}


def test_the_event_client_counts_into_the_same_metrics() -> None:
    transport = HttpTransport("http://127.0.0.1:1")
    sibling = transport.with_own_rate_limit()
    assert sibling.limiter is not transport.limiter
    assert sibling.stats is transport.stats
