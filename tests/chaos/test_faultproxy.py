"""The chaos fault proxy over loopback TLS (default run: no marker): requests relayed one per
upstream connection, writes answered with an injected status without reaching upstream, cut
connections, and every write recorded with what the client got."""

from __future__ import annotations

import asyncio
import random
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import aiohttp
import pytest
import trustme
from faultproxy import FaultProxy
from history import WriteSeen


@dataclass
class Upstream:
    heads: list[str] = field(default_factory=list)

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode()
        self.heads.append(head)
        lines = head.split("\r\n")
        length = next((int(h.split(":")[1]) for h in lines if h.lower().startswith("content-length")), 0)
        await reader.readexactly(length)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
        await writer.drain()
        writer.close()


@dataclass
class Rig:
    proxy: FaultProxy
    upstream: Upstream
    session: aiohttp.ClientSession
    writes: list[WriteSeen]

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.proxy.port}"


@pytest.fixture
async def rig() -> AsyncIterator[Rig]:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(server_ctx)
    client_ctx = ssl.create_default_context()
    ca.configure_trust(client_ctx)
    upstream = Upstream()
    up_server = await asyncio.start_server(upstream.serve, "127.0.0.1", 0, ssl=server_ctx)
    port = int(up_server.sockets[0].getsockname()[1])
    writes: list[WriteSeen] = []
    proxy = FaultProxy(replica="a", upstream=("127.0.0.1", port), server_ssl=server_ctx,
                       client_ssl=client_ctx, rng=random.Random(1), record=writes.append)
    await proxy.start()
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=client_ctx))
    try:
        yield Rig(proxy, upstream, session, writes)
    finally:
        await session.close()
        await proxy.stop()
        up_server.close()
        await up_server.wait_closed()


async def test_a_request_is_relayed_on_a_connection_of_its_own(rig: Rig) -> None:
    for _ in range(2):
        async with rig.session.patch(f"{rig.url}/api/v1/nodes/n1?x=1", json={"a": 1}) as resp:
            assert (resp.status, await resp.text()) == (200, "ok")
    assert len(rig.upstream.heads) == 2
    assert all("Connection: close" in head for head in rig.upstream.heads)
    seen = [(w.replica, w.method, w.path, w.status) for w in rig.writes]
    assert seen == [("a", "PATCH", "/api/v1/nodes/n1", 200)] * 2


async def test_an_injected_error_never_reaches_upstream(rig: Rig) -> None:
    rig.proxy.faults.error = 1.0
    async with rig.session.post(f"{rig.url}/api/v1/namespaces/x/pods", json={}) as resp:
        status = resp.status
        body = await resp.json()
    assert status in (409, 429, 500, 503) and body["code"] == status and body["kind"] == "Status"
    async with rig.session.get(f"{rig.url}/api/v1/nodes") as resp:  # reads are never failed
        assert resp.status == 200
    assert len(rig.upstream.heads) == 1 and rig.upstream.heads[0].startswith("GET ")
    assert [w.status for w in rig.writes] == [status]


async def test_a_cut_connection_is_an_error_for_the_client(rig: Rig) -> None:
    rig.proxy.faults.drop = 1.0
    for _ in range(4):  # POST: aiohttp does not retry it on a cut connection
        with pytest.raises(aiohttp.ClientError):
            async with rig.session.post(f"{rig.url}/api/v1/namespaces/x/pods", json={}) as resp:
                await resp.read()
    assert [w.status for w in rig.writes] == [0] * 4
    assert 0 < len(rig.upstream.heads) < 4  # some cut before upstream saw them, some after (seed 1)
