"""§5.6: GPU policy ordering (fit takes from the END of the sorted list)."""

from __future__ import annotations

import pytest

from vgpu_scheduler.engine.nodeview import DeviceUsage
from vgpu_scheduler.engine.policy import parse_go_bool, policy_contains, sort_chain, sort_devices
from vgpu_scheduler.model import DeviceInfo


@pytest.mark.parametrize("value", ["1", "t", "T", "TRUE", "true", "True"])
def test_parse_go_bool_true(value: str) -> None:
    assert parse_go_bool(value) is True


@pytest.mark.parametrize("value", ["0", "f", "F", "FALSE", "false", "False", "", "yes", "tRUE", " true", "2"])
def test_parse_go_bool_false_or_invalid(value: str) -> None:
    assert parse_go_bool(value) is False


@pytest.mark.parametrize(
    ("policy", "name", "expected"),
    [
        ("mutex", "mutex", True),
        ("binpack,mutex", "mutex", True),
        ("binpack, mutex ", "mutex", True),
        ("mutexx", "mutex", False),
        ("binpack", "mutex", False),
        ("topology-aware", "topology-aware", True),
        ("spread,topology-aware", "topology-aware", True),
    ],
)
def test_policy_contains(policy: str, name: str, expected: bool) -> None:
    assert policy_contains(policy, name) is expected


@pytest.mark.parametrize(
    ("policy", "numa_bind", "expected"),
    [
        ("binpack", False, None),
        ("spread", False, None),
        ("mutex", False, None),
        ("topology-aware", False, None),
        ("numa", False, ("numa",)),
        ("binpack,numa", False, ("binpack", "numa")),
        ("numa,binpack", False, ("numa", "binpack")),
        (" spread , spread ,numa", False, ("spread", "numa")),
        ("mutex,topology-aware", False, ("spread",)),
        ("binpack,mutex", False, ("binpack",)),
        ("binpack,spread", True, ("numa", "binpack", "spread")),
        ("spread,numa", True, ("numa", "spread")),
        ("numa,spread", True, ("numa", "spread")),
        ("mutex,", True, ("numa", "spread")),
    ],
)
def test_sort_chain(policy: str, numa_bind: bool, expected: tuple[str, ...] | None) -> None:
    assert sort_chain(policy, numa_bind) == expected


# Four devices at positions 0..3 with these scores / NUMA nodes / used slots.
SCORES = [1.0, 3.0, 2.0, 3.0]
NUMA = [0, 1, 0, 0]
USED = [2, 0, 1, 0]
DEVICES = [DeviceInfo(id=f"GPU-{i}", index=i, numa=NUMA[i]) for i in range(4)]
USAGE = [DeviceUsage(used=u) for u in USED]


@pytest.mark.parametrize(
    ("policy", "numa_bind", "expected"),
    [
        # binpack: (score, numa) ascending -> the most used device ends up last.
        ("binpack", False, [0, 2, 3, 1]),
        # spread: (-score, numa): equal score 3.0 -> lower NUMA first; least used last.
        ("spread", False, [3, 1, 2, 0]),
        ("topology-aware", False, [3, 1, 2, 0]),
        ("pack", False, [3, 1, 2, 0]),  # unknown names sort as spread
        ("", False, [3, 1, 2, 0]),
        # mutex: (-used, numa): idle devices last, the higher NUMA idle one at the very end.
        ("mutex", False, [0, 2, 3, 1]),
        ("mutex", True, [0, 2, 3, 1]),  # mutex is checked before numa-bind
        # numa-bind + binpack: higher NUMA first, then score ascending.
        ("binpack", True, [1, 0, 2, 3]),
        # numa-bind + anything else: lower NUMA first, then score descending.
        ("spread", True, [3, 2, 0, 1]),
        ("topology-aware", True, [3, 2, 0, 1]),
        # chains compare key by key, then the device index.
        ("binpack,numa", False, [0, 2, 3, 1]),
        ("numa,binpack", False, [0, 2, 3, 1]),
        ("spread,numa", False, [3, 1, 2, 0]),
        ("numa", False, [0, 2, 3, 1]),
        ("mutex,topology-aware", False, [1, 3, 2, 0]),  # no sort key: spread, ties by index
        ("binpack,spread", False, [0, 2, 1, 3]),  # spread never reached: ties by index
        ("binpack,numa", True, [0, 2, 3, 1]),  # numa forced first
        ("spread,binpack", True, [3, 2, 0, 1]),
    ],
)
def test_sort_devices(policy: str, numa_bind: bool, expected: list[int]) -> None:
    assert sort_devices([0, 1, 2, 3], SCORES, DEVICES, USAGE, policy=policy, numa_bind=numa_bind) == expected


@pytest.mark.parametrize("policy", ["spread", "binpack", "mutex", "topology-aware"])
def test_single_policies_are_stable(policy: str) -> None:
    devices = [DeviceInfo(id=f"GPU-{i}", index=i) for i in range(6)]
    usage = [DeviceUsage() for _ in devices]
    scores = [0.5] * 6
    order = [4, 1, 5, 0, 3, 2]
    # All keys equal: the incoming order is kept, so fit takes the device that came last.
    assert sort_devices(order, scores, devices, usage, policy=policy, numa_bind=False) == order


def test_chain_ties_use_device_index_not_input_order() -> None:
    devices = [DeviceInfo(id=f"GPU-{i}", index=9 - i) for i in range(3)]
    usage = [DeviceUsage() for _ in devices]
    assert sort_devices([0, 1, 2], [1.0, 1.0, 1.0], devices, usage, policy="binpack,numa",
        numa_bind=False) == [2, 1, 0]
