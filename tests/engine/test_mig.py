"""§5.3 "MIG devices": profile/placement choice and MIG fit end to end."""

from __future__ import annotations

from functools import partial

import pytest

from tests.builders import container_requests, device
from tests.builders import pod as shared_pod
from vgpu_scheduler.devices.nvidia.mig import mig_feasible, select_mig
from vgpu_scheduler.devices.registry import build
from vgpu_scheduler.engine import fit
from vgpu_scheduler.engine.fit import NodeFailure, NodeFit
from vgpu_scheduler.engine.nodeview import DeviceUsage, NodeView
from vgpu_scheduler.model import (
    NVIDIA,
    ContainerDevice,
    ContainerDeviceRequest,
    DeviceInfo,
    MigAllocation,
    MigPlacement,
    MigProfile,
)

# The shared builder with this module's defaults: pod "p" in "ns", empty annotations.
pod = partial(shared_pod, namespace="ns", annotations={})
evaluate_node = partial(fit.evaluate_node, vendors=build())


def pl(*starts_sizes: tuple[int, int]) -> tuple[MigPlacement, ...]:
    return tuple(MigPlacement(s, z) for s, z in starts_sizes)


# An A100-80GB-like geometry (listed out of order on purpose).
PROFILES = (
    MigProfile("7g.80gb", 80000, 100, 8, pl((0, 8))),
    MigProfile("2g.20gb", 20096, 28, 2, pl((0, 2), (2, 2), (4, 2))),
    MigProfile("4g.40gb", 40192, 57, 4, pl((0, 4))),
    MigProfile("1g.10gb", 9984, 14, 1, pl(*((s, 1) for s in range(7)))),
    MigProfile("3g.40gb", 40192, 42, 3, pl((0, 4), (4, 4))),
)


@pytest.mark.parametrize(
    ("occupied", "memory", "expected"),
    [
        # 1g.* from the highest start down
        pytest.param((), 5000, ("1g.10gb", 6), id="5000 MiB: 1g from the highest start"),
        pytest.param((), 0, ("1g.10gb", 6), id="0 MiB: 1g"),
        pytest.param((), 9984, ("1g.10gb", 6), id="exactly the 1g memory"),
        # others from the lowest start up
        pytest.param((), 15000, ("2g.20gb", 0), id="15000 MiB: 2g from the lowest start"),
        # same memory as 4g: fewer slices first; 3g.* high first
        pytest.param((), 30000, ("3g.40gb", 4), id="30000 MiB: 3g before 4g, highest start first"),
        pytest.param((), 70000, ("7g.80gb", 0), id="70000 MiB: 7g"),
        pytest.param(((6, 1),), 5000, ("1g.10gb", 5), id="1g slot 6 taken: slot 5"),
        pytest.param(((0, 4),), 15000, ("2g.20gb", 4), id="first half taken: 2g at 4"),
        pytest.param(((4, 4),), 30000, ("3g.40gb", 0), id="second half taken: 3g at 0"),
        pytest.param(((4, 4),), 35000, ("3g.40gb", 0), id="35000 MiB, second half taken: 3g at 0"),
        pytest.param(((0, 4), (4, 4)), 30000, None, id="both halves taken: nothing"),
        # every 1g slot taken: 2g/3g/4g/7g all overlap something -> nothing
        pytest.param(tuple((s, 1) for s in range(7)), 5000, None, id="every 1g slot taken: nothing"),
        # 1g slots 4..6 taken: next free 1g slot is 3
        pytest.param(((4, 1), (5, 1), (6, 1)), 5000, ("1g.10gb", 3), id="1g slots 4-6 taken: slot 3"),
        pytest.param((), 90000, None, id="larger than any profile: nothing"),
    ],
)
def test_select_mig(
    occupied: tuple[tuple[int, int], ...], memory: int, expected: tuple[str, int] | None
) -> None:
    chosen = select_mig(PROFILES, pl(*occupied), memory)
    if expected is None:
        assert chosen is None
    else:
        assert chosen is not None
        assert (chosen[0].name, chosen[1].start) == expected


def test_duplicate_profile_name_uses_first_placements() -> None:
    profiles = (
        MigProfile("1g.5gb", 5000, 14, 1, pl((0, 1))),
        MigProfile("1g.5gb", 4000, 14, 1, pl((3, 1))),
    )
    chosen = select_mig(profiles, (), 100)
    assert chosen is not None
    assert chosen[0].memory_mb == 4000  # smaller memory sorts first ...
    assert chosen[1] == MigPlacement(0, 1)  # ... but placements come from the first of that name


def test_mig_feasible_accounts_for_earlier_instances() -> None:
    # 3g.40gb has two placements: a third 30 GB instance does not fit, a 1g one does not either
    # (both 3g placements cover slices 0..7).
    assert mig_feasible(PROFILES, (), [30000], 30000)
    assert not mig_feasible(PROFILES, (), [30000, 30000], 30000)
    assert not mig_feasible(PROFILES, (), [30000, 30000], 5000)
    assert not mig_feasible(PROFILES, (), [90000], 100)


def mig_gpu(uuid: str = "GPU-M", index: int = 0, profiles: tuple[MigProfile, ...] = PROFILES) -> DeviceInfo:
    return device(uuid, index=index, count=7, devmem=81920, type="NVIDIA A100-SXM4-80GB", mode="mig",
                  mig_profiles=profiles)


