"""A lean HTTP/1.1 client for the API server's short requests: keep-alive connections, nothing else.

Why not aiohttp's client for these: a bind makes three writes and the events one more each, and
aiohttp's request machinery (URL objects, cookie jar, tracing hooks, a stream reader and a task
per response) cost more of our CPU per pod than the writes' TLS. This client writes one buffer
per request and parses the answer in place: status line, Content-Length or chunked body.
Watches, long-lived streams, are read by its twin, cluster/http1stream.py.

Only what kube-apiserver answers is supported: HTTP/1.1, `Content-Length` or `chunked` bodies,
no `Content-Encoding` (we never send `Accept-Encoding`), `Connection: close` honoured; no HEAD
requests (their answers announce a length they do not carry).
"""

from __future__ import annotations

import asyncio
import re
import ssl
from collections.abc import Callable, Iterable
from typing import NamedTuple, TypeVar, cast

_CR_OR_LF = re.compile(r"[\r\n]")
_HEX_DIGITS = b"0123456789abcdefABCDEF"
TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
"""RFC 9110's token: a method or a field name."""
NOT_IN_FIELD_VALUE = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
"""The control characters a field value may not carry (a tab may)."""
MAX_HEAD = 64 * 1024
"""A status line and headers longer than this is not an API server's answer."""
MAX_BODY = 256 * 1024 * 1024
"""Bound on one answer's body: a list of every pod of a big cluster fits; garbage does not."""


_P = TypeVar("_P", bound=asyncio.Protocol)


class HttpProtocolError(Exception):
    """The peer's bytes are not an HTTP/1.1 answer we can read."""


class Answer:
    __slots__ = ("body", "keep_alive", "status")

    def __init__(self, status: int, body: bytes, keep_alive: bool) -> None:
        self.status = status
        self.body = body
        self.keep_alive = keep_alive


class _Connection(asyncio.Protocol):
    """One connection, one request at a time. `data_received` accumulates until the answer is
    complete, then resolves the waiting request's future."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.lost = False
        self._buf = bytearray()
        self._waiter: asyncio.Future[Answer] | None = None
        self._reader = AnswerReader()
        self.gone: asyncio.Future[None] | None = None  # resolved once the socket is closed

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # a stream transport: it has write()
        self.gone = asyncio.get_running_loop().create_future()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if self.gone is not None and not self.gone.done():
            self.gone.set_result(None)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(ConnectionResetError(f"connection closed before the answer ({exc})"))

    def usable(self) -> bool:
        return not self.lost and self.transport is not None and not self.transport.is_closing()

    def send(self, data: bytes) -> asyncio.Future[Answer]:
        assert self.transport is not None
        self._buf.clear()
        self._reader = AnswerReader()
        self._waiter = asyncio.get_running_loop().create_future()
        self.transport.write(data)
        return self._waiter

    def close(self) -> None:
        self.lost = True
        if self.transport is not None:
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        waiter = self._waiter
        if waiter is None or waiter.done():
            self.close()  # bytes nobody asked for: the connection's framing is lost
            return
        self._buf += data
        try:
            answer = self._parse()
        except HttpProtocolError as exc:
            waiter.set_exception(exc)
            self.close()
            return
        if answer is not None:
            self._waiter = None
            waiter.set_result(answer)

    def _parse(self) -> Answer | None:
        buf, reader = self._buf, self._reader
        body = reader.feed(buf)
        head = reader.head
        if head is not None and head.length == UNTIL_CLOSE:
            raise HttpProtocolError("answer without Content-Length or chunked framing")
        if body is None or head is None:
            return None
        keep_alive = head.keep_alive
        if head.length != CHUNKED:
            # Bytes beyond the answer belong to no request: the connection is not reused.
            keep_alive = keep_alive and len(buf) - reader.body_at == head.length
        return Answer(head.status, body, keep_alive)


CHUNKED = -1
UNTIL_CLOSE = -2
"""AnswerHead.length of an answer with neither Content-Length nor chunked framing: its body lasts
until the connection closes (our API client refuses such an answer; aiohttp may write one)."""


class AnswerHead(NamedTuple):
    status: int
    headers: list[tuple[bytes, bytes]]
    """Lower-cased names, stripped values, in order."""
    length: int
    """The body's length, CHUNKED or UNTIL_CLOSE; 0 for a status without a body (1xx, 204, 304)
    and for the answer to a HEAD."""
    keep_alive: bool


def parse_head(head: bytes, *, to_head: bool = False) -> AnswerHead:
    """An answer's status line and headers (without the blank line). Strict: a Transfer-Encoding
    other than chunked and a Content-Encoding other than identity are refused (we ask for none)."""
    lines = head.split(b"\r\n")
    status_line = lines[0].split(b" ", 2)
    if len(status_line) < 2 or not status_line[0].startswith(b"HTTP/1.") or not status_line[1].isdigit():
        raise HttpProtocolError(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
    status = int(status_line[1])
    length = UNTIL_CLOSE
    keep_alive = status_line[0] == b"HTTP/1.1"
    headers: list[tuple[bytes, bytes]] = []
    for line in lines[1:]:
        raw_name, sep, raw_value = line.partition(b":")
        if not sep:
            raise HttpProtocolError(f"malformed header line: {line[:80]!r}")
        name, value = raw_name.strip().lower(), raw_value.strip()
        headers.append((name, value))
        if name == b"content-length":
            if not value.isdigit() or int(value) > MAX_BODY:
                raise HttpProtocolError(f"bad Content-Length: {value[:40]!r}")
            length = int(value)
        elif name == b"transfer-encoding":
            if value.lower() != b"chunked":
                raise HttpProtocolError(f"unsupported Transfer-Encoding: {value[:40]!r}")
            length = CHUNKED
        elif name == b"connection":
            keep_alive = value.lower() != b"close"
        elif name == b"content-encoding" and value.lower() not in (b"", b"identity"):
            raise HttpProtocolError(f"unsupported Content-Encoding: {value[:40]!r}")
    if to_head or status in (204, 304) or 100 <= status < 200:
        length = 0
    elif length == UNTIL_CLOSE:
        keep_alive = False
    return AnswerHead(status, headers, length, keep_alive)


class AnswerReader:
    """One answer read in place from a growing buffer, as its bytes arrive: the head once, then
    the body by its length or its chunks."""

    __slots__ = ("_chunks", "_to_head", "body_at", "head")

    def __init__(self, *, to_head: bool = False) -> None:
        self._to_head = to_head
        self.head: AnswerHead | None = None
        self.body_at = 0
        self._chunks: Dechunker | None = None

    def feed(self, buf: bytearray) -> bytes | None:
        """The body once `buf` holds all of it (the head is then `head`), else None. An answer
        framed by the connection's end is never complete here (`rest` gives it at the end)."""
        head = self.head
        if head is None:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > MAX_HEAD:
                    raise HttpProtocolError("answer head too long")
                return None
            head = self.head = parse_head(bytes(buf[:end]), to_head=self._to_head)
            self.body_at = end + 4
            if head.length == CHUNKED:
                self._chunks = Dechunker(self.body_at)
        if self._chunks is not None:
            return self._chunks.feed(buf)
        if head.length == UNTIL_CLOSE or len(buf) - self.body_at < head.length:
            return None
        return bytes(buf[self.body_at : self.body_at + head.length])

    def rest(self, buf: bytearray) -> bytes:
        """What came after the head: the body of an answer framed by the connection's end."""
        return bytes(buf[self.body_at :])


