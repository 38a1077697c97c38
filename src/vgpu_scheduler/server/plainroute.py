"""Routes whose answer is a function of the request body alone: POST /filter, /bind, /webhook.

One definition serves every way in. aiohttp calls a route through `PlainHandler`; over TLS, the
HTTP/2 connection (server/http1bridge.py) and the HTTP/1.1 one (server/http1server.py) call it
directly (`plain_answer`), skipping aiohttp's request machinery (parsing, the Request object, the
middleware and the Response) for the three calls each pod costs, with the bytes aiohttp would
have answered.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from email.utils import formatdate
from typing import NamedTuple

from aiohttp import web
from aiohttp.http import SERVER_SOFTWARE

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PlainAnswer:
    status: int
    content_type: str
    body: bytes


@dataclass(frozen=True, slots=True)
class PlainRoute:
    limit: int
    """The route reads the first `limit` + 1 bytes of a body, enough to tell an oversized one."""
    answer: Callable[[bytes, str], Awaitable[PlainAnswer]]
    """(body, at most `limit` + 1 bytes; the Content-Type header or "") -> the answer."""


FAST_POSTS = web.AppKey("fast_posts", dict[str, PlainRoute])
"""The app's plain POST routes by exact path, for the direct paths (HTTP/2 and HTTP/1.1)."""


class RouteTable:
    """Plain routes by request target, routed on the path alone as aiohttp's router does: the
    query string (kube-apiserver calls `/webhook?timeout=10s`) is not part of it."""

    __slots__ = ("_by_path",)

    def __init__(self, routes: Mapping[str, PlainRoute]) -> None:
        self._by_path = {path.encode(): route for path, route in routes.items()}

    def __bool__(self) -> bool:
        return bool(self._by_path)

    def get(self, target: bytes) -> PlainRoute | None:
        return self._by_path.get(target.partition(b"?")[0])


async def read_at_most(request: web.Request, limit: int) -> bytes:
    """Up to `limit` + 1 bytes of the body: enough to tell an oversized body without reading it all."""
    chunks: list[bytes] = []
    size = 0
    while size <= limit:
        chunk = await request.content.read(limit + 1 - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


class PlainHandler:
    """A plain route and its aiohttp handler (`handle`)."""

    def __init__(self, route: PlainRoute) -> None:
        self.route = route

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await read_at_most(request, self.route.limit)
        answer = await self.route.answer(body, request.headers.get("Content-Type", ""))
        headers = {"Content-Type": answer.content_type}
        return web.Response(status=answer.status, body=answer.body, headers=headers)


_INTERNAL_ERROR = b"500 Internal Server Error\n\nServer got itself in trouble"
"""aiohttp's answer to a handler that raised (to a client not asking for HTML)."""
_SERVER = SERVER_SOFTWARE.encode()


class RouteAnswer(NamedTuple):
    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes
    raised: bool
    """The route raised: the answer is aiohttp's 500 (after which aiohttp closes an HTTP/1.1
    connection)."""


async def plain_answer(route: PlainRoute, body: bytes, content_type: bytes) -> RouteAnswer:
    """The route's answer, outside aiohttp, as aiohttp would give it: the headers aiohttp writes
    (Content-Type, Content-Length, Date, Server), and aiohttp's 500 for a route that raises."""
    raised = False
    try:
        plain = await route.answer(body[: route.limit + 1], content_type.decode("latin-1"))
    except Exception:
        log.exception("Error handling request")
        status, kind, content, raised = 500, b"text/plain; charset=utf-8", _INTERNAL_ERROR, True
    else:
        status, kind, content = plain.status, plain.content_type.encode("latin-1"), plain.body
    headers = [
        (b"content-type", kind),
        (b"content-length", str(len(content)).encode()),
        (b"date", http_date()),
        (b"server", _SERVER),
    ]
    return RouteAnswer(status, headers, content, raised)


_date_cache: tuple[int, bytes] = (0, b"")


def http_date() -> bytes:
    """The Date header's value (RFC 9110's IMF-fixdate), formatted once a second."""
    global _date_cache
    now = int(time.time())
    if _date_cache[0] != now:
        _date_cache = (now, formatdate(now, usegmt=True).encode())
    return _date_cache[1]
