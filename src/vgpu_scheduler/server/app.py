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
from vgpu_scheduler.server.plainroute import FAST_POSTS, PlainAnswer, PlainHandler, PlainRoute
from vgpu_scheduler.wire.extender import MAX_BODY_BYTES

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

JSON = "application/json"
TEXT = "text/plain; charset=utf-8"


def extender_route(verb: Callable[[bytes], Awaitable[bytes]]) -> PlainRoute:
    async def answer(body: bytes, _content_type: str) -> PlainAnswer:
        if not body:
            # Go's http.Error: text/plain with a trailing newline.
            return PlainAnswer(400, TEXT, b"Please send a request body\n")
        return PlainAnswer(200, JSON, await verb(body))

    return PlainRoute(MAX_BODY_BYTES, answer)


async def _ok(_request: web.Request) -> web.StreamResponse:
    return web.Response(status=200)


def make_app(
    extender: Extender,
    webhook: Handler | PlainHandler,
    *,
    readyz: Handler | None = None,
    profiling: bool = False,
    explainer: Explainer | None = None,
) -> web.Application:
    # A large client_max_size: body limits are enforced per route, with HAMi's own answers.
    app = web.Application(client_max_size=64 * MAX_BODY_BYTES)
    fast = {"/filter": extender_route(extender.filter), "/bind": extender_route(extender.bind)}
    if isinstance(webhook, PlainHandler):
        fast["/webhook"] = webhook.route
        webhook = webhook.handle
    app[FAST_POSTS] = fast
    app.router.add_post("/filter", PlainHandler(fast["/filter"]).handle)
    app.router.add_post("/bind", PlainHandler(fast["/bind"]).handle)
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
