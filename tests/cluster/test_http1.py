"""The lean HTTP/1.1 client (cluster/http1.py): framing, keep-alive, failures, hostile answers."""

from __future__ import annotations

import asyncio
import contextlib
import socketserver
import ssl
import threading
from collections.abc import AsyncIterator, Callable

import pytest
import trustme
from aiohttp import web
from hypothesis import given, settings
from hypothesis import strategies as st

from vgpu_scheduler.cluster.http1 import (
    CHUNKED,
    UNTIL_CLOSE,
    Dechunker,
    Http1Pool,
    HttpProtocolError,
    _Connection,
    parse_head,
)


def chunked(body: bytes, cuts: list[int]) -> bytes:
    """`body` as a chunked encoding, split at `cuts`."""
    out, last = bytearray(), 0
    for cut in [*sorted({c for c in cuts if 0 < c < len(body)}), len(body)]:
        if cut > last:
            out += f"{cut - last:x}\r\n".encode() + body[last:cut] + b"\r\n"
        last = cut
    return bytes(out + b"0\r\n\r\n")


@given(st.binary(max_size=3000), st.lists(st.integers(0, 3000), max_size=8), st.lists(st.integers(1, 4000)))
@settings(max_examples=200)
def test_dechunker_reads_any_split_of_any_body(body: bytes, cuts: list[int], reads: list[int]) -> None:
    wire = chunked(body, cuts)
    buf, got, at = bytearray(), None, 0
    decoder = Dechunker(0)
    for size in [*reads, len(wire)]:  # arrives in reads of any size; the last takes the rest
        buf += wire[at : at + size]
        at += size
        got = decoder.feed(buf)
        if got is not None:
            break
    assert got == body


@given(st.binary(max_size=400))
@settings(max_examples=500)
def test_hostile_heads_and_chunks_raise_only_protocol_errors(junk: bytes) -> None:
    for parse in (lambda: parse_head(junk), lambda: Dechunker(0).feed(bytearray(junk))):
        with contextlib.suppress(HttpProtocolError):
            parse()


@pytest.mark.parametrize(
    "head",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: -1",
        b"HTTP/1.1 200 OK\r\nContent-Length: 1e3",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip",
        b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 3",
        b"SSH-2.0-OpenSSH_9.2",
        b"HTTP/1.1 2x0 OK\r\nContent-Length: 0",
        b"HTTP/1.1 200 OK\r\nno colon here",
    ],
)
def test_unreadable_heads(head: bytes) -> None:
    with pytest.raises(HttpProtocolError):
        parse_head(head)


def _framing(head: bytes, *, to_head: bool = False) -> tuple[int, int, bool]:
    parsed = parse_head(head, to_head=to_head)
    return parsed.status, parsed.length, parsed.keep_alive


def test_heads() -> None:
    created = parse_head(b"HTTP/1.1 201 Created\r\nContent-Length: 12\r\nX-A:  b ")
    assert created == (201, [(b"content-length", b"12"), (b"x-a", b"b")], 12, True)
    chunked_closing = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close"
    assert _framing(chunked_closing) == (200, CHUNKED, False)
    assert _framing(b"HTTP/1.1 204 No Content") == (204, 0, True)
    assert _framing(b"HTTP/1.0 200 OK\r\nContent-Length: 0")[2] is False  # 1.0: no keep-alive
    assert _framing(b"HTTP/1.1 200 OK\r\nContent-Length: 5", to_head=True) == (200, 0, True)
    assert _framing(b"HTTP/1.1 200 OK") == (200, UNTIL_CLOSE, False)  # the body ends with the connection


class _Sink(asyncio.Transport):
    def write(self, data: object) -> None:
        pass

    def close(self) -> None:
        pass

    def is_closing(self) -> bool:
        return False


