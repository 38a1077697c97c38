"""Filters for pods that exist nowhere cannot starve real pods (issue 8 item 6).

Before: 200 such filters reserved devices in memory (no API call at filter time) and held whole GPUs
until the reservation sweep, refusing real pods meanwhile. Now a filter places only a pod the
informer knows (by uid); the others are answered with an Error and reserve nothing."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.builders import gpu_node, gpu_pod
from vgpu_scheduler.standin.memory import MemoryCluster

NODES = ["n1", "n2"]


async def test_a_flood_of_filters_for_unknown_pods_reserves_nothing(
    it: Any, cluster: MemoryCluster, launch: Any
) -> None:
    for name in NODES:
        cluster.create("nodes", gpu_node(name, gpus=2, count=1))  # 4 whole GPUs in all
    stack = await launch()

    def ghost(i: int) -> dict[str, Any]:
        pod = gpu_pod(f"ghost-{i}")
        pod["metadata"]["uid"] = f"ghost-uid-{i}"
        return pod

    answers = await asyncio.gather(*(stack.filter(ghost(i), NODES) for i in range(200)))
    assert {a["Error"] for a in answers} == {f'pods "ghost-{i}" not found' for i in range(200)}
    assert all(a["NodeNames"] is None for a in answers)
    assert all(used == 0 for devices in it.usage(stack.process).values() for used, _, _ in devices)

    real = cluster.create("pods", gpu_pod("real"), "default")
    await it.eventually(lambda: stack.process.pods.store.get("default", "real") is not None, "the watch")
    result = await stack.filter(real, NODES)
    assert result["Error"] == "" and result["NodeNames"] in (["n1"], ["n2"])
    assert await stack.bind(real, result["NodeNames"][0]) == ""
