"""§5.6: GPU policy ordering (fit takes from the END of the sorted list)."""

from __future__ import annotations

import pytest

from tests.builders import device
from vgpu_scheduler.engine.nodeview import DeviceUsage
from vgpu_scheduler.engine.policy import parse_go_bool, policy_contains, sort_chain, sort_devices


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
        pytest.param("binpack", False, None, id="binpack: one key, no chain"),
        pytest.param("spread", False, None, id="spread: no chain"),
        pytest.param("mutex", False, None, id="mutex: no chain"),
        pytest.param("topology-aware", False, None, id="topology-aware: no chain"),
        pytest.param("numa", False, ("numa",), id="numa alone is a chain"),
        pytest.param("binpack,numa", False, ("binpack", "numa"), id="binpack,numa"),
        pytest.param("numa,binpack", False, ("numa", "binpack"), id="numa,binpack keeps its order"),
        pytest.param(" spread , spread ,numa", False, ("spread", "numa"), id="spaces and duplicates dropped"),
        pytest.param("mutex,topology-aware", False, ("spread",), id="mutex,topology-aware: spread"),
        pytest.param("binpack,mutex", False, ("binpack",), id="binpack,mutex: mutex dropped"),
        pytest.param("binpack,spread", True, ("numa", "binpack", "spread"), id="numa-bind puts numa first"),
        pytest.param("spread,numa", True, ("numa", "spread"), id="numa-bind, numa not repeated"),
        pytest.param("numa,spread", True, ("numa", "spread"), id="numa-bind, numa already first"),
        pytest.param("mutex,", True, ("numa", "spread"), id="numa-bind, empty entry: spread"),
    ],
)
def test_sort_chain(policy: str, numa_bind: bool, expected: tuple[str, ...] | None) -> None:
    assert sort_chain(policy, numa_bind) == expected


# Four devices at positions 0..3 with these scores / NUMA nodes / used slots.
SCORES = [1.0, 3.0, 2.0, 3.0]
NUMA = [0, 1, 0, 0]
USED = [2, 0, 1, 0]
DEVICES = [device(f"GPU-{i}", index=i, numa=NUMA[i]) for i in range(4)]
USAGE = [DeviceUsage(used=u) for u in USED]


@pytest.mark.parametrize(
    ("policy", "numa_bind", "expected"),
    [
        # binpack: (score, numa) ascending -> the most used device ends up last.
        pytest.param("binpack", False, [0, 2, 3, 1], id="binpack"),
        # spread: (-score, numa): equal score 3.0 -> lower NUMA first; least used last.
        pytest.param("spread", False, [3, 1, 2, 0], id="spread"),
        pytest.param("topology-aware", False, [3, 1, 2, 0], id="topology-aware sorts as spread"),
        # unknown names sort as spread
        pytest.param("pack", False, [3, 1, 2, 0], id="unknown name sorts as spread"),
        pytest.param("", False, [3, 1, 2, 0], id="empty sorts as spread"),
        # mutex: (-used, numa): idle devices last, the higher NUMA idle one at the very end.
        pytest.param("mutex", False, [0, 2, 3, 1], id="mutex: idle last"),
        # mutex is checked before numa-bind
        pytest.param("mutex", True, [0, 2, 3, 1], id="mutex before numa-bind"),
        # numa-bind + binpack: higher NUMA first, then score ascending.
        pytest.param("binpack", True, [1, 0, 2, 3], id="numa-bind + binpack"),
        # numa-bind + anything else: lower NUMA first, then score descending.
        pytest.param("spread", True, [3, 2, 0, 1], id="numa-bind + spread"),
        pytest.param("topology-aware", True, [3, 2, 0, 1], id="numa-bind + topology-aware"),
        # chains compare key by key, then the device index.
        pytest.param("binpack,numa", False, [0, 2, 3, 1], id="chain binpack,numa"),
        pytest.param("numa,binpack", False, [0, 2, 3, 1], id="chain numa,binpack"),
        pytest.param("spread,numa", False, [3, 1, 2, 0], id="chain spread,numa"),
        pytest.param("numa", False, [0, 2, 3, 1], id="chain numa"),
        # no sort key: spread, ties by index
        pytest.param("mutex,topology-aware", False, [1, 3, 2, 0],
                     id="chain without sort key: spread, ties by index"),
        # spread never reached: ties by index
        pytest.param("binpack,spread", False, [0, 2, 1, 3], id="chain binpack,spread: ties by index"),
        # numa forced first
        pytest.param("binpack,numa", True, [0, 2, 3, 1], id="chain binpack,numa + numa-bind: numa first"),
        pytest.param("spread,binpack", True, [3, 2, 0, 1], id="chain spread,binpack + numa-bind"),
    ],
)
def test_sort_devices(policy: str, numa_bind: bool, expected: list[int]) -> None:
    assert sort_devices([0, 1, 2, 3], SCORES, DEVICES, USAGE, policy=policy, numa_bind=numa_bind) == expected


@pytest.mark.parametrize("policy", ["spread", "binpack", "mutex", "topology-aware"])
def test_single_policies_are_stable(policy: str) -> None:
    devices = [device(f"GPU-{i}", index=i) for i in range(6)]
    usage = [DeviceUsage() for _ in devices]
    scores = [0.5] * 6
    order = [4, 1, 5, 0, 3, 2]
    # All keys equal: the incoming order is kept, so fit takes the device that came last.
    assert sort_devices(order, scores, devices, usage, policy=policy, numa_bind=False) == order


def test_chain_ties_use_device_index_not_input_order() -> None:
    devices = [device(f"GPU-{i}", index=9 - i) for i in range(3)]
    usage = [DeviceUsage() for _ in devices]
    assert sort_devices([0, 1, 2], [1.0, 1.0, 1.0], devices, usage, policy="binpack,numa",
        numa_bind=False) == [2, 1, 0]
