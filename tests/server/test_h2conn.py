"""The lean HTTP/2 connection (server/h2conn.py) fed directly, frame by frame: hostile input gets a
GOAWAY or a RST_STREAM and never an exception; the protocol's rules are kept."""

from __future__ import annotations

import asyncio
import struct
from typing import Any

import hpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vgpu_scheduler.server import h2conn
from vgpu_scheduler.server.h2conn import PREFACE, Headers, Http2Server, frame


class _Transport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.out = bytearray()
        self.closed = False

    def write(self, data: Any) -> None:
        self.out += data

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed


def _frames(data: bytes) -> list[tuple[int, int, int, bytes]]:
    """(type, flags, stream, payload) of every frame the server wrote."""
    found = []
    pos = 0
    while pos < len(data):
        size = int.from_bytes(data[pos : pos + 3], "big")
        kind, flags = data[pos + 3], data[pos + 4]
        stream_id = int.from_bytes(data[pos + 5 : pos + 9], "big") & 0x7FFFFFFF
        found.append((kind, flags, stream_id, bytes(data[pos + 9 : pos + 9 + size])))
        pos += 9 + size
    assert pos == len(data), "the server wrote a partial frame"
    return found


async def _echo(headers: Headers, body: bytes) -> tuple[int, Headers, bytes]:
    path = dict(headers).get(b":path", b"")
    return 200, [(b"content-type", b"text/plain")], path + b" " + body


class _Harness:
    def __init__(self) -> None:
        self.transport = _Transport()
        self.server = Http2Server(_echo)
        self.server.connection_made(self.transport)
        self.encoder = hpack.Encoder()

    def feed(self, data: bytes) -> None:
        self.server.data_received(data)

    def headers(self, stream_id: int, path: bytes, *, end_stream: bool = True) -> bytes:
        block = self.encoder.encode([(b":method", b"POST"), (b":path", path), (b":scheme", b"https")])
        return frame(
            h2conn.HEADERS, h2conn.END_HEADERS | (h2conn.END_STREAM if end_stream else 0), stream_id, block
        )

    async def settle(self) -> list[tuple[int, int, int, bytes]]:
        for _ in range(5):
            await asyncio.sleep(0)
        return _frames(bytes(self.transport.out))


async def test_a_request_is_answered_and_pings_and_settings_are_acknowledged() -> None:
    h = _Harness()
    h.feed(PREFACE + frame(h2conn.SETTINGS, 0, 0) + frame(h2conn.PING, 0, 0, b"12345678"))
    h.feed(h.headers(1, b"/a", end_stream=False))
    h.feed(frame(h2conn.DATA, h2conn.END_STREAM, 1, b"body"))
    frames = await h.settle()
    kinds = [(k, f, s) for k, f, s, _ in frames]
    assert (h2conn.SETTINGS, h2conn.ACK, 0) in kinds
    assert (h2conn.PING, h2conn.ACK, 0, b"12345678") in [(k, f, s, p) for k, f, s, p in frames]
    data = [p for k, _f, s, p in frames if k == h2conn.DATA and s == 1]
    assert data == [b"/a body"]
    decoded = hpack.Decoder().decode(
        next(p for k, _f, s, p in frames if k == h2conn.HEADERS and s == 1), raw=True
    )
    assert decoded[0] == (b":status", b"200")


async def test_a_bad_preface_ends_the_connection() -> None:
    h = _Harness()
    h.feed(b"GET / HTTP/1.1\r\n\r\n")
    frames = await h.settle()
    assert frames[-1][0] == h2conn.GOAWAY and h.transport.closed


