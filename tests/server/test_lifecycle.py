"""A pod's whole life through the real server routes over HTTP, on the in-memory API server:
node registration → webhook → filter → bind → the device plugin's part → deletion."""

from __future__ import annotations

import asyncio
import base64
import copy
import io
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from tests import builders
from tests.fixtures import KUBE_1_36
from vgpu_scheduler.cluster.client import KubeClient
from vgpu_scheduler.config import DeviceConfig
from vgpu_scheduler.scheduler.options import SchedulerOptions
from vgpu_scheduler.scheduler.process import SchedulerProcess
from vgpu_scheduler.server.app import make_app
from vgpu_scheduler.server.webhook import webhook_handler
from vgpu_scheduler.standin.memory import MemoryCluster
from vgpu_scheduler.standin.transport import MemoryTransport
from vgpu_scheduler.wire import keys
from vgpu_scheduler.wire.jsonpatch import apply_patch

FIXTURES = KUBE_1_36
NOW = 1_795_000_000.0


def registered_node() -> dict[str, Any]:
    node = json.loads((FIXTURES / "node" / "node.hami-registered.kubectl.json").read_text())
    node["metadata"].pop("managedFields", None)
    return dict(node)


def gpu_pod(name: str, mem: str = "1k", cores: str = "30") -> dict[str, Any]:
    """A GPU pod as a user writes it, before the webhook (no schedulerName)."""
    return builders.gpu_pod(name, mem=mem, cores=cores, scheduler_name=None)


class Harness:
    def __init__(self, cluster: MemoryCluster, process: SchedulerProcess, session: aiohttp.ClientSession):
        self.cluster = cluster
        self.process = process
        self.session = session

    async def post(self, path: str, body: Any) -> Any:
        async with self.session.post(path, json=body) as resp:
            assert resp.status == 200, await resp.text()
            return await resp.json()

    async def settle(self) -> None:
        """Let the informers see every change made so far."""
        for _ in range(50):
            await asyncio.sleep(0)
        await asyncio.sleep(0.05)

    async def admit_and_create(self, pod: dict[str, Any]) -> dict[str, Any]:
        review = {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {"uid": "u-" + pod["metadata"]["name"], "namespace": "default", "object": pod},
        }
        answer = await self.post("/webhook", review)
        assert answer["response"]["allowed"], answer
        mutated = copy.deepcopy(pod)
        if "patch" in answer["response"]:
            mutated = apply_patch(mutated, json.loads(base64.b64decode(answer["response"]["patch"])))
        created: dict[str, Any] = self.cluster.create("pods", mutated, namespace="default")
        await self.settle()
        return created

    def device_plugin_allocates(self, pod_name: str, node: str) -> None:
        """HAMi's device plugin after Allocate: entries consumed, bind-phase success, lock released."""
        self.cluster.patch(
            "pods",
            pod_name,
            {"metadata": {"annotations": {keys.VGPU_TO_ALLOCATE: ";", keys.BIND_PHASE: "success"}}},
            namespace="default",
        )
        self.cluster.patch("nodes", node, {"metadata": {"annotations": {keys.NODE_LOCK: None}}})


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    cluster = MemoryCluster()
    cluster.create("nodes", registered_node())
    client = KubeClient(MemoryTransport(cluster))
    opts = SchedulerOptions(scheduler_name="hami-scheduler", node_lock_retry_timeout=0.5)
    process = SchedulerProcess(opts, DeviceConfig(), client, "test-host", now=lambda: NOW)
    await process.start(sync_timeout=5)
    webhook = webhook_handler(opts, process.vendors, process.state.quota.admission_fits)
    app = make_app(process.extender, webhook)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    async with aiohttp.ClientSession(f"http://127.0.0.1:{port}") as session:
        yield Harness(cluster, process, session)
    await runner.cleanup()
    await process.stop()


def _usage(process: SchedulerProcess, node: str) -> list[tuple[int, int, int]]:
    view = process.state.ledger.view(node)
    assert view is not None
    return [(u.used, u.usedmem, u.usedcores) for u in view.usage]


