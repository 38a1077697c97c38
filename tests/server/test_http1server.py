"""HTTP/1.1 over TLS (server/http1server.py): the plain routes' POSTs answered without aiohttp,
byte for byte as aiohttp answers them, and every other request handed to aiohttp in order."""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trustme
from aiohttp import web
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.server.test_http2 import REVIEW, Served, served  # noqa: F401  (served: a fixture)
from vgpu_scheduler.cluster.http1 import AnswerReader
from vgpu_scheduler.server import http1server
from vgpu_scheduler.server.http1server import plain_request
from vgpu_scheduler.server.http2 import Http2Site
from vgpu_scheduler.server.plainroute import FAST_POSTS, PlainAnswer, PlainHandler, PlainRoute, RouteTable
from vgpu_scheduler.server.tls import ReloadingCertificate

WEBHOOK = PlainRoute(100, lambda body, ctype: None)  # type: ignore[arg-type,return-value]  # never called
ROUTES = RouteTable({"/webhook": WEBHOOK})


def go_head(path: bytes = b"/webhook", length: int = 10, *extra: bytes) -> bytes:
    """A request head as Go's HTTP/1.1 client writes it."""
    lines = [b"POST " + path + b" HTTP/1.1", b"Host: 127.0.0.1:8443", b"User-Agent: kube-apiserver-admission",
             b"Content-Length: %d" % length, b"Accept: application/json, */*",
             b"Content-Type: application/json", b"Accept-Encoding: gzip", *extra]
    return b"\r\n".join(lines)


def test_what_go_sends_is_a_plain_request() -> None:
    plain = (WEBHOOK, 10, b"application/json")
    assert plain_request(go_head(), ROUTES) == plain
    # kube-apiserver's webhook client adds its timeout as a query: routed on the path, as aiohttp does
    assert plain_request(go_head(b"/webhook?timeout=10s"), ROUTES) == plain


@pytest.mark.parametrize(
    "head",
    [
        pytest.param(go_head(b"/filter"), id="not-a-plain-route"),
        pytest.param(go_head().replace(b"POST", b"PUT", 1), id="another-method"),
        pytest.param(go_head().replace(b"HTTP/1.1", b"HTTP/1.0", 1), id="http-1.0"),
        pytest.param(go_head().replace(b"Host: 127.0.0.1:8443\r\n", b""), id="no-host"),
        pytest.param(go_head().replace(b"Content-Length: 10\r\n", b""), id="no-length"),
        pytest.param(go_head(b"/webhook", 101), id="over-the-limit"),
        pytest.param(go_head(b"/webhook", 10, b"Content-Length: 10"), id="two-lengths"),
        pytest.param(go_head(b"/webhook", 10, b"Transfer-Encoding: chunked"), id="chunked"),
        pytest.param(go_head(b"/webhook", 10, b"Expect: 100-continue"), id="expect"),
        pytest.param(go_head(b"/webhook", 10, b"Connection: close"), id="connection"),
        pytest.param(go_head(b"/webhook", 10, b"Upgrade: h2c"), id="upgrade"),
        pytest.param(go_head(b"/webhook", 10, b"Bad Name: x"), id="bad-header-name"),
        pytest.param(go_head(b"/webhook", 10, b"X-Bad: a\x00b"), id="control-character"),
        pytest.param(go_head(b"/webhook", 10, b"no colon"), id="no-colon"),
        pytest.param(go_head().replace(b"Content-Length: 10", b"Content-Length: +10"), id="signed-length"),
    ],
)
def test_anything_else_is_aiohttps(head: bytes) -> None:
    assert plain_request(head, ROUTES) is None


@given(st.binary(max_size=600))
@settings(max_examples=500)
def test_hostile_heads_never_raise(junk: bytes) -> None:
    plain_request(junk, ROUTES)
    plain_request(go_head() + junk, ROUTES)