@pytest.mark.parametrize(
    "case",
    ["even-stream", "data-on-idle-stream", "oversized-frame", "zero-window-increment", "push-promise"],
)
async def test_protocol_errors_end_the_connection_with_goaway(case: str) -> None:
    h = _Harness()
    h.feed(PREFACE + frame(h2conn.SETTINGS, 0, 0))
    bad = {
        "even-stream": h.headers(2, b"/x"),
        "data-on-idle-stream": frame(h2conn.DATA, 0, 5, b"x"),
        "oversized-frame": frame(h2conn.DATA, 0, 1, b"x" * 20_000),
        "zero-window-increment": frame(h2conn.WINDOW_UPDATE, 0, 0, struct.pack(">L", 0)),
        "push-promise": frame(h2conn.PUSH_PROMISE, 0, 1, b"\0\0\0\2"),
    }[case]
    h.feed(bad)
    frames = await h.settle()
    assert frames[-1][0] == h2conn.GOAWAY and h.transport.closed
    assert struct.unpack(">L", frames[-1][3][4:8])[0] != 0


async def test_streams_beyond_the_limit_are_refused_not_queued() -> None:
    h = _Harness()
    h.feed(PREFACE + frame(h2conn.SETTINGS, 0, 0))
    for n in range(h2conn.MAX_STREAMS + 1):
        h.feed(h.headers(2 * n + 1, b"/x", end_stream=False))
    frames = await h.settle()
    resets = [(s, p) for k, _f, s, p in frames if k == h2conn.RST_STREAM]
    assert resets == [(2 * h2conn.MAX_STREAMS + 1, struct.pack(">L", h2conn.REFUSED_STREAM))]


async def test_an_answer_waits_for_the_clients_window() -> None:
    h = _Harness()

    async def big(_headers: Headers, _body: bytes) -> tuple[int, Headers, bytes]:
        return 200, [], b"x" * 100

    h.server = Http2Server(big)
    h.transport = _Transport()
    h.server.connection_made(h.transport)
    settings_10 = struct.pack(">HL", h2conn.SETTINGS_INITIAL_WINDOW_SIZE, 10)
    h.feed(PREFACE + frame(h2conn.SETTINGS, 0, 0, settings_10) + h.headers(1, b"/"))
    frames = await h.settle()
    assert b"".join(p for k, _f, s, p in frames if k == h2conn.DATA) == b"x" * 10
    h.feed(frame(h2conn.WINDOW_UPDATE, 0, 1, struct.pack(">L", 1000)))
    frames = await h.settle()
    data = [(f, p) for k, f, s, p in frames if k == h2conn.DATA]
    assert b"".join(p for _f, p in data) == b"x" * 100 and data[-1][0] & h2conn.END_STREAM


# --- fuzz ---------------------------------------------------------------------------------------

_KINDS = st.integers(0, 11)
_FRAME = st.tuples(
    _KINDS, st.integers(0, 255), st.sampled_from([0, 1, 2, 3, 5, 7, 2**31 - 1]), st.binary(max_size=40)
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.one_of(
            _FRAME, st.tuples(st.just(-1), st.integers(0, 1), st.sampled_from([1, 3, 5]), st.just(b""))
        ),
        max_size=25,
    ),
    st.integers(1, 64),
)
def test_hostile_frames_never_raise(frames: list[tuple[int, int, int, bytes]], split: int) -> None:
    async def run() -> None:
        h = _Harness()
        errors: list[Any] = []
        asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: errors.append(ctx))
        raw = bytearray(PREFACE)
        for kind, flags, stream_id, payload in frames:
            if kind == -1:  # a well-formed request, so hostile frames meet open streams too
                raw += h.headers(stream_id, b"/p", end_stream=bool(flags))
            else:
                raw += frame(kind, flags, stream_id, payload)
        for start in range(0, len(raw), split):
            h.feed(bytes(raw[start : start + split]))
        await h.settle()
        _frames(bytes(h.transport.out))  # whole frames only
        h.server.connection_lost(None)
        await asyncio.sleep(0)
        assert not errors

    asyncio.run(run())


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_hostile_bytes_after_the_preface_never_raise(data: bytes) -> None:
    async def run() -> None:
        h = _Harness()
        h.feed(PREFACE + data)
        await h.settle()
        _frames(bytes(h.transport.out))
        h.server.connection_lost(None)

    asyncio.run(run())


