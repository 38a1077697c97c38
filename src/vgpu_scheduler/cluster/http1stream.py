"""One long answer from the API server, read as its lines arrive: a watch.

The watch twin of `cluster/http1.py`'s request client: a connection of its own (never pooled), the
request written as one buffer, the head parsed in place, then the body (chunked, as kube-apiserver
sends a watch; or framed by a length, or by the connection's end) split into lines that the reader
takes in batches. Why not aiohttp's client, which read watches before: per chunk it ran a stream
reader, a waiter's wake-up and a re-armed read-timeout timer; here a chunk is a scan of the buffer
and a list append, and the idle check is one timer per read timeout (issue 30).

Bounded: the head (`MAX_HEAD`), one chunk and one line (`MAX_BODY`), and the lines waiting for the
reader (reading pauses at `MAX_QUEUED_LINES` until the reader takes them).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import cast

from vgpu_scheduler.cluster.http1 import (
    CHUNKED,
    MAX_BODY,
    MAX_HEAD,
    UNTIL_CLOSE,
    Answer,
    AnswerReader,
    Http1Pool,
    HttpProtocolError,
    next_chunk,
    parse_head,
)

MAX_QUEUED_LINES = 4096
"""Lines read and not yet taken before reading pauses (a reader slower than the server)."""


async def open_line_stream(
    pool: Http1Pool,
    target: str,
    headers: Iterable[tuple[str, str]],
    *,
    timeout: float | None,
    read_timeout: float | None,
) -> LineStream:
    """GET `target` on a new connection to the pool's host and wait, at most `timeout`, for the
    answer's head; for a status other than 200, for the whole answer (`LineStream.answer`).
    Raises OSError, TimeoutError or HttpProtocolError (the connection is then closed)."""
    request = pool.encode("GET", target, headers, None)
    async with asyncio.timeout(timeout):
        stream = await pool.open(lambda: LineStream(request, read_timeout=read_timeout))
        try:
            await stream.head_read()
        except BaseException:
            stream.close()
            raise
    return stream


class ChunkedBody:
    """A chunked body's data as its chunks complete, the chunks consumed from the buffer."""

    __slots__ = ("ended",)

    def __init__(self) -> None:
        self.ended = False

    def take(self, buf: bytearray) -> bytes:
        parts: list[bytes] = []
        pos = 0
        while not self.ended:
            chunk = next_chunk(buf, pos)
            if chunk is None:
                break
            data_at, size = chunk
            if size == 0:
                self.ended = True
                pos = data_at  # past the trailers' empty line
            else:
                parts.append(bytes(buf[data_at : data_at + size]))
                pos = data_at + size + 2
        if pos:
            del buf[:pos]
        return b"".join(parts)