def next_chunk(buf: bytearray, pos: int, room: int = MAX_BODY) -> tuple[int, int] | None:
    """The chunk whose size line starts at `pos`: (where its data starts, its size), or None until
    `buf` holds the chunk whole (its data and CRLF; the size line and trailers for the last). A
    chunk bigger than `room` is refused as soon as its size is read."""
    eol = buf.find(b"\r\n", pos)
    if eol < 0:
        if len(buf) - pos > 1024:
            raise HttpProtocolError("chunk size line too long")
        return None
    size_text = bytes(buf[pos:eol])
    if b";" in size_text:
        size_text = size_text.split(b";", 1)[0]
    size_text = size_text.strip()
    # Hex digits only (int() alone would take "0x1f", "+1f" or "1_f"); translate() deletes them
    # at C speed, so anything left is a stray byte.
    if not size_text or size_text.translate(None, _HEX_DIGITS):
        raise HttpProtocolError(f"bad chunk size: {size_text[:40]!r}")
    size = int(size_text, 16)
    if size > room:
        raise HttpProtocolError("answer body too large")
    data_at = eol + 2
    if size == 0:
        # Trailers (kube-apiserver sends none) end with an empty line.
        if buf[data_at : data_at + 2] == b"\r\n":
            return data_at + 2, 0
        end = buf.find(b"\r\n\r\n", eol)
        return (end + 4, 0) if end >= 0 else None
    if len(buf) < data_at + size + 2:
        return None
    if buf[data_at + size : data_at + size + 2] != b"\r\n":
        raise HttpProtocolError("chunk not followed by CRLF")
    return data_at, size


class Dechunker:
    """Reads a chunked body incrementally from a growing buffer: each call resumes where the last
    one stopped, so a big answer arriving in many reads is scanned once."""

    __slots__ = ("parts", "pos", "total")

    def __init__(self, start: int) -> None:
        self.pos = start
        self.parts: list[bytes] = []
        self.total = 0

    def feed(self, buf: bytearray) -> bytes | None:
        """The whole body once `buf` holds the last chunk, else None (call again with more)."""
        while True:
            chunk = next_chunk(buf, self.pos, MAX_BODY - self.total)
            if chunk is None:
                return None
            data_at, size = chunk
            if size == 0:
                return b"".join(self.parts)
            self.total += size
            self.parts.append(bytes(buf[data_at : data_at + size]))
            self.pos = data_at + size + 2


