"""GET /explain/{namespace}/{pod} on the real server over HTTP: served on the metrics port (the main
port may be a NodePort), on the main port only with --explain-on-main-port; text by default, JSON
with ?o=json, 404 for an unknown pod, 400 for an unknown output; the scheduler's state is untouched."""

from __future__ import annotations

from typing import Any

from tests.builders import GIB, gpu_node, gpu_pod
from vgpu_scheduler.standin.memory import MemoryCluster


async def test_explain_route(it: Any, cluster: MemoryCluster, launch: Any) -> None:
    cluster.create("nodes", gpu_node("small", gpus=1, devmem=4 * GIB))
    cluster.create("nodes", gpu_node("big", gpus=1))
    cluster.create("pods", gpu_pod("p", mem=8 * GIB), namespace="default")
    stack = await launch()
    await it.eventually(lambda: stack.process.pods.store.get("default", "p") is not None, "the pod cached")
    before = it.usage(stack.process)
    url = stack.metrics_url

    async with stack.session.get(url + "/explain/default/p") as resp:
        assert resp.status == 200 and resp.content_type == "text/plain"
        text = await resp.text()
    assert "Pod default/p: pending; fits on big now (1 of 2 nodes fit)" in text
    assert "Node small: does not fit: 1/1 CardInsufficientMemory" in text

    async with stack.session.get(url + "/explain/default/p?o=json") as resp:
        assert resp.status == 200 and resp.content_type == "application/json"
        data = await resp.json()
    assert data["node"] == "big"
    assert {n["node"]: n["fits"] for n in data["nodes"]} == {"big": True, "small": False}

    async with stack.session.get(url + "/explain/default/ghost") as resp:
        assert resp.status == 404 and await resp.text() == "pod default/ghost not found\n"
    async with stack.session.get(url + "/explain/default/p?o=yaml") as resp:
        assert resp.status == 400
    assert it.usage(stack.process) == before  # a dry run: nothing reserved


async def test_explain_is_not_on_the_main_port_by_default(
    it: Any, cluster: MemoryCluster, launch: Any
) -> None:
    cluster.create("nodes", gpu_node("big", gpus=1))
    cluster.create("pods", gpu_pod("p", mem=GIB), namespace="default")
    stack = await launch()
    await it.eventually(lambda: stack.process.pods.store.get("default", "p") is not None, "the pod cached")
    async with stack.session.get(stack.url + "/explain/default/p") as resp:
        # httprouter's answer for a path no route takes (server/gohttp.py)
        assert resp.status == 404 and await resp.text() == "404 page not found\n"
    async with stack.session.get(stack.metrics_url + "/explain/default/p") as resp:
        assert resp.status == 200


async def test_explain_on_main_port_flag(it: Any, cluster: MemoryCluster, launch: Any) -> None:
    cluster.create("nodes", gpu_node("big", gpus=1))
    cluster.create("pods", gpu_pod("p", mem=GIB), namespace="default")
    stack = await launch(explain_on_main_port=True)
    await it.eventually(lambda: stack.process.pods.store.get("default", "p") is not None, "the pod cached")
    for url in (stack.url, stack.metrics_url):
        async with stack.session.get(url + "/explain/default/p?o=json") as resp:
            assert resp.status == 200
            assert (await resp.json())["node"] == "big"