async def test_whole_life_of_a_gpu_pod(harness: Harness) -> None:
    pod = await harness.admit_and_create(gpu_pod("p1"))
    assert pod["spec"]["schedulerName"] == "hami-scheduler"
    uid = pod["metadata"]["uid"]

    result = await harness.post("/filter", {"Pod": pod, "NodeNames": ["gpu-node-1", "cpu-node-1"]})
    assert result == {
        "Nodes": None,
        "NodeNames": ["gpu-node-1"],
        "FailedNodes": None,
        "FailedAndUnresolvableNodes": None,
        "Error": "",
    }
    # Reserved in the ledger, nothing written to the API yet.
    assert sorted(_usage(harness.process, "gpu-node-1")) == [(0, 0, 0), (1, 1000, 30)]
    assert keys.VGPU_NODE not in (
        harness.cluster.get("pods", "p1", "default")["metadata"].get("annotations") or {}
    )

    bind = {"PodName": "p1", "PodNamespace": "default", "PodUID": uid, "Node": "gpu-node-1"}
    assert await harness.post("/bind", bind) == {"Error": ""}
    stored = harness.cluster.get("pods", "p1", "default")
    annotations = stored["metadata"]["annotations"]
    assert stored["spec"]["nodeName"] == "gpu-node-1"
    assert annotations[keys.VGPU_NODE] == "gpu-node-1"
    assert stored["metadata"]["labels"][keys.VGPU_NODE] == "gpu-node-1"
    assert annotations[keys.VGPU_TIME] == str(int(NOW))
    assert annotations[keys.BIND_PHASE] == "allocating"
    assert annotations[keys.BIND_TIME] == str(int(NOW))
    allocation = annotations[keys.VGPU_ALLOCATED]
    assert annotations[keys.VGPU_TO_ALLOCATE] == allocation
    uuid = allocation.split(",")[0]
    assert allocation == f"{uuid},NVIDIA,1000,30:;"
    lock = harness.cluster.get("nodes", "gpu-node-1")["metadata"]["annotations"][keys.NODE_LOCK]
    assert lock.endswith(",default,p1")

    harness.device_plugin_allocates("p1", "gpu-node-1")
    await harness.settle()
    assert sorted(_usage(harness.process, "gpu-node-1")) == [(0, 0, 0), (1, 1000, 30)]

    # A graceful delete only marks the pod Terminating: it keeps its devices until it is gone.
    harness.cluster.delete("pods", "p1", namespace="default")
    await harness.settle()
    assert sorted(_usage(harness.process, "gpu-node-1")) == [(0, 0, 0), (1, 1000, 30)]
    harness.cluster.delete("pods", "p1", namespace="default", grace_period_seconds=0)
    await harness.settle()
    assert _usage(harness.process, "gpu-node-1") == [(0, 0, 0), (0, 0, 0)]


async def test_filter_reports_unregistered_and_unfit_nodes(harness: Harness) -> None:
    pod = await harness.admit_and_create(gpu_pod("big", mem="99999"))
    result = await harness.post("/filter", {"Pod": pod, "NodeNames": ["gpu-node-1", "cpu-node-1"]})
    assert result["NodeNames"] is None
    assert result["FailedNodes"] == {
        "gpu-node-1": "2/2 CardInsufficientMemory",
        "cpu-node-1": "node unregistered",
    }


async def test_pod_without_devices_is_echoed(harness: Harness) -> None:
    pod = builders.pod("plain", uid="x", containers=[{}])
    result = await harness.post("/filter", {"Pod": pod, "NodeNames": ["a", "b"]})
    assert result["NodeNames"] == ["a", "b"] and result["FailedNodes"] is None


@pytest.mark.parametrize(
    ("args", "node_names", "nodes"),
    [
        pytest.param({"NodeNames": ["a", "b"]}, ["a", "b"], None, id="node-names-echoed"),
        pytest.param({"NodeNames": []}, [], None, id="empty-node-names-echoed"),
        pytest.param({}, None, None, id="no-lists-echo-null"),
        # Deliberate difference: HAMi answers neither list here, which strands the pod.
        pytest.param(
            {"Nodes": {"items": [registered_node()]}},
            None,
            {"metadata": {}, "items": [registered_node()]},
            id="nodes-echoed",
        ),
    ],
)
async def test_pod_without_devices_is_echoed_as_sent(
    harness: Harness, args: dict[str, Any], node_names: list[str] | None, nodes: dict[str, Any] | None
) -> None:
    pod = builders.pod("plain", uid="x", containers=[{}])
    result = await harness.post("/filter", {"Pod": pod, **args})
    assert result == {
        "Nodes": nodes,
        "NodeNames": node_names,
        "FailedNodes": None,
        "FailedAndUnresolvableNodes": None,
        "Error": "",
    }


