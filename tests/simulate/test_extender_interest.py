"""Only pods asking for a managed resource reach the extender, as in kube-scheduler
(`HTTPExtender.IsInterested`); the others are bound by the loop like kube-scheduler's DefaultBinder,
so they carry no HAMi annotation (found by tests/e2e/test_sim_parity.py: the simulator left
`bind-phase: allocating` on a cpu-only pod that the live path binds untouched)."""

from typing import Any

import pytest

from tests.builders import container, pod
from vgpu_scheduler.simulate.loop import Simulation
from vgpu_scheduler.simulate.predicates import DEFAULT_IGNORED_RESOURCES, extender_interested
from vgpu_scheduler.standin.embedded.fleet import fleet


def _pod(name: str, resources: dict[str, Any], *, init: bool = False) -> dict[str, Any]:
    """A pod whose container `c` (an init container when `init`) has `resources`, beside `main`."""
    c = container("c", image="x", resources=resources)
    main = container("main", image="x")
    if init:
        return pod(name, typed=True, containers=[main], init_containers=[c])
    return pod(name, typed=True, containers=[main, c])


@pytest.mark.parametrize(
    ("resources", "init", "interested"),
    [
        pytest.param({"limits": {"nvidia.com/gpu": "1"}}, False, True, id="gpu limit"),
        pytest.param({"requests": {"nvidia.com/gpumem": "1000"}}, False, True, id="gpumem request"),
        # init containers count too
        pytest.param({"limits": {"nvidia.com/gpu": "1"}}, True, True, id="gpu in an init container"),
        pytest.param({"requests": {"cpu": "1"}, "limits": {"memory": "1Gi"}}, False, False,
                     id="cpu and memory only"),
        pytest.param({"limits": {"example.com/fpga": "1"}}, False, False, id="unmanaged extended resource"),
        pytest.param({}, False, False, id="no resources"),
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
