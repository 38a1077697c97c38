"""The main HTTP(S) server's routes (§1.5): filter, bind, webhook, healthz, readyz; and ours:
explain, only when asked (`--explain-on-main-port`; it is on the metrics server otherwise).

Requests no route takes are answered as HAMi's httprouter does (server/gohttp.py)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from vgpu_scheduler.scheduler.extender import Extender
from vgpu_scheduler.server.debug import add_pprof_routes
from vgpu_scheduler.server.explainroute import Explainer, add_explain_route
from vgpu_scheduler.server.gohttp import httprouter_fallback
from vgpu_scheduler.wire.extender import MAX_BODY_BYTES

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

JSON = "application/json"


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


def _extender_route(verb: Callable[[bytes], Awaitable[bytes]]) -> Handler:
    async def handle(request: web.Request) -> web.StreamResponse:
        body = await read_at_most(request, MAX_BODY_BYTES)
        if not body:
            # Go's http.Error: text/plain with a trailing newline.
            return web.Response(status=400, text="Please send a request body\n")
        return web.Response(body=await verb(body), content_type=JSON)

    return handle


async def _ok(_request: web.Request) -> web.StreamResponse:
    return web.Response(status=200)


def make_app(
    extender: Extender,
    webhook: Handler,
    *,
    readyz: Handler | None = None,
    profiling: bool = False,
    explainer: Explainer | None = None,
) -> web.Application:
    # A large client_max_size: body limits are enforced per route, with HAMi's own answers.
    app = web.Application(client_max_size=64 * MAX_BODY_BYTES)
    app.router.add_post("/filter", _extender_route(extender.filter))
    app.router.add_post("/bind", _extender_route(extender.bind))
    app.router.add_post("/webhook", webhook)
    # httprouter serves GET routes to GET only (no implicit HEAD).
    app.router.add_get("/healthz", _ok, allow_head=False)
    app.router.add_get("/readyz", readyz or _ok, allow_head=False)
    if explainer is not None:
        add_explain_route(app, explainer)  # only with --explain-on-main-port (explainroute.py)
    if profiling:
        add_pprof_routes(app)
    app.middlewares.append(httprouter_fallback(app))
    return app