async def test_simulation_path_answers_with_node_objects(harness: Harness) -> None:
    """§5.7 simulation path: `Nodes` in, the chosen node object out, every failing node listed."""
    template = registered_node()
    bare = builders.node("bare")
    pod = gpu_pod("sim")
    pod["metadata"]["uid"] = "sim-uid"
    result = await harness.post("/filter", {"Pod": pod, "Nodes": {"items": [bare, template]}})
    assert result == {
        "Nodes": {"metadata": {}, "items": [template]},
        "NodeNames": None,
        "FailedNodes": {"bare": "node unregistered"},
        "FailedAndUnresolvableNodes": None,
        "Error": "",
    }
    result = await harness.post("/filter", {"Pod": pod, "Nodes": {"items": [template]}})
    assert result["Nodes"] == {"metadata": {}, "items": [template]} and result["FailedNodes"] == {}
    huge = gpu_pod("sim-huge", mem="99999")
    result = await harness.post("/filter", {"Pod": huge, "Nodes": {"items": [template, bare]}})
    assert result == {
        "Nodes": None,
        "NodeNames": None,
        "FailedNodes": {"bare": "node unregistered", "gpu-node-1": "2/2 CardInsufficientMemory"},
        "FailedAndUnresolvableNodes": None,
        "Error": "",
    }
    # Nothing was reserved: the template nodes are not the live cluster.
    assert _usage(harness.process, "gpu-node-1") == [(0, 0, 0), (0, 0, 0)]


async def test_bad_requests_get_documented_answers(harness: Harness) -> None:
    session = harness.session
    async with session.post("/filter", data=b"") as resp:
        assert resp.status == 400
        assert await resp.text() == "Please send a request body\n"
    async with session.post("/filter", data=b"{not json") as resp:
        assert resp.status == 200
        assert (await resp.json())["Error"].startswith("invalid JSON")
    async with session.post("/filter", data=b'{"NodeNames": ["a"]}') as resp:
        assert (await resp.json())["Error"] == "extender args missing pod"
    oversized = io.BytesIO(b'{"Pod": {"x": ' + b" " * (2 << 20) + b"1}}")
    async with session.post("/filter", data=oversized) as resp:
        assert resp.status == 200
        assert (await resp.json())["Error"] == "unexpected EOF"
    async with session.post(
        "/bind", data=b'{"PodName": "nope", "PodNamespace": "default", "Node": "gpu-node-1"}'
    ) as resp:
        assert (await resp.json())["Error"] == 'pod "nope" not found'
    # The server is still serving.
    async with session.get("/healthz") as resp:
        assert resp.status == 200 and await resp.text() == ""


async def test_bind_after_restart_refits(harness: Harness) -> None:
    pod = await harness.admit_and_create(gpu_pod("p2"))
    # No filter in this process's life (as after a restart): bind must fit again, not bind blind.
    bind = {
        "PodName": "p2",
        "PodNamespace": "default",
        "PodUID": pod["metadata"]["uid"],
        "Node": "gpu-node-1",
    }
    assert await harness.post("/bind", bind) == {"Error": ""}
    annotations = harness.cluster.get("pods", "p2", "default")["metadata"]["annotations"]
    assert annotations[keys.VGPU_ALLOCATED].endswith(",NVIDIA,1000,30:;")


async def test_bind_refuses_a_pod_that_no_longer_fits(harness: Harness) -> None:
    pod = await harness.admit_and_create(gpu_pod("huge", mem="99999"))
    bind = {
        "PodName": "huge",
        "PodNamespace": "default",
        "PodUID": pod["metadata"]["uid"],
        "Node": "gpu-node-1",
    }
    answer = await harness.post("/bind", bind)
    assert "no longer fits node gpu-node-1" in answer["Error"]
    assert "nodeName" not in harness.cluster.get("pods", "huge", "default")["spec"]