class RawClient:
    """An HTTP/1.1 client over TLS that writes raw bytes and reads whole answers."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.buf = bytearray()

    @classmethod
    async def connect(cls, port: int) -> RawClient:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        context.set_alpn_protocols(["http/1.1"])
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
        return cls(reader, writer)

    def send(self, data: bytes) -> None:
        self.writer.write(data)

    async def answer(self) -> tuple[bytes, list[tuple[bytes, bytes]], bytes]:
        """(status line, headers without Date, body) of the next answer."""
        answer = AnswerReader()
        while (body := answer.feed(self.buf)) is None:
            data = await asyncio.wait_for(self.reader.read(65536), 5)
            assert data, "the connection closed before the answer"
            self.buf += data
        assert answer.head is not None
        end = self.buf.find(b"\r\n")
        status_line = bytes(self.buf[:end])
        head_end = self.buf.find(b"\r\n\r\n")
        names = [line.split(b":", 1)[0] for line in bytes(self.buf[end + 2 : head_end]).split(b"\r\n")]
        del self.buf[: answer.body_at + len(body)]
        headers = [(spelled, value) for spelled, (name, value) in zip(names, answer.head.headers, strict=True)
                   if name != b"date"]
        return status_line, headers, body

    async def close(self) -> None:
        self.writer.close()
        await self.writer.wait_closed()


def request(path: bytes, body: bytes, *extra: bytes) -> bytes:
    return go_head(path, len(body), *extra) + b"\r\n\r\n" + body


PLAIN_CASES = {
    "webhook": (b"/webhook", json.dumps(REVIEW).encode()),
    "webhook-with-timeout-query": (b"/webhook?timeout=10s", json.dumps(REVIEW).encode()),
    "webhook-not-a-review": (b"/webhook", b'{"kind": "AdmissionReview"}'),
    "webhook-empty": (b"/webhook", b""),
    "filter": (b"/filter", b'{"Pod": {}}'),
    "filter-empty": (b"/filter", b""),
    "bind": (b"/bind", b"{}"),
    "bind-raises": (b"/bind", b"boom"),
}


@pytest.mark.parametrize("case", PLAIN_CASES, ids=list(PLAIN_CASES))
async def test_plain_posts_are_answered_as_aiohttp_answers_them(served: Served, case: str) -> None:  # noqa: F811
    path, body = PLAIN_CASES[case]
    ours, theirs = await RawClient.connect(served.port), await RawClient.connect(served.port)
    try:
        ours.send(request(path, body))
        mine = await ours.answer()
        theirs.send(request(path, body, b"Connection: keep-alive"))  # a header that hands it over
        aiohttps = await theirs.answer()
        if case == "bind-raises":  # aiohttp closes the connection after its 500; so do we
            for client in (ours, theirs):
                assert await asyncio.wait_for(client.reader.read(), 5) == b""
        else:
            assert len(served.site._http1) == 1  # ours, still ours; theirs handed over
    finally:
        await ours.close()
        await theirs.close()
    assert mine == aiohttps


async def test_a_connection_handed_over_answers_in_order(served: Served) -> None:  # noqa: F811
    client = await RawClient.connect(served.port)
    try:
        # One write: ours, then one for aiohttp (which takes the connection and the rest), then
        # a plain POST that aiohttp now answers.
        client.send(request(b"/filter", b"1") + b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
                    + request(b"/filter", b"22"))
        answers = [await client.answer() for _ in range(3)]
    finally:
        await client.close()
    assert [a[0] for a in answers] == [b"HTTP/1.1 200 OK"] * 3
    assert [a[2] for a in answers] == [b'{"filtered": 1}', b"", b'{"filtered": 2}']
    assert not served.site._http1


async def test_pipelined_and_split_requests(served: Served) -> None:  # noqa: F811
    client = await RawClient.connect(served.port)
    try:
        client.send(request(b"/filter", b"a") + request(b"/filter", b"bb"))
        assert [(await client.answer())[2] for _ in range(2)] == [b'{"filtered": 1}', b'{"filtered": 2}']
        whole = request(b"/filter", b"x" * 5000)
        for at in range(0, len(whole), 1500):
            client.send(whole[at : at + 1500])
            await asyncio.sleep(0.01)
        assert (await client.answer())[2] == b'{"filtered": 5000}'
        assert len(served.site._http1) == 1  # all of them ours
    finally:
        await client.close()


async def test_an_oversized_body_is_aiohttps_to_refuse(served: Served) -> None:  # noqa: F811
    from vgpu_scheduler.wire.extender import MAX_BODY_BYTES

    client = await RawClient.connect(served.port)
    try:
        client.send(request(b"/filter", b"x" * (MAX_BODY_BYTES + 10)))
        status, _, body = await client.answer()
    finally:
        await client.close()
    assert not served.site._http1  # handed over
    # aiohttp's PlainHandler gives the route its first limit + 1 bytes, as the direct paths do
    assert (status, body) == (b"HTTP/1.1 200 OK", b'{"filtered": %d}' % (MAX_BODY_BYTES + 1))


async def test_shutdown_closes_an_idle_connection(served: Served) -> None:  # noqa: F811
    client = await RawClient.connect(served.port)
    try:
        client.send(request(b"/filter", b"{}"))
        await client.answer()
        await served.site.stop()
        assert await asyncio.wait_for(client.reader.read(), 5) == b""
    finally:
        await client.close()


async def test_an_idle_connection_is_closed_after_the_keepalive(
    served: Served, monkeypatch: pytest.MonkeyPatch  # noqa: F811
) -> None:
    monkeypatch.setattr(http1server, "KEEPALIVE_SECONDS", 0.1)
    client = await RawClient.connect(served.port)
    try:
        client.send(request(b"/filter", b"{}"))
        await client.answer()
        assert await asyncio.wait_for(client.reader.read(), 5) == b""
    finally:
        await client.close()


@pytest.fixture
async def slow_route(tmp_path: Path) -> AsyncIterator[tuple[int, asyncio.Event, asyncio.Event]]:
    """A server whose plain route waits until released; (port, started, cancelled)."""
    started, cancelled, release = asyncio.Event(), asyncio.Event(), asyncio.Event()

    async def answer(body: bytes, content_type: str) -> PlainAnswer:
        started.set()
        try:
            await release.wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return PlainAnswer(200, "text/plain", body)

    route = PlainRoute(1000, answer)
    app = web.Application()
    app[FAST_POSTS] = {"/slow": route}
    app.router.add_post("/slow", PlainHandler(route).handle)
    ca = trustme.CA()
    leaf = ca.issue_cert("127.0.0.1")
    leaf.private_key_pem.write_to_path(str(tmp_path / "tls.key"))
    leaf.cert_chain_pems[0].write_to_path(str(tmp_path / "tls.crt"))
    cert = ReloadingCertificate(str(tmp_path / "tls.crt"), str(tmp_path / "tls.key"))
    runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=5)
    await runner.setup()
    site = Http2Site(runner, "127.0.0.1", 0, ssl_context=cert.context)
    await site.start()
    try:
        yield site.port, started, cancelled
    finally:
        release.set()
        await runner.cleanup()


async def test_a_client_gone_cancels_its_route(slow_route: tuple[int, asyncio.Event, asyncio.Event]) -> None:
    port, started, cancelled = slow_route
    client = await RawClient.connect(port)
    client.send(request(b"/slow", b"x"))
    await asyncio.wait_for(started.wait(), 5)
    await client.close()
    await asyncio.wait_for(cancelled.wait(), 5)