class LineStream(asyncio.Protocol):
    """The connection of one streamed answer. `head_read` waits for the head; then `next_lines`
    gives the body's non-blank lines in batches, and [] once the body ended."""

    def __init__(self, request: bytes, *, read_timeout: float | None) -> None:
        self._request = request
        self._read_timeout = read_timeout
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self._buf = bytearray()
        self._pending = bytearray()  # body bytes after the last complete line
        self._lines: list[bytes] = []
        self._framing: ChunkedBody | int | None = None  # chunked, bytes left, or until close
        self._error_reader: AnswerReader | None = None
        self._head_seen = False
        self._ended = False
        self._failure: BaseException | None = None
        self._paused = False
        self._last_data = self._loop.time()
        self._idle_timer: asyncio.TimerHandle | None = None
        self._head: asyncio.Future[None] = self._loop.create_future()
        self._waiter: asyncio.Future[None] | None = None
        self.answer: Answer | None = None
        """The whole answer when its status is not 200 (no stream follows)."""

    # -- the reader's side ------------------------------------------------------------------

    async def head_read(self) -> None:
        await self._head

    async def next_lines(self) -> list[bytes]:
        """The lines read since the last call (waiting for some); [] once the body ended. Raises
        ConnectionResetError, TimeoutError or HttpProtocolError when the stream broke first."""
        while not self._lines:
            if self._failure is not None:
                raise self._failure
            if self._ended:
                return []
            self._waiter = self._loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        lines, self._lines = self._lines, []
        if self._paused and self._transport is not None:
            self._paused = False
            self._transport.resume_reading()
        return lines

    def close(self) -> None:
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        if self._transport is not None:
            self._transport.close()

    # -- the connection's side --------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # a stream transport: it has write()
        self._transport.write(self._request)
        if self._read_timeout is not None:
            self._idle_timer = self._loop.call_later(self._read_timeout, self._check_idle)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        if self._ended or self._failure is not None:
            return
        reader = self._error_reader
        if reader is not None and reader.head is not None and reader.head.length == UNTIL_CLOSE:
            self._answer_with(reader.head.status, reader.rest(self._buf))  # its end came
        elif self._head_seen and reader is None and self._framing is None:
            self._end()  # a body framed by the connection's end: it ended
        else:
            self._fail(ConnectionResetError(f"connection closed before the answer's end ({exc})"))

    def data_received(self, data: bytes) -> None:
        if self._ended or self._failure is not None:
            return
        self._last_data = self._loop.time()
        buf = self._buf
        buf += data
        try:
            if not self._head_seen and not self._read_head(buf):
                return
            if self._error_reader is not None:
                self._read_error_answer(buf)
                return
            self._read_body(buf)
        except HttpProtocolError as exc:
            self._fail(exc)

    def _read_head(self, buf: bytearray) -> bool:
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            if len(buf) > MAX_HEAD:
                raise HttpProtocolError("answer head too long")
            return False
        self._head_seen = True
        head = parse_head(bytes(buf[:end]))
        if head.status != 200:  # no stream: read the answer whole (its head again) for the error
            self._error_reader = AnswerReader()
            return True
        del buf[: end + 4]
        if head.length == CHUNKED:
            self._framing = ChunkedBody()
        elif head.length != UNTIL_CLOSE:
            self._framing = head.length
        if not self._head.done():
            self._head.set_result(None)
        return True

    def _read_error_answer(self, buf: bytearray) -> None:
        reader = self._error_reader
        assert reader is not None
        body = reader.feed(buf)
        if body is None and reader.head is not None and reader.head.length == UNTIL_CLOSE:
            return  # the rest comes with the connection's end (not read: the status says enough)
        if body is not None:
            assert reader.head is not None
            self._answer_with(reader.head.status, body)
            self.close()

    def _answer_with(self, status: int, body: bytes) -> None:
        self.answer = Answer(status, body, keep_alive=False)
        self._ended = True
        if not self._head.done():
            self._head.set_result(None)

    def _read_body(self, buf: bytearray) -> None:
        framing = self._framing
        if isinstance(framing, ChunkedBody):
            data = framing.take(buf)
            ended = framing.ended
        elif framing is None:
            data = bytes(buf)
            buf.clear()
            ended = False
        else:
            data = bytes(buf[:framing])
            del buf[:framing]
            self._framing = framing - len(data)
            ended = self._framing == 0
        pending = self._pending
        pending += data
        newline = pending.rfind(b"\n")
        if newline >= 0:
            self._lines.extend(line for line in bytes(pending[:newline]).split(b"\n") if line.strip())
            del pending[: newline + 1]
        elif len(pending) > MAX_BODY:
            raise HttpProtocolError("a line longer than any object")
        if ended:
            self._end()
            self.close()
            return
        if len(self._lines) >= MAX_QUEUED_LINES and not self._paused and self._transport is not None:
            self._paused = True
            self._transport.pause_reading()
        self._wake()

    def _end(self) -> None:
        if self._pending.strip():
            self._lines.append(bytes(self._pending))
        self._pending.clear()
        self._ended = True
        self._wake()

    def _fail(self, exc: BaseException) -> None:
        self._failure = exc
        if not self._head.done():
            self._head.set_exception(exc)
        self._wake()
        self.close()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _check_idle(self) -> None:
        """No byte for `read_timeout` seconds while the reader was keeping up: a silent dead
        connection (the server's own timeoutSeconds would have ended the stream by now)."""
        assert self._read_timeout is not None
        idle = self._loop.time() - self._last_data
        if self._paused or idle < self._read_timeout:
            remaining = self._read_timeout if self._paused else self._read_timeout - idle
            self._idle_timer = self._loop.call_later(remaining, self._check_idle)
            return
        self._idle_timer = None
        self._fail(TimeoutError(f"no data for {self._read_timeout:g} s"))