async def test_filter_for_a_pod_that_exists_nowhere_reserves_nothing(harness: Harness) -> None:
    ghost = gpu_pod("ghost")
    ghost["metadata"]["uid"] = "ghost-uid"  # never created: no watch event will ever free it
    result = await harness.post("/filter", {"Pod": ghost, "NodeNames": ["gpu-node-1"]})
    assert result["NodeNames"] is None and result["Error"] == 'pods "ghost" not found'
    assert _usage(harness.process, "gpu-node-1") == [(0, 0, 0), (0, 0, 0)]
    assert harness.process.extender.stats.filters_unknown_pod == 1


async def test_filter_waits_briefly_for_the_watch_to_deliver_the_pod(harness: Harness) -> None:
    pod = gpu_pod("late")
    pod["metadata"]["uid"] = "late-uid"
    answer = asyncio.ensure_future(harness.post("/filter", {"Pod": pod, "NodeNames": ["gpu-node-1"]}))
    await asyncio.sleep(0.05)
    harness.cluster.seed_from_list([pod])  # the watch delivers it while the filter waits
    assert (await answer)["NodeNames"] == ["gpu-node-1"]


async def test_reservation_of_a_vanished_pod_is_swept(harness: Harness) -> None:
    pod = await harness.admit_and_create(gpu_pod("vanishing"))
    result = await harness.post("/filter", {"Pod": pod, "NodeNames": ["gpu-node-1"]})
    assert result["NodeNames"] == ["gpu-node-1"]
    # The pod disappears without a delete event reaching us (e.g. a watch gap before a relist).
    harness.process.pods.store.remove("default/vanishing")
    extender = harness.process.extender
    assert extender.sweep_reservations(harness.process._pod_exists, max_age=60) == 0  # too young
    extender.now = lambda: NOW + 61
    assert extender.sweep_reservations(harness.process._pod_exists, max_age=60) == 1
    assert _usage(harness.process, "gpu-node-1") == [(0, 0, 0), (0, 0, 0)]


async def test_reservation_of_a_live_pod_is_kept(harness: Harness) -> None:
    pod = await harness.admit_and_create(gpu_pod("alive"))
    await harness.post("/filter", {"Pod": pod, "NodeNames": ["gpu-node-1"]})
    extender = harness.process.extender
    extender.now = lambda: NOW + 3600
    assert extender.sweep_reservations(harness.process._pod_exists, max_age=60) == 0
    assert sorted(_usage(harness.process, "gpu-node-1")) == [(0, 0, 0), (1, 1000, 30)]


@pytest.mark.parametrize(
    ("gpu_in", "locks"),
    [("containers", True), ("initContainers", False)],
)
async def test_node_lock_only_for_regular_container_requests(
    harness: Harness, gpu_in: str, locks: bool
) -> None:
    """§6.1 step 3: a backend locks the node only for a pod whose regular containers request it."""
    pod = gpu_pod(f"lock-{gpu_in.lower()}")
    if gpu_in == "initContainers":
        gpu = pod["spec"]["containers"][0]
        pod["spec"]["initContainers"] = [gpu]
        pod["spec"]["containers"] = [{"name": "app", "image": "busybox"}]
    pod = await harness.admit_and_create(pod)
    result = await harness.post("/filter", {"Pod": pod, "NodeNames": ["gpu-node-1"]})
    assert result["NodeNames"] == ["gpu-node-1"]
    meta = pod["metadata"]
    bound = await harness.post(
        "/bind",
        {"PodName": meta["name"], "PodNamespace": "default", "PodUID": meta["uid"], "Node": "gpu-node-1"},
    )
    assert bound == {"Error": ""}
    lock = (harness.cluster.get("nodes", "gpu-node-1")["metadata"].get("annotations") or {}).get(
        keys.NODE_LOCK
    )
    assert (lock is not None and lock.endswith(f",default,{meta['name']}")) is locks
    assert (lock is None) is not locks
