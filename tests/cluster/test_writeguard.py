"""A caller's write guard runs right before each write leaves the transport, after the rate
limiter's wait: a write that waited there while its caller lost the right to write is not sent."""

from __future__ import annotations

import asyncio
import contextvars

import pytest

from tests.builders import node as node_object
from vgpu_scheduler.cluster.client import KubeClient
from vgpu_scheduler.cluster.transport import HttpTransport, TokenBucket
from vgpu_scheduler.cluster.writeguard import check_write, guarded_writes
from vgpu_scheduler.standin.fakeapi import FakeApiServer
from vgpu_scheduler.standin.memory import MemoryCluster
from vgpu_scheduler.standin.transport import MemoryTransport


class Deposed(Exception):
    pass


def _annotation(cluster: MemoryCluster, key: str) -> str | None:
    node = cluster.objects("nodes")[0]
    return (node["metadata"].get("annotations") or {}).get(key)


async def test_a_write_that_waited_in_the_rate_limiter_is_checked_after_the_wait(
    server: FakeApiServer, cluster: MemoryCluster
) -> None:
    cluster.create("nodes", node_object("n1"))
    transport = HttpTransport(server.url, qps=1.0, burst=1)
    leading = True

    async def paused_in_the_limiter(seconds: float) -> None:
        nonlocal leading
        leading = False  # the Lease passed to another replica while this write waited

    transport.limiter = TokenBucket(1.0, 1, sleep=paused_in_the_limiter)
    client = KubeClient(transport)

    def still_leading() -> None:
        if not leading:
            raise Deposed

    try:
        with guarded_writes(still_leading):
            await client.patch_node("n1", {"metadata": {"annotations": {"first": "1"}}})  # the burst token
            with pytest.raises(Deposed):
                await client.patch_node("n1", {"metadata": {"annotations": {"second": "1"}}})
            await client.get("nodes", "n1")  # reads are not guarded
    finally:
        await client.close()
    assert _annotation(cluster, "first") == "1"
    assert _annotation(cluster, "second") is None


async def test_the_guard_is_the_callers_own(cluster: MemoryCluster) -> None:
    """Writes outside the block, and of tasks not started from it, are not checked."""
    cluster.create("nodes", node_object("n1"))
    client = KubeClient(MemoryTransport(cluster))
    calls: list[str] = []
    outside = contextvars.copy_context()  # the context of another task, started before the block

    def refuse() -> None:
        calls.append("checked")
        raise Deposed

    with guarded_writes(refuse):
        with pytest.raises(Deposed):
            await client.patch_node("n1", {"metadata": {"annotations": {"inside": "1"}}})
        outside.run(check_write, "PATCH")  # another task's write: no check
        task_patch = {"metadata": {"annotations": {"t": "1"}}}
        started_inside = asyncio.ensure_future(client.patch_node("n1", task_patch))
        with pytest.raises(Deposed):
            await started_inside  # a task started in the block inherits the check
    await client.patch_node("n1", {"metadata": {"annotations": {"after": "1"}}})
    assert calls == ["checked", "checked"]
    assert _annotation(cluster, "inside") is None and _annotation(cluster, "t") is None
    assert _annotation(cluster, "after") == "1"


async def test_a_write_is_checked_after_its_connection_is_made(
    server: FakeApiServer, cluster: MemoryCluster
) -> None:
    """A new connection's connect and TLS handshake are a wait too (a process paused in them wakes
    with the write ready to go): the guard runs once the connection is ready, right before the write."""
    cluster.create("nodes", node_object("n1"))
    transport = HttpTransport(server.url, qps=0)
    client = KubeClient(transport)
    pool, _ = transport._get_pool()
    connect = pool._connect
    leading = True

    async def deposed_while_connecting() -> object:
        nonlocal leading
        conn = await connect()
        leading = False  # the Lease passed to another replica during the handshake
        return conn

    pool._connect = deposed_while_connecting  # type: ignore[method-assign]

    def still_leading() -> None:
        if not leading:
            raise Deposed

    try:
        with guarded_writes(still_leading), pytest.raises(Deposed):
            await client.patch_node("n1", {"metadata": {"annotations": {"late": "1"}}})
        await client.patch_node("n1", {"metadata": {"annotations": {"unguarded": "1"}}})
    finally:
        await client.close()
    assert _annotation(cluster, "late") is None
    assert _annotation(cluster, "unguarded") == "1"
    assert pool.opened == 1  # the refused write's connection, unused, served the next one