class Http1Pool:
    """Keep-alive connections to one host. A request takes an idle connection (the most recent
    first) or opens one; a complete keep-alive answer gives it back. A connection cut, timed out
    or cancelled mid-request is closed, never reused (its framing is lost).

    At most `limit` connections at once (aiohttp's default connector limit), all kept when idle:
    closing the ones above a smaller idle cap after a burst of concurrent writes would only make
    the next burst pay their TLS handshakes again."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        ssl_context: ssl.SSLContext | None,
        server_hostname: str | None = None,
        limit: int = 100,
    ) -> None:
        self.host = host
        self.port = port
        self._ssl = ssl_context
        self._server_hostname = server_hostname if ssl_context is not None else None
        self._limit = limit
        self._slots = asyncio.Semaphore(limit)
        self._idle: list[_Connection] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self.opened = 0  # connections opened so far (tests, diagnostics)
        host_header = f"[{host}]" if ":" in host else host
        default_port = 443 if ssl_context is not None else 80
        self._host_header = host_header if port == default_port else f"{host_header}:{port}"

    async def _connect(self) -> _Connection:
        conn = await self.open(_Connection)
        self.opened += 1
        return conn

    async def open(self, protocol: Callable[[], _P]) -> _P:
        """A new connection to the host (TLS as the pool's), outside the pool: the caller's."""
        loop = asyncio.get_running_loop()
        if self._ssl is None:
            _, conn = await loop.create_connection(protocol, self.host, self.port)
        else:
            _, conn = await loop.create_connection(
                protocol,
                self.host,
                self.port,
                ssl=self._ssl,
                server_hostname=self._server_hostname or self.host,
            )
        return conn

    def encode(
        self, method: str, target: str, headers: Iterable[tuple[str, str]], body: bytes | None
    ) -> bytes:
        """The request as one buffer; refused (HttpProtocolError) when a CR or LF inside the
        request line or a header would end its line early and start another (a token file's
        newline, say)."""
        fields = list(headers)
        if any(_CR_OR_LF.search(text) for text in (method, target, *(t for pair in fields for t in pair))):
            raise HttpProtocolError("a request line or header contains CR or LF")
        head = [f"{method} {target} HTTP/1.1\r\nHost: {self._host_header}\r\n"]
        head.extend(f"{name}: {value}\r\n" for name, value in fields)
        if body is not None or method in ("POST", "PUT", "PATCH"):
            head.append(f"Content-Length: {len(body or b'')}\r\n")
        head.append("\r\n")
        return "".join(head).encode("latin-1") + (body or b"")

    def _bind_to_running_loop(self) -> None:
        """Connections and the limit's semaphore belong to one loop; a pool used again from
        another loop (the last one closed) starts afresh there."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self._idle, self._loop = [], loop
            self._slots = asyncio.Semaphore(self._limit)

    def _take_idle(self) -> _Connection | None:
        while self._idle:
            conn = self._idle.pop()
            if conn.usable():
                return conn
        return None

    async def request(
        self,
        method: str,
        target: str,
        headers: Iterable[tuple[str, str]],
        body: bytes | None,
        *,
        timeout: float | None,
        before_send: Callable[[], None] | None = None,
    ) -> Answer:
        """Send one request and read its answer. Raises OSError (connection), TimeoutError or
        HttpProtocolError; the connection is then closed.

        `before_send` runs once the connection is ready (a new one connected and its TLS
        handshake done), in the same step of the loop as the write: the last moment a caller can
        still stop the request (what raises propagates, and nothing is sent)."""
        data = self.encode(method, target, headers, body)
        conn: _Connection | None = None
        self._bind_to_running_loop()
        async with self._slots:
            try:
                async with asyncio.timeout(timeout):
                    conn = self._take_idle() or await self._connect()
                    if before_send is not None:
                        try:
                            before_send()
                        except BaseException:
                            self._idle.append(conn)  # nothing was sent on it: still usable
                            conn = None
                            raise
                    answer = await conn.send(data)
            except BaseException:
                if conn is not None:
                    conn.close()
                raise
            if answer.keep_alive and conn.usable():
                self._idle.append(conn)
            else:
                conn.close()
        return answer

    async def close(self) -> None:
        """Close the idle connections and wait (at most a second) until their sockets are: a TLS
        close is a few loop turns, and a loop stopped before them leaks the sockets."""
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()
        waits = [conn.gone for conn in idle if conn.gone is not None and not conn.gone.done()]
        if waits and self._loop is asyncio.get_running_loop():
            await asyncio.wait(waits, timeout=1.0)