async def test_the_client_refuses_an_answer_framed_by_the_connections_end() -> None:
    connection = _Connection()
    connection.connection_made(_Sink())
    answer = connection.send(b"GET / HTTP/1.1\r\n\r\n")
    connection.data_received(b"HTTP/1.1 200 OK\r\n\r\nsome body")
    with pytest.raises(HttpProtocolError, match="framing"):
        await answer


@pytest.mark.parametrize(
    "wire",
    [b"zz\r\n", b"5\r\nabcdefg\r\n", b"-1\r\n", b"0x5\r\nabcde\r\n", b"1_0\r\n", b"f" * 2000],
    ids=["not-hex", "chunk-longer-than-said", "negative", "0x-prefix", "underscore", "endless-size-line"],
)
def test_bad_chunks(wire: bytes) -> None:
    with pytest.raises(HttpProtocolError):
        Dechunker(0).feed(bytearray(wire))


@pytest.fixture
async def app_server() -> AsyncIterator[tuple[str, int, list[str]]]:
    """An aiohttp server: fixed bodies (Content-Length), streamed bodies (chunked), close."""
    seen: list[str] = []

    async def fixed(request: web.Request) -> web.Response:
        seen.append(f"{request.method} {request.path_qs} {await request.text()}")
        return web.json_response({"kind": "Pod", "n": len(seen)})

    async def streamed(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        await resp.prepare(request)
        for part in (b'{"items":[', b'"a",' * 5000, b'"b"]}'):
            await resp.write(part)
        await resp.write_eof()
        return resp

    async def closing(request: web.Request) -> web.Response:
        return web.Response(body=b"{}", headers={"Connection": "close"}, content_type="application/json")

    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(5)
        return web.Response(body=b"{}")

    async def empty(request: web.Request) -> web.Response:
        return web.Response(status=204)

    app = web.Application()
    app.router.add_route("*", "/fixed", fixed)
    app.router.add_get("/streamed", streamed)
    app.router.add_get("/closing", closing)
    app.router.add_get("/slow", slow)
    app.router.add_delete("/empty", empty)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield "127.0.0.1", port, seen
    await runner.cleanup()


async def test_keep_alive_reuses_one_connection(app_server: tuple[str, int, list[str]]) -> None:
    host, port, seen = app_server
    pool = Http1Pool(host, port, ssl_context=None)
    for i in range(3):
        headers = [("Content-Type", "application/json")]
        got = await pool.request("PATCH", f"/fixed?i={i}", headers, b"{}", timeout=5)
        assert got.status == 200 and got.keep_alive
        assert b'"n": %d' % (i + 1) in got.body
    assert pool.opened == 1
    assert seen == ["PATCH /fixed?i=0 {}", "PATCH /fixed?i=1 {}", "PATCH /fixed?i=2 {}"]
    streamed = await pool.request("GET", "/streamed", [], None, timeout=5)
    assert streamed.body == b'{"items":[' + b'"a",' * 5000 + b'"b"]}'
    empty = await pool.request("DELETE", "/empty", [], None, timeout=5)
    assert (empty.status, empty.body) == (204, b"")
    assert pool.opened == 1
    await pool.close()


async def test_before_send_runs_on_a_ready_connection_and_can_stop_the_request(
    app_server: tuple[str, int, list[str]],
) -> None:
    host, port, seen = app_server
    pool = Http1Pool(host, port, ssl_context=None)
    opened_at_check: list[int] = []

    def refuse() -> None:
        opened_at_check.append(pool.opened)
        raise PermissionError("deposed")

    with pytest.raises(PermissionError):
        await pool.request("PATCH", "/fixed", [], b"{}", timeout=5, before_send=refuse)
    assert opened_at_check == [1] and seen == []  # checked once connected; nothing sent
    await pool.request("PATCH", "/fixed", [], b"{}", timeout=5, before_send=lambda: None)
    assert seen == ["PATCH /fixed {}"] and pool.opened == 1  # the unused connection was kept
    await pool.close()


@pytest.mark.parametrize(
    ("target", "headers"),
    [
        ("/x", [("Authorization", "Bearer token\n")]),
        ("/x", [("X-Evil\r\nHost", "a")]),
        ("/x\r\nGET /y", []),
    ],
    ids=["newline-in-a-value", "crlf-in-a-name", "crlf-in-the-target"],
)
async def test_a_line_break_inside_a_line_is_refused_before_anything_is_sent(
    app_server: tuple[str, int, list[str]], target: str, headers: list[tuple[str, str]]
) -> None:
    host, port, seen = app_server
    pool = Http1Pool(host, port, ssl_context=None)
    with pytest.raises(HttpProtocolError, match="CR or LF"):
        await pool.request("GET", target, headers, None, timeout=5)
    assert seen == [] and pool.opened == 0
    await pool.close()


async def test_concurrent_requests_get_their_own_answers(app_server: tuple[str, int, list[str]]) -> None:
    host, port, seen = app_server
    pool = Http1Pool(host, port, ssl_context=None, limit=4)
    answers = await asyncio.gather(
        *(pool.request("POST", "/fixed", [], str(i).encode(), timeout=5) for i in range(20))
    )
    assert sorted(seen) == sorted(f"POST /fixed {i}" for i in range(20))
    assert all(a.status == 200 for a in answers)
    assert pool.opened <= 4  # the limit bounds the connections; idle ones are reused
    await pool.close()


async def test_connection_close_header(app_server: tuple[str, int, list[str]]) -> None:
    host, port, _ = app_server
    pool = Http1Pool(host, port, ssl_context=None)
    got = await pool.request("GET", "/closing", [], None, timeout=5)
    assert not got.keep_alive
    await pool.request("GET", "/fixed", [], None, timeout=5)
    assert pool.opened == 2  # the closed one was not reused
    await pool.close()


async def test_timeout_closes_the_connection(app_server: tuple[str, int, list[str]]) -> None:
    host, port, _ = app_server
    pool = Http1Pool(host, port, ssl_context=None)
    with pytest.raises(TimeoutError):
        await pool.request("GET", "/slow", [], None, timeout=0.2)
    got = await pool.request("GET", "/fixed", [], None, timeout=5)  # a late answer never leaks into this one
    assert b'"kind": "Pod"' in got.body
    assert pool.opened == 2
    await pool.close()


async def test_cancelled_request_is_not_reused(app_server: tuple[str, int, list[str]]) -> None:
    host, port, _ = app_server
    pool = Http1Pool(host, port, ssl_context=None)
    task = asyncio.create_task(pool.request("GET", "/slow", [], None, timeout=10))
    await asyncio.sleep(0.1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    got = await pool.request("GET", "/fixed", [], None, timeout=5)
    assert got.status == 200 and pool.opened == 2
    await pool.close()


class RawServer:
    """A TCP server answering each request with `answer(request)` (None: close at once)."""

    def __init__(self, answer: Callable[[bytes], bytes | None]) -> None:
        self.answer = answer
        self.close_after_answer = False
        self.handlers: list[asyncio.Task[None]] = []

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.handlers.append(task)
        try:
            while request := await reader.read(65536):
                out = self.answer(request)
                if out is None:
                    break
                writer.write(out)
                await writer.drain()
                if self.close_after_answer:
                    break
        finally:
            writer.close()
            await writer.wait_closed()

    async def stop(self) -> None:
        self.server.close()
        await asyncio.wait_for(asyncio.gather(*self.handlers, return_exceptions=True), 5)
        await self.server.wait_closed()


@pytest.mark.parametrize(
    ("answer", "error"),
    [
        (lambda _: None, ConnectionResetError),  # closed before any answer
        (lambda _: b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", None),  # then EOF (see below)
        (lambda _: b"garbage\r\n\r\n", HttpProtocolError),
        (lambda _: b"X" * 70000, HttpProtocolError),  # a head that never ends
    ],
    ids=["closed-without-answer", "body-shorter-than-length", "not-http", "endless-head"],
)
async def test_broken_answers(answer: Callable[[bytes], bytes | None], error: type[Exception] | None) -> None:
    server = RawServer(answer)
    pool = Http1Pool("127.0.0.1", await server.start(), ssl_context=None)
    expected: type[Exception] = error or TimeoutError  # a short body with the socket left open
    with pytest.raises(expected):
        await pool.request("GET", "/", [], None, timeout=0.5)
    await server.stop()


async def test_idle_connection_closed_by_server() -> None:
    # keep-alive by HTTP/1.1's default, and the server closes each connection once it answered
    server = RawServer(lambda request: b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
    server.close_after_answer = True
    pool = Http1Pool("127.0.0.1", await server.start(), ssl_context=None)
    for _ in range(3):
        assert (await pool.request("GET", "/", [], None, timeout=5)).body == b"{}"
        await asyncio.sleep(0.05)  # the close arrives while the connection is idle
    assert pool.opened == 3  # a closed idle connection is never handed out
    await pool.close()
    await server.stop()


async def test_bytes_beyond_the_answer_end_the_connection() -> None:
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"
    server = RawServer(lambda request: answer + answer)  # a second answer nobody asked for
    pool = Http1Pool("127.0.0.1", await server.start(), ssl_context=None)
    for _ in range(2):
        got = await pool.request("GET", "/", [], None, timeout=5)
        assert got.body == b"{}" and not got.keep_alive
    assert pool.opened == 2
    await pool.close()
    await server.stop()


def test_a_pool_used_again_from_another_loop() -> None:
    class Answer(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            while self.request.recv(65536):
                self.request.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")

    with socketserver.ThreadingTCPServer(("127.0.0.1", 0), Answer) as server:
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        pool = Http1Pool("127.0.0.1", server.server_address[1], ssl_context=None, limit=1)

        async def two_at_once() -> list[bytes]:
            answers = await asyncio.gather(*(pool.request("GET", "/", [], None, timeout=5) for _ in range(2)))
            await pool.close()
            return [a.body for a in answers]

        # limit=1: the second request waits on the limit, in each loop its own
        assert asyncio.run(two_at_once()) == [b"{}", b"{}"]
        assert asyncio.run(two_at_once()) == [b"{}", b"{}"]
        server.shutdown()


async def test_host_header_and_head() -> None:
    captured: list[bytes] = []

    def answer(request: bytes) -> bytes:
        captured.append(request)
        return b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"

    server = RawServer(answer)
    port = await server.start()
    pool = Http1Pool("127.0.0.1", port, ssl_context=None)
    await pool.request("POST", "/api/v1/x", [("Authorization", "Bearer t")], b'{"a":1}', timeout=5)
    await pool.close()
    assert captured[0] == (
        f"POST /api/v1/x HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer t\r\n"
        f"Content-Length: 7\r\n\r\n"
    ).encode() + b'{"a":1}'
    await server.stop()


@contextlib.asynccontextmanager
async def tls_pool(app: web.Application) -> AsyncIterator[Http1Pool]:
    """A pool to `app` served over TLS on loopback (a fresh CA trusted by the pool only)."""
    ca = trustme.CA()
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_ctx)
    client_ctx = ssl.create_default_context()
    ca.configure_trust(client_ctx)
    runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_ctx)
    await site.start()
    pool = Http1Pool("127.0.0.1", runner.addresses[0][1], ssl_context=client_ctx)
    try:
        yield pool
    finally:
        await pool.close()
        await runner.cleanup()


async def test_over_tls() -> None:
    async def fixed(request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_get("/x", fixed)
    async with tls_pool(app) as pool:
        for _ in range(2):
            assert (await pool.request("GET", "/x", [], None, timeout=5)).body == b'{"ok": true}'
        assert pool.opened == 1
