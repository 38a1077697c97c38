"""A lean HTTP/2 server connection (RFC 9113) for short request/answer exchanges.

Only what a server that never pushes needs: the prefaces, SETTINGS, HEADERS with CONTINUATION
and padding, DATA, flow control both ways, PING, RST_STREAM, WINDOW_UPDATE, GOAWAY; PRIORITY and
unknown frames are read and ignored. Header blocks are decoded by hpackdecode.py (Go's client uses
the dynamic table and Huffman coding) and encoded here without either. Each request (its headers
and body, ended by the client) goes to `answer`, in a task of its own that a reset stream or a
lost connection cancels.

Why not the `h2` library: it cost our server ~100 µs of CPU per request (its event objects, stream
state machines and frame objects), twice what the exchange costs over HTTP/1.1; this file does the
same in a few struct calls per frame.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Awaitable, Callable

from vgpu_scheduler.server.hpackdecode import STATIC_TABLE, HeaderListTooLarge, HpackDecoder, HpackError

log = logging.getLogger(__name__)

Headers = list[tuple[bytes, bytes]]
Answer = tuple[int, Headers, bytes]
AnswerFunc = Callable[[Headers, bytes], Awaitable[Answer]]

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = (
    range(10)
)
END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY_FLAG = 0x1, 0x1, 0x4, 0x8, 0x20

NO_ERROR, PROTOCOL_ERROR, INTERNAL_ERROR, FLOW_CONTROL_ERROR = 0x0, 0x1, 0x2, 0x3
STREAM_CLOSED, FRAME_SIZE_ERROR, REFUSED_STREAM, CANCEL, COMPRESSION_ERROR = 0x5, 0x6, 0x7, 0x8, 0x9
ENHANCE_YOUR_CALM = 0xB

SETTINGS_HEADER_TABLE_SIZE, SETTINGS_ENABLE_PUSH, SETTINGS_MAX_CONCURRENT_STREAMS = 1, 2, 3
SETTINGS_INITIAL_WINDOW_SIZE, SETTINGS_MAX_FRAME_SIZE, SETTINGS_MAX_HEADER_LIST_SIZE = 4, 5, 6

DEFAULT_WINDOW = 65_535
MAX_WINDOW = 2**31 - 1
MIN_FRAME_SIZE, MAX_FRAME_SIZE_LIMIT = 16_384, 2**24 - 1

MAX_STREAMS = 128
"""Concurrent streams per connection; Go's client opens another connection beyond them."""
STREAM_WINDOW = 1 << 20
"""What a stream may send before we open its window again: a filter body of full nodes
(nodeCacheCapable off) arrives without waiting."""
CONNECTION_WINDOW = 16 << 20
MAX_KEPT_BODY = 8 * 1024 * 1024
"""Request body bytes kept per stream; the rest is read and dropped. No route reads further (the
largest limit is the webhook's 7 MiB), and each sees the first MAX_KEPT_BODY + 1 bytes."""
MAX_KEPT_PER_CONNECTION = 64 * 1024 * 1024
"""Body bytes kept across a connection's open streams: a client cannot make us hold more than
this (a stream that would go beyond it is refused with ENHANCE_YOUR_CALM)."""
MAX_HEADER_LIST = 64 * 1024
MAX_HEADER_BLOCK = 256 * 1024
"""A header block's fragments (HEADERS and CONTINUATIONs) beyond this end the connection."""

_FRAME_HEAD = struct.Struct(">HBBBL")  # length as 16 + 8 bits, type, flags, stream id


class _ConnectionError(Exception):
    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code


class _StreamError(Exception):
    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code


_STATIC_NAMES = {name: index for index, (name, _) in enumerate(STATIC_TABLE, start=1)}
"""HPACK's static table by name; for a name listed more than once, any of its indexes names it."""
_STATUS_INDEX = {b"200": 8, b"204": 9, b"206": 10, b"304": 11, b"400": 12, b"404": 13, b"500": 14}
TABLE_SIZE_ZERO = b"\x20"
"""A dynamic table size update to 0: our encoder never uses the table (RFC 7541, section 6.3)."""


