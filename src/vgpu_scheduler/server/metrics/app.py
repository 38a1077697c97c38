"""The HTTP app serving `/metrics` alone (bound to --metrics-bind-address): rendering runs in a
worker thread, gzip when asked, and every method answers as HAMi's net/http ServeMux does."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Callable

from aiohttp import web
from prometheus_client import CollectorRegistry

from vgpu_scheduler.server.gohttp import servemux_fallback
from vgpu_scheduler.server.metrics.exposition import CONTENT_TYPE, render

log = logging.getLogger(__name__)


def make_metrics_app(
    registry: CollectorRegistry,
    *,
    executor: concurrent.futures.Executor | None = None,
    renderer: Callable[[CollectorRegistry, bool], bytes] = render,
) -> web.Application:
    """An aiohttp app serving only `/metrics` (the caller binds it to --metrics-bind-address)."""

    async def metrics(request: web.Request) -> web.Response:
        compress = "gzip" in request.headers.get("Accept-Encoding", "").lower()
        try:
            body = await asyncio.get_running_loop().run_in_executor(executor, renderer, registry, compress)
        except Exception as exc:
            log.exception("collecting metrics failed")
            return web.Response(status=500, text=f"An error has occurred while serving metrics:\n\n{exc}")
        headers = {"Content-Type": CONTENT_TYPE}
        if compress:
            headers["Content-Encoding"] = "gzip"
        return web.Response(body=body, headers=headers)

    # HAMi: a net/http ServeMux holding promhttp at /metrics, which answers every method.
    app = web.Application(middlewares=[servemux_fallback])
    app.router.add_route("*", "/metrics", metrics)
    return app
