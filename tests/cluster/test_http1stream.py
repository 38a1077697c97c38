"""A streamed answer read as lines (cluster/http1stream.py): framing, ends, failures, limits."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.cluster.test_http1 import chunked, tls_pool
from vgpu_scheduler.cluster import http1stream
from vgpu_scheduler.cluster.http1 import Http1Pool, HttpProtocolError
from vgpu_scheduler.cluster.http1stream import ChunkedBody, LineStream, open_line_stream


class FakeTransport(asyncio.Transport):
    """Records what the stream does to its connection."""

    def __init__(self) -> None:
        super().__init__()
        self.written = b""
        self.closed = False
        self.paused = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += bytes(data)

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False


def connected(read_timeout: float | None = None) -> tuple[LineStream, FakeTransport]:
    stream = LineStream(b"GET /x HTTP/1.1\r\n\r\n", read_timeout=read_timeout)
    transport = FakeTransport()
    stream.connection_made(transport)
    return stream, transport


def feed(stream: LineStream, wire: bytes, reads: list[int]) -> None:
    at = 0
    for size in [*reads, len(wire)]:  # reads of any size; the last takes the rest
        if at >= len(wire):
            break
        stream.data_received(wire[at : at + size])
        at += size


def taken(stream: LineStream) -> list[bytes]:
    lines = stream._lines
    stream._lines = []
    return lines


HEAD_200 = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"

lines_strategy = st.lists(st.binary(max_size=60).map(lambda b: b.replace(b"\n", b"")), max_size=12)


@given(lines_strategy, st.lists(st.integers(0, 900), max_size=8), st.lists(st.integers(1, 500), max_size=12))
@settings(max_examples=300)
async def test_any_chunking_and_read_split_gives_the_lines_in_order(
    lines: list[bytes], cuts: list[int], reads: list[int]
) -> None:
    body = b"".join(line + b"\n" for line in lines)
    stream, transport = connected()
    feed(stream, HEAD_200 + chunked(body, cuts), reads)
    assert stream._head.done() and stream.answer is None
    assert taken(stream) == [line for line in lines if line.strip()]
    assert stream._ended and transport.closed and stream._failure is None


@given(st.binary(max_size=600), st.lists(st.integers(1, 200), max_size=6))
@settings(max_examples=400)
async def test_hostile_bytes_fail_the_stream_with_a_protocol_error_only(
    junk: bytes, reads: list[int]
) -> None:
    for wire in (junk, HEAD_200 + junk):
        stream, _ = connected()
        feed(stream, wire, reads)  # raises nothing: a failure is kept for the reader
        assert stream._failure is None or isinstance(stream._failure, HttpProtocolError)


def test_chunked_body_keeps_an_incomplete_chunk_for_later() -> None:
    body, buf = ChunkedBody(), bytearray(b"5\r\nab")
    assert body.take(buf) == b"" and buf == b"5\r\nab"
    buf += b"cde\r\n3\r\nxyz\r\n0\r\n"
    assert body.take(buf) == b"abcdexyz" and not body.ended and buf == b"0\r\n"
    buf += b"\r\n"
    assert body.take(buf) == b"" and body.ended and buf == b""


async def test_a_last_line_without_newline_and_a_length_framed_body() -> None:
    stream, _ = connected()
    stream.data_received(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{\"a\":1}\n{")
    assert taken(stream) == [b'{"a":1}'] and not stream._ended
    stream.data_received(b"}")
    assert taken(stream) == [b"{}"] and stream._ended


async def test_a_body_framed_by_the_connection_end_ends_with_it() -> None:
    stream, _ = connected()
    stream.data_received(b"HTTP/1.0 200 OK\r\n\r\nline one\nline")
    stream.connection_lost(None)
    assert await stream.next_lines() == [b"line one", b"line"]
    assert await stream.next_lines() == []


async def test_a_chunked_body_cut_short_is_a_connection_error() -> None:
    stream, _ = connected()
    stream.data_received(HEAD_200 + b"4\r\nabc\n\r\n")
    stream.connection_lost(None)
    assert await stream.next_lines() == [b"abc"]
    with pytest.raises(ConnectionResetError):
        await stream.next_lines()


@pytest.mark.parametrize(
    "wire",
    [
        pytest.param(b"HTTP/1.1 410 Gone\r\nContent-Length: 6\r\n\r\n{\"x\":1}", id="content-length"),
        pytest.param(b"HTTP/1.1 410 Gone\r\nTransfer-Encoding: chunked\r\n\r\n6\r\n{\"x\":1\r\n0\r\n\r\n",
                     id="chunked"),
    ],
)
async def test_an_error_status_is_read_whole(wire: bytes) -> None:
    stream, transport = connected()
    stream.data_received(wire)
    await stream.head_read()
    assert stream.answer is not None and stream.answer.status == 410 and stream.answer.body == b'{"x":1'
    assert transport.closed and await stream.next_lines() == []


async def test_an_error_status_framed_by_the_connection_end() -> None:
    stream, _ = connected()
    stream.data_received(b"HTTP/1.0 503 Service Unavailable\r\n\r\nbusy")
    assert not stream._head.done()
    stream.connection_lost(None)
    await stream.head_read()
    assert stream.answer is not None and (stream.answer.status, stream.answer.body) == (503, b"busy")


async def test_a_reader_behind_pauses_reading_until_it_takes_the_lines(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(http1stream, "MAX_QUEUED_LINES", 3)
    stream, transport = connected()
    stream.data_received(HEAD_200 + chunked(b"a\nb\n", []).removesuffix(b"0\r\n\r\n"))
    assert not transport.paused
    stream.data_received(b"2\r\nc\n\r\n")
    assert transport.paused
    assert await stream.next_lines() == [b"a", b"b", b"c"]
    assert not transport.paused


async def test_a_silent_connection_times_out_and_data_keeps_it_alive() -> None:
    stream, transport = connected(read_timeout=0.2)
    stream.data_received(HEAD_200)
    for _ in range(3):
        await asyncio.sleep(0.1)
        stream.data_received(b"2\r\nx\n\r\n")
    assert await stream.next_lines() == [b"x", b"x", b"x"]
    with pytest.raises(TimeoutError):
        await stream.next_lines()
    assert transport.closed


@pytest.fixture
async def tls_watch_server() -> AsyncIterator[Http1Pool]:
    """A pool to an HTTPS server streaming lines as a watch would."""

    async def watch(request: web.Request) -> web.StreamResponse:
        if request.query.get("fail"):
            return web.json_response({"kind": "Status", "code": 410}, status=410)
        answer = web.StreamResponse()
        answer.enable_chunked_encoding()
        await answer.prepare(request)
        for n in range(3):
            await answer.write(b'{"n":%d}\n' % n)
        await asyncio.sleep(3600)
        return answer

    app = web.Application()
    app.router.add_get("/watch", watch)
    async with tls_pool(app) as pool:
        yield pool


async def test_a_stream_over_tls_and_its_close(tls_watch_server: Http1Pool) -> None:
    pool = tls_watch_server
    stream = await open_line_stream(pool, "/watch", [], timeout=5, read_timeout=None)
    got: list[bytes] = []
    while len(got) < 3:
        got += await stream.next_lines()
    assert got == [b'{"n":0}', b'{"n":1}', b'{"n":2}']
    stream.close()
    assert stream._transport is not None and stream._transport.is_closing()
    failed = await open_line_stream(pool, "/watch?fail=1", [], timeout=5, read_timeout=None)
    assert failed.answer is not None and failed.answer.status == 410


async def test_no_head_within_the_timeout_closes_the_connection() -> None:
    listener = socket.create_server(("127.0.0.1", 0))  # the kernel accepts; nobody answers
    port = listener.getsockname()[1]
    try:
        with pytest.raises(TimeoutError):
            await open_line_stream(Http1Pool("127.0.0.1", port, ssl_context=None), "/", [], timeout=0.2,
                                   read_timeout=None)
    finally:
        listener.close()
