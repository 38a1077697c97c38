"""Requests no route takes, answered as HAMi's Go servers do (§1.5): httprouter on the
main server, a net/http ServeMux holding /metrics on the metrics server."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from yarl import URL

from vgpu_scheduler.engine.state import SchedulerState
from vgpu_scheduler.server.app import make_app
from vgpu_scheduler.server.gohttp import clean_path
from vgpu_scheduler.server.metrics import make_metrics_app, metrics_registry

GO_TEXT = "text/plain; charset=utf-8"


class _Extender:
    async def filter(self, body: bytes) -> bytes:
        return b'{"Error":""}'

    async def bind(self, body: bytes) -> bytes:
        return b'{"Error":""}'


async def _webhook(_request: web.Request) -> web.StreamResponse:
    return web.json_response({})


@pytest.fixture
async def serve() -> AsyncIterator[Any]:
    runners: list[web.AppRunner] = []

    async def start(app: web.Application) -> str:
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        runners.append(runner)
        host, port = runner.addresses[0][:2]
        return f"http://{host}:{port}"

    yield start
    for runner in runners:
        await runner.cleanup()


async def _ask(url: str, method: str, path: str) -> tuple[int, dict[str, str], str]:
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, URL(url + path, encoded=True), allow_redirects=False) as resp,
    ):
        return resp.status, dict(resp.headers), await resp.text()


# (method, path, status, Allow or Location header, body); None: header absent.
MAIN_CASES = [
    ("GET", "/healthz", 200, None, ""),
    ("GET", "/filter", 405, "OPTIONS, POST", "Method Not Allowed\n"),
    ("PUT", "/bind", 405, "OPTIONS, POST", "Method Not Allowed\n"),
    ("POST", "/healthz", 405, "GET, OPTIONS", "Method Not Allowed\n"),
    ("HEAD", "/healthz", 405, "GET, OPTIONS", ""),
    ("OPTIONS", "/webhook", 200, "OPTIONS, POST", ""),
    ("OPTIONS", "/readyz", 200, "GET, OPTIONS", ""),
    ("GET", "/nope", 404, None, "404 page not found\n"),
    ("OPTIONS", "/nope", 404, None, "404 page not found\n"),
    ("GET", "/metrics", 404, None, "404 page not found\n"),
    ("GET", "/debug/pprof/", 404, None, "404 page not found\n"),  # --profiling off
    # Trailing slash and case/cleaning fixes: 301 for GET, 307 otherwise.
    ("GET", "/healthz/", 301, "/healthz", '<a href="/healthz">Moved Permanently</a>.\n\n'),
    ("POST", "/filter/", 307, "/filter", ""),
    ("GET", "/HEALTHZ", 301, "/healthz", '<a href="/healthz">Moved Permanently</a>.\n\n'),
    ("POST", "/Bind", 307, "/bind", ""),
    ("POST", "/x/../webhook", 307, "/webhook", ""),
    ("GET", "//readyz", 301, "/readyz", '<a href="/readyz">Moved Permanently</a>.\n\n'),
    ("POST", "/healthz/", 404, None, "404 page not found\n"),
]


@pytest.mark.parametrize(("method", "path", "status", "header", "body"), MAIN_CASES)
async def test_main_server_routing(
    serve: Any, method: str, path: str, status: int, header: str | None, body: str
) -> None:
    url = await serve(make_app(_Extender(), _webhook))  # type: ignore[arg-type]
    got_status, headers, text = await _ask(url, method, path)
    assert got_status == status
    assert text == body
    name = "Location" if status in (301, 307) else "Allow"
    assert headers.get(name) == header
    if status in (404, 405):
        assert headers["Content-Type"] == GO_TEXT
        assert headers["X-Content-Type-Options"] == "nosniff"


@pytest.mark.parametrize(
    ("method", "path", "status", "location"),
    [
        ("GET", "/debug/pprof/", 200, None),
        ("GET", "/debug/pprof", 301, "/debug/pprof/"),
        ("GET", "/DEBUG/pprof/cmdline", 301, "/debug/pprof/cmdline"),
        ("HEAD", "/debug/pprof/cmdline", 405, None),
    ],
)
async def test_pprof_tree_routing(
    serve: Any, method: str, path: str, status: int, location: str | None
) -> None:
    url = await serve(make_app(_Extender(), _webhook, profiling=True))  # type: ignore[arg-type]
    got_status, headers, _ = await _ask(url, method, path)
    assert (got_status, headers.get("Location")) == (status, location)


@pytest.mark.parametrize(
    ("method", "path", "status", "body_start"),
    [
        ("GET", "/metrics", 200, "# HELP"),
        ("POST", "/metrics", 200, "# HELP"),  # promhttp answers every method
        ("GET", "/metrics/", 404, "404 page not found\n"),
        ("GET", "/healthz", 404, "404 page not found\n"),
        ("GET", "/", 404, "404 page not found\n"),
        ("GET", "/a/../metrics", 301, '<a href="/metrics">Moved Permanently</a>.'),
    ],
)
async def test_metrics_server_routing(
    serve: Any, method: str, path: str, status: int, body_start: str
) -> None:
    url = await serve(make_metrics_app(metrics_registry(SchedulerState())))
    got_status, _, text = await _ask(url, method, path)
    assert got_status == status
    assert text.startswith(body_start)


@pytest.mark.parametrize(
    ("path", "clean"),
    [
        ("/", "/"),
        ("", "/"),
        ("//healthz", "/healthz"),
        ("/a/./b/", "/a/b/"),
        ("/a/../../b", "/b"),
        ("/x/", "/x/"),
    ],
)
def test_clean_path(path: str, clean: str) -> None:
    assert clean_path(path) == clean
