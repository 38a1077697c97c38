"""Routes whose answer is a function of the request body alone: POST /filter, /bind, /webhook.

One definition serves both protocols. aiohttp calls a route through `PlainHandler` (HTTP/1.1,
and every HTTP/2 request the direct path does not take); the HTTP/2 connection calls it directly
(server/http1bridge.py), skipping aiohttp's request machinery: parsing, the Request object, the
middleware and the Response, ~8 % of our CPU in a burst for these three calls per pod.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web


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
"""The app's plain POST routes by exact path, for the HTTP/2 direct path."""


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
