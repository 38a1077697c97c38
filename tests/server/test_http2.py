"""HTTP/2 on the main port (server/http2.py, h2conn.py, http1bridge.py), through a real TLS
listener and the `h2` library as the client: the same answers as HTTP/1.1, many streams on one
connection, flow control both ways, a reset stream cancelling its handler, GOAWAY on shutdown."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import io
import json
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import pytest
import trustme
from aiohttp import web
from cryptography import x509
from cryptography.x509.oid import NameOID

from tests.server.h2client import H2Client
from vgpu_scheduler.config import DeviceConfig, NvidiaConfig
from vgpu_scheduler.devices.registry import build
from vgpu_scheduler.scheduler.options import SchedulerOptions
from vgpu_scheduler.server.app import make_app
from vgpu_scheduler.server.http1bridge import BadRequest, http1_request
from vgpu_scheduler.server.http2 import Http2Site
from vgpu_scheduler.server.tls import ReloadingCertificate
from vgpu_scheduler.server.webhook import webhook_handler
from vgpu_scheduler.wire.extender import MAX_BODY_BYTES


class _Extender:
    async def filter(self, body: bytes) -> bytes:
        return b'{"filtered": ' + str(len(body)).encode() + b"}"

    async def bind(self, body: bytes) -> bytes:
        if body == b"boom":
            raise RuntimeError("a verb that raises: aiohttp's 500, on both protocols")
        return b'{"Error": ""}'


@dataclass
class Served:
    port: int
    runner: web.AppRunner
    site: Http2Site
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)


def _test_app(served: list[Served]) -> web.Application:
    opts = dataclasses.replace(SchedulerOptions(), scheduler_name="hami-scheduler")
    webhook = webhook_handler(opts, build(DeviceConfig(NvidiaConfig())))
    app = make_app(_Extender(), webhook)  # type: ignore[arg-type]

    async def echo(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        return web.Response(body=hashlib.sha256(body).hexdigest().encode() + b" " + str(len(body)).encode())

    async def big(request: web.Request) -> web.StreamResponse:
        size = int(request.query["n"])
        return web.Response(body=bytes(i % 251 for i in range(size)))

    async def chunks(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        for part in (b"one,", b"two,", b"three"):
            await response.write(part)
        await response.write_eof()
        return response

    async def slow(request: web.Request) -> web.StreamResponse:
        try:
            await served[0].release.wait()
        except asyncio.CancelledError:
            served[0].cancelled.set()
            raise
        return web.Response(text="released")

    app.router.add_post("/test/echo", echo)
    app.router.add_get("/test/big", big)
    app.router.add_get("/test/chunks", chunks)
    app.router.add_get("/test/slow", slow)
    return app


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    ca = trustme.CA()
    leaf = ca.issue_cert("127.0.0.1")
    leaf.private_key_pem.write_to_path(str(tmp_path / "tls.key"))
    leaf.cert_chain_pems[0].write_to_path(str(tmp_path / "tls.crt"))
    cert = ReloadingCertificate(str(tmp_path / "tls.crt"), str(tmp_path / "tls.key"))
    holder: list[Served] = []
    runner = web.AppRunner(_test_app(holder), handler_cancellation=True, shutdown_timeout=5)
    await runner.setup()
    site = Http2Site(runner, "127.0.0.1", 0, ssl_context=cert.context)
    await site.start()
    holder.append(Served(site.port, runner, site))
    try:
        yield holder[0]
    finally:
        holder[0].release.set()
        await runner.cleanup()


def _insecure() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


_HOP = {b"date", b"connection", b"keep-alive", b"transfer-encoding"}
REVIEW = {
    "apiVersion": "admission.k8s.io/v1",
    "kind": "AdmissionReview",
    "request": {
        "uid": "u-1",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "operation": "CREATE",
        "namespace": "default",
        "object": {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p", "namespace": "default"},
            "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
        },
    },
}

SAME_ANSWER_CASES = {
    "filter": ("POST", "/filter", b'{"Pod": {}}'),
    "filter-empty-body": ("POST", "/filter", b""),
    "bind": ("POST", "/bind", b"{}"),
    "webhook": ("POST", "/webhook", json.dumps(REVIEW).encode()),
    "webhook-not-a-review": ("POST", "/webhook", b'{"kind": "AdmissionReview"}'),
    "webhook-empty": ("POST", "/webhook", b""),
    "filter-oversized": ("POST", "/filter", b"x" * (MAX_BODY_BYTES + 5000)),
    "filter-with-query": ("POST", "/filter?x=1", b"{}"),
    "bind-raises": ("POST", "/bind", b"boom"),
    "healthz": ("GET", "/healthz", b""),
    "healthz-head-is-not-get": ("HEAD", "/healthz", b""),
    "healthz-wrong-method": ("PUT", "/healthz", b""),
    "healthz-letter-case": ("GET", "/Healthz", b""),
    "healthz-trailing-slash": ("GET", "/healthz/", b""),
    "filter-trailing-slash": ("POST", "/filter/", b"{}"),
    "options": ("OPTIONS", "/filter", b""),
    "unknown-path": ("GET", "/nowhere", b""),
    "query-string": ("GET", "/Healthz?x=1&y=2", b""),
    "chunked-answer": ("GET", "/test/chunks", b""),
}


@pytest.mark.parametrize("case", SAME_ANSWER_CASES, ids=list(SAME_ANSWER_CASES))
async def test_http2_answers_as_http1_does(served: Served, case: str) -> None:
    method, path, body = SAME_ANSWER_CASES[case]
    async with (
        aiohttp.ClientSession() as session,
        session.request(
            method,
            f"https://127.0.0.1:{served.port}{path}",
            data=io.BytesIO(body) if len(body) > 1 << 20 else body,
            ssl=_insecure(),
            allow_redirects=False,
            headers={"Content-Type": "application/json"},
        ) as response,
    ):
        h1 = (
            response.status,
            sorted((k.lower().encode(), v.encode()) for k, v in response.headers.items()),
            await response.read(),
        )
    client = await H2Client.connect(served.port)
    try:
        answer = await client.request(method, path, body, [("content-type", "application/json")])
    finally:
        await client.close()
    h2 = (answer.status, sorted(answer.headers), bytes(answer.body))
    assert h2[0] == h1[0]
    assert [h for h in h2[1] if h[0] not in _HOP] == [h for h in h1[1] if h[0] not in _HOP]
    assert h2[2] == h1[2]


async def test_many_concurrent_streams_share_one_connection(served: Served) -> None:
    client = await H2Client.connect(served.port)
    try:
        bodies = [
            f'{{"n": {i}}}'.encode() * (i + 1) for i in range(200)
        ]  # beyond MAX_STREAMS: refused ones retried
        answers = await asyncio.gather(*(_retrying(client, body) for body in bodies))
    finally:
        await client.close()
    for body, answer in zip(bodies, answers, strict=True):
        assert answer.status == 200
        assert (
            bytes(answer.body) == hashlib.sha256(body).hexdigest().encode() + b" " + str(len(body)).encode()
        )


async def _retrying(client: H2Client, body: bytes) -> object:
    while True:
        answer = await client.request("POST", "/test/echo", body)
        if answer.reset is None:
            return answer
        await asyncio.sleep(0.01)


async def test_large_bodies_flow_both_ways_within_the_windows(served: Served) -> None:
    client = await H2Client.connect(served.port, window=16_384)  # the server must wait for our updates
    try:
        upload = bytes(range(256)) * 12_000  # 3 MB: beyond our initial stream window
        answer = await client.request("POST", "/test/echo", upload)
        assert bytes(answer.body) == hashlib.sha256(upload).hexdigest().encode() + b" 3072000"
        answer = await client.request("GET", "/test/big?n=5000000")
        assert answer.status == 200
        assert bytes(answer.body) == bytes(i % 251 for i in range(5_000_000))
    finally:
        await client.close()


async def test_a_reset_stream_cancels_its_handler(served: Served) -> None:
    client = await H2Client.connect(served.port)
    try:
        stream_id, _answer = client.start("GET", "/test/slow")
        await asyncio.sleep(0.05)
        assert not served.cancelled.is_set()
        client.reset(stream_id)
        await asyncio.wait_for(served.cancelled.wait(), 5)
        # the connection goes on serving
        assert (await client.request("GET", "/healthz")).status == 200
    finally:
        await client.close()


async def test_shutdown_says_goaway_and_answers_the_open_streams(served: Served) -> None:
    client = await H2Client.connect(served.port)
    _stream_id, answer = client.start("GET", "/test/slow")
    await asyncio.sleep(0.05)
    stopping = asyncio.create_task(served.site.stop())
    await asyncio.sleep(0.05)
    served.release.set()
    assert answer.done is not None
    await asyncio.wait_for(answer.done, 5)
    await stopping
    assert answer.status == 200 and bytes(answer.body) == b"released"
    await asyncio.wait_for(client.closed, 5)
    assert client.goaway_code == 0  # NO_ERROR
    await client.close()


async def test_http1_clients_still_get_http1(served: Served) -> None:
    url = f"https://127.0.0.1:{served.port}/healthz"
    async with aiohttp.ClientSession() as session, session.get(url, ssl=_insecure()) as response:
        assert response.status == 200 and response.version == aiohttp.HttpVersion11


BAD_REQUESTS = {
    "space-in-path": [(b":method", b"GET"), (b":path", b"/a b")],
    "newline-in-path": [(b":method", b"GET"), (b":path", b"/a\r\nX: y")],
    "no-path": [(b":method", b"GET")],
    "bad-method": [(b":method", b"G T"), (b":path", b"/")],
    "newline-in-value": [(b":method", b"GET"), (b":path", b"/"), (b"x-a", b"1\r\nx-b: 2")],
    "colon-in-name": [(b":method", b"GET"), (b":path", b"/"), (b"x:a", b"1")],
    "newline-in-authority": [(b":method", b"GET"), (b":path", b"/"), (b":authority", b"h\n")],
}


@pytest.mark.parametrize("case", BAD_REQUESTS, ids=list(BAD_REQUESTS))
def test_a_request_no_request_line_can_carry_is_refused(case: str) -> None:
    with pytest.raises(BadRequest):
        http1_request(BAD_REQUESTS[case], b"")


def test_a_request_becomes_its_http1_form() -> None:
    headers = [
        (b":method", b"POST"),
        (b":scheme", b"https"),
        (b":authority", b"127.0.0.1:443"),
        (b":path", b"/filter?x=1"),
        (b"content-type", b"application/json"),
        (b"content-length", b"999"),  # ours is the body's length
        (b"expect", b"100-continue"),  # would make aiohttp write an interim answer
        (b"user-agent", b"kube-scheduler/v1.36.3"),
    ]
    raw, to_head = http1_request(headers, b"{}")
    assert not to_head
    assert raw == (
        b"POST /filter?x=1 HTTP/1.1\r\nHost: 127.0.0.1:443\r\ncontent-type: application/json\r\n"
        b"user-agent: kube-scheduler/v1.36.3\r\nContent-Length: 2\r\n\r\n{}"
    )


async def test_plain_routes_are_answered_without_aiohttps_machinery(served: Served) -> None:
    server = served.runner.server
    assert server is not None
    client = await H2Client.connect(served.port)
    try:
        for path in ("/filter", "/bind", "/webhook", "/webhook?timeout=10s"):
            assert (await client.request("POST", path, b"{}")).status == 200
        assert server.connections == []  # no in-memory HTTP/1.1 connection was needed
        assert (await client.request("POST", "/filter/", b"{}")).status == 307
        assert len(server.connections) == 1  # not a plain route's path: the general path
    finally:
        await client.close()


async def test_http2_is_offered_after_a_certificate_reload_too(tmp_path: Path) -> None:
    ca = trustme.CA()

    def write_pair(name: str) -> None:
        leaf = ca.issue_cert("127.0.0.1", common_name=name)
        leaf.private_key_pem.write_to_path(str(tmp_path / "tls.key"))
        leaf.cert_chain_pems[0].write_to_path(str(tmp_path / "tls.crt"))

    write_pair("first")
    cert = ReloadingCertificate(str(tmp_path / "tls.crt"), str(tmp_path / "tls.key"))
    runner = web.AppRunner(_test_app([]))
    await runner.setup()
    site = Http2Site(runner, "127.0.0.1", 0, ssl_context=cert.context)
    await site.start()
    try:
        write_pair("second")
        assert cert.reload_if_changed()  # new handshakes now switch to the reloaded context
        client = await H2Client.connect(site.port)  # asserts that h2 was chosen
        try:
            der = client.writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
            subject = x509.load_der_x509_certificate(der).subject
            assert subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "second"
            assert (await client.request("GET", "/healthz")).status == 200
        finally:
            await client.close()
    finally:
        await runner.cleanup()
