"""HTTP/1.1 connections serving the plain routes' POSTs without aiohttp, until a request is not one.

A client that does not take `h2` (a webhook client with HTTP/2 turned off, a proxy, curl) calls
/filter, /bind or /webhook over HTTP/1.1, where aiohttp's request machinery (its parser, the
Request, the middleware, the Response) cost more of our CPU than the route's own work: 279 against
206 µs per admission review (bench/webhook_http.py). So a TLS connection that chose HTTP/1.1
starts here: a POST to a plain route's path (server/plainroute.py; like aiohttp's router, the query
string is not routed on) whose body is framed by Content-Length within the route's limit is read
in place and answered with the bytes aiohttp would write (`plain_answer`). At the first request
that is anything else (another method or path, a chunked body, `Expect`, `Upgrade`, `Connection`,
a head not read at a glance) the connection is handed over, with every byte not yet answered, to
aiohttp's HTTP/1.1 handler for good, as `AlpnDispatch` hands over a new one. So what aiohttp
answers, and how, stays aiohttp's; only the plain POSTs are ours.

As aiohttp's handler does: requests on a connection are answered in order, one at a time; a
client that goes away cancels its request's route (`handler_cancellation`); an idle connection is
closed after `KEEPALIVE_SECONDS`.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from http import HTTPStatus
from typing import cast

from vgpu_scheduler.cluster.http1 import NOT_IN_FIELD_VALUE, TOKEN
from vgpu_scheduler.server.plainroute import PlainRoute, RouteTable, plain_answer

KEEPALIVE_SECONDS = 3630.0
"""aiohttp's default keep-alive timeout, which the handler a connection is handed to keeps too."""
MAX_HEAD = 8190
"""A longer head is aiohttp's to read (and maybe refuse: its limit per line is this)."""
MAX_UNREAD = 1 << 20
"""Bytes a client may send ahead of the answer it waits for before reading pauses."""

_HANDED_OVER = frozenset((b"transfer-encoding", b"expect", b"upgrade", b"connection"))
_REASONS = {status.value: status.phrase.encode() for status in HTTPStatus}


def plain_request(head: bytes, routes: RouteTable) -> tuple[PlainRoute, int, bytes] | None:
    """(route, Content-Length, Content-Type) of a request head (without its blank line) that is a
    plain POST we answer ourselves; None for any other request, aiohttp's to answer."""
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ")
    if len(parts) != 3 or parts[0] != b"POST" or parts[2] != b"HTTP/1.1":
        return None
    route = routes.get(parts[1])
    if route is None:
        return None
    length, content_type, host = -1, b"", False
    for line in lines[1:]:
        raw_name, sep, raw_value = line.partition(b":")
        if not sep or not TOKEN.fullmatch(raw_name):
            return None
        name, value = raw_name.lower(), raw_value.strip(b" \t")
        if NOT_IN_FIELD_VALUE.search(value) or name in _HANDED_OVER:
            return None
        if name == b"content-length":
            if length >= 0 or not value.isdigit():
                return None
            length = int(value)
        elif name == b"content-type":
            content_type = value
        elif name == b"host":
            host = True
    if not host or not 0 <= length <= route.limit:
        return None
    return route, length, content_type


def encode_answer(status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> bytes:
    """An HTTP/1.1 answer as aiohttp writes it (its status line, header names as it spells them)."""
    out = [b"HTTP/1.1 %d %s" % (status, _REASONS.get(status, b""))]
    out.extend(b"%s: %s" % (_SPELLED.get(name, name), value) for name, value in headers)
    return b"\r\n".join(out) + b"\r\n\r\n" + body


_SPELLED = {b"content-type": b"Content-Type", b"content-length": b"Content-Length", b"date": b"Date",
            b"server": b"Server", b"connection": b"Connection"}


class Http1Server(asyncio.Protocol):
    """One TLS connection that chose HTTP/1.1 (see the module doc)."""

    def __init__(
        self,
        routes: RouteTable,
        handover: Callable[[], asyncio.Protocol],
        *,
        on_close: Callable[[Http1Server], None] = lambda _: None,
    ) -> None:
        self._routes = routes
        self._handover_to = handover
        self._on_close = on_close
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self._buf = bytearray()
        self._head: tuple[int, PlainRoute, int, bytes] | None = None  # a request read up to its body
        self._task: asyncio.Task[None] | None = None
        self._idle: asyncio.TimerHandle | None = None
        self._paused = False
        self._closing = False  # shutdown: close once the answer in progress is written
        self._gone = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)  # as aiohttp's handler does
        self._arm_idle()

    def connection_lost(self, exc: Exception | None) -> None:
        self._gone = True
        self._disarm_idle()
        if self._task is not None:
            self._task.cancel()  # the caller went away: its route is cancelled, as aiohttp's are
        self._on_close(self)

    def data_received(self, data: bytes) -> None:
        self._buf += data
        if self._task is None:
            self._serve_next()
        elif len(self._buf) > MAX_UNREAD and not self._paused and self._transport is not None:
            self._paused = True
            self._transport.pause_reading()

    def begin_shutdown(self) -> None:
        """The server stops: close now if idle, else once the answer in progress is written."""
        self._closing = True
        if self._task is None and self._transport is not None:
            self._transport.close()

    def _serve_next(self) -> None:
        buf = self._buf
        if not buf:
            return
        if self._head is None:
            end = buf.find(b"\r\n\r\n", 0, MAX_HEAD + 4)
            if end < 0:
                if len(buf) > MAX_HEAD:
                    self._handover()
                return
            request = plain_request(bytes(buf[:end]), self._routes)
            if request is None:
                self._handover()
                return
            self._head = (end + 4, *request)
        start, route, length, content_type = self._head
        if len(buf) < start + length:
            return  # the body is on its way
        self._head = None
        body = bytes(buf[start : start + length])
        del buf[: start + length]
        self._disarm_idle()
        self._task = self._loop.create_task(self._answer(route, body, content_type))

    async def _answer(self, route: PlainRoute, body: bytes, content_type: bytes) -> None:
        status, headers, content, raised = await plain_answer(route, body, content_type)
        self._task = None
        transport = self._transport
        if self._gone or transport is None:
            return
        if raised:  # aiohttp closes the connection after its 500
            headers = [*headers, (b"connection", b"close")]
        transport.write(encode_answer(status, headers, content))
        if self._closing or raised:
            transport.close()
            return
        if self._paused:
            self._paused = False
            transport.resume_reading()
        self._arm_idle()
        self._serve_next()

    def _handover(self) -> None:
        """aiohttp's handler takes the connection, and every byte not answered yet, for good."""
        self._disarm_idle()
        transport = self._transport
        assert transport is not None and self._task is None
        if self._paused:
            self._paused = False
            transport.resume_reading()
        protocol = self._handover_to()
        transport.set_protocol(protocol)
        protocol.connection_made(transport)
        pending, self._buf = bytes(self._buf), bytearray()
        if pending:
            protocol.data_received(pending)
        self._on_close(self)  # no longer ours to shut down

    def _arm_idle(self) -> None:
        self._disarm_idle()
        self._idle = self._loop.call_later(KEEPALIVE_SECONDS, self._idle_too_long)

    def _disarm_idle(self) -> None:
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None

    def _idle_too_long(self) -> None:
        self._idle = None
        if self._task is None and self._transport is not None:
            self._transport.close()
