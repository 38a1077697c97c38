"""A fake kube-apiserver over HTTP(S): the REST paths of our resources served from a MemoryCluster.

Answers carry the headers the real server sends (fixtures api/*-headers.txt); watches are chunked
JSON lines. Used by integration tests and by `vgpu-scheduler --cluster-snapshot`.
"""

from __future__ import annotations

import socket
import ssl as ssl_module
import uuid
from dataclasses import dataclass

import msgspec
from aiohttp import web

from vgpu_scheduler.cluster.errors import ApiError, status_body
from vgpu_scheduler.standin.memory import MemoryCluster, MemoryWatch, WatchDropped

# API Priority and Fairness ids are per cluster; these are the ones in the fixtures.
_PF_FLOWSCHEMA = "91806dc8-0dd2-436b-ae6c-031da39c641b"
_PF_PRIORITYLEVEL = "08891472-47f9-4a87-9fbc-0dedd4f0e568"

AUTH_LOG = web.AppKey("auth_log", list[str])
_CLUSTER = web.AppKey("cluster", MemoryCluster)
_TOKEN = web.AppKey("token", str)
_WATCHES = web.AppKey("watches", set[MemoryWatch])


def _headers() -> dict[str, str]:
    return {
        "Audit-Id": str(uuid.uuid4()),
        "Cache-Control": "no-cache, private",
        "X-Kubernetes-Pf-Flowschema-Uid": _PF_FLOWSCHEMA,
        "X-Kubernetes-Pf-Prioritylevel-Uid": _PF_PRIORITYLEVEL,
    }


def _json(status: int, body: bytes) -> web.Response:
    return web.Response(status=status, body=body, headers=_headers(), content_type="application/json")


def _authorized(request: web.Request) -> bool:
    token = request.app[_TOKEN]
    header = request.headers.get("Authorization", "")
    request.app[AUTH_LOG].append(header)
    if not token:
        return True
    if header == f"Bearer {token}":
        return True
    # A verified client certificate authenticates too (the TLS layer checked it against the CA).
    return bool(request.transport and request.transport.get_extra_info("peercert"))


async def _handle(request: web.Request) -> web.StreamResponse:
    cluster = request.app[_CLUSTER]
    if not _authorized(request):
        return _json(401, msgspec.json.encode(status_body(401, "Unauthorized", "Unauthorized")))
    path = request.rel_url.raw_path
    params = {k: v for k, v in request.query.items()}
    if request.method == "GET" and params.get("watch", "").lower() in ("1", "true"):
        return await _watch(request, cluster, path, params)
    body = await request.read() if request.method in ("POST", "PUT", "PATCH", "DELETE") else None
    ctype = request.headers.get("Content-Type")
    status, raw = await cluster.handle(request.method, path, params=params, body=body or None,
        content_type=ctype)
    return _json(status, raw)


async def _watch(
    request: web.Request, cluster: MemoryCluster, path: str, params: dict[str, str]
) -> web.StreamResponse:
    try:
        watch = await cluster.open_watch(path, params)
    except ApiError as exc:
        return _json(exc.status, msgspec.json.encode(exc.body))
    request.app[_WATCHES].add(watch)
    resp = web.StreamResponse(status=200, headers=_headers())
    resp.content_type = "application/json"
    resp.enable_chunked_encoding()
    try:
        await resp.prepare(request)
        async for line in watch:
            await resp.write(line + b"\n")
    except WatchDropped:
        # Cut the connection without the final chunk, like a reset: the client must see an error,
        # not a normal end of stream.
        if request.transport is not None:
            request.transport.abort()
        return resp
    finally:
        watch.close()
        request.app[_WATCHES].discard(watch)
    await resp.write_eof()
    return resp


def make_app(cluster: MemoryCluster, *, token: str | None = None) -> web.Application:
    """An aiohttp app serving `cluster`. With `token`, requests need `Authorization: Bearer <token>`
    or a verified client certificate (configure the server SSLContext to request one)."""
    app = web.Application(client_max_size=3 * 1024 * 1024)  # kube-apiserver's request body limit
    app[_CLUSTER] = cluster
    app[_TOKEN] = token or ""
    app[AUTH_LOG] = []
    app[_WATCHES] = set()
    app.router.add_route("*", "/{tail:.*}", _handle)
    return app


@dataclass
class FakeApiServer:
    runner: web.AppRunner
    app: web.Application
    host: str
    port: int
    tls: bool

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}"

    @property
    def auth_headers(self) -> list[str]:
        """The Authorization header of every request seen so far ("" when absent)."""
        return self.app[AUTH_LOG]

    async def close(self) -> None:
        # Open watches would hold the shutdown until they time out: cut them, as a stopping
        # apiserver does.
        watches: set[MemoryWatch] = self.app[_WATCHES]
        for watch in tuple(watches):
            watch.drop()
        await self.runner.cleanup()


async def serve(
    cluster: MemoryCluster,
    host: str = "127.0.0.1",
    port: int = 0,
    ssl: ssl_module.SSLContext | None = None,
    *,
    token: str | None = None,
) -> FakeApiServer:
    """Serve `cluster` on host:port (0 picks a free port; see `.port`/`.url`). Close with `.close()`."""
    app = make_app(cluster, token=token)
    # handler_cancellation: a client that goes away ends its watch handler (and frees the watch).
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
    await runner.setup()
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:  # a port in use: the caller reports it; nothing of ours stays open
        sock.close()
        await runner.cleanup()
        raise
    site = web.SockSite(runner, sock, ssl_context=ssl)
    await site.start()
    return FakeApiServer(runner, app, host, sock.getsockname()[1], ssl is not None)
