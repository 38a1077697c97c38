"""The opt-in `best-fit` GPU policy: best fit on the dominant resource of what the pod leaves.

Invariants: it never over-commits a device; when one device only can hold the request it picks
that device, as binpack does; among several it takes the one whose larger leftover fraction is the
smallest, then the most even leftover. HAMi's policies are unchanged (not asked for: no effect).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.builders import device, device_request, pod
from vgpu_scheduler.devices.registry import build
from vgpu_scheduler.engine.fit import fit_container, pod_fit_context
from vgpu_scheduler.engine.nodeview import NodeView
from vgpu_scheduler.engine.policy import best_fit_key, leftover_after
from vgpu_scheduler.model import DeviceInfo, DeviceUsage

VENDORS = build()


def _ctx(policy: str):  # type: ignore[no-untyped-def]
    return pod_fit_context(pod(annotations={"hami.io/gpu-scheduler-policy": policy}), vendors=VENDORS)


def _node(devs: list[DeviceInfo], usage: list[DeviceUsage]) -> NodeView:
    return NodeView("n", devs, usage)


def _gpus(n: int, devmem: int = 80_000) -> list[DeviceInfo]:
    return [device(f"GPU-{i}", index=i, devmem=devmem, count=10) for i in range(n)]


def test_leftover_is_none_when_the_device_cannot_hold_it() -> None:
    dev = device("GPU-0", devmem=1000, count=2)
    assert leftover_after(dev, DeviceUsage(1, 500, 50), device_request(mem=400, cores=50)) == (0.1, 0.0)
    assert leftover_after(dev, DeviceUsage(1, 700, 0), device_request(mem=400)) is None  # memory
    assert leftover_after(dev, DeviceUsage(0, 0, 60), device_request(mem=1, cores=50)) is None  # cores
    assert leftover_after(dev, DeviceUsage(2, 0, 0), device_request(mem=1)) is None  # shares


def test_a_device_with_every_core_used_holds_no_instance_even_one_asking_no_cores() -> None:
    """Fit's "compute units exhausted" rule (found by the property test below with seed 0)."""
    dev = device("GPU-0", devmem=1000, count=2)
    assert leftover_after(dev, DeviceUsage(0, 0, 100), device_request(mem=1, cores=0)) is None
    assert leftover_after(dev, DeviceUsage(0, 0, 99), device_request(mem=1, cores=0)) == (0.999, 0.01)
    result, _ = fit_container(device_request(mem=1), _node([dev], [DeviceUsage(0, 0, 100)]), _ctx("best-fit"))
    assert not result.ok


def test_the_tightest_dominant_leftover_wins_then_the_most_even() -> None:
    devs = _gpus(3)
    usage = [DeviceUsage(1, 40_000, 10), DeviceUsage(1, 10_000, 60), DeviceUsage(1, 40_000, 60)]
    req = device_request(mem=20_000, cores=20)
    # leftovers (memory, cores): GPU-0 (0.25, 0.7), GPU-1 (0.625, 0.2), GPU-2 (0.25, 0.2)
    order = sorted(range(3), key=best_fit_key(req, devs, usage))
    assert order[-1] == 2  # fit takes from the end
    result, _ = fit_container(req, _node(devs, usage), _ctx("best-fit"))
    assert result.ok and [d.uuid for d in result.devices] == ["GPU-2"]


def test_binpack_and_best_fit_differ_where_usage_before_the_pod_misleads() -> None:
    """Binpack takes the most used device by its usage before the pod (here: many small pods);
    best-fit the device the pod fills the tightest."""
    devs = _gpus(2)
    usage = [DeviceUsage(8, 20_000, 20), DeviceUsage(1, 50_000, 50)]
    req = device_request(mem=20_000, cores=40)
    binpack, _ = fit_container(req, _node(devs, [u.copy() for u in usage]), _ctx("binpack"))
    best, _ = fit_container(req, _node(devs, [u.copy() for u in usage]), _ctx("best-fit"))
    assert [d.uuid for d in binpack.devices] == ["GPU-0"]
    assert [d.uuid for d in best.devices] == ["GPU-1"]  # leaves (12.5 %, 10 %) instead of (50 %, 40 %)


usage_st = st.builds(
    DeviceUsage, used=st.integers(0, 10), usedmem=st.integers(0, 80_000), usedcores=st.integers(0, 100)
)


@settings(max_examples=200, deadline=None)
@given(
    usage=st.lists(usage_st, min_size=1, max_size=6),
    mem=st.integers(1, 40_000),
    cores=st.integers(0, 100),
    nums=st.integers(1, 3),
)
def test_never_over_commits_and_agrees_with_binpack_when_one_device_fits(
    usage: list[DeviceUsage], mem: int, cores: int, nums: int
) -> None:
    devs = _gpus(len(usage))
    req = device_request(nums, mem=mem, cores=cores)
    node = _node(devs, [u.copy() for u in usage])
    result, _ = fit_container(req, node, _ctx("best-fit"))
    for dev, use in zip(devs, node.usage, strict=True):
        assert use.used <= dev.count and use.usedmem <= dev.devmem and use.usedcores <= dev.devcore
    binpack, _ = fit_container(req, _node(devs, [u.copy() for u in usage]), _ctx("binpack"))
    assert result.ok == binpack.ok  # the order never changes whether a node fits
    holders = [p for p in range(len(devs)) if leftover_after(devs[p], usage[p], req) is not None]
    if nums == 1 and len(holders) == 1:
        assert result.positions == binpack.positions == holders
