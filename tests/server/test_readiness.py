"""/readyz: 503 naming every informer not synced yet (the Lease one only with --leader-elect), then
200 with HAMi's empty body; /healthz 200 all along."""

from __future__ import annotations

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from tests.builders import gpu_node
from vgpu_scheduler.cluster.client import KubeClient
from vgpu_scheduler.config import DeviceConfig
from vgpu_scheduler.scheduler.options import SchedulerOptions
from vgpu_scheduler.scheduler.process import SchedulerProcess
from vgpu_scheduler.server.app import make_app
from vgpu_scheduler.server.readiness import readyz_handler, waiting_for
from vgpu_scheduler.standin.memory import MemoryCluster
from vgpu_scheduler.standin.transport import MemoryTransport


async def _no_webhook(request: web.Request) -> web.StreamResponse:
    raise AssertionError("not called")


def _process(**opts: object) -> SchedulerProcess:
    cluster = MemoryCluster()
    cluster.create("nodes", gpu_node("n1"))
    return SchedulerProcess(
        SchedulerOptions(**opts),  # type: ignore[arg-type]
        DeviceConfig(),
        KubeClient(MemoryTransport(cluster)),
        "h",
        pod_name="h",
        pod_namespace="kube-system",
    )


async def test_readyz_names_what_it_waits_for_then_answers_200() -> None:
    process = _process()
    app = make_app(process.extender, _no_webhook, readyz=readyz_handler(process))
    async with TestClient(TestServer(app)) as client:
        resp = await client.get("/readyz")
        assert resp.status == 503
        assert await resp.text() == (
            "waiting for: nodes informer sync, pods informer sync, resourcequotas informer sync\n"
        )
        assert (await client.get("/healthz")).status == 200
        await process.start(sync_timeout=5)
        try:
            resp = await client.get("/readyz")
            assert resp.status == 200 and await resp.read() == b""
        finally:
            await process.stop()


async def test_the_lease_informer_counts_only_with_leader_election() -> None:
    assert "leases informer sync" not in waiting_for(_process())
    process = _process(
        leader_elect=True, leader_elect_resource_name="s", leader_elect_resource_namespace="kube-system"
    )
    assert waiting_for(process)[-1] == "leases informer sync"
    await process.start(sync_timeout=5)
    try:
        assert waiting_for(process) == []
    finally:
        await process.stop()
