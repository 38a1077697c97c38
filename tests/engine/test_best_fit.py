"""The opt-in `best-fit` GPU policy: best fit on the dominant resource of what the pod leaves.

Invariants: it never over-commits a device; when one device only can hold the request it picks
that device, as binpack does; among several it takes the one whose larger leftover fraction is the
smallest, then the most even leftover. HAMi's policies are unchanged (not asked for: no effect).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.builders import device, device_request, pod
from vgpu_scheduler.devices.registry import build
from vgpu_scheduler.engine.fit import fit_container, pod_fit_context
from vgpu_scheduler.engine.nodeview import NodeView
from vgpu_scheduler.engine.policy import asked_memory, best_fit_key, leftover_after
from vgpu_scheduler.model import PERCENTAGE_UNSET, ContainerDeviceRequest, DeviceInfo, DeviceUsage

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


@pytest.mark.parametrize(
    ("usage", "req", "left"),
    [
        pytest.param(DeviceUsage(0, 0, 100), device_request(mem=1, cores=0), None,
                     id="every core used: not even an instance asking no cores"),
        pytest.param(DeviceUsage(0, 0, 99), device_request(mem=1, cores=0), (0.999, 0.01),
                     id="one core free: an instance asking no cores"),
        pytest.param(DeviceUsage(1, 0, 0), device_request(mem=1, cores=100), None,
                     id="all 100 cores asked of a shared device"),
        pytest.param(DeviceUsage(0, 0, 0), device_request(mem=1, cores=100), (0.999, 0.0),
                     id="all 100 cores asked of an unused device"),
    ],
)
def test_leftover_follows_fits_core_rules(
    usage: DeviceUsage, req: ContainerDeviceRequest, left: tuple[float, float] | None
) -> None:
    """Fit's "compute units exhausted" and exclusive-device rules (found by the property test below)."""
    dev = device("GPU-0", devmem=1000, count=2)
    assert leftover_after(dev, usage, req) == left
    result, _ = fit_container(req, _node([dev], [usage]), _ctx("best-fit"))
    assert result.ok is (left is not None)



@pytest.mark.parametrize(
    ("devmem", "mem", "pct", "asked"),
    [
        pytest.param(1000, 0, 50, 500, id="a percentage of the device's memory"),
        pytest.param(1001, 0, 50, 500, id="a percentage rounds down to whole MiB"),
        pytest.param(1000, 0, 1, 10, id="one percent"),
        pytest.param(1000, 300, 50, 300, id="memory in MiB wins over a percentage"),
        pytest.param(1000, 300, PERCENTAGE_UNSET, 300, id="memory in MiB"),
        pytest.param(1000, 0, PERCENTAGE_UNSET, 0, id="neither"),
    ],
)
def test_asked_memory(devmem: int, mem: int, pct: int, asked: int) -> None:
    assert asked_memory(device("GPU-0", devmem=devmem), device_request(mem=mem, pct=pct)) == asked


@pytest.mark.parametrize(
    ("dev", "req", "left"),
    [
        pytest.param(device("GPU-0", devmem=1, devcore=1, count=1), device_request(mem=1, cores=1),
                     (0.0, 0.0), id="the smallest device holds an instance that fills it"),
        pytest.param(device("GPU-0", devmem=1000), device_request(pct=25, cores=10), (0.75, 0.9),
                     id="memory as a percentage"),
        pytest.param(device("GPU-0", devmem=1000), device_request(mem=1000), (0.0, 1.0),
                     id="memory filled exactly"),
        pytest.param(device("GPU-0", devmem=0), device_request(mem=0, cores=10), None,
                     id="a device without memory holds nothing"),
        pytest.param(device("GPU-0", count=0), device_request(mem=1), None, id="a device without shares"),
    ],
)
def test_leftover_fractions(
    dev: DeviceInfo, req: ContainerDeviceRequest, left: tuple[float, float] | None
) -> None:
    assert leftover_after(dev, DeviceUsage(0, 0, 0), req) == left


def test_devices_that_cannot_hold_the_pod_sort_first() -> None:
    devs = _gpus(3)
    usage = [DeviceUsage(0, 0, 0), DeviceUsage(10, 0, 0), DeviceUsage(0, 0, 0)]  # GPU-1: no share left
    order = sorted(range(3), key=best_fit_key(device_request(mem=1000), devs, usage))
    assert order[0] == 1


def test_the_tightest_dominant_leftover_wins_wherever_it_sits() -> None:
    devs = _gpus(3)
    # leftovers (memory, cores): GPU-0 (0.25, 0.2) is the tightest; the others leave half or more.
    usage = [DeviceUsage(1, 40_000, 60), DeviceUsage(1, 10_000, 30), DeviceUsage(1, 20_000, 40)]
    req = device_request(mem=20_000, cores=20)
    assert sorted(range(3), key=best_fit_key(req, devs, usage))[-1] == 0
    result, _ = fit_container(req, _node(devs, usage), _ctx("best-fit"))
    assert [d.uuid for d in result.devices] == ["GPU-0"]


def test_a_smaller_dominant_leftover_beats_a_more_even_one() -> None:
    devs = _gpus(2)
    # leftovers: GPU-0 (0.1, 0.3) is uneven but its dominant fraction 0.3 beats GPU-1's even (0.4, 0.4).
    usage = [DeviceUsage(1, 52_000, 50), DeviceUsage(1, 28_000, 40)]
    req = device_request(mem=20_000, cores=20)
    assert sorted(range(2), key=best_fit_key(req, devs, usage))[-1] == 0


def test_on_equal_dominant_leftovers_the_most_even_wins_wherever_it_sits() -> None:
    devs = _gpus(2)
    # leftovers: GPU-0 (0.5, 0.5) is even, GPU-1 (0.5, 0.1) is not; the dominant fraction is 0.5 on both.
    usage = [DeviceUsage(1, 20_000, 30), DeviceUsage(1, 20_000, 70)]
    req = device_request(mem=20_000, cores=20)
    assert sorted(range(2), key=best_fit_key(req, devs, usage))[-1] == 0


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


def test_a_pod_asking_no_cores_is_fitted_on_memory_alone() -> None:
    """It shares the cores, so their leftover (always all of them for such pods) says nothing: the
    tightest memory wins, as binpack would choose on memory (the `inference` trace of the bench)."""
    devs = _gpus(3)
    usage = [DeviceUsage(1, 10_000, 0), DeviceUsage(2, 60_000, 0), DeviceUsage(1, 40_000, 0)]
    req = device_request(mem=16_000, cores=0)
    order = sorted(range(3), key=best_fit_key(req, devs, usage))
    assert order == [0, 2, 1]
    result, _ = fit_container(req, _node(devs, usage), _ctx("best-fit"))
    assert [d.uuid for d in result.devices] == ["GPU-1"]


def test_a_pod_asking_no_cores_ignores_the_cores_others_use() -> None:
    devs = _gpus(2)
    # GPU-1 leaves less memory (0.15 vs 0.2); that GPU-0's cores are mostly used does not count.
    usage = [DeviceUsage(1, 48_000, 90), DeviceUsage(1, 52_000, 0)]
    req = device_request(mem=16_000, cores=0)
    assert sorted(range(2), key=best_fit_key(req, devs, usage))[-1] == 1


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
    if nums == 1 and len(holders) == 1 and binpack.ok:  # (fit's own rules may refuse it still)
        assert result.positions == binpack.positions == holders
