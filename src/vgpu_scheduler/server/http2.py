"""HTTP/2 on the main HTTPS port, answered by the same aiohttp application as HTTP/1.1.

Why: kube-scheduler's extender client and kube-apiserver's webhook client are Go transports that
offer `h2` by ALPN. Speaking HTTP/1.1 to them, Go keeps 2 idle connections per host and opens a
new TLS connection for every concurrent call beyond that: in a burst, 1.16 new TLS connections per
bound pod, each costing our server ~1 ms of CPU (the handshake and the connection's setup). Over
HTTP/2 they multiplex every call on one connection.

How: once the TLS handshake is done, `AlpnDispatch` hands the connection to an HTTP/2 connection
(h2conn.py) whose requests aiohttp's handler answers through in-memory HTTP/1.1 connections
(http1bridge.py), except the plain routes' POSTs (/filter, /bind, /webhook), which their route
answers directly (plainroute.py); or, for HTTP/1.1, to a connection answering those POSTs itself
until a request is not one, when aiohttp's HTTP/1.1 handler takes it over (http1server.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from aiohttp import web

from vgpu_scheduler.server.h2conn import Http2Server
from vgpu_scheduler.server.http1bridge import Http1Bridge
from vgpu_scheduler.server.http1server import Http1Server
from vgpu_scheduler.server.plainroute import FAST_POSTS, RouteTable

ALPN_PROTOCOLS = ["h2", "http/1.1"]

ProtocolFactory = Callable[[], asyncio.Protocol]


class AlpnDispatch(asyncio.Protocol):
    """The listener's protocol: after the handshake, the connection goes to HTTP/2 when the client
    chose `h2`, else to HTTP/1.1 (`http1`: ours for the plain routes, or aiohttp's handler)."""

    def __init__(self, http1: ProtocolFactory, http2: Callable[[asyncio.BaseTransport], Http2Server]) -> None:
        self._http1 = http1
        self._http2 = http2

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        ssl_object = transport.get_extra_info("ssl_object")
        chosen = ssl_object.selected_alpn_protocol() if ssl_object is not None else None
        protocol: asyncio.BaseProtocol = self._http2(transport) if chosen == "h2" else self._http1()
        transport.set_protocol(protocol)
        protocol.connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        pass  # a failed handshake: nothing was handed over


class Http2Site(web.TCPSite):
    """aiohttp's TCP site over TLS, offering `h2` beside `http/1.1` (ALPN is set on the context)."""

    def __init__(self, runner: web.BaseRunner, host: str | None, port: int, **kwargs: Any) -> None:
        super().__init__(runner, host, port, **kwargs)
        self._http2: dict[Http2Server, Http1Bridge] = {}
        self._http1: set[Http1Server] = set()
        self._routes = RouteTable({})  # the app's plain routes, read at start()

    def _new_http1(self) -> asyncio.Protocol:
        server = self._runner.server
        assert server is not None
        if not self._routes:
            return server()
        connection = Http1Server(self._routes, server, on_close=self._http1.discard)
        self._http1.add(connection)
        return connection

    def _new_http2(self, transport: asyncio.BaseTransport) -> Http2Server:
        server = self._runner.server
        assert server is not None
        bridge = Http1Bridge(server, transport, self._routes)
        connection = Http2Server(bridge.answer, on_close=self._closed)
        self._http2[connection] = bridge
        return connection

    def _closed(self, connection: Http2Server) -> None:
        bridge = self._http2.pop(connection, None)
        if bridge is not None:
            bridge.close()

    async def start(self) -> None:
        await web.BaseSite.start(self)
        app = getattr(self._runner, "app", None)  # an AppRunner's: its plain routes answer directly
        self._routes = RouteTable((app.get(FAST_POSTS) if app is not None else None) or {})
        server = self._runner.server
        assert server is not None and self._ssl_context is not None
        self._server = await asyncio.get_running_loop().create_server(
            lambda: AlpnDispatch(self._new_http1, self._new_http2),
            self._host,
            self._port,
            ssl=self._ssl_context,
            backlog=self._backlog,
            reuse_address=self._reuse_address,
            reuse_port=self._reuse_port,
        )
        sockets = self._server.sockets
        self._bound_port = sockets[0].getsockname()[1] if sockets else self._port

    async def stop(self) -> None:
        # GOAWAY first: open streams are answered while the runner drains its handlers.
        for connection in list(self._http2):
            connection.begin_shutdown()
        for plain in list(self._http1):
            plain.begin_shutdown()
        await super().stop()
