"""What HAMi's Go servers answer for a request no handler takes (§1.5).

The main server is a julienschmidt/httprouter router with its defaults:

* a known path asked with another method: 405 `Method Not Allowed` with an `Allow` header (the
  path's methods plus OPTIONS, sorted); OPTIONS on a known path: 200, empty, with `Allow`;
  HEAD is not GET;
* a path that differs from a route of the same method only by a trailing slash, or by letter case
  or an unclean form (`//x`, `/a/../x`): a redirect to the route's path, 301 for GET and 307 for
  other methods;
* anything else: 404 `404 page not found`.

The metrics server is a net/http ServeMux holding only `/metrics`, for every method; an unclean
path is redirected (301) to its clean form and every other path is 404.

Go's `http.Error` answers are `text/plain; charset=utf-8` with `X-Content-Type-Options: nosniff`
and a trailing newline.
"""

from __future__ import annotations

import html
import posixpath
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.typedefs import Middleware

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def go_error(status: int, text: str) -> web.Response:
    """Go's `http.Error(w, text, status)`."""
    return web.Response(
        status=status,
        body=(text + "\n").encode(),
        headers={"Content-Type": "text/plain; charset=utf-8", "X-Content-Type-Options": "nosniff"},
    )


def not_found() -> web.Response:
    return go_error(404, "404 page not found")


def clean_path(path: str) -> str:
    """Go's path cleaning for request paths: rooted, no `.`/`..`/`//`, trailing slash kept."""
    if not path:
        return "/"
    cleaned = posixpath.normpath("/" + path.lstrip("/"))
    cleaned = "/" + cleaned.lstrip("/")  # normpath keeps a leading "//"
    if path.endswith("/") and cleaned != "/":
        cleaned += "/"
    return cleaned


def redirect(request: web.Request, path: str, code: int) -> web.Response:
    """Go's `http.Redirect` to `path` (the query string kept)."""
    target = path + ("?" + request.query_string if request.query_string else "")
    headers = {"Location": target}
    if request.method not in ("GET", "HEAD"):
        return web.Response(status=code, headers=headers)
    headers["Content-Type"] = "text/html; charset=utf-8"
    reason = {301: "Moved Permanently", 307: "Temporary Redirect"}[code]
    body = f'<a href="{html.escape(target)}">{reason}</a>.\n\n' if request.method == "GET" else ""
    return web.Response(status=code, body=body.encode(), headers=headers)


class _Routes:
    """The app's (method, path) table; a path ending in `{tail...}` is a catch-all prefix."""

    def __init__(self, app: web.Application) -> None:
        self.by_method: dict[str, list[str]] = {}
        for route in app.router.routes():
            canonical = route.resource.canonical if route.resource is not None else ""
            pattern = canonical.split("{", 1)[0] + "*" if "{" in canonical else canonical
            self.by_method.setdefault(route.method, []).append(pattern)

    def has(self, method: str, path: str) -> bool:
        return any(_matches(p, path) for p in self.by_method.get(method, ()))

    def fixed(self, method: str, path: str) -> str | None:
        """httprouter's case-insensitive, trailing-slash-tolerant lookup of a cleaned path."""
        want = clean_path(path)
        lowered = want.lower()
        for pattern in self.by_method.get(method, ()):
            if pattern.endswith("*"):
                prefix = pattern[:-1]
                if lowered.startswith(prefix.lower()):
                    return prefix + want[len(prefix) :]
                if lowered == prefix[:-1].lower():
                    return prefix
            elif pattern.lower() in (lowered, lowered + "/", lowered.removesuffix("/")):
                return pattern  # letter case, cleaning, and one trailing slash are forgiven
        return None

    def allowed(self, path: str, method: str) -> str:
        methods = [m for m in self.by_method if m not in (method, "OPTIONS") and self.has(m, path)]
        return ", ".join(sorted([*methods, "OPTIONS"])) if methods else ""


def _matches(pattern: str, path: str) -> bool:
    return path.startswith(pattern[:-1]) if pattern.endswith("*") else path == pattern


def httprouter_fallback(app: web.Application) -> Middleware:
    """A middleware answering unrouted requests as httprouter does (build it after the routes)."""
    routes = _Routes(app)

    @web.middleware
    async def fallback(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except (web.HTTPNotFound, web.HTTPMethodNotAllowed):
            pass
        method, path = request.method, request.path
        if method in routes.by_method and method != "CONNECT" and path != "/":
            code = 301 if method == "GET" else 307
            trimmed = path[:-1] if len(path) > 1 and path.endswith("/") else path + "/"
            if routes.has(method, trimmed):
                return redirect(request, trimmed, code)
            fixed = routes.fixed(method, path)
            if fixed is not None:
                return redirect(request, fixed, code)
        allow = routes.allowed(path, method)
        if allow and method == "OPTIONS":
            return web.Response(status=200, headers={"Allow": allow})
        if allow:
            response = go_error(405, "Method Not Allowed")
            response.headers["Allow"] = allow
            return response
        return not_found()

    return fallback


@web.middleware
async def servemux_fallback(request: web.Request, handler: Handler) -> web.StreamResponse:
    """net/http ServeMux: unclean paths redirect to their clean form, unknown paths are 404."""
    cleaned = clean_path(request.path)
    if cleaned != request.path and request.method != "CONNECT":
        return redirect(request, cleaned, 301)
    try:
        return await handler(request)
    except (web.HTTPNotFound, web.HTTPMethodNotAllowed):
        return not_found()
