"""Integration fixtures: the real server (`server.main.start`) against the fake API over real HTTP.

Every stack is the production path end to end: a kubeconfig file pointing at `fakeapi.serve()` on
127.0.0.1:0 → `kubeconfig.make_transport` (HttpTransport, token auth, rate limiter) → reflectors →
SchedulerProcess → aiohttp servers on 127.0.0.1:0 (main and metrics). Tests talk to it with aiohttp.

Helpers live on the `It` class, handed out by the `it` fixture (conftest modules cannot be imported
under --import-mode=importlib).
"""

from __future__ import annotations

import asyncio
import base64
import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from vgpu_scheduler.engine.state import SchedulerState
from vgpu_scheduler.scheduler.options import SchedulerOptions
from vgpu_scheduler.scheduler.process import SchedulerProcess
from vgpu_scheduler.server.main import Running, start, stop
from vgpu_scheduler.standin.embedded.deviceplugin import BackgroundDevicePlugin, attach_device_plugin
from vgpu_scheduler.standin.fakeapi import FakeApiServer, serve
from vgpu_scheduler.standin.memory import MemoryCluster
from vgpu_scheduler.wire import keys
from vgpu_scheduler.wire.allocation import decode_pod_devices
from vgpu_scheduler.wire.jsonpatch import apply_patch

TOKEN = "integration-token"
MIB_BYTES = 1024 * 1024

Obj = dict[str, Any]
Usage = tuple[int, int, int]  # (used, usedmem, usedcores) of one device


