"""Benchmark of POST /filter and /bind through real HTTP on loopback.

    .venv/bin/python bench/filter_http.py [--nodes 500 5000] [--requests 1000] [--binds 200]

A child process runs the real server stack (SchedulerProcess + routes) on the embedded cluster,
seeded with N nodes × 8 GPUs (count 20, 80 GiB) and existing allocations as real pod objects;
the parent plays kube-scheduler: one request at a time (its scheduling cycle is serial), every
node name a candidate, keep-alive connection. Then it schedules pods end to end (filter + bind,
with the simulated device plugin releasing node locks) and reports the API calls one scheduled
pod costs. After the table, the server's CPU time per /filter call (its event-loop thread), the
figure to compare on a busy machine, where the client's wall times include waits for a core.
Figures only; nothing here is a pass/fail test.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import multiprocessing as mp
import random
import statistics
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

# The engine bench's builders, loaded by path (bench/ is no package).
BENCH_DIR = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("bench_engine", BENCH_DIR / "engine.py")
assert _spec is not None and _spec.loader is not None
bench_engine = importlib.util.module_from_spec(_spec)
sys.modules["bench_engine"] = bench_engine  # dataclasses look their module up
_spec.loader.exec_module(bench_engine)
ALLOCS_PER_GPU: int = bench_engine.ALLOCS_PER_GPU
GPUS_PER_NODE: int = bench_engine.GPUS_PER_NODE
existing_pod = bench_engine.existing_pod
gpu = bench_engine.gpu
request_pod = bench_engine.request_pod

from vgpu_scheduler.wire import keys  # noqa: E402
from vgpu_scheduler.wire.inventory import encode_node_devices_json  # noqa: E402


def node_object(n: int) -> dict[str, Any]:
    devices = [gpu(n, i) for i in range(GPUS_PER_NODE)]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": f"node-{n:05d}",
            "labels": {"gpu": "on"},
            "annotations": {keys.NODE_NVIDIA_REGISTER: encode_node_devices_json(devices)},
        },
        "status": {"allocatable": {"nvidia.com/gpu": str(20 * GPUS_PER_NODE), "cpu": "64", "pods": "1000"}},
    }


def bind_pod(i: int) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "2000", "nvidia.com/gpucores": "10"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"bind-{i}", "namespace": "bench", "uid": f"bench-uid-{i}"},
        "spec": {
            "schedulerName": "hami-scheduler",
            "containers": [{"name": "main", "image": "cuda", "resources": {"limits": limits}}],
        },
    }


class CountingTransport:
    """Counts API requests by verb and resource (what one scheduled pod costs)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.counts: Counter[str] = Counter()

    async def request(self, method: str, path: str, **kwargs: Any) -> Any:
        self.counts[f"{method} {_resource(path)}"] += 1
        return await self.inner.request(method, path, **kwargs)

    def stream(self, path: str, params: Any = None) -> Any:
        return self.inner.stream(path, params)

    def with_own_rate_limit(self, *limits: Any) -> CountingTransport:
        """The event recorder's client: its calls are counted with the others."""
        sibling = CountingTransport(self.inner.with_own_rate_limit(*limits))
        sibling.counts = self.counts
        return sibling

    async def close(self) -> None:
        await self.inner.close()


def _resource(path: str) -> str:
    parts = [p for p in path.split("/") if p]
    if "binding" in parts:
        return "pods/binding"
    for kind in ("pods", "nodes", "events", "resourcequotas", "leases"):
        if kind in parts:
            return kind
    return path


def serve_child(
    n_nodes: int, allocs: int, binds: int, requests: int, lock_aware: bool, port_queue: Any
) -> None:
    asyncio.run(_serve_child(n_nodes, allocs, binds, requests, lock_aware, port_queue))


