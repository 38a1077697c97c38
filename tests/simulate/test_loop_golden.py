"""Regression: the simulation's report for fixed scenarios is byte-for-byte what it was before the
loop's performance work (caches of predicate/priority results, settle on written resourceVersions,
...). The digests were recorded with the unoptimised loop; a change here means a scheduling result
changed, which an optimisation must never do.

Re-recorded once on purpose: GPU-free pods no longer go through the extender (kube-scheduler's
`IsInterested`), so they lose the `bind-phase`/`bind-time` annotations the extender's bind wrote;
every node, reason, device and timeline entry stayed the same (checked by diffing both reports).
The keys the report gained later (`summary.end`, `summary.pods.pending_error`, issue 27) are
checked apart and left out of the digest, which thus still covers every decision of the old bytes.

The scenarios exercise every path a cache could get wrong: pods finishing (NodeInfo shrinks) and
pending pods retried after a cluster event, nodes added later, tainted and cordoned nodes, pods already
bound at time 0, nodeSelector and UUID/type filters, both algorithm providers.
"""

import hashlib
from typing import Any

import pytest

from tests.builders import container, pod
from vgpu_scheduler.simulate.loop import simulate
from vgpu_scheduler.simulate.options import ARRIVAL_ANNOTATION, SimulationOptions
from vgpu_scheduler.simulate.providers import CLUSTER_AUTOSCALER_PROVIDER, DEFAULT_PROVIDER
from vgpu_scheduler.simulate.report import dumps_report
from vgpu_scheduler.simulate.workload import demo_workload
from vgpu_scheduler.standin.embedded.fleet import fleet
from vgpu_scheduler.wire.inventory import decode_node_devices
from vgpu_scheduler.wire.keys import NODE_NVIDIA_REGISTER


def _uuids(nodes: list[dict[str, Any]]) -> list[str]:
    inventories = [n["metadata"]["annotations"][NODE_NVIDIA_REGISTER] for n in nodes]
    return [d.id for inventory in inventories for d in decode_node_devices(inventory)]


def _plain_fleet(provider: str) -> tuple[Any, ...]:
    nodes = fleet(10, 4)
    pods = demo_workload(300, 5, uuid_pool=_uuids(nodes[:3]))
    return nodes, pods, [], [], SimulationOptions(provider=provider, seed=5)


def _eventful(provider: str) -> tuple[Any, ...]:
    nodes = fleet(8, 2)
    nodes[1]["spec"]["taints"] = [{"key": "dedicated", "value": "infer", "effect": "NoSchedule"}]
    nodes[2]["spec"]["unschedulable"] = True
    nodes[3]["metadata"]["labels"]["gpu"] = "off"  # fails the workload's nodeSelector gpu=on
    added = fleet(10, 2)[8:]
    for i, node in enumerate(added):
        node["metadata"]["annotations"][ARRIVAL_ANNOTATION] = str(400 + 300 * i)
    pods = demo_workload(160, 11, uuid_pool=_uuids(nodes[:2]))
    # Some pods arrive later than time 0, so arrivals interleave with finishes and node additions.
    for i, p in enumerate(pods):
        if i % 3 == 0:
            p["metadata"].setdefault("annotations", {})[ARRIVAL_ANNOTATION] = str(7 * i)
    existing = [
        pod(f"pre-{i}", typed=True, node_name=nodes[i]["metadata"]["name"], phase="Running",
            containers=[container("c", requests={"cpu": "20", "memory": "64Gi"})])
        for i in (0, 4)
    ]
    return nodes, pods, existing, added, SimulationOptions(provider=provider, seed=11)


SCENARIOS = {
    "plain-default": (_plain_fleet, DEFAULT_PROVIDER),
    "plain-autoscaler": (_plain_fleet, CLUSTER_AUTOSCALER_PROVIDER),
    "eventful-default": (_eventful, DEFAULT_PROVIDER),
    "eventful-autoscaler": (_eventful, CLUSTER_AUTOSCALER_PROVIDER),
}

EXPECTED_SHA256 = {
    "plain-default": "fe539f11a54bc9f4b0c563e72416cdf463525b00e2ec5ff4ae7c7a4fdc2c7913",
    "plain-autoscaler": "9d4e93d2f463c509a9c2bcb08d2a720a1cdbd359e56eeb9f3612e76a2b00dce6",
    "eventful-default": "d7e31c691b42b45595463d44eb8d559d93acaaf5317c4f84b54c9c60cf4cf599",
    "eventful-autoscaler": "77da06e6ccffc1508723c8c0592da38f9c4d258e6b5c59dc5bb318d2bd26f048",
}


async def scenario_digest(name: str) -> tuple[str, int]:
    build, provider = SCENARIOS[name]
    nodes, pods, existing, added, options = build(provider)
    result = await simulate(nodes, pods, existing=existing, added_nodes=added, options=options)
    summary = result.report["summary"]
    assert summary.pop("end") == "done"
    assert summary["pods"].pop("pending_error") == 0
    return hashlib.sha256(dumps_report(result.report).encode()).hexdigest(), summary["pods"]["scheduled"]


@pytest.mark.parametrize("name", sorted(SCENARIOS))
async def test_report_is_unchanged_by_the_loop_optimisations(name: str) -> None:
    digest, scheduled = await scenario_digest(name)
    assert scheduled > 0
    assert digest == EXPECTED_SHA256[name]