async def test_continuation_and_padding_are_read() -> None:
    h = _Harness()
    block = h.encoder.encode([(b":method", b"POST"), (b":path", b"/split"), (b":scheme", b"https")])
    padded_headers = bytes([3]) + block[:4] + b"\0\0\0"
    h.feed(PREFACE + frame(h2conn.SETTINGS, 0, 0))
    h.feed(frame(h2conn.HEADERS, h2conn.PADDED, 1, padded_headers))
    h.feed(frame(h2conn.CONTINUATION, h2conn.END_HEADERS, 1, block[4:]))
    h.feed(frame(h2conn.DATA, h2conn.PADDED | h2conn.END_STREAM, 1, bytes([2]) + b"xy" + b"\0\0"))
    frames = await h.settle()
    assert [p for k, _f, s, p in frames if k == h2conn.DATA and s == 1] == [b"/split xy"]


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=1, max_size=60))
def test_a_header_block_that_does_not_decode_ends_the_connection_cleanly(block: bytes) -> None:
    async def run() -> None:
        h = _Harness()
        h.feed(PREFACE + frame(h2conn.HEADERS, h2conn.END_HEADERS | h2conn.END_STREAM, 1, block))
        frames = await h.settle()
        kinds = {k for k, _f, _s, _p in frames}
        # either decoded (answered, possibly 400 upstream) or a GOAWAY: never an exception
        assert h2conn.GOAWAY in kinds or h2conn.HEADERS in kinds or h2conn.RST_STREAM in kinds
        h.server.connection_lost(None)

    asyncio.run(run())


def test_the_static_names_are_hpacks() -> None:
    from hpack.table import HeaderTable

    for name, index in h2conn._STATIC_NAMES.items():
        assert HeaderTable.STATIC_TABLE[index - 1][0] == name
    assert {n for n, _v in HeaderTable.STATIC_TABLE} == set(h2conn._STATIC_NAMES)


_NAMES = st.one_of(
    st.sampled_from([b":status", b"content-type", b"content-length", b"date", b"www-authenticate"]),
    st.from_regex(rb"\A[a-z0-9-]{1,300}\Z"),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(_NAMES, st.binary(max_size=400)), max_size=12), st.booleans())
def test_our_header_blocks_decode_to_what_was_encoded(headers: Headers, size_update: bool) -> None:
    block = h2conn.encode_headers(headers)
    if size_update:
        block = h2conn.TABLE_SIZE_ZERO + block
    decoder = hpack.Decoder()
    assert [(bytes(n), bytes(v)) for n, v in decoder.decode(block, raw=True)] == headers
    assert len(decoder.header_table.dynamic_entries) == 0  # nothing was indexed


async def test_bodies_beyond_the_connections_budget_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(h2conn, "MAX_KEPT_PER_CONNECTION", 100_000)
    h = _Harness()
    h.feed(PREFACE + frame(h2conn.SETTINGS, 0, 0))
    chunk = b"x" * 10_000
    for stream_id in (1, 3, 5):
        h.feed(h.headers(stream_id, b"/slow", end_stream=False))
        for _ in range(4):  # 40 KB each, never ended: the budget fills on the third stream
            h.feed(frame(h2conn.DATA, 0, stream_id, chunk))
    frames = await h.settle()
    resets = [(s, p) for k, _f, s, p in frames if k == h2conn.RST_STREAM]
    assert {s for s, _p in resets} == {5}
    assert resets[0] == (5, struct.pack(">L", h2conn.ENHANCE_YOUR_CALM))  # then STREAM_CLOSED
    assert h.server._kept == 80_000
    h.feed(frame(h2conn.RST_STREAM, 0, 1, struct.pack(">L", h2conn.CANCEL)))
    assert h.server._kept == 40_000  # a reset stream's body is released
    h.feed(h.headers(7, b"/after", end_stream=False) + frame(h2conn.DATA, 0, 7, chunk) * 3)
    h.feed(frame(h2conn.DATA, h2conn.END_STREAM, 7, chunk))
    frames = await h.settle()
    assert any(k == h2conn.DATA and s == 7 for k, _f, s, _p in frames)
    assert h.server._kept == 40_000  # an ended stream's body is the answer's, not the budget's