class It:
    """Admission reviews, polling and ledger/metrics readers shared by the integration tests
    (the objects come from tests/builders.py)."""

    TOKEN = TOKEN

    # -- admission ------------------------------------------------------------------------------

    @staticmethod
    def review(pod: Mapping[str, Any], version: str = "v1", uid: str = "") -> Obj:
        meta = pod.get("metadata") or {}
        return {
            "apiVersion": f"admission.k8s.io/{version}",
            "kind": "AdmissionReview",
            "request": {
                "uid": uid or f"review-{meta.get('name')}",
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "namespace": meta.get("namespace", "default"),
                "operation": "CREATE",
                "object": pod,
            },
        }

    @staticmethod
    def apply_review(pod: Obj, answer: Mapping[str, Any]) -> Obj:
        response = answer["response"]
        if "patch" not in response:
            return pod
        assert response["patchType"] == "JSONPatch"
        mutated: Obj = apply_patch(pod, json.loads(base64.b64decode(response["patch"])))
        return mutated

    # -- polling --------------------------------------------------------------------------------

    @staticmethod
    async def eventually(
        check: Callable[[], bool] | Callable[[], Awaitable[bool]], what: str, timeout: float = 5.0
    ) -> None:
        """Poll `check` until true; fail with `what` after `timeout` (generous: CI machines are slow)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            result = check()
            if not isinstance(result, bool):
                result = await result
            if result:
                return
            if loop.time() > deadline:
                pytest.fail(f"timed out waiting for {what}")
            await asyncio.sleep(0.01)

    @staticmethod
    def free_port() -> int:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port: int = s.getsockname()[1]
            return port

    # -- reading the state ----------------------------------------------------------------------

    @staticmethod
    def usage(process: SchedulerProcess) -> dict[str, list[Usage]]:
        """Per registered node, per device: (used, usedmem, usedcores) from the live ledger."""
        out: dict[str, list[Usage]] = {}
        for name in sorted(process.state.ledger.node_names()):
            view = process.state.ledger.view(name)
            assert view is not None
            out[name] = [(u.used, u.usedmem, u.usedcores) for u in view.usage]
        return out

    @staticmethod
    def rebuilt_usage(cluster: MemoryCluster, process: SchedulerProcess) -> dict[str, list[Usage]]:
        """What a fresh ledger says: the same node inventories, every pod of the cluster fed once."""
        fresh = SchedulerState(process.vendors)
        for name in process.state.ledger.node_names():
            view = process.state.ledger.view(name)
            assert view is not None
            fresh.set_node_devices(name, list(view.devices), view.cordoned, view.annotations)
        for pod in cluster.objects("pods"):
            fresh.on_pod(pod)
        out: dict[str, list[Usage]] = {}
        for name in sorted(fresh.ledger.node_names()):
            view = fresh.ledger.view(name)
            assert view is not None
            out[name] = [(u.used, u.usedmem, u.usedcores) for u in view.usage]
        return out

    @staticmethod
    def annotated_usage(pods: Iterable[Mapping[str, Any]]) -> dict[str, Usage]:
        """Per device UUID: Σ pods, Σ MiB, Σ cores read from `hami.io/vgpu-devices-allocated` alone."""
        out: dict[str, Usage] = {}
        for pod in pods:
            annotations = (pod.get("metadata") or {}).get("annotations") or {}
            if keys.VGPU_ALLOCATED not in annotations:
                continue
            per_uuid: dict[str, tuple[int, int]] = {}
            for containers in decode_pod_devices(annotations).values():
                for devices in containers:
                    for d in devices:
                        mem, cores = per_uuid.get(d.uuid, (0, 0))
                        per_uuid[d.uuid] = (mem + d.usedmem, cores + d.usedcores)
            for uuid, (mem, cores) in per_uuid.items():
                n, m, c = out.get(uuid, (0, 0, 0))
                out[uuid] = (n + 1, m + mem, c + cores)
        return out

    @staticmethod
    def parse_metrics(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
        """Sample name → [(labels, value)] from the Prometheus text format."""
        out: dict[str, list[tuple[dict[str, str], float]]] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                out.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
        return out


@pytest.fixture
def it() -> type[It]:
    return It


@dataclass
class Stack:
    """One running scheduler server and an HTTP session to it."""

    running: Running
    url: str
    metrics_url: str
    session: aiohttp.ClientSession

    @property
    def process(self) -> SchedulerProcess:
        return self.running.process

    async def post(self, path: str, body: Any) -> Any:
        async with self.session.post(self.url + path, json=body) as resp:
            assert resp.status == 200, await resp.text()
            assert resp.content_type == "application/json"
            return await resp.json()

    async def filter(self, pod: Mapping[str, Any], nodes: list[str]) -> Obj:
        result: Obj = await self.post("/filter", {"Pod": pod, "NodeNames": nodes})
        return result

    async def bind(self, pod: Mapping[str, Any], node: str) -> str:
        meta = pod["metadata"]
        args = {
            "PodName": meta["name"],
            "PodNamespace": meta["namespace"],
            "PodUID": meta["uid"],
            "Node": node,
        }
        result = await self.post("/bind", args)
        assert set(result) == {"Error"}, result
        error: str = result["Error"]
        return error

    async def healthz(self) -> int:
        async with self.session.get(self.url + "/healthz") as resp:
            return resp.status

    async def metrics(self) -> dict[str, list[tuple[dict[str, str], float]]]:
        async with self.session.get(self.metrics_url + "/metrics") as resp:
            assert resp.status == 200
            return It.parse_metrics(await resp.text())


@dataclass
class Launcher:
    """Starts scheduler servers on the test's cluster; every one is stopped at teardown."""

    cluster: MemoryCluster
    api: FakeApiServer
    kubeconfig: Path
    stacks: list[Stack] = field(default_factory=list)

    def options(self, **overrides: Any) -> SchedulerOptions:
        base = SchedulerOptions(
            http_bind="127.0.0.1:0",
            metrics_bind_address="127.0.0.1:0",
            kubeconfig=str(self.kubeconfig),
            scheduler_name="hami-scheduler",
            node_lock_retry_timeout=10.0,
        )
        return replace(base, **overrides)

    async def __call__(self, *, scheme: str = "http", ssl: Any = None, **overrides: Any) -> Stack:
        running = await start(self.options(**overrides))
        metrics_runner, main_runner = running.runners
        main_port = main_runner.addresses[0][1]
        metrics_port = metrics_runner.addresses[0][1]
        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ssl) if ssl is not None else None)
        stack = Stack(
            running, f"{scheme}://127.0.0.1:{main_port}", f"http://127.0.0.1:{metrics_port}", session
        )
        self.stacks.append(stack)
        return stack


def write_kubeconfig(path: Path, server: str, token: str) -> Path:
    path.write_text(
        json.dumps(  # JSON is YAML: the real loader reads it
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "fake", "cluster": {"server": server}}],
                "users": [{"name": "scheduler", "user": {"token": token}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "scheduler"}}],
                "current-context": "fake",
            }
        )
    )
    return path


@pytest.fixture
def cluster() -> MemoryCluster:
    return MemoryCluster(seed=11)


@pytest.fixture
async def api(cluster: MemoryCluster) -> AsyncIterator[FakeApiServer]:
    server = await serve(cluster, "127.0.0.1", 0, token=TOKEN)
    try:
        yield server
    finally:
        await server.close()


@pytest.fixture
async def launch(cluster: MemoryCluster, api: FakeApiServer, tmp_path: Path) -> AsyncIterator[Launcher]:
    launcher = Launcher(cluster, api, write_kubeconfig(tmp_path / "kubeconfig", api.url, TOKEN))
    try:
        yield launcher
    finally:
        for stack in reversed(launcher.stacks):
            await stack.session.close()
            await stop(stack.running)


@pytest.fixture
async def plugin(cluster: MemoryCluster) -> AsyncIterator[BackgroundDevicePlugin]:
    """HAMi's device plugin + kubelet on every node: consumes to-allocate, bind-phase success, unlock."""
    runner = attach_device_plugin(cluster)
    try:
        yield runner
    finally:
        await runner.stop()