def creq(nums: int, mem: int, cores: int = 0) -> dict[str, ContainerDeviceRequest]:
    return container_requests(nums, mem=mem, cores=cores)


def test_two_instances_on_one_gpu() -> None:
    node = NodeView("n", [mig_gpu()], [DeviceUsage()])
    result = evaluate_node([creq(2, 5000)], 0, node, pod())
    assert isinstance(result, NodeFit)
    # Usedmem/Usedcores are the profile's, not the request's.
    entry = ContainerDevice("GPU-M", NVIDIA, 9984, 14, 0)
    assert result.devices == {NVIDIA: [[entry, entry]]}
    assert result.mig == [
        MigAllocation(0, 0, "GPU-M", "1g.10gb", MigPlacement(6, 1)),
        MigAllocation(0, 1, "GPU-M", "1g.10gb", MigPlacement(5, 1)),
    ]
    assert node.usage[0] == DeviceUsage()  # the node itself is untouched


def test_mig_allocation_container_index_counts_init_containers() -> None:
    node = NodeView("n", [mig_gpu()], [DeviceUsage()])
    result = evaluate_node([{}, creq(1, 15000)], 1, node, pod())
    assert isinstance(result, NodeFit)
    assert result.devices == {NVIDIA: [[], [ContainerDevice("GPU-M", NVIDIA, 20096, 28, 0)]]}
    assert result.mig == [MigAllocation(1, 0, "GPU-M", "2g.20gb", MigPlacement(0, 2))]


def test_taken_placements_are_respected() -> None:
    usage = DeviceUsage(used=1, usedmem=9984, usedcores=14, mig_taken=[("1g.10gb", MigPlacement(6, 1))])
    node = NodeView("n", [mig_gpu()], [usage])
    result = evaluate_node([creq(1, 5000)], 0, node, pod())
    assert isinstance(result, NodeFit)
    assert result.mig == [MigAllocation(0, 0, "GPU-M", "1g.10gb", MigPlacement(5, 1))]


def test_app_containers_share_mig_gpu_sequentially() -> None:
    node = NodeView("n", [mig_gpu()], [DeviceUsage()])
    result = evaluate_node([creq(1, 30000), creq(1, 30000)], 0, node, pod())
    assert isinstance(result, NodeFit)
    assert [m.placement.start for m in result.mig] == [4, 0]
    assert [m.container_index for m in result.mig] == [0, 1]


@pytest.mark.parametrize(
    ("requests", "annotations", "usage", "reason"),
    [
        # Fits the device memory (81920) but no profile is that large.
        pytest.param([creq(1, 81000)], {}, DeviceUsage(), "1/1 CardMigTopologyInfeasible",
                     id="no profile large enough"),
        # Larger than the device: the memory check comes first.
        pytest.param([creq(1, 90000)], {}, DeviceUsage(), "1/1 CardInsufficientMemory",
                     id="larger than the device"),
        # Third 30 GB instance of one container: two accepted, then infeasible. HAMi reports the
        # collected count over the number of devices, hence "2/1".
        pytest.param(
            [creq(3, 30000)],
            {},
            DeviceUsage(),
            "1/1 CardMigTopologyInfeasible, 2/1 AllocatedCardsInsufficientRequest",
            id="third instance infeasible",
        ),
        # Pods whose vgpu-mode lacks "mig" never match MIG devices (and are no MIG request).
        pytest.param(
            [creq(1, 5000)], {"nvidia.com/vgpu-mode": "hami-core"}, DeviceUsage(), "1/1 CardTypeMismatch",
            id="hami-core pod: type mismatch",
        ),
        pytest.param(
            [creq(2, 5000)], {"nvidia.com/vgpu-mode": "hami-core"}, DeviceUsage(), "NodeInsufficientDevice",
            id="hami-core pod: too few devices",
        ),
        # A conflicting MIG reservation makes the device unhealthy.
        pytest.param([creq(1, 5000)], {}, DeviceUsage(mig_conflict=True), "1/1 CardNotHealth",
                     id="conflicting reservation: unhealthy"),
    ],
)
def test_mig_failures(
    requests: list[dict[str, ContainerDeviceRequest]],
    annotations: dict[str, str],
    usage: DeviceUsage,
    reason: str,
) -> None:
    node = NodeView("n", [mig_gpu()], [usage])
    assert evaluate_node(requests, 0, node, pod(annotations=annotations)) == NodeFailure(reason)


def test_vgpu_mode_mig_allows_mig_request_beyond_device_count() -> None:
    node = NodeView("n", [mig_gpu()], [DeviceUsage()])
    result = evaluate_node([creq(3, 5000)], 0, node, pod(annotations={"nvidia.com/vgpu-mode": "mig"}))
    assert isinstance(result, NodeFit)
    assert [m.placement.start for m in result.mig] == [6, 5, 4]


def test_mixed_node_mig_pod_skips_hami_core_gpu() -> None:
    plain = device("GPU-P", index=1, devmem=81920, type="NVIDIA A100")
    node = NodeView("n", [mig_gpu(), plain], [DeviceUsage(), DeviceUsage()])
    result = evaluate_node([creq(1, 5000)], 0, node, pod(annotations={"nvidia.com/vgpu-mode": "mig"}))
    assert isinstance(result, NodeFit)
    assert result.devices[NVIDIA] == [[ContainerDevice("GPU-M", NVIDIA, 9984, 14, 0)]]
