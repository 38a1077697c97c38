"""Transports: rate limiting, timeouts, connection failures, odd bodies, auth retry, isolation."""

from __future__ import annotations

import asyncio
import socket

import pytest
from aiohttp import web

from tests.builders import api_pod
from tests.builders import node as node_object
from vgpu_scheduler.cluster.client import KubeClient
from vgpu_scheduler.cluster.errors import ApiConnectionError, ApiError
from vgpu_scheduler.cluster.transport import HttpTransport, TokenBucket
from vgpu_scheduler.standin.fakeapi import FakeApiServer, serve
from vgpu_scheduler.standin.memory import MemoryCluster
from vgpu_scheduler.standin.transport import MemoryTransport


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)


async def test_token_bucket_burst_then_qps() -> None:
    t = FakeTime()
    bucket = TokenBucket(2.0, 3, clock=t.clock, sleep=t.sleep)
    for _ in range(3):
        await bucket.acquire()
    assert t.sleeps == []
    await bucket.acquire()
    await bucket.acquire()  # waiters queue up behind each other
    assert t.sleeps == [0.5, 1.0]
    t.now += 10.0  # idle time refills up to the burst, not beyond
    t.sleeps.clear()
    for _ in range(3):
        await bucket.acquire()
    assert t.sleeps == []
    await bucket.acquire()
    assert t.sleeps == [0.5]


async def test_token_bucket_disabled() -> None:
    t = FakeTime()
    bucket = TokenBucket(0, 1, clock=t.clock, sleep=t.sleep)
    for _ in range(100):
        await bucket.acquire()
    assert t.sleeps == []


async def test_connection_refused() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    client = KubeClient(HttpTransport(f"http://127.0.0.1:{port}", qps=0))
    try:
        with pytest.raises(ApiConnectionError, match="GET /api/v1/nodes/x"):
            await client.get_node("x")
        with pytest.raises(ApiConnectionError):
            async for _ in client.watch("pods"):
                pass
    finally:
        await client.close()


async def test_request_timeout(server: FakeApiServer, cluster: MemoryCluster) -> None:
    cluster.delay_next("get", 1, seconds=30.0)  # cancelled when the client gives up
    cluster.create("nodes", node_object("n1"))
    client = KubeClient(HttpTransport(server.url, qps=0, timeout=0.3))
    try:
        with pytest.raises(ApiConnectionError, match="Timeout"):
            await client.get_node("n1")
        assert (await client.get_node("n1"))["metadata"]["name"] == "n1"
    finally:
        await client.close()


async def test_non_json_error_bodies_become_status() -> None:
    async def handler(request: web.Request) -> web.Response:
        return web.Response(status=404, text="404 page not found\n")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    client = KubeClient(HttpTransport(f"http://127.0.0.1:{port}", qps=0))
    try:
        with pytest.raises(ApiError) as err:
            await client.get_node("x")
        assert err.value.status == 404 and err.value.reason == "NotFound"
        assert err.value.message == "404 page not found"
        assert err.value.body["kind"] == "Status"
    finally:
        await client.close()
        await runner.cleanup()


async def test_watch_lines_longer_than_the_stream_buffer(
    server: FakeApiServer, cluster: MemoryCluster
) -> None:
    big = "x" * 200_000
    client = KubeClient(HttpTransport(server.url, qps=0))
    try:
        rv = str(cluster.resource_version)
        cluster.create("pods", api_pod("big", annotations={"blob": big}))
        async for type_, obj in client.watch("pods", resource_version=rv, timeout_seconds=5):
            assert type_ == "ADDED" and obj["metadata"]["annotations"]["blob"] == big
            break
    finally:
        await client.close()


async def test_401_refreshes_credentials_once(cluster: MemoryCluster) -> None:
    class Rotating:
        def __init__(self) -> None:
            self.token = "old"
            self.invalidations = 0

        async def authorization(self) -> str | None:
            return f"Bearer {self.token}"

        async def invalidate(self) -> None:
            self.invalidations += 1
            self.token = "new"

    cluster.create("nodes", node_object("n1"))
    srv = await serve(cluster, token="new")
    auth = Rotating()
    client = KubeClient(HttpTransport(srv.url, qps=0, auth=auth))
    try:
        assert (await client.get_node("n1"))["metadata"]["name"] == "n1"
        assert auth.invalidations == 1 and srv.auth_headers == ["Bearer old", "Bearer new"]
        auth.token = "wrong"
        auth.invalidate = _noop  # type: ignore[method-assign]
        with pytest.raises(ApiError) as err:  # a second 401 is the answer
            await client.get_node("n1")
        assert err.value.status == 401
    finally:
        await client.close()
        await srv.close()


async def _noop() -> None:
    return None


async def test_memory_transport_hands_out_copies(cluster: MemoryCluster) -> None:
    client = KubeClient(MemoryTransport(cluster))
    pod = await client.create("pods", api_pod("a"))
    pod["metadata"]["labels"] = {"mutated": "yes"}
    again = await client.get_pod("default", "a")
    assert "labels" not in again["metadata"]
    again["spec"]["containers"].clear()
    assert cluster.get("pods", "a", "default")["spec"]["containers"]


async def test_rate_limited_requests_still_complete(server: FakeApiServer, cluster: MemoryCluster) -> None:
    cluster.create("nodes", node_object("n1"))
    client = KubeClient(HttpTransport(server.url, qps=200.0, burst=2))
    try:
        results = await asyncio.gather(*(client.get_node("n1") for _ in range(6)))
        assert len(results) == 6
    finally:
        await client.close()
