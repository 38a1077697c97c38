"""`explain` says which quantity makes a pod unschedulable (engine, CLI, GET /explain), and refuses
an unknown policy as the server does."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from tests.builders import container, gpu_node, pod
from vgpu_scheduler.cli import main as root_main
from vgpu_scheduler.cluster.client import KubeClient
from vgpu_scheduler.config import DeviceConfig
from vgpu_scheduler.configfile import default_device_config
from vgpu_scheduler.engine.explain import PENDING, render_text
from vgpu_scheduler.explain.cli import explain_objects
from vgpu_scheduler.scheduler.options import SchedulerOptions
from vgpu_scheduler.scheduler.process import SchedulerProcess
from vgpu_scheduler.server.app import make_app
from vgpu_scheduler.standin.memory import MemoryCluster
from vgpu_scheduler.standin.transport import MemoryTransport

REFUSED = "Pod default/p: pending; the filter refuses it on every node (error below)"
GPUMEM = 'pod default/p: container c: invalid quantity nvidia.com/gpumem="12Gx" in limits: quantities must'


def bad_pod(limits: dict[str, Any]) -> dict[str, Any]:
    return pod("p", uid="uid-p", typed=True, containers=[container("c", limits=limits)], phase="Pending")


async def _explain(objects: list[dict[str, Any]]) -> Any:
    return await explain_objects(
        objects, "default", "p", opts=SchedulerOptions(), device_config=default_device_config()
    )


@pytest.mark.parametrize(
    ("limits", "named"),
    [
        ({"nvidia.com/gpu": 1, "nvidia.com/gpumem": "12Gx"}, 'nvidia.com/gpumem="12Gx"'),
        # Read as absent this pod asks for nothing: explain used to say kube-scheduler places it.
        ({"nvidia.com/gpu": "abc"}, 'nvidia.com/gpu="abc"'),
    ],
    ids=["gpumem", "gpu"],
)
async def test_explain_names_the_quantity(limits: dict[str, Any], named: str) -> None:
    exp = await _explain([gpu_node("n1"), bad_pod(limits)])
    assert exp.status == PENDING and exp.node is None
    assert exp.error.startswith(f"pod default/p: container c: invalid quantity {named} in limits: ")
    assert exp.asks == [] and exp.nodes == []
    text = render_text(exp)
    assert text.splitlines()[:2] == [REFUSED, f"  error: {exp.error}"]


def test_cli_text_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    objects = [gpu_node("n1"), bad_pod({"nvidia.com/gpu": 1, "nvidia.com/gpumem": "12Gx"})]
    snap = tmp_path / "snap.yaml"
    snap.write_text(yaml.safe_dump_all(objects))
    assert root_main(["explain", "default/p", "--snapshot", str(snap)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{REFUSED}\n  error: {GPUMEM}")
    assert root_main(["explain", "default/p", "--snapshot", str(snap), "-o", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["status"] == "pending" and data["error"].startswith(GPUMEM)


async def _no_webhook(request: web.Request) -> web.StreamResponse:
    raise AssertionError("not called")


@pytest.fixture
async def route() -> AsyncIterator[TestClient[Any, Any]]:
    """GET /explain of a scheduler process whose cache holds the bad pod."""
    cluster = MemoryCluster()
    cluster.create("nodes", gpu_node("n1"))
    cluster.create("pods", bad_pod({"nvidia.com/gpu": 1, "nvidia.com/gpumem": "12Gx"}), namespace="default")
    process = SchedulerProcess(SchedulerOptions(), DeviceConfig(), KubeClient(MemoryTransport(cluster)), "h")
    await process.start(sync_timeout=5)
    app = make_app(process.extender, _no_webhook, explainer=process.explain)
    async with TestClient(TestServer(app)) as client:
        yield client
    await process.stop()


async def test_server_route_says_it(route: TestClient[Any, Any]) -> None:
    resp = await route.get("/explain/default/p")
    assert resp.status == 200
    assert (await resp.text()).startswith(f"{REFUSED}\n  error: {GPUMEM}")
    resp = await route.get("/explain/default/p?o=json")
    assert (await resp.json())["error"].startswith(GPUMEM)


def test_cli_refuses_an_unknown_gpu_policy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    snap = tmp_path / "snap.yaml"
    snap.write_text(yaml.safe_dump_all([gpu_node("n1")]))
    assert root_main(["explain", "p", "--snapshot", str(snap), "--gpu-scheduler-policy", "binpack,nuam"]) == 2
    assert 'unknown policy "nuam" (known: binpack, spread, topology-aware' in capsys.readouterr().err