def pending_pod(k: int) -> dict[str, Any]:
    """The API object behind filter request k: the filter places only pods the informer knows."""
    meta = {"name": f"req-{k}", "namespace": "bench", "uid": f"req-uid-{k}"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": [{"name": "main"}]}}


async def _serve_child(
    n_nodes: int, allocs: int, binds: int, requests: int, lock_aware: bool, port_queue: Any
) -> None:
    from aiohttp import web

    from vgpu_scheduler.cluster.client import KubeClient
    from vgpu_scheduler.config import DeviceConfig
    from vgpu_scheduler.gctuning import settle_heap
    from vgpu_scheduler.scheduler.options import SchedulerOptions
    from vgpu_scheduler.scheduler.process import SchedulerProcess
    from vgpu_scheduler.server.app import make_app
    from vgpu_scheduler.server.warm import LedgerWarmer
    from vgpu_scheduler.server.webhook import webhook_handler
    from vgpu_scheduler.standin.embedded.deviceplugin import attach_device_plugin
    from vgpu_scheduler.standin.memory import MemoryCluster
    from vgpu_scheduler.standin.transport import MemoryTransport

    rng = random.Random(1)
    cluster = MemoryCluster()
    objects: list[dict[str, Any]] = [node_object(n) for n in range(n_nodes)]
    for n in range(n_nodes):
        for i in range(GPUS_PER_NODE):
            for k in range(allocs):
                pod = existing_pod(rng, n, i, k)
                pod.update(apiVersion="v1", kind="Pod")
                objects.append(pod)
    objects.extend(bind_pod(i) for i in range(binds))
    objects.extend(pending_pod(k) for k in range(requests))
    cluster.seed_from_list(objects)
    counting = CountingTransport(MemoryTransport(cluster))
    opts = SchedulerOptions(scheduler_name="hami-scheduler", lock_aware_placement=lock_aware)
    process = SchedulerProcess(opts, DeviceConfig(), KubeClient(counting), "bench-host")
    t0 = time.perf_counter()
    await process.start()
    # The first pass stamps the handshake on every node in the background; let those writes
    # finish so they are not counted as the API cost of the pods scheduled below.
    await process.registration.flush_writes()
    sync_s = time.perf_counter() - t0
    plugin = attach_device_plugin(cluster, process.vendors)
    # The device-plugin stand-in lists every pod too: let it finish before any request is timed (it
    # runs in this process only because the cluster is embedded).
    await plugin.reflector.wait_synced()
    # As server.main.start() does after the first sync: fill the ledger's caches, settle the heap,
    # keep the caches filled.
    warmer = LedgerWarmer(process.state.ledger, process.state.vendors.keys)
    await warmer.warm_pending()
    settle_heap()
    warming = asyncio.create_task(warmer.run())
    app = make_app(process.extender, webhook_handler(opts, process.vendors))
    # The server's CPU time per /filter call (this thread: the event loop), which a busy machine
    # inflates far less than the client's wall time.
    filter_cpu_ms: list[float] = []

    @web.middleware
    async def cpu_timer(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        if request.path != "/filter":
            return await handler(request)
        start = time.thread_time()
        try:
            return await handler(request)
        finally:
            filter_cpu_ms.append((time.thread_time() - start) * 1000)

    app.middlewares.insert(0, cpu_timer)

    async def counts(_request: web.Request) -> web.Response:
        return web.json_response({"counts": dict(counting.counts), "sync_s": sync_s, "cpu_ms": filter_cpu_ms})

    async def reset(_request: web.Request) -> web.Response:
        counting.counts.clear()
        filter_cpu_ms.clear()
        return web.json_response({})

    app.router.add_get("/bench/counts", counts)
    app.router.add_post("/bench/reset", reset)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port_queue.put(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]
    await asyncio.Event().wait()
    warming.cancel()
    await plugin.stop()


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def drive(port: int, n_nodes: int, requests: int, binds: int) -> dict[str, Any]:
    import aiohttp

    rng = random.Random(7)
    names = [f"node-{n:05d}" for n in range(n_nodes)]
    bodies = []
    for k in range(requests):
        pod = request_pod(rng, k, "binpack" if k % 2 else "spread")
        bodies.append(json.dumps({"Pod": pod, "NodeNames": names}).encode())
    base = f"http://127.0.0.1:{port}"
    latencies: list[float] = []
    async with aiohttp.ClientSession(base) as session:
        for body in bodies[:50]:  # warm-up
            async with session.post("/filter", data=body, headers={"Content-Type": "application/json"}) as r:
                await r.read()
        await session.post("/bench/reset")
        start = time.perf_counter()
        for body in bodies:
            t = time.perf_counter()
            async with session.post("/filter", data=body, headers={"Content-Type": "application/json"}) as r:
                answer = await r.json()
            latencies.append((time.perf_counter() - t) * 1000)
            assert answer["Error"] == "" and answer["NodeNames"], answer
        wall = time.perf_counter() - start

        # A pod no node can hold: every node's reason in FailedNodes (first: nothing cached).
        huge = request_pod(rng, requests - 1, "binpack")
        huge["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem"] = "200000"
        huge_body = json.dumps({"Pod": huge, "NodeNames": names}).encode()
        nofit: list[float] = []
        for _ in range(4):
            t = time.perf_counter()
            async with session.post("/filter", data=huge_body) as r:
                answer = await r.json()
            nofit.append((time.perf_counter() - t) * 1000)
            assert not answer["NodeNames"] and len(answer["FailedNodes"]) == n_nodes, answer["Error"]
        async with session.get("/bench/counts") as r:
            cpu_ms = (await r.json())["cpu_ms"]

        await session.post("/bench/reset")
        scheduled = 0
        bind_start = time.perf_counter()
        for i in range(binds):
            body = json.dumps({"Pod": bind_pod(i), "NodeNames": names}).encode()
            async with session.post("/filter", data=body) as r:
                node = (await r.json())["NodeNames"][0]
            args = {"PodName": f"bind-{i}", "PodNamespace": "bench", "PodUID": f"bench-uid-{i}", "Node": node}
            async with session.post("/bind", json=args) as r:
                error = (await r.json())["Error"]
            assert error == "", error
            scheduled += 1
        bind_wall = time.perf_counter() - bind_start
        async with session.get("/bench/counts") as r:
            info = await r.json()
    return {
        "latencies": latencies,
        "wall": wall,
        "scheduled": scheduled,
        "bind_wall": bind_wall,
        "nofit": nofit,
        "counts": info["counts"],
        "sync_s": info["sync_s"],
        "cpu_ms": cpu_ms,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[500, 5000])
    parser.add_argument("--allocs", type=int, default=ALLOCS_PER_GPU, help="existing allocations per GPU")
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument(
        "--no-lock-aware",
        action="store_true",
        help="serve with --lock-aware-placement=false (filters here are not followed by binds, so "
        "with it on every earlier reservation marks its node as about to be locked)",
    )
    parser.add_argument("--binds", type=int, default=200)
    args = parser.parse_args()
    print(
        f"python {sys.version.split()[0]}, {GPUS_PER_NODE} GPUs per node, {args.allocs} allocations per GPU"
    )
    print(
        "| NodeNames | existing pods | sync s | filter p50 ms | p99 ms | filter req/s"
        " | no-fit first / repeat ms | scheduled pods/s | API calls per scheduled pod |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    ctx = mp.get_context("spawn")
    cpu_lines = []
    for n_nodes in args.nodes:
        queue = ctx.Queue()
        child_args = (n_nodes, args.allocs, args.binds, args.requests, not args.no_lock_aware, queue)
        child = ctx.Process(target=serve_child, args=child_args, daemon=True)
        child.start()
        try:
            port = queue.get(timeout=900)
            result = asyncio.run(drive(port, n_nodes, args.requests, args.binds))
        finally:
            child.terminate()
            child.join()
        lat = result["latencies"]
        calls = sum(result["counts"].values()) / max(result["scheduled"], 1)
        detail = ", ".join(
            f"{k}: {v / max(result['scheduled'], 1):.2f}" for k, v in sorted(result["counts"].items())
        )
        print(
            f"| {n_nodes} | {n_nodes * GPUS_PER_NODE * args.allocs} | {result['sync_s']:.1f} "
            f"| {statistics.median(lat):.2f} | {pct(lat, 0.99):.2f} | {len(lat) / result['wall']:.0f} "
            f"| {result['nofit'][0]:.1f} / {statistics.median(result['nofit'][1:]):.1f} "
            f"| {result['scheduled'] / result['bind_wall']:.0f} | {calls:.2f} ({detail}) |"
        )
        fitting, nofit = result["cpu_ms"][: len(lat)], result["cpu_ms"][len(lat) :]
        cpu_lines.append(
            f"{n_nodes} NodeNames: filter p50 {statistics.median(fitting):.2f} / "
            f"p99 {pct(fitting, 0.99):.2f} ms, "
            f"no-fit first {nofit[0]:.1f} / repeat {statistics.median(nofit[1:]):.1f} ms"
        )
    # On a busy machine the client's wall times include waits for a core; these do far less.
    print("Server CPU time per /filter (the event loop thread, request read to response built):")
    for line in cpu_lines:
        print(f"  {line}")


if __name__ == "__main__":
    main()