def _hpack_int(value: int, prefix_bits: int, first: int) -> bytes:
    """RFC 7541, section 5.1: `value` on a prefix of `prefix_bits` bits, `first` holding the bits above."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes((first | value,))
    out = bytearray((first | limit,))
    value -= limit
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_headers(headers: Headers) -> bytes:
    """HPACK without the dynamic table and without Huffman: `:status` indexed when the static
    table has it, every other field a literal without indexing (RFC 7541, section 6.2.2), its
    name indexed when the static table has it. A few byte joins per answer, and no table kept in
    step with the client's."""
    out = bytearray()
    for name, value in headers:
        if name == b":status" and value in _STATUS_INDEX:
            out.append(0x80 | _STATUS_INDEX[value])
            continue
        index = _STATIC_NAMES.get(name)
        if index is not None:
            out += _hpack_int(index, 4, 0)
        else:
            out.append(0)
            out += _hpack_int(len(name), 7, 0)
            out += name
        out += _hpack_int(len(value), 7, 0)
        out += value
    return bytes(out)


def frame(kind: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    size = len(payload)
    return _FRAME_HEAD.pack(size >> 8, size & 0xFF, kind, flags, stream_id) + payload


class _Stream:
    __slots__ = (
        "body",
        "ended",
        "headers",
        "kept",
        "recv_window",
        "send_window",
        "task",
        "unacked",
        "waiter",
    )

    def __init__(self, headers: Headers, send_window: int) -> None:
        self.headers = headers
        self.body: list[bytes] = []
        self.kept = 0
        self.ended = False  # the client sent END_STREAM
        self.recv_window = STREAM_WINDOW
        self.unacked = 0  # body bytes received since our last WINDOW_UPDATE for this stream
        self.send_window = send_window
        self.task: asyncio.Task[None] | None = None
        self.waiter: asyncio.Future[None] | None = None

    def keep(self, data: bytes) -> int:
        """Keep what fits under MAX_KEPT_BODY + 1; the number of bytes kept."""
        room = MAX_KEPT_BODY + 1 - self.kept
        if room <= 0:
            return 0
        piece = data[:room]
        self.body.append(piece)
        self.kept += len(piece)
        return len(piece)


class Http2Server(asyncio.Protocol):
    """One client's connection."""

    def __init__(self, answer: AnswerFunc, *, on_close: Callable[[Http2Server], None] | None = None) -> None:
        self._answer = answer
        self._on_close = on_close
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._preface_seen = False
        self._decoder = HpackDecoder(max_header_list_size=MAX_HEADER_LIST)
        self._table_update_due = True  # a size update to 0 opens our first header block
        self._streams: dict[int, _Stream] = {}
        self._kept = 0  # body bytes kept by the open streams
        self._last_stream = 0
        self._block: bytearray | None = None  # a header block awaiting its CONTINUATIONs
        self._block_stream = 0
        self._block_flags = 0
        self._block_refused = False
        self._peer_frame_size = MIN_FRAME_SIZE
        self._peer_initial_window = DEFAULT_WINDOW
        self._send_window = DEFAULT_WINDOW
        self._recv_window = CONNECTION_WINDOW
        self._recv_unacked = 0
        self._out: list[bytes] = []
        self._flush_pending = False
        self._going_away = False
        self._closed = False

    # --- asyncio ----------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        settings = struct.pack(
            ">HLHLHL",
            SETTINGS_MAX_CONCURRENT_STREAMS,
            MAX_STREAMS,
            SETTINGS_INITIAL_WINDOW_SIZE,
            STREAM_WINDOW,
            SETTINGS_MAX_HEADER_LIST_SIZE,
            MAX_HEADER_LIST,
        )
        increment = struct.pack(">L", CONNECTION_WINDOW - DEFAULT_WINDOW)
        transport.write(frame(SETTINGS, 0, 0, settings) + frame(WINDOW_UPDATE, 0, 0, increment))

    def data_received(self, data: bytes) -> None:
        if self._closed:
            return
        self._buffer += data
        try:
            self._read_frames()
        except _ConnectionError as exc:
            log.debug("HTTP/2 connection error %d: %s", exc.code, exc)
            self._goaway(exc.code)
            self._close()
            return
        self._replenish()
        self._flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self._transport = None
        for stream in self._streams.values():
            if stream.task is not None:
                stream.task.cancel()
            if stream.waiter is not None and not stream.waiter.done():
                stream.waiter.cancel()
        self._streams.clear()
        if self._on_close is not None:
            self._on_close(self)

    # --- shutdown -----------------------------------------------------------------------------------

    def begin_shutdown(self) -> None:
        """GOAWAY: no new streams; the connection closes once the open ones are answered."""
        if self._going_away or self._closed:
            return
        self._going_away = True
        self._goaway(NO_ERROR)
        self._flush()
        self._close_if_done()

    # --- reading ------------------------------------------------------------------------------------

    def _read_frames(self) -> None:
        buf = self._buffer
        pos = 0
        if not self._preface_seen:
            if len(buf) < len(PREFACE):
                if not PREFACE.startswith(bytes(buf)):
                    raise _ConnectionError(PROTOCOL_ERROR, "not the HTTP/2 client preface")
                return
            if buf[: len(PREFACE)] != PREFACE:
                raise _ConnectionError(PROTOCOL_ERROR, "not the HTTP/2 client preface")
            self._preface_seen = True
            pos = len(PREFACE)
        try:
            while len(buf) - pos >= 9:
                high, low, kind, flags, stream_id = _FRAME_HEAD.unpack_from(buf, pos)
                size = (high << 8) | low
                if size > MIN_FRAME_SIZE:  # we never raise our SETTINGS_MAX_FRAME_SIZE
                    raise _ConnectionError(FRAME_SIZE_ERROR, f"a frame of {size} bytes")
                if len(buf) - pos - 9 < size:
                    break
                payload = bytes(buf[pos + 9 : pos + 9 + size])
                pos += 9 + size
                self._on_frame(kind, flags, stream_id & MAX_WINDOW, payload)
                if self._closed:
                    return
        finally:
            del buf[:pos]

    def _on_frame(self, kind: int, flags: int, stream_id: int, payload: bytes) -> None:
        if self._block is not None and (kind != CONTINUATION or stream_id != self._block_stream):
            raise _ConnectionError(PROTOCOL_ERROR, "a header block interrupted")
        try:
            if kind == HEADERS:
                self._on_headers(flags, stream_id, payload)
            elif kind == DATA:
                self._on_data(flags, stream_id, payload)
            elif kind == CONTINUATION:
                self._on_continuation(flags, stream_id, payload)
            elif kind == SETTINGS:
                self._on_settings(flags, stream_id, payload)
            elif kind == WINDOW_UPDATE:
                self._on_window_update(stream_id, payload)
            elif kind == RST_STREAM:
                self._on_reset(stream_id, payload)
            elif kind == PING:
                self._on_ping(flags, stream_id, payload)
            elif kind == GOAWAY:
                if stream_id != 0:
                    raise _ConnectionError(PROTOCOL_ERROR, "GOAWAY on a stream")
                self._going_away = True  # the client opens no more streams; answer the open ones
                self._close_if_done()
            elif kind == PRIORITY:
                if stream_id == 0:
                    raise _ConnectionError(PROTOCOL_ERROR, "PRIORITY on stream 0")
                if len(payload) != 5:
                    raise _StreamError(FRAME_SIZE_ERROR, "PRIORITY of a wrong size")
            elif kind == PUSH_PROMISE:
                raise _ConnectionError(PROTOCOL_ERROR, "PUSH_PROMISE from a client")
            # other types are extensions: ignored (RFC 9113, section 5.5)
        except _StreamError as exc:
            self._reset(stream_id, exc.code)

    def _on_headers(self, flags: int, stream_id: int, payload: bytes) -> None:
        if stream_id == 0 or stream_id % 2 == 0:
            raise _ConnectionError(PROTOCOL_ERROR, f"HEADERS on stream {stream_id}")
        payload = _unpad(flags, payload)
        if flags & PRIORITY_FLAG:
            if len(payload) < 5:
                raise _ConnectionError(FRAME_SIZE_ERROR, "HEADERS too short for its priority")
            self._block_refused = struct.unpack_from(">L", payload)[0] & MAX_WINDOW == stream_id
            payload = payload[5:]
        else:
            self._block_refused = False
        self._block = bytearray(payload)
        self._block_stream = stream_id
        self._block_flags = flags
        if flags & END_HEADERS:
            self._end_block()

    def _on_continuation(self, flags: int, stream_id: int, payload: bytes) -> None:
        if self._block is None:
            raise _ConnectionError(PROTOCOL_ERROR, "CONTINUATION without HEADERS")
        self._block += payload
        if len(self._block) > MAX_HEADER_BLOCK:
            raise _ConnectionError(ENHANCE_YOUR_CALM, "a header block too large")
        if flags & END_HEADERS:
            self._end_block()

    def _end_block(self) -> None:
        assert self._block is not None
        block, stream_id, flags = bytes(self._block), self._block_stream, self._block_flags
        self._block = None
        try:
            headers: Headers = self._decoder.decode(block)
        except HeaderListTooLarge:
            raise _ConnectionError(ENHANCE_YOUR_CALM, "a header list too large") from None
        except HpackError as exc:
            raise _ConnectionError(COMPRESSION_ERROR, f"header block: {exc}") from None
        stream = self._streams.get(stream_id)
        if stream is not None:  # trailers: must end the stream; their fields are not used
            if stream.ended:
                raise _ConnectionError(STREAM_CLOSED, f"HEADERS on half-closed stream {stream_id}")
            if not flags & END_STREAM:
                raise _StreamError(PROTOCOL_ERROR, "trailers without END_STREAM")
            self._end_stream(stream_id, stream)
            return
        if stream_id <= self._last_stream:
            raise _ConnectionError(STREAM_CLOSED, f"HEADERS on closed stream {stream_id}")
        self._last_stream = stream_id
        if self._block_refused:  # decoded all the same: the HPACK table must follow the client's
            raise _StreamError(PROTOCOL_ERROR, "a stream depending on itself")
        if self._going_away or len(self._streams) >= MAX_STREAMS:
            self._reset(stream_id, REFUSED_STREAM)
            return
        stream = _Stream(headers, self._peer_initial_window)
        self._streams[stream_id] = stream
        if flags & END_STREAM:
            self._end_stream(stream_id, stream)

    def _on_data(self, flags: int, stream_id: int, payload: bytes) -> None:
        if stream_id == 0:
            raise _ConnectionError(PROTOCOL_ERROR, "DATA on stream 0")
        size = len(payload)  # padding counts against the windows too
        if size > self._recv_window:
            raise _ConnectionError(FLOW_CONTROL_ERROR, "DATA beyond the connection window")
        self._recv_window -= size
        self._recv_unacked += size
        stream = self._streams.get(stream_id)
        if stream is None:
            if stream_id > self._last_stream:
                raise _ConnectionError(PROTOCOL_ERROR, f"DATA on idle stream {stream_id}")
            raise _StreamError(STREAM_CLOSED, f"DATA on closed stream {stream_id}")
        if stream.ended:
            raise _StreamError(STREAM_CLOSED, f"DATA on half-closed stream {stream_id}")
        if size > stream.recv_window:
            raise _StreamError(FLOW_CONTROL_ERROR, "DATA beyond the stream window")
        stream.recv_window -= size
        stream.unacked += size
        data = _unpad(flags, payload)
        if self._kept + min(len(data), MAX_KEPT_BODY + 1 - stream.kept) > MAX_KEPT_PER_CONNECTION:
            raise _StreamError(ENHANCE_YOUR_CALM, "bodies beyond the connection's budget")
        self._kept += stream.keep(data)
        if flags & END_STREAM:
            self._end_stream(stream_id, stream)

    def _on_settings(self, flags: int, stream_id: int, payload: bytes) -> None:
        if stream_id != 0:
            raise _ConnectionError(PROTOCOL_ERROR, "SETTINGS on a stream")
        if flags & ACK:
            if payload:
                raise _ConnectionError(FRAME_SIZE_ERROR, "SETTINGS ACK with a payload")
            return
        if len(payload) % 6:
            raise _ConnectionError(FRAME_SIZE_ERROR, "SETTINGS of a wrong size")
        for offset in range(0, len(payload), 6):
            key, value = struct.unpack_from(">HL", payload, offset)
            if key == SETTINGS_HEADER_TABLE_SIZE:
                self._table_update_due = True  # acknowledged at the start of the next block
            elif key == SETTINGS_ENABLE_PUSH and value > 1:
                raise _ConnectionError(PROTOCOL_ERROR, "ENABLE_PUSH above 1")
            elif key == SETTINGS_INITIAL_WINDOW_SIZE:
                if value > MAX_WINDOW:
                    raise _ConnectionError(FLOW_CONTROL_ERROR, "INITIAL_WINDOW_SIZE above 2^31-1")
                delta = value - self._peer_initial_window
                self._peer_initial_window = value
                for open_stream in self._streams.values():
                    open_stream.send_window += delta
                    if open_stream.send_window > MAX_WINDOW:
                        raise _ConnectionError(FLOW_CONTROL_ERROR, "a stream window above 2^31-1")
                    _wake(open_stream)
            elif key == SETTINGS_MAX_FRAME_SIZE:
                if not MIN_FRAME_SIZE <= value <= MAX_FRAME_SIZE_LIMIT:
                    raise _ConnectionError(PROTOCOL_ERROR, "MAX_FRAME_SIZE out of range")
                self._peer_frame_size = value
        self._out.append(frame(SETTINGS, ACK, 0))

    def _on_window_update(self, stream_id: int, payload: bytes) -> None:
        if len(payload) != 4:
            raise _ConnectionError(FRAME_SIZE_ERROR, "WINDOW_UPDATE of a wrong size")
        increment = struct.unpack(">L", payload)[0] & MAX_WINDOW
        if stream_id == 0:
            if increment == 0:
                raise _ConnectionError(PROTOCOL_ERROR, "a zero connection window increment")
            self._send_window += increment
            if self._send_window > MAX_WINDOW:
                raise _ConnectionError(FLOW_CONTROL_ERROR, "the connection window above 2^31-1")
            for open_stream in self._streams.values():
                _wake(open_stream)
            return
        stream = self._streams.get(stream_id)
        if stream is None:
            if stream_id > self._last_stream:
                raise _ConnectionError(PROTOCOL_ERROR, f"WINDOW_UPDATE on idle stream {stream_id}")
            return  # a closed stream: ignored
        if increment == 0:
            raise _StreamError(PROTOCOL_ERROR, "a zero stream window increment")
        stream.send_window += increment
        if stream.send_window > MAX_WINDOW:
            raise _StreamError(FLOW_CONTROL_ERROR, "a stream window above 2^31-1")
        _wake(stream)

    def _on_reset(self, stream_id: int, payload: bytes) -> None:
        if stream_id == 0:
            raise _ConnectionError(PROTOCOL_ERROR, "RST_STREAM on stream 0")
        if len(payload) != 4:
            raise _ConnectionError(FRAME_SIZE_ERROR, "RST_STREAM of a wrong size")
        if stream_id > self._last_stream:
            raise _ConnectionError(PROTOCOL_ERROR, f"RST_STREAM on idle stream {stream_id}")
        stream = self._forget(stream_id)
        if stream is not None:
            _drop(stream)  # the caller went away: its handler is cancelled
            self._close_if_done()

    def _on_ping(self, flags: int, stream_id: int, payload: bytes) -> None:
        if stream_id != 0:
            raise _ConnectionError(PROTOCOL_ERROR, "PING on a stream")
        if len(payload) != 8:
            raise _ConnectionError(FRAME_SIZE_ERROR, "PING of a wrong size")
        if not flags & ACK:
            self._out.append(frame(PING, ACK, 0, payload))

    def _forget(self, stream_id: int) -> _Stream | None:
        stream = self._streams.pop(stream_id, None)
        if stream is not None:
            self._kept -= stream.kept
            stream.kept = 0
        return stream

    def _end_stream(self, stream_id: int, stream: _Stream) -> None:
        stream.ended = True
        body = b"".join(stream.body)
        stream.body = []
        self._kept -= stream.kept  # the body is the answer's now; its size no longer counts
        stream.kept = 0
        stream.task = asyncio.get_running_loop().create_task(self._respond(stream_id, stream, body))

    def _replenish(self) -> None:
        """WINDOW_UPDATEs once half a window is used, so a client never waits on a full window."""
        if self._recv_unacked >= CONNECTION_WINDOW // 2:
            self._out.append(frame(WINDOW_UPDATE, 0, 0, struct.pack(">L", self._recv_unacked)))
            self._recv_window += self._recv_unacked
            self._recv_unacked = 0
        for stream_id, stream in self._streams.items():
            if not stream.ended and stream.unacked >= STREAM_WINDOW // 2:
                self._out.append(frame(WINDOW_UPDATE, 0, stream_id, struct.pack(">L", stream.unacked)))
                stream.recv_window += stream.unacked
                stream.unacked = 0

    # --- answering ----------------------------------------------------------------------------------

    async def _respond(self, stream_id: int, stream: _Stream, body: bytes) -> None:
        try:
            status, headers, content = await self._answer(stream.headers, body)
            self._send_headers(stream_id, [(b":status", str(status).encode()), *headers], not content)
            sent = 0
            while sent < len(content):
                size = min(self._send_window, stream.send_window, self._peer_frame_size, len(content) - sent)
                if size <= 0:
                    self._flush_soon()
                    stream.waiter = asyncio.get_running_loop().create_future()
                    await stream.waiter
                    stream.waiter = None
                    continue
                last = sent + size == len(content)
                self._out.append(
                    frame(DATA, END_STREAM if last else 0, stream_id, content[sent : sent + size])
                )
                self._send_window -= size
                stream.send_window -= size
                sent += size
        except asyncio.CancelledError:
            if self._forget(stream_id) is not None:
                self._reset(stream_id, CANCEL)
            raise
        except Exception:
            log.exception("HTTP/2 stream %d: no answer", stream_id)
            self._reset(stream_id, INTERNAL_ERROR)
        finally:
            self._forget(stream_id)
            self._flush_soon()
            self._close_if_done()

    def _send_headers(self, stream_id: int, headers: Headers, end_stream: bool) -> None:
        block = encode_headers(headers)
        if self._table_update_due:
            block = TABLE_SIZE_ZERO + block
            self._table_update_due = False
        limit = self._peer_frame_size
        flags = END_STREAM if end_stream else 0
        if len(block) <= limit:
            self._out.append(frame(HEADERS, flags | END_HEADERS, stream_id, block))
            return
        self._out.append(frame(HEADERS, flags, stream_id, block[:limit]))
        for start in range(limit, len(block), limit):
            last = start + limit >= len(block)
            self._out.append(
                frame(CONTINUATION, END_HEADERS if last else 0, stream_id, block[start : start + limit])
            )

    # --- writing ------------------------------------------------------------------------------------

    def _reset(self, stream_id: int, code: int) -> None:
        stream = self._forget(stream_id)
        if stream is not None:
            _drop(stream)
        self._out.append(frame(RST_STREAM, 0, stream_id, struct.pack(">L", code)))
        self._flush_soon()

    def _goaway(self, code: int) -> None:
        self._out.append(frame(GOAWAY, 0, 0, struct.pack(">LL", self._last_stream, code)))

    def _flush(self) -> None:
        self._flush_pending = False
        if self._out and self._transport is not None:
            self._transport.write(b"".join(self._out))
        self._out.clear()

    def _flush_soon(self) -> None:
        """One write (one TLS record) for every frame queued in this turn of the loop."""
        if not self._flush_pending and self._transport is not None:
            self._flush_pending = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _close_if_done(self) -> None:
        if self._going_away and not self._streams:
            self._flush()
            self._close()

    def _close(self) -> None:
        self._flush()
        if self._transport is not None:
            self._transport.close()


def _unpad(flags: int, payload: bytes) -> bytes:
    if not flags & PADDED:
        return payload
    if not payload or payload[0] >= len(payload):
        raise _ConnectionError(PROTOCOL_ERROR, "padding longer than the frame")
    return payload[1 : len(payload) - payload[0]]


def _wake(stream: _Stream) -> None:
    if stream.waiter is not None and not stream.waiter.done():
        stream.waiter.set_result(None)


def _drop(stream: _Stream) -> None:
    if stream.task is not None and not stream.task.done():
        stream.task.cancel()
    if stream.waiter is not None and not stream.waiter.done():
        stream.waiter.cancel()
