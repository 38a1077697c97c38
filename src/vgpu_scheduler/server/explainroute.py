"""GET /explain/{namespace}/{pod}: the scheduler's view of one cached pod, on the metrics server.

It names every node and what is on it, so it is served on `--metrics-bind-address` (reached from
inside the cluster, like /metrics) and not on the main port, which the chart may expose as a
NodePort; `--explain-on-main-port` serves it there too."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from vgpu_scheduler.engine.explain import Explanation, render_text

Explainer = Callable[[str, str], Explanation | None]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

PATH = "/explain/{namespace}/{pod}"
JSON = "application/json"


def explain_handler(explainer: Explainer) -> Handler:
    """Plain text, or JSON with `?o=json` (`output=json` too)."""

    async def handle(request: web.Request) -> web.StreamResponse:
        namespace, name = request.match_info["namespace"], request.match_info["pod"]
        explanation = explainer(namespace, name)
        if explanation is None:
            return web.Response(status=404, text=f"pod {namespace}/{name} not found\n")
        output = request.query.get("o") or request.query.get("output") or "text"
        if output == "json":
            return web.Response(text=explanation.dumps(), content_type=JSON)
        if output != "text":
            return web.Response(status=400, text=f"unknown output {output!r} (text or json)\n")
        return web.Response(text=render_text(explanation))

    return handle


def add_explain_route(app: web.Application, explainer: Explainer) -> None:
    app.router.add_get(PATH, explain_handler(explainer), allow_head=False)
