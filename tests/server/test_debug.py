import sys

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from vgpu_scheduler.server.debug import add_pprof_routes


async def test_pprof_tree() -> None:
    app = web.Application()
    add_pprof_routes(app)
    async with TestClient(TestServer(app)) as client:
        resp = await client.get("/debug/pprof/")
        assert resp.status == 200 and "goroutine" in await resp.text()
        resp = await client.get("/debug/pprof/cmdline")
        assert (await resp.text()).split("\x00") == sys.argv
        resp = await client.get("/debug/pprof/goroutine")
        assert "task " in await resp.text()
        resp = await client.get("/debug/pprof/profile?seconds=0.05")
        assert resp.status == 200 and "function calls" in await resp.text()
        resp = await client.get("/debug/pprof/profile?seconds=x")
        assert resp.status == 400
        resp = await client.get("/debug/pprof/heap")
        assert resp.status == 200 and "Types of profiles" in await resp.text()
