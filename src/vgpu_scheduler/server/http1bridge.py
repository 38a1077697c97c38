"""HTTP/2 requests answered by aiohttp's HTTP/1.1 handler, through in-memory connections.

Each request is written as an HTTP/1.1 request into an in-memory connection of aiohttp's own
(`_MemoryHttp1`), and the answer aiohttp writes back is parsed and returned for HTTP/2. So every
route, middleware and answer (HAMi's httprouter fallbacks included) is the same on both protocols,
and closing the in-memory connection cancels the handler as a client's closed connection does.
The connections are kept alive in a pool per HTTP/2 connection, as many as its concurrent streams.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable
from typing import Any

from vgpu_scheduler.cluster.http1 import (
    NOT_IN_FIELD_VALUE,
    TOKEN,
    UNTIL_CLOSE,
    AnswerReader,
    HttpProtocolError,
)
from vgpu_scheduler.server.h2conn import Answer, Headers
from vgpu_scheduler.server.plainroute import PlainRoute, RouteTable, plain_answer

log = logging.getLogger(__name__)

_PATH = re.compile(rb"[!-~]+")  # visible ASCII: no space or control character, as a request line needs
_HOP_BY_HOP = frozenset(
    (b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding", b"upgrade", b"te")
)
_NOT_FORWARDED = _HOP_BY_HOP | {b"host", b"content-length", b"expect"}


class BadRequest(ValueError):
    """A request that cannot be written as an HTTP/1.1 request line and head."""


def check_headers(headers: Headers) -> tuple[bytes, bytes, bytes, list[bytes]]:
    """(method, path, host, header lines) of a request an HTTP/1.1 request line and head can
    carry; BadRequest for any other (a space or control character where HTTP/1.1 has none)."""
    method = path = authority = host = b""
    lines: list[bytes] = []
    for name, value in headers:
        if name.startswith(b":"):
            if name == b":method":
                method = value
            elif name == b":path":
                path = value
            elif name == b":authority":
                authority = value
        elif name == b"host":
            host = value
        elif name not in _NOT_FORWARDED:
            if not TOKEN.fullmatch(name) or NOT_IN_FIELD_VALUE.search(value):
                raise BadRequest(f"bad header {name[:40]!r}")
            lines.append(name + b": " + value)
    if not TOKEN.fullmatch(method):
        raise BadRequest(f"bad method {method[:40]!r}")
    if not _PATH.fullmatch(path):
        raise BadRequest(f"bad path {path[:80]!r}")
    host = authority or host
    if host and not _PATH.fullmatch(host):
        raise BadRequest(f"bad authority {host[:80]!r}")
    return method, path, host, lines


def http1_request(headers: Headers, body: bytes) -> tuple[bytes, bool]:
    """The HTTP/1.1 form of an HTTP/2 request (its head and body), and whether it is a HEAD."""
    method, path, host, lines = check_headers(headers)
    head = [method + b" " + path + b" HTTP/1.1", b"Host: " + host, *lines]
    head.append(b"Content-Length: " + str(len(body)).encode())
    return b"\r\n".join(head) + b"\r\n\r\n" + body, method == b"HEAD"


class Http1Answer:
    __slots__ = ("body", "headers", "keep_alive", "status")

    def __init__(
        self, status: int, headers: list[tuple[bytes, bytes]], body: bytes, keep_alive: bool
    ) -> None:
        self.status = status
        self.headers = headers
        self.body = body
        self.keep_alive = keep_alive


_BAD_REQUEST = Http1Answer(400, [(b"content-type", b"text/plain; charset=utf-8")], b"400 Bad Request", True)
"""A request no HTTP/1.1 request line can carry (Go's server answers such a request 400 too)."""


def _for_http2(headers: Headers) -> Headers:
    """An HTTP/1.1 answer's headers without those HTTP/2 forbids (connection-specific ones)."""
    return [(name, value) for name, value in headers if name not in _HOP_BY_HOP]


class _MemoryHttp1(asyncio.Transport):
    """One in-memory HTTP/1.1 connection to aiohttp's request handler: a request is fed to it as
    received bytes, and what it writes is read back as the answer."""

    def __init__(self, protocol: asyncio.Protocol, outer: asyncio.BaseTransport) -> None:
        super().__init__()
        self._protocol = protocol
        self._outer = outer
        self._closing = False
        self._buffer = bytearray()
        self._waiter: asyncio.Future[Http1Answer] | None = None
        self._reader = AnswerReader()
        protocol.connection_made(self)

    # --- what the pool asks --------------------------------------------------------------------

    @property
    def usable(self) -> bool:
        return not self._closing and self._waiter is None

    def exchange(self, request: bytes, *, to_head: bool) -> asyncio.Future[Http1Answer]:
        assert self.usable
        self._waiter = asyncio.get_running_loop().create_future()
        self._buffer.clear()
        self._reader = AnswerReader(to_head=to_head)
        self._protocol.data_received(request)
        return self._waiter

    # --- the transport aiohttp writes to ----------------------------------------------------------

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closing or self._waiter is None:
            return  # nothing asked: aiohttp writes only answers, so this is a late write after a reset
        self._buffer += data
        try:
            answer = self._parse()
        except HttpProtocolError as exc:
            self._finish(exc)
            self.close()
            return
        if answer is not None:
            self._finish(answer)

    def writelines(self, list_of_data: Any) -> None:
        for data in list_of_data:
            self.write(data)

    def _parse(self) -> Http1Answer | None:
        body = self._reader.feed(self._buffer)
        head = self._reader.head
        if body is None or head is None:
            return None
        return Http1Answer(head.status, _for_http2(head.headers), body, head.keep_alive)

    def _finish(self, outcome: Http1Answer | BaseException) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is None or waiter.done():
            return
        if isinstance(outcome, BaseException):
            waiter.set_exception(outcome)
        else:
            if not outcome.keep_alive:
                self.close()
            waiter.set_result(outcome)

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        head = self._reader.head
        if self._waiter is not None and head is not None and head.length == UNTIL_CLOSE:
            body = self._reader.rest(self._buffer)
            self._finish(Http1Answer(head.status, _for_http2(head.headers), body, False))
        else:
            self._finish(ConnectionResetError("the handler closed the connection before answering"))
        asyncio.get_running_loop().call_soon(self._protocol.connection_lost, None)

    def abort(self) -> None:
        self.close()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "socket":
            return default  # socket options belong to the HTTP/2 connection
        return self._outer.get_extra_info(name, default)

    def pause_reading(self) -> None:
        pass  # requests are fed one at a time

    def resume_reading(self) -> None:
        pass

    def is_reading(self) -> bool:
        return not self._closing

    def can_write_eof(self) -> bool:
        return False

    def get_write_buffer_size(self) -> int:
        return 0

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        raise NotImplementedError

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._protocol


class Http1Bridge:
    """The answers of one HTTP/2 connection: a POST to the exact path of a plain route is answered
    by the route itself (`direct`); every other request goes to aiohttp's handler (`http1`)."""

    def __init__(
        self,
        http1: Callable[[], asyncio.Protocol],
        outer: asyncio.BaseTransport,
        direct: RouteTable | None = None,
    ) -> None:
        self._http1 = http1
        self._outer = outer
        self._direct = direct
        self._idle: list[_MemoryHttp1] = []

    async def answer(self, headers: Headers, body: bytes) -> Answer:
        route = self._direct_route(headers)
        if route is not None:
            return await answer_directly(route, headers, body)
        try:
            raw, to_head = http1_request(headers, body)
        except BadRequest as exc:
            log.debug("HTTP/2 request refused: %s", exc)
            return _BAD_REQUEST.status, _BAD_REQUEST.headers, _BAD_REQUEST.body
        memory = self._take()
        try:
            answer = await memory.exchange(raw, to_head=to_head)
        except BaseException:
            memory.close()  # a cancelled stream cancels its handler
            raise
        if memory.usable:
            self._idle.append(memory)
        return answer.status, answer.headers, answer.body

    def _direct_route(self, headers: Headers) -> PlainRoute | None:
        if not self._direct:
            return None
        method = path = b""
        for name, value in headers:
            if name == b":method":
                method = value
            elif name == b":path":
                path = value
        return self._direct.get(path) if method == b"POST" else None

    def close(self) -> None:
        for memory in self._idle:
            memory.close()
        self._idle.clear()

    def _take(self) -> _MemoryHttp1:
        while self._idle:
            memory = self._idle.pop()
            if memory.usable:
                return memory
        return _MemoryHttp1(self._http1(), self._outer)


async def answer_directly(route: PlainRoute, headers: Headers, body: bytes) -> Answer:
    """A plain route's answer to an HTTP/2 request, with the headers aiohttp gives it. A request
    aiohttp would have refused is refused alike (400)."""
    try:
        check_headers(headers)
    except BadRequest as exc:
        log.debug("HTTP/2 request refused: %s", exc)
        return _BAD_REQUEST.status, _BAD_REQUEST.headers, _BAD_REQUEST.body
    content_type = b""
    for name, value in headers:
        if name == b"content-type":
            content_type = value
            break
    status, answer_headers, content, _ = await plain_answer(route, body, content_type)
    return status, answer_headers, content
