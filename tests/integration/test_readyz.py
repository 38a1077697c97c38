"""GET /readyz on the real server: the listeners answer while the informers' first LIST is still
running; /readyz is 503 naming what it waits for until then, 200 with HAMi's empty body after;
/healthz is 200 throughout."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from tests.builders import gpu_node
from vgpu_scheduler.scheduler.options import SchedulerOptions
from vgpu_scheduler.server.main import start, stop
from vgpu_scheduler.standin import fakeapi
from vgpu_scheduler.standin.memory import MemoryCluster


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _holding_pod_lists(gate: asyncio.Event) -> Callable[..., Awaitable[web.StreamResponse]]:
    """A middleware that answers the pods LIST (not its watch) only once `gate` is set: a slow
    first LIST of a large cluster."""

    @web.middleware
    async def hold(request: web.Request, handler: Callable[..., Awaitable[web.StreamResponse]]) -> Any:
        if request.path == "/api/v1/pods" and request.query.get("watch") not in ("1", "true"):
            await gate.wait()
        return await handler(request)

    return hold


async def test_readyz_waits_for_the_informers(it: Any, tmp_path: Path) -> None:
    cluster = MemoryCluster(seed=5)
    cluster.create("nodes", gpu_node("gpu-a"))
    gate = asyncio.Event()
    api_app = fakeapi.make_app(cluster)
    api_app.middlewares.append(_holding_pod_lists(gate))
    api_runner = web.AppRunner(api_app, handler_cancellation=True, access_log=None)
    await api_runner.setup()
    api_site = web.TCPSite(api_runner, "127.0.0.1", 0)
    await api_site.start()
    api_port = api_runner.addresses[0][1]
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{api_port}"}}],
                "users": [{"name": "u", "user": {}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    port = _free_port()
    opts = SchedulerOptions(
        http_bind=f"127.0.0.1:{port}",
        metrics_bind_address=f"127.0.0.1:{_free_port()}",
        kubeconfig=str(kubeconfig),
    )
    starting = asyncio.create_task(start(opts))
    url = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as session:

            async def readyz() -> tuple[int, str]:
                try:
                    async with session.get(url + "/readyz") as resp:
                        return resp.status, await resp.text()
                except aiohttp.ClientConnectionError:
                    return 0, "not listening yet"

            async def waiting_for_pods() -> bool:
                return await readyz() == (503, "waiting for: pods informer sync\n")

            await it.eventually(waiting_for_pods, "503 naming the pods informer", timeout=10.0)
            async with session.get(url + "/healthz") as resp:
                assert resp.status == 200
            assert not starting.done()

            gate.set()
            running = await asyncio.wait_for(starting, 10)
            try:
                assert await readyz() == (200, "")
            finally:
                await stop(running)
    finally:
        if not starting.done():
            starting.cancel()
        await api_runner.cleanup()
