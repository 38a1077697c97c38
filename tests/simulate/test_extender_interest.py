"""Only pods asking for a managed resource reach the extender, as in kube-scheduler
(`HTTPExtender.IsInterested`); the others are bound by the loop like kube-scheduler's DefaultBinder,
so they carry no HAMi annotation (found by tests/e2e/test_sim_parity.py: the simulator left
`bind-phase: allocating` on a cpu-only pod that the live path binds untouched)."""

from typing import Any

import pytest

from vgpu_scheduler.cluster.embedded.fleet import fleet
from vgpu_scheduler.simulate.loop import Simulation
from vgpu_scheduler.simulate.predicates import DEFAULT_IGNORED_RESOURCES, extender_interested


def _pod(name: str, resources: dict[str, Any], *, init: bool = False) -> dict[str, Any]:
    c = {"name": "c", "image": "x", "resources": resources}
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "x"}]}
    if init:
        spec["initContainers"] = [c]
    else:
        spec["containers"].append(c)
    meta = {"name": name, "namespace": "default"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


@pytest.mark.parametrize(
    ("resources", "init", "interested"),
    [
        ({"limits": {"nvidia.com/gpu": "1"}}, False, True),
        ({"requests": {"nvidia.com/gpumem": "1000"}}, False, True),
        ({"limits": {"nvidia.com/gpu": "1"}}, True, True),  # init containers count too
        ({"requests": {"cpu": "1"}, "limits": {"memory": "1Gi"}}, False, False),
        ({"limits": {"example.com/fpga": "1"}}, False, False),
        ({}, False, False),
    ],
)
def test_extender_interested(resources: dict[str, Any], init: bool, interested: bool) -> None:
    assert extender_interested(_pod("p", resources, init=init), DEFAULT_IGNORED_RESOURCES) is interested


def test_without_managed_resources_the_extender_sees_every_pod() -> None:
    assert extender_interested(_pod("p", {}), frozenset())


async def test_a_gpu_free_pod_is_bound_without_the_extender() -> None:
    gpu = _pod("gpu", {"limits": {"cpu": "1", "nvidia.com/gpu": "1", "nvidia.com/gpumem": "1024"}})
    plain = _pod("plain", {"requests": {"cpu": "1"}})
    sim = Simulation(fleet(2, 1), [gpu, plain])
    try:
        result = await sim.run()
    finally:
        await sim.close()
    got = {p["name"]: p for p in result.report["pods"]}
    assert got["plain"]["node"] is not None
    assert got["plain"]["annotations"] == {}
    assert got["gpu"]["node"] is not None and got["gpu"]["annotations"]["hami.io/bind-phase"] == "success"
    stats = sim.process.extender.stats
    assert (stats.filters, stats.binds) == (1, 1)
